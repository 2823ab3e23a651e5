//! `nccl-test` as a plan: which node runs what, the hostfile, and the exact `mpirun` line —
//! from each node's facts, its derived environment and the user's options. Pure: no network,
//! no Docker, no files; `--dry-run` prints what this returns and the executor runs it.
//!
//! The shape of the job:
//! - **docker**: one container per node from the nccl-tests image, each running sshd on the
//!   node's own control-plane address (port 2233) with the node's derived environment; the
//!   head's container also runs the *driver*: it writes the hostfile, waits until every
//!   worker's sshd answers, then runs one `mpirun` per operation and records each exit status.
//! - **host**: no containers; the driver runs as a host process on the head and `mpirun`
//!   reaches the workers through the system's ssh.
//!
//! One `mpirun` line serves nodes whose interface and device names differ: each node is its own
//! app context (`-np G -H addr:G -x NCCL_IB_HCA=... : ...`), so every rank gets its own node's
//! variables; Open MPI's own interface choice uses the control-plane subnets (CIDR), which are
//! the same everywhere. `NCCL_DEBUG=INFO` is always on: the report reads the transport from it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::derive::{ClusterEnv, NodeInput, Topology};
use crate::node::{NodeName, Role};
use crate::plan::spec::{LABEL_JOB, LABEL_NODE, LABEL_ROLE};
use crate::plan::{
    ContainerSpec, EnsureImage, JobName, JobPlan, Launch, NodePlan, ProcessSpec, RuntimeKind,
    Start, Step, Stop, Ulimit, WaitExit,
};
use crate::probe::facts::Subnet;
use crate::workload::job_ssh::JobSshKeys;
use crate::workload::nccl_build::{CpuArch, default_image};
use crate::workload::rdma::{IB_DISABLE, NoVerbs, rdma_access};

/// The port of the sshd inside the nccl-tests containers (the node's own sshd keeps 22).
pub const SSHD_PORT: u16 = 2233;
/// The image's entrypoint (images/nccl-tests/Dockerfile): starts the job's sshd, then runs the
/// command, or with none waits.
pub const ENTRYPOINT: &str = "/usr/local/bin/sl-entrypoint";
/// Where the image keeps the `*_perf` binaries.
pub const IMAGE_TESTS_DIR: &str = "/opt/nccl-tests/build";
/// The hostfile inside the head's container.
pub const CONTAINER_HOSTFILE: &str = "/etc/spark-launch/hostfile";
/// The capture holding the driver's output (every test's log).
pub const CAPTURE: &str = "nccl-tests";
/// Default largest message: big enough to reach the link's bandwidth, small enough for a
/// 128 GB unified-memory box.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// A marker line the driver prints after each `mpirun`; the report reads the exit status.
pub const EXIT_MARKER: &str = "# spark-launch: mpirun exit status";

/// A collective that nccl-tests measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclOp {
    AllGather,
    AllReduce,
    ReduceScatter,
    Broadcast,
    Reduce,
    AllToAll,
    SendRecv,
    Gather,
    Scatter,
    Hypercube,
}

impl NcclOp {
    pub const ALL: [NcclOp; 10] = [
        NcclOp::AllGather,
        NcclOp::AllReduce,
        NcclOp::ReduceScatter,
        NcclOp::Broadcast,
        NcclOp::Reduce,
        NcclOp::AllToAll,
        NcclOp::SendRecv,
        NcclOp::Gather,
        NcclOp::Scatter,
        NcclOp::Hypercube,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NcclOp::AllGather => "all_gather",
            NcclOp::AllReduce => "all_reduce",
            NcclOp::ReduceScatter => "reduce_scatter",
            NcclOp::Broadcast => "broadcast",
            NcclOp::Reduce => "reduce",
            NcclOp::AllToAll => "alltoall",
            NcclOp::SendRecv => "sendrecv",
            NcclOp::Gather => "gather",
            NcclOp::Scatter => "scatter",
            NcclOp::Hypercube => "hypercube",
        }
    }

    /// The nccl-tests binary: `all_gather_perf`.
    pub fn binary(self) -> String {
        format!("{}_perf", self.name())
    }
}

impl fmt::Display for NcclOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for NcclOp {
    type Err = String;
    /// `all_gather`, `all_gather_perf`, `allgather` and `all-gather` all name one op.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key: String = s
            .trim()
            .trim_end_matches("_perf")
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_lowercase();
        NcclOp::ALL
            .into_iter()
            .find(|op| op.name().replace('_', "") == key)
            .ok_or_else(|| {
                format!(
                    "unknown operation {s:?}; one of: {}",
                    NcclOp::ALL.map(|o| o.name()).join(", ")
                )
            })
    }
}

/// Parses a size as nccl-tests does (`8`, `64K`, `128M`, `4G`; binary multiples).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        Some('T' | 't') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("expected a size such as 8, 64K, 128M or 4G, got {s:?}"))
}

/// A size in the shortest form nccl-tests accepts (`4G`, `512M`, `8`).
pub fn format_bytes(n: u64) -> String {
    for (suffix, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// What the user asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct NcclTestOptions {
    pub job: JobName,
    pub ops: Vec<NcclOp>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// `-f`: multiply the size by this each step.
    pub factor: u64,
    /// `-n`: timed iterations per size.
    pub iters: u32,
    /// `-w`: warm-up iterations (nccl-tests' default when `None`).
    pub warmup: Option<u32>,
    pub runtime: RuntimeKind,
    /// `--image` (docker runtime); by default each node gets `nccl-build`'s default tag for its
    /// CPU architecture.
    pub image: Option<String>,
    /// Where the `*_perf` binaries are: in the image, or on every node (host runtime).
    pub tests_dir: String,
    /// `mpirun` as the head finds it.
    pub mpirun: String,
    /// Extra variables for every rank (`--env KEY=VALUE`), over the derived ones. Their values
    /// ride in the head's environment (container env, or the host process's env file) and
    /// `mpirun -x NAME` forwards them: never on a command line (`ps`, `docker inspect`'s Cmd).
    pub extra_env: BTreeMap<String, String>,
    /// `--ulimit` overrides for the containers.
    pub ulimits: Vec<Ulimit>,
    /// Pass `--allow-run-as-root` (always in containers, which run as root).
    pub as_root: bool,
    /// How long the whole driver may run.
    pub timeout_s: u64,
    /// How long the head waits for the workers' sshd.
    pub ssh_wait_s: u64,
    /// Only check the launch path: `mpirun hostname` on every rank instead of the tests.
    pub launch_check: bool,
    /// Run NCCL on TCP sockets rather than refuse when a node's containers could not reach
    /// its RDMA devices (`--allow-tcp`).
    pub allow_tcp: bool,
}

impl NcclTestOptions {
    /// The defaults of `spark-launch nccl-test`: all_gather and all_reduce, 8 B to 4 GiB.
    pub fn new(job: JobName) -> Self {
        NcclTestOptions {
            job,
            ops: vec![NcclOp::AllGather, NcclOp::AllReduce],
            min_bytes: 8,
            max_bytes: DEFAULT_MAX_BYTES,
            factor: 2,
            iters: 20,
            warmup: None,
            runtime: RuntimeKind::Docker,
            image: None,
            tests_dir: IMAGE_TESTS_DIR.into(),
            mpirun: "mpirun".into(),
            extra_env: BTreeMap::new(),
            ulimits: Vec::new(),
            as_root: true,
            timeout_s: 1800,
            ssh_wait_s: 120,
            launch_check: false,
            allow_tcp: false,
        }
    }
}

/// One node of the test as the plan needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TestNode {
    pub name: NodeName,
    pub role: Role,
    /// The hostname NCCL will print (the report matches transports to nodes by it).
    pub hostname: String,
    /// The address mpirun reaches this node at (its control-plane IPv4, or `localhost` for a
    /// single local node).
    pub addr: String,
    /// The control-plane subnet (Open MPI's `*_tcp_if_include`), when known.
    pub subnet: Option<Subnet>,
    /// `aarch64`, `x86_64` (picks the default image).
    pub arch: Option<String>,
    /// GPUs on the node: one rank each.
    pub gpus: u32,
    /// The node's derived environment (empty when nothing could be derived: a single node
    /// without RDMA).
    pub env: BTreeMap<String, String>,
    /// The RDMA devices NCCL must use on this node (from the derived `NCCL_IB_HCA`).
    pub hcas: Vec<String>,
    /// The container gets `/dev/infiniband`: seen with `uverbs*` on the node, or not recorded
    /// by its snapshot (see `infiniband_unrecorded`).
    pub has_infiniband: bool,
    /// The node's snapshot does not record `/dev/infiniband`: the plan assumed it is there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub infiniband_unrecorded: bool,
    /// The node has ACTIVE RDMA devices that a container could not reach (no usable
    /// `/dev/infiniband`): a multi-node test refuses unless TCP is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_verbs: Option<NoVerbs>,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NcclTestError {
    #[error("no nodes to test")]
    NoNodes,
    #[error("no operation to run; give --op all_gather (or another)")]
    NoOps,
    #[error("the smallest size ({min}) is larger than the largest ({max}); fix -b/-e")]
    SizeOrder { min: String, max: String },
    #[error("the size factor must be 2 or more (-f {0})")]
    Factor(u64),
    #[error("--iters must be at least 1")]
    Iters,
    #[error("{0}: no GPUs to run a rank on (--gpus-per-node must be 1 or more)")]
    NoGpus(NodeName),
    #[error(
        "{node}: no control-plane address for mpirun to reach it; `spark-launch env` shows what derive found, `spark-launch doctor` why"
    )]
    NoAddress { node: NodeName },
    #[error("{0}: nodes must have distinct addresses for mpirun ({1} is given twice)")]
    SameAddress(NodeName, String),
    #[error(
        "{0}: its CPU architecture ({1}) has no default image; build one with `spark-launch nccl-build` and pass it with --image"
    )]
    NoImage(NodeName, String),
    #[error("refusing to start: {}", .0.iter().map(|m| m.problem().to_string()).collect::<Vec<_>>().join("\n  "))]
    NoVerbs(Vec<NoVerbs>),
    #[error("--image: {0}")]
    BadImage(String),
    #[error(transparent)]
    Quote(#[from] crate::quote::NulByte),
}

/// Everything `nccl-test` will do, as data.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NcclTestPlan {
    /// The job the executor runs (containers or the host process, and the steps).
    pub plan: JobPlan,
    pub topology: Option<Topology>,
    pub nodes: Vec<TestNode>,
    /// The hostfile the driver writes on the head, and where.
    pub hostfile_path: String,
    pub hostfile: String,
    /// One `mpirun` per operation, in order.
    pub runs: Vec<MpirunRun>,
    /// The script the head runs (hostfile, wait for sshd, the `mpirun` lines).
    pub driver: String,
    /// What the plan assumed (RDMA devices a snapshot does not record, NCCL on sockets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The NCCL each container loads (set by `workload::launch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<super::nccl_lib::NcclPlan>,
}

/// What a finished nccl-test says: the figures and the verdict, or, for `--launch-check`,
/// whether every node answered with every rank.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum NcclVerdict {
    Measured(crate::report::nccl::Analysis),
    LaunchCheck(crate::report::nccl::launch::LaunchCheck),
}

impl NcclVerdict {
    /// The run failed its verdict (exit 1).
    pub fn failed(&self) -> bool {
        match self {
            NcclVerdict::Measured(a) => a.status.is_bad(),
            NcclVerdict::LaunchCheck(c) => !c.ok,
        }
    }
}

impl NcclTestPlan {
    /// The verdict on what the driver printed, with every node's derived HCAs as the
    /// expectation (a twin NCCL did not open fails).
    pub fn verdict(&self, log: &str, exit_code: Option<i32>) -> NcclVerdict {
        use crate::report::nccl;
        if self.runs.iter().all(|r| r.op.is_none()) {
            let expected: Vec<(String, String, u32)> = self
                .nodes
                .iter()
                .map(|n| (n.name.to_string(), n.hostname.clone(), n.gpus))
                .collect();
            return NcclVerdict::LaunchCheck(nccl::launch::launch_check(log, &expected));
        }
        let mut expected = nccl::ExpectedHcas::new();
        for n in &self.nodes {
            if !n.hcas.is_empty() {
                expected.insert(n.hostname.clone(), n.hcas.clone());
            }
        }
        let ctx = nccl::AnalysisContext {
            expected_hcas: expected,
            topology: self.topology,
            test_hint: None,
            exit_code,
        };
        NcclVerdict::Measured(nccl::analyse(log, &ctx))
    }
}

/// One `mpirun` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MpirunRun {
    /// The operation (`None` for the launch check, which runs `hostname`).
    pub op: Option<NcclOp>,
    /// `all_gather_perf`.
    pub test: String,
    pub argv: Vec<String>,
}

impl MpirunRun {
    /// The line as a shell would take it, one app context (node) per line.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        let mut first_context = true;
        for (i, a) in self.argv.iter().enumerate() {
            if a == ":" {
                out.push_str(" \\\n  :");
                continue;
            }
            if a == "-np" && first_context {
                first_context = false;
                out.push_str(" \\\n   ");
            }
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&crate::quote::display(std::slice::from_ref(a)));
        }
        out
    }
}

/// The variables a rank needs, of the node's derived environment: NCCL's and UCX's (Open MPI's
/// own are given as `--mca` with subnets; Ray/vLLM/Gloo's do not concern nccl-tests).
fn rank_env(node: &TestNode, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = node
        .env
        .iter()
        .filter(|(k, _)| k.starts_with("NCCL_") || k.starts_with("UCX_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.insert("NCCL_DEBUG".into(), "INFO".into());
    // The user's own (`--env`) are forwarded by name from the head's environment.
    env.retain(|k, _| !extra.contains_key(k));
    env
}

/// Turns derived facts into test nodes: each node's control-plane address and subnet, its
/// HCAs, its derived env. `cluster` is `None` when nothing could be derived (a single node
/// without RDMA): that node is reached as `localhost`.
pub fn test_nodes(
    inputs: &[NodeInput],
    cluster: Option<&ClusterEnv>,
    gpus: Option<u32>,
) -> Vec<TestNode> {
    let no_verbs = rdma_access(inputs, false).err().unwrap_or_default();
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let derived = cluster.and_then(|c| c.node(&input.name));
            let (addr, subnet) = match derived {
                Some(d) => {
                    let subnet = d.control.fabric_subnet.or_else(|| {
                        input
                            .facts
                            .interface(&d.control.iface)?
                            .ipv4
                            .iter()
                            .find(|a| a.addr == d.control.addr)
                            .map(|a| a.subnet())
                    });
                    (d.control.addr.to_string(), subnet)
                }
                None if inputs.len() == 1 => ("localhost".to_string(), None),
                None => (String::new(), None),
            };
            TestNode {
                name: input.name.clone(),
                role: if i == 0 { Role::Head } else { Role::Worker },
                hostname: input
                    .facts
                    .hostname
                    .split('.')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                addr,
                subnet,
                arch: input.facts.arch.clone(),
                // One rank per GPU the driver lists on that node, unless the user said.
                gpus: gpus.unwrap_or_else(|| {
                    u32::try_from(input.facts.host.gpus.len())
                        .unwrap_or(1)
                        .max(1)
                }),
                env: derived.map(|d| d.env.clone()).unwrap_or_default(),
                hcas: derived
                    .map(|d| d.hcas.iter().map(|h| h.device.to_string()).collect())
                    .unwrap_or_default(),
                has_infiniband: input.facts.host.has_uverbs().unwrap_or(true),
                infiniband_unrecorded: input.facts.host.has_uverbs().is_none(),
                no_verbs: no_verbs.iter().find(|m| m.node == input.name).cloned(),
            }
        })
        .collect()
}

/// Builds the whole plan; across containers, they use the job's own SSH identity `keys`.
/// `nccl` (the NCCL steps of `nccl_lib::steps`) runs once the images are on the nodes.
pub fn plan(
    nodes: &[TestNode],
    topology: Option<Topology>,
    opts: &NcclTestOptions,
    keys: &JobSshKeys,
    nccl: Vec<Step>,
) -> Result<NcclTestPlan, NcclTestError> {
    validate(nodes, opts)?;
    let multi = nodes.len() > 1;
    let (nodes, notes) = &rdma_on_nodes(nodes, opts, multi)?;
    let nodes = nodes.as_slice();
    let head = &nodes[0];
    let docker = opts.runtime == RuntimeKind::Docker;
    let hostfile_path = if docker {
        CONTAINER_HOSTFILE.to_string()
    } else {
        format!("/tmp/sl-{}.hostfile", opts.job)
    };
    let hostfile: String = nodes
        .iter()
        .map(|n| format!("{} slots={}\n", n.addr, n.gpus))
        .collect();
    let runs: Vec<MpirunRun> = if opts.launch_check {
        vec![MpirunRun {
            op: None,
            test: "hostname".into(),
            argv: mpirun_argv(nodes, "hostname", &[], opts, &hostfile_path),
        }]
    } else {
        opts.ops
            .iter()
            .map(|op| MpirunRun {
                op: Some(*op),
                test: op.binary(),
                argv: mpirun_argv(
                    nodes,
                    &format!("{}/{}", opts.tests_dir.trim_end_matches('/'), op.binary()),
                    &test_args(opts),
                    opts,
                    &hostfile_path,
                ),
            })
            .collect()
    };
    let driver = driver_script(nodes, opts, &hostfile_path, &hostfile, &runs)?;
    let driver_cmd = vec!["sh".to_string(), "-c".to_string(), driver.clone()];

    let (node_plans, steps) = if docker {
        let mut images: Vec<(String, Vec<NodeName>)> = Vec::new();
        let mut node_plans = Vec::new();
        for n in nodes {
            let image = image_for(n, opts)?;
            match images.iter_mut().find(|(i, _)| *i == image) {
                Some((_, list)) => list.push(n.name.clone()),
                None => images.push((image.clone(), vec![n.name.clone()])),
            }
            node_plans.push(NodePlan {
                node: n.name.clone(),
                role: n.role,
                launch: Launch::Container(container(
                    n,
                    &image,
                    nodes,
                    opts,
                    (multi, keys),
                    &driver_cmd,
                )),
            });
        }
        let mut steps: Vec<Step> = images
            .into_iter()
            .map(|(image, nodes)| Step::EnsureImage(EnsureImage { image, nodes }))
            .collect();
        steps.extend(nccl);
        steps.push(Step::Start(Start {
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        }));
        steps.push(wait_exit(&head.name, opts.timeout_s));
        steps.push(Step::Stop(Stop));
        (node_plans, steps)
    } else {
        let mut process = process(&opts.job, head, driver_cmd);
        // The host runtime hands the env to the process through a 0600 file, not argv.
        process.env = opts.extra_env.clone();
        let steps = vec![
            Step::Start(Start {
                nodes: vec![head.name.clone()],
            }),
            wait_exit(&head.name, opts.timeout_s),
            Step::Stop(Stop),
        ];
        (
            vec![NodePlan {
                node: head.name.clone(),
                role: Role::Head,
                launch: Launch::Process(process),
            }],
            steps,
        )
    };
    Ok(NcclTestPlan {
        plan: JobPlan {
            job: opts.job.clone(),
            workload: "nccl-test".into(),
            runtime: opts.runtime,
            nodes: node_plans,
            steps,
        },
        topology,
        nodes: nodes.to_vec(),
        hostfile_path,
        hostfile,
        runs,
        driver,
        notes: notes.clone(),
        nccl: None,
    })
}

/// Refuses a multi-node test on a node whose ACTIVE RDMA devices its container could not reach
/// (unless TCP is allowed: then every rank gets `NCCL_IB_DISABLE=1`), and notes what was
/// assumed.
fn rdma_on_nodes(
    nodes: &[TestNode],
    opts: &NcclTestOptions,
    multi: bool,
) -> Result<(Vec<TestNode>, Vec<String>), NcclTestError> {
    let mut out = nodes.to_vec();
    let mut notes = Vec::new();
    let unrecorded: Vec<&str> = nodes
        .iter()
        .filter(|n| n.infiniband_unrecorded)
        .map(|n| n.name.as_str())
        .collect();
    if !unrecorded.is_empty() {
        notes.push(format!(
            "the snapshots of {} do not record /dev/infiniband: the plan passes it as if present (a live run sees whether it is)",
            unrecorded.join(", ")
        ));
    }
    let missing: Vec<NoVerbs> = nodes.iter().filter_map(|n| n.no_verbs.clone()).collect();
    if !multi || missing.is_empty() {
        return Ok((out, notes));
    }
    if !opts.allow_tcp {
        return Err(NcclTestError::NoVerbs(missing));
    }
    for n in &mut out {
        n.env.insert(IB_DISABLE.to_string(), "1".to_string());
    }
    notes.push(format!(
        "NCCL will use TCP sockets on every node, not RDMA (--allow-tcp: {} without a usable /dev/infiniband); NCCL_IB_DISABLE=1 is set on every rank, and the report will flag the socket transport",
        missing
            .iter()
            .map(|m| m.node.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok((out, notes))
}

/// `--image`, or the default tag of `nccl-build` for the node's CPU architecture.
fn image_for(n: &TestNode, opts: &NcclTestOptions) -> Result<String, NcclTestError> {
    if let Some(i) = &opts.image {
        return Ok(i.clone());
    }
    let uname = n.arch.clone().unwrap_or_else(|| "unknown".into());
    CpuArch::from_uname(&uname)
        .map(default_image)
        .ok_or_else(|| NcclTestError::NoImage(n.name.clone(), uname))
}

fn wait_exit(head: &NodeName, timeout_s: u64) -> Step {
    Step::WaitExit(WaitExit {
        node: head.clone(),
        capture: Some(CAPTURE.to_string()),
        timeout_s,
        // A failed test is a verdict, read from the capture; the job still stops cleanly.
        allow_failure: true,
    })
}

fn validate(nodes: &[TestNode], opts: &NcclTestOptions) -> Result<(), NcclTestError> {
    if nodes.is_empty() {
        return Err(NcclTestError::NoNodes);
    }
    if opts.ops.is_empty() {
        return Err(NcclTestError::NoOps);
    }
    if opts.min_bytes > opts.max_bytes {
        return Err(NcclTestError::SizeOrder {
            min: format_bytes(opts.min_bytes),
            max: format_bytes(opts.max_bytes),
        });
    }
    if opts.factor < 2 {
        return Err(NcclTestError::Factor(opts.factor));
    }
    if opts.iters == 0 {
        return Err(NcclTestError::Iters);
    }
    if let Some(image) = &opts.image {
        crate::plan::spec::check_image(image).map_err(NcclTestError::BadImage)?;
    }
    let mut seen: BTreeMap<&str, &NodeName> = BTreeMap::new();
    for n in nodes {
        if n.gpus == 0 {
            return Err(NcclTestError::NoGpus(n.name.clone()));
        }
        if n.addr.is_empty() {
            return Err(NcclTestError::NoAddress {
                node: n.name.clone(),
            });
        }
        if seen.insert(n.addr.as_str(), &n.name).is_some() {
            return Err(NcclTestError::SameAddress(n.name.clone(), n.addr.clone()));
        }
    }
    Ok(())
}

/// nccl-tests' arguments: sizes, one GPU per rank, iterations.
pub fn test_args(opts: &NcclTestOptions) -> Vec<String> {
    let mut args = vec![
        "-b".to_string(),
        format_bytes(opts.min_bytes),
        "-e".into(),
        format_bytes(opts.max_bytes),
        "-f".into(),
        opts.factor.to_string(),
        "-g".into(),
        "1".into(),
        "-n".into(),
        opts.iters.to_string(),
    ];
    if let Some(w) = opts.warmup {
        args.extend(["-w".to_string(), w.to_string()]);
    }
    args
}

/// The exact `mpirun` argument vector running `program args` on every rank, one app context
/// per node.
pub fn mpirun_argv(
    nodes: &[TestNode],
    program: &str,
    args: &[String],
    opts: &NcclTestOptions,
    hostfile: &str,
) -> Vec<String> {
    let s = |x: &str| x.to_string();
    let mut argv = vec![opts.mpirun.clone()];
    if opts.as_root || opts.runtime == RuntimeKind::Docker {
        argv.push(s("--allow-run-as-root"));
    }
    argv.extend([s("--hostfile"), s(hostfile), s("--bind-to"), s("none")]);
    if nodes.len() > 1 {
        if opts.runtime == RuntimeKind::Docker {
            argv.extend(super::job_ssh::mpirun_ssh_options(SSHD_PORT));
        }
        let mut subnets: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.subnet.map(|s| s.to_string()))
            .collect();
        subnets.sort();
        subnets.dedup();
        if !subnets.is_empty() {
            let list = subnets.join(",");
            argv.extend([s("--mca"), s("oob_tcp_if_include"), list.clone()]);
            argv.extend([s("--mca"), s("btl_tcp_if_include"), list]);
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 {
            argv.push(s(":"));
        }
        argv.extend([
            s("-np"),
            n.gpus.to_string(),
            s("-H"),
            format!("{}:{}", n.addr, n.gpus),
            s("-x"),
            s("PATH"),
            s("-x"),
            s("LD_LIBRARY_PATH"),
        ]);
        for (k, v) in rank_env(n, &opts.extra_env) {
            argv.extend([s("-x"), format!("{k}={v}")]);
        }
        // `-x NAME`: the value from mpirun's own environment (the head's), never in argv.
        for k in opts.extra_env.keys() {
            argv.extend([s("-x"), k.clone()]);
        }
        argv.push(program.to_string());
        argv.extend(args.iter().cloned());
    }
    argv
}

/// The head's script: hostfile, wait for the workers' sshd (containers), each `mpirun` with
/// its exit status marked; exits 1 when any `mpirun` failed.
fn driver_script(
    nodes: &[TestNode],
    opts: &NcclTestOptions,
    hostfile_path: &str,
    hostfile: &str,
    runs: &[MpirunRun],
) -> Result<String, crate::quote::NulByte> {
    let p = crate::quote::quote(hostfile_path, crate::quote::Style::Minimal)?;
    // -x LD_LIBRARY_PATH forwards it to every rank; make sure it is defined (Open MPI warns
    // about an unset one).
    let mut s = String::from("set -u\nexport LD_LIBRARY_PATH=\"${LD_LIBRARY_PATH-}\"\n");
    if opts.runtime == RuntimeKind::Host {
        // On the node itself the hostfile is a temporary file: gone when the driver ends.
        s.push_str(&format!(
            "trap 'rm -f {p}' EXIT\ntrap 'exit 143' TERM\ntrap 'exit 130' INT\n",
            p = p
        ));
    }
    s.push_str(&format!(
        "mkdir -p \"$(dirname {p})\" && cat > {p} <<'SL_HOSTFILE'\n{hostfile}SL_HOSTFILE\n",
        p = p
    ));
    let workers: Vec<&str> = nodes[1..].iter().map(|n| n.addr.as_str()).collect();
    if opts.runtime == RuntimeKind::Docker && !workers.is_empty() {
        s.push_str(&format!(
            "sl-wait-ssh {} {} || exit 3\n",
            opts.ssh_wait_s,
            workers.join(" ")
        ));
    }
    s.push_str("status=0\n");
    for r in runs {
        s.push_str(&format!("echo '# spark-launch: running {}'\n", r.test));
        s.push_str(&crate::quote::join(&r.argv)?);
        s.push_str(" 2>&1\n");
        s.push_str(&format!(
            "rc=$?; echo \"{EXIT_MARKER} $rc\"; [ \"$rc\" -eq 0 ] || status=1\n"
        ));
    }
    s.push_str("exit $status\n");
    Ok(s)
}

fn labels(job: &JobName, node: &NodeName, role: Role) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_JOB.to_string(), job.to_string()),
        (LABEL_NODE.to_string(), node.to_string()),
        (LABEL_ROLE.to_string(), role.to_string()),
    ])
}

fn process(job: &JobName, head: &TestNode, command: Vec<String>) -> ProcessSpec {
    ProcessSpec {
        name: job.container_name(&head.name),
        command,
        env: BTreeMap::new(),
        workdir: None,
        labels: labels(job, &head.name, Role::Head),
    }
}

/// A node's container: the RDMA GPU container with its derived env, sshd on its own
/// control-plane address with the job's own SSH identity (`job_ssh`; the client key in the
/// head's only); the head also runs the driver.
fn container(
    n: &TestNode,
    image: &str,
    nodes: &[TestNode],
    opts: &NcclTestOptions,
    job: (bool, &JobSshKeys),
    driver: &[String],
) -> ContainerSpec {
    let (multi, keys) = job;
    let mut spec = ContainerSpec::gpu(&opts.job, &n.name, n.role, image, n.has_infiniband);
    spec.override_ulimits(&opts.ulimits);
    spec.env = n.env.clone();
    spec.env.insert("NCCL_DEBUG".into(), "INFO".into());
    if multi {
        spec.env
            .insert("SL_SSHD_PORT".into(), SSHD_PORT.to_string());
        spec.env.insert("SL_SSHD_LISTEN".into(), n.addr.clone());
        // The job's host key is pinned for every peer's address (what mpirun uses) and name.
        let peers: Vec<String> = nodes
            .iter()
            .map(|p| format!("{}={}", p.name, p.addr))
            .collect();
        spec.env.insert("SL_PEERS".into(), peers.join(" "));
        keys.add_to(&mut spec, n.role == Role::Head);
    } else {
        // One node: no sshd, mpirun starts every rank locally.
        spec.env.insert("SL_SSHD".into(), "0".into());
    }
    if n.role == Role::Head {
        // The user's `--env`, for `mpirun -x NAME` to forward to every rank.
        for (k, v) in &opts.extra_env {
            spec.env.insert(k.clone(), v.clone());
        }
        spec.command = driver.to_vec();
    } else if multi {
        // The image's own entrypoint, named so the plan shows what a worker runs: with no
        // command, sl-entrypoint starts sshd on SL_SSHD_LISTEN:SL_SSHD_PORT for the head's
        // mpirun (which starts the ranks through it) and waits for `spark-launch stop`.
        spec.entrypoint = Some(vec![ENTRYPOINT.to_string()]);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, role: Role, addr: &str, subnet: &str, hca: &str) -> TestNode {
        TestNode {
            name: NodeName::new(name).unwrap(),
            role,
            hostname: name.into(),
            addr: addr.into(),
            subnet: Some(serde_json::from_value(serde_json::json!(subnet)).unwrap()),
            gpus: 1,
            env: BTreeMap::from([
                ("NCCL_IB_HCA".to_string(), hca.to_string()),
                ("NCCL_SOCKET_IFNAME".to_string(), "enp1s0f1np1".to_string()),
                (
                    "OMPI_MCA_btl_tcp_if_include".to_string(),
                    "enp1s0f1np1".to_string(),
                ),
                ("VLLM_HOST_IP".to_string(), addr.to_string()),
            ]),
            hcas: hca.split(',').map(str::to_string).collect(),
            arch: Some("aarch64".into()),
            has_infiniband: true,
            infiniband_unrecorded: false,
            no_verbs: None,
        }
    }

    fn pair() -> Vec<TestNode> {
        vec![
            node(
                "spark-a",
                Role::Head,
                "192.168.177.11",
                "192.168.177.0/24",
                "rocep1s0f1,roceP2p1s0f1",
            ),
            node(
                "spark-b",
                Role::Worker,
                "192.168.177.12",
                "192.168.177.0/24",
                "roceP2p1s0f0,rocep1s0f0",
            ),
        ]
    }

    fn opts() -> NcclTestOptions {
        NcclTestOptions::new(JobName::new("nccl-test").unwrap())
    }

    #[test]
    fn a_worker_without_usable_infiniband_devices_is_refused_unless_tcp_is_allowed() {
        let mut nodes = pair();
        nodes[1].has_infiniband = false;
        nodes[1].no_verbs = Some(NoVerbs {
            node: nodes[1].name.clone(),
            devices: vec!["rocep1s0f0".into()],
            seen: "is missing".into(),
        });
        let err = plan(
            &nodes,
            None,
            &opts(),
            &JobSshKeys::placeholder(),
            Vec::new(),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("spark-b: RDMA device rocep1s0f0 is ACTIVE"),
            "{text}"
        );
        assert!(text.contains("sudo modprobe ib_uverbs"), "{text}");
        let mut o = opts();
        o.allow_tcp = true;
        let p = plan(&nodes, None, &o, &JobSshKeys::placeholder(), Vec::new()).unwrap();
        assert!(p.notes[0].contains("NCCL will use TCP sockets on every node"));
        for part in &p.plan.nodes {
            let Launch::Container(c) = &part.launch else {
                panic!("a container")
            };
            assert_eq!(c.env[IB_DISABLE], "1");
        }
        let Launch::Container(worker) = &p.plan.nodes[1].launch else {
            panic!("a container")
        };
        assert!(worker.devices.is_empty());
        assert!(p.runs[0].argv.iter().any(|a| a == "NCCL_IB_DISABLE=1"));
    }

    #[test]
    fn operation_names_are_forgiving() {
        assert_eq!("all_gather".parse(), Ok(NcclOp::AllGather));
        assert_eq!("all_gather_perf".parse(), Ok(NcclOp::AllGather));
        assert_eq!("allreduce".parse(), Ok(NcclOp::AllReduce));
        assert_eq!("Reduce-Scatter".parse(), Ok(NcclOp::ReduceScatter));
        assert!(
            "allgatherv"
                .parse::<NcclOp>()
                .unwrap_err()
                .contains("all_gather")
        );
    }

    #[test]
    fn sizes_read_and_print_as_nccl_tests_takes_them() {
        assert_eq!(parse_bytes("8"), Ok(8));
        assert_eq!(parse_bytes("64K"), Ok(65536));
        assert_eq!(parse_bytes("4G"), Ok(4 << 30));
        assert!(parse_bytes("4GB").is_err());
        assert_eq!(format_bytes(4 << 30), "4G");
        assert_eq!(format_bytes(1 << 20), "1M");
        assert_eq!(format_bytes(1000), "1000");
    }

    #[test]
    fn each_node_is_its_own_app_context_with_its_own_names() {
        let argv = mpirun_argv(
            &pair(),
            "/opt/nccl-tests/build/all_gather_perf",
            &test_args(&opts()),
            &opts(),
            CONTAINER_HOSTFILE,
        );
        let colon = argv.iter().position(|a| a == ":").unwrap();
        let (a, b) = argv.split_at(colon);
        assert!(a.contains(&"NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1".to_string()));
        assert!(b.contains(&"NCCL_IB_HCA=roceP2p1s0f0,rocep1s0f0".to_string()));
        assert!(a.contains(&"192.168.177.11:1".to_string()));
        assert!(b.contains(&"192.168.177.12:1".to_string()));
        // Open MPI's own variables become subnets, the same on every node.
        assert!(!argv.iter().any(|x| x.starts_with("OMPI_MCA_")));
        assert!(
            argv.windows(3)
                .any(|w| w[1] == "oob_tcp_if_include" && w[2] == "192.168.177.0/24")
        );
        assert!(!argv.iter().any(|x| x.starts_with("VLLM_HOST_IP")));
        assert!(argv.iter().filter(|x| *x == "NCCL_DEBUG=INFO").count() == 2);
        assert!(
            argv.windows(2)
                .any(|w| w[0] == "plm_rsh_args" && w[1] == crate::workload::job_ssh::rsh_args(2233))
        );
    }

    #[test]
    fn the_docker_plan_starts_every_node_waits_for_the_head_and_stops() {
        let p = plan(
            &pair(),
            Some(Topology::Direct),
            &opts(),
            &JobSshKeys::placeholder(),
            Vec::new(),
        )
        .unwrap();
        let titles: Vec<&str> = p
            .plan
            .steps
            .iter()
            .map(|s| match s {
                Step::EnsureImage(_) => "ensure-image",
                Step::Start(_) => "start",
                Step::WaitExit(_) => "wait-exit",
                Step::Stop(_) => "stop",
                _ => "other",
            })
            .collect();
        assert_eq!(titles, vec!["ensure-image", "start", "wait-exit", "stop"]);
        let Launch::Container(head) = &p.plan.nodes[0].launch else {
            panic!()
        };
        let Launch::Container(worker) = &p.plan.nodes[1].launch else {
            panic!()
        };
        assert_eq!(head.command[0], "sh");
        assert!(head.command[2].contains("sl-wait-ssh 120 192.168.177.12"));
        assert!(worker.command.is_empty());
        // What the worker runs is in the plan: the entrypoint, which starts its sshd.
        assert_eq!(worker.entrypoint, Some(vec![ENTRYPOINT.to_string()]));
        assert_eq!(head.entrypoint, None);
        assert_eq!(worker.env["SL_SSHD_LISTEN"], "192.168.177.12");
        assert_eq!(
            worker.env["SL_PEERS"],
            "spark-a=192.168.177.11 spark-b=192.168.177.12"
        );
        assert!(worker.mounts.iter().all(|m| m.read_only));
        // The job's own identity: nothing of ~/.ssh or /etc/ssh mounted, the client key in
        // the head's container only.
        for c in [head, worker] {
            assert!(
                c.mounts
                    .iter()
                    .all(|m| !m.source.contains(".ssh") && !m.source.starts_with("/etc/ssh")),
                "{:?}",
                c.mounts
            );
        }
        let files = |c: &ContainerSpec| -> Vec<String> {
            c.secret_files.iter().map(|f| f.path.clone()).collect()
        };
        use crate::workload::job_ssh::{CLIENT_KEY_FILE, HOST_KEY_FILE};
        assert_eq!(files(head), vec![HOST_KEY_FILE, CLIENT_KEY_FILE]);
        assert_eq!(files(worker), vec![HOST_KEY_FILE]);
        assert_eq!(
            p.hostfile,
            "192.168.177.11 slots=1\n192.168.177.12 slots=1\n"
        );
    }

    #[test]
    fn the_host_plan_runs_the_driver_as_a_process_on_the_head_only() {
        let mut o = opts();
        o.runtime = RuntimeKind::Host;
        o.as_root = false;
        let p = plan(&pair(), None, &o, &JobSshKeys::placeholder(), Vec::new()).unwrap();
        assert_eq!(p.plan.nodes.len(), 1);
        assert!(matches!(p.plan.nodes[0].launch, Launch::Process(_)));
        assert!(!p.driver.contains("sl-wait-ssh"));
        assert!(!p.runs[0].argv.contains(&"--allow-run-as-root".to_string()));
        assert!(!p.runs[0].argv.contains(&"plm_rsh_args".to_string()));
        assert_eq!(p.hostfile_path, "/tmp/sl-nccl-test.hostfile");
    }

    #[test]
    fn impossible_options_are_refused_before_anything_runs() {
        let mut o = opts();
        o.min_bytes = 1 << 30;
        o.max_bytes = 8;
        assert!(matches!(
            plan(&pair(), None, &o, &JobSshKeys::placeholder(), Vec::new()),
            Err(NcclTestError::SizeOrder { .. })
        ));
        let mut nodes = pair();
        nodes[1].addr = nodes[0].addr.clone();
        assert!(matches!(
            plan(
                &nodes,
                None,
                &opts(),
                &JobSshKeys::placeholder(),
                Vec::new()
            ),
            Err(NcclTestError::SameAddress(..))
        ));
        nodes[1].addr.clear();
        assert!(matches!(
            plan(
                &nodes,
                None,
                &opts(),
                &JobSshKeys::placeholder(),
                Vec::new()
            ),
            Err(NcclTestError::NoAddress { .. })
        ));
    }

    #[test]
    fn the_launch_check_runs_hostname_through_the_same_contexts() {
        let mut o = opts();
        o.launch_check = true;
        let p = plan(&pair(), None, &o, &JobSshKeys::placeholder(), Vec::new()).unwrap();
        assert_eq!(p.runs.len(), 1);
        assert_eq!(p.runs[0].op, None);
        let argv = &p.runs[0].argv;
        assert_eq!(argv.iter().filter(|a| *a == "hostname").count(), 2);
        assert!(argv.contains(&"NCCL_IB_HCA=roceP2p1s0f0,rocep1s0f0".to_string()));
        assert!(p.driver.contains("sl-wait-ssh"));
    }

    #[test]
    fn the_driver_marks_every_exit_status_and_fails_when_any_run_failed() {
        let p = plan(
            &pair(),
            None,
            &opts(),
            &JobSshKeys::placeholder(),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(p.driver.matches(EXIT_MARKER).count(), 2);
        assert!(p.driver.ends_with("exit $status\n"));
        assert!(
            p.driver
                .contains("cat > /etc/spark-launch/hostfile <<'SL_HOSTFILE'")
        );
    }
}
