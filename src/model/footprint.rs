//! What a model's own files say about the memory it takes: the KV cache it keeps per token
//! (from `config.json`) and the bytes of its weights (a safetensors index's
//! `metadata.total_size`, or the sizes of its weight files as a listing gives them).
//!
//! The KV cache, per token, is what each attention layer keeps: K and V of every KV head
//! (`2 × num_key_value_heads × head_dim` elements), or for latent attention (MLA:
//! `kv_lora_rank`) one compressed latent of `kv_lora_rank + qk_rope_head_dim` elements.
//! Layers are read as the config describes them: `layer_types` (full, sliding-window,
//! linear attention), `hybrid_override_pattern` (Nemotron-H: `*` attention, `M` Mamba),
//! `full_attention_interval` (every Nth layer full, the others linear attention),
//! `sliding_window` with `sliding_window_pattern`. A sliding-window layer keeps at most its
//! window; a linear-attention or Mamba layer keeps a state of fixed size per sequence, however
//! long the context. A config whose attention this module does not model (compressed
//! attention: `compress_ratios`) gives no figure: the KV cache is then not known, never
//! guessed.
//!
//! Pure: text and listings in, figures or the reason they are not known out. Reading the files
//! (here, from the head, from the Hub) is `staging::shape`'s.

use serde::Serialize;

/// A figure, or why it is not known.
#[derive(Clone, Debug, PartialEq)]
pub enum Known<T> {
    Known(T),
    NotKnown(String),
}

impl<T> Known<T> {
    pub fn known(&self) -> Option<&T> {
        match self {
            Known::Known(v) => Some(v),
            Known::NotKnown(_) => None,
        }
    }

    /// Why it is not known (`None` when it is).
    pub fn why_not(&self) -> Option<&str> {
        match self {
            Known::Known(_) => None,
            Known::NotKnown(why) => Some(why),
        }
    }
}

impl<T> From<Result<T, String>> for Known<T> {
    fn from(r: Result<T, String>) -> Self {
        match r {
            Ok(v) => Known::Known(v),
            Err(why) => Known::NotKnown(why),
        }
    }
}

/// What one attention layer keeps for every token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PerToken {
    /// K and V of every KV head; tensor parallelism splits the heads (a head is replicated on
    /// every rank when there are fewer heads than ranks).
    Heads { kv_heads: u64, head_dim: u64 },
    /// One compressed latent (MLA), kept whole by every rank.
    Latent { dim: u64 },
}

impl PerToken {
    /// Elements one of `tp` ranks keeps per token and layer.
    pub fn elements(&self, tp: u64) -> u64 {
        match *self {
            PerToken::Heads { kv_heads, head_dim } => {
                let per_rank = if kv_heads >= tp {
                    kv_heads.div_ceil(tp.max(1))
                } else {
                    1
                };
                2 * per_rank * head_dim
            }
            PerToken::Latent { dim } => dim,
        }
    }
}

/// The KV cache a model keeps, as its `config.json` describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvLayout {
    /// Layers whose cache grows with every token (full attention).
    pub full_layers: u64,
    /// Layers that keep at most `window` tokens (sliding-window attention).
    pub sliding_layers: u64,
    pub window: u64,
    /// Layers with a state of fixed size per sequence (linear attention, Mamba).
    pub state_layers: u64,
    /// Elements of one such layer's state per sequence, over all ranks.
    pub state_elements: u64,
    pub per_token: PerToken,
    /// `num_attention_heads` (0: not given), for the tensor-parallel sizes that split them.
    pub heads: u64,
    /// `max_position_embeddings`: the context the engine takes unless told a shorter one.
    pub max_context: Option<u64>,
    /// The bytes of one element of the model's own dtype (`torch_dtype`/`dtype`): the KV
    /// cache's unless the engine is told another.
    pub dtype_bytes: Option<f64>,
}

/// The configs that hold the language model's numbers in multimodal models, tried in order
/// after the top level.
const NESTED: [&str; 3] = ["text_config", "llm_config", "language_config"];

fn number(v: &serde_json::Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64()
}

/// The bytes of one element of a dtype as configs and engines name it.
pub fn dtype_bytes(name: &str) -> Option<f64> {
    match name.trim().to_ascii_lowercase().as_str() {
        "bfloat16" | "bf16" | "float16" | "fp16" | "half" => Some(2.0),
        "float32" | "fp32" | "float" => Some(4.0),
        n if n.starts_with("fp8") || n.starts_with("float8") => Some(1.0),
        "fp4" | "nvfp4" => Some(0.5),
        _ => None,
    }
}

impl KvLayout {
    /// Reads the layout from the text of `config.json`.
    pub fn parse(text: &str) -> Result<KvLayout, String> {
        let root: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("config.json is not JSON: {e}"))?;
        let config = std::iter::once(&root)
            .chain(NESTED.iter().filter_map(|k| root.get(*k)))
            .find(|c| number(c, "num_hidden_layers").is_some())
            .ok_or("config.json has no num_hidden_layers (nor under text_config)")?;
        if config.get("compress_ratios").is_some() {
            return Err(
                "config.json describes compressed attention (compress_ratios), whose cache this version does not model"
                    .into(),
            );
        }
        let layers = number(config, "num_hidden_layers").unwrap_or_default();
        let heads = number(config, "num_attention_heads");
        let per_token = match number(config, "kv_lora_rank") {
            Some(rank) => PerToken::Latent {
                dim: rank + number(config, "qk_rope_head_dim").unwrap_or(0),
            },
            None => {
                let heads = heads.ok_or("config.json has no num_attention_heads")?;
                let kv_heads = number(config, "num_key_value_heads").unwrap_or(heads);
                let head_dim = match number(config, "head_dim") {
                    Some(d) => d,
                    None => number(config, "hidden_size")
                        .filter(|_| heads > 0)
                        .map(|h| h / heads)
                        .ok_or("config.json has neither head_dim nor hidden_size")?,
                };
                PerToken::Heads { kv_heads, head_dim }
            }
        };
        if layers == 0 || per_token.elements(1) == 0 {
            return Err("config.json gives no layers or no KV heads".into());
        }
        let kinds = layer_kinds(config, layers)?;
        let state_elements = if kinds.state > 0 {
            state_elements(config)?
        } else {
            0
        };
        let dtype = ["torch_dtype", "dtype"]
            .iter()
            .find_map(|k| config.get(*k).or_else(|| root.get(*k))?.as_str())
            .and_then(dtype_bytes);
        let max_context = number(config, "max_position_embeddings")
            .or_else(|| number(&root, "max_position_embeddings"));
        Ok(KvLayout {
            full_layers: kinds.full,
            sliding_layers: kinds.sliding,
            window: kinds.window,
            state_layers: kinds.state,
            state_elements,
            per_token,
            heads: heads.unwrap_or(0),
            max_context,
            dtype_bytes: dtype,
        })
    }

    /// Whether `tp` ranks can split the attention heads and the KV heads as the engines need
    /// (the rule of `shape::ModelShape::tp_fits`; unknown heads do not refuse).
    pub fn tp_fits(&self, tp: u64) -> bool {
        let heads_ok = self.heads == 0 || self.heads.is_multiple_of(tp);
        let kv_ok = match self.per_token {
            PerToken::Heads { kv_heads, .. } if kv_heads >= tp => kv_heads.is_multiple_of(tp),
            PerToken::Heads { kv_heads, .. } => tp.is_multiple_of(kv_heads),
            PerToken::Latent { .. } => true,
        };
        tp > 0 && heads_ok && kv_ok
    }

    /// Bytes one rank of a `tp × pp` replica keeps for `sequences` sequences of `tokens`
    /// tokens: full layers for every token, sliding-window layers for at most their window,
    /// state layers once per sequence (in `state_elem` bytes each); the layers split over the
    /// `pp` stages.
    pub fn rank_bytes(
        &self,
        tokens: u64,
        sequences: u64,
        (tp, pp): (u64, u64),
        elem: f64,
        state_elem: f64,
    ) -> f64 {
        let per_token = self.per_token.elements(tp) as f64 * elem;
        let full = self.full_layers as f64 * tokens as f64 * per_token;
        let sliding = self.sliding_layers as f64 * tokens.min(self.window) as f64 * per_token;
        let state =
            self.state_layers as f64 * self.state_elements as f64 / tp.max(1) as f64 * state_elem;
        (full + sliding + state) * sequences as f64 / pp.max(1) as f64
    }
}

/// How many layers of each kind.
struct Kinds {
    full: u64,
    sliding: u64,
    window: u64,
    state: u64,
}

fn layer_kinds(config: &serde_json::Value, layers: u64) -> Result<Kinds, String> {
    let window = number(config, "sliding_window")
        .or_else(|| number(config, "attention_chunk_size"))
        .unwrap_or(0);
    let mut k = Kinds {
        full: 0,
        sliding: 0,
        window,
        state: 0,
    };
    if let Some(types) = config.get("layer_types").and_then(|t| t.as_array()) {
        for t in types {
            match t.as_str().unwrap_or_default() {
                "full_attention" | "attention" | "global" => k.full += 1,
                "sliding_attention" | "sliding" | "chunked_attention" | "local" => k.sliding += 1,
                "linear_attention" | "mamba" | "mamba2" | "linear" => k.state += 1,
                other => {
                    return Err(format!(
                        "config.json names a layer type this version does not model ({other:?})"
                    ));
                }
            }
        }
        if k.sliding > 0 && window == 0 {
            return Err("config.json has sliding-window layers but no sliding_window".into());
        }
        return Ok(k);
    }
    if let Some(pattern) = config
        .get("hybrid_override_pattern")
        .and_then(|p| p.as_str())
    {
        k.full = pattern.chars().filter(|c| *c == '*').count() as u64;
        k.state = pattern.chars().filter(|c| *c == 'M').count() as u64;
        return Ok(k);
    }
    if let Some(n) = number(config, "full_attention_interval").filter(|n| *n > 0) {
        k.full = layers / n;
        k.state = layers - k.full;
        return Ok(k);
    }
    let sliding_on = window > 0
        && config
            .get("use_sliding_window")
            .and_then(|u| u.as_bool())
            .unwrap_or(true);
    if sliding_on {
        // Every `sliding_window_pattern`th layer is global (Gemma 3), else every layer slides.
        match number(config, "sliding_window_pattern").filter(|p| *p > 0) {
            Some(p) => {
                k.full = layers / p;
                k.sliding = layers - k.full;
            }
            None => k.sliding = layers,
        }
    } else {
        k.full = layers;
    }
    Ok(k)
}

/// Elements of one state layer's state per sequence: a gated-delta-net layer's (linear
/// attention: the recurrent state and the convolution's) or a Mamba-2 layer's.
fn state_elements(config: &serde_json::Value) -> Result<u64, String> {
    let n = |k: &str| number(config, k);
    if let (Some(kh), Some(vh), Some(kd), Some(vd)) = (
        n("linear_num_key_heads"),
        n("linear_num_value_heads"),
        n("linear_key_head_dim"),
        n("linear_value_head_dim"),
    ) {
        let conv = n("linear_conv_kernel_dim").unwrap_or(4).saturating_sub(1);
        return Ok(vh * kd * vd + conv * (2 * kh * kd + vh * vd));
    }
    if let (Some(h), Some(d), Some(s)) = (
        n("mamba_num_heads"),
        n("mamba_head_dim"),
        n("ssm_state_size"),
    ) {
        let groups = n("n_groups").unwrap_or(1);
        let conv = n("conv_kernel").unwrap_or(4).saturating_sub(1);
        return Ok(h * d * s + conv * (h * d + 2 * groups * s));
    }
    Err("config.json has linear-attention or Mamba layers but not the sizes of their state".into())
}

/// The bytes of a model's weights, and where the figure came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WeightsSize {
    pub bytes: u64,
    /// `model.safetensors.index.json metadata.total_size`, or which files were added up.
    pub from: String,
}

/// The index of a sharded safetensors checkpoint.
pub const INDEX: &str = "model.safetensors.index.json";

impl WeightsSize {
    /// From the text of `model.safetensors.index.json`, or its first bytes (its `metadata`
    /// comes first, the long `weight_map` after): its `metadata.total_size`.
    pub fn from_index(text: &str) -> Result<WeightsSize, String> {
        let whole = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| {
                let t = v.get("metadata")?.get("total_size")?;
                t.as_u64().or_else(|| t.as_f64().map(|f| f as u64))
            });
        let bytes = whole
            .or_else(|| {
                // A cut index: the number after the first `"total_size":`.
                let rest = &text[text.find("\"total_size\"")? + "\"total_size\"".len()..];
                let rest = rest.trim_start().strip_prefix(':')?.trim_start();
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .filter(|b| *b > 0)
            .ok_or_else(|| format!("{INDEX} has no metadata.total_size"))?;
        Ok(WeightsSize {
            bytes,
            from: format!("{INDEX} metadata.total_size"),
        })
    }

    /// From a listing of the model's files (path in the repo or folder, size): the
    /// `*.safetensors` files at its top level (a repo's `original/` copy in another format is
    /// not loaded by the engines), the `model*` shards only when a repo also ships a
    /// consolidated copy. `whence` says whose listing it is (`the Hub's listing`).
    pub fn from_files<'a>(
        files: impl IntoIterator<Item = (&'a str, u64)>,
        whence: &str,
    ) -> Result<WeightsSize, String> {
        let top: Vec<(&str, u64)> = files
            .into_iter()
            .filter(|(p, _)| !p.contains('/') && p.ends_with(".safetensors"))
            .collect();
        let sharded: Vec<&(&str, u64)> =
            top.iter().filter(|(p, _)| p.starts_with("model")).collect();
        let picked: Vec<&(&str, u64)> = if sharded.is_empty() {
            top.iter().collect()
        } else {
            sharded
        };
        if picked.is_empty() {
            return Err(format!("{whence} has no *.safetensors weights"));
        }
        Ok(WeightsSize {
            bytes: picked.iter().map(|(_, s)| s).sum(),
            from: format!(
                "the sizes of {} *.safetensors file{} ({whence})",
                picked.len(),
                if picked.len() == 1 { "" } else { "s" }
            ),
        })
    }
}

/// Why a GGUF model's KV layout is not known: it is in the file's header, not in a
/// `config.json`.
pub const GGUF_LAYOUT: &str =
    "a GGUF model's layers and heads are in its file's header, which spark-launch does not read";

impl WeightsSize {
    /// The picked GGUF file(s) of a listing (path, size): every part of the model (the
    /// projector is not counted: it is small and loaded beside it).
    pub fn of_gguf<'a>(
        parts: &[String],
        files: impl IntoIterator<Item = (&'a str, u64)>,
        whence: &str,
    ) -> Result<WeightsSize, String> {
        let sizes: Vec<u64> = files
            .into_iter()
            .filter(|(p, _)| parts.iter().any(|x| x == p))
            .map(|(_, s)| s)
            .collect();
        if sizes.is_empty() {
            return Err(format!("{whence} lists none of the picked GGUF files"));
        }
        Ok(WeightsSize {
            bytes: sizes.iter().sum(),
            from: format!(
                "the sizes of {} GGUF file{} ({whence})",
                sizes.len(),
                if sizes.len() == 1 { "" } else { "s" }
            ),
        })
    }
}

/// What is known of a model's memory: its KV layout and its weights, each or why not.
#[derive(Clone, Debug, PartialEq)]
pub struct Footprint {
    pub kv: Known<KvLayout>,
    pub weights: Known<WeightsSize>,
}

impl Footprint {
    /// Nothing read (`why`: what was not looked at).
    pub fn not_read(why: &str) -> Footprint {
        Footprint {
            kv: Known::NotKnown(why.to_string()),
            weights: Known::NotKnown(why.to_string()),
        }
    }
}

impl Default for Footprint {
    fn default() -> Self {
        Footprint::not_read("the model's config.json and weights were not read")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/models")
            .join(name)
            .join("config.json");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    const GIB: f64 = (1u64 << 30) as f64;

    #[test]
    fn gpt_oss_120b_keeps_half_its_layers_full_and_half_at_a_128_token_window() {
        let kv = KvLayout::parse(&fixture("openai--gpt-oss-120b")).unwrap();
        assert_eq!(
            (kv.full_layers, kv.sliding_layers, kv.window),
            (18, 18, 128)
        );
        assert_eq!(
            kv.per_token,
            PerToken::Heads {
                kv_heads: 8,
                head_dim: 64
            }
        );
        assert_eq!(kv.max_context, Some(131072));
        // llama.cpp's log of this model (tests/fixtures/models/README.md): 262144 cells of the 18 full
        // layers in f16 take 9216 MiB, the sliding layers' 1280 cells 90 MiB.
        let full = kv.full_layers as f64 * 262_144.0 * kv.per_token.elements(1) as f64 * 2.0;
        assert_eq!(full, 9216.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn minimax_m2_7_needs_23_25_gib_for_one_196608_token_sequence_per_node_at_tp_2() {
        // The figure vLLM printed on two Sparks at TP=2 (tests/fixtures/models/README.md):
        // "To serve at least one request with the model's max seq len (196608), 23.25 GiB KV
        // cache is needed".
        let kv = KvLayout::parse(&fixture("nvidia--MiniMax-M2.7-NVFP4")).unwrap();
        let b = kv.rank_bytes(196_608, 1, (2, 1), 2.0, 2.0) / GIB;
        assert!((b - 23.25).abs() < 0.005, "{b}");
    }

    #[test]
    fn qwen3_235b_per_rank_kv_matches_what_vllm_and_sglang_reported_at_tp_4() {
        let kv = KvLayout::parse(&fixture("Qwen--Qwen3-235B-A22B-FP8")).unwrap();
        // vLLM at TP=4 (tests/fixtures/models/README.md): 8.11 GiB of KV cache, 178,880 tokens.
        let per_token = kv.rank_bytes(1, 1, (4, 1), 2.0, 2.0);
        let tokens = 8.11 * GIB / per_token;
        assert!((tokens / 178_880.0 - 1.0).abs() < 0.02, "{tokens}");
        // SGLang, same model and TP: 367,404 tokens, K size 8.23 GB (its GB are GiB).
        let k = 367_404.0 * per_token / 2.0 / GIB;
        assert!((k - 8.23).abs() < 0.01, "{k}");
    }

    #[test]
    fn qwen3_next_keeps_a_growing_cache_on_12_of_48_layers_and_a_fixed_state_on_the_rest() {
        let kv = KvLayout::parse(&fixture("Qwen--Qwen3-Next-80B-A3B-Instruct")).unwrap();
        assert_eq!((kv.full_layers, kv.state_layers), (12, 36));
        assert_eq!(
            kv.per_token,
            PerToken::Heads {
                kv_heads: 2,
                head_dim: 256
            }
        );
        // 32 value heads of 128 × 128 plus the convolution's 3 × (2·16·128 + 32·128).
        assert_eq!(
            kv.state_elements,
            32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)
        );
        // A state layer costs the same at 1k and at 100k tokens; only the 12 full layers grow.
        let short = kv.rank_bytes(1_000, 1, (1, 1), 2.0, 2.0);
        let long = kv.rank_bytes(101_000, 1, (1, 1), 2.0, 2.0);
        assert_eq!(long - short, 100_000.0 * 12.0 * 2.0 * 2.0 * 256.0 * 2.0);
    }

    #[test]
    fn deepseek_v3_keeps_one_576_element_latent_per_layer_on_every_rank() {
        let kv = KvLayout::parse(&fixture("deepseek-ai--DeepSeek-V3")).unwrap();
        assert_eq!(kv.per_token, PerToken::Latent { dim: 576 });
        assert_eq!(kv.full_layers, 61);
        // Not split by tp: every rank keeps the whole latent.
        assert_eq!(
            kv.rank_bytes(1, 1, (8, 1), 2.0, 2.0),
            kv.rank_bytes(1, 1, (1, 1), 2.0, 2.0)
        );
    }

    #[test]
    fn kv_grows_with_the_context_and_the_sequences_and_shrinks_with_tp_and_pp() {
        let kv = KvLayout::parse(&fixture("nvidia--MiniMax-M2.7-NVFP4")).unwrap();
        let at = |t, s, tp, pp| kv.rank_bytes(t, s, (tp, pp), 2.0, 2.0);
        assert_eq!(at(8192, 1, 1, 1) * 4.0, at(32768, 1, 1, 1));
        assert_eq!(at(8192, 1, 1, 1) * 3.0, at(8192, 3, 1, 1));
        assert_eq!(at(8192, 1, 1, 1), at(8192, 1, 2, 1) * 2.0);
        assert_eq!(at(8192, 1, 1, 1), at(8192, 1, 1, 2) * 2.0);
        // 8 KV heads over 16 ranks: each rank keeps one head (replicated), not half of one.
        assert_eq!(at(8192, 1, 8, 1), at(8192, 1, 16, 1));
    }

    #[test]
    fn nemotron_h_counts_its_star_layers_as_attention_and_its_m_layers_as_state() {
        let kv = KvLayout::parse(
            r#"{"num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 8,
                "head_dim": 128, "hybrid_override_pattern": "M-M*-M-E",
                "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128,
                "n_groups": 8, "conv_kernel": 4}"#,
        )
        .unwrap();
        assert_eq!((kv.full_layers, kv.state_layers), (1, 3));
        assert_eq!(
            kv.state_elements,
            128 * 64 * 128 + 3 * (128 * 64 + 2 * 8 * 128)
        );
    }

    #[test]
    fn a_config_with_compressed_attention_or_an_unknown_layer_type_is_not_known_never_guessed() {
        let e = KvLayout::parse(
            r#"{"num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
                "head_dim": 512, "compress_ratios": [0, 4, 128]}"#,
        )
        .unwrap_err();
        assert!(e.contains("compress_ratios"), "{e}");
        let e = KvLayout::parse(
            r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8,
                "layer_types": ["full_attention", "cross_attention"]}"#,
        )
        .unwrap_err();
        assert!(e.contains("cross_attention"), "{e}");
        assert!(KvLayout::parse("<html>").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn a_qwen2_config_with_sliding_window_turned_off_is_all_full_attention() {
        let kv = KvLayout::parse(
            r#"{"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                "hidden_size": 3584, "sliding_window": 131072, "use_sliding_window": false,
                "torch_dtype": "bfloat16", "max_position_embeddings": 32768}"#,
        )
        .unwrap();
        assert_eq!((kv.full_layers, kv.sliding_layers), (28, 0));
        assert_eq!(
            kv.per_token,
            PerToken::Heads {
                kv_heads: 4,
                head_dim: 128
            }
        );
        assert_eq!(kv.dtype_bytes, Some(2.0));
    }

    #[test]
    fn weights_come_from_the_index_total_size_or_the_top_level_safetensors() {
        let w = WeightsSize::from_index(
            r#"{"metadata": {"total_size": 600000000000}, "weight_map": {}}"#,
        )
        .unwrap();
        assert_eq!(w.bytes, 600_000_000_000);
        assert!(WeightsSize::from_index(r#"{"weight_map": {}}"#).is_err());
        // The first bytes of a long index (read that way on a node) are enough.
        let cut =
            r#"{"metadata": {"total_size": 65248815744}, "weight_map": {"lm_head.weight": "mo"#;
        assert_eq!(WeightsSize::from_index(cut).unwrap().bytes, 65_248_815_744);
        // gpt-oss ships the same weights again under original/: only the top level counts.
        let w = WeightsSize::from_files(
            [
                ("model-00001-of-00002.safetensors", 10),
                ("model-00002-of-00002.safetensors", 5),
                ("original/model--00001-of-00001.safetensors", 15),
                ("config.json", 1),
            ],
            "the Hub's listing",
        )
        .unwrap();
        assert_eq!(w.bytes, 15);
        assert!(w.from.contains("2 *.safetensors files"), "{}", w.from);
        // A consolidated copy beside the shards is not counted twice.
        let w = WeightsSize::from_files(
            [
                ("consolidated.safetensors", 20),
                ("model-00001-of-00001.safetensors", 20),
            ],
            "x",
        )
        .unwrap();
        assert_eq!(w.bytes, 20);
        assert!(WeightsSize::from_files([("pytorch_model.bin", 3)], "x").is_err());
    }
}
