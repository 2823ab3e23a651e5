//! A Hub GGUF model named as llama.cpp's `-hf REPO[:QUANT]` names it, and the file(s) that name
//! picks from the repository's listing: the model (every part of a split one) and the
//! multimodal projector beside it. Only those files are staged; the whole repository (often
//! every quantization of a model, hundreds of GB) never is.
//!
//! The rules are llama.cpp's own, so that a spec picks here the file `llama-server -hf` would
//! load:
//! - A model file ends in `.gguf` and its name (the last path segment) contains none of
//!   `mmproj`, `imatrix`, `mtp-`, `eagle3-`, `dflash-`, `dspark-` (projectors, importance
//!   matrices and speculative-decoding sidecars are not models).
//! - The quant matches where the path contains it followed by `.` or `-`, in any case
//!   (`:q4_k_m` picks `Model-Q4_K_M.gguf` and `Q4_K_M/Model-Q4_K_M-00001-of-00003.gguf`).
//!   Without a quant, `Q4_K_M`, then `Q8_0`, then the first model file at all.
//! - Of a split model (`NAME-00001-of-0000N.gguf`), only the first part is a candidate; every
//!   part with the same prefix and count comes with it (all N must be listed).
//! - The first candidate in the listing's order (path order) wins.
//! - The projector is the `.gguf` file with `mmproj` in its path whose folder is the model's
//!   folder or one above it: the deepest such folder, then the one whose quantization bits
//!   (the digits of its name's last `-`/`.` part: `BF16` 16, `Q8_0` 8) are closest to the
//!   model's, then the first.
//!
//! Pure: a spec and a listing in, the files out.

use serde::{Deserialize, Serialize};

/// A GGUF selection from a Hub repository: what the spec said, and, once the Hub's listing
/// was read, what it picked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gguf {
    /// The quant after `:` as written (`Q4_K_M`, `UD-Q4_K_XL`); `None`: llama.cpp's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quant: Option<String>,
    /// The picked file(s), once the listing was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub picked: Option<GgufPick>,
}

impl Gguf {
    /// The spec's quant, or llama.cpp's default when none was given.
    pub fn quant_text(&self) -> String {
        match &self.quant {
            Some(q) => q.clone(),
            None => "the default quant (Q4_K_M, else Q8_0, else the first)".to_string(),
        }
    }
}

/// What a spec picked from a listing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GgufPick {
    /// The model's file: the one llama.cpp is given (the first part of a split model).
    pub model: String,
    /// Every part of the model, the first first (one entry when it is not split).
    pub parts: Vec<String>,
    /// The multimodal projector beside it, when the repository has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmproj: Option<String>,
}

impl GgufPick {
    /// Every file to stage: the parts, then the projector.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.parts
            .iter()
            .map(String::as_str)
            .chain(self.mmproj.as_deref())
    }
}

/// Why a spec picks nothing. Every message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GgufError {
    #[error(
        "has no .gguf model file{}: give a repository of GGUF files, or a model for another engine",
        listed(.others)
    )]
    NoGguf { others: Vec<String> },
    #[error(
        "has no GGUF model file matching {quant}; its GGUF files: {}: name one of their quants after `:`",
        .available.join(", ")
    )]
    NoMatch {
        quant: String,
        available: Vec<String>,
    },
    #[error(
        "lists {found} of the {count} parts of {model}; missing: {}: the repository is incomplete at this revision, pick another quant or revision",
        .missing.join(", ")
    )]
    MissingParts {
        model: String,
        count: u32,
        found: usize,
        missing: Vec<String>,
    },
}

fn listed(others: &[String]) -> String {
    if others.is_empty() {
        String::new()
    } else {
        let mut shown: Vec<&str> = others.iter().take(5).map(String::as_str).collect();
        if others.len() > 5 {
            shown.push("…");
        }
        format!(" (it lists {})", shown.join(", "))
    }
}

/// A quant as a spec may write it: letters, digits, `_`, `-` and `.`, at most 64 characters.
pub fn valid_quant(q: &str) -> bool {
    !q.is_empty()
        && q.len() <= 64
        && q.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The quants tried when a spec names none, in order.
pub const DEFAULT_QUANTS: [&str; 2] = ["Q4_K_M", "Q8_0"];

/// Picks the file(s) `quant` names (`None`: the default) from `listing` (every path of the
/// repository at one commit, in path order), as llama.cpp's `-hf` would (see the module
/// docs).
pub fn pick(quant: Option<&str>, listing: &[&str]) -> Result<GgufPick, GgufError> {
    let models: Vec<&str> = listing.iter().copied().filter(|p| is_model(p)).collect();
    if models.is_empty() {
        return Err(GgufError::NoGguf {
            others: listing.iter().map(|p| p.to_string()).collect(),
        });
    }
    let firsts = || {
        models
            .iter()
            .copied()
            .filter(|p| split_of(p).is_none_or(|s| s.index == 1))
    };
    let tried: Vec<&str> = match quant {
        Some(q) => vec![q],
        None => DEFAULT_QUANTS.to_vec(),
    };
    let chosen = tried
        .iter()
        .find_map(|q| firsts().find(|p| names_quant(p, q)))
        .or_else(|| quant.is_none().then(|| firsts().next()).flatten());
    let Some(model) = chosen else {
        return Err(GgufError::NoMatch {
            quant: quant.unwrap_or_default().to_string(),
            available: listing
                .iter()
                .filter(|p| p.ends_with(".gguf"))
                .map(|p| p.to_string())
                .collect(),
        });
    };
    let parts = parts_of(model, listing)?;
    Ok(GgufPick {
        model: model.to_string(),
        parts,
        mmproj: projector(model, listing),
    })
}

/// A GGUF file that is a model, not a projector, importance matrix or sidecar.
fn is_model(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.ends_with(".gguf")
        && !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"]
            .iter()
            .any(|k| name.contains(k))
}

/// The path contains `quant` followed by `.` or `-`, in any case.
fn names_quant(path: &str, quant: &str) -> bool {
    let p = path.to_ascii_lowercase();
    let q = quant.to_ascii_lowercase();
    p.match_indices(&q)
        .any(|(i, _)| matches!(p.as_bytes().get(i + q.len()), Some(b'.' | b'-')))
}

/// A part of a split model: `PREFIX-00001-of-00003.gguf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split<'a> {
    prefix: &'a str,
    index: u32,
    count: u32,
}

/// The split of a `.gguf` path (`None`: not split, or not a `.gguf`).
fn split_of(path: &str) -> Option<Split<'_>> {
    let stem = path.strip_suffix(".gguf")?;
    // `-NNNNN-of-NNNNN`: 15 characters, five digits each, `of` in any case.
    let cut = stem.len().checked_sub(15)?;
    let (prefix, tail) = (stem.get(..cut)?, stem.get(cut..)?);
    let b = tail.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let ok = prefix.chars().next().is_some()
        && b[0] == b'-'
        && digits(1..6)
        && tail[6..10].eq_ignore_ascii_case("-of-")
        && digits(10..15);
    if !ok {
        return None;
    }
    let index = tail[1..6].parse().ok()?;
    let count = tail[10..15].parse().ok()?;
    Some(Split {
        prefix,
        index,
        count,
    })
}

/// Every part of `model` in the listing, in order; all must be there.
fn parts_of(model: &str, listing: &[&str]) -> Result<Vec<String>, GgufError> {
    let Some(split) = split_of(model).filter(|s| s.count > 1) else {
        return Ok(vec![model.to_string()]);
    };
    let mut found: Vec<(u32, &str)> = listing
        .iter()
        .filter_map(|p| {
            let s = split_of(p)?;
            (s.prefix == split.prefix && s.count == split.count).then_some((s.index, *p))
        })
        .collect();
    found.sort();
    found.dedup_by_key(|(i, _)| *i);
    let missing: Vec<String> = (1..=split.count)
        .filter(|i| !found.iter().any(|(f, _)| f == i))
        .map(|i| format!("{}-{i:05}-of-{:05}.gguf", split.prefix, split.count))
        .collect();
    if !missing.is_empty() {
        return Err(GgufError::MissingParts {
            model: model.to_string(),
            count: split.count,
            found: found.len(),
            missing,
        });
    }
    Ok(found.into_iter().map(|(_, p)| p.to_string()).collect())
}

/// The quantization bits a file's name says: the digits that start its last `-`/`.` part
/// (after the split suffix), from the first digit on (`Q4_K_M` 4, `BF16` 16); 0 without.
fn quant_bits(path: &str) -> u32 {
    let stem = path.strip_suffix(".gguf").unwrap_or(path);
    let stem = match split_of(path) {
        Some(s) => s.prefix,
        None => stem,
    };
    let tail_start = stem
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
        .last()
        .map(|(i, _)| i);
    let Some(start) = tail_start else { return 0 };
    if start == 0 || !matches!(stem.as_bytes()[start - 1], b'-' | b'.') {
        return 0;
    }
    let tag = &stem[start..];
    let digits: String = tag
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(0)
}

/// The projector beside `model` (see the module docs).
fn projector(model: &str, listing: &[&str]) -> Option<String> {
    let model_dir: Vec<&str> = model.split('/').collect();
    let model_dir = &model_dir[..model_dir.len() - 1];
    let bits = quant_bits(model);
    let mut best: Option<(usize, u32, &str)> = None;
    for p in listing {
        if !p.ends_with(".gguf") || !p.contains("mmproj") {
            continue;
        }
        let dir: Vec<&str> = p.split('/').collect();
        let dir = &dir[..dir.len() - 1];
        if dir.len() > model_dir.len() || model_dir[..dir.len()] != *dir {
            continue;
        }
        let depth = dir.len();
        let diff = quant_bits(p).abs_diff(bits);
        let better = match best {
            None => true,
            Some((d, f, _)) => depth > d || (depth == d && diff < f),
        };
        if better {
            best = Some((depth, diff, p));
        }
    }
    best.map(|(_, _, p)| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Listings in the layouts of real GGUF repositories, as llama.cpp's own resolution test
    // (`tests/test-model-resolution.cpp` in ggml-org/llama.cpp) models them: a flat one
    // (ggml-org/gemma-4-31B-it-GGUF), quants in sub-folders with split parts and projectors
    // at the root (stepfun-ai/Step-3.7-Flash-GGUF), unsloth's `UD-` names, a vendor prefix
    // (bartowski) and the dotted quant (mradermacher). Listings are in path order, as the
    // Hub's answer is read.
    const FLAT: &[&str] = &[
        "README.md",
        "dflash-model-BF16.gguf",
        "dflash-model-Q8_0.gguf",
        "mmproj-model-BF16.gguf",
        "mmproj-model-Q8_0.gguf",
        "model-BF16.gguf",
        "model-Q4_K_M.gguf",
        "model-Q8_0.gguf",
        "mtp-model-BF16.gguf",
        "mtp-model-Q4_0.gguf",
        "mtp-model-Q8_0.gguf",
    ];
    const SUBDIR: &[&str] = &[
        "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf",
        "Q3_K_M/model-Q3_K_M-00002-of-00003.gguf",
        "Q3_K_M/model-Q3_K_M-00003-of-00003.gguf",
        "Q8_0/model-Q8_0-00001-of-00002.gguf",
        "Q8_0/model-Q8_0-00002-of-00002.gguf",
        "mmproj-model-f16.gguf",
        "model-mtp-BF16.gguf",
        "model-mtp-Q8_0.gguf",
    ];
    const UNSLOTH: &[&str] = &[
        "mmproj-BF16.gguf",
        "model-MTP-BF16.gguf",
        "model-UD-Q8_K_XL.gguf",
    ];
    const VENDORS: &[&str] = &[
        "BlackSheep-24B.Q8_0.gguf",
        "TheDrummer_Model-24B-v4.1-Q8_0.gguf",
    ];
    // Written for this test in unsloth's naming, the repository of the example spec
    // (`unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M`), not a copy of its listing: one file per quant at
    // the root, `UD-` dynamic quants beside the plain ones (as llama.cpp's test names them),
    // the large ones split in a folder named after the quant (as its Step-3.7 layout).
    const QWEN3_30B: &[&str] = &[
        ".gitattributes",
        "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf",
        "BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf",
        "Qwen3-30B-A3B-IQ4_XS.gguf",
        "Qwen3-30B-A3B-Q4_K_M.gguf",
        "Qwen3-30B-A3B-Q8_0.gguf",
        "Qwen3-30B-A3B-UD-Q4_K_XL.gguf",
        "README.md",
        "config.json",
    ];

    fn picked(quant: Option<&str>, listing: &[&str]) -> GgufPick {
        pick(quant, listing).unwrap_or_else(|e| panic!("{quant:?}: {e}"))
    }

    #[test]
    fn a_quant_picks_its_file_in_any_case_and_the_projector_of_the_same_bits() {
        let p = picked(Some("q8_0"), FLAT);
        assert_eq!(p.model, "model-Q8_0.gguf");
        assert_eq!(p.parts, ["model-Q8_0.gguf"]);
        assert_eq!(p.mmproj.as_deref(), Some("mmproj-model-Q8_0.gguf"));
        let p = picked(Some("Q4_K_M"), QWEN3_30B);
        assert_eq!(p.model, "Qwen3-30B-A3B-Q4_K_M.gguf");
        assert_eq!(p.mmproj, None);
        assert_eq!(
            picked(Some("UD-Q4_K_XL"), QWEN3_30B).model,
            "Qwen3-30B-A3B-UD-Q4_K_XL.gguf"
        );
    }

    #[test]
    fn without_a_quant_q4_k_m_then_q8_0_then_the_first_model_file() {
        assert_eq!(picked(None, FLAT).model, "model-Q4_K_M.gguf");
        assert_eq!(
            picked(None, SUBDIR).model,
            "Q8_0/model-Q8_0-00001-of-00002.gguf"
        );
        // Neither default: the first model file in path order, never a sidecar or a
        // projector.
        let p = picked(
            None,
            &[
                "dflash-model-BF16.gguf",
                "mmproj-F16.gguf",
                "model-BF16.gguf",
            ],
        );
        assert_eq!(p.model, "model-BF16.gguf");
        assert_eq!(p.mmproj.as_deref(), Some("mmproj-F16.gguf"));
        // `mtp-` marks a sidecar in lower case only (as llama.cpp reads it): unsloth's
        // `model-MTP-BF16.gguf` counts as a model, and comes first in path order.
        assert_eq!(picked(None, UNSLOTH).model, "model-MTP-BF16.gguf");
        let p = picked(Some("Q8_K_XL"), UNSLOTH);
        assert_eq!(p.model, "model-UD-Q8_K_XL.gguf");
        assert_eq!(p.mmproj.as_deref(), Some("mmproj-BF16.gguf"));
    }

    #[test]
    fn a_split_model_brings_every_part_and_a_projector_from_the_folder_above() {
        let p = picked(Some("Q3_K_M"), SUBDIR);
        assert_eq!(p.model, "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf");
        assert_eq!(
            p.parts,
            [
                "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf",
                "Q3_K_M/model-Q3_K_M-00002-of-00003.gguf",
                "Q3_K_M/model-Q3_K_M-00003-of-00003.gguf",
            ]
        );
        assert_eq!(p.mmproj.as_deref(), Some("mmproj-model-f16.gguf"));
        assert_eq!(p.files().count(), 4);
        let p = picked(Some("bf16"), QWEN3_30B);
        assert_eq!(p.parts.len(), 2);
        assert_eq!(p.model, "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf");
    }

    #[test]
    fn the_quant_must_end_at_a_dot_or_dash_and_the_first_in_path_order_wins() {
        // Both names carry `Q8_0.`: the first in path order.
        assert_eq!(
            picked(Some("Q8_0"), VENDORS).model,
            "BlackSheep-24B.Q8_0.gguf"
        );
        // `Q4_K` is no quant of its own here: `Q4_K_M` continues with `_`.
        let e = pick(Some("Q4_K"), QWEN3_30B).unwrap_err();
        assert!(matches!(e, GgufError::NoMatch { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("Qwen3-30B-A3B-Q4_K_M.gguf"), "{text}");
        assert!(text.contains("after `:`"), "{text}");
    }

    #[test]
    fn sidecars_are_never_the_model_and_a_tag_only_they_carry_picks_nothing() {
        // `mtp-model-Q4_0.gguf` carries Q4_0, no model does.
        assert!(matches!(
            pick(Some("Q4_0"), FLAT),
            Err(GgufError::NoMatch { .. })
        ));
        let e = pick(None, &["README.md", "model.safetensors"]).unwrap_err();
        assert!(matches!(e, GgufError::NoGguf { .. }));
        assert!(e.to_string().contains("model.safetensors"), "{e}");
    }

    #[test]
    fn a_split_model_with_a_part_missing_is_refused_naming_it() {
        let listing = [
            "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf",
            "Q3_K_M/model-Q3_K_M-00003-of-00003.gguf",
        ];
        let e = pick(Some("Q3_K_M"), &listing).unwrap_err();
        assert_eq!(
            e,
            GgufError::MissingParts {
                model: "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf".into(),
                count: 3,
                found: 2,
                missing: vec!["Q3_K_M/model-Q3_K_M-00002-of-00003.gguf".into()],
            }
        );
    }

    #[test]
    fn quantization_bits_are_read_from_the_last_part_of_the_name() {
        assert_eq!(quant_bits("model-Q8_0.gguf"), 8);
        assert_eq!(quant_bits("model-UD-Q2_K_XL.gguf"), 2);
        assert_eq!(quant_bits("model.i1-Q6_K.gguf"), 6);
        assert_eq!(quant_bits("model-BF16.gguf"), 16);
        assert_eq!(quant_bits("model-MXFP4-00001-of-00002.gguf"), 4);
        assert_eq!(quant_bits("model.gguf"), 0);
    }

    #[test]
    fn quants_are_letters_digits_and_a_few_marks() {
        assert!(valid_quant("UD-Q4_K_XL"));
        assert!(valid_quant("q8_0"));
        assert!(!valid_quant(""));
        assert!(!valid_quant("Q4/../x"));
        assert!(!valid_quant("Q4 K"));
    }
}
