//! vLLM across nodes: the per-rank commands of `spark-launch vllm`.
//!
//! - **native** (default, no Ray): every node runs `vllm serve` with `--nnodes`,
//!   `--node-rank`, `--master-addr`/`--master-port` (the head's control-plane address from
//!   derive) and the multiprocessing backend; workers run `--headless`, the head serves the API.
//! - **ray**: the head container starts a Ray head and waits (inside the container) until Ray
//!   lists every node alive, with its GPUs, at the address derive chose for it
//!   (`VLLM_HOST_IP`/`RAY_NODE_IP_ADDRESS`); only then it runs `vllm serve
//!   --distributed-executor-backend ray`. Worker containers join the Ray head and block.
//!   spark-launch watches the same membership from outside (`WaitRay`) to say which node is
//!   missing or joined from the wrong address.
//!
//! Scripts end with `exec "$@"`: the engine's arguments travel as the container's argv, never
//! re-quoted, so `-- extra args` reach vLLM verbatim. The API key reaches vLLM as
//! `VLLM_API_KEY` in the head's environment. A speculative block becomes one
//! `--speculative-config` JSON on every rank.
//!
//! Pure: the decided plan in, the ranks' commands out.

use super::speculative::{RecipeDraft, SpecMethod, Speculative};
use std::collections::BTreeMap;

use super::spelling::{FlagTable, ProgramWords, RecipeRuntime, RecipeSpelling};
use super::{
    ApiKeySupport, CacheVar, EngineOptions, EnginePort, EngineRanks, FlagValues, GroupLine,
    GroupRefs, LogPhase, MultiNode, OwnedFlag, PortOn, PortReach, RankInput, ReadySignals,
    RecipeFlag, ServingEngine, caches, phases, ray,
};
use crate::node::Role;
use crate::plan::{ContainerSpec, RayMember};
use crate::workload::memory::{EngineFraction, EngineMemory, FractionOf};
use crate::workload::serve::{Problem, ServeOptions};
use crate::workload::steps;

/// The image used unless `--image` says otherwise: NVIDIA's NGC build (multi-arch, arm64
/// for DGX Spark), pinned so that a plan means the same thing tomorrow.
pub const DEFAULT_IMAGE: &str = "nvcr.io/nvidia/vllm:26.04-py3";
pub const DEFAULT_PORT: u16 = 8000;
/// vLLM's own default rendezvous port for the multiprocessing backend.
pub const DEFAULT_MASTER_PORT: u16 = 29501;
/// vLLM's own `--gpu-memory-utilization` when none is given.
pub const DEFAULT_MEMORY_UTILIZATION: f64 = 0.9;
/// The environment variable vLLM reads its API key from.
pub const API_KEY_VAR: &str = "VLLM_API_KEY";

/// Where vLLM and the libraries it loads keep what they compile at start: vLLM's own root
/// (`VLLM_CACHE_ROOT`, read by `vllm/envs.py`; its `torch_compile_cache/` holds the compiled
/// graphs, keyed by vLLM's hash of its configuration and code), TorchInductor's, Triton's and
/// FlashInfer's, and the XDG cache for what follows it.
pub const CACHE_VARS: &[CacheVar] = &[
    CacheVar {
        var: "VLLM_CACHE_ROOT",
        sub: "vllm",
    },
    caches::INDUCTOR,
    caches::TRITON,
    caches::FLASHINFER,
    caches::XDG,
];

/// How vLLM's ranks find each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VllmMode {
    Native { master_port: u16 },
    Ray { ray_port: u16 },
}

impl VllmMode {
    /// The mode the request's options ask for.
    pub fn of(t: &EngineOptions) -> VllmMode {
        if t.ray {
            VllmMode::Ray {
                ray_port: t.ray_port.unwrap_or(ray::DEFAULT_PORT),
            }
        } else {
            VllmMode::Native {
                master_port: t.rendezvous_port.unwrap_or(DEFAULT_MASTER_PORT),
            }
        }
    }
}

/// vLLM's progress lines (and every engine's, which are a subset: see `GENERIC_SIGNALS`).
pub(super) static PROGRESS: [LogPhase; 8] = [
    phases::SHARDS,
    phases::LOADED,
    phases::LOADING,
    phases::CUDA_GRAPHS,
    phases::COMPILING,
    phases::KV_CACHE,
    LogPhase::any(
        &[
            phases::UVICORN[0],
            phases::UVICORN[1],
            "starting vllm api server",
        ],
        phases::API_STARTING,
    ),
    phases::DISTRIBUTED,
];

static READY: ReadySignals = ReadySignals {
    health_path: "/health",
    models_path: "/v1/models",
    progress: &PROGRESS,
    fatal: &[],
};

/// The head container's script in Ray mode. `$SL_RAY_EXPECT` holds the expected members.
const RAY_HEAD_SH: &str = r#"set -eu
echo "spark-launch: starting the Ray head on $VLLM_HOST_IP:$SL_RAY_PORT"
ray start --head --port="$SL_RAY_PORT" --node-ip-address="$VLLM_HOST_IP" --num-gpus="$SL_GPUS" --disable-usage-stats
python3 - <<'PY'
import json, os, sys, time
import ray
want = json.loads(os.environ["SL_RAY_EXPECT"])
deadline = time.time() + float(os.environ.get("SL_RAY_TIMEOUT", "600"))
ray.init(address="auto", logging_level="ERROR")
last = None
while True:
    seen = {n.get("NodeManagerAddress"): float(n.get("Resources", {}).get("GPU", 0))
            for n in ray.nodes() if n.get("Alive")}
    missing = [w for w in want if seen.get(w["ip"], -1) < w["gpus"]]
    state = sorted(seen.items())
    if state != last:
        print("spark-launch: ray: %d/%d nodes: %s" % (len(want) - len(missing), len(want),
              ", ".join("%s (%g GPU)" % kv for kv in state)), flush=True)
        last = state
    if not missing:
        print("spark-launch: ray: cluster complete", flush=True)
        break
    if time.time() > deadline:
        print("spark-launch: ray: ERROR missing %s" % ", ".join("%s at %s" % (w["node"], w["ip"]) for w in missing), flush=True)
        sys.exit(1)
    time.sleep(2)
PY
exec "$@"
"#;

/// A worker container's script in Ray mode: join the head (retrying while it starts), block.
const RAY_WORKER_SH: &str = r#"set -u
for i in $(seq 1 150); do
  ray start --block --address="$SL_RAY_HEAD" --node-ip-address="$VLLM_HOST_IP" --num-gpus="$SL_GPUS" --disable-usage-stats && exit 0
  ray stop --force >/dev/null 2>&1 || true
  sleep 2
done
echo "spark-launch: ERROR could not join the Ray head at $SL_RAY_HEAD" >&2
exit 1
"#;

/// `spark-launch vllm`.
pub struct Vllm;

impl ServingEngine for Vllm {
    fn name(&self) -> &'static str {
        "vllm"
    }
    fn title(&self) -> &'static str {
        "vLLM"
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
    fn cache_vars(&self) -> &'static [CacheVar] {
        CACHE_VARS
    }
    /// `speculative_config`'s `model` (and `revision`), the JSON text vLLM takes or a mapping.
    fn recipe_draft(&self, settings: &BTreeMap<String, yaml_serde::Value>) -> Option<RecipeDraft> {
        let config: serde_json::Value = match settings.get("speculative_config")? {
            yaml_serde::Value::String(json) => serde_json::from_str(json).ok()?,
            mapping @ yaml_serde::Value::Mapping(_) => serde_json::to_value(mapping).ok()?,
            _ => return None,
        };
        RecipeDraft::hub(
            config.get("model")?.as_str()?,
            config.get("revision").and_then(|r| r.as_str()),
            "speculative_config",
        )
    }
    fn ray(&self) -> bool {
        true
    }
    fn multi_node(&self, tuning: &EngineOptions, _nodes: usize) -> MultiNode {
        match VllmMode::of(tuning) {
            VllmMode::Native { .. } => MultiNode::Native,
            VllmMode::Ray { .. } => MultiNode::Ray,
        }
    }
    fn ports(&self, tuning: &EngineOptions, api: u16, nodes: usize) -> Vec<EnginePort> {
        let mut ports = vec![EnginePort::api("vLLM API server", api)];
        match VllmMode::of(tuning) {
            VllmMode::Native { master_port } if nodes > 1 => ports.push(EnginePort::one(
                "rendezvous",
                "torch.distributed rendezvous (vLLM --master-port)",
                master_port,
                PortOn::Head,
                PortReach::WorkersToHead,
            )),
            VllmMode::Native { .. } => {}
            // The Ray head listens even alone: vLLM's Ray backend connects to it.
            VllmMode::Ray { ray_port } => {
                ports.push(EnginePort::one(
                    "Ray",
                    "Ray GCS",
                    ray_port,
                    PortOn::Head,
                    PortReach::WorkersToHead,
                ));
                let (first, last) = ray::WORKER_PORTS;
                ports.push(EnginePort::range(
                    "Ray worker ports",
                    first,
                    last,
                    PortOn::Every,
                ));
            }
        }
        ports
    }
    fn reserved_args(&self, args: &[String]) -> Vec<Problem> {
        reserved_args(args)
    }
    fn memory(&self, opts: &ServeOptions, _tuning: &EngineOptions) -> EngineMemory {
        let args = &opts.engine_args;
        let value = |f: &str| super::flag_value(args, &[f], |n| n.replace('_', "-"));
        EngineMemory {
            fraction: match value("--gpu-memory-utilization").and_then(super::parse_fraction) {
                Some(f) => EngineFraction::Given(f),
                None => EngineFraction::Default(DEFAULT_MEMORY_UTILIZATION),
            },
            fraction_of: FractionOf::Total,
            fraction_flag: "--gpu-memory-utilization",
            context: value("--max-model-len").and_then(super::parse_count),
            context_flag: "--max-model-len",
            sequences: value("--max-num-seqs").and_then(super::parse_count),
            sequences_flag: "--max-num-seqs",
            kv_dtype: value("--kv-cache-dtype").map(str::to_string),
        }
    }
    fn speculative_problems(&self, spec: &Speculative, args: &[String]) -> Vec<Problem> {
        super::reserved(
            args,
            &["--speculative-config"],
            |flag| flag.replace('_', "-"),
            |_, _| {
                format!(
                    "remove --speculative-config: the profile's speculative block sets it ({})",
                    spec.method
                )
            },
        )
    }
    fn owned_flags(&self) -> &'static [OwnedFlag] {
        &OWNED
    }
    fn recipe(&self) -> &'static RecipeSpelling {
        &RECIPE
    }
    /// vLLM's parser reads `_` as `-` in a long flag's name, up to its first `.`.
    fn flag_name(&self, word: &str) -> String {
        match word.strip_prefix("--") {
            Some(rest) => {
                let (name, dotted) = rest.split_at(rest.find('.').unwrap_or(rest.len()));
                format!("--{}{dotted}", name.replace('_', "-"))
            }
            None => word.to_string(),
        }
    }
    /// vLLM's `FlexibleArgumentParser` is argparse's, abbreviations left on.
    fn abbreviations(&self) -> bool {
        true
    }
    fn ranks(&self, input: &RankInput<'_>, containers: Vec<ContainerSpec>) -> EngineRanks {
        match VllmMode::of(input.tuning) {
            VllmMode::Native { master_port } => native(input, containers, master_port),
            VllmMode::Ray { ray_port } => over_ray(input, containers, ray_port),
        }
    }
    /// Native: `--nnodes`, `--node-rank` and `--master-addr` from the group (vLLM's own
    /// LeaderWorkerSet deployment passes the same three). Ray: a worker joins Ray at the
    /// leader's address; the head's line names no other node but the members it waits for,
    /// by the addresses of the plan's nodes.
    fn group_line(
        &self,
        mode: MultiNode,
        role: Role,
        spec: &ContainerSpec,
        refs: &GroupRefs,
    ) -> GroupLine {
        let mut line = GroupLine {
            env: BTreeMap::new(),
            command: spec.command.clone(),
        };
        match mode {
            MultiNode::Ray if role == Role::Worker => {
                if let Some(head) = spec.env.get("SL_RAY_HEAD") {
                    let port = super::port_of(head);
                    line.env
                        .insert("SL_RAY_HEAD".into(), format!("{}:{port}", refs.leader));
                }
            }
            MultiNode::Native => {
                super::replace_value(&mut line.command, "--nnodes", |_| refs.size.clone());
                super::replace_value(&mut line.command, "--node-rank", |_| refs.rank.clone());
                super::replace_value(&mut line.command, "--master-addr", |_| refs.leader.clone());
            }
            _ => {}
        }
        line
    }
}

/// `vllm serve MODEL` with the shape, and on the head where the API listens.
fn serve_args(input: &RankInput<'_>, head: bool) -> Vec<String> {
    let o = input.opts;
    let mut args = vec![
        "vllm".to_string(),
        "serve".to_string(),
        input.model_path.to_string(),
        "--served-model-name".to_string(),
        input.served.to_string(),
        "--tensor-parallel-size".to_string(),
        o.tp.to_string(),
        "--pipeline-parallel-size".to_string(),
        o.pp.to_string(),
    ];
    if head {
        args.extend([
            "--host".into(),
            input.host.to_string(),
            "--port".into(),
            o.port.to_string(),
        ]);
    }
    if let Some(s) = &input.tuning.speculative {
        args.extend(["--speculative-config".to_string(), speculative_config(s)]);
    }
    args
}

/// The speculative block as vLLM's `--speculative-config` JSON: `method` (vLLM's names:
/// `mtp`, `eagle`, `eagle3`, `draft_model`, `ngram`), `num_speculative_tokens`, the draft as
/// `model` (and `revision` unless `main`), and for n-grams the lookup window of vLLM's docs.
pub fn speculative_config(s: &Speculative) -> String {
    let mut m = serde_json::Map::new();
    let method = match s.method {
        SpecMethod::Mtp => "mtp",
        SpecMethod::Eagle => "eagle",
        SpecMethod::Eagle3 => "eagle3",
        SpecMethod::Draft => "draft_model",
        SpecMethod::Ngram => "ngram",
    };
    m.insert("method".into(), method.into());
    m.insert("num_speculative_tokens".into(), s.tokens.into());
    if let Some((repo, revision)) = s.draft_ref() {
        m.insert("model".into(), repo.into());
        if let Some(r) = revision {
            m.insert("revision".into(), r.into());
        }
    }
    if s.method == SpecMethod::Ngram {
        m.insert("prompt_lookup_max".into(), 4.into());
    }
    serde_json::Value::Object(m).to_string()
}

/// Every node runs `vllm serve` with its rank; workers headless.
fn native(
    input: &RankInput<'_>,
    mut containers: Vec<ContainerSpec>,
    master_port: u16,
) -> EngineRanks {
    let n = input.env.nodes.len();
    let head_addr = input.env.nodes[0].control.addr;
    for (rank, (env, spec)) in input.env.nodes.iter().zip(&mut containers).enumerate() {
        let head = env.role == Role::Head;
        let mut args = serve_args(input, head);
        if n > 1 {
            args.extend([
                "--distributed-executor-backend".to_string(),
                "mp".to_string(),
                "--nnodes".to_string(),
                n.to_string(),
                "--node-rank".to_string(),
                rank.to_string(),
                "--master-addr".to_string(),
                head_addr.to_string(),
                "--master-port".to_string(),
                master_port.to_string(),
            ]);
            if !head {
                args.push("--headless".to_string());
            }
        }
        args.extend(input.opts.engine_args.iter().cloned());
        spec.command = args;
    }
    EngineRanks {
        containers,
        waits: Vec::new(),
    }
}

/// The head starts Ray, waits for every member, then serves; the others join Ray.
fn over_ray(
    input: &RankInput<'_>,
    mut containers: Vec<ContainerSpec>,
    ray_port: u16,
) -> EngineRanks {
    let o = input.opts;
    let head_addr = input.env.nodes[0].control.addr;
    let members: Vec<RayMember> = input
        .env
        .nodes
        .iter()
        .map(|env| RayMember {
            node: env.name.clone(),
            ip: env.control.addr,
            gpus: o.gpus_per_node,
        })
        .collect();
    for (env, spec) in input.env.nodes.iter().zip(&mut containers) {
        spec.env
            .insert("SL_GPUS".into(), o.gpus_per_node.to_string());
        if env.role == Role::Head {
            let mut args = serve_args(input, true);
            args.extend([
                "--distributed-executor-backend".to_string(),
                "ray".to_string(),
            ]);
            args.extend(o.engine_args.iter().cloned());
            spec.env.insert("SL_RAY_PORT".into(), ray_port.to_string());
            spec.env
                .insert("SL_RAY_TIMEOUT".into(), ray::JOIN_TIMEOUT_S.to_string());
            spec.env.insert(
                "SL_RAY_EXPECT".into(),
                serde_json::to_string(&members).unwrap_or_default(),
            );
            let mut command = vec![
                "bash".to_string(),
                "-c".to_string(),
                RAY_HEAD_SH.to_string(),
                "spark-launch-ray-head".to_string(),
            ];
            command.extend(args);
            spec.command = command;
        } else {
            spec.env
                .insert("SL_RAY_HEAD".into(), format!("{head_addr}:{ray_port}"));
            spec.command = vec![
                "bash".to_string(),
                "-c".to_string(),
                RAY_WORKER_SH.to_string(),
                "spark-launch-ray-worker".to_string(),
            ];
        }
    }
    let head = input.env.nodes[0].name.clone();
    EngineRanks {
        containers,
        waits: vec![steps::wait_ray(head, members, ray::JOIN_TIMEOUT_S)],
    }
}

/// The flags of a `vllm serve` line that spark-launch writes itself (or, the key, takes out of
/// every line), with the shortest prefix vLLM's parser reads as each alone. From vLLM's source:
/// `FlexibleArgumentParser` is argparse's with abbreviations on and `_` read as `-`; the
/// prefixes are taken long enough to clear every other flag of the serve parser (the frontend's
/// `--pooler-config` beside `--port`, `--api-server-count` beside `--api-key`,
/// `--config-format` beside `--config`, `--model-impl` beside `--model`), longer where unsure:
/// a shorter prefix is refused as ambiguous, never passed on.
/// How recipes write vLLM. sparkrun's runtimes `vllm` (Ray as the recipe asks),
/// `vllm-distributed` (never Ray), `vllm-ray` and `eugr-vllm` (Ray); sparkrun assumes `vllm`
/// when a recipe names no runtime and its command hints at no other. The flag table is
/// sparkrun's (spark-arena/sparkrun `src/sparkrun/runtimes/_vllm_common.py` at 04e6f1e2),
/// restated as data.
static RECIPE: RecipeSpelling = RecipeSpelling {
    programs: &[
        ProgramWords::Command(&["vllm", "serve"]),
        ProgramWords::Module("vllm.entrypoints.openai.api_server"),
    ],
    model_positional: true,
    data_parallel: &["-dp", "--data-parallel-size"],
    runtimes: &[
        RecipeRuntime {
            name: "vllm",
            ray: None,
        },
        RecipeRuntime {
            name: "vllm-distributed",
            ray: Some(false),
        },
        RecipeRuntime {
            name: "vllm-ray",
            ray: Some(true),
        },
        RecipeRuntime {
            name: "eugr-vllm",
            ray: Some(true),
        },
    ],
    hints: &[],
    fallback: true,
    ray_key: Some("distributed_executor_backend"),
    table: Some(&TABLE),
    sized_by_parallel: false,
    script: false,
};

static TABLE: FlagTable = FlagTable {
    program: &["vllm", "serve"],
    model_flag: None,
    revision_flag: Some("--revision"),
    flags: TABLE_FLAGS,
    bools: TABLE_BOOLS,
    negatable: TABLE_NEGATABLE,
    skip: &["tensor_parallel", "distributed_executor_backend"],
    aliases: &[],
    node_gated: None,
};

/// Recipe key → flag, in sparkrun's order.
const TABLE_FLAGS: &[(&str, &str)] = &[
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

/// Keys that are flags without a value.
const TABLE_BOOLS: &[&str] = &[
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

/// Booleans that are on unless turned off: `false` becomes `--no-<flag>`.
const TABLE_NEGATABLE: &[&str] = &[
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "async_scheduling",
    "enable_flashinfer_autotune",
    "scheduler_reserve_full_isl",
];

static OWNED: [OwnedFlag; 17] = [
    OwnedFlag::one("--model", "--model", RecipeFlag::Model),
    OwnedFlag::one("--revision", "--rev", RecipeFlag::Revision),
    OwnedFlag::one("-tp", "-tp", RecipeFlag::Tp),
    OwnedFlag::one("--tensor-parallel-size", "--tensor-p", RecipeFlag::Tp),
    OwnedFlag::one("-pp", "-pp", RecipeFlag::Pp),
    OwnedFlag::one("--pipeline-parallel-size", "--pipeline-p", RecipeFlag::Pp),
    OwnedFlag::one("--port", "--por", RecipeFlag::Port),
    OwnedFlag::one("--host", "--hos", RecipeFlag::Host),
    OwnedFlag::with(
        "--served-model-name",
        "--served",
        RecipeFlag::ServedName,
        FlagValues::Many,
    ),
    OwnedFlag::one("--master-port", "--master-p", RecipeFlag::Rendezvous),
    OwnedFlag::one(
        "--distributed-executor-backend",
        "--distributed-e",
        RecipeFlag::Executor,
    ),
    OwnedFlag::one("--nnodes", "--nn", RecipeFlag::Reserved),
    OwnedFlag::one("--node-rank", "--node-r", RecipeFlag::Reserved),
    OwnedFlag::one("--master-addr", "--master-a", RecipeFlag::Reserved),
    OwnedFlag::with(
        "--headless",
        "--hea",
        RecipeFlag::Reserved,
        FlagValues::None,
    ),
    // vLLM takes several keys after one `--api-key`.
    OwnedFlag::with("--api-key", "--api-k", RecipeFlag::ApiKey, FlagValues::Many),
    OwnedFlag::one(
        "--config",
        "--config",
        RecipeFlag::Unsupported(
            "a config file spark-launch cannot read: write its settings into the command",
        ),
    ),
];

/// Problems for flags in `-- extra args` that spark-launch sets itself (vLLM would take the
/// last one silently, against the plan), abbreviated or not.
pub fn reserved_args(args: &[String]) -> Vec<Problem> {
    super::reserved_flags(&Vllm, args, |f| match f.flag {
        RecipeFlag::Tp => "use --tp".to_string(),
        RecipeFlag::Pp => "use --pp".to_string(),
        RecipeFlag::Port => "use --port before `--`".to_string(),
        RecipeFlag::Host => "use --bind".to_string(),
        RecipeFlag::Executor => "use --ray for the Ray backend".to_string(),
        RecipeFlag::ApiKey => {
            "use --api-key before `--` (it never goes on a command line)".to_string()
        }
        RecipeFlag::Model | RecipeFlag::Revision | RecipeFlag::ServedName => {
            "give the model as the MODEL argument; it is also the served name".to_string()
        }
        RecipeFlag::Unsupported(_) => {
            "pass the file's settings as arguments (spark-launch must see every flag)".to_string()
        }
        _ => format!("remove {}: spark-launch derives it per node", f.name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speculative_block_is_one_json_with_the_draft_as_model() {
        let s = Speculative {
            method: SpecMethod::Eagle3,
            draft_model: Some("org/draft".into()),
            draft_revision: Some("v1".into()),
            tokens: 3,
        };
        let v: serde_json::Value = serde_json::from_str(&speculative_config(&s)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"method": "eagle3", "model": "org/draft", "revision": "v1", "num_speculative_tokens": 3})
        );
        assert_eq!(
            Vllm.speculative_problems(&s, &["--speculative_config={}".into()])
                .len(),
            1
        );
    }

    #[test]
    fn abbreviations_and_underscores_of_its_flags_are_refused_in_extra_args_without_the_key() {
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let p = reserved_args(&words(
            "--api_key=sk-hidden --hos 0.0.0.0 -tp 2 --max-model-len 4096 --api x",
        ));
        let fixes: Vec<&str> = p.iter().map(|p| p.fix.as_str()).collect();
        assert_eq!(
            fixes,
            [
                "use --api-key before `--` (it never goes on a command line)",
                "use --bind",
                "use --tp",
                "write the flag out in full"
            ]
        );
        assert_eq!(
            p[1].what,
            "extra argument --hos (read as --host) is set by spark-launch itself"
        );
        assert!(!format!("{p:?}").contains("sk-hidden"), "{p:?}");
    }

    #[test]
    fn flags_spark_launch_sets_are_refused_in_extra_args() {
        let p = reserved_args(&[
            "--max-model-len".into(),
            "4096".into(),
            "--tensor_parallel_size=4".into(),
        ]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].fix, "use --tp");
    }

    fn refs() -> GroupRefs {
        GroupRefs {
            size: "$(SIZE)".into(),
            rank: "$(RANK)".into(),
            leader: "$(LEADER)".into(),
        }
    }

    #[test]
    fn a_group_placed_by_others_gets_its_size_rank_and_leader_where_the_plan_wrote_them() {
        let job = crate::plan::JobName::new("j").unwrap();
        let node = crate::node::NodeName::new("b").unwrap();
        let mut spec = ContainerSpec::new(&job, &node, Role::Worker, "img");
        spec.command = "vllm serve /m --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29501 --headless"
            .split(' ')
            .map(String::from)
            .collect();
        let line = Vllm.group_line(MultiNode::Native, Role::Worker, &spec, &refs());
        assert_eq!(
            line.command.join(" "),
            "vllm serve /m --nnodes $(SIZE) --node-rank $(RANK) --master-addr $(LEADER) --master-port 29501 --headless"
        );
        assert!(line.env.is_empty());

        // Over Ray a worker joins the leader's Ray at the planned port; its line stays.
        spec.command = vec!["bash".into(), "-c".into(), RAY_WORKER_SH.into()];
        spec.env
            .insert("SL_RAY_HEAD".into(), "10.0.0.1:6379".into());
        let line = Vllm.group_line(MultiNode::Ray, Role::Worker, &spec, &refs());
        assert_eq!(line.command, spec.command);
        assert_eq!(line.env["SL_RAY_HEAD"], "$(LEADER):6379");
        let head = Vllm.group_line(MultiNode::Ray, Role::Head, &spec, &refs());
        assert!(head.env.is_empty());
    }
}
