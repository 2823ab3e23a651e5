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
//! Pure: options and facts in, a `ServePlan` out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::serve::{
    self, EngineKind, Problem, ServeOptions, ServePlan, ServeRefusal, container, distinct_ports,
    endpoint, path_notes, select,
};
use crate::derive::NodeInput;
use crate::node::{NodeName, Role};
use crate::plan::{
    CheckPorts, CheckReachable, EnsureImage, JobPlan, Launch, NodePlan, NodePorts, RuntimeKind,
    StageModel, Start, Step, WaitServing,
};
use crate::workload::job_ssh::JobSshKeys;

pub const DEFAULT_PORT: u16 = 8355;
pub const DEFAULT_SSH_PORT: u16 = 2233;
/// Where spark-launch's files live inside the containers (the entrypoint's `SL_STATE`).
pub const RUN_DIR: &str = "/etc/spark-launch";
/// The nccl-tests image's entrypoint: sshd with the node's identity, the ssh client config.
pub const SL_ENTRYPOINT: &str = include_str!("../../images/nccl-tests/sl-entrypoint");
/// Waits until `ssh ADDR true` works for every worker.
pub const SL_WAIT_SSH: &str = include_str!("../../images/nccl-tests/sl-wait-ssh");
/// How long the head waits for each worker's sshd.
pub const SSH_WAIT_S: u64 = 180;

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
            kv_cache_free_gpu_memory_fraction: 0.9,
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
            vec![Problem {
                problem: format!("kv cache fraction {f} is outside (0, 1]"),
                fix: "use e.g. --kv-cache-fraction 0.9 (the share of free GPU memory for the KV cache)".into(),
            }]
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

/// `spark-launch trtllm`'s resolved options.
#[derive(Clone, Debug, PartialEq)]
pub struct TrtllmOptions {
    pub serve: ServeOptions,
    pub ssh_port: u16,
    pub llm_api: LlmApiOptions,
    pub max_batch_size: Option<u32>,
    pub max_num_tokens: Option<u32>,
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
/// NCCL's, UCX's, the Hugging Face cache's, TensorRT-LLM's, CUDA's.
fn rank_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| {
            ["NCCL_", "UCX_", "HF_", "TRTLLM_", "TLLM_", "CUDA_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Plans a TensorRT-LLM job on the first nodes that fit `tp × pp`; across nodes, the
/// containers use the job's own SSH identity `keys` (`job_ssh`).
pub fn plan(
    opts: &TrtllmOptions,
    nodes: &[NodeInput],
    keys: &JobSshKeys,
) -> Result<ServePlan, ServeRefusal> {
    let o = &opts.serve;
    let mut extra = distinct_ports(&[("API", o.port), ("ssh", opts.ssh_port)]);
    extra.extend(opts.llm_api.problems());
    extra.extend(reserved_args(&o.engine_args));
    if o.api_key.is_some() {
        extra.push(super::endpoint::trtllm_key_problem());
    }
    let sel = select(nodes, o, extra)?;
    let n = sel.inputs.len();
    let used: Vec<NodeName> = sel.inputs.iter().map(|i| i.name.clone()).collect();
    let head_env = &sel.env.nodes[0];
    let bound = super::endpoint::bind_addr(o.bind, &sel.inputs[0], head_env)
        .map_err(|p| ServeRefusal { problems: vec![p] })?;
    let (host, local_url) = serve::listen(bound, o.port);
    let model_path = o.model.container_path();
    // The API is named by the model id the user typed, never by the container path.
    let served = o.model.served_name();
    let mut notes = Vec::new();
    if !sel.unused.is_empty() {
        notes.push(format!(
            "tp × pp = {} GPUs use {} of the cluster's {} nodes; {} stay idle",
            o.world(),
            n,
            nodes.len(),
            sel.unused
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let options_file = format!("{RUN_DIR}/extra-llm-api-options.yaml");
    let mut serve_args = vec![
        "trtllm-serve".to_string(),
        model_path.clone(),
        "--served_model_name".to_string(),
        served.clone(),
        "--tp_size".to_string(),
        o.tp.to_string(),
    ];
    if o.pp > 1 {
        serve_args.extend(["--pp_size".to_string(), o.pp.to_string()]);
    }
    serve_args.extend([
        "--host".to_string(),
        host,
        "--port".to_string(),
        o.port.to_string(),
        "--backend".to_string(),
        "pytorch".to_string(),
        "--extra_llm_api_options".to_string(),
        options_file,
    ]);
    if let Some(b) = opts.max_batch_size {
        serve_args.extend(["--max_batch_size".to_string(), b.to_string()]);
    }
    if let Some(t) = opts.max_num_tokens {
        serve_args.extend(["--max_num_tokens".to_string(), t.to_string()]);
    }
    serve_args.extend(o.engine_args.iter().cloned());

    let hostfile: Vec<String> = sel
        .env
        .nodes
        .iter()
        .map(|e| format!("{} slots={}", e.control.addr, o.gpus_per_node))
        .collect();
    let workers: Vec<String> = sel.env.nodes[1..]
        .iter()
        .map(|e| e.control.addr.to_string())
        .collect();
    let peers: Vec<String> = sel
        .env
        .nodes
        .iter()
        .map(|e| format!("{}={}", e.name, e.control.addr))
        .collect();

    // Every node's container, then the head's mpirun from their environments.
    let mut specs = Vec::new();
    for (rank, env) in sel.env.nodes.iter().enumerate() {
        let mut spec = container(o, EngineKind::Trtllm, env, &sel.rdma, &mut notes);
        if rank == 0 {
            serve::label_bind(&mut spec, bound);
        }
        spec.env.insert("OMPI_ALLOW_RUN_AS_ROOT".into(), "1".into());
        spec.env
            .insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".into(), "1".into());
        if n == 1 {
            spec.env
                .insert("SL_LLM_API_OPTIONS".into(), opts.llm_api.to_yaml());
            spec.command = vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "mkdir -p {RUN_DIR} && printf '%s\\n' \"$SL_LLM_API_OPTIONS\" > {RUN_DIR}/extra-llm-api-options.yaml && exec \"$@\""
                ),
                "spark-launch-trtllm".into(),
            ];
            spec.command.extend(serve_args.clone());
        } else {
            keys.add_to(&mut spec, env.role == Role::Head);
            spec.env
                .insert("SL_SSHD_PORT".into(), opts.ssh_port.to_string());
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
        specs.push((env, spec));
    }
    if n > 1 {
        let subnets = control_subnets(&sel.inputs, &sel.env);
        let mut argv = vec![
            "mpirun".to_string(),
            "--allow-run-as-root".to_string(),
            "--hostfile".to_string(),
            format!("{RUN_DIR}/hostfile"),
            "--bind-to".to_string(),
            "none".to_string(),
        ];
        argv.extend(super::job_ssh::mpirun_ssh_options(opts.ssh_port));
        if !subnets.is_empty() {
            let list = subnets.join(",");
            argv.extend(["--mca".into(), "oob_tcp_if_include".into(), list.clone()]);
            argv.extend(["--mca".into(), "btl_tcp_if_include".into(), list]);
        }
        for (i, (env, spec)) in specs.iter().enumerate() {
            if i > 0 {
                argv.push(":".to_string());
            }
            argv.extend([
                "-np".to_string(),
                o.gpus_per_node.to_string(),
                "-H".to_string(),
                format!("{}:{}", env.control.addr, o.gpus_per_node),
                "-x".to_string(),
                "PATH".to_string(),
                "-x".to_string(),
                "LD_LIBRARY_PATH".to_string(),
                // --nccl-from's preload: ranks started over SSH do not see the container's.
                "-x".to_string(),
                "LD_PRELOAD".to_string(),
            ]);
            for (k, v) in rank_env(&spec.env) {
                argv.extend(["-x".to_string(), format!("{k}={v}")]);
            }
            argv.push("trtllm-llmapi-launch".to_string());
            argv.extend(serve_args.iter().cloned());
        }
        if let Some((_, head)) = specs.first_mut() {
            head.env.insert("SL_WORKERS".into(), workers.join(" "));
            head.env.insert("SL_HOSTFILE".into(), hostfile.join("\n"));
            head.env
                .insert("SL_LLM_API_OPTIONS".into(), opts.llm_api.to_yaml());
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
    }
    let node_plans: Vec<NodePlan> = specs
        .into_iter()
        .map(|(env, spec)| NodePlan {
            node: env.name.clone(),
            role: env.role,
            launch: Launch::Container(spec),
        })
        .collect();

    let head_name = used[0].clone();
    let mut steps = vec![Step::CheckPorts(CheckPorts {
        ports: sel
            .env
            .nodes
            .iter()
            .map(|e| NodePorts {
                node: e.name.clone(),
                ports: match (e.role, n) {
                    (_, 1) => vec![o.port],
                    (Role::Head, _) => vec![o.port, opts.ssh_port],
                    (Role::Worker, _) => vec![opts.ssh_port],
                },
            })
            .collect(),
    })];
    for e in &sel.env.nodes[1..] {
        steps.push(Step::CheckReachable(CheckReachable {
            to: e.name.clone(),
            addr: e.control.addr,
            port: opts.ssh_port,
            from: vec![head_name.clone()],
        }));
    }
    steps.push(Step::EnsureImage(EnsureImage {
        image: o.image.clone(),
        nodes: used.clone(),
    }));
    steps.push(Step::StageModel(StageModel {
        model: o.model.clone(),
        nodes: used.clone(),
        copy: o.stage_model,
        listing: None,
        routes: Default::default(),
    }));
    steps.push(Step::Start(Start {
        nodes: used.clone(),
    }));
    steps.push(Step::WaitServing(WaitServing {
        node: head_name,
        url: local_url,
        model: served.clone(),
        engine: EngineKind::Trtllm.to_string(),
        timeout_s: o.ready_timeout_s,
        api_key: None,
    }));
    path_notes(o, &used, &sel.assumed, &mut notes);
    Ok(ServePlan {
        engine: EngineKind::Trtllm,
        mode: if n == 1 { "single" } else { "mpi" }.to_string(),
        model: o.model.clone(),
        served_name: served,
        tp: o.tp,
        pp: o.pp,
        endpoint: endpoint(&sel.inputs[0], head_env, o.port, bound),
        nodes: used,
        unused: sel.unused.clone(),
        notes,
        warnings: serve::warnings(&sel.env),
        sockets: sel.rdma.sockets.clone(),
        job: JobPlan {
            job: o.job.clone(),
            workload: EngineKind::Trtllm.to_string(),
            runtime: RuntimeKind::Docker,
            nodes: node_plans,
            steps,
        },
        api_key: None,
        nccl: None,
    })
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

/// Problems for flags in `args` that spark-launch sets itself.
pub fn reserved_args(args: &[String]) -> Vec<Problem> {
    const RESERVED: [&str; 7] = [
        "--served_model_name",
        "--tp_size",
        "--pp_size",
        "--host",
        "--port",
        "--extra_llm_api_options",
        "--backend",
    ];
    args.iter()
        .filter_map(|a| {
            let flag = a.split('=').next().unwrap_or(a).replace('-', "_");
            let flag = format!("--{}", flag.trim_start_matches('_'));
            RESERVED.contains(&flag.as_str()).then(|| Problem {
                problem: format!("extra argument {a} is set by spark-launch itself"),
                fix: match flag.as_str() {
                    "--tp_size" => "use --tp".into(),
                    "--pp_size" => "use --pp".into(),
                    "--extra_llm_api_options" => {
                        "use --kv-cache-fraction / --no-cuda-graph-padding, or a profile's trtllm_options".into()
                    }
                    _ => format!("remove {a}"),
                },
            })
        })
        .collect()
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
