//! The engine command of a v2 recipe that has no `command:`, built from `defaults` with the
//! runtime's key → flag table as sparkrun defines it (each engine gives its table as data:
//! `engines::spelling::FlagTable`). Keys are emitted in table order; boolean keys as a bare
//! flag when true (default-on ones as `--no-…` when false); lists, mappings and JSON-looking
//! texts as quoted compact JSON. The command is assembled as the shell text sparkrun runs and
//! split as bash would. A key the table does not know is named in a warning — sparkrun drops
//! it silently. Pure.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::error::RecipeWarning;
use super::pyvalue::{plain_bool, python_str, shell_quote, v2_flag_value, v2_truthy};
use super::words::{self, WordsError};
use crate::workload::engines::EngineKind;
use crate::workload::engines::spelling::{FlagTable, NodeGated};

/// The key whose flag comes first in a built line.
const TP_KEY: &str = "tensor_parallel";

/// A generated engine command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    pub argv: Vec<String>,
    pub warnings: Vec<RecipeWarning>,
}

/// What a command-less v2 recipe is built from.
pub struct FlagInput<'a> {
    pub engine: EngineKind,
    /// The config chain: `defaults` with `--set` over it (without `model`).
    pub config: &'a BTreeMap<String, Value>,
    pub model: &'a str,
    pub model_revision: Option<&'a str>,
    /// Nodes the job spans (a table's node-gated key is passed on one node only).
    pub nodes: u32,
}

/// Builds the engine command from the engine's table; `None` for an engine without one.
pub fn generate(input: &FlagInput) -> Option<Result<Generated, WordsError>> {
    let table = input.engine.engine().recipe().table?;
    let mut config = input.config.clone();
    let mut warnings = Vec::new();
    for (alias, key) in table.aliases {
        if get(&config, key).is_none()
            && let Some(value) = get(&config, alias).cloned()
        {
            config.insert((*key).into(), value);
        }
    }
    let mut parts = head(table, input);
    if let Some(tp) = get(&config, TP_KEY).filter(|v| v2_truthy_number(v))
        && let Some((_, flag)) = table.flags.iter().find(|(k, _)| *k == TP_KEY)
    {
        parts.push((*flag).into());
        parts.push(python_str(tp));
    }
    for (key, flag) in table.flags {
        if table.skip.contains(key) {
            continue;
        }
        let Some(value) = get(&config, key) else {
            continue;
        };
        if table.bools.contains(key) {
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
            } else if table.negatable.contains(key) {
                parts.push(format!("--no-{}", &flag[2..]));
            }
        } else {
            parts.push((*flag).into());
            parts.push(v2_flag_value(value));
        }
    }
    if let Some(gated) = &table.node_gated {
        node_gated(
            input.engine,
            gated,
            &config,
            input.nodes,
            &mut parts,
            &mut warnings,
        );
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

/// The program words and the model: `vllm serve MODEL [--revision REV]` (a Hub model's
/// revision where the table has a flag for it), `sglang serve --model-path MODEL`.
fn head(table: &FlagTable, input: &FlagInput) -> Vec<String> {
    let mut parts: Vec<String> = table.program.iter().map(|w| w.to_string()).collect();
    if let Some(flag) = table.model_flag {
        parts.push(flag.into());
    }
    parts.push(shell_quote(input.model));
    let local = input.model.starts_with('/');
    if let Some(flag) = table.revision_flag
        && let Some(rev) = input.model_revision
        && !local
        && !input.model.contains(':')
    {
        parts.push(flag.into());
        parts.push(shell_quote(rev));
    }
    parts
}

/// A node-gated count: passed only where one launch owns the replicas (one node, or its
/// `unless` key true), else named in a warning.
fn node_gated(
    engine: EngineKind,
    gated: &NodeGated,
    config: &BTreeMap<String, Value>,
    nodes: u32,
    parts: &mut Vec<String>,
    warnings: &mut Vec<RecipeWarning>,
) {
    let Some(value) = get(config, gated.key) else {
        return;
    };
    let n = python_str(value).parse::<u64>().unwrap_or(1);
    if n <= 1 {
        return;
    }
    let unless = get(config, gated.unless).is_some_and(v2_truthy);
    if nodes <= 1 || unless {
        parts.push(gated.flag.into());
        parts.push(n.to_string());
    } else {
        warnings.push(RecipeWarning::new(
            format!("defaults.{}", gated.key),
            format!(
                "{n} is not passed: {} refuses {} across {nodes} nodes without {} (as sparkrun leaves it out)",
                engine.engine().title(),
                gated.flag,
                gated.unless
            ),
        ));
    }
}

/// Every `defaults`/`--set` key that no flag carries, named.
fn unknown_keys(input: &FlagInput, table: &FlagTable) -> Vec<RecipeWarning> {
    input
        .config
        .keys()
        .filter(|k| {
            !table.flags.iter().any(|(t, _)| t == k)
                && !table.aliases.iter().any(|(alias, _)| alias == k)
        })
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

    fn build(engine: EngineKind, text: &str, nodes: u32) -> Generated {
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
            EngineKind::Vllm,
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
            EngineKind::Sglang,
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
            EngineKind::Vllm,
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
            EngineKind::Sglang,
            "{tensor_parallel: 2, data_parallel: 2}",
            2,
        );
        assert!(!g.argv.contains(&"--dp-size".to_string()));
        assert_eq!(g.warnings[0].field, "defaults.data_parallel");
        let g = build(
            EngineKind::Sglang,
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
        let g = build(EngineKind::Vllm, "{trust_remote_code: 'on'}", 1);
        assert!(!g.argv.contains(&"--trust-remote-code".to_string()));
        assert_eq!(g.warnings[0].field, "defaults.trust_remote_code");
    }

    #[test]
    fn trtllm_has_no_table() {
        let c = config("{}");
        assert!(
            generate(&FlagInput {
                engine: EngineKind::Trtllm,
                config: &c,
                model: "m",
                model_revision: None,
                nodes: 1
            })
            .is_none()
        );
    }
}
