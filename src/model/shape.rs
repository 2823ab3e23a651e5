//! What a model's `config.json` says about the ways it can be split, and whether a tensor ×
//! pipeline parallel shape fits it: attention heads and KV heads across `tp` ranks, layers
//! across `pp` stages. Checked before anything is copied or started, so that a `--tp 3` on a
//! 28-head model is refused in a second instead of after the weights are loaded.
//!
//! The rule is the engines' own (vLLM's `verify_with_parallel_config`, TensorRT-LLM's
//! attention split): `num_attention_heads` must be a multiple of tp; `num_key_value_heads`
//! (default: the attention heads) must be a multiple of tp when it is at least tp, else tp a
//! multiple of it (each KV head is then replicated on tp / kv ranks); `num_hidden_layers` must
//! be at least pp. Multimodal configs keep these under `text_config` (or `llm_config`,
//! `language_config`): the nested config is read when the top level lacks them.
//!
//! Pure: text in, a shape or a reason out. Reading the file (from the Hub or the head) is
//! `staging::shape`'s.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::problem::Problem;

/// The numbers of a model that constrain tp and pp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelShape {
    /// `num_attention_heads`.
    pub heads: u64,
    /// `num_key_value_heads` (the attention heads when absent: no grouped-query attention).
    pub kv_heads: u64,
    /// `num_hidden_layers`.
    pub layers: u64,
}

/// What the pre-plan step learned about the model's `config.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ShapeLookup {
    /// Not looked up (a run that plans without lookups); the plan says tp/pp were not checked.
    #[default]
    NotLooked,
    /// Read and understood.
    Read(ModelShape),
    /// Could not be read or understood; the reason, for the warning.
    Unreadable(String),
}

/// Why a `config.json` gives no shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("config.json is not JSON: {0}")]
    NotJson(String),
    #[error("config.json has no {0} (nor under text_config)")]
    Missing(&'static str),
}

/// The configs that hold the language model's numbers in multimodal models, tried in order
/// after the top level.
const NESTED: [&str; 3] = ["text_config", "llm_config", "language_config"];

impl ModelShape {
    /// Reads the shape from the text of `config.json`.
    pub fn parse(text: &str) -> Result<ModelShape, ShapeError> {
        let root: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ShapeError::NotJson(e.to_string()))?;
        let configs: Vec<&serde_json::Value> = std::iter::once(&root)
            .chain(NESTED.iter().filter_map(|k| root.get(*k)))
            .collect();
        // The first config that has the heads gives all three numbers.
        let config = configs
            .iter()
            .find(|c| number(c, "num_attention_heads").is_some())
            .ok_or(ShapeError::Missing("num_attention_heads"))?;
        let heads = number(config, "num_attention_heads").unwrap_or_default();
        let layers =
            number(config, "num_hidden_layers").ok_or(ShapeError::Missing("num_hidden_layers"))?;
        let kv_heads = number(config, "num_key_value_heads").unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || layers == 0 {
            return Err(ShapeError::Missing("a non-zero head or layer count"));
        }
        Ok(ModelShape {
            heads,
            kv_heads,
            layers,
        })
    }

    /// Whether `tp` ranks can split the attention heads and the KV heads.
    pub fn tp_fits(&self, tp: u64) -> bool {
        tp > 0
            && self.heads.is_multiple_of(tp)
            && if self.kv_heads >= tp {
                self.kv_heads.is_multiple_of(tp)
            } else {
                tp.is_multiple_of(self.kv_heads)
            }
    }

    /// Every tp that fits, smallest first (the divisors of the heads that also fit the KV
    /// heads).
    pub fn fitting_tps(&self) -> Vec<u64> {
        (1..=self.heads)
            .filter(|d| self.heads.is_multiple_of(*d) && self.tp_fits(*d))
            .collect()
    }

    /// Every reason `tp × pp` does not fit `model` (named in the messages), with the fix.
    pub fn misfits(&self, model: &str, tp: u64, pp: u64) -> Vec<Problem> {
        let mut out = Vec::new();
        if tp > 0 && !self.tp_fits(tp) {
            let why = if !self.heads.is_multiple_of(tp) {
                format!(
                    "tp {tp} does not divide the {} attention heads of {model}",
                    self.heads
                )
            } else if self.kv_heads >= tp {
                format!(
                    "tp {tp} does not divide the {} KV heads of {model}",
                    self.kv_heads
                )
            } else {
                format!(
                    "tp {tp} is not a multiple of the {} KV heads of {model} (each KV head is replicated on tp / {} ranks)",
                    self.kv_heads, self.kv_heads
                )
            };
            out.push(Problem::new(
                why,
                format!("use tp {}", or_list(&self.fitting_tps())),
            ));
        }
        if pp > self.layers {
            out.push(Problem::new(
                format!(
                    "pp {pp} is more pipeline stages than the {} layers of {model}",
                    self.layers
                ),
                format!("use pp {} or fewer", self.layers),
            ));
        }
        out
    }
}

impl fmt::Display for ModelShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} attention heads, {} KV heads, {} layers",
            self.heads, self.kv_heads, self.layers
        )
    }
}

fn number(v: &serde_json::Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64()
}

/// `1, 2, 4 or 28`.
fn or_list(xs: &[u64]) -> String {
    let words: Vec<String> = xs.iter().map(u64::to_string).collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of Qwen/Qwen2.5-7B-Instruct's public config.json: 28 attention heads, 4 KV
    /// heads, 28 layers (the fields as the Hub serves them, other fields left out).
    const QWEN25_7B: &str = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "model_type": "qwen2"}"#;

    /// meta-llama/Llama-3.1-70B-Instruct's config.json: 64 heads, 8 KV heads, 80 layers.
    const LLAMA31_70B: &str = r#"{"architectures": ["LlamaForCausalLM"],
        "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8}"#;

    /// A multimodal config in the shape of google/gemma-3-27b-it's: the language model's
    /// numbers under text_config (32 heads, 16 KV heads, 62 layers), none at the top level.
    const GEMMA3_27B: &str = r#"{"architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3", "text_config": {"num_attention_heads": 32,
        "num_key_value_heads": 16, "num_hidden_layers": 62},
        "vision_config": {"num_attention_heads": 16, "num_hidden_layers": 27}}"#;

    /// openai-community/gpt2-style config without num_key_value_heads: KV heads = heads.
    const NO_GQA: &str = r#"{"num_attention_heads": 12, "num_hidden_layers": 12}"#;

    #[test]
    fn qwen2_5_7b_has_28_heads_4_kv_heads_and_28_layers() {
        let s = ModelShape::parse(QWEN25_7B).unwrap();
        assert_eq!(
            s,
            ModelShape {
                heads: 28,
                kv_heads: 4,
                layers: 28
            }
        );
    }

    #[test]
    fn a_tp_that_does_not_divide_the_heads_is_refused_naming_the_numbers_and_the_tps_that_fit() {
        let s = ModelShape::parse(QWEN25_7B).unwrap();
        let m = s.misfits("Qwen/Qwen2.5-7B-Instruct", 3, 1);
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0].what,
            "tp 3 does not divide the 28 attention heads of Qwen/Qwen2.5-7B-Instruct"
        );
        // 7 and 14 divide the heads but not the 4 KV heads (nor are they multiples of 4).
        assert_eq!(m[0].fix, "use tp 1, 2, 4 or 28");
    }

    #[test]
    fn a_tp_that_divides_the_heads_but_splits_a_kv_head_is_refused() {
        let s = ModelShape::parse(QWEN25_7B).unwrap();
        let m = s.misfits("Qwen/Qwen2.5-7B-Instruct", 14, 1);
        assert_eq!(m.len(), 1);
        assert!(
            m[0].what.contains("not a multiple of the 4 KV heads"),
            "{m:?}"
        );
        // A made-up shape where tp is below the KV heads but does not divide them.
        let s = ModelShape::parse(
            r#"{"num_attention_heads": 12, "num_key_value_heads": 6, "num_hidden_layers": 4}"#,
        )
        .unwrap();
        assert_eq!(
            s.misfits("m", 4, 1)[0].what,
            "tp 4 does not divide the 6 KV heads of m"
        );
    }

    #[test]
    fn fitting_shapes_pass_and_kv_heads_may_be_replicated() {
        let s = ModelShape::parse(LLAMA31_70B).unwrap();
        for tp in [1, 2, 4, 8, 16, 32, 64] {
            assert!(s.misfits("llama", tp, 1).is_empty(), "tp {tp}");
        }
        assert!(s.misfits("llama", 2, 80).is_empty());
    }

    #[test]
    fn more_pipeline_stages_than_layers_are_refused() {
        let s = ModelShape::parse(QWEN25_7B).unwrap();
        let m = s.misfits("Qwen/Qwen2.5-7B-Instruct", 1, 29);
        assert_eq!(
            m[0].what,
            "pp 29 is more pipeline stages than the 28 layers of Qwen/Qwen2.5-7B-Instruct"
        );
        assert_eq!(s.misfits("q", 3, 29).len(), 2);
    }

    #[test]
    fn a_multimodal_config_is_read_from_its_text_config() {
        let s = ModelShape::parse(GEMMA3_27B).unwrap();
        assert_eq!((s.heads, s.kv_heads, s.layers), (32, 16, 62));
    }

    #[test]
    fn kv_heads_default_to_the_heads() {
        let s = ModelShape::parse(NO_GQA).unwrap();
        assert_eq!(s.kv_heads, 12);
        assert_eq!(s.fitting_tps(), vec![1, 2, 3, 4, 6, 12]);
    }

    #[test]
    fn a_config_without_the_numbers_or_not_json_says_what_is_missing() {
        assert_eq!(
            ModelShape::parse(r#"{"model_type": "x"}"#),
            Err(ShapeError::Missing("num_attention_heads"))
        );
        assert_eq!(
            ModelShape::parse(r#"{"num_attention_heads": 8}"#),
            Err(ShapeError::Missing("num_hidden_layers"))
        );
        assert!(matches!(
            ModelShape::parse("<html>"),
            Err(ShapeError::NotJson(_))
        ));
    }
}
