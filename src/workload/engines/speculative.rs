//! Speculative decoding as a request asks for it, engine-neutral: the method, the draft model
//! (a Hub repo, staged on every node like the model itself) and the tokens drafted per step.
//! Each engine maps it to what it reads (`vllm.rs`: `--speculative-config` JSON, `sglang.rs`:
//! `--speculative-algorithm` and its step, top-k and draft flags, `trtllm.rs`: the options
//! file's `speculative_config`) or refuses it with a fix; the serving skeleton stages the
//! draft. This file owns the block's shape and its own checks, not any engine's spelling.
//!
//! Pure.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::ModelSource;

/// How the drafts are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecMethod {
    /// The model's own multi-token-prediction head (DeepSeek, GLM, Qwen3-Next, Nemotron-H):
    /// no separate draft, unless the checkpoint ships its head apart.
    Mtp,
    /// An EAGLE draft head (a separate repo).
    Eagle,
    /// An EAGLE-3 draft head (a separate repo).
    Eagle3,
    /// A small model of the same family (a separate repo).
    Draft,
    /// Prompt lookup: n-grams of the prompt; no model.
    Ngram,
}

impl SpecMethod {
    pub const ALL: [SpecMethod; 5] = [
        SpecMethod::Mtp,
        SpecMethod::Eagle,
        SpecMethod::Eagle3,
        SpecMethod::Draft,
        SpecMethod::Ngram,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SpecMethod::Mtp => "mtp",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Eagle3 => "eagle3",
            SpecMethod::Draft => "draft",
            SpecMethod::Ngram => "ngram",
        }
    }

    /// Whether the method needs a draft repo (`Some(true)`), takes none (`Some(false)`), or may
    /// name one (`None`: MTP, whose head may ship apart).
    pub fn draft(self) -> Option<bool> {
        match self {
            SpecMethod::Eagle | SpecMethod::Eagle3 | SpecMethod::Draft => Some(true),
            SpecMethod::Ngram => Some(false),
            SpecMethod::Mtp => None,
        }
    }
}

impl fmt::Display for SpecMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A separate draft a community recipe's settings name (vLLM's `speculative_config` model,
/// SGLang's draft path, Atlas's `draft_model`), as its engine reads it there: staged beside the
/// model, as the recipe's own runner fetches it before the start, since every container runs
/// with the Hub offline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecipeDraft {
    /// `ORG/NAME` on the Hub.
    pub repo: String,
    pub revision: Option<String>,
    /// The setting that named it, for the plan (`speculative_config`).
    pub setting: &'static str,
}

impl RecipeDraft {
    /// The draft `id` names when it is a Hub repo (`ORG/NAME`); a folder or a path inside the
    /// image is the image's own, not staged.
    pub fn hub(id: &str, revision: Option<&str>, setting: &'static str) -> Option<RecipeDraft> {
        let id = id.trim();
        let hub = !id.starts_with(['/', '.', '~'])
            && id.split('/').count() == 2
            && id.split('/').all(|p| !p.is_empty());
        hub.then(|| RecipeDraft {
            repo: id.to_string(),
            revision: revision
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(String::from),
            setting,
        })
    }
}

/// A recipe setting's text: a string as written, a number or boolean as YAML prints it.
pub fn setting_text(v: &yaml_serde::Value) -> Option<String> {
    match v {
        yaml_serde::Value::String(s) => Some(s.clone()),
        yaml_serde::Value::Number(n) => Some(n.to_string()),
        yaml_serde::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Tokens drafted per step, at most: past this every engine verifies more than it gains.
pub const MAX_TOKENS: u32 = 16;

/// A profile's `speculative:` block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    pub method: SpecMethod,
    /// `ORG/NAME` on the Hub: the draft head or model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_model: Option<String>,
    /// The draft's branch, tag or commit [default: main].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_revision: Option<String>,
    /// Tokens drafted per step (vLLM's `num_speculative_tokens`, SGLang's steps).
    pub tokens: u32,
}

impl Speculative {
    /// Every problem of the block on its own, as `(field, message)` with the field relative to
    /// the block (`tokens`, `draft_model`).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.tokens == 0 || self.tokens > MAX_TOKENS {
            out.push((
                "tokens",
                format!(
                    "{}: draft from 1 to {MAX_TOKENS} tokens per step",
                    self.tokens
                ),
            ));
        }
        match (self.method.draft(), &self.draft_model) {
            (Some(true), None) => out.push((
                "draft_model",
                format!(
                    "{} needs its draft: draft_model: ORG/NAME (a Hub repo, staged on every node)",
                    self.method
                ),
            )),
            (Some(false), Some(_)) => out.push((
                "draft_model",
                format!(
                    "{} drafts from the prompt, with no model; remove it",
                    self.method
                ),
            )),
            _ => {}
        }
        if self.draft_model.is_none() && self.draft_revision.is_some() {
            out.push((
                "draft_revision",
                "there is no draft_model to take it".to_string(),
            ));
        }
        if let Some(d) = &self.draft_model
            && let Err(e) = self.draft_source(d)
        {
            out.push(("draft_model", e));
        }
        out
    }

    /// The draft as a Hub source at its revision: what the staging copies and the engine reads
    /// from the cache (`None` for methods without one, or a block that did not validate).
    pub fn draft(&self) -> Option<ModelSource> {
        self.draft_source(self.draft_model.as_deref()?).ok()
    }

    fn draft_source(&self, id: &str) -> Result<ModelSource, String> {
        if id.contains('@') {
            return Err(format!(
                "{id:?}: give the revision as draft_revision, not after @"
            ));
        }
        match ModelSource::parse(id, self.draft_revision.as_deref()) {
            Ok(s @ ModelSource::Hub { .. }) => Ok(s),
            Ok(ModelSource::Local { .. }) => Err(format!(
                "{id:?} is a folder; the draft is staged from the Hub: give ORG/NAME"
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// `ORG/NAME` and the revision when it is not `main`: how an engine names the draft (it
    /// finds it in the staged cache, offline, by repo and revision).
    pub fn draft_ref(&self) -> Option<(String, Option<String>)> {
        match self.draft()? {
            ModelSource::Hub { repo, revision, .. } => Some((
                repo.to_string(),
                (revision.as_str() != "main").then(|| revision.to_string()),
            )),
            ModelSource::Local { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(method: SpecMethod, draft: Option<&str>, tokens: u32) -> Speculative {
        Speculative {
            method,
            draft_model: draft.map(str::to_string),
            draft_revision: None,
            tokens,
        }
    }

    #[test]
    fn eagle_without_a_draft_and_zero_tokens_are_both_named() {
        let p = spec(SpecMethod::Eagle3, None, 0).problems();
        let fields: Vec<&str> = p.iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, vec!["tokens", "draft_model"]);
        assert!(p[1].1.contains("eagle3 needs its draft"), "{p:?}");
    }

    #[test]
    fn ngram_refuses_a_draft_and_a_folder_is_no_draft() {
        assert_eq!(
            spec(SpecMethod::Ngram, Some("a/b"), 3).problems()[0].0,
            "draft_model"
        );
        let p = spec(SpecMethod::Draft, Some("/models/small"), 3).problems();
        assert!(p[0].1.contains("staged from the Hub"), "{p:?}");
    }

    #[test]
    fn the_draft_is_named_by_repo_with_its_revision_unless_main() {
        let mut s = spec(
            SpecMethod::Eagle,
            Some("yuhuili/EAGLE-LLaMA3.1-Instruct-8B"),
            3,
        );
        assert!(s.problems().is_empty());
        assert_eq!(
            s.draft_ref(),
            Some(("yuhuili/EAGLE-LLaMA3.1-Instruct-8B".to_string(), None))
        );
        s.draft_revision = Some("v2".into());
        assert_eq!(s.draft_ref().unwrap().1.as_deref(), Some("v2"));
        assert!(spec(SpecMethod::Mtp, None, 3).draft_ref().is_none());
    }

    fn settings(yaml: &str) -> BTreeMap<String, yaml_serde::Value> {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn a_recipe_names_its_draft_as_each_engine_reads_it() {
        use crate::workload::engines::EngineKind;
        let vllm = settings(
            "speculative_config: '{\"method\": \"dflash\", \"model\": \"z-lab/Qwen3.6-27B-DFlash\", \"num_speculative_tokens\": 15}'",
        );
        assert_eq!(
            EngineKind::Vllm.engine().recipe_draft(&vllm),
            Some(RecipeDraft {
                repo: "z-lab/Qwen3.6-27B-DFlash".into(),
                revision: None,
                setting: "speculative_config",
            })
        );
        let mapping =
            settings("speculative_config: {method: dflash, model: org/draft, revision: bf582e4}");
        let d = EngineKind::Vllm.engine().recipe_draft(&mapping).unwrap();
        assert_eq!(
            (d.repo.as_str(), d.revision.as_deref()),
            ("org/draft", Some("bf582e4"))
        );
        // MTP names no model; a path inside the image is the image's own.
        for none in [
            "speculative_config: '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'",
            "speculative_config: '{\"method\": \"eagle3\", \"model\": \"/models/draft\"}'",
            "speculative_config: not json",
        ] {
            assert_eq!(
                EngineKind::Vllm.engine().recipe_draft(&settings(none)),
                None,
                "{none}"
            );
        }
        let sglang = settings(
            "speculative_draft_model_path: org/eagle3\nspeculative_draft_model_revision: v2",
        );
        let d = EngineKind::Sglang.engine().recipe_draft(&sglang).unwrap();
        assert_eq!(
            (d.repo.as_str(), d.revision.as_deref(), d.setting),
            ("org/eagle3", Some("v2"), "speculative_draft_model_path")
        );
        let atlas = settings("draft_model: org/atlas-draft");
        assert_eq!(
            EngineKind::Atlas
                .engine()
                .recipe_draft(&atlas)
                .map(|d| d.repo),
            Some("org/atlas-draft".into())
        );
        // An engine that reads no draft from settings names none.
        assert_eq!(EngineKind::Llamacpp.engine().recipe_draft(&atlas), None);
    }
}
