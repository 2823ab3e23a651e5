//! TensorRT-LLM across nodes: containers running sshd on port 2233, a hostfile, and `mpirun …
//! trtllm-llmapi-launch trtllm-serve` from the head container, with the LLM-API options file
//! generated from flags and profiles.
//!
//! The containers use the same entrypoint as the nccl-tests image (`images/nccl-tests/
//! sl-entrypoint`, embedded here and run with `sh -c`, since NVIDIA's TensorRT-LLM image does
//! not carry it): sshd on the node's own control-plane address only, presenting the job's own
//! host key and accepting the job's own client key (`job_ssh`: generated per launch, private
//! halves put into the containers before they start, nothing of `~/.ssh` or `/etc/ssh`
//! mounted); the head's ssh client uses the job's client key and accepts only the job's host
//! key, pinned for every peer's address and port, never `StrictHostKeyChecking no`. Workers
//! run sshd as their one process; the head waits until every worker's sshd answers
//! (`sl-wait-ssh`, embedded too), writes the hostfile and the options file, then runs `mpirun`.
//!
//! Every node is its own MPI app context (`-np G -H addr:G -x VAR=value … : …`), so each rank
//! runs with the variables derived for the node it runs on — never the head's interface names
//! on a worker.
//!
//! A speculative block with `method: mtp` becomes the options file's `speculative_config`
//! (`decoding_type: MTP`, `num_nextn_predict_layers`: the form of TensorRT-LLM's DeepSeek-R1
//! MTP guide, `docs/source/blogs/tech_blog/blog2_DeepSeek_R1_MTP_Implementation_and_Optimization.md`);
//! the other methods are refused, as the options' names for them changed between releases.
//!
//! Pure: the decided plan in, the ranks' commands out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::speculative::{SpecMethod, Speculative};
use super::spelling::{ProgramWords, RecipeRuntime, RecipeSpelling};
use super::{
    ApiKeySupport, CacheVar, EngineDefaults, EngineOptions, EnginePort, EngineRanks, GroupLine,
    GroupRefs, LogPhase, MultiNode, OwnedFlag, PortOn, PortReach, RankInput, ReadySignals,
    RecipeFlag, ServingEngine, caches, phases, read_section,
};
use crate::derive::NodeInput;
use crate::node::Role;
use crate::plan::ContainerSpec;
use crate::workload::memory::{EngineFraction, EngineMemory, FractionOf};
use crate::workload::serve::{Problem, ServeOptions};

/// A launch profile's `trtllm:` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrtllmSection {
    /// `kv_cache_config.free_gpu_memory_fraction`.
    pub kv_cache_fraction: Option<f64>,
    pub cuda_graph_padding: Option<bool>,
    pub disable_overlap_scheduler: Option<bool>,
    pub max_batch_size: Option<u32>,
    pub max_num_tokens: Option<u32>,
    /// Merged into the LLM-API options file as is.
    #[serde(default)]
    pub options: BTreeMap<String, yaml_serde::Value>,
}

/// Where TensorRT-LLM's PyTorch backend and the libraries it loads keep what they compile at
/// start: TorchInductor's, Triton's and FlashInfer's, and the XDG cache for what follows it.
/// Its autotuner's file (`TLLM_AUTOTUNER_CACHE_PATH`) is left unset: the file records the
/// version and GPU it was tuned on but is loaded without checking either, and one file would
/// serve every configuration of the model; unset, the autotuner tunes again at each start.
pub const CACHE_VARS: &[CacheVar] = &[
    caches::INDUCTOR,
    caches::TRITON,
    caches::FLASHINFER,
    caches::XDG,
];

/// The image used unless `--image` says otherwise (NGC release, pinned).
pub const DEFAULT_IMAGE: &str = "nvcr.io/nvidia/tensorrt-llm/release:1.2.1";
pub const DEFAULT_PORT: u16 = 8355;
pub const DEFAULT_SSH_PORT: u16 = 2233;
/// `kv_cache_config.free_gpu_memory_fraction` unless told otherwise, as NVIDIA's DGX Spark
/// playbook sets it.
pub const DEFAULT_KV_CACHE_FRACTION: f64 = 0.9;
/// Where spark-launch's files live inside the containers (the entrypoint's `SL_STATE`).
pub const RUN_DIR: &str = "/etc/spark-launch";
/// The nccl-tests image's entrypoint: sshd with the node's identity, the ssh client config.
pub const SL_ENTRYPOINT: &str = include_str!("../../../images/nccl-tests/sl-entrypoint");
/// Waits until `ssh ADDR true` works for every worker.
pub const SL_WAIT_SSH: &str = include_str!("../../../images/nccl-tests/sl-wait-ssh");
/// How long the head waits for each worker's sshd.
pub const SSH_WAIT_S: u64 = 180;

/// TensorRT-LLM's progress lines: the PyTorch backend's, and uvicorn's when the API comes up.
static PROGRESS: [LogPhase; 8] = [
    phases::SHARDS,
    phases::LOADED,
    phases::LOADING,
    phases::CUDA_GRAPHS,
    phases::COMPILING,
    phases::KV_CACHE,
    LogPhase::any(&phases::UVICORN, phases::API_STARTING),
    phases::DISTRIBUTED,
];

static READY: ReadySignals = ReadySignals {
    health_path: "/health",
    models_path: "/v1/models",
    progress: &PROGRESS,
    fatal: &[],
};

/// The LLM-API options (`--extra_llm_api_options FILE`), as NVIDIA's DGX Spark playbook sets
/// them unless told otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmApiOptions {
    /// `kv_cache_config.free_gpu_memory_fraction`: the share of free GPU memory for the KV cache.
    pub kv_cache_free_gpu_memory_fraction: f64,
    /// `cuda_graph_config.enable_padding`.
    pub cuda_graph_padding: bool,
    pub disable_overlap_scheduler: bool,
    pub print_iter_log: bool,
    /// More keys, merged over the above (from a profile's `trtllm_options`).
    #[serde(default)]
    pub extra: BTreeMap<String, yaml_serde::Value>,
}

impl Default for LlmApiOptions {
    fn default() -> Self {
        LlmApiOptions {
            kv_cache_free_gpu_memory_fraction: DEFAULT_KV_CACHE_FRACTION,
            cuda_graph_padding: true,
            disable_overlap_scheduler: true,
            print_iter_log: false,
            extra: BTreeMap::new(),
        }
    }
}

impl LlmApiOptions {
    /// The YAML file's text.
    pub fn to_yaml(&self) -> String {
        use yaml_serde::{Mapping, Value};
        let mut root = Mapping::new();
        root.insert("print_iter_log".into(), Value::Bool(self.print_iter_log));
        let mut kv = Mapping::new();
        kv.insert("dtype".into(), "auto".into());
        kv.insert(
            "free_gpu_memory_fraction".into(),
            Value::Number(self.kv_cache_free_gpu_memory_fraction.into()),
        );
        root.insert("kv_cache_config".into(), Value::Mapping(kv));
        let mut cg = Mapping::new();
        cg.insert(
            "enable_padding".into(),
            Value::Bool(self.cuda_graph_padding),
        );
        root.insert("cuda_graph_config".into(), Value::Mapping(cg));
        root.insert(
            "disable_overlap_scheduler".into(),
            Value::Bool(self.disable_overlap_scheduler),
        );
        for (k, v) in &self.extra {
            merge(&mut root, k, v);
        }
        yaml_serde::to_string(&Value::Mapping(root)).unwrap_or_default()
    }

    pub fn problems(&self) -> Vec<Problem> {
        let f = self.kv_cache_free_gpu_memory_fraction;
        if f > 0.0 && f <= 1.0 {
            Vec::new()
        } else {
            vec![Problem::new(
                format!("kv cache fraction {f} is outside (0, 1]"),
                "use e.g. --kv-cache-fraction 0.9 (the share of free GPU memory for the KV cache)",
            )]
        }
    }
}

/// Merges `value` at `key`: mappings merge key by key, anything else replaces.
fn merge(root: &mut yaml_serde::Mapping, key: &str, value: &yaml_serde::Value) {
    use yaml_serde::Value;
    let k = Value::String(key.to_string());
    match (root.get_mut(&k), value) {
        (Some(Value::Mapping(existing)), Value::Mapping(add)) => {
            for (ak, av) in add {
                if let Some(ak) = ak.as_str() {
                    merge(existing, ak, av);
                }
            }
        }
        _ => {
            root.insert(k, value.clone());
        }
    }
}

/// The head's part after the entrypoint set up sshd and the client: wait for the workers,
/// write the hostfile and the options file, run `"$@"` (mpirun).
const HEAD_SH: &str = r#"set -eu
mkdir -p /etc/spark-launch
printf '%s\n' "$SL_HOSTFILE" > /etc/spark-launch/hostfile
printf '%s\n' "$SL_LLM_API_OPTIONS" > /etc/spark-launch/extra-llm-api-options.yaml
printf '%s\n' "$SL_WAIT_SSH" > /etc/spark-launch/sl-wait-ssh
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH-}" LD_PRELOAD="${LD_PRELOAD-}"
sh /etc/spark-launch/sl-wait-ssh "$SL_SSH_WAIT" $SL_WORKERS || { echo "spark-launch: ERROR the workers' sshd did not answer" >&2; exit 3; }
exec "$@"
"#;

/// The variables every rank needs from its node's derived environment and the container's:
/// NCCL's, UCX's, the Hugging Face cache's, TensorRT-LLM's, CUDA's, and the compile caches'
/// ([`CACHE_VARS`]: a rank mpirun starts over SSH has none of its container's environment).
fn rank_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| {
            ["NCCL_", "UCX_", "HF_", "TRTLLM_", "TLLM_", "CUDA_"]
                .iter()
                .any(|p| k.starts_with(p))
                || CACHE_VARS.iter().any(|c| c.var == k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// TensorRT-LLM's resolved options: the sshd port, the LLM-API options file, the batch limits.
#[derive(Clone, Debug, PartialEq)]
pub struct TrtllmConfig {
    pub ssh_port: u16,
    pub llm_api: LlmApiOptions,
    pub max_batch_size: Option<u32>,
    pub max_num_tokens: Option<u32>,
}

impl TrtllmConfig {
    /// What the request's options ask for, defaults filled in.
    pub fn of(t: &EngineOptions) -> TrtllmConfig {
        let mut llm_api = LlmApiOptions::default();
        if let Some(f) = t.memory_fraction {
            llm_api.kv_cache_free_gpu_memory_fraction = f;
        }
        if let Some(c) = t.cuda_graph_padding {
            llm_api.cuda_graph_padding = c;
        }
        if let Some(d) = t.disable_overlap_scheduler {
            llm_api.disable_overlap_scheduler = d;
        }
        if let Some(s) = &t.speculative
            && s.method == SpecMethod::Mtp
        {
            let mut spec = yaml_serde::Mapping::new();
            spec.insert("decoding_type".into(), "MTP".into());
            spec.insert(
                "num_nextn_predict_layers".into(),
                yaml_serde::Value::Number(s.tokens.into()),
            );
            llm_api.extra.insert(
                "speculative_config".into(),
                yaml_serde::Value::Mapping(spec),
            );
        }
        // A profile's own options go over (its `speculative_config` replaces this one).
        for (k, v) in &t.config {
            llm_api.extra.insert(k.clone(), v.clone());
        }
        TrtllmConfig {
            ssh_port: t.ssh_port.unwrap_or(DEFAULT_SSH_PORT),
            llm_api,
            max_batch_size: t.max_batch_size,
            max_num_tokens: t.max_num_tokens,
        }
    }
}

/// `spark-launch trtllm`.
pub struct Trtllm;

impl ServingEngine for Trtllm {
    fn name(&self) -> &'static str {
        "trtllm"
    }
    fn title(&self) -> &'static str {
        "TensorRT-LLM"
    }
    fn default_image(&self) -> &'static str {
        DEFAULT_IMAGE
    }
    fn default_port(&self) -> u16 {
        DEFAULT_PORT
    }
    fn defaults(&self) -> EngineDefaults {
        EngineDefaults {
            ready_timeout_s: super::DEFAULT_READY_TIMEOUT_S,
            memory_fraction: Some(DEFAULT_KV_CACHE_FRACTION),
        }
    }
    fn api_key(&self) -> ApiKeySupport {
        ApiKeySupport::Refused {
            problem: "--api-key: TensorRT-LLM's trtllm-serve has no API-key option, so spark-launch cannot make it enforce one",
            fix: "drop --api-key and keep the API private with --bind fabric (or an address only trusted clients reach), or serve with vllm, which enforces the key",
        }
    }
    fn ready(&self) -> &'static ReadySignals {
        &READY
    }
    fn cache_vars(&self) -> &'static [CacheVar] {
        CACHE_VARS
    }
    fn profile_section(&self) -> Option<&'static str> {
        Some("trtllm")
    }
    fn read_profile_section(
        &self,
        section: &yaml_serde::Value,
        into: &mut EngineOptions,
    ) -> Vec<(String, String)> {
        let t: TrtllmSection = match read_section(section) {
            Ok(t) => t,
            Err(problems) => return problems,
        };
        let mut problems = Vec::new();
        if let Some(f) = t.kv_cache_fraction
            && !(f > 0.0 && f <= 1.0)
        {
            problems.push(("kv_cache_fraction".into(), format!("{f} is outside (0, 1]")));
        }
        into.memory_fraction = t.kv_cache_fraction;
        into.cuda_graph_padding = t.cuda_graph_padding;
        into.disable_overlap_scheduler = t.disable_overlap_scheduler;
        into.max_batch_size = t.max_batch_size;
        into.max_num_tokens = t.max_num_tokens;
        into.config = t.options;
        problems
    }
    fn job_ssh(&self) -> bool {
        true
    }
    fn multi_node(&self, _tuning: &EngineOptions, nodes: usize) -> MultiNode {
        if nodes == 1 {
            MultiNode::Single
        } else {
            MultiNode::Mpi
        }
    }
    fn ports(&self, tuning: &EngineOptions, api: u16, nodes: usize) -> Vec<EnginePort> {
        let mut ports = vec![EnginePort::api("TensorRT-LLM API server", api)];
        if nodes > 1 {
            ports.push(EnginePort::one(
                "ssh",
                "container sshd (mpirun)",
                TrtllmConfig::of(tuning).ssh_port,
                PortOn::Every,
                PortReach::HeadToWorkers,
            ));
        }
        ports
    }
    fn problems(&self, tuning: &EngineOptions) -> Vec<Problem> {
        TrtllmConfig::of(tuning).llm_api.problems()
    }
    fn reserved_args(&self, args: &[String]) -> Vec<Problem> {
        reserved_args(args)
    }
    fn memory(&self, opts: &ServeOptions, tuning: &EngineOptions) -> EngineMemory {
        let normal = |flag: &str| format!("--{}", flag.replace('-', "_").trim_start_matches('_'));
        let value = |f: &str| super::flag_value(&opts.engine_args, &[f], normal);
        EngineMemory {
            fraction: match tuning.memory_fraction {
                Some(f) => EngineFraction::Given(f),
                None => EngineFraction::Default(DEFAULT_KV_CACHE_FRACTION),
            },
            fraction_of: FractionOf::FreeAfterWeights,
            fraction_flag: "--kv-cache-fraction",
            context: value("--max_seq_len").and_then(super::parse_count),
            context_flag: "--max_seq_len",
            sequences: tuning
                .max_batch_size
                .map(u64::from)
                .or_else(|| value("--max_batch_size").and_then(super::parse_count)),
            sequences_flag: "--max-batch-size",
            kv_dtype: None,
        }
    }
    fn speculative_problems(&self, spec: &Speculative, _args: &[String]) -> Vec<Problem> {
        let fix = "use method: mtp (TensorRT-LLM's MTP), serve with vllm or sglang, or set the options file's speculative_config for your release in the profile's trtllm.options";
        match (spec.method, &spec.draft_model) {
            (SpecMethod::Mtp, None) => Vec::new(),
            (SpecMethod::Mtp, Some(_)) => vec![Problem::new(
                "speculative.draft_model: TensorRT-LLM's MTP reads its layers from the model's own checkpoint",
                "remove draft_model",
            )],
            (method, _) => vec![Problem::new(
                format!(
                    "speculative method {method}: spark-launch maps only mtp onto TensorRT-LLM's options file"
                ),
                fix,
            )],
        }
    }
    fn owned_flags(&self) -> &'static [OwnedFlag] {
        &OWNED
    }
    fn recipe(&self) -> &'static RecipeSpelling {
        &RECIPE
    }
    /// `trtllm-serve`'s options are click's, spelled with `_`; spark-launch reads `-` as `_`
    /// too (and one leading dash as two), so no spelling of its flags slips through. Click
    /// reads no abbreviations.
    fn flag_name(&self, word: &str) -> String {
        if word.starts_with('-') {
            format!("--{}", word.replace('-', "_").trim_start_matches('_'))
        } else {
            word.to_string()
        }
    }
    fn ranks(&self, input: &RankInput<'_>, containers: Vec<ContainerSpec>) -> EngineRanks {
        let config = TrtllmConfig::of(input.tuning);
        let serve = serve_args(input, &config);
        let containers = if input.env.nodes.len() == 1 {
            single(&config, containers, &serve)
        } else {
            over_mpi(input, &config, containers, &serve)
        };
        EngineRanks {
            containers,
            waits: Vec::new(),
        }
    }
    /// The line as planned: the head's `mpirun` names every node by its own address, with
    /// that node's own variables (one app context per node), so the group must run on the
    /// plan's nodes; the leader's address alone would not do.
    fn group_line(
        &self,
        _mode: MultiNode,
        _role: Role,
        spec: &ContainerSpec,
        _refs: &GroupRefs,
    ) -> GroupLine {
        GroupLine {
            env: BTreeMap::new(),
            command: spec.command.clone(),
        }
    }
}

/// `trtllm-serve MODEL` with the shape, where the API listens, and the options file.
fn serve_args(input: &RankInput<'_>, config: &TrtllmConfig) -> Vec<String> {
    let o = input.opts;
    let mut args = vec![
        "trtllm-serve".to_string(),
        input.model_path.to_string(),
        "--served_model_name".to_string(),
        input.served.to_string(),
        "--tp_size".to_string(),
        o.tp.to_string(),
    ];
    if o.pp > 1 {
        args.extend(["--pp_size".to_string(), o.pp.to_string()]);
    }
    args.extend([
        "--host".to_string(),
        input.host.to_string(),
        "--port".to_string(),
        o.port.to_string(),
        "--backend".to_string(),
        "pytorch".to_string(),
        "--extra_llm_api_options".to_string(),
        format!("{RUN_DIR}/extra-llm-api-options.yaml"),
    ]);
    if let Some(b) = config.max_batch_size {
        args.extend(["--max_batch_size".to_string(), b.to_string()]);
    }
    if let Some(t) = config.max_num_tokens {
        args.extend(["--max_num_tokens".to_string(), t.to_string()]);
    }
    args.extend(o.engine_args.iter().cloned());
    args
}

/// Open MPI may run as root in the containers.
fn allow_root(spec: &mut ContainerSpec) {
    spec.env.insert("OMPI_ALLOW_RUN_AS_ROOT".into(), "1".into());
    spec.env
        .insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".into(), "1".into());
}

/// One node: write the options file, then `trtllm-serve`.
fn single(
    config: &TrtllmConfig,
    mut containers: Vec<ContainerSpec>,
    serve: &[String],
) -> Vec<ContainerSpec> {
    for spec in &mut containers {
        allow_root(spec);
        spec.env
            .insert("SL_LLM_API_OPTIONS".into(), config.llm_api.to_yaml());
        spec.command = vec![
            "sh".into(),
            "-c".into(),
            format!(
                "mkdir -p {RUN_DIR} && printf '%s\\n' \"$SL_LLM_API_OPTIONS\" > {RUN_DIR}/extra-llm-api-options.yaml && exec \"$@\""
            ),
            "spark-launch-trtllm".into(),
        ];
        spec.command.extend(serve.iter().cloned());
    }
    containers
}

/// Across nodes: sshd in every container, and the head's `mpirun` with one app context per
/// node, each with that node's own variables.
fn over_mpi(
    input: &RankInput<'_>,
    config: &TrtllmConfig,
    mut containers: Vec<ContainerSpec>,
    serve: &[String],
) -> Vec<ContainerSpec> {
    let nodes = &input.env.nodes;
    let peers: Vec<String> = nodes
        .iter()
        .map(|e| format!("{}={}", e.name, e.control.addr))
        .collect();
    for (env, spec) in nodes.iter().zip(&mut containers) {
        allow_root(spec);
        input.keys.add_to(spec, env.role == Role::Head);
        spec.env
            .insert("SL_SSHD_PORT".into(), config.ssh_port.to_string());
        spec.env
            .insert("SL_SSHD_LISTEN".into(), env.control.addr.to_string());
        spec.env.insert("SL_PEERS".into(), peers.join(" "));
        spec.env.insert("SL_STATE".into(), RUN_DIR.to_string());
        spec.command = vec![
            "sh".to_string(),
            "-c".to_string(),
            SL_ENTRYPOINT.to_string(),
            "sl-entrypoint".to_string(),
        ];
    }
    let argv = mpirun(input, config, &containers, serve);
    let hostfile: Vec<String> = nodes
        .iter()
        .map(|e| format!("{} slots={}", e.control.addr, input.opts.gpus_per_node))
        .collect();
    let workers: Vec<String> = nodes[1..]
        .iter()
        .map(|e| e.control.addr.to_string())
        .collect();
    if let Some(head) = containers.first_mut() {
        head.env.insert("SL_WORKERS".into(), workers.join(" "));
        head.env.insert("SL_HOSTFILE".into(), hostfile.join("\n"));
        head.env
            .insert("SL_LLM_API_OPTIONS".into(), config.llm_api.to_yaml());
        head.env
            .insert("SL_WAIT_SSH".into(), SL_WAIT_SSH.to_string());
        head.env
            .insert("SL_SSH_WAIT".into(), SSH_WAIT_S.to_string());
        head.command.extend([
            "sh".to_string(),
            "-c".to_string(),
            HEAD_SH.to_string(),
            "spark-launch-trtllm-head".to_string(),
        ]);
        head.command.extend(argv);
    }
    containers
}

/// The head's `mpirun`: the job's SSH options, Open MPI on the control-plane subnets, and one
/// app context per node (`-np G -H addr:G -x VAR=value … trtllm-llmapi-launch trtllm-serve …`);
/// the user's `--env` as `-x NAME` only (values from the head's environment).
fn mpirun(
    input: &RankInput<'_>,
    config: &TrtllmConfig,
    containers: &[ContainerSpec],
    serve: &[String],
) -> Vec<String> {
    let gpus = input.opts.gpus_per_node;
    let mut argv = vec![
        "mpirun".to_string(),
        "--allow-run-as-root".to_string(),
        "--hostfile".to_string(),
        format!("{RUN_DIR}/hostfile"),
        "--bind-to".to_string(),
        "none".to_string(),
    ];
    argv.extend(crate::workload::job_ssh::mpirun_ssh_options(
        config.ssh_port,
    ));
    let subnets = control_subnets(input.nodes, input.env);
    if !subnets.is_empty() {
        let list = subnets.join(",");
        argv.extend(["--mca".into(), "oob_tcp_if_include".into(), list.clone()]);
        argv.extend(["--mca".into(), "btl_tcp_if_include".into(), list]);
    }
    for (i, (env, spec)) in input.env.nodes.iter().zip(containers).enumerate() {
        if i > 0 {
            argv.push(":".to_string());
        }
        argv.extend([
            "-np".to_string(),
            gpus.to_string(),
            "-H".to_string(),
            format!("{}:{gpus}", env.control.addr),
            "-x".to_string(),
            "PATH".to_string(),
            "-x".to_string(),
            "LD_LIBRARY_PATH".to_string(),
            // --nccl-from's preload: ranks started over SSH do not see the container's.
            "-x".to_string(),
            "LD_PRELOAD".to_string(),
        ]);
        for (k, v) in rank_env(&spec.env) {
            if !input.opts.env.contains_key(&k) {
                argv.extend(["-x".to_string(), format!("{k}={v}")]);
            }
        }
        // The user's `--env`: forwarded by name from the head's container env (where each is
        // set), so no value (an `HF_TOKEN`) is on a command line, in `ps` or `docker inspect`.
        for k in input.opts.env.keys() {
            argv.extend(["-x".to_string(), k.clone()]);
        }
        argv.push("trtllm-llmapi-launch".to_string());
        argv.extend(serve.iter().cloned());
    }
    argv
}

/// The control-plane subnets of the nodes (CIDR), for Open MPI's own interface choice: the
/// same on every node, unlike interface names.
fn control_subnets(inputs: &[NodeInput], env: &crate::derive::ClusterEnv) -> Vec<String> {
    let mut out: Vec<String> = inputs
        .iter()
        .zip(&env.nodes)
        .filter_map(|(input, e)| {
            e.control
                .fabric_subnet
                .or_else(|| {
                    input
                        .facts
                        .interface(&e.control.iface)?
                        .ipv4
                        .iter()
                        .find(|a| a.addr == e.control.addr)
                        .map(|a| a.subnet())
                })
                .map(|s| s.to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The flags of a `trtllm-serve` line that spark-launch writes itself. The recipe's own
/// LLM-API options file is refused: it would replace spark-launch's, and the settings of both
/// cannot be merged without reading it. `trtllm-serve` has no API-key option: a key in a
/// recipe's line is taken out as every engine's is (and the launch then refuses it).
/// How recipes write TensorRT-LLM: sparkrun's runtime `trtllm`, hinted by `trtllm-serve` and
/// by an `mpirun` line that runs it (`mpirun … trtllm-llmapi-launch trtllm-serve …`; such a
/// line is not run as written: spark-launch writes its own `mpirun`). No flag table: a recipe
/// without `command:` is refused.
static RECIPE: RecipeSpelling = RecipeSpelling {
    programs: &[
        ProgramWords::Command(&["trtllm-serve", "serve"]),
        ProgramWords::Command(&["trtllm-serve"]),
    ],
    model_positional: true,
    data_parallel: &[],
    runtimes: &[RecipeRuntime {
        name: "trtllm",
        ray: None,
    }],
    hints: &[
        ProgramWords::Command(&["trtllm-serve"]),
        ProgramWords::Mpirun("trtllm"),
    ],
    fallback: false,
    ray_key: None,
    table: None,
    sized_by_parallel: false,
    script: false,
};

static OWNED: [OwnedFlag; 9] = [
    OwnedFlag::one("--tp_size", "--tp_size", RecipeFlag::Tp),
    OwnedFlag::one("--pp_size", "--pp_size", RecipeFlag::Pp),
    OwnedFlag::one("--port", "--port", RecipeFlag::Port),
    OwnedFlag::one("--host", "--host", RecipeFlag::Host),
    OwnedFlag::one(
        "--served_model_name",
        "--served_model_name",
        RecipeFlag::ServedName,
    ),
    OwnedFlag::one("--backend", "--backend", RecipeFlag::Reserved),
    OwnedFlag::one("--api_key", "--api_key", RecipeFlag::ApiKey),
    OwnedFlag::one(
        "--extra_llm_api_options",
        "--extra_llm_api_options",
        UNSUPPORTED_OPTIONS,
    ),
    OwnedFlag::one("--config", "--config", UNSUPPORTED_OPTIONS),
];

const UNSUPPORTED_OPTIONS: RecipeFlag = RecipeFlag::Unsupported(
    "a recipe's own LLM-API options file is not supported yet (spark-launch writes the options file itself)",
);

/// Problems for flags in `-- extra args` that spark-launch sets itself.
pub fn reserved_args(args: &[String]) -> Vec<Problem> {
    super::reserved_flags(&Trtllm, args, |f| match f.flag {
        RecipeFlag::Tp => "use --tp".into(),
        RecipeFlag::Pp => "use --pp".into(),
        RecipeFlag::Unsupported(_) => {
            "use --kv-cache-fraction / --no-cuda-graph-padding, or a profile's trtllm_options"
                .into()
        }
        RecipeFlag::ApiKey => {
            "remove it: trtllm-serve has no API-key option; keep the API private with --bind fabric"
                .into()
        }
        _ => format!("remove {}", f.name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_file_matches_the_spark_playbook_by_default_and_merges_extras() {
        let mut o = LlmApiOptions::default();
        let text = o.to_yaml();
        let v: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(v["kv_cache_config"]["free_gpu_memory_fraction"], 0.9);
        assert_eq!(v["kv_cache_config"]["dtype"], "auto");
        assert_eq!(v["cuda_graph_config"]["enable_padding"], true);
        assert_eq!(v["disable_overlap_scheduler"], true);
        o.extra.insert(
            "kv_cache_config".into(),
            yaml_serde::from_str("{enable_block_reuse: false}").unwrap(),
        );
        o.extra
            .insert("enable_attention_dp".into(), yaml_serde::Value::Bool(true));
        let v: yaml_serde::Value = yaml_serde::from_str(&o.to_yaml()).unwrap();
        assert_eq!(v["kv_cache_config"]["free_gpu_memory_fraction"], 0.9);
        assert_eq!(v["kv_cache_config"]["enable_block_reuse"], false);
        assert_eq!(v["enable_attention_dp"], true);
    }

    #[test]
    fn an_impossible_kv_cache_fraction_is_refused() {
        let o = LlmApiOptions {
            kv_cache_free_gpu_memory_fraction: 1.5,
            ..Default::default()
        };
        assert_eq!(o.problems().len(), 1);
    }

    #[test]
    fn flags_spark_launch_sets_are_refused_in_extra_args() {
        let p = reserved_args(&[
            "--tp_size=4".into(),
            "--max_seq_len".into(),
            "--port".into(),
        ]);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].fix, "use --tp");
    }
}
