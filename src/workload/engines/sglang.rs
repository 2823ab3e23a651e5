//! SGLang across nodes: the per-rank commands of `spark-launch sglang`.
//!
//! Native multi-node, as SGLang does it: every node runs the same server
//! (`python3 -m sglang.launch_server`, or `sglang serve`: [`Launcher`]) with `--tp-size`,
//! `--nnodes`, its `--node-rank` and `--dist-init-addr HEAD:PORT` (the head's control-plane
//! address from derive; SGLang has no default port, spark-launch uses 20000 as SGLang's
//! multi-node docs do). Rank 0 binds the torch.distributed store there and every other node
//! connects to it; only the head serves the API (`--host`/`--port`), the other nodes run
//! their schedulers and serve nothing. Each node also gets `SGLANG_HOST_IP`, its own
//! control-plane address (SGLang's `get_local_ip_auto` reads it), beside the derived NCCL and
//! Gloo variables every serving container carries.
//!
//! The API key: SGLang reads it only from `--api-key`, and logs its server arguments (key
//! included) at start. So the key never goes on a command line: the head's container holds it
//! in `SL_SGLANG_API_KEY` (`<set>` in every printout), and the head's command is a short
//! Python prelude ([`KEY_PRELUDE`]) that takes the variable out of the environment, adds
//! `--api-key` to the interpreter's own `sys.argv` (which `/proc/PID/cmdline` does not show)
//! and runs SGLang's entry point in the same process, with every log record that would
//! contain the key rewritten to `<set>`. [`engine_line`] gives the SGLang line a head runs,
//! as SGLang's parser sees it.
//!
//! Pure: the decided plan in, the ranks' commands out.

use super::speculative::{RecipeDraft, SpecMethod, Speculative, setting_text};
use super::spelling::{FlagTable, NodeGated, ProgramWords, RecipeRuntime, RecipeSpelling};
use super::{
    ApiKeySupport, CacheVar, EngineOptions, EnginePort, EngineRanks, GroupLine, GroupRefs,
    Launcher, LogPhase, MultiNode, OwnedFlag, PortOn, PortReach, RankInput, ReadySignals,
    RecipeFlag, ServingEngine, caches, phases, read_section,
};
use serde::{Deserialize, Serialize};

use crate::node::Role;
use crate::plan::ContainerSpec;
use crate::workload::memory::{EngineFraction, EngineMemory, FractionOf};
use crate::workload::serve::{Problem, ServeOptions};

/// The image used unless `--image` says otherwise: NVIDIA's NGC build of SGLang for arm64
/// (DGX Spark) and amd64, CUDA 13; SGLang 0.5.12.post1 inside (docs/serving.md gives the
/// evidence), pinned so that a plan means the same thing tomorrow.
pub const DEFAULT_IMAGE: &str = "nvcr.io/nvidia/sglang:26.06-py3";
/// SGLang's own default `--port`.
pub const DEFAULT_PORT: u16 = 30000;
/// The `--dist-init-addr` port on the head (SGLang has no default; its multi-node docs use
/// 20000).
pub const DEFAULT_DIST_PORT: u16 = 20000;
/// SGLang's chunked prefill on a GPU of more than 80 GiB when `--chunked-prefill-size` is not
/// given: what its default memory fraction is derived from.
pub const DEFAULT_CHUNKED_PREFILL: u64 = 8192;
/// Where the head's container holds the API key for [`KEY_PRELUDE`].
pub const API_KEY_VAR: &str = "SL_SGLANG_API_KEY";

/// Where SGLang and the libraries it loads keep what they compile at start
/// (`sglang/srt/environ.py`): SGLang's own cache root (`SGLANG_CACHE_DIR`, default the literal
/// `~/.cache/sglang`, not the XDG cache: its FlashInfer autotune results and DeepGEMM kernels
/// go there) and its JIT kernel builds (`SGLANG_JIT_CACHE_DIR`, which does not follow the root:
/// unset, it is `~/.cache/sglang/jit`), TorchInductor's (SGLang's torch.compile), Triton's and
/// FlashInfer's, and the XDG cache for what follows it.
pub const CACHE_VARS: &[CacheVar] = &[
    CacheVar {
        var: "SGLANG_CACHE_DIR",
        sub: "sglang",
    },
    CacheVar {
        var: "SGLANG_JIT_CACHE_DIR",
        sub: "sglang/jit",
    },
    caches::INDUCTOR,
    caches::TRITON,
    caches::FLASHINFER,
    caches::XDG,
];

/// A launch profile's `sglang:` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SglangSection {
    /// `module` (`python3 -m sglang.launch_server`, the default) or `serve` (`sglang serve`,
    /// SGLang 0.5.5 and later).
    pub launcher: Option<Launcher>,
}

/// SGLang's program words for a [`Launcher`]: both spellings take the same arguments.
pub fn launcher_words(l: Launcher) -> &'static [&'static str] {
    match l {
        Launcher::Module => &["python3", "-m", "sglang.launch_server"],
        Launcher::Serve => &["sglang", "serve"],
    }
}

/// The [`Launcher`] a recipe's program words spell (`sglang serve`, `python3 -m
/// sglang.launch_server`, with any path or Python version); `None` for other words.
pub fn launcher_of(program: &[String]) -> Option<Launcher> {
    let words: Vec<&str> = program.iter().map(String::as_str).collect();
    let base = words.first()?.rsplit('/').next()?;
    match (base, &words[1..]) {
        ("sglang", ["serve"]) => Some(Launcher::Serve),
        (py, ["-m", "sglang.launch_server"]) if py == "python" || py.starts_with("python3") => {
            Some(Launcher::Module)
        }
        _ => None,
    }
}

/// The head's command when a key is set: `python3 -c KEY_PRELUDE <launcher words> ARGS…`.
/// It takes the key out of the environment, so SGLang's children never see it either.
pub const KEY_PRELUDE: &str = r#"import logging, os, runpy, sys
key = os.environ.pop("SL_SGLANG_API_KEY", "")
if not key:
    sys.exit("spark-launch: SL_SGLANG_API_KEY is empty in the head's container")
words = sys.argv[1:]
if words[1:3] == ["-m", "sglang.launch_server"]:
    module, args = "sglang.launch_server", words[3:]
elif words[:2] == ["sglang", "serve"]:
    module, args = None, words[2:]
else:
    sys.exit("spark-launch: not an SGLang server command: %r" % words[:3])
make = logging.getLogRecordFactory()
def redacted(*a, **k):
    r = make(*a, **k)
    try:
        text = r.getMessage()
    except Exception:
        return r
    if key in text:
        r.msg, r.args = text.replace(key, "<set>"), None
    return r
logging.setLogRecordFactory(redacted)
args = args + ["--api-key", key]
if module:
    sys.argv = [module] + args
    runpy.run_module(module, run_name="__main__", alter_sys=True)
else:
    from sglang.cli.main import main
    sys.argv = ["sglang", "serve"] + args
    sys.exit(main())
"#;

/// SGLang's progress lines, from its own log calls (0.5.x): `Load weight begin/end`, the
/// shards' progress bar, `KV Cache is allocated … K size`, `Capture … CUDA graph begin` and
/// `Capturing batches`, NCCL's version, then uvicorn and `The server is fired up`.
static PROGRESS: [LogPhase; 10] = [
    phases::SHARDS,
    LogPhase::any(&["load weight end"], "weights loaded"),
    LogPhase::any(&["load weight begin"], "loading weights"),
    LogPhase {
        all: &["capturing batches"],
        any: &["bs="],
        phase: "capturing CUDA graphs",
        percent: true,
    },
    LogPhase {
        all: &["cuda graph"],
        any: &["capture"],
        phase: "capturing CUDA graphs",
        percent: false,
    },
    phases::COMPILING,
    phases::KV_CACHE,
    LogPhase::any(
        &[
            phases::UVICORN[0],
            phases::UVICORN[1],
            "the server is fired up",
        ],
        phases::API_STARTING,
    ),
    LogPhase::any(
        &["sglang is using nccl", "warmup completed in"],
        "joining the distributed group",
    ),
    phases::DISTRIBUTED,
];

static READY: ReadySignals = ReadySignals {
    health_path: "/health",
    models_path: "/v1/models",
    progress: &PROGRESS,
    // A child process failed: SGLang's own words for it (`… hit an exception`, the parent
    // told by a SIGQUIT).
    fatal: &[
        "scheduler hit an exception",
        "tokenizermanager hit an exception",
        "detokenizermanager hit an exception",
        "received sigquit from a child process",
    ],
};

/// `spark-launch sglang`.
pub struct Sglang;

impl ServingEngine for Sglang {
    fn name(&self) -> &'static str {
        "sglang"
    }
    fn title(&self) -> &'static str {
        "SGLang"
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
    /// `speculative_draft_model_path` (its flag's own name) or `speculative_draft_model`, with
    /// `speculative_draft_model_revision`.
    fn recipe_draft(
        &self,
        settings: &std::collections::BTreeMap<String, yaml_serde::Value>,
    ) -> Option<RecipeDraft> {
        let (setting, id) = ["speculative_draft_model_path", "speculative_draft_model"]
            .into_iter()
            .find_map(|k| Some((k, setting_text(settings.get(k)?)?)))?;
        let revision = settings
            .get("speculative_draft_model_revision")
            .and_then(setting_text);
        RecipeDraft::hub(&id, revision.as_deref(), setting)
    }
    fn profile_section(&self) -> Option<&'static str> {
        Some("sglang")
    }
    fn read_profile_section(
        &self,
        section: &yaml_serde::Value,
        into: &mut EngineOptions,
    ) -> Vec<(String, String)> {
        match read_section::<SglangSection>(section) {
            Ok(s) => {
                into.launcher = s.launcher;
                Vec::new()
            }
            Err(problems) => problems,
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
        let mut ports = vec![EnginePort::api("SGLang API server", api)];
        if nodes > 1 {
            ports.push(EnginePort::one(
                "rendezvous",
                "torch.distributed store (SGLang --dist-init-addr)",
                dist_port(tuning),
                PortOn::Head,
                PortReach::WorkersToHead,
            ));
        }
        ports
    }
    fn reserved_args(&self, args: &[String]) -> Vec<Problem> {
        reserved_args(args)
    }
    fn owned_flags(&self) -> &'static [OwnedFlag] {
        &OWNED
    }
    fn recipe(&self) -> &'static RecipeSpelling {
        &RECIPE
    }
    /// SGLang's parser is argparse's with abbreviations on; it reads `_` as written (and
    /// refuses `--tp_size`).
    fn abbreviations(&self) -> bool {
        true
    }
    fn memory(&self, opts: &ServeOptions, _tuning: &EngineOptions) -> EngineMemory {
        let args = &opts.engine_args;
        let value = |f: &str| super::flag_value(args, &[f], str::to_string);
        let fraction = match value("--mem-fraction-static").and_then(super::parse_fraction) {
            Some(f) => EngineFraction::Given(f),
            None => {
                // As SGLang derives its default when none is given (its memory hook): the
                // node's memory less 512 MiB, 1.5 MiB per token of a chunked prefill and
                // tp × pp / 8 GiB, at least 10 GiB on a GPU of more than 60 GiB.
                let chunk = value("--chunked-prefill-size")
                    .and_then(super::parse_count)
                    .unwrap_or(DEFAULT_CHUNKED_PREFILL)
                    .max(2048);
                let mib = 512.0 + chunk as f64 * 1.5 + opts.world() as f64 / 8.0 * 1024.0;
                EngineFraction::LeavesReserve(
                    ((mib.max(10.0 * 1024.0)) * (1u64 << 20) as f64) as u64,
                )
            }
        };
        EngineMemory {
            fraction,
            fraction_of: FractionOf::Total,
            fraction_flag: "--mem-fraction-static",
            context: value("--context-length").and_then(super::parse_count),
            context_flag: "--context-length",
            sequences: value("--max-running-requests").and_then(super::parse_count),
            sequences_flag: "--max-running-requests",
            kv_dtype: value("--kv-cache-dtype").map(str::to_string),
        }
    }
    fn recipe_launcher(&self, program: &[String]) -> Option<Launcher> {
        launcher_of(program)
    }
    fn speculative_problems(&self, spec: &Speculative, args: &[String]) -> Vec<Problem> {
        super::reserved(args, &SPECULATIVE_FLAGS, str::to_string, |_, arg| {
            format!(
                "remove {}: the profile's speculative block sets it ({})",
                arg.split('=').next().unwrap_or(arg),
                spec.method
            )
        })
    }
    fn ranks(&self, input: &RankInput<'_>, mut containers: Vec<ContainerSpec>) -> EngineRanks {
        let n = input.env.nodes.len();
        let head_addr = input.env.nodes[0].control.addr;
        let launcher = input.tuning.launcher.unwrap_or_default();
        for (rank, (env, spec)) in input.env.nodes.iter().zip(&mut containers).enumerate() {
            let head = env.role == Role::Head;
            spec.env
                .insert("SGLANG_HOST_IP".into(), env.control.addr.to_string());
            let mut args = server_args(input, head);
            if n > 1 {
                args.extend([
                    "--nnodes".to_string(),
                    n.to_string(),
                    "--node-rank".to_string(),
                    rank.to_string(),
                    "--dist-init-addr".to_string(),
                    format!("{head_addr}:{}", dist_port(input.tuning)),
                ]);
            }
            if let Some(s) = &input.tuning.speculative {
                args.extend(speculative_args(s));
            }
            args.extend(input.opts.engine_args.iter().cloned());
            let mut command: Vec<String> = Vec::new();
            if head && input.opts.api_key.is_some() {
                command.extend(["python3".to_string(), "-c".to_string(), KEY_PRELUDE.into()]);
            }
            command.extend(launcher_words(launcher).iter().map(|w| w.to_string()));
            command.extend(args);
            spec.command = command;
        }
        EngineRanks {
            containers,
            waits: Vec::new(),
        }
    }
    /// `--nnodes`, `--node-rank` and the host of `--dist-init-addr` from the group (as
    /// SGLang's LeaderWorkerSet examples pass them); the rendezvous port stays the plan's.
    fn group_line(
        &self,
        _mode: MultiNode,
        _role: Role,
        spec: &ContainerSpec,
        refs: &GroupRefs,
    ) -> GroupLine {
        let mut command = spec.command.clone();
        super::replace_value(&mut command, "--nnodes", |_| refs.size.clone());
        super::replace_value(&mut command, "--node-rank", |_| refs.rank.clone());
        super::replace_value(&mut command, "--dist-init-addr", |was| {
            format!("{}:{}", refs.leader, super::port_of(was))
        });
        GroupLine {
            env: Default::default(),
            command,
        }
    }
}

fn dist_port(tuning: &EngineOptions) -> u16 {
    tuning.rendezvous_port.unwrap_or(DEFAULT_DIST_PORT)
}

/// The model, the served name, the shape, metrics, and on the head where the API listens.
fn server_args(input: &RankInput<'_>, head: bool) -> Vec<String> {
    let o = input.opts;
    let mut args = vec![
        "--model-path".to_string(),
        input.model_path.to_string(),
        "--served-model-name".to_string(),
        input.served.to_string(),
        "--tp-size".to_string(),
        o.tp.to_string(),
    ];
    if o.pp > 1 {
        args.extend(["--pp-size".to_string(), o.pp.to_string()]);
    }
    if head {
        args.extend([
            "--host".to_string(),
            input.host.to_string(),
            "--port".to_string(),
            o.port.to_string(),
        ]);
    }
    // /metrics (Prometheus) as vLLM serves it by default; SGLang only with this flag.
    args.push("--enable-metrics".to_string());
    args
}

/// The speculative block as SGLang's flags: NEXTN for an in-checkpoint MTP head, EAGLE,
/// EAGLE3, STANDALONE for a small draft model (steps N, top-k 1, N + 1 draft tokens, as
/// SGLang's cookbook cells run them), NGRAM with N draft tokens. The draft is named by its
/// repo (and revision), found offline in the staged cache.
pub fn speculative_args(s: &Speculative) -> Vec<String> {
    let algorithm = match s.method {
        SpecMethod::Mtp => "NEXTN",
        SpecMethod::Eagle => "EAGLE",
        SpecMethod::Eagle3 => "EAGLE3",
        SpecMethod::Draft => "STANDALONE",
        SpecMethod::Ngram => "NGRAM",
    };
    let mut args = vec!["--speculative-algorithm".to_string(), algorithm.to_string()];
    if let Some((repo, revision)) = s.draft_ref() {
        args.extend(["--speculative-draft-model-path".to_string(), repo]);
        if let Some(r) = revision {
            args.extend(["--speculative-draft-model-revision".to_string(), r]);
        }
    }
    if s.method == SpecMethod::Ngram {
        args.extend([
            "--speculative-num-draft-tokens".to_string(),
            s.tokens.to_string(),
        ]);
    } else {
        args.extend([
            "--speculative-num-steps".to_string(),
            s.tokens.to_string(),
            "--speculative-eagle-topk".to_string(),
            "1".to_string(),
            "--speculative-num-draft-tokens".to_string(),
            (s.tokens + 1).to_string(),
        ]);
    }
    args
}

/// The SGLang line a rank's command runs, as SGLang's parser sees it: the launcher's words and
/// the arguments, with the API key the head's prelude adds shown as `<set>`. `None` for a
/// command that starts no SGLang server.
pub fn engine_line(command: &[String]) -> Option<Vec<String>> {
    let (words, prelude) = match command {
        [py, c, code, rest @ ..] if py == "python3" && c == "-c" && code == KEY_PRELUDE => {
            (rest, true)
        }
        _ => (command, false),
    };
    let starts = [Launcher::Module, Launcher::Serve].iter().any(|l| {
        let program = launcher_words(*l);
        words.len() >= program.len() && words.iter().zip(program).all(|(w, p)| w == p)
    });
    if !starts {
        return None;
    }
    let mut line = words.to_vec();
    if prelude {
        line.extend([
            "--api-key".to_string(),
            crate::plan::secret::MASK.to_string(),
        ]);
    }
    Some(line)
}

/// The flags of an SGLang line that spark-launch writes itself (or, the key, takes out of every
/// line), with the shortest prefix SGLang's parser reads as each alone: the longer of the two
/// pinned releases' (0.5.12.post1, inside the default image, and 0.5.23; both parsers check
/// this table in tests/sglang_parser.rs). `--tp` and `--pp` are no flags of SGLang's: `--tp`
/// is read as `--tp-size`, `--pp` is ambiguous (`--pp-size`, `--pp-max-micro-batch-size`, …).
/// How recipes write SGLang: sparkrun's runtime `sglang`, hinted by `sglang serve` and
/// `python3 -m sglang.launch_server`. The flag table is sparkrun's
/// (spark-arena/sparkrun `src/sparkrun/runtimes/sglang.py` at 01298828), restated as data;
/// `speculative_draft_model` is read for `speculative_draft_model_path` as sparkrun reads it.
static RECIPE: RecipeSpelling = RecipeSpelling {
    programs: &[
        ProgramWords::Command(&["sglang", "serve"]),
        ProgramWords::Module("sglang.launch_server"),
    ],
    model_positional: false,
    data_parallel: &["--dp-size", "--data-parallel-size", "--dp"],
    runtimes: &[RecipeRuntime {
        name: "sglang",
        ray: None,
    }],
    hints: &[
        ProgramWords::Command(&["sglang", "serve"]),
        ProgramWords::Module("sglang.launch_server"),
    ],
    fallback: false,
    ray_key: None,
    table: Some(&TABLE),
    sized_by_parallel: false,
    script: false,
};

static TABLE: FlagTable = FlagTable {
    program: &["sglang", "serve"],
    model_flag: Some("--model-path"),
    revision_flag: None,
    flags: TABLE_FLAGS,
    bools: TABLE_BOOLS,
    negatable: &[],
    skip: &["tensor_parallel", "data_parallel"],
    aliases: &[("speculative_draft_model", "speculative_draft_model_path")],
    // SGLang refuses `--dp-size` across nodes without DP attention.
    node_gated: Some(NodeGated {
        key: "data_parallel",
        flag: "--dp-size",
        unless: "enable_dp_attention",
    }),
};

/// Recipe key → flag, in sparkrun's order.
const TABLE_FLAGS: &[(&str, &str)] = &[
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

/// Keys that are flags without a value.
const TABLE_BOOLS: &[&str] = &[
    "enable_dp_attention",
    "trust_remote_code",
    "enable_torch_compile",
    "disable_radix_cache",
    "disable_prefill_cuda_graph",
];

static OWNED: [OwnedFlag; 16] = [
    OwnedFlag::one("--model-path", "--model-p", RecipeFlag::Model),
    OwnedFlag::one("--model", "--model", RecipeFlag::Model),
    OwnedFlag::one("--revision", "--rev", RecipeFlag::Revision),
    OwnedFlag::one("--tp-size", "--tp", RecipeFlag::Tp),
    OwnedFlag::one("--tensor-parallel-size", "--te", RecipeFlag::Tp),
    OwnedFlag::one("--pp-size", "--pp-s", RecipeFlag::Pp),
    OwnedFlag::one("--pipeline-parallel-size", "--pip", RecipeFlag::Pp),
    OwnedFlag::one("--port", "--po", RecipeFlag::Port),
    OwnedFlag::one("--host", "--ho", RecipeFlag::Host),
    OwnedFlag::one("--served-model-name", "--se", RecipeFlag::ServedName),
    OwnedFlag::one("--nnodes", "--nn", RecipeFlag::Reserved),
    OwnedFlag::one("--node-rank", "--nod", RecipeFlag::Reserved),
    OwnedFlag::one("--dist-init-addr", "--dist-i", RecipeFlag::Reserved),
    OwnedFlag::one("--nccl-init-addr", "--nccl-i", RecipeFlag::Reserved),
    OwnedFlag::one("--api-key", "--ap", RecipeFlag::ApiKey),
    OwnedFlag::one(
        "--config",
        "--conf",
        RecipeFlag::Unsupported(
            "a config file spark-launch cannot read: write its settings into the command",
        ),
    ),
];

/// The flags a speculative block sets.
const SPECULATIVE_FLAGS: [&str; 6] = [
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-draft-model-revision",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
];

/// Problems for flags in `-- extra args` that spark-launch sets itself (argparse would take
/// the last one silently, against the plan), abbreviated or not.
pub fn reserved_args(args: &[String]) -> Vec<Problem> {
    super::reserved_flags(&Sglang, args, |f| match f.flag {
        RecipeFlag::Tp => "use --tp".to_string(),
        RecipeFlag::Pp => "use --pp".to_string(),
        RecipeFlag::Port => "use --port before `--`".to_string(),
        RecipeFlag::Host => "use --bind".to_string(),
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
    fn a_recipe_s_program_words_name_the_launcher() {
        let w = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(launcher_of(&w("sglang serve")), Some(Launcher::Serve));
        assert_eq!(
            launcher_of(&w("/usr/bin/python3.12 -m sglang.launch_server")),
            Some(Launcher::Module)
        );
        assert_eq!(launcher_of(&w("vllm serve")), None);
    }

    #[test]
    fn a_recipe_s_sglang_flags_become_options_or_stay_verbatim() {
        let split = super::super::split_recipe_args(
            &Sglang,
            &[
                "--model-path",
                "m",
                "--tp-size=2",
                "--served-model-name",
                "q",
                "--nnodes",
                "2",
                "--mem-fraction-static",
                "0.8",
                "--enable-torch-compile",
            ]
            .map(str::to_string),
        );
        assert_eq!(
            split.kept,
            ["--mem-fraction-static", "0.8", "--enable-torch-compile"]
        );
        let flags: Vec<RecipeFlag> = split.owned.iter().map(|o| o.flag).collect();
        assert_eq!(
            flags,
            [
                RecipeFlag::Model,
                RecipeFlag::Tp,
                RecipeFlag::ServedName,
                RecipeFlag::Reserved
            ]
        );
    }

    #[test]
    fn flags_spark_launch_sets_are_refused_in_extra_args() {
        let p = reserved_args(&[
            "--mem-fraction-static".into(),
            "0.8".into(),
            "--tp=4".into(),
            "--dist-init-addr".into(),
            "10.0.0.1:5000".into(),
        ]);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].fix, "use --tp");
        assert!(p[1].fix.contains("derives it per node"), "{p:?}");
    }

    #[test]
    fn the_key_prelude_is_seen_through_for_both_launchers() {
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let mut cmd = words("python3 -c");
        cmd.push(KEY_PRELUDE.to_string());
        cmd.extend(words("sglang serve --model-path M"));
        assert_eq!(
            engine_line(&cmd),
            Some(words("sglang serve --model-path M --api-key <set>"))
        );
        assert_eq!(engine_line(&words("vllm serve M")), None);
    }

    #[test]
    fn mtp_runs_as_nextn_with_one_more_draft_token_than_steps() {
        let s = Speculative {
            method: SpecMethod::Mtp,
            draft_model: None,
            draft_revision: None,
            tokens: 3,
        };
        assert_eq!(
            speculative_args(&s).join(" "),
            "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
        );
    }

    #[test]
    fn a_group_placed_by_others_keeps_the_planned_rendezvous_port() {
        let job = crate::plan::JobName::new("j").unwrap();
        let node = crate::node::NodeName::new("b").unwrap();
        let mut spec = ContainerSpec::new(&job, &node, Role::Worker, "img");
        spec.command = "sglang serve --nnodes 4 --node-rank 3 --dist-init-addr 10.0.0.1:20000"
            .split(' ')
            .map(String::from)
            .collect();
        let refs = GroupRefs {
            size: "$(SIZE)".into(),
            rank: "$(RANK)".into(),
            leader: "$(LEADER)".into(),
        };
        let line = Sglang.group_line(MultiNode::Native, Role::Worker, &spec, &refs);
        assert_eq!(
            line.command.join(" "),
            "sglang serve --nnodes $(SIZE) --node-rank $(RANK) --dist-init-addr $(LEADER):20000"
        );
    }
}
