//! The v2 command template as sparkrun renders it: every `{…}` on one line whose name (braces
//! stripped from both ends) is a key of the config chain becomes `str(value)`; anything else
//! stays exactly as written (there is no `{{ }}` escape), and the whole pass repeats until the
//! text stops changing, so `{a}` may expand to a text that holds `{b}`. sparkrun stops after a
//! few passes on a cycle and runs what it has; here the passes are bounded and a cycle is an
//! error naming its keys. A text that grows past [`MAX_RENDERED_BYTES`] — `{a}` whose value
//! is `{a}{a}` doubles on every pass — is refused the moment it does, inside the pass, naming
//! the keys that grow it, never expanded until memory runs out. Then a backslash followed by
//! spaces at a line end becomes a line continuation, as sparkrun repairs it. Pure.

use std::collections::{BTreeMap, BTreeSet};

use yaml_serde::Value;

use super::pyvalue::python_str;
pub use crate::workload::recipe_env::MAX_RENDERED_BYTES;

/// How many passes a command may take before its placeholders count as a cycle.
pub const MAX_PASSES: usize = 32;

fn braced(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("{{{k}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Placeholders that never stop expanding, or that grow the text past the bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubstituteError {
    #[error(
        "placeholders still expand after {MAX_PASSES} passes: a cycle among {}",
        braced(keys)
    )]
    Cycle { keys: Vec<String> },
    #[error(
        "the value of {{{key}}} holds {{{key}}} itself, so the command grows on every pass and never settles; write the value out"
    )]
    SelfReference { key: String },
    #[error(
        "the command grows past {} KiB as {} expand{} (values that hold several placeholders double on every pass); write the values out",
        MAX_RENDERED_BYTES >> 10,
        braced(keys),
        if keys.len() == 1 { "s" } else { "" }
    )]
    TooLarge { keys: Vec<String> },
}

impl SubstituteError {
    /// The keys it names.
    pub fn keys(&self) -> Vec<String> {
        match self {
            SubstituteError::Cycle { keys } | SubstituteError::TooLarge { keys } => keys.clone(),
            SubstituteError::SelfReference { key } => vec![key.clone()],
        }
    }
}

/// Renders a v2 command: trimmed, substituted until stable, continuations repaired.
pub fn render(command: &str, config: &BTreeMap<String, Value>) -> Result<String, SubstituteError> {
    render_used(command, config).map(|(text, _)| text)
}

/// [`render`], and every key it substituted on any pass.
pub fn render_used(
    command: &str,
    config: &BTreeMap<String, Value>,
) -> Result<(String, BTreeSet<String>), SubstituteError> {
    let mut text = command.trim().to_string();
    let mut recent: Vec<BTreeSet<&str>> = Vec::new();
    // The keys of the last few passes are the ones that keep expanding.
    let last = |recent: &[BTreeSet<&str>]| -> Vec<String> {
        let keys: BTreeSet<&str> = recent.iter().rev().take(4).flatten().copied().collect();
        keys.into_iter().map(str::to_string).collect()
    };
    loop {
        let (next, used) = match pass(&text, config) {
            Ok(p) => p,
            Err(Grew::Past(used)) => {
                recent.push(used);
                return Err(SubstituteError::TooLarge {
                    keys: last(&recent),
                });
            }
            Err(Grew::Itself(key)) => {
                return Err(SubstituteError::SelfReference {
                    key: key.to_string(),
                });
            }
        };
        if next == text {
            break;
        }
        recent.push(used);
        if recent.len() >= MAX_PASSES {
            return Err(SubstituteError::Cycle {
                keys: last(&recent),
            });
        }
        text = next;
    }
    let used = recent.into_iter().flatten().map(str::to_string).collect();
    Ok((repair_continuations(&text), used))
}

/// Why a pass stopped: the text grew past the bound (the keys replaced so far), or a key's
/// value names the key itself.
enum Grew<'c> {
    Past(BTreeSet<&'c str>),
    Itself(&'c str),
}

/// The placeholder spans of one pass, in order: `(start, end)` of each `{…}` (the shortest span
/// from a `{` to the next `}` on its line), found in one look per line.
fn spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        loop {
            let open = at + text[at..].find('{')?;
            let after = &text[open + 1..];
            // `\{(.*?)\}` without DOTALL.
            let stop = after.find(['}', '\n']);
            match stop.filter(|&i| after.as_bytes()[i] == b'}') {
                Some(close) => {
                    at = open + close + 2;
                    return Some((open, at));
                }
                // No `}` before the line ends: no brace up to there closes either.
                None => at = stop.map_or(text.len(), |i| open + 1 + i),
            }
        }
    })
}

/// The key a span names (braces stripped from both ends).
fn name_of(span: &str) -> &str {
    span.trim_matches(['{', '}'])
}

/// One pass; also the keys it replaced. It stops at once past [`MAX_RENDERED_BYTES`], or at
/// a key whose value names the key itself (other than as the whole value, which is stable):
/// that value grows the text on every pass, forever.
fn pass<'c>(
    text: &str,
    config: &'c BTreeMap<String, Value>,
) -> Result<(String, BTreeSet<&'c str>), Grew<'c>> {
    let mut out = String::with_capacity(text.len().min(MAX_RENDERED_BYTES));
    // The keys replaced in this pass, each with its text (a handful: looked up in order).
    let mut values: Vec<(&'c str, String)> = Vec::new();
    let used = |values: &[(&'c str, String)]| values.iter().map(|(k, _)| *k).collect();
    let mut done = 0;
    for (open, end) in spans(text) {
        let whole = &text[open..end];
        out.push_str(&text[done..open]);
        done = end;
        let name = name_of(whole);
        let known = values.iter().position(|(k, _)| *k == name);
        let i = match known {
            Some(i) => Some(i),
            None => match config.get_key_value(name).filter(|(_, v)| !v.is_null()) {
                Some((key, v)) => {
                    let key = key.as_str();
                    let shown = python_str(v);
                    let itself = shown != format!("{{{key}}}")
                        && spans(&shown).any(|(a, b)| name_of(&shown[a..b]) == key);
                    if itself {
                        return Err(Grew::Itself(key));
                    }
                    values.push((key, shown));
                    Some(values.len() - 1)
                }
                None => None,
            },
        };
        match i {
            Some(i) => out.push_str(&values[i].1),
            None => out.push_str(whole),
        }
        if out.len() > MAX_RENDERED_BYTES {
            return Err(Grew::Past(used(&values)));
        }
    }
    out.push_str(&text[done..]);
    if out.len() > MAX_RENDERED_BYTES {
        return Err(Grew::Past(used(&values)));
    }
    Ok((out, used(&values)))
}

/// `\` followed by spaces at a line end becomes `\` at the line end.
fn repair_continuations(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            let trimmed = line.trim_end_matches(' ');
            if trimmed.ends_with('\\') && trimmed.len() < line.len() {
                trimmed
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), yaml_serde::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn keys_are_replaced_and_unknown_names_stay_verbatim() {
        let c = config(&[("port", "8000"), ("model", "org/m")]);
        assert_eq!(
            render("vllm serve {model} --port {port} --x {nope}", &c).unwrap(),
            "vllm serve org/m --port 8000 --x {nope}"
        );
    }

    #[test]
    fn substitution_repeats_until_nothing_changes() {
        let c = config(&[("base", "'http://h:{port}'"), ("port", "9000")]);
        assert_eq!(render("--url {base}", &c).unwrap(), "--url http://h:9000");
    }

    #[test]
    fn doubled_braces_are_not_an_escape_in_v2() {
        // The shortest `{...}` from the first brace is `{{"n":{n}`; its name is not a key, so
        // the text stays, and the `{n}` inside it is consumed by that match, as in sparkrun.
        let c = config(&[("n", "3")]);
        assert_eq!(
            render("'{{\"n\":{n}}}' {n}", &c).unwrap(),
            "'{{\"n\":{n}}}' 3"
        );
    }

    #[test]
    fn a_cycle_is_an_error_naming_its_keys() {
        let c = config(&[("a", "'{b}'"), ("b", "'{a}'"), ("port", "1")]);
        let e = render("{a} {port}", &c).unwrap_err();
        assert_eq!(
            e,
            SubstituteError::Cycle {
                keys: vec!["a".into(), "b".into()]
            }
        );
        assert!(
            e.to_string()
                .starts_with("placeholders still expand after 32 passes")
        );
        // A value that is its own placeholder alone is stable, as in sparkrun.
        assert_eq!(render("{a}", &config(&[("a", "'{a}'")])).unwrap(), "{a}");
    }

    fn fast<T>(f: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = f();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        out
    }

    #[test]
    fn a_value_that_holds_its_own_placeholder_is_refused_on_the_first_pass() {
        // Before, `{a}{a}` doubled on every pass until the OOM killer took the process.
        for value in ["'{a}{a}'", "'x{a}'", "'--x {a} {b}'"] {
            let c = config(&[("a", value), ("b", "2")]);
            let e = fast(|| render("vllm serve m --x {a}", &c)).unwrap_err();
            assert_eq!(e, SubstituteError::SelfReference { key: "a".into() });
        }
        assert_eq!(
            render("{a}", &config(&[("a", "'{a}{a}'")]))
                .unwrap_err()
                .to_string(),
            "the value of {a} holds {a} itself, so the command grows on every pass and never settles; write the value out"
        );
    }

    #[test]
    fn a_text_that_grows_past_the_bound_is_refused_as_it_does_naming_the_keys() {
        // A chain of doubling keys grows without a cycle: refused at the bound, not at pass 32.
        let chain: Vec<(String, String)> = (0..40)
            .map(|i| (format!("k{i}"), format!("'{{k{}}}{{k{}}}'", i + 1, i + 1)))
            .collect();
        let pairs: Vec<(&str, &str)> = chain
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let e = fast(|| render("{k0}", &config(&pairs))).unwrap_err();
        assert!(matches!(e, SubstituteError::TooLarge { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("the command grows past 256 KiB as {k"),
            "{e}"
        );
        // One pass may grow past the bound too: many placeholders of a large value.
        let big = format!("'{}'", "x".repeat(64 << 10));
        let many = "{b}".repeat(100);
        let e = fast(|| render(&many, &config(&[("b", &big)]))).unwrap_err();
        assert_eq!(
            e,
            SubstituteError::TooLarge {
                keys: vec!["b".into()]
            }
        );
    }

    #[test]
    fn an_unclosed_brace_costs_one_look_per_line() {
        // A line of 200 000 `{` without a `}` once took a scan to the line's end per brace.
        let text = format!("{}\n{{a}}", "{".repeat(200_000));
        let out = fast(|| render(&text, &config(&[("a", "1")]))).unwrap();
        assert!(out.ends_with("\n1"));
    }

    #[test]
    fn a_brace_pair_never_spans_lines_and_null_values_stay_placeholders() {
        let c = config(&[("a", "null"), ("b", "1")]);
        assert_eq!(render("{a} {\n{b}", &c).unwrap(), "{a} {\n1");
    }

    #[test]
    fn spaces_after_a_line_continuation_are_repaired() {
        assert_eq!(
            render("vllm serve m \\  \n  --port 1", &config(&[])).unwrap(),
            "vllm serve m \\\n  --port 1"
        );
    }
}
