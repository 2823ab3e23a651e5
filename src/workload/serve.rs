//! What every serving engine shares: the resolved options, which nodes serve
//! (tensor × pipeline parallel = nodes × GPUs per node), the GPU container every node runs
//! (derived env, the Hugging Face cache, RDMA devices and limits), where the API will answer,
//! and the refusals collected before anything starts.
//!
//! Pure: options and facts in, the pieces of a [`ServePlan`] or a [`ServeRefusal`] out (the
//! plan itself is `workload::skeleton`'s).

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::derive::{ClusterEnv, NodeEnv, NodeInput, derive};
use crate::model::ModelSource;
use crate::node::{NodeName, Role};
use crate::plan::spec::Mount;
use crate::plan::{ContainerSpec, Gpus, JobName, JobPlan, Ulimit};
use crate::workload::engines::{EngineKind, HubFiles, ModelOn};
use crate::workload::limits;
use crate::workload::rdma::{NoVerbs, RdmaAccess, rdma_access};

pub use crate::plan::spec::LABEL_WORKLOAD;
pub const LABEL_MODEL: &str = "dev.spark-launch.model";

/// Where things live on one node. Live runs resolve `~` to the node's home before planning;
/// a dry run on snapshots keeps `~/…` (the home of the user spark-launch connects as).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodePaths {
    /// The Hugging Face cache (`HF_HOME`) on the node.
    pub hf_home: String,
    /// The folder under which the node keeps its runtime caches (`workload::runtime_cache`).
    pub runtime_cache: String,
}

impl Default for NodePaths {
    fn default() -> Self {
        NodePaths {
            hf_home: "~/.cache/huggingface".to_string(),
            runtime_cache: super::runtime_cache::root_under("~"),
        }
    }
}

/// The serving options every engine takes, already resolved (no defaults left to fill).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    pub job: JobName,
    pub model: ModelSource,
    pub image: String,
    /// The API port on the head.
    pub port: u16,
    pub tp: u32,
    pub pp: u32,
    pub gpus_per_node: u32,
    /// Passed to the engine verbatim, after everything spark-launch sets.
    pub engine_args: Vec<String>,
    /// Set in every container, over the derived environment.
    pub env: BTreeMap<String, String>,
    pub paths: BTreeMap<NodeName, NodePaths>,
    /// Replace the default limits by name (`memlock=8388608` where limits cannot be raised).
    pub ulimits: Vec<Ulimit>,
    /// GPUs per container instead of all of them (`none` on machines without GPUs).
    pub gpus: Option<Gpus>,
    pub ready_timeout_s: u64,
    /// Stage the weights on every node before starting (off: they are already there).
    pub stage_model: bool,
    /// Readiness asks the questions of `spark-launch check` after the first token (off:
    /// `--no-check`).
    pub check_answers: bool,
    /// Run NCCL on TCP sockets rather than refuse when a node's containers could not reach its
    /// RDMA devices (`--allow-tcp`).
    pub allow_tcp: bool,
    /// Where the API listens on the head (`--bind`).
    pub bind: super::endpoint::Bind,
    /// The API key the engine enforces (resolved before planning from `--api-key`).
    pub api_key: Option<super::endpoint::ApiKey>,
    /// The cap on every container (`--memory-limit`) and `--allow-overcommit`.
    pub memory: super::memory::MemoryAsk,
    /// Containers, or plain processes on each node (`--runtime host`).
    pub runtime: crate::plan::RuntimeKind,
    /// Serve on exactly this many nodes instead of as many as `tp × pp` needs (an engine
    /// that spreads layers over the nodes it is given: llama.cpp's RPC servers).
    pub nodes: Option<usize>,
}

impl ServeOptions {
    /// `engine` serving `model` as the job `job`, everything else at its default: the engine's
    /// image, API port and readiness timeout; tp 1, pp 1, one GPU per node, the weights staged,
    /// the API on every interface with no key.
    pub fn new(engine: EngineKind, job: JobName, model: ModelSource) -> ServeOptions {
        let e = engine.engine();
        // An engine that loads GGUF file(s) reads a Hub repository as llama.cpp's `-hf` does.
        let model = match e.hub_files() {
            HubFiles::Gguf => model.as_gguf(),
            HubFiles::Repository => model,
        };
        ServeOptions {
            job,
            model,
            image: e.default_image().to_string(),
            port: e.default_port(),
            tp: 1,
            pp: 1,
            gpus_per_node: 1,
            engine_args: Vec::new(),
            env: BTreeMap::new(),
            paths: BTreeMap::new(),
            ulimits: Vec::new(),
            gpus: None,
            ready_timeout_s: e.defaults().ready_timeout_s,
            stage_model: true,
            check_answers: true,
            allow_tcp: false,
            bind: super::endpoint::Bind::All,
            api_key: None,
            memory: super::memory::MemoryAsk::default(),
            runtime: crate::plan::RuntimeKind::Docker,
            nodes: None,
        }
    }

    pub fn paths_of(&self, node: &NodeName) -> NodePaths {
        self.paths.get(node).cloned().unwrap_or_default()
    }

    /// The GPUs of one model replica (never wraps: `u32 × u32` fits a `u64`).
    pub fn world(&self) -> u64 {
        u64::from(self.tp) * u64::from(self.pp)
    }
}

/// Where the API answers once ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// `http://HOST:PORT/v1`, for OpenAI clients.
    pub url: String,
    pub host: Ipv4Addr,
    pub port: u16,
}

/// A whole serving job: the job plan plus what the user needs to know about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServePlan {
    pub engine: EngineKind,
    /// How the ranks find each other (`engines::MultiNode`): `native` or `ray` for vLLM,
    /// `single` or `mpi` for TensorRT-LLM.
    pub mode: String,
    pub model: ModelSource,
    /// The name the API lists at `/v1/models`.
    pub served_name: String,
    pub tp: u32,
    pub pp: u32,
    /// The expert-parallel size, where the engine's expert groups add ranks (Atlas); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_parallel: Option<u32>,
    pub endpoint: Endpoint,
    /// The nodes that serve, head first.
    pub nodes: Vec<NodeName>,
    /// Nodes of the cluster this job does not need.
    pub unused: Vec<NodeName>,
    /// Things the user should know (node selection, overridden variables, unresolved paths).
    pub notes: Vec<String>,
    /// Warnings from derive, per node.
    pub warnings: BTreeMap<NodeName, Vec<String>>,
    /// The folder on each node where the engine keeps what it compiles at start, and where
    /// every rank sees it (`workload::runtime_cache`). A plan kept by an older version has
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_cache: Option<super::runtime_cache::RuntimeCache>,
    /// Per node: the weights, KV cache and reserve it needs, what it has, the cap on its
    /// container (`workload::memory`). A plan kept by an older version has none.
    #[serde(default)]
    pub memory: super::memory::MemoryPlan,
    /// Why NCCL will run on TCP sockets instead of RDMA (`--allow-tcp`); absent: RDMA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockets: Option<String>,
    pub job: JobPlan,
    /// The API key clients send (shown as `<set>`, with the file that holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<super::endpoint::ApiKey>,
    /// The NCCL each container loads (`None` for the engine's plan alone, planned without a
    /// launch: `workload::skeleton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<super::nccl_lib::NcclPlan>,
    /// The community recipe the job runs (`up RECIPE`): its name, variables, mods, warnings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<super::recipe_part::RecipeSummary>,
}

/// One reason not to start, with the fix.
pub use crate::problem::Problem;

/// Every reason found not to start (exit 2). Nothing was touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct ServeRefusal {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ServeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "refusing to start: {n} problem{}",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl From<crate::derive::Refusal> for ServeRefusal {
    fn from(r: crate::derive::Refusal) -> Self {
        ServeRefusal {
            problems: r
                .violations
                .into_iter()
                .map(|v| Problem::new(format!("{}: {}", v.node, v.problem.what), v.problem.fix))
                .collect(),
        }
    }
}

/// How many nodes a replica of `tp × pp` GPUs needs with `gpus_per_node` each, or why the
/// shape does not fit. Every count is bounded (`limits`) and the arithmetic is checked.
pub fn nodes_needed(
    tp: u32,
    pp: u32,
    gpus_per_node: u32,
    available: usize,
) -> Result<usize, Problem> {
    let world = limits::world(tp, pp).map_err(|e| Problem::new(e, "lower --tp or --pp"));
    nodes_for(tp, pp, world, gpus_per_node, available)
}

/// [`nodes_needed`] for a replica the engine says spans `world` GPUs (tp × pp unless its own
/// parallelism adds ranks), or the engine's refusal of the shape.
pub fn nodes_for(
    tp: u32,
    pp: u32,
    world: Result<u64, Problem>,
    gpus_per_node: u32,
    available: usize,
) -> Result<usize, Problem> {
    if tp == 0 || pp == 0 {
        return Err(Problem::new(
            format!("--tp {tp} --pp {pp}: both must be at least 1"),
            "use --tp N with N ≥ 1 (and --pp 1 unless you want pipeline stages)",
        ));
    }
    if gpus_per_node == 0 {
        return Err(Problem::new(
            "--gpus-per-node 0",
            "give the number of GPUs each node has (1 on a DGX Spark)",
        ));
    }
    let bounds = [
        limits::count("--tp", u64::from(tp), u64::from(limits::MAX_TP)),
        limits::count("--pp", u64::from(pp), u64::from(limits::MAX_PP)),
        limits::count(
            "--gpus-per-node",
            u64::from(gpus_per_node),
            u64::from(limits::MAX_GPUS_PER_NODE),
        ),
    ];
    if let Some(Err(e)) = bounds.into_iter().find(|b| b.is_err()) {
        return Err(Problem::new(e, "choose a shape within the limits"));
    }
    let world = world?;
    // Where the engine's expert groups add ranks, the shape says so.
    let plain = world == u64::from(tp) * u64::from(pp);
    let (shape, product) = if plain {
        (format!("tp × pp = {tp} × {pp}"), "tp × pp".to_string())
    } else {
        let s = format!("tp {tp}, pp {pp} and the expert groups");
        (s.clone(), s)
    };
    let per_node = u64::from(gpus_per_node);
    if !world.is_multiple_of(per_node) {
        return Err(Problem::new(
            format!(
                "{shape} = {world} GPUs does not fill whole nodes of {gpus_per_node} GPU{}",
                if gpus_per_node == 1 { "" } else { "s" }
            ),
            format!(
                "make tp × pp a multiple of {gpus_per_node} (every node serves with all its GPUs)"
            ),
        ));
    }
    let needed = world / per_node;
    let available_gpus = (available as u64).saturating_mul(per_node);
    if needed > available as u64 {
        return Err(Problem::new(
            format!(
                "{product} = {world} GPUs needs {needed} nodes of {gpus_per_node} GPU{}, but the cluster has {available}",
                if gpus_per_node == 1 { "" } else { "s" }
            ),
            format!(
                "lower --tp/--pp to at most {available_gpus} GPUs in total, or add nodes (`spark-launch nodes add HOST`)"
            ),
        ));
    }
    usize::try_from(needed)
        .map_err(|_| Problem::new(format!("{needed} nodes"), "lower --tp or --pp"))
}

/// GPUs per node as the nodes' drivers list them: the count when every node reports the same
/// one, `None` when no node reports GPUs (snapshots without the driver's list), an error naming
/// the counts when they differ.
pub fn gpus_from_facts(nodes: &[NodeInput]) -> Result<Option<u32>, Problem> {
    let counts: Vec<(String, usize)> = nodes
        .iter()
        .map(|n| (n.name.to_string(), n.facts.host.gpus.len()))
        .collect();
    let known: Vec<&(String, usize)> = counts.iter().filter(|(_, c)| *c > 0).collect();
    let Some((_, first)) = known.first() else {
        return Ok(None);
    };
    if known.len() == counts.len() && known.iter().all(|(_, c)| c == first) {
        return Ok(Some(*first as u32));
    }
    Err(Problem::new(
        format!(
            "the nodes do not list the same number of GPUs ({})",
            counts
                .iter()
                .map(|(n, c)| format!("{n}: {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "say how many GPUs each node serves with: --gpus-per-node N (every node uses N)",
    ))
}

/// Marks the head's container with the one address its API listens on (none when it listens
/// on every interface), so `bench JOB` finds it there.
pub fn label_bind(head: &mut ContainerSpec, bound: Option<Ipv4Addr>) {
    if let Some(a) = bound {
        head.labels
            .insert(crate::plan::spec::LABEL_BIND.to_string(), a.to_string());
    }
}

/// The address the engine binds to (`--host`) and the URL readiness polls on the head.
pub fn listen(bound: Option<Ipv4Addr>, port: u16) -> (String, String) {
    match bound {
        Some(a) => (a.to_string(), format!("http://{a}:{port}")),
        None => ("0.0.0.0".to_string(), format!("http://127.0.0.1:{port}")),
    }
}

/// The serving nodes (the first `needed`, head first) with their derived environment.
pub struct Selected {
    pub inputs: Vec<NodeInput>,
    pub unused: Vec<NodeName>,
    pub env: ClusterEnv,
    /// Which containers get `/dev/infiniband`, and whether NCCL runs on sockets.
    pub rdma: RdmaAccess,
    /// What the plan assumed where the facts are unknown, for its notes.
    pub assumed: Vec<String>,
}

/// Picks the nodes and derives their environment, or every reason it cannot. `nccl`: the
/// engine's ranks talk over NCCL; one that does not runs on a single node without a fabric
/// (its control plane is the loopback interface there).
pub fn select(
    nodes: &[NodeInput],
    opts: &ServeOptions,
    world: Result<u64, Problem>,
    extra: Vec<Problem>,
    nccl: bool,
) -> Result<Selected, ServeRefusal> {
    let mut problems = extra;
    if let Err(e) = crate::plan::spec::check_image(&opts.image) {
        problems.push(Problem::new(
            format!("--image: {e}"),
            "give the image as Docker names it (`docker image ls` shows them)",
        ));
    }
    if nodes.is_empty() {
        problems.push(Problem::new("no nodes", "give nodes with --snapshot NAME=DIR (dry runs) or a cluster file (`spark-launch discover --save`)"));
        return Err(ServeRefusal { problems });
    }
    let counted = match opts.nodes {
        Some(n) if n == 0 || n > nodes.len() => Err(Problem::new(
            format!("{n} nodes asked for, {} given", nodes.len()),
            "give as many nodes (--hosts, the cluster file) or ask for fewer",
        )),
        Some(n) => Ok(n),
        None => nodes_for(opts.tp, opts.pp, world, opts.gpus_per_node, nodes.len()),
    };
    let needed = match counted {
        Ok(n) => n,
        Err(p) => {
            problems.push(p);
            return Err(ServeRefusal { problems });
        }
    };
    let inputs: Vec<NodeInput> = nodes[..needed].to_vec();
    let unused = nodes[needed..].iter().map(|n| n.name.clone()).collect();
    let env = match derive(&inputs) {
        Ok(env) => env,
        Err(_) if !nccl && inputs.len() == 1 => loopback(&inputs[0]),
        Err(r) => {
            problems.extend(ServeRefusal::from(r).problems);
            return Err(ServeRefusal { problems });
        }
    };
    let rdma = match rdma_access(&inputs, opts.allow_tcp) {
        Ok(a) => a,
        Err(missing) => {
            problems.extend(missing.iter().map(NoVerbs::problem));
            RdmaAccess::default()
        }
    };
    if !problems.is_empty() {
        return Err(ServeRefusal { problems });
    }
    let mut assumed = rdma.notes.clone();
    if inputs.iter().all(|n| n.facts.host.gpus.is_empty()) {
        assumed.push(format!(
            "no node's facts list its GPUs (proc/driver/nvidia/gpus): the plan takes {} GPU{} per node (--gpus-per-node, default 1)",
            opts.gpus_per_node,
            if opts.gpus_per_node == 1 { "" } else { "s" }
        ));
    }
    Ok(Selected {
        inputs,
        unused,
        env,
        rdma,
        assumed,
    })
}

/// A single node's environment when nothing crosses a fabric: nothing derived, its control
/// plane the loopback interface.
fn loopback(node: &NodeInput) -> ClusterEnv {
    ClusterEnv {
        topology: crate::derive::topology::Topology::Single,
        head: node.name.clone(),
        nodes: vec![NodeEnv {
            name: node.name.clone(),
            role: Role::Head,
            env: BTreeMap::new(),
            warnings: Vec::new(),
            hcas: Vec::new(),
            control: crate::derive::ControlPlane {
                iface: crate::probe::facts::NetIf::new("lo"),
                addr: Ipv4Addr::LOCALHOST,
                fabric_subnet: None,
            },
        }],
    }
}

/// The ports of one job must differ from each other.
pub fn distinct_ports(ports: &[(&str, u16)]) -> Vec<Problem> {
    let mut out = Vec::new();
    for (i, (a, pa)) in ports.iter().enumerate() {
        for (b, pb) in &ports[i + 1..] {
            if pa == pb {
                out.push(Problem::new(
                    format!("the {a} port and the {b} port are both {pa}"),
                    format!("give the {b} port another value"),
                ));
            }
        }
    }
    out
}

/// The GPU container of one serving node: derived env, the cache, RDMA devices, limits.
pub fn container(
    opts: &ServeOptions,
    engine: EngineKind,
    node: &NodeEnv,
    rdma: &RdmaAccess,
    notes: &mut Vec<String>,
) -> ContainerSpec {
    let has_ib = rdma.passes_devices(&node.name);
    let mut spec = ContainerSpec::gpu(&opts.job, &node.name, node.role, &opts.image, has_ib);
    spec.override_ulimits(&opts.ulimits);
    if let Some(g) = opts.gpus {
        spec.gpus = g;
    }
    spec.labels
        .insert(LABEL_WORKLOAD.to_string(), engine.to_string());
    spec.labels
        .insert(LABEL_MODEL.to_string(), opts.model.served_name());
    if node.role == Role::Head {
        spec.ports = vec![opts.port];
    }
    let mut env = node.env.clone();
    rdma.apply_env(&mut env);
    // The weights were staged on every node: the engine must not reach for the Hub (a gated
    // model would fail on workers, and every node would download again).
    env.insert("HF_HUB_OFFLINE".into(), "1".into());
    for (k, v) in &opts.env {
        if let Some(old) = node.env.get(k)
            && old != v
        {
            notes.push(format!(
                "{}: {k}={v} given by you replaces the derived {k}={old}",
                node.name
            ));
        }
        env.insert(k.clone(), v.clone());
    }
    spec.env = env;
    // A node that gets its tensors from the head over the network reads no model files.
    if node.role != Role::Head && engine.engine().model_on() == ModelOn::Head {
        return spec;
    }
    spec.mount_hf_cache(&opts.paths_of(&node.name).hf_home);
    if let ModelSource::Local { path } = &opts.model {
        spec.mounts.push(Mount {
            source: path.clone(),
            target: opts.model.container_path(),
            read_only: true,
            kind: crate::plan::spec::MountKind::Bind,
        });
    }
    spec
}

/// Where users reach the API: the address it is bound to, else the head's management address
/// when it has one (what a laptop on the LAN reaches), else its control-plane address.
pub fn endpoint(
    head: &NodeInput,
    head_env: &NodeEnv,
    port: u16,
    bound: Option<Ipv4Addr>,
) -> Endpoint {
    let host = bound.unwrap_or_else(|| {
        head.facts
            .management_interface()
            .and_then(|i| i.ipv4.first().map(|a| a.addr))
            .unwrap_or(head_env.control.addr)
    });
    Endpoint {
        url: format!("http://{host}:{port}/v1"),
        host,
        port,
    }
}

/// Notes every plan carries about what it assumed: paths a dry run could not resolve, facts a
/// snapshot does not record (RDMA devices, GPUs), NCCL on sockets.
pub fn path_notes(
    opts: &ServeOptions,
    nodes: &[NodeName],
    assumed: &[String],
    notes: &mut Vec<String>,
) {
    notes.extend(assumed.iter().cloned());
    let unresolved: Vec<&str> = nodes
        .iter()
        .filter(|n| {
            let p = opts.paths_of(n);
            p.hf_home.starts_with('~') || p.runtime_cache.starts_with('~')
        })
        .map(|n| n.as_str())
        .collect();
    if !unresolved.is_empty() {
        notes.push(format!(
            "`~` in mount sources is the home of the user spark-launch connects as on {}; a live run resolves it on each node before starting",
            unresolved.join(", ")
        ));
    }
    if let ModelSource::Hub {
        revision,
        commit: None,
        ..
    } = &opts.model
    {
        notes.push(format!(
            "revision {revision} is resolved to a commit on the Hub at launch; the snapshot path then names that commit"
        ));
    }
    if let Some(g) = opts.model.gguf()
        && g.picked.is_none()
    {
        notes.push(format!(
            "the GGUF file(s) of {} ({}) are picked from the Hub's listing at launch, as llama.cpp's -hf picks them; the model path then names the file",
            opts.model,
            g.quant_text()
        ));
    }
}

/// Derive's warnings, by node.
pub fn warnings(env: &ClusterEnv) -> BTreeMap<NodeName, Vec<String>> {
    env.nodes
        .iter()
        .filter(|n| !n.warnings.is_empty())
        .map(|n| (n.name.clone(), n.warnings.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tp_times_pp_must_fill_whole_nodes_that_exist() {
        assert_eq!(nodes_needed(2, 1, 1, 2), Ok(2));
        assert_eq!(nodes_needed(2, 1, 1, 4), Ok(2));
        assert_eq!(nodes_needed(8, 2, 8, 2), Ok(2));
        let p = nodes_needed(3, 1, 2, 4).unwrap_err();
        assert!(p.what.contains("does not fill whole nodes"), "{p}");
        let p = nodes_needed(4, 1, 1, 2).unwrap_err();
        assert!(p.what.contains("needs 4 nodes"), "{p}");
        assert!(p.fix.contains("at most 2 GPUs"), "{p}");
        assert!(nodes_needed(0, 1, 1, 2).is_err());
    }

    #[test]
    fn a_shape_past_the_limits_is_refused_naming_the_limit_never_wrapped() {
        // Seen once: `--tp 4294967295 --pp 4294967295` planned a one-node job, `--tp 65536
        // --pp 65536` refused with "0 problems".
        let p = nodes_needed(u32::MAX, u32::MAX, 1, 2).unwrap_err();
        assert_eq!(p.what, "--tp 4294967295: at most 1024 is supported");
        let p = nodes_needed(1024, 256, 1, 2).unwrap_err();
        assert!(
            p.what.contains("1024 × 256 = 262144 GPUs: at most 4096"),
            "{p}"
        );
        let p = nodes_needed(1, 1, 65, 2).unwrap_err();
        assert_eq!(p.what, "--gpus-per-node 65: at most 64 is supported");
        assert_eq!(nodes_needed(2, 1, 1, usize::MAX), Ok(2));
    }

    #[test]
    fn gpus_per_node_come_from_the_drivers_when_every_node_agrees() {
        use crate::probe::facts::GpuFacts;
        let node = |name: &str, gpus: usize| {
            let mut facts: crate::probe::NodeFacts = serde_json::from_value(serde_json::json!({
                "hostname": name, "arch": null, "interfaces": [], "rdma_devices": [], "routes": []
            }))
            .unwrap();
            facts.host.gpus = (0..gpus)
                .map(|i| GpuFacts {
                    bus: format!("0000:0{i}:00.0"),
                    model: Some("NVIDIA GB10".into()),
                })
                .collect();
            NodeInput {
                name: NodeName::new(name).unwrap(),
                facts,
            }
        };
        assert_eq!(gpus_from_facts(&[node("a", 1), node("b", 1)]), Ok(Some(1)));
        assert_eq!(gpus_from_facts(&[node("a", 0), node("b", 0)]), Ok(None));
        let p = gpus_from_facts(&[node("a", 1), node("b", 2)]).unwrap_err();
        assert!(p.what.contains("a: 1, b: 2"), "{p}");
    }

    #[test]
    fn two_roles_on_one_port_are_refused() {
        let p = distinct_ports(&[("API", 8000), ("rendezvous", 8000), ("Ray", 6379)]);
        assert_eq!(p.len(), 1);
        assert!(p[0].what.contains("API port and the rendezvous port"));
    }
}
