//! The engine seam: everything that differs between serving engines, behind one trait
//! ([`ServingEngine`]), one file per engine, registered here once.
//!
//! [`EngineKind`] is the one list of engines in the crate (what a profile's `engine:`, a plan's
//! `engine` and a container's workload label name); [`EngineKind::engine`] is its registration.
//! An engine says its name, default image and API port, the ports it binds (API, rendezvous,
//! Ray, the containers' sshd; [`EnginePort`]), whether and how it enforces an API key, how
//! readiness and progress show ([`ReadySignals`]), how its ranks find each other across nodes
//! ([`MultiNode`]), whether they use NCCL, in which order its nodes start ([`StartOrder`]),
//! its defaults, the flags it sets itself, its launch-profile section (its key and how it is
//! read), how community recipes write it ([`spelling::RecipeSpelling`]: program words, flag
//! spellings, runtime names, sparkrun's flag table, whether their parallel size alone sizes
//! them and whether their command may be a script) and how a recipe's tensor- and
//! pipeline-parallel sizes become words of its line, and — given the containers the shared
//! serving plan built — the per-rank commands and the waits of its own.
//!
//! The serving plan (`workload::skeleton`), the CLI, profiles, recipes, doctor's port list,
//! readiness and the executor's waits ask here; nothing outside this folder lists or matches on
//! engines but the engines' CLI subcommands (`tests/conventions.rs` checks).
//!
//! Adding an engine touches three files:
//! 1. `workload/engines/NAME.rs`: a unit struct implementing [`ServingEngine`] (the required
//!    methods, and the defaults it changes: `recipe` to run community recipes, `profile_section`
//!    and `read_profile_section` for a profile section of its own, `uses_nccl`, `start_order`);
//!    options it needs beyond `ServeOptions` go in [`EngineOptions`], here.
//! 2. this file: `pub mod NAME;`, its variant in [`EngineKind`], its line in
//!    [`EngineKind::engine`] and in [`EngineKind::ALL`].
//! 3. `cli/cmd_serve.rs`: its subcommand (its flags, a `ServeCommand` variant, the arm in
//!    `run` that builds its `EngineOptions`).
//!
//! Recipes whose runtime it answers to, profiles with `engine: NAME` and its section, doctor's
//! ports, readiness, compose and the plan follow. A sparkrun runtime refused as "not supported
//! yet" by the recipe reader (`recipe/runtime.rs`) leaves that list once an engine answers to
//! it (a test there says so).
//!
//! Pure: options and facts in, containers and steps out.

pub mod atlas;
pub mod llamacpp;
pub mod ray;
pub mod sglang;
pub mod speculative;
pub mod spelling;
pub mod trtllm;
pub mod vllm;

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::derive::{ClusterEnv, NodeInput};
use crate::plan::{ContainerSpec, Step};
use crate::workload::job_ssh::JobSshKeys;
use crate::workload::memory::EngineMemory;
use crate::workload::serve::{Problem, ServeOptions};
use speculative::{RecipeDraft, Speculative};
use spelling::RecipeSpelling;

/// A serving engine: the one enum of engines in the crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Vllm,
    Trtllm,
    Sglang,
    Llamacpp,
    Atlas,
}

impl EngineKind {
    /// Every engine, in the order help texts and doctor list them.
    pub const ALL: [EngineKind; 5] = [
        EngineKind::Vllm,
        EngineKind::Trtllm,
        EngineKind::Sglang,
        EngineKind::Llamacpp,
        EngineKind::Atlas,
    ];

    /// The engine's implementation: the registration.
    pub fn engine(self) -> &'static dyn ServingEngine {
        match self {
            EngineKind::Vllm => &vllm::Vllm,
            EngineKind::Trtllm => &trtllm::Trtllm,
            EngineKind::Sglang => &sglang::Sglang,
            EngineKind::Llamacpp => &llamacpp::Llamacpp,
            EngineKind::Atlas => &atlas::Atlas,
        }
    }

    /// `vllm`, `trtllm`, `sglang`, `llamacpp`, `atlas`: the CLI subcommand, the profile's
    /// `engine:`, the workload label.
    pub fn as_str(self) -> &'static str {
        self.engine().name()
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineKind::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown engine {s:?}: one of {}",
                    EngineKind::ALL.map(|e| e.as_str()).join(", ")
                )
            })
    }
}

/// Twenty minutes: loading 70B-class weights and compiling CUDA graphs takes long on first
/// start.
pub const DEFAULT_READY_TIMEOUT_S: u64 = 20 * 60;

/// What every engine falls back to unless told otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineDefaults {
    /// How long the API may take to answer after the start.
    pub ready_timeout_s: u64,
    /// The share of GPU memory the engine takes for weights and KV cache, when spark-launch
    /// sets one (`None`: the engine's own default, not passed).
    pub memory_fraction: Option<f64>,
}

/// Where an engine's port is bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortOn {
    /// Only the head listens (the API, the rendezvous, Ray's GCS).
    Head,
    /// Every serving node listens (the containers' sshd, Ray's workers).
    Every,
}

/// Who must reach a port before the group can form (checked before anything starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortReach {
    /// Clients only (the API): nothing to check between nodes.
    Clients,
    /// Every worker connects to the head there (a rendezvous, Ray's GCS).
    WorkersToHead,
    /// The head connects to every worker there (mpirun over the containers' sshd).
    HeadToWorkers,
}

/// A TCP port (or a range of them) an engine binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnginePort {
    /// Short role name for refusals: `API`, `rendezvous`, `Ray`, `ssh`.
    pub name: &'static str,
    /// What binds it, for doctor's findings: `vLLM API server`.
    pub what: &'static str,
    pub first: u16,
    /// `first` for one port; the end of a range the engine picks from (Ray's workers).
    pub last: u16,
    pub on: PortOn,
    pub reach: PortReach,
}

impl EnginePort {
    /// One port.
    pub fn one(
        name: &'static str,
        what: &'static str,
        port: u16,
        on: PortOn,
        reach: PortReach,
    ) -> Self {
        EnginePort {
            name,
            what,
            first: port,
            last: port,
            on,
            reach,
        }
    }

    /// The API port on the head, reached by clients.
    pub fn api(what: &'static str, port: u16) -> Self {
        EnginePort::one("API", what, port, PortOn::Head, PortReach::Clients)
    }

    /// A range the engine picks ports from at run time: doctor looks at it, the plan's
    /// CheckPorts (which names single ports) does not.
    pub fn range(what: &'static str, first: u16, last: u16, on: PortOn) -> Self {
        EnginePort {
            name: what,
            what,
            first,
            last,
            on,
            reach: PortReach::Clients,
        }
    }

    /// The port, when this is one port rather than a range.
    pub fn single(&self) -> Option<u16> {
        (self.first == self.last).then_some(self.first)
    }
}

/// How an engine takes an API key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKeySupport {
    /// From this variable in the head's environment (never on a command line).
    Env(&'static str),
    /// The engine cannot enforce one: a key asked for is refused, with this fix.
    Refused {
        problem: &'static str,
        fix: &'static str,
    },
}

/// One progress phase read from a log line: every `all` and one of `any` appear in the line
/// (lowercased); `percent` adds the line's first percentage (` 45%`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPhase {
    pub all: &'static [&'static str],
    pub any: &'static [&'static str],
    pub phase: &'static str,
    pub percent: bool,
}

impl LogPhase {
    pub const fn any(any: &'static [&'static str], phase: &'static str) -> Self {
        LogPhase {
            all: &[],
            any,
            phase,
            percent: false,
        }
    }

    /// Whether `lower` (a lowercased log line) announces this phase.
    pub fn matches(&self, lower: &str) -> bool {
        self.all.iter().all(|w| lower.contains(w)) && self.any.iter().any(|w| lower.contains(w))
    }
}

/// Log phases shared by the PyTorch-based engines, for their [`ReadySignals::progress`] lists.
pub mod phases {
    use super::LogPhase;

    pub const SHARDS: LogPhase = LogPhase {
        all: &[],
        any: &["loading safetensors checkpoint shards"],
        phase: "loading weights",
        percent: true,
    };
    pub const LOADED: LogPhase = LogPhase::any(&["model loading took"], "weights loaded");
    pub const LOADING: LogPhase =
        LogPhase::any(&["loading weights", "loading model"], "loading weights");
    pub const CUDA_GRAPHS: LogPhase = LogPhase {
        all: &[],
        any: &["capturing cuda graph"],
        phase: "capturing CUDA graphs",
        percent: true,
    };
    pub const COMPILING: LogPhase = LogPhase::any(
        &["torch.compile", "compiling a graph", "compiling graph"],
        "compiling graphs",
    );
    pub const KV_CACHE: LogPhase = LogPhase {
        all: &["kv cache"],
        any: &["size", "memory"],
        phase: "allocating the KV cache",
        percent: false,
    };
    /// What uvicorn (every OpenAI-compatible server here) prints when the API comes up.
    pub const UVICORN: [&str; 2] = ["uvicorn running on", "application startup complete"];
    pub const API_STARTING: &str = "API server starting";
    pub const DISTRIBUTED: LogPhase = LogPhase::any(
        &["init_distributed_environment", "world_size="],
        "joining the distributed group",
    );
}

/// A variable that tells an engine (or a library it loads) where to keep a compile or JIT
/// cache, and the folder under the job's runtime cache (`workload::runtime_cache`) it names.
/// Each library's own default is under the container's home or `/tmp`, which a container
/// loses when it is removed: pointed into the runtime cache, what the first start compiled is
/// found again by the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheVar {
    pub var: &'static str,
    /// A folder under the runtime cache, relative (`triton`); empty: the runtime cache itself.
    pub sub: &'static str,
}

/// Cache variables shared by the PyTorch-based engines, for their
/// [`ServingEngine::cache_vars`] lists. Each is the variable the library itself reads (read in
/// its own source, not in a launcher's).
pub mod caches {
    use super::CacheVar;

    /// TorchInductor's compiled graphs and kernels (torch.compile); its default is
    /// `/tmp/torchinductor_USER`.
    pub const INDUCTOR: CacheVar = CacheVar {
        var: "TORCHINDUCTOR_CACHE_DIR",
        sub: "inductor",
    };
    /// Triton's compiled kernels (`triton.knobs.cache.dir`); its default is `~/.triton/cache`.
    pub const TRITON: CacheVar = CacheVar {
        var: "TRITON_CACHE_DIR",
        sub: "triton",
    };
    /// FlashInfer's JIT-built kernels: the library reads only the base
    /// (`flashinfer/jit/env.py`: `FLASHINFER_WORKSPACE_BASE`, default the home) and keeps its
    /// cache in `.cache/flashinfer/ARCH/` below it; its `FLASHINFER_CACHE_DIR` is derived from
    /// the base, not read from the environment.
    pub const FLASHINFER: CacheVar = CacheVar {
        var: "FLASHINFER_WORKSPACE_BASE",
        sub: "flashinfer",
    };
    /// What honours the XDG base directories and has no variable of its own (vLLM's default
    /// cache root is `$XDG_CACHE_HOME/vllm`); the Hugging Face cache is not affected: every
    /// serving container sets `HF_HOME` itself.
    pub const XDG: CacheVar = CacheVar {
        var: "XDG_CACHE_HOME",
        sub: "xdg",
    };
}

/// How an engine shows that it serves, and what it is doing meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadySignals {
    /// Answers 200 once the engine is up (`/health`).
    pub health_path: &'static str,
    /// Lists the served models, OpenAI style (`/v1/models`).
    pub models_path: &'static str,
    /// Log phases, first match wins (spark-launch's own `spark-launch: …` lines come first,
    /// for every engine).
    pub progress: &'static [LogPhase],
    /// Lowercased text of log lines that mean the start failed, beyond the markers every log
    /// is read for (`ERROR`, exceptions, CUDA out of memory, NCCL errors).
    pub fatal: &'static [&'static str],
}

/// The signals of a job whose workload label names no engine: every engine's phases.
pub static GENERIC_SIGNALS: ReadySignals = ReadySignals {
    health_path: "/health",
    models_path: "/v1/models",
    progress: &vllm::PROGRESS,
    fatal: &[],
};

impl ReadySignals {
    /// The signals of the engine a job's workload label names.
    pub fn of_workload(workload: &str) -> &'static ReadySignals {
        workload
            .parse::<EngineKind>()
            .map(|e| e.engine().ready())
            .unwrap_or(&GENERIC_SIGNALS)
    }
}

/// What of a Hub repository an engine loads ([`ServingEngine::hub_files`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubFiles {
    /// Every file (configuration, tokenizer, weights).
    Repository,
    /// The GGUF file(s) a `REPO[:QUANT]` spec picks (`model::gguf`).
    Gguf,
}

/// Which nodes of a group hold the model's files ([`ServingEngine::model_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelOn {
    /// Every node loads its share from its own disk.
    Every,
    /// The head loads the files and sends the other nodes their tensors over the network.
    Head,
}

/// Reads the logs of every node of a group started as the [`MultiNode`] says, all together:
/// what they say about how the nodes talk, or `None` when there is nothing to say (a group
/// that used no link the engine reports on: no line is shown).
pub type LinkReader = fn(MultiNode, &str) -> Option<LinkVerdict>;

/// What an engine's logs said about how its nodes talk ([`ServingEngine::link_reader`]):
/// what was read (`RPC transport`) and its verdict (`RDMA`, `TCP`, `not recorded` when the
/// logs say neither).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkVerdict {
    pub what: String,
    pub verdict: String,
}

impl fmt::Display for LinkVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.verdict)
    }
}

/// How an engine's ranks find each other across nodes; the plan's `mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultiNode {
    /// One node, nothing between nodes.
    Single,
    /// Every node runs the engine with its rank and the head's rendezvous address.
    Native,
    /// A Ray cluster: the head runs the engine, the others join Ray.
    Ray,
    /// The head runs `mpirun` over SSH into the other containers.
    Mpi,
    /// The other nodes lend their GPUs through RPC servers; the head's server uses them.
    Rpc,
}

impl MultiNode {
    pub fn as_str(self) -> &'static str {
        match self {
            MultiNode::Single => "single",
            MultiNode::Native => "native",
            MultiNode::Ray => "ray",
            MultiNode::Mpi => "mpi",
            MultiNode::Rpc => "rpc",
        }
    }
}

impl std::str::FromStr for MultiNode {
    type Err = String;
    /// The plan's `mode` back into the mode.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            MultiNode::Single,
            MultiNode::Native,
            MultiNode::Ray,
            MultiNode::Mpi,
            MultiNode::Rpc,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
        .ok_or_else(|| format!("unknown multi-node mode {s:?}: single, native, ray, mpi or rpc"))
    }
}

/// The words that stand, in a rank's line, for what the group knows only once it is placed:
/// its size, the rank's index (0 on the leader) and the leader's address. A Kubernetes
/// LeaderWorkerSet gives them as `$(LWS_GROUP_SIZE)`, `$(LWS_WORKER_INDEX)` and
/// `$(LWS_LEADER_ADDRESS)`, which the kubelet fills in before the container starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRefs {
    pub size: String,
    pub rank: String,
    pub leader: String,
}

/// A rank's line with the group's values written as [`GroupRefs`]: variables to set anew over
/// the rank's planned environment (values may hold the references), then the command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupLine {
    pub env: BTreeMap<String, String>,
    pub command: Vec<String>,
}

/// Replaces the value that follows the flag word `flag` in `command` (as an engine wrote it
/// itself: `--node-rank 1`), when the flag is there; `value` gets what was there before.
pub fn replace_value(command: &mut [String], flag: &str, value: impl FnOnce(&str) -> String) {
    if let Some(i) = command.iter().position(|w| w == flag)
        && let Some(v) = command.get_mut(i + 1)
    {
        *v = value(v);
    }
}

/// The port of an `ADDR:PORT` an engine wrote (the head's rendezvous), as written.
pub fn port_of(addr_port: &str) -> &str {
    addr_port.rsplit_once(':').map_or("", |(_, p)| p)
}

/// In which order a group's nodes start (and, for a supervisor, restart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartOrder {
    /// Every node's container at once; the ranks wait for each other (a rendezvous, Ray's
    /// join loop, the head's wait for every sshd).
    Together,
    /// Servers first, then the head: every worker's container starts, and once each worker's
    /// server answers on `port` (at its control-plane address), the head starts, whose
    /// process connects to them as it comes up and fails when one is not there yet (RPC
    /// servers, then the program that spreads its layers over them).
    ServersFirst { port: u16 },
    /// The head first: its container starts, and once its rendezvous answers on `port` (at its
    /// control-plane address), every worker starts and connects to it (a rank 0 that hosts
    /// the group's bootstrap, as sparkrun starts Atlas).
    HeadFirst { port: u16 },
}

/// How an engine's server program is spelled, where it has two that take the same arguments
/// (SGLang: `python3 -m sglang.launch_server` and `sglang serve`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// The Python module (`python3 -m sglang.launch_server`): every release.
    #[default]
    Module,
    /// The console script's `serve` subcommand (`sglang serve`, SGLang 0.5.5 and later).
    Serve,
}

impl Launcher {
    pub fn as_str(self) -> &'static str {
        match self {
            Launcher::Module => "module",
            Launcher::Serve => "serve",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Launcher {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "module" => Ok(Launcher::Module),
            "serve" => Ok(Launcher::Serve),
            other => Err(format!(
                "unknown launcher {other:?}: module (python3 -m sglang.launch_server) or serve (sglang serve)"
            )),
        }
    }
}

/// What a request asks of its engine beyond the shared serving options. Engine-neutral: each
/// engine reads the fields it has a use for (`--ray` is vLLM's, the sshd port and the LLM-API
/// options TensorRT-LLM's, the launcher SGLang's); `None` is the engine's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineOptions {
    /// Run the ranks over Ray instead of the engine's native multi-node mode.
    pub ray: bool,
    /// The rendezvous port on the head (vLLM's `--master-port`, SGLang's `--dist-init-addr`
    /// port).
    pub rendezvous_port: Option<u16>,
    /// Ray's GCS port on the head.
    pub ray_port: Option<u16>,
    /// The port of the sshd in every container (MPI between nodes).
    pub ssh_port: Option<u16>,
    /// The share of GPU memory for the KV cache (TensorRT-LLM's
    /// `kv_cache_config.free_gpu_memory_fraction`).
    pub memory_fraction: Option<f64>,
    pub cuda_graph_padding: Option<bool>,
    pub disable_overlap_scheduler: Option<bool>,
    pub max_batch_size: Option<u32>,
    pub max_num_tokens: Option<u32>,
    /// More keys for the engine's options file, merged over what spark-launch writes.
    pub config: BTreeMap<String, yaml_serde::Value>,
    /// How the server program is spelled (SGLang's: `python3 -m sglang.launch_server` or
    /// `sglang serve`).
    pub launcher: Option<Launcher>,
    /// Speculative decoding, mapped by each engine (or refused); its draft is staged.
    pub speculative: Option<Speculative>,
    /// The port of the RPC servers on the other nodes (llama.cpp's).
    pub rpc_port: Option<u16>,
    /// On one node, GPUs that get an RPC server of their own beside the head's server
    /// (llama.cpp's RPC path on one machine).
    pub rpc_gpus: Vec<u32>,
    /// The folder the engine's programs are run from instead of where the image or `PATH`
    /// has them (llama.cpp's `llama-server` and RPC server).
    pub programs: Option<String>,
    /// The expert-parallel size, for an engine whose expert groups add ranks of their own
    /// (Atlas's `--ep-size`; see [`ServingEngine::world`]).
    pub expert_parallel: Option<u32>,
}

impl EngineOptions {
    /// These options with `top`'s over them, field by field (`config` key by key).
    pub fn under(self, top: EngineOptions) -> EngineOptions {
        let mut config = self.config;
        config.extend(top.config);
        EngineOptions {
            ray: top.ray || self.ray,
            rendezvous_port: top.rendezvous_port.or(self.rendezvous_port),
            ray_port: top.ray_port.or(self.ray_port),
            ssh_port: top.ssh_port.or(self.ssh_port),
            memory_fraction: top.memory_fraction.or(self.memory_fraction),
            cuda_graph_padding: top.cuda_graph_padding.or(self.cuda_graph_padding),
            disable_overlap_scheduler: top
                .disable_overlap_scheduler
                .or(self.disable_overlap_scheduler),
            max_batch_size: top.max_batch_size.or(self.max_batch_size),
            max_num_tokens: top.max_num_tokens.or(self.max_num_tokens),
            config,
            launcher: top.launcher.or(self.launcher),
            speculative: top.speculative.or(self.speculative),
            rpc_port: top.rpc_port.or(self.rpc_port),
            rpc_gpus: if top.rpc_gpus.is_empty() {
                self.rpc_gpus
            } else {
                top.rpc_gpus
            },
            programs: top.programs.or(self.programs),
            expert_parallel: top.expert_parallel.or(self.expert_parallel),
        }
    }
}

/// Everything an engine needs to write its ranks: the decisions are made already.
pub struct RankInput<'a> {
    pub opts: &'a ServeOptions,
    pub tuning: &'a EngineOptions,
    /// The serving nodes' facts, head first.
    pub nodes: &'a [NodeInput],
    /// Their derived environment (`env.nodes[i]` is `nodes[i]`'s).
    pub env: &'a ClusterEnv,
    /// The address the API binds on the head (`0.0.0.0` for every interface).
    pub host: &'a str,
    /// The name `/v1/models` lists.
    pub served: &'a str,
    /// The model inside the containers (of a GGUF spec, the picked file).
    pub model_path: &'a str,
    /// The multimodal projector a GGUF spec picked beside the model, where the engine sees it.
    pub mmproj_path: Option<&'a str>,
    /// The job's own SSH identity, for engines that run MPI between containers.
    pub keys: &'a JobSshKeys,
}

/// An engine's part of a plan: every node's container with its command, and the waits of its
/// own between the start and the API's readiness (Ray's membership).
pub struct EngineRanks {
    /// One per serving node, in the input's order.
    pub containers: Vec<ContainerSpec>,
    pub waits: Vec<Step>,
}

/// A recipe's engine arguments with its tensor- and pipeline-parallel sizes written into them
/// by the engine ([`ServingEngine::recipe_parallel`]), and what changed, for the plan's
/// warnings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParallelArgs {
    pub args: Vec<String>,
    /// What was done, as a warning says it (`tensor_parallel: …`).
    pub said: String,
}

/// One serving engine. Every method is pure; see the module docs for who asks what.
pub trait ServingEngine: Sync {
    /// `vllm`: the subcommand, the profile's `engine:`, the workload label.
    fn name(&self) -> &'static str;
    /// `vLLM`: how messages name it.
    fn title(&self) -> &'static str;
    /// The image used unless `--image` says otherwise.
    fn default_image(&self) -> &'static str;
    /// The API port on the head unless `--port` says otherwise.
    fn default_port(&self) -> u16;
    fn defaults(&self) -> EngineDefaults {
        EngineDefaults {
            ready_timeout_s: DEFAULT_READY_TIMEOUT_S,
            memory_fraction: None,
        }
    }
    fn api_key(&self) -> ApiKeySupport;
    fn ready(&self) -> &'static ReadySignals;
    /// Whether it can run its ranks over Ray (`--ray`, a profile's `ray: true`).
    fn ray(&self) -> bool {
        false
    }
    /// The profile section of its own knobs (`trtllm:`), if it reads one: a top-level key of
    /// a launch profile that the profile reader hands to [`ServingEngine::read_profile_section`].
    fn profile_section(&self) -> Option<&'static str> {
        None
    }
    /// Reads its profile section (the YAML under [`ServingEngine::profile_section`], not null)
    /// into `into`: every problem as `(field inside the section, message)`, the field empty for
    /// the section as a whole; the profile reader puts each on its line. [`read_section`] reads
    /// a section's type field by field.
    fn read_profile_section(
        &self,
        _section: &yaml_serde::Value,
        _into: &mut EngineOptions,
    ) -> Vec<(String, String)> {
        Vec::new()
    }
    /// How community recipes write it: its program words, runtime names, flag table
    /// ([`RecipeSpelling`]); [`RecipeSpelling::NONE`]: recipes cannot run it.
    fn recipe(&self) -> &'static RecipeSpelling {
        &RecipeSpelling::NONE
    }
    /// The `@namespace` sparkrun reserves for this engine's own recipe registry, and where
    /// that registry is published (`@atlas`: Avarok's atlas-recipes); `None`: no registry of
    /// its own.
    fn recipe_namespace(&self) -> Option<spelling::RecipeNamespace> {
        None
    }
    /// Whether its ranks talk over NCCL: the plan then checks the NCCL every container loads
    /// (its steps, its section and their verdict), and `--nccl-from` can replace it. An engine
    /// that says no gets none of them.
    fn uses_nccl(&self) -> bool {
        true
    }
    /// What of a Hub repository it loads: the whole repository, or only the GGUF file(s)
    /// llama.cpp's `-hf REPO[:QUANT]` picks (a Hub model is then read as such a spec, and only
    /// those files are staged). An engine that loads whole repositories refuses a `:QUANT`.
    fn hub_files(&self) -> HubFiles {
        HubFiles::Repository
    }
    /// Which nodes of a group hold the model's files (staged there before the start): every
    /// node, or the head alone when the others get the weights from it over the network.
    fn model_on(&self) -> ModelOn {
        ModelOn::Every
    }
    /// How it reads what its logs say about how its nodes talk (llama.cpp: which transport
    /// its RPC connections used), shown after the start and in `status`; `None`: its logs are
    /// not read for it.
    fn link_reader(&self) -> Option<LinkReader> {
        None
    }
    /// Whether it runs MPI between containers over SSH: the launch then makes the job's own
    /// SSH identity before planning.
    fn job_ssh(&self) -> bool {
        false
    }
    /// The GPUs one replica spans with tensor-parallel size `tp`, pipeline size `pp`, `gpus`
    /// GPUs per node and these options, or why the engine cannot take that shape: tp × pp,
    /// unless the engine's own parallelism adds ranks (Atlas's expert-parallel groups).
    fn world(&self, tp: u32, pp: u32, _gpus: u32, _tuning: &EngineOptions) -> Result<u64, Problem> {
        crate::workload::limits::world(tp, pp).map_err(|problem| Problem {
            why: String::new(),
            what: problem,
            fix: "lower --tp or --pp".into(),
        })
    }
    /// In which order its group's nodes start with these options ([`StartOrder`]).
    fn start_order(&self, _tuning: &EngineOptions) -> StartOrder {
        StartOrder::Together
    }
    /// How `nodes` nodes run one replica with these options.
    fn multi_node(&self, tuning: &EngineOptions, nodes: usize) -> MultiNode;
    /// The ports it binds on `nodes` nodes, the API (`api`) first.
    fn ports(&self, tuning: &EngineOptions, api: u16, nodes: usize) -> Vec<EnginePort>;
    /// Refusals of its options (a fraction outside (0, 1]).
    fn problems(&self, _tuning: &EngineOptions) -> Vec<Problem> {
        Vec::new()
    }
    /// Refusals of extra arguments that repeat what spark-launch sets itself.
    fn reserved_args(&self, args: &[String]) -> Vec<Problem>;
    /// How a recipe's tensor- and pipeline-parallel sizes reach a line that has no rank flags
    /// spark-launch writes (llama.cpp's `--split-mode`, as sparkrun maps the two): the recipe's
    /// arguments rewritten and what was done, `None` when nothing is, or why the engine cannot
    /// take that pair. `nodes`: the nodes the job spans. Only a recipe's line is read this
    /// way; the engine's own command keeps the arguments it is given.
    fn recipe_parallel(
        &self,
        _tp: u32,
        _pp: u32,
        _nodes: u32,
        _args: &[String],
    ) -> Result<Option<ParallelArgs>, Problem> {
        Ok(None)
    }
    /// How it sizes its memory with these options and extra arguments: its fraction (given
    /// or its default, and what it is a fraction of), the context, sequences and KV dtype the
    /// arguments set, and the flags that set them (for the memory plan and its refusals).
    fn memory(&self, opts: &ServeOptions, tuning: &EngineOptions) -> EngineMemory;
    /// Refusals of a speculative-decoding block: a method the engine cannot express, or its
    /// flags given again in `args`. What is not refused, [`ServingEngine::ranks`] maps.
    fn speculative_problems(&self, spec: &Speculative, args: &[String]) -> Vec<Problem>;
    /// The flags of its server line that spark-launch writes itself (or, for the API key,
    /// takes out of every line), as its parser spells them: what a recipe's line and `-- extra
    /// args` are matched against ([`match_flag`]).
    fn owned_flags(&self) -> &'static [OwnedFlag] {
        &[]
    }
    /// A flag's name (without `=value`) as its parser reads it: vLLM reads `_` as `-`; the
    /// default is as written.
    fn flag_name(&self, word: &str) -> String {
        word.to_string()
    }
    /// Whether its parser reads an unambiguous prefix of a flag as that flag (argparse's
    /// `allow_abbrev`, on unless a program turns it off).
    fn abbreviations(&self) -> bool {
        false
    }
    /// The [`Launcher`] a recipe's program words (`sglang serve`) ask for, for an engine
    /// whose images ship more than one spelling; `None`: the engine writes its own.
    fn recipe_launcher(&self, _program: &[String]) -> Option<Launcher> {
        None
    }
    /// The separate speculative draft a recipe's settings (`defaults` with `--set` laid over
    /// them) name for this engine, to be staged beside the model; `None`: none named, or an
    /// engine that reads no draft from a recipe's settings.
    fn recipe_draft(&self, _settings: &BTreeMap<String, yaml_serde::Value>) -> Option<RecipeDraft> {
        None
    }
    /// Where it and the libraries it loads keep their compile and JIT caches ([`CacheVar`]):
    /// each variable is set in every rank to its folder under the job's runtime cache, unless
    /// the user or the recipe sets it. None: an engine that compiles nothing at start.
    fn cache_vars(&self) -> &'static [CacheVar] {
        &[]
    }
    /// Writes every rank's command into `containers` (one per serving node, head first, each
    /// already carrying the derived environment, the caches, the devices and the labels).
    fn ranks(&self, input: &RankInput<'_>, containers: Vec<ContainerSpec>) -> EngineRanks;
    /// A rank's line (`spec`, as [`ServingEngine::ranks`] wrote it for `role` in `mode`) for a
    /// group placed by someone else (a Kubernetes LeaderWorkerSet): every value the engine wrote
    /// from the plan's group — its size, this rank's index, the leader's address — written as
    /// `refs` instead, so that every worker runs one line. What it wrote from the node's own
    /// facts stays; so does anything the group's placer cannot know.
    fn group_line(
        &self,
        mode: MultiNode,
        role: crate::node::Role,
        spec: &ContainerSpec,
        refs: &GroupRefs,
    ) -> GroupLine;
}

/// The ports of every engine in each of its multi-node modes with default options, first
/// mention of a port kept: what doctor checks when it is not told which launch is coming.
/// Ranges are left out: a port taken inside one only matters when that mode runs.
pub fn default_ports() -> Vec<EnginePort> {
    let mut out: Vec<EnginePort> = Vec::new();
    for kind in EngineKind::ALL {
        let e = kind.engine();
        let mut modes = vec![EngineOptions::default()];
        if e.ray() {
            modes.push(EngineOptions {
                ray: true,
                ..EngineOptions::default()
            });
        }
        for tuning in &modes {
            for p in e.ports(tuning, e.default_port(), 2) {
                if p.single().is_some() && !out.iter().any(|o| o.first == p.first) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Reads a profile section into `T` (a struct of optional fields that refuses unknown ones),
/// key by key when it does not read whole, so that each problem names its field:
/// `(field, message)`, the field empty for the section as a whole.
pub fn read_section<T: DeserializeOwned>(
    section: &yaml_serde::Value,
) -> Result<T, Vec<(String, String)>> {
    let whole = match yaml_serde::from_value::<T>(section.clone()) {
        Ok(t) => return Ok(t),
        Err(e) => e.to_string(),
    };
    let mut out = Vec::new();
    if let yaml_serde::Value::Mapping(m) = section {
        for (k, v) in m {
            let one: yaml_serde::Mapping = std::iter::once((k.clone(), v.clone())).collect();
            if let Err(e) = yaml_serde::from_value::<T>(yaml_serde::Value::Mapping(one)) {
                let field = k.as_str().map(str::to_string).unwrap_or_default();
                out.push((field, e.to_string()));
            }
        }
    }
    if out.is_empty() {
        out.push((String::new(), whole));
    }
    Err(out)
}

/// Problems for flags in `args` that spark-launch sets itself: `reserved` lists them, `fix`
/// says what to use instead of one (by its name after [`normal`]). A problem names the flag,
/// never its value (which may be a key).
pub fn reserved(
    args: &[String],
    reserved: &[&str],
    normal: impl Fn(&str) -> String,
    fix: impl Fn(&str, &str) -> String,
) -> Vec<Problem> {
    args.iter()
        .filter_map(|a| {
            let written = flag_word(a);
            let flag = normal(written);
            reserved.contains(&flag.as_str()).then(|| {
                Problem::new(
                    format!("extra argument {written} is set by spark-launch itself"),
                    fix(&flag, written),
                )
            })
        })
        .collect()
}

/// The flag of a word (`--port` of `--port=9000`), without its value.
fn flag_word(word: &str) -> &str {
    word.split('=').next().unwrap_or(word)
}

/// Problems for the words of `args` that the engine's parser would read as a flag
/// spark-launch writes itself ([`match_flag`]: in full, in another spelling, abbreviated) or
/// cannot tell from one. `fix` says what to use instead of an owned flag. A problem names the
/// flag as written and as the engine reads it, never its value (which may be a key).
pub fn reserved_flags(
    engine: &dyn ServingEngine,
    args: &[String],
    fix: impl Fn(&OwnedFlag) -> String,
) -> Vec<Problem> {
    args.iter()
        .filter(|a| a.starts_with('-'))
        .filter_map(|a| {
            let written = flag_word(a);
            match match_flag(engine, written) {
                FlagMatch::Other => None,
                FlagMatch::Owned(f) => Some(Problem::new(
                    format!(
                        "extra argument {} is set by spark-launch itself",
                        as_read(written, f)
                    ),
                    fix(f),
                )),
                refused => Some(Problem::new(
                    format!(
                        "extra argument {written}: {}",
                        refused_why(engine, &refused)
                    ),
                    refused_fix(&refused),
                )),
            }
        })
        .collect()
}

/// `--hos (read as --host)`, or the name alone when written in full.
fn as_read(written: &str, f: &OwnedFlag) -> String {
    if written == f.name {
        written.to_string()
    } else {
        format!("{written} (read as {})", f.name)
    }
}

/// An engine's flag that spark-launch writes itself, as the engine's parser spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedFlag {
    pub name: &'static str,
    /// The shortest prefix of `name` that the engine's parser reads as this flag alone (where
    /// it reads abbreviations); a shorter prefix is ambiguous there. `name` itself when every
    /// shorter prefix also begins another flag of the engine.
    pub unique_from: &'static str,
    pub flag: RecipeFlag,
    pub values: FlagValues,
}

impl OwnedFlag {
    /// A flag taking one value.
    pub const fn one(name: &'static str, unique_from: &'static str, flag: RecipeFlag) -> Self {
        OwnedFlag {
            name,
            unique_from,
            flag,
            values: FlagValues::One,
        }
    }

    /// A flag followed by `values`.
    pub const fn with(
        name: &'static str,
        unique_from: &'static str,
        flag: RecipeFlag,
        values: FlagValues,
    ) -> Self {
        OwnedFlag {
            name,
            unique_from,
            flag,
            values,
        }
    }
}

/// What a flag word (without `=value`) is to an engine's parser, as far as the flags
/// spark-launch writes itself go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlagMatch {
    /// One spark-launch writes itself: in full, in another spelling the parser reads, or an
    /// abbreviation the parser reads as this flag alone.
    Owned(&'static OwnedFlag),
    /// A prefix that begins these flags of spark-launch's and that the parser cannot read as
    /// one flag alone (it refuses it as ambiguous, or would read it as another of its flags).
    Ambiguous(Vec<&'static str>),
    /// The API key's flag in a spelling the parser refuses (SGLang's `--api_key`): its value
    /// is a key in clear, so the word is never kept.
    MisspeltKey(&'static str),
    /// Not one of spark-launch's flags.
    Other,
}

/// How `engine`'s parser reads the flag word `word` (without `=value`): in full (after the
/// engine's spelling rules: vLLM reads `_` as `-`), abbreviated where the parser reads
/// abbreviations (argparse reads any unambiguous prefix of a long flag as that flag, so
/// `--hos` is `--host`), or as the API key's flag written in a spelling the parser refuses.
pub fn match_flag(engine: &dyn ServingEngine, word: &str) -> FlagMatch {
    if !word.starts_with('-') || word.trim_start_matches('-').is_empty() {
        return FlagMatch::Other;
    }
    let table = engine.owned_flags();
    let name = engine.flag_name(word);
    if let Some(f) = table.iter().find(|f| f.name == name) {
        return FlagMatch::Owned(f);
    }
    if engine.abbreviations() {
        let begun: Vec<&'static OwnedFlag> =
            table.iter().filter(|f| f.name.starts_with(&name)).collect();
        let alone: Vec<&&'static OwnedFlag> = begun
            .iter()
            .filter(|f| name.starts_with(f.unique_from))
            .collect();
        match alone.as_slice() {
            [f] => return FlagMatch::Owned(f),
            _ if !begun.is_empty() => {
                return FlagMatch::Ambiguous(begun.iter().map(|f| f.name).collect());
            }
            _ => {}
        }
    }
    // The key's flag in any spelling of `-` and `_`, in full or as a prefix long enough to
    // name it: never left in a line, whatever the parser would make of it.
    let loose = |s: &str| s.replace('_', "-");
    let word = loose(word);
    table
        .iter()
        .filter(|f| f.flag == RecipeFlag::ApiKey)
        .find(|f| {
            let full = loose(f.name);
            full == word || (full.starts_with(&word) && word.starts_with(&loose(f.unique_from)))
        })
        .map_or(FlagMatch::Other, |f| FlagMatch::MisspeltKey(f.name))
}

/// Why a word that is no flag spark-launch can take is refused (never its value).
fn refused_why(engine: &dyn ServingEngine, refused: &FlagMatch) -> String {
    match refused {
        FlagMatch::Ambiguous(names) => format!(
            "{} reads abbreviations, and this one could be {} (set by spark-launch) or another of its flags",
            engine.title(),
            names.join(" or ")
        ),
        FlagMatch::MisspeltKey(name) => format!(
            "{} does not read this spelling of {name}, and its value would be an API key in clear on the command line",
            engine.title()
        ),
        _ => String::new(),
    }
}

fn refused_fix(refused: &FlagMatch) -> String {
    match refused {
        FlagMatch::MisspeltKey(name) => format!(
            "remove it; give the key with spark-launch's --api-key (it never goes on a command line), or write {name} in a recipe"
        ),
        _ => "write the flag out in full".to_string(),
    }
}

/// The value of the last of `names` in `args` (`--flag value` or `--flag=value`), each
/// argument's name compared after `normal` (an engine that takes `_` for `-` says so there).
pub fn flag_value<'a>(
    args: &'a [String],
    names: &[&str],
    normal: impl Fn(&str) -> String,
) -> Option<&'a str> {
    let mut found = None;
    for (i, a) in args.iter().enumerate() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v)),
            _ => (a.as_str(), None),
        };
        if names.contains(&normal(name).as_str()) {
            found = inline.or_else(|| args.get(i + 1).map(String::as_str));
        }
    }
    found
}

/// A count as engines take it: `32768`, or with a suffix (`32k` = 32,000 and `32K` = 32,768,
/// `1m` = 1,000,000 and `1M` = 1,048,576, as vLLM reads them).
pub fn parse_count(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1_000f64),
        'K' => (&t[..t.len() - 1], 1_024f64),
        'm' => (&t[..t.len() - 1], 1_000_000f64),
        'M' => (&t[..t.len() - 1], 1_048_576f64),
        _ => (t, 1f64),
    };
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n > 0.0).then_some((n * mult) as u64)
}

/// A fraction given as an engine's argument (`0.85`), when it is one in (0, 1].
pub fn parse_fraction(s: &str) -> Option<f64> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|f| *f > 0.0 && *f <= 1.0)
}

/// What a flag of a recipe's engine line is to spark-launch, when the engine writes it itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecipeFlag {
    /// The model: spark-launch stages it and passes its folder.
    Model,
    /// The model's revision: the staging's.
    Revision,
    /// Tensor-parallel size.
    Tp,
    /// Expert-parallel size, where expert groups add ranks (Atlas's `--ep-size`).
    ExpertParallel,
    /// Pipeline-parallel size.
    Pp,
    /// The API port on the head.
    Port,
    /// The address the API binds (`--bind` decides).
    Host,
    /// The name(s) `/v1/models` lists.
    ServedName,
    /// The API key: taken out of every line ([`take_api_key`]), enforced as `--api-key` is.
    ApiKey,
    /// The rendezvous port on the head.
    Rendezvous,
    /// How the ranks run (multiprocessing, Ray): spark-launch's multi-node mode.
    Executor,
    /// Written by spark-launch itself (per node: ranks, the head's address, headless workers;
    /// or as its plan needs it): the recipe's is dropped, with a warning.
    Reserved,
    /// A setting the engine cannot take from a recipe yet: the recipe is refused with this.
    Unsupported(&'static str),
}

/// How many words follow a flag in an engine line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagValues {
    /// A switch (`--headless`).
    None,
    /// One value (`--port 8000` or `--port=8000`).
    One,
    /// Every word up to the next flag (`--served-model-name a b`).
    Many,
}

/// One flag of a recipe's line that the engine writes itself, as the recipe wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedArg {
    pub flag: RecipeFlag,
    /// The flag's name as written (`--tensor_parallel_size`).
    pub name: String,
    pub values: Vec<String>,
}

impl OwnedArg {
    /// `--port 9000` as the recipe said it.
    pub fn written(&self) -> String {
        std::iter::once(self.name.as_str())
            .chain(self.values.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A recipe's engine arguments (after the program words and the model) split by the engine:
/// the words it keeps verbatim and in order, the flags it writes itself, and why words that
/// cannot be kept or taken are refused (never their values).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecipeArgs {
    pub kept: Vec<String>,
    pub owned: Vec<OwnedArg>,
    pub refused: Vec<String>,
}

/// Splits `args` with [`match_flag`]: a flag the engine's parser would read as one
/// spark-launch writes itself is taken out with its value(s) (`--f v`, `--f=v`), under its
/// full name; a word it cannot tell from one (an ambiguous abbreviation, the key's flag
/// misspelt) is taken out and refused; every other word stays where it was.
pub fn split_recipe_args(engine: &dyn ServingEngine, args: &[String]) -> RecipeArgs {
    let mut out = RecipeArgs::default();
    let mut i = 0;
    while i < args.len() {
        let word = &args[i];
        i += 1;
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v)),
            _ => (word.as_str(), None),
        };
        let arity = match match_flag(engine, name) {
            FlagMatch::Other => {
                out.kept.push(word.clone());
                continue;
            }
            FlagMatch::Owned(f) => f.values,
            refused => {
                out.refused.push(format!(
                    "`{name}`: {}; {}",
                    refused_why(engine, &refused),
                    refused_fix(&refused)
                ));
                FlagValues::One
            }
        };
        let values = take_values(args, &mut i, inline, arity);
        if let FlagMatch::Owned(f) = match_flag(engine, name) {
            out.owned.push(OwnedArg {
                flag: f.flag,
                name: name.to_string(),
                values,
            });
        }
    }
    out
}

/// The value(s) of a flag whose word was just read (`args[*i]` is the next word).
fn take_values(
    args: &[String],
    i: &mut usize,
    inline: Option<&str>,
    arity: FlagValues,
) -> Vec<String> {
    let mut values = Vec::new();
    match (inline, arity) {
        (Some(v), _) => values.push(v.to_string()),
        (None, FlagValues::None) => {}
        (None, FlagValues::One) => {
            if let Some(v) = args.get(*i) {
                values.push(v.clone());
                *i += 1;
            }
        }
        (None, FlagValues::Many) => {
            while let Some(v) = args.get(*i).filter(|v| !v.starts_with('-')) {
                values.push(v.clone());
                *i += 1;
            }
        }
    }
    values
}

/// Takes the API key out of an engine line's arguments: every word the engine's parser reads
/// as its key flag (in full, in another spelling, abbreviated) goes with its value(s), and
/// the last key given is returned (the parser keeps the last; of several values, the first).
/// A word that may be the key's flag but cannot be taken as it (an ambiguous abbreviation,
/// a spelling the engine refuses) keeps its place with its value masked, so that no key
/// stays in an argv and [`split_recipe_args`] refuses the word by name.
pub fn take_api_key(engine: &dyn ServingEngine, args: &mut Vec<String>) -> Option<String> {
    let mut key = None;
    let mut out = Vec::with_capacity(args.len());
    let words = std::mem::take(args);
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        i += 1;
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v)),
            _ => (word.as_str(), None),
        };
        match match_flag(engine, name) {
            FlagMatch::Owned(f) if f.flag == RecipeFlag::ApiKey => {
                let values = take_values(&words, &mut i, inline, f.values);
                key = values.into_iter().next().or(key);
            }
            FlagMatch::Ambiguous(names) if names.iter().any(|n| is_key_flag(engine, n)) => {
                mask(&mut out, &words, &mut i, name, inline);
            }
            FlagMatch::MisspeltKey(_) => mask(&mut out, &words, &mut i, name, inline),
            _ => out.push(word.clone()),
        }
    }
    *args = out;
    key
}

fn is_key_flag(engine: &dyn ServingEngine, name: &str) -> bool {
    engine
        .owned_flags()
        .iter()
        .any(|f| f.name == name && f.flag == RecipeFlag::ApiKey)
}

/// Keeps a flag word with its value replaced by the mask plans print for secrets.
fn mask(out: &mut Vec<String>, words: &[String], i: &mut usize, name: &str, inline: Option<&str>) {
    let masked = crate::plan::secret::MASK.to_string();
    if inline.is_some() {
        out.push(format!("{name}={masked}"));
        return;
    }
    out.push(name.to_string());
    if words.get(*i).is_some_and(|v| !v.starts_with('-')) {
        out.push(masked);
        *i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_is_named_once_and_parses_back() {
        for e in EngineKind::ALL {
            assert_eq!(e.as_str().parse::<EngineKind>(), Ok(e));
            assert_eq!(e.engine().name(), e.to_string());
        }
        assert!("tgi".parse::<EngineKind>().is_err());
    }

    #[test]
    fn both_launcher_spellings_parse_back() {
        for l in [Launcher::Module, Launcher::Serve] {
            assert_eq!(l.as_str().parse::<Launcher>(), Ok(l));
        }
        assert!("launch".parse::<Launcher>().unwrap_err().contains("module"));
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_recipe_line_keeps_its_own_flags_in_order_and_gives_up_the_engine_s() {
        let args = words(
            "--max-model-len 4096 --tensor_parallel_size=2 --kv-cache-dtype fp8 --served-model-name a b --headless --port 9000 --enable-prefix-caching",
        );
        let split = split_recipe_args(EngineKind::Vllm.engine(), &args);
        assert_eq!(
            split.kept,
            words("--max-model-len 4096 --kv-cache-dtype fp8 --enable-prefix-caching")
        );
        let owned: Vec<(RecipeFlag, String)> =
            split.owned.iter().map(|o| (o.flag, o.written())).collect();
        assert_eq!(
            owned,
            [
                (RecipeFlag::Tp, "--tensor_parallel_size 2".to_string()),
                (
                    RecipeFlag::ServedName,
                    "--served-model-name a b".to_string()
                ),
                (RecipeFlag::Reserved, "--headless".to_string()),
                (RecipeFlag::Port, "--port 9000".to_string()),
            ]
        );
    }

    #[test]
    fn tensorrt_llm_refuses_a_recipe_s_own_options_file() {
        let split = split_recipe_args(
            EngineKind::Trtllm.engine(),
            &words("--tp_size 2 --extra_llm_api_options /x.yaml --max_seq_len 8192"),
        );
        assert_eq!(split.kept, words("--max_seq_len 8192"));
        assert!(matches!(split.owned[1].flag, RecipeFlag::Unsupported(_)));
    }

    #[test]
    fn an_engine_s_memory_flags_are_read_in_either_spelling_the_last_one_winning() {
        let args = words("--max-model-len 4096 --gpu-memory-utilization=0.8 --max_model_len 32K");
        let n = |f: &str| f.replace('_', "-");
        assert_eq!(flag_value(&args, &["--max-model-len"], n), Some("32K"));
        assert_eq!(
            flag_value(&args, &["--gpu-memory-utilization"], n),
            Some("0.8")
        );
        assert_eq!(flag_value(&args, &["--kv-cache-dtype"], n), None);
        assert_eq!(parse_count("32K"), Some(32_768));
        assert_eq!(parse_count("32k"), Some(32_000));
        assert_eq!(parse_count("196608"), Some(196_608));
        assert_eq!(parse_count("x"), None);
        assert_eq!(parse_fraction("0.85"), Some(0.85));
        assert_eq!(parse_fraction("1.5"), None);
    }

    #[test]
    fn every_engine_names_its_memory_flags_and_reads_them_from_its_arguments() {
        use crate::model::ModelSource;
        use crate::workload::memory::{EngineFraction, FractionOf};
        let model = ModelSource::parse("org/m", None).unwrap();
        let job = crate::plan::JobName::new("j").unwrap();
        for kind in EngineKind::ALL {
            let e = kind.engine();
            let plain = e.memory(
                &ServeOptions::new(kind, job.clone(), model.clone()),
                &EngineOptions::default(),
            );
            assert!(
                plain.context.is_none() && plain.sequences.is_none(),
                "{kind}"
            );
            assert!(plain.fraction_flag.starts_with("--"), "{kind}");
            let mut o = ServeOptions::new(kind, job.clone(), model.clone());
            o.engine_args = words(&format!("{} 8192", plain.context_flag));
            assert_eq!(
                e.memory(&o, &EngineOptions::default()).context,
                Some(8192),
                "{kind}"
            );
        }
        let mut o = ServeOptions::new(EngineKind::Vllm, job.clone(), model.clone());
        o.engine_args = words("--gpu-memory-utilization 0.7 --max-num-seqs 4 --kv-cache-dtype fp8");
        let m = EngineKind::Vllm
            .engine()
            .memory(&o, &EngineOptions::default());
        assert_eq!(m.fraction, EngineFraction::Given(0.7));
        assert_eq!((m.sequences, m.kv_dtype.as_deref()), (Some(4), Some("fp8")));
        let m = EngineKind::Trtllm
            .engine()
            .memory(&o, &EngineOptions::default());
        assert_eq!(m.fraction_of, FractionOf::FreeAfterWeights);
        let m = EngineKind::Sglang.engine().memory(
            &ServeOptions::new(EngineKind::Sglang, job, model),
            &EngineOptions::default(),
        );
        assert!(matches!(m.fraction, EngineFraction::LeavesReserve(_)));
    }

    #[test]
    fn doctor_s_default_ports_are_every_engine_s_in_each_mode_with_the_planned_rendezvous() {
        let ports: Vec<(u16, &str)> = default_ports().iter().map(|p| (p.first, p.what)).collect();
        assert_eq!(
            ports,
            vec![
                (8000, "vLLM API server"),
                (29501, "torch.distributed rendezvous (vLLM --master-port)"),
                (6379, "Ray GCS"),
                (8355, "TensorRT-LLM API server"),
                (2233, "container sshd (mpirun)"),
                (30000, "SGLang API server"),
                (20000, "torch.distributed store (SGLang --dist-init-addr)"),
                (8080, "llama.cpp API server"),
                (50052, "llama.cpp RPC server (ggml-rpc-server)"),
                (8888, "Atlas API server"),
                (29500, "NCCL bootstrap (Atlas --master-port)"),
            ]
        );
    }
}
