//! Atlas (Avarok's inference server for GB10, written in Rust; its program is `spark`): the
//! per-rank commands of `spark-launch atlas` and of sparkrun's `atlas` recipes.
//!
//! - **One rank per node.** Every node runs `spark serve MODEL` with the group's shape:
//!   `--tp-size`, `--ep-size`, and across nodes `--world-size`, its `--rank` and the head's
//!   `--master-addr`/`--master-port` (the head's control-plane address from derive; 29500,
//!   Atlas's own default). Atlas composes its two dimensions on the same ranks: the world is
//!   tp × ep (an orthogonal mesh) or tp = ep = world (overlapping groups), so expert
//!   parallelism across two Sparks is `--ep-size 2` with tp 1 (or tp 2 and ep 2 on the same
//!   two ranks). Atlas has no pipeline parallelism, and each of its ranks is one process on
//!   one GPU: with several GPUs a node would need several ranks, which is not planned.
//! - **The head serves, the workers do not.** Only rank 0 binds the API (`--bind`, `--port`);
//!   the workers get `--port 0`, as sparkrun gives them (an Atlas worker never serves HTTP).
//!   The head starts first and the workers once its rendezvous port answers, as sparkrun
//!   starts an Atlas group ([`StartOrder::HeadFirst`]).
//! - **NCCL between ranks**, with the derived fabric variables, and — across nodes — the GB10
//!   RoCE settings sparkrun's runtime and Atlas's own two-node scripts set
//!   ([`GB10_NCCL`]; a variable the derive or `--env` already set keeps its value).
//! - **The API key** is an Atlas bearer token, read from `--auth-token` or a tokens file: the
//!   head's container holds it in `SL_ATLAS_AUTH_TOKEN` (`<set>` in every printout), and a
//!   short script ([`KEY_SH`]) writes it to a file only root can read and runs Atlas with
//!   `--require-auth --auth-tokens-file FILE`, so the key is on no command line. `/health`
//!   and `/metrics` stay open, as Atlas keeps them.
//! - **Readiness**: Atlas binds its API only once the model is loaded and its scheduler runs,
//!   so `/health` answering is readiness; its log lines (`Model config:`, `Selected kernel
//!   target`, `OOM guard reserve`, `Quantization format`, `Listening on`) are the phases.
//!
//! Recipes: sparkrun's runtime `atlas` (the `@atlas` namespace it pre-registers is Avarok's
//! atlas-recipes) builds the line from `defaults` with its key → flag table, restated here as
//! data, plus two keys of those recipes that Atlas reads and sparkrun's table lacks.
//!
//! Pure: the decided plan in, the ranks' commands out.

use std::collections::BTreeMap;

use super::speculative::{RecipeDraft, SpecMethod, Speculative, setting_text};
use super::spelling::{FlagTable, ProgramWords, RecipeNamespace, RecipeRuntime, RecipeSpelling};
use super::{
    ApiKeySupport, CacheVar, EngineOptions, EnginePort, EngineRanks, FlagValues, GroupLine,
    GroupRefs, LogPhase, MultiNode, OwnedFlag, PortOn, PortReach, RankInput, ReadySignals,
    RecipeFlag, ServingEngine, StartOrder,
};
use crate::node::Role;
use crate::plan::ContainerSpec;
use crate::workload::memory::{EngineFraction, EngineMemory, FractionOf};
use crate::workload::serve::{Problem, ServeOptions};

/// The image used unless `--image` says otherwise: Avarok's public image, as sparkrun's
/// runtime and every atlas-recipes file name it. No versioned tag is published beside
/// `latest` in those sources, so this one is not pinned: `--image` pins one.
pub const DEFAULT_IMAGE: &str = "avarok/atlas-gb10:latest";
/// Atlas's own default `--port`.
pub const DEFAULT_PORT: u16 = 8888;
/// Atlas's own default `--master-port` (its NCCL bootstrap on rank 0).
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// Atlas's own `--gpu-memory-utilization` when none is given.
pub const DEFAULT_MEMORY_UTILIZATION: f64 = 0.90;
/// Where the head's container holds the API key for [`KEY_SH`].
pub const API_KEY_VAR: &str = "SL_ATLAS_AUTH_TOKEN";
/// Docker's security option that turns its seccomp filter off (io_uring for Atlas).
pub const SECCOMP_UNCONFINED: &str = "seccomp=unconfined";
/// The program and subcommand every rank runs.
const PROGRAM: [&str; 2] = ["spark", "serve"];

/// The head's command when a key is set: `sh -c KEY_SH spark-launch-atlas spark serve ARGS…`.
/// The key goes from the environment into a file only root reads, leaves the environment, and
/// Atlas is told to require it.
pub const KEY_SH: &str = r#"set -eu
if [ -z "${SL_ATLAS_AUTH_TOKEN:-}" ]; then
  echo "spark-launch: SL_ATLAS_AUTH_TOKEN is empty in the head's container" >&2
  exit 1
fi
umask 077
f=/tmp/spark-launch-atlas-tokens
printf '%s\n' "$SL_ATLAS_AUTH_TOKEN" > "$f"
unset SL_ATLAS_AUTH_TOKEN
exec "$@" --require-auth --auth-tokens-file "$f"
"#;

/// The NCCL settings sparkrun's `atlas` runtime gives a multi-node group, the ones Atlas's own
/// two-GB10 scripts (`scripts/start-minimax-ep2.sh`) run with: RoCE v2 over IPv4, no GPU
/// Direct RDMA or DMA-BUF (GB10's unified memory), no NVLS, the Simple protocol on a ring of
/// at most two channels, longer IB timeouts, NCCL's INFO log (which says the transport).
/// The interface and HCA variables are derived per node, never taken from here.
pub const GB10_NCCL: [(&str, &str); 16] = [
    ("NCCL_IB_DISABLE", "0"),
    ("NCCL_IB_ROCE_VERSION_NUM", "2"),
    ("NCCL_IB_ADDR_FAMILY", "AF_INET"),
    ("NCCL_IB_TIMEOUT", "22"),
    ("NCCL_IB_RETRY_CNT", "7"),
    ("NCCL_NET_GDR_LEVEL", "0"),
    ("NCCL_NET_GDR_C2C", "0"),
    ("NCCL_DMABUF_ENABLE", "0"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("NCCL_CUMEM_HOST_ENABLE", "0"),
    ("NCCL_PROTO", "Simple"),
    ("NCCL_ALGO", "Ring"),
    ("NCCL_BUFFSIZE", "33554432"),
    ("NCCL_MIN_NCHANNELS", "1"),
    ("NCCL_MAX_NCHANNELS", "2"),
    ("NCCL_DEBUG", "INFO"),
];

/// Atlas's startup, from its own log lines (`serve_load.rs`): the model's config read, the
/// kernel target chosen for it, the weights loading (the OOM guard is logged just before) and
/// loaded (the quantization format just after), the API listening.
static PROGRESS: [LogPhase; 5] = [
    LogPhase::any(&["listening on"], super::phases::API_STARTING),
    LogPhase::any(&["quantization format:"], "weights loaded"),
    LogPhase::any(&["oom guard reserve"], "loading weights"),
    LogPhase::any(&["selected kernel target"], "selecting kernels"),
    LogPhase::any(&["model config:"], "reading the model's config"),
];

static READY: ReadySignals = ReadySignals {
    health_path: "/health",
    models_path: "/v1/models",
    progress: &PROGRESS,
    // Atlas's own refusals of a model it cannot serve, before any weight is loaded.
    fatal: &[
        "no compiled kernel target matches",
        "kernel/model quant mismatch",
        "checkpoint pre-flight check failed",
    ],
};

/// `spark-launch atlas`.
pub struct Atlas;

impl ServingEngine for Atlas {
    fn name(&self) -> &'static str {
        "atlas"
    }
    fn title(&self) -> &'static str {
        "Atlas"
    }
    fn default_image(&self) -> &'static str {
        DEFAULT_IMAGE
    }
    fn default_port(&self) -> u16 {
        DEFAULT_PORT
    }
    fn api_key(&self) -> ApiKeySupport {
        ApiKeySupport::Env(API_KEY_VAR)
    }
    fn ready(&self) -> &'static ReadySignals {
        &READY
    }
    /// None: Atlas is one Rust binary whose CUDA kernels are built into it, and nothing it
    /// loads compiles at start.
    fn cache_vars(&self) -> &'static [CacheVar] {
        &[]
    }
    /// `draft_model`.
    fn recipe_draft(&self, settings: &BTreeMap<String, yaml_serde::Value>) -> Option<RecipeDraft> {
        RecipeDraft::hub(
            &setting_text(settings.get("draft_model")?)?,
            None,
            "draft_model",
        )
    }
    fn recipe(&self) -> &'static RecipeSpelling {
        &RECIPE
    }
    /// sparkrun pre-registers `@atlas` as Avarok's registry (reserved for that GitHub
    /// organization).
    fn recipe_namespace(&self) -> Option<RecipeNamespace> {
        Some(RECIPES)
    }
    fn world(&self, tp: u32, pp: u32, gpus: u32, tuning: &EngineOptions) -> Result<u64, Problem> {
        if pp > 1 {
            return Err(Problem {
                why: String::new(),
                what: format!("pipeline parallel {pp}: Atlas has no pipeline stages"),
                fix: "use --pp 1; spread the model with --tp and --ep".into(),
            });
        }
        let world = world_of(tp, ep(tuning));
        if world > 1 && gpus > 1 {
            return Err(Problem {
                why: String::new(),
                what: format!(
                    "Atlas runs each rank as its own process on one GPU; a group of {world} ranks on nodes of {gpus} GPUs needs several ranks per node, which spark-launch does not plan"
                ),
                fix:
                    "serve one rank per node (--gpus-per-node 1), or one rank alone (--tp 1 --ep 1)"
                        .into(),
            });
        }
        Ok(world)
    }
    fn start_order(&self, tuning: &EngineOptions) -> StartOrder {
        StartOrder::HeadFirst {
            port: master_port(tuning),
        }
    }
    fn multi_node(&self, _tuning: &EngineOptions, nodes: usize) -> MultiNode {
        if nodes > 1 {
            MultiNode::Native
        } else {
            MultiNode::Single
        }
    }
    fn ports(&self, tuning: &EngineOptions, api: u16, nodes: usize) -> Vec<EnginePort> {
        let mut ports = vec![EnginePort::api("Atlas API server", api)];
        if nodes > 1 {
            ports.push(EnginePort::one(
                "rendezvous",
                "NCCL bootstrap (Atlas --master-port)",
                master_port(tuning),
                PortOn::Head,
                PortReach::WorkersToHead,
            ));
        }
        ports
    }
    fn problems(&self, tuning: &EngineOptions) -> Vec<Problem> {
        match tuning.expert_parallel {
            Some(0) => vec![Problem {
                why: String::new(),
                what: "expert parallel 0".into(),
                fix: "use --ep N with N ≥ 1".into(),
            }],
            _ => Vec::new(),
        }
    }
    fn reserved_args(&self, args: &[String]) -> Vec<Problem> {
        super::reserved_flags(&Atlas, args, |f| match f.flag {
            RecipeFlag::Tp => "use --tp".to_string(),
            RecipeFlag::ExpertParallel => "use --ep".to_string(),
            RecipeFlag::Port => "use --port before `--`".to_string(),
            RecipeFlag::Host => "use --bind".to_string(),
            RecipeFlag::Rendezvous => "use --master-port before `--`".to_string(),
            RecipeFlag::ApiKey => {
                "use --api-key before `--` (it never goes on a command line)".to_string()
            }
            RecipeFlag::Model | RecipeFlag::ServedName => {
                "give the model as the MODEL argument; it is also the served name".to_string()
            }
            _ => format!("remove {}: spark-launch writes it per node", f.name),
        })
    }
    fn memory(&self, opts: &ServeOptions, _tuning: &EngineOptions) -> EngineMemory {
        let args = &opts.engine_args;
        let value = |f: &str| super::flag_value(args, &[f], str::to_string);
        EngineMemory {
            fraction: match value("--gpu-memory-utilization").and_then(super::parse_fraction) {
                Some(f) => EngineFraction::Given(f),
                None => EngineFraction::Default(DEFAULT_MEMORY_UTILIZATION),
            },
            // "Fraction of total GPU memory this process may consume": weights, buffers, KV
            // cache and reserves together, as vLLM's.
            fraction_of: FractionOf::Total,
            fraction_flag: "--gpu-memory-utilization",
            context: value("--max-seq-len").and_then(super::parse_count),
            context_flag: "--max-seq-len",
            sequences: value("--max-num-seqs").and_then(super::parse_count),
            sequences_flag: "--max-num-seqs",
            kv_dtype: value("--kv-cache-dtype").map(str::to_string),
        }
    }
    fn speculative_problems(&self, spec: &Speculative, args: &[String]) -> Vec<Problem> {
        let mut out = super::reserved(args, &SPECULATIVE_FLAGS, str::to_string, |_, arg| {
            format!(
                "remove {}: the profile's speculative block sets it ({})",
                arg.split('=').next().unwrap_or(arg),
                spec.method
            )
        });
        match (spec.method, &spec.draft_model, spec.tokens) {
            (SpecMethod::Mtp, None, _) => {}
            (SpecMethod::Mtp, Some(_), _) => out.push(Problem {
                why: String::new(),
                what: "speculative.draft_model: Atlas's MTP reads its head from the model's own checkpoint".into(),
                fix: "remove draft_model".into(),
            }),
            (SpecMethod::Ngram, _, 1) => {}
            (SpecMethod::Ngram, _, n) => out.push(Problem {
                why: String::new(),
                what: format!(
                    "speculative.tokens {n}: Atlas's n-gram drafts verify one token per step (K=2)"
                ),
                fix: "use tokens: 1".into(),
            }),
            (method, _, _) => out.push(Problem {
                why: String::new(),
                what: format!(
                    "speculative method {method}: Atlas drafts with its MTP head or n-grams only"
                ),
                fix: "use method: mtp or ngram, or serve with vllm or sglang".into(),
            }),
        }
        out
    }
    fn owned_flags(&self) -> &'static [OwnedFlag] {
        &OWNED
    }
    fn ranks(&self, input: &RankInput<'_>, mut containers: Vec<ContainerSpec>) -> EngineRanks {
        let o = input.opts;
        let n = input.env.nodes.len();
        let head_addr = input.env.nodes[0].control.addr;
        let ep = ep(input.tuning);
        for (rank, (env, spec)) in input.env.nodes.iter().zip(&mut containers).enumerate() {
            let head = env.role == Role::Head;
            // The image's entrypoint is `spark`; cleared, as sparkrun clears it, so that the
            // command is the whole line (and a recipe's mods can run before it).
            spec.entrypoint = Some(Vec::new());
            // io_uring's polling thread (`--high-speed-swap`) needs it, as sparkrun grants it.
            spec.cap_add.push("SYS_NICE".to_string());
            // Docker's default seccomp profile refuses the io_uring calls that
            // `--high-speed-swap` makes: unconfined, as sparkrun runs Atlas's containers.
            spec.security_opt.push(SECCOMP_UNCONFINED.to_string());
            if n > 1 {
                for (k, v) in GB10_NCCL {
                    spec.env
                        .entry(k.to_string())
                        .or_insert_with(|| v.to_string());
                }
            }
            let mut args: Vec<String> = PROGRAM.iter().map(|w| w.to_string()).collect();
            args.extend([
                input.model_path.to_string(),
                "--model-name".to_string(),
                input.served.to_string(),
                "--tp-size".to_string(),
                o.tp.to_string(),
                "--ep-size".to_string(),
                ep.to_string(),
            ]);
            if head {
                args.extend([
                    "--bind".to_string(),
                    input.host.to_string(),
                    "--port".to_string(),
                    o.port.to_string(),
                ]);
            } else {
                args.extend(["--port".to_string(), "0".to_string()]);
            }
            if n > 1 {
                args.extend([
                    "--world-size".to_string(),
                    n.to_string(),
                    "--rank".to_string(),
                    rank.to_string(),
                    "--master-addr".to_string(),
                    head_addr.to_string(),
                    "--master-port".to_string(),
                    master_port(input.tuning).to_string(),
                ]);
            }
            if let Some(s) = &input.tuning.speculative {
                args.extend(speculative_args(s));
            }
            args.extend(o.engine_args.iter().cloned());
            spec.command = if head && o.api_key.is_some() {
                let mut c = vec![
                    "sh".to_string(),
                    "-c".to_string(),
                    KEY_SH.to_string(),
                    "spark-launch-atlas".to_string(),
                ];
                c.extend(args);
                c
            } else {
                args
            };
        }
        EngineRanks {
            containers,
            waits: Vec::new(),
        }
    }
    /// `--world-size`, `--rank` and `--master-addr` from the group; the rendezvous port stays
    /// the plan's.
    fn group_line(
        &self,
        _mode: MultiNode,
        _role: Role,
        spec: &ContainerSpec,
        refs: &GroupRefs,
    ) -> GroupLine {
        let mut command = spec.command.clone();
        super::replace_value(&mut command, "--world-size", |_| refs.size.clone());
        super::replace_value(&mut command, "--rank", |_| refs.rank.clone());
        super::replace_value(&mut command, "--master-addr", |_| refs.leader.clone());
        GroupLine {
            env: BTreeMap::new(),
            command,
        }
    }
}

/// The expert-parallel size asked for (1 unless given).
fn ep(tuning: &EngineOptions) -> u32 {
    tuning.expert_parallel.unwrap_or(1).max(1)
}

/// Atlas's world: tp = ep on the same ranks (overlapping groups), else tp × ep (an orthogonal
/// mesh), as its topology rule and sparkrun's node count read it.
pub fn world_of(tp: u32, ep: u32) -> u64 {
    if tp == ep {
        u64::from(tp)
    } else {
        u64::from(tp) * u64::from(ep)
    }
}

fn master_port(tuning: &EngineOptions) -> u16 {
    tuning.rendezvous_port.unwrap_or(DEFAULT_MASTER_PORT)
}

/// Atlas's speculative flags, which a speculative block sets.
const SPECULATIVE_FLAGS: [&str; 6] = [
    "--speculative",
    "--num-drafts",
    "--ngram-speculative",
    "--self-speculative",
    "--dflash",
    "--draft-model",
];

/// The speculative block as Atlas's flags: its MTP head with N drafts per step, or n-grams.
pub fn speculative_args(s: &Speculative) -> Vec<String> {
    match s.method {
        SpecMethod::Ngram => vec!["--ngram-speculative".to_string()],
        _ => vec![
            "--speculative".to_string(),
            "--num-drafts".to_string(),
            s.tokens.to_string(),
        ],
    }
}

/// Avarok's recipe registry, `@atlas` in sparkrun.
pub const RECIPES: RecipeNamespace = RecipeNamespace {
    name: "atlas",
    url: "https://github.com/Avarok-Cybersecurity/atlas-recipes.git",
};

/// How recipes write Atlas: sparkrun's runtime `atlas` (never Ray: Atlas forms its own NCCL
/// group), its line `spark serve MODEL …`. The flag table is sparkrun's (spark-arena/sparkrun
/// `src/sparkrun/runtimes/atlas.py` at 0041b8f), restated as data, and `auth_token` read for
/// `api_key` as sparkrun reads it; `lm_head_dtype` and `fp8_kv_calibration_tokens`, which the
/// atlas-recipes set and Atlas reads (`--lm-head-dtype`, `--fp8-kv-calibration-tokens`), are
/// passed too, where sparkrun's table drops them.
static RECIPE: RecipeSpelling = RecipeSpelling {
    programs: &[ProgramWords::Command(&PROGRAM)],
    model_positional: true,
    data_parallel: &[],
    runtimes: &[RecipeRuntime {
        name: "atlas",
        ray: Some(false),
    }],
    hints: &[],
    fallback: false,
    ray_key: None,
    table: Some(&TABLE),
    sized_by_parallel: false,
    script: false,
};

static TABLE: FlagTable = FlagTable {
    program: &PROGRAM,
    model_flag: None,
    revision_flag: None,
    flags: TABLE_FLAGS,
    bools: TABLE_BOOLS,
    negatable: &[],
    skip: &["tensor_parallel"],
    aliases: &[("auth_token", "api_key")],
    node_gated: None,
};

/// Recipe key → flag, in sparkrun's order (its two additions last but one).
const TABLE_FLAGS: &[(&str, &str)] = &[
    ("port", "--port"),
    ("host", "--host"),
    ("tensor_parallel", "--tp-size"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_model_len", "--max-seq-len"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-prefill-tokens"),
    ("served_model_name", "--model-name"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("ep_size", "--ep-size"),
    ("max_batch_size", "--max-batch-size"),
    ("block_size", "--block-size"),
    ("kv_high_precision_layers", "--kv-high-precision-layers"),
    ("tool_call_parser", "--tool-call-parser"),
    ("tool_max_tokens", "--tool-max-tokens"),
    ("scheduling_policy", "--scheduling-policy"),
    ("tbt_deadline_ms", "--tbt-deadline-ms"),
    ("max_prefill_tokens", "--max-prefill-tokens"),
    ("oom_guard_mb", "--oom-guard-mb"),
    ("ssm_cache_slots", "--ssm-cache-slots"),
    ("ssm_checkpoint_interval", "--ssm-checkpoint-interval"),
    ("mtp_quantization", "--mtp-quantization"),
    ("mtp_vocab", "--mtp-vocab"),
    ("num_drafts", "--num-drafts"),
    ("draft_model", "--draft-model"),
    ("dflash_gamma", "--dflash-gamma"),
    ("dflash_window_size", "--dflash-window-size"),
    ("max_thinking_budget", "--max-thinking-budget"),
    ("model_from_path", "--model-from-path"),
    ("cache_dir", "--cache-dir"),
    ("gpu_ordinal", "--gpu-ordinal"),
    ("high_speed_swap_dir", "--high-speed-swap-dir"),
    ("high_speed_swap_gb", "--high-speed-swap-gb"),
    (
        "high_speed_swap_resident_blocks",
        "--high-speed-swap-resident-blocks",
    ),
    ("high_speed_swap_rank", "--high-speed-swap-rank"),
    ("high_speed_swap_qd", "--high-speed-swap-qd"),
    (
        "high_speed_swap_cache_blocks_per_seq",
        "--high-speed-swap-cache-blocks-per-seq",
    ),
    ("enable_prefix_caching", "--enable-prefix-caching"),
    ("speculative", "--speculative"),
    ("self_speculative", "--self-speculative"),
    ("ngram_speculative", "--ngram-speculative"),
    ("dflash", "--dflash"),
    ("disable_thinking", "--disable-thinking"),
    ("high_speed_swap", "--high-speed-swap"),
    ("require_auth", "--require-auth"),
    ("lm_head_dtype", "--lm-head-dtype"),
    ("fp8_kv_calibration_tokens", "--fp8-kv-calibration-tokens"),
    ("api_key", "--auth-token"),
];

/// Keys that are flags without a value.
const TABLE_BOOLS: &[&str] = &[
    "enable_prefix_caching",
    "speculative",
    "self_speculative",
    "ngram_speculative",
    "dflash",
    "disable_thinking",
    "high_speed_swap",
    "require_auth",
];

/// The flags of a `spark serve` line that spark-launch writes itself (or, the key, takes out
/// of every line). Atlas's parser is clap's: no abbreviations, `_` not read as `-`, `--host`
/// and `--served-model-name` aliases of `--bind` and `--model-name`.
static OWNED: [OwnedFlag; 15] = [
    OwnedFlag::one("--model-from-path", "--model-from-path", RecipeFlag::Model),
    OwnedFlag::one("--tp-size", "--tp-size", RecipeFlag::Tp),
    OwnedFlag::one("--ep-size", "--ep-size", RecipeFlag::ExpertParallel),
    OwnedFlag::one("--port", "--port", RecipeFlag::Port),
    OwnedFlag::one("--bind", "--bind", RecipeFlag::Host),
    OwnedFlag::one("--host", "--host", RecipeFlag::Host),
    OwnedFlag::one("--model-name", "--model-name", RecipeFlag::ServedName),
    OwnedFlag::one(
        "--served-model-name",
        "--served-model-name",
        RecipeFlag::ServedName,
    ),
    OwnedFlag::one("--master-port", "--master-port", RecipeFlag::Rendezvous),
    OwnedFlag::one("--master-addr", "--master-addr", RecipeFlag::Reserved),
    OwnedFlag::one("--world-size", "--world-size", RecipeFlag::Reserved),
    OwnedFlag::one("--rank", "--rank", RecipeFlag::Reserved),
    // Written with the key spark-launch enforces (--api-key), never without one.
    OwnedFlag::with(
        "--require-auth",
        "--require-auth",
        RecipeFlag::Reserved,
        FlagValues::None,
    ),
    OwnedFlag::one(
        "--auth-tokens-file",
        "--auth-tokens-file",
        RecipeFlag::Reserved,
    ),
    OwnedFlag::one("--auth-token", "--auth-token", RecipeFlag::ApiKey),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn the_world_is_tp_times_ep_unless_both_are_the_same_ranks() {
        assert_eq!(world_of(1, 1), 1);
        assert_eq!(world_of(1, 2), 2);
        assert_eq!(world_of(2, 2), 2);
        assert_eq!(world_of(2, 4), 8);
        let ep2 = EngineOptions {
            expert_parallel: Some(2),
            ..EngineOptions::default()
        };
        assert_eq!(Atlas.world(1, 1, 1, &ep2), Ok(2));
        assert!(
            Atlas
                .world(1, 2, 1, &ep2)
                .unwrap_err()
                .what
                .contains("pipeline")
        );
        assert!(
            Atlas
                .world(1, 1, 2, &ep2)
                .unwrap_err()
                .fix
                .contains("--gpus-per-node 1"),
            "two ranks on one node of two GPUs are not planned"
        );
        assert_eq!(Atlas.world(1, 1, 2, &EngineOptions::default()), Ok(1));
    }

    #[test]
    fn flags_spark_launch_writes_are_refused_in_extra_args_without_the_key() {
        let p = Atlas.reserved_args(&words(
            "--auth-token=sk-hidden --ep-size 2 --host 0.0.0.0 --max-seq-len 4096 --rank 1",
        ));
        let fixes: Vec<&str> = p.iter().map(|p| p.fix.as_str()).collect();
        assert_eq!(
            fixes,
            [
                "use --api-key before `--` (it never goes on a command line)",
                "use --ep",
                "use --bind",
                "remove --rank: spark-launch writes it per node"
            ]
        );
        assert!(!format!("{p:?}").contains("sk-hidden"), "{p:?}");
    }

    #[test]
    fn a_speculative_block_is_atlas_s_mtp_or_ngram_flags_or_refused() {
        let spec = |method, tokens| Speculative {
            method,
            draft_model: None,
            draft_revision: None,
            tokens,
        };
        assert_eq!(
            speculative_args(&spec(SpecMethod::Mtp, 2)),
            words("--speculative --num-drafts 2")
        );
        assert!(
            Atlas
                .speculative_problems(&spec(SpecMethod::Mtp, 2), &[])
                .is_empty()
        );
        assert_eq!(
            Atlas
                .speculative_problems(&spec(SpecMethod::Mtp, 2), &words("--num-drafts 3"))
                .len(),
            1
        );
        assert_eq!(
            Atlas
                .speculative_problems(&spec(SpecMethod::Ngram, 3), &[])
                .len(),
            1
        );
        assert!(
            Atlas.speculative_problems(&spec(SpecMethod::Eagle3, 3), &[])[0]
                .what
                .contains("eagle3")
        );
    }

    #[test]
    fn a_group_placed_by_others_gets_its_size_rank_and_leader_where_the_plan_wrote_them() {
        let job = crate::plan::JobName::new("j").unwrap();
        let node = crate::node::NodeName::new("b").unwrap();
        let mut spec = ContainerSpec::new(&job, &node, Role::Worker, "img");
        spec.command = words(
            "spark serve /m --port 0 --world-size 2 --rank 1 --master-addr 10.0.0.1 --master-port 29500",
        );
        let refs = GroupRefs {
            size: "$(SIZE)".into(),
            rank: "$(RANK)".into(),
            leader: "$(LEADER)".into(),
        };
        let line = Atlas.group_line(MultiNode::Native, Role::Worker, &spec, &refs);
        assert_eq!(
            line.command.join(" "),
            "spark serve /m --port 0 --world-size $(SIZE) --rank $(RANK) --master-addr $(LEADER) --master-port 29500"
        );
    }

    #[test]
    fn the_atlas_namespace_is_avarok_s_registry_and_names_this_engine() {
        let (kind, ns) = super::super::spelling::namespace("atlas").unwrap();
        assert_eq!(kind.engine().name(), "atlas");
        assert!(ns.url.contains("Avarok-Cybersecurity/atlas-recipes"));
        assert!(super::super::spelling::namespace("official").is_none());
        assert_eq!(
            super::super::spelling::runtime("atlas").map(|(k, r)| (k, r.ray)),
            Some((kind, Some(false)))
        );
    }

    #[test]
    fn progress_reads_atlas_s_own_startup_lines() {
        let phase = |line: &str| {
            let lower = line.to_lowercase();
            READY
                .progress
                .iter()
                .find(|p| p.matches(&lower))
                .map(|p| p.phase)
        };
        assert_eq!(
            phase(
                "INFO spark_server: Selected kernel target: qwen3.5-35b (212 modules) — quant compat: kernel=nvfp4 model=nvfp4 OK"
            ),
            Some("selecting kernels")
        );
        assert_eq!(
            phase("INFO OOM guard reserve: 1024 MB"),
            Some("loading weights")
        );
        assert_eq!(
            phase("INFO Listening on 0.0.0.0:8888"),
            Some(super::super::phases::API_STARTING)
        );
        assert_eq!(phase("INFO Port: 8888"), None);
    }
}
