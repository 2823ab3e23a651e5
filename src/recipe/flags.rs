//! The engine command of a v2 recipe that has no `command:`, built from `defaults` with the
//! runtime's key → flag table as sparkrun defines it (read from spark-arena/sparkrun:
//! `src/sparkrun/runtimes/_vllm_common.py` at 04e6f1e2 for vLLM, `runtimes/sglang.py` at
//! 01298828 for SGLang; tables restated here as data). Keys are emitted in table order;
//! boolean keys as a bare flag when true (vLLM's default-on ones as `--no-…` when false);
//! lists, mappings and JSON-looking texts as quoted compact JSON. The command is assembled as
//! the shell text sparkrun runs and split as bash would. A key the table does not know is
//! named in a warning — sparkrun drops it silently. Pure.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::error::RecipeWarning;
use super::pyvalue::{plain_bool, python_str, shell_quote, v2_flag_value, v2_truthy};
use super::runtime::RecipeEngine;
use super::words::{self, WordsError};

/// vLLM: recipe key → flag, in sparkrun's order.
const VLLM_FLAGS: &[(&str, &str)] = &[
    ("port", "--port"),
    ("host", "--host"),
    ("tensor_parallel", "-tp"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_model_len", "--max-model-len"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
    ("max_num_seqs", "--max-num-seqs"),
    ("served_model_name", "--served-model-name"),
    ("dtype", "--dtype"),
    ("quantization", "--quantization"),
    ("enforce_eager", "--enforce-eager"),
    ("enable_prefix_caching", "--enable-prefix-caching"),
    ("trust_remote_code", "--trust-remote-code"),
    (
        "distributed_executor_backend",
        "--distributed-executor-backend",
    ),
    ("pipeline_parallel", "-pp"),
    ("data_parallel", "--data-parallel-size"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("otlp_traces_endpoint", "--otlp-traces-endpoint"),
    ("api_key", "--api-key"),
    ("attention_backend", "--attention-backend"),
    ("load_format", "--load-format"),
    ("reasoning_parser", "--reasoning-parser"),
    ("tool_call_parser", "--tool-call-parser"),
    ("chat_template", "--chat-template"),
    ("speculative_config", "--speculative-config"),
    ("tokenizer_mode", "--tokenizer-mode"),
    ("mm_encoder_tp_mode", "--mm-encoder-tp-mode"),
    ("block_size", "--block-size"),
    ("seed", "--seed"),
    ("enable_auto_tool_choice", "--enable-auto-tool-choice"),
    ("enable_chunked_prefill", "--enable-chunked-prefill"),
    ("async_scheduling", "--async-scheduling"),
    ("generation_config", "--generation-config"),
    ("hf_overrides", "--hf-overrides"),
    ("compilation_config", "--compilation-config"),
    ("attention_config", "--attention-config"),
    ("model_loader_extra_config", "--model-loader-extra-config"),
    (
        "default_chat_template_kwargs",
        "--default-chat-template-kwargs",
    ),
    ("limit_mm_per_prompt", "--limit-mm-per-prompt"),
    ("mm_processor_cache_gb", "--mm-processor-cache-gb"),
    ("kv_cache_memory_bytes", "--kv-cache-memory-bytes"),
    ("max_cudagraph_capture_size", "--max-cudagraph-capture-size"),
    (
        "long_prefill_token_threshold",
        "--long-prefill-token-threshold",
    ),
    ("mamba_cache_mode", "--mamba-cache-mode"),
    ("safetensors_load_strategy", "--safetensors-load-strategy"),
    ("moe_backend", "--moe-backend"),
    (
        "enable_prompt_tokens_details",
        "--enable-prompt-tokens-details",
    ),
    ("enable_force_include_usage", "--enable-force-include-usage"),
    ("enable_request_id_headers", "--enable-request-id-headers"),
    ("enable_flashinfer_autotune", "--enable-flashinfer-autotune"),
    ("linear_backend", "--linear-backend"),
    ("gdn_prefill_backend", "--gdn-prefill-backend"),
    ("gdn_decode_kernel", "--gdn-decode-kernel"),
    ("kda_prefill_backend", "--kda-prefill-backend"),
    ("mamba_backend", "--mamba-backend"),
    (
        "recurrent_checkpoint_policy",
        "--recurrent-checkpoint-policy",
    ),
    (
        "prefix_cache_retention_interval",
        "--prefix-cache-retention-interval",
    ),
    ("engram_config", "--engram-config"),
    ("dcp_comm_backend", "--dcp-comm-backend"),
    ("prefill_policy", "--prefill-policy"),
    ("prefill_compute_share", "--prefill-compute-share"),
    ("prefill_compute_half_life", "--prefill-compute-half-life"),
    ("prefill_schedule_interval", "--prefill-schedule-interval"),
    ("max_parallel_prefills", "--max-parallel-prefills"),
    ("decode_refill_target", "--decode-refill-target"),
    ("scheduler_reserve_full_isl", "--scheduler-reserve-full-isl"),
    ("jit_monitor_mode", "--jit-monitor-mode"),
    ("disable_custom_all_reduce", "--disable-custom-all-reduce"),
];

/// vLLM keys that are flags without a value.
const VLLM_BOOLS: &[&str] = &[
    "enforce_eager",
    "enable_prefix_caching",
    "trust_remote_code",
    "enable_auto_tool_choice",
    "enable_chunked_prefill",
    "async_scheduling",
    "enable_prompt_tokens_details",
    "enable_force_include_usage",
    "enable_request_id_headers",
    "enable_flashinfer_autotune",
    "scheduler_reserve_full_isl",
    "disable_custom_all_reduce",
];

/// vLLM booleans that are on unless turned off: `false` becomes `--no-<flag>`.
const VLLM_NEGATABLE: &[&str] = &[
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "async_scheduling",
    "enable_flashinfer_autotune",
    "scheduler_reserve_full_isl",
];

/// SGLang: recipe key → flag, in sparkrun's order.
const SGLANG_FLAGS: &[(&str, &str)] = &[
    ("port", "--port"),
    ("host", "--host"),
    ("tensor_parallel", "--tp-size"),
    ("pipeline_parallel", "--pp-size"),
    ("data_parallel", "--dp-size"),
    ("enable_dp_attention", "--enable-dp-attention"),
    ("gpu_memory_utilization", "--mem-fraction-static"),
    ("max_model_len", "--context-length"),
    ("max_num_seqs", "--max-running-requests"),
    ("served_model_name", "--served-model-name"),
    ("dtype", "--dtype"),
    ("quantization", "--quantization"),
    ("trust_remote_code", "--trust-remote-code"),
    ("chunked_prefill", "--chunked-prefill-size"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("tokenizer_path", "--tokenizer-path"),
    ("api_key", "--api-key"),
    ("attention_backend", "--attention-backend"),
    ("load_format", "--load-format"),
    ("reasoning_parser", "--reasoning-parser"),
    ("tool_call_parser", "--tool-call-parser"),
    ("mm_feature_transport", "--mm-feature-transport"),
    ("speculative_algorithm", "--speculative-algorithm"),
    (
        "speculative_draft_model_path",
        "--speculative-draft-model-path",
    ),
    (
        "speculative_draft_model_revision",
        "--speculative-draft-model-revision",
    ),
    ("speculative_num_steps", "--speculative-num-steps"),
    ("speculative_eagle_topk", "--speculative-eagle-topk"),
    (
        "speculative_num_draft_tokens",
        "--speculative-num-draft-tokens",
    ),
    (
        "speculative_dspark_block_size",
        "--speculative-dspark-block-size",
    ),
    ("cuda_graph_bs", "--cuda-graph-bs"),
    ("cuda_graph_max_bs", "--cuda-graph-max-bs"),
    ("cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode"),
    ("torch_compile_max_bs", "--torch-compile-max-bs"),
    (
        "num_continuous_decode_steps",
        "--num-continuous-decode-steps",
    ),
    ("fp8_gemm_backend", "--fp8-gemm-backend"),
    ("fp4_gemm_backend", "--fp4-gemm-backend"),
    ("moe_runner_backend", "--moe-runner-backend"),
    ("mamba_ssm_dtype", "--mamba-ssm-dtype"),
    ("mamba_full_memory_ratio", "--mamba-full-memory-ratio"),
    ("enable_torch_compile", "--enable-torch-compile"),
    ("disable_radix_cache", "--disable-radix-cache"),
    ("disable_prefill_cuda_graph", "--disable-prefill-cuda-graph"),
];

/// SGLang keys that are flags without a value.
const SGLANG_BOOLS: &[&str] = &[
    "enable_dp_attention",
    "trust_remote_code",
    "enable_torch_compile",
    "disable_radix_cache",
    "disable_prefill_cuda_graph",
];

/// A generated engine command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    pub argv: Vec<String>,
    pub warnings: Vec<RecipeWarning>,
}

/// What a command-less v2 recipe is built from.
pub struct FlagInput<'a> {
    pub engine: RecipeEngine,
    /// The config chain: `defaults` with `--set` over it (without `model`).
    pub config: &'a BTreeMap<String, Value>,
    pub model: &'a str,
    pub model_revision: Option<&'a str>,
    /// Nodes the job spans (SGLang refuses `--dp-size` across nodes without DP attention).
    pub nodes: u32,
}

/// Builds the engine command from the table; `None` for an engine without a table (trtllm).
pub fn generate(input: &FlagInput) -> Option<Result<Generated, WordsError>> {
    let (table, bools, negatable, skip): (_, _, &[&str], &[&str]) = match input.engine {
        RecipeEngine::Vllm => (
            VLLM_FLAGS,
            VLLM_BOOLS,
            VLLM_NEGATABLE,
            &["tensor_parallel", "distributed_executor_backend"],
        ),
        RecipeEngine::Sglang => (
            SGLANG_FLAGS,
            SGLANG_BOOLS,
            &[],
            &["tensor_parallel", "data_parallel"],
        ),
        RecipeEngine::Trtllm => return None,
    };
    let mut config = input.config.clone();
    let mut warnings = Vec::new();
    if input.engine == RecipeEngine::Sglang
        && get(&config, "speculative_draft_model_path").is_none()
        && let Some(alias) = get(&config, "speculative_draft_model").cloned()
    {
        config.insert("speculative_draft_model_path".into(), alias);
    }
    let mut parts = head(input);
    if let Some(tp) = get(&config, "tensor_parallel").filter(|v| v2_truthy_number(v)) {
        let flag = if input.engine == RecipeEngine::Vllm {
            "-tp"
        } else {
            "--tp-size"
        };
        parts.push(flag.into());
        parts.push(python_str(tp));
    }
    for (key, flag) in table {
        if skip.contains(key) {
            continue;
        }
        let Some(value) = get(&config, key) else {
            continue;
        };
        if bools.contains(key) {
            if !plain_bool(value) {
                warnings.push(RecipeWarning::new(
                    format!("defaults.{key}"),
                    format!(
                        "{} read as {} (sparkrun's reading: true when the text holds 1, t or y)",
                        python_str(value),
                        v2_truthy(value)
                    ),
                ));
            }
            if v2_truthy(value) {
                parts.push((*flag).into());
            } else if negatable.contains(key) {
                parts.push(format!("--no-{}", &flag[2..]));
            }
        } else {
            parts.push((*flag).into());
            parts.push(v2_flag_value(value));
        }
    }
    if input.engine == RecipeEngine::Sglang {
        sglang_dp(&config, input.nodes, &mut parts, &mut warnings);
    }
    warnings.extend(unknown_keys(input, table));
    Some(words::split(&parts.join(" ")).map(|w| Generated {
        argv: w.argv,
        warnings,
    }))
}

fn get<'c>(config: &'c BTreeMap<String, Value>, key: &str) -> Option<&'c Value> {
    config.get(key).filter(|v| !v.is_null())
}

/// Python truthiness of a `tensor_parallel` value (`if tp:`).
fn v2_truthy_number(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Bool(b) => *b,
        _ => true,
    }
}

/// The program words: `vllm serve MODEL [--revision REV]`, `sglang serve --model-path MODEL`.
fn head(input: &FlagInput) -> Vec<String> {
    match input.engine {
        RecipeEngine::Vllm => {
            let mut parts = vec!["vllm".into(), "serve".into(), shell_quote(input.model)];
            let local = input.model.starts_with('/');
            if let Some(rev) = input.model_revision
                && !local
                && !input.model.contains(':')
            {
                parts.push("--revision".into());
                parts.push(shell_quote(rev));
            }
            parts
        }
        _ => vec![
            "sglang".into(),
            "serve".into(),
            "--model-path".into(),
            shell_quote(input.model),
        ],
    }
}

/// SGLang's `--dp-size`: only where one launch owns the replicas (one node, or DP attention).
fn sglang_dp(
    config: &BTreeMap<String, Value>,
    nodes: u32,
    parts: &mut Vec<String>,
    warnings: &mut Vec<RecipeWarning>,
) {
    let Some(dp) = get(config, "data_parallel") else {
        return;
    };
    let n = python_str(dp).parse::<u64>().unwrap_or(1);
    if n <= 1 {
        return;
    }
    let attention = get(config, "enable_dp_attention").is_some_and(v2_truthy);
    if nodes <= 1 || attention {
        parts.push("--dp-size".into());
        parts.push(n.to_string());
    } else {
        warnings.push(RecipeWarning::new(
            "defaults.data_parallel",
            format!("{n} is not passed: SGLang refuses --dp-size across {nodes} nodes without enable_dp_attention (as sparkrun leaves it out)"),
        ));
    }
}

/// Every `defaults`/`--set` key that no flag carries, named.
fn unknown_keys(input: &FlagInput, table: &[(&str, &str)]) -> Vec<RecipeWarning> {
    let consumed: &[&str] = match input.engine {
        RecipeEngine::Vllm => &["distributed_executor_backend"],
        _ => &["speculative_draft_model"],
    };
    input
        .config
        .keys()
        .filter(|k| !table.iter().any(|(t, _)| t == k) && !consumed.contains(&k.as_str()))
        .map(|k| {
            RecipeWarning::new(
                format!("defaults.{k}"),
                format!(
                    "the {} flag table has no `{k}`: not passed to the engine (sparkrun drops it too; give the recipe a command: to pass it)",
                    input.engine
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> BTreeMap<String, Value> {
        yaml_serde::from_str(text).unwrap()
    }

    fn build(engine: RecipeEngine, text: &str, nodes: u32) -> Generated {
        let c = config(text);
        generate(&FlagInput {
            engine,
            config: &c,
            model: "org/m",
            model_revision: Some("abc"),
            nodes,
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn a_vllm_command_comes_from_defaults_in_table_order() {
        let g = build(
            RecipeEngine::Vllm,
            "{port: 8000, tensor_parallel: 2, gpu_memory_utilization: 0.85, trust_remote_code: true, enable_prefix_caching: false, speculative_config: {method: mtp, num_speculative_tokens: 3}}",
            2,
        );
        assert_eq!(
            g.argv,
            [
                "vllm",
                "serve",
                "org/m",
                "--revision",
                "abc",
                "-tp",
                "2",
                "--port",
                "8000",
                "--gpu-memory-utilization",
                "0.85",
                "--no-enable-prefix-caching",
                "--trust-remote-code",
                "--speculative-config",
                "{\"method\":\"mtp\",\"num_speculative_tokens\":3}"
            ]
        );
        assert!(g.warnings.is_empty(), "{:?}", g.warnings);
    }

    #[test]
    fn an_sglang_command_comes_from_defaults_with_its_own_flags() {
        let g = build(
            RecipeEngine::Sglang,
            "{tensor_parallel: 2, gpu_memory_utilization: 0.8, max_model_len: 32768, speculative_draft_model: org/draft, speculative_algorithm: EAGLE, disable_radix_cache: false}",
            2,
        );
        assert_eq!(
            g.argv,
            [
                "sglang",
                "serve",
                "--model-path",
                "org/m",
                "--tp-size",
                "2",
                "--mem-fraction-static",
                "0.8",
                "--context-length",
                "32768",
                "--speculative-algorithm",
                "EAGLE",
                "--speculative-draft-model-path",
                "org/draft"
            ]
        );
    }

    #[test]
    fn keys_the_table_does_not_know_are_named_never_dropped_silently() {
        let g = build(
            RecipeEngine::Vllm,
            "{port: 1, expert_parallel: 2, mystery: x}",
            1,
        );
        let fields: Vec<_> = g.warnings.iter().map(|w| w.field.as_str()).collect();
        assert_eq!(fields, ["defaults.expert_parallel", "defaults.mystery"]);
        assert!(
            g.warnings[0]
                .message
                .starts_with("the vllm flag table has no `expert_parallel`")
        );
    }

    #[test]
    fn sglang_dp_size_is_kept_off_a_multi_node_launch_without_dp_attention() {
        let g = build(
            RecipeEngine::Sglang,
            "{tensor_parallel: 2, data_parallel: 2}",
            2,
        );
        assert!(!g.argv.contains(&"--dp-size".to_string()));
        assert_eq!(g.warnings[0].field, "defaults.data_parallel");
        let g = build(
            RecipeEngine::Sglang,
            "{tensor_parallel: 2, data_parallel: 2, enable_dp_attention: true}",
            2,
        );
        assert!(
            g.argv
                .ends_with(&["--dp-size".to_string(), "2".to_string()])
        );
    }

    #[test]
    fn a_surprising_boolean_text_is_warned_about() {
        let g = build(RecipeEngine::Vllm, "{trust_remote_code: 'on'}", 1);
        assert!(!g.argv.contains(&"--trust-remote-code".to_string()));
        assert_eq!(g.warnings[0].field, "defaults.trust_remote_code");
    }

    #[test]
    fn trtllm_has_no_table() {
        let c = config("{}");
        assert!(
            generate(&FlagInput {
                engine: RecipeEngine::Trtllm,
                config: &c,
                model: "m",
                model_revision: None,
                nodes: 1
            })
            .is_none()
        );
    }
}
