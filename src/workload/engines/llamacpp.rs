//! llama.cpp across nodes: the per-rank commands of `spark-launch llamacpp`.
//!
//! llama.cpp spreads one model over machines with its RPC backend: every worker runs an RPC
//! server (`ggml-rpc-server`) that lends its GPUs, and the head runs `llama-server --rpc
//! HOST:PORT,…`, which loads the GGUF file, places layers on its own GPUs and on the
//! workers' in proportion to their free memory, and serves the OpenAI-style API. There is no
//! NCCL, no rendezvous and no rank numbering: the head connects to the servers, so they
//! start first ([`StartOrder::ServersFirst`]).
//!
//! The RPC protocol has no authentication and lets its client write arbitrary memory of the
//! server's devices: an RPC server binds the worker's fabric address only (its control-plane
//! address when that is on a fabric subnet), never every interface and never the management
//! network. A worker with no fabric address gets a command that refuses to start, and the
//! plan says why.
//!
//! On one machine (`--local`), `--rpc-gpus` runs RPC servers bound to 127.0.0.1 on some of
//! its GPUs beside `llama-server` on the others: the RPC path on one box, as a test of it.
//!
//! Transport: builds with `GGML_RPC_RDMA` negotiate RDMA (RoCE) per connection and fall back to
//! TCP; which one was used is read from the logs ([`transport`]) and shown after the start and
//! in `status` ([`rpc_link`]).
//!
//! The model: a GGUF file or folder, or a Hub repository read as llama.cpp's `-hf REPO[:QUANT]`
//! reads it (`model::gguf`): only the file(s) that spec picks are staged, on the head alone
//! (the head loads the file and sends each RPC server its tensors over the network), and
//! `llama-server` is given the staged file's path, never `-hf` — the weights are staged,
//! checked and resumed by spark-launch like every engine's, and the server never reaches for
//! the Hub. A projector the spec picked is given with `--mmproj`, as `-hf` would.
//!
//! Pure: the decided plan in, the ranks' commands out.

use super::speculative::Speculative;
use super::spelling::{ProgramWords, RecipeRuntime, RecipeSpelling};
use super::{
    ApiKeySupport, CacheVar, EngineOptions, EnginePort, EngineRanks, GroupLine, GroupRefs,
    HubFiles, LinkReader, LinkVerdict, LogPhase, ModelOn, MultiNode, OwnedFlag, ParallelArgs,
    PortOn, PortReach, RankInput, ReadySignals, RecipeFlag, ServingEngine, StartOrder,
};
use crate::node::Role;
use crate::plan::{ContainerSpec, RuntimeKind};
use crate::workload::memory::{EngineFraction, EngineMemory, FractionOf};
use crate::workload::serve::{Problem, ServeOptions};

/// The image used unless `--image` says otherwise: llama.cpp's own CUDA build with every tool
/// (the server and the RPC server) in `/app`.
pub const DEFAULT_IMAGE: &str = "ghcr.io/ggml-org/llama.cpp:full-cuda";
/// `llama-server`'s own default `--port`.
pub const DEFAULT_PORT: u16 = 8080;
/// The RPC server's own default `--port`.
pub const DEFAULT_RPC_PORT: u16 = 50052;
/// Where the default image keeps its programs.
pub const IMAGE_PROGRAMS: &str = "/app";
/// The server program.
pub const SERVER: &str = "llama-server";
/// The RPC server program (`rpc-server` before llama.cpp named it after ggml).
pub const RPC_SERVER: &str = "ggml-rpc-server";
/// The variable `llama-server` reads its API key from (never a command line).
pub const API_KEY_VAR: &str = "LLAMA_API_KEY";
/// Every layer on the GPUs (local and remote): more than any model has.
const ALL_LAYERS: &str = "999";

/// Progress lines of `llama-server` (its `load_model`, `load_tensors`, the server's own
/// lines).
static PROGRESS: [LogPhase; 5] = [
    LogPhase::any(&["server is listening on"], super::phases::API_STARTING),
    LogPhase::any(&["model loaded"], "weights loaded"),
    LogPhase::any(
        &["llama_kv_cache", "llama_context:"],
        "allocating the KV cache",
    ),
    LogPhase::any(&["load_tensors:"], "loading weights"),
    LogPhase::any(&["loading model"], "loading weights"),
];

static READY: ReadySignals = ReadySignals {
    health_path: "/health",
    models_path: "/v1/models",
    progress: &PROGRESS,
    fatal: &[
        "failed to load model",
        "exiting due to model loading error",
        "remote rpc server crashed",
        "failed to connect to rpc server",
    ],
};

/// `spark-launch llamacpp`.
pub struct Llamacpp;

impl ServingEngine for Llamacpp {
    fn name(&self) -> &'static str {
        "llamacpp"
    }
    fn title(&self) -> &'static str {
        "llama.cpp"
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
    /// None: `llama-server` and `rpc-server` run kernels compiled when llama.cpp was built,
    /// and compile nothing at start.
    fn cache_vars(&self) -> &'static [CacheVar] {
        &[]
    }
    fn recipe(&self) -> &'static RecipeSpelling {
        &RECIPE
    }
    fn uses_nccl(&self) -> bool {
        false
    }
    fn hub_files(&self) -> HubFiles {
        HubFiles::Gguf
    }
    /// The RPC servers get their tensors from `llama-server` over the network (or from their
    /// own `-c` cache): only the head reads the model's files.
    fn model_on(&self) -> ModelOn {
        ModelOn::Head
    }
    fn link_reader(&self) -> Option<LinkReader> {
        Some(rpc_link)
    }
    fn start_order(&self, tuning: &EngineOptions) -> StartOrder {
        StartOrder::ServersFirst {
            port: rpc_port(tuning),
        }
    }
    fn multi_node(&self, _tuning: &EngineOptions, nodes: usize) -> MultiNode {
        if nodes > 1 {
            MultiNode::Rpc
        } else {
            MultiNode::Single
        }
    }
    fn ports(&self, tuning: &EngineOptions, api: u16, nodes: usize) -> Vec<EnginePort> {
        let mut ports = vec![EnginePort::api("llama.cpp API server", api)];
        if nodes > 1 {
            ports.push(EnginePort::one(
                "RPC",
                "llama.cpp RPC server (ggml-rpc-server)",
                rpc_port(tuning),
                PortOn::Every,
                PortReach::HeadToWorkers,
            ));
        }
        ports
    }
    fn problems(&self, tuning: &EngineOptions) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for g in &tuning.rpc_gpus {
            if seen.contains(g) {
                out.push(Problem::new(
                    format!("--rpc-gpus names GPU {g} twice"),
                    "give each GPU once",
                ));
            }
            seen.push(*g);
        }
        out
    }
    fn reserved_args(&self, args: &[String]) -> Vec<Problem> {
        super::reserved_flags(self, args, |f| match f.flag {
            RecipeFlag::Port => "use --port before `--`".to_string(),
            RecipeFlag::Host => "use --bind".to_string(),
            RecipeFlag::ApiKey => {
                "use --api-key before `--` (it never goes on a command line)".to_string()
            }
            RecipeFlag::Model | RecipeFlag::ServedName => {
                "give the model as the MODEL argument; its name is the served name".to_string()
            }
            _ => format!("remove {}: spark-launch writes it from the plan", f.name),
        })
    }
    /// As sparkrun maps a llama-cpp recipe's sizes: `tensor_parallel` above 1 is
    /// `--split-mode row`, `pipeline_parallel` above 1 `--split-mode layer`, written last in
    /// place of any `--split-mode` the line has; both above 1 is refused, as sparkrun refuses
    /// it. A recipe at 1 × 1 keeps its line.
    /// On one node, as sparkrun's solo line: tensor_parallel is `--split-mode row` (the rows
    /// of each matrix over that node's GPUs), pipeline_parallel `--split-mode layer`, in place
    /// of the command's own. Across nodes sparkrun's head splits by layers (its `split_mode`
    /// setting, else `layer`) and the sizes only count the nodes: a row split cannot span RPC
    /// servers, so the recipe's line is kept and llama-server splits by layers unless it says
    /// otherwise.
    fn recipe_parallel(
        &self,
        tp: u32,
        pp: u32,
        nodes: u32,
        args: &[String],
    ) -> Result<Option<ParallelArgs>, Problem> {
        let (mode, key, size) = match (tp > 1, pp > 1) {
            (true, true) => {
                return Err(Problem::new(
                    format!(
                        "tensor_parallel {tp} and pipeline_parallel {pp} are both above 1: llama.cpp splits a model by rows (--split-mode row, tensor_parallel) or by layers (--split-mode layer, pipeline_parallel), never both, and sparkrun refuses the pair too"
                    ),
                    "set one of them to 1 (--set pipeline_parallel=1 keeps the row split, --set tensor_parallel=1 the layer split)",
                ));
            }
            (true, false) => ("row", "tensor_parallel", tp),
            (false, true) => ("layer", "pipeline_parallel", pp),
            (false, false) => return Ok(None),
        };
        if nodes > 1 {
            let own = !without_split_mode(args).1.is_empty();
            return Ok(Some(ParallelArgs {
                args: args.to_vec(),
                said: format!(
                    "{key}: {key} {size} spreads the job over {nodes} nodes (llama-server's RPC servers); across nodes llama-server splits the model by {}, as sparkrun's head does, not by rows",
                    if own {
                        "the command's own --split-mode"
                    } else {
                        "layers (its default)"
                    }
                ),
            }));
        }
        let (mut kept, replaced) = without_split_mode(args);
        kept.extend([SPLIT_MODE.to_string(), mode.to_string()]);
        let replaced = if replaced.is_empty() {
            String::new()
        } else {
            format!(" (the command's `{}` is replaced)", replaced.join(" "))
        };
        Ok(Some(ParallelArgs {
            args: kept,
            said: format!(
                "{key}: llama-server runs with {SPLIT_MODE} {mode} for {key} {size}, as sparkrun maps it{replaced}"
            ),
        }))
    }
    fn owned_flags(&self) -> &'static [OwnedFlag] {
        &OWNED
    }
    fn memory(&self, opts: &ServeOptions, _tuning: &EngineOptions) -> EngineMemory {
        let args = &opts.engine_args;
        let value = |names: &[&str]| super::flag_value(args, names, str::to_string);
        EngineMemory {
            fraction: EngineFraction::AsNeeded,
            fraction_of: FractionOf::FreeAfterWeights,
            fraction_flag: "--fit-target",
            context: value(&["-c", "--ctx-size"]).and_then(super::parse_count),
            context_flag: "--ctx-size",
            sequences: value(&["-np", "--parallel"]).and_then(super::parse_count),
            sequences_flag: "--parallel",
            kv_dtype: value(&["-ctk", "--cache-type-k"]).map(str::to_string),
        }
    }
    fn speculative_problems(&self, _spec: &Speculative, _args: &[String]) -> Vec<Problem> {
        vec![Problem::new(
            "a speculative block: spark-launch maps none onto llama.cpp yet",
            "remove it and pass llama-server's own --spec-draft-model FILE after `--`",
        )]
    }
    fn ranks(&self, input: &RankInput<'_>, mut containers: Vec<ContainerSpec>) -> EngineRanks {
        let port = rpc_port(input.tuning);
        let programs = programs(input);
        let mut endpoints = Vec::new();
        for (env, spec) in input.env.nodes.iter().zip(&mut containers).skip(1) {
            spec.command = match env.control.fabric_subnet {
                Some(_) => {
                    endpoints.push(format!("{}:{port}", env.control.addr));
                    rpc_server(&programs, &env.control.addr.to_string(), port)
                }
                None => refuse_management(&env.name),
            };
        }
        let local: Vec<(u32, String)> = if input.env.nodes.len() == 1 {
            input
                .tuning
                .rpc_gpus
                .iter()
                .enumerate()
                .map(|(i, g)| (*g, format!("127.0.0.1:{}", port + i as u16)))
                .collect()
        } else {
            Vec::new()
        };
        endpoints.extend(local.iter().map(|(_, ep)| ep.clone()));
        let mut args = vec![
            format!("{programs}{SERVER}"),
            "--host".to_string(),
            input.host.to_string(),
            "--port".to_string(),
            input.opts.port.to_string(),
            "--alias".to_string(),
            input.served.to_string(),
            "--n-gpu-layers".to_string(),
            ALL_LAYERS.to_string(),
            "--metrics".to_string(),
        ];
        if !endpoints.is_empty() {
            args.extend(["--rpc".to_string(), endpoints.join(",")]);
        }
        // The projector the spec picked, as `-hf` gives it, unless the line says otherwise.
        let own_mmproj = input.opts.engine_args.iter().any(|a| {
            let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
            MMPROJ_FLAGS.contains(&flag)
        });
        if let (Some(mmproj), false) = (input.mmproj_path, own_mmproj) {
            args.extend(["--mmproj".to_string(), mmproj.to_string()]);
        }
        args.extend(input.opts.engine_args.iter().cloned());
        let model = input.model_path;
        let head = &mut containers[0];
        head.command = if local.is_empty() && model.ends_with(".gguf") {
            let mut c = args;
            c.splice(1..1, ["--model".to_string(), model.to_string()]);
            c
        } else {
            let gpus = input.opts.gpus_per_node;
            let quant = input.opts.model.gguf().and_then(|g| g.quant.as_deref());
            let script = head_script(
                &programs,
                (model, quant),
                &local,
                gpus,
                input.opts.ready_timeout_s,
            );
            let mut c = vec![
                "bash".to_string(),
                "-c".to_string(),
                script,
                SERVER.to_string(),
            ];
            c.extend(args);
            c
        };
        EngineRanks {
            containers,
            waits: Vec::new(),
        }
    }
    /// The RPC servers bind their own fabric address and the head lists every worker's: a
    /// group placed by someone else knows neither before it starts, so the lines stay as
    /// planned (a LeaderWorkerSet of llama.cpp needs the workers' addresses fixed).
    fn group_line(
        &self,
        _mode: MultiNode,
        _role: Role,
        spec: &ContainerSpec,
        _refs: &GroupRefs,
    ) -> GroupLine {
        GroupLine {
            env: Default::default(),
            command: spec.command.clone(),
        }
    }
}

fn rpc_port(tuning: &EngineOptions) -> u16 {
    tuning.rpc_port.unwrap_or(DEFAULT_RPC_PORT)
}

/// The folder the programs are called from, with its trailing `/` (empty: found on `PATH`):
/// `--programs` when given; in a container, the default image's `/app`; as host processes,
/// `PATH`.
fn programs(input: &RankInput<'_>) -> String {
    let dir = match (&input.tuning.programs, input.opts.runtime) {
        (Some(d), _) => d.clone(),
        (None, RuntimeKind::Docker) if input.opts.image == DEFAULT_IMAGE => {
            IMAGE_PROGRAMS.to_string()
        }
        (None, _) => String::new(),
    };
    if dir.is_empty() {
        dir
    } else {
        format!("{}/", dir.trim_end_matches('/'))
    }
}

/// An RPC server lending every GPU of its node, bound to `addr` only.
fn rpc_server(programs: &str, addr: &str, port: u16) -> Vec<String> {
    vec![
        format!("{programs}{RPC_SERVER}"),
        "--host".to_string(),
        addr.to_string(),
        "--port".to_string(),
        port.to_string(),
    ]
}

/// A worker whose control plane is on the management network: the RPC server would be
/// reachable by anyone there, without authentication, so it refuses to start.
fn refuse_management(node: &crate::node::NodeName) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "echo 'spark-launch: {node} has no fabric address: llama.cpp RPC has no authentication and is never bound to the management network' >&2; exit 1"
        ),
    ]
}

/// The head's script when it must do more than run `llama-server`: start the RPC servers
/// of `local` (GPU, 127.0.0.1:PORT) and give `llama-server` the other GPUs of the node's
/// `gpus`; wait until each local server answers (within `timeout_s`); find the GGUF file in a
/// folder (the first in name order, never a projector or sidecar: the first part of a split
/// model; with a quant — a Hub spec whose file was not picked from the listing, as in a plan
/// made without the Hub — the first naming it, one folder deep too); then run `llama-server`
/// (its words are the script's arguments) with `--model`. The script's `$0` is the server's
/// name, for error messages.
fn head_script(
    programs: &str,
    (model, quant): (&str, Option<&str>),
    local: &[(u32, String)],
    gpus: u32,
    timeout_s: u64,
) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut s = String::from("set -u\n");
    if !local.is_empty() {
        // The RPC servers end with the script, whichever way it ends.
        s.push_str("trap 'kill $(jobs -p) 2>/dev/null' EXIT\n");
    }
    for (gpu, ep) in local {
        let (addr, port) = ep.rsplit_once(':').unwrap_or((ep, ""));
        s.push_str(&format!(
            "CUDA_VISIBLE_DEVICES={gpu} {} --host {addr} --port {port} &\n",
            q(&format!("{programs}{RPC_SERVER}"))
        ));
    }
    for (_, ep) in local {
        let (addr, port) = ep.rsplit_once(':').unwrap_or((ep, ""));
        s.push_str(&format!(
            "i=0; until (exec 3<>/dev/tcp/{addr}/{port}) 2>/dev/null; do i=$((i+1)); \
if [ \"$i\" -ge {timeout_s} ]; then echo \"spark-launch: no RPC server answers on {ep}\" >&2; exit 1; fi; sleep 1; done\n"
        ));
    }
    if !local.is_empty() {
        let rest: Vec<String> = (0..gpus.max(1))
            .filter(|g| !local.iter().any(|(l, _)| l == g))
            .map(|g| g.to_string())
            .collect();
        s.push_str(&format!("export CUDA_VISIBLE_DEVICES={}\n", rest.join(",")));
    }
    s.push_str(&format!("m={}\n", q(model)));
    let (globs, pick) = match quant {
        Some(quant) => (
            "\"$m\"/*.gguf \"$m\"/*/*.gguf",
            format!(" | grep -i -e {}", q(&format!("{quant}[.-]"))),
        ),
        None => ("\"$m\"/*.gguf", String::new()),
    };
    s.push_str(&format!(
        "if [ -d \"$m\" ]; then f=$(ls {globs} 2>/dev/null | grep -v -e mmproj -e imatrix -e mtp- -e eagle3- -e dflash- -e dspark-{pick} | sort | head -n 1); \
if [ -z \"$f\" ]; then echo \"spark-launch: no .gguf model file in $m\" >&2; exit 1; fi; m=$f; fi\n"
    ));
    s.push_str("prog=$1; shift\n\"$prog\" --model \"$m\" \"$@\"\n");
    s
}

/// The RPC transport a group's logs tell, when the group used RPC: across nodes, or RPC
/// servers beside the server on one machine (their banner in the head's log); `None` for a
/// server alone.
pub fn rpc_link(multi: MultiNode, logs: &str) -> Option<LinkVerdict> {
    let rpc = multi == MultiNode::Rpc
        || logs
            .lines()
            .any(|l| l.to_ascii_lowercase().contains("starting rpc server"));
    rpc.then(|| LinkVerdict {
        what: "RPC transport".to_string(),
        verdict: transport(logs).as_str().to_string(),
    })
}

/// Which transport llama.cpp's RPC connections used, as its logs say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcTransport {
    /// `RDMA activated`: RoCE between the head and a server.
    Rdma,
    /// `RDMA activate failed, staying on TCP`, or a server whose build has no RDMA.
    Tcp,
    /// The logs do not say.
    NotRecorded,
}

impl RpcTransport {
    pub fn as_str(self) -> &'static str {
        match self {
            RpcTransport::Rdma => "RDMA",
            RpcTransport::Tcp => "TCP",
            RpcTransport::NotRecorded => "not recorded",
        }
    }
}

/// The transport the logs of the head and its RPC servers tell: RDMA once a connection says it
/// was activated and none fell back; TCP when one fell back or a server's build has no RDMA
/// (its banner reads `transport : TCP` without `RDMA`); otherwise not recorded (a server that
/// can negotiate RDMA logs whether it did only at debug level).
pub fn transport(log: &str) -> RpcTransport {
    let mut rdma = false;
    let mut tcp = false;
    for line in log.lines() {
        let l = line.to_ascii_lowercase();
        if l.contains("rdma activated") {
            rdma = true;
        } else if l.contains("staying on tcp") {
            tcp = true;
        } else if let Some(rest) = l.trim_start().strip_prefix("transport")
            && let Some(value) = rest.trim_start().strip_prefix(':')
            && value.trim_start().starts_with("tcp")
            && !value.contains("rdma")
        {
            tcp = true;
        }
    }
    match (rdma, tcp) {
        (_, true) => RpcTransport::Tcp,
        (true, false) => RpcTransport::Rdma,
        (false, false) => RpcTransport::NotRecorded,
    }
}

/// `llama-server`'s flag that chooses how a model is split over devices (`-sm` for short).
const SPLIT_MODE: &str = "--split-mode";

/// `args` without any split-mode flag and its value (`--split-mode row`, `-sm=layer`), and the
/// words taken out.
fn without_split_mode(args: &[String]) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    let mut words = args.iter().peekable();
    while let Some(w) = words.next() {
        let flag = w.split_once('=').map_or(w.as_str(), |(f, _)| f);
        if flag != SPLIT_MODE && flag != "-sm" {
            kept.push(w.clone());
            continue;
        }
        taken.push(w.clone());
        if !w.contains('=')
            && let Some(value) = words.next_if(|v| !v.starts_with('-'))
        {
            taken.push(value.clone());
        }
    }
    (kept, taken)
}

/// `llama-server`'s flags that choose the projector (or none): the picked one is then not given.
const MMPROJ_FLAGS: [&str; 5] = ["-mm", "--mmproj", "-mmu", "--mmproj-url", "--no-mmproj"];

/// The flags of `llama-server` that spark-launch writes itself (or, the key, takes out of every
/// line). Its parser reads no abbreviations; short and long spellings are both flags.
static OWNED: [OwnedFlag; 13] = [
    OwnedFlag::one("-m", "-m", RecipeFlag::Model),
    OwnedFlag::one("--model", "--model", RecipeFlag::Model),
    OwnedFlag::one("--port", "--port", RecipeFlag::Port),
    OwnedFlag::one("--host", "--host", RecipeFlag::Host),
    OwnedFlag::one("-a", "-a", RecipeFlag::ServedName),
    OwnedFlag::one("--alias", "--alias", RecipeFlag::ServedName),
    OwnedFlag::one("--rpc", "--rpc", RecipeFlag::Reserved),
    OwnedFlag::one("--api-key", "--api-key", RecipeFlag::ApiKey),
    OwnedFlag::one(
        "--api-key-file",
        "--api-key-file",
        RecipeFlag::Unsupported("a key file on the head: give the key with --api-key"),
    ),
    // `-hf REPO[:QUANT]` names the model: spark-launch stages the file(s) it picks and gives
    // the server their path (a recipe's `-hf {model}` is its model).
    OwnedFlag::one("-hf", "-hf", RecipeFlag::Model),
    OwnedFlag::one("--hf-repo", "--hf-repo", RecipeFlag::Model),
    OwnedFlag::one(
        "-hff",
        "-hff",
        RecipeFlag::Unsupported(
            "a file of a Hub repository named by its path: give the model as REPO:QUANT",
        ),
    ),
    OwnedFlag::one(
        "--hf-file",
        "--hf-file",
        RecipeFlag::Unsupported(
            "a file of a Hub repository named by its path: give the model as REPO:QUANT",
        ),
    ),
];

/// How sparkrun's recipes name llama.cpp: the `llama-cpp` runtime, `llama-server` lines.
static RECIPE: RecipeSpelling = RecipeSpelling {
    programs: &[ProgramWords::Command(&["llama-server"])],
    model_positional: false,
    data_parallel: &[],
    runtimes: &[RecipeRuntime {
        name: "llama-cpp",
        ray: Some(false),
    }],
    hints: &[ProgramWords::Command(&["llama-server"])],
    fallback: false,
    ray_key: None,
    table: None,
    sized_by_parallel: true,
    script: true,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logs_say_rdma_only_when_a_connection_was_activated_and_none_fell_back() {
        assert_eq!(
            transport("RDMA probed: dev=mlx5_0\nRDMA activated: qpn=1->2 mtu=4096"),
            RpcTransport::Rdma
        );
        assert_eq!(
            transport("RDMA activated: qpn=1->2\nRDMA activate failed, staying on TCP"),
            RpcTransport::Tcp
        );
        assert_eq!(transport("  transport      : TCP\n"), RpcTransport::Tcp);
        assert_eq!(
            transport("  transport      : TCP (RDMA auto-negotiate enabled)\n"),
            RpcTransport::NotRecorded
        );
        assert_eq!(transport(""), RpcTransport::NotRecorded);
    }

    #[test]
    fn a_local_split_starts_its_rpc_servers_waits_for_them_and_gives_the_server_the_other_gpus() {
        let s = head_script(
            "",
            ("/m/x.gguf", None),
            &[(1, "127.0.0.1:50052".to_string())],
            2,
            30,
        );
        assert!(
            s.contains("CUDA_VISIBLE_DEVICES=1 'ggml-rpc-server' --host 127.0.0.1 --port 50052 &")
        );
        assert!(s.contains("/dev/tcp/127.0.0.1/50052"));
        assert!(s.contains("export CUDA_VISIBLE_DEVICES=0\n"));
        assert!(s.ends_with("\"$prog\" --model \"$m\" \"$@\"\n"));
    }

    #[test]
    fn the_transport_is_shown_only_for_a_group_that_used_rpc() {
        let rdma = "RDMA probed: dev=rocep1s0f1\nRDMA activated: qpn=7->9 mtu=4096";
        let read = Llamacpp
            .link_reader()
            .expect("llama.cpp reads its RPC transport");
        let v = read(MultiNode::Rpc, rdma).unwrap();
        assert_eq!(v.to_string(), "RPC transport: RDMA");
        // Across nodes the logs may say neither: that is said, never guessed.
        let v = read(MultiNode::Rpc, "main: server is listening").unwrap();
        assert_eq!(v.verdict, "not recorded");
        // One machine: only when RPC servers ran beside the server (their banner).
        assert_eq!(read(MultiNode::Single, rdma), None);
        let local = "Starting RPC server v3.0.0\n  transport      : TCP\n";
        let v = read(MultiNode::Single, local).unwrap();
        assert_eq!(v.verdict, "TCP");
    }

    #[test]
    fn an_unpicked_hub_spec_is_found_in_its_snapshot_by_its_quant_never_a_projector() {
        let s = head_script("", ("/hf/snapshots/main", Some("Q4_K_M")), &[], 1, 30);
        assert!(
            s.contains("ls \"$m\"/*.gguf \"$m\"/*/*.gguf 2>/dev/null | grep -v -e mmproj"),
            "{s}"
        );
        assert!(
            s.contains("| grep -i -e 'Q4_K_M[.-]' | sort | head -n 1"),
            "{s}"
        );
        let s = head_script("", ("/data/folder", None), &[], 1, 30);
        assert!(!s.contains("grep -i"), "{s}");
    }

    #[test]
    fn a_recipe_s_hf_flag_names_the_model_and_hff_is_refused() {
        let split = super::super::split_recipe_args(
            &Llamacpp,
            &["-hf", "org/m-GGUF:Q8_0", "--jinja", "--hf-file", "x.gguf"].map(str::to_string),
        );
        assert_eq!(split.kept, ["--jinja"]);
        assert_eq!(split.owned[0].flag, RecipeFlag::Model);
        assert!(matches!(
            split.owned[1].flag,
            RecipeFlag::Unsupported(why) if why.contains("REPO:QUANT")
        ));
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_recipe_s_tensor_parallel_is_split_mode_row_in_place_of_the_command_s_and_pipeline_parallel_layer()
     {
        let args = words("--jinja --split-mode layer -c 8192 -sm=none --no-mmap");
        let row = Llamacpp.recipe_parallel(2, 1, 1, &args).unwrap().unwrap();
        assert_eq!(
            row.args,
            words("--jinja -c 8192 --no-mmap --split-mode row")
        );
        assert_eq!(
            row.said,
            "tensor_parallel: llama-server runs with --split-mode row for tensor_parallel 2, as sparkrun maps it (the command's `--split-mode layer -sm=none` is replaced)"
        );
        let layer = Llamacpp
            .recipe_parallel(1, 3, 1, &words("--jinja"))
            .unwrap()
            .unwrap();
        assert_eq!(layer.args, words("--jinja --split-mode layer"));
        assert!(
            layer.said.starts_with("pipeline_parallel: "),
            "{}",
            layer.said
        );
        // One by one: the line as the recipe wrote it.
        assert_eq!(Llamacpp.recipe_parallel(1, 1, 1, &args), Ok(None));
    }

    #[test]
    fn across_nodes_a_recipe_s_sizes_only_count_the_nodes_and_its_line_is_kept() {
        let args = words("--jinja -c 8192");
        let two = Llamacpp.recipe_parallel(2, 1, 2, &args).unwrap().unwrap();
        assert_eq!(two.args, args);
        assert!(
            two.said.contains("over 2 nodes") && two.said.contains("by layers (its default)"),
            "{}",
            two.said
        );
        let own = words("--jinja --split-mode none");
        let kept = Llamacpp.recipe_parallel(1, 2, 2, &own).unwrap().unwrap();
        assert_eq!(kept.args, own);
        assert!(
            kept.said.contains("the command's own --split-mode"),
            "{}",
            kept.said
        );
    }

    #[test]
    fn a_recipe_with_tensor_and_pipeline_parallel_both_above_one_is_refused_naming_both() {
        let p = Llamacpp.recipe_parallel(2, 2, 2, &[]).unwrap_err();
        assert!(
            p.what.contains("tensor_parallel 2 and pipeline_parallel 2"),
            "{}",
            p.what
        );
        assert!(p.fix.contains("--set pipeline_parallel=1"), "{}", p.fix);
    }

    #[test]
    fn flags_spark_launch_writes_are_refused_in_extra_args_and_others_pass() {
        let p = Llamacpp.reserved_args(
            &["--rpc", "10.0.0.2:50052", "-c", "8192", "--alias=x"].map(str::to_string),
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].what.contains("--rpc"));
        assert!(p[1].fix.contains("MODEL"));
    }

    #[test]
    fn the_context_and_parallel_flags_are_read_in_either_spelling() {
        let model = crate::model::ModelSource::parse("/m/x.gguf", None).unwrap();
        let job = crate::plan::JobName::new("j").unwrap();
        let mut o = ServeOptions::new(super::super::EngineKind::Llamacpp, job, model);
        o.engine_args = ["-c", "8192", "--parallel", "4"]
            .map(str::to_string)
            .to_vec();
        let m = Llamacpp.memory(&o, &EngineOptions::default());
        assert_eq!((m.context, m.sequences), (Some(8192), Some(4)));
    }
}
