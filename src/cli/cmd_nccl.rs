//! `spark-launch nccl-build` and `nccl-test`: flags and glue. The plans come from
//! `workload::nccl_build` / `workload::nccl_test`, the verdict from `report::nccl`; the
//! executor (`apply`) and the image build (`runtime::build`) carry them out.

use std::collections::BTreeMap;

use super::args::{TargetArgs, read_snapshots, resolve};
use super::launch::{
    LaunchArgs, NodeArgs, engine_targets, local_node_name, node_targets,
    plan_text as plan_text_of_job,
};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::derive::{self, NodeInput};
use crate::node::NodeName;
use crate::node::Role;
use crate::plan::{JobName, RuntimeKind};
use crate::probe;
use crate::report::nccl::{self, Analysis, ExpectedHcas, Status};
use crate::runtime::NodeTarget;
use crate::workload::nccl_build::{self, BuildOptions, CudaArch};
use crate::workload::nccl_test::{
    self, NcclOp, NcclTestOptions, NcclTestPlan, TestNode, parse_bytes,
};

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Build for this machine only (no inventory, no SSH).
    #[arg(long, conflicts_with = "snapshots")]
    pub local: bool,

    /// The NCCL tag (or branch) to build.
    #[arg(long, value_name = "REF", default_value = nccl_build::DEFAULT_NCCL_REF)]
    pub nccl_ref: String,

    /// GPU architectures to compile for (repeat or comma-separate: sm_121, sm_120, sm_90)
    /// [default: sm_121 on arm64 (GB10), sm_120 on amd64].
    #[arg(long = "cuda-arch", value_name = "SM", value_delimiter = ',')]
    pub cuda_arch: Vec<CudaArch>,

    /// Also build the mesh net plugin for direct-cabled meshes (one subnet per cable). NCCL
    /// 2.30 and later route 3-node rings natively: leave it off there.
    #[arg(long)]
    pub mesh_plugin: bool,

    /// The nccl-tests tag to build [default: the Dockerfile's, v2.19.6].
    #[arg(long, value_name = "REF")]
    pub nccl_tests_ref: Option<String>,

    /// The CUDA devel base image [default: the Dockerfile's].
    #[arg(long, value_name = "IMAGE")]
    pub cuda_devel_image: Option<String>,

    /// The CUDA runtime base image [default: the Dockerfile's].
    #[arg(long, value_name = "IMAGE")]
    pub cuda_runtime_image: Option<String>,

    /// Parallel compile jobs (0 = every core).
    #[arg(long, default_value_t = 0)]
    pub jobs: u32,

    /// Tag the image with this name instead of the default
    /// (`spark-launch/nccl-tests:nccl-<ref>-<sm>-<arch>`).
    #[arg(long, value_name = "IMAGE")]
    pub tag: Option<String>,

    /// Print the builds (where, tag, build arguments) and stop.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub engines: NodeArgs,
}

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Run on this machine only: one node, its GPUs, no SSH (a workstation, a GPU server).
    #[arg(long, conflicts_with = "snapshots")]
    pub local: bool,

    /// Operations to measure (repeat or comma-separate) [default: all_gather, all_reduce].
    #[arg(long = "op", value_delimiter = ',', value_name = "OP")]
    pub ops: Vec<NcclOp>,

    /// Smallest message size (nccl-tests' -b; K/M/G suffixes).
    #[arg(short = 'b', long = "min-bytes", default_value = "8", value_parser = parse_bytes)]
    pub min_bytes: u64,

    /// Largest message size (nccl-tests' -e). The default stays within a 128 GB
    /// unified-memory box.
    #[arg(short = 'e', long = "max-bytes", default_value = "4G", value_parser = parse_bytes)]
    pub max_bytes: u64,

    /// Size factor between steps (nccl-tests' -f).
    #[arg(short = 'f', long = "factor", default_value_t = 2)]
    pub factor: u64,

    /// Timed iterations per size (nccl-tests' -n).
    #[arg(short = 'n', long, default_value_t = 20)]
    pub iters: u32,

    /// Warm-up iterations per size (nccl-tests' -w) [default: nccl-tests' own].
    #[arg(short = 'w', long)]
    pub warmup: Option<u32>,

    /// GPUs per node, one rank each [default: the GPUs the probe found on each node, or 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus_per_node: Option<u32>,

    /// The nccl-tests image [default: `nccl-build`'s tag for each node's architecture].
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// Where the *_perf binaries are [default: /opt/nccl-tests/build in the image; with
    /// --runtime host: the same path on every node].
    #[arg(long, value_name = "DIR")]
    pub tests_dir: Option<String>,

    /// The mpirun to use on the head.
    #[arg(long, default_value = "mpirun", value_name = "PATH")]
    pub mpirun: String,

    /// An extra variable for every rank (repeat), e.g. NCCL_ALGO=Ring.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,

    /// The SSH user's ~/.ssh on the nodes (mounted read-only into the containers).
    #[arg(long, value_name = "DIR")]
    pub ssh_dir: Option<String>,

    /// Where the nodes' sshd keeps its host keys, if not /etc/ssh: DIR for every node, or
    /// NAME=DIR for one (repeat). They are mounted read-only so the containers' sshd presents
    /// the host keys `spark-launch trust` pinned.
    #[arg(long = "host-keys", value_name = "[NAME=]DIR")]
    pub host_keys: Vec<String>,

    /// The job's name (containers are sl-<job>-<node>).
    #[arg(long, default_value = "nccl-test")]
    pub job: JobName,

    /// Only check the launch path (containers, sshd, keys, hostfile): run `mpirun hostname`
    /// on every rank instead of the tests; every node must answer.
    #[arg(long)]
    pub launch_check: bool,

    /// Also write the tests' raw output (what mpirun printed, NCCL_DEBUG lines included) to
    /// this file, e.g. for `spark-launch report nccl` later or a bug report.
    #[arg(long, value_name = "FILE")]
    pub save_log: Option<std::path::PathBuf>,

    /// How long the whole test may run, in seconds.
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    pub timeout: u64,

    #[command(flatten)]
    pub launch: LaunchArgs,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))?;
    let ok = !k.is_empty()
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !k.starts_with(|c: char| c.is_ascii_digit());
    if !ok {
        return Err(format!("{k:?} is not a variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

pub async fn build(args: BuildArgs, ctx: &Context) -> CmdResult {
    let (nodes, targets) = build_nodes(&args, ctx).await?;
    let opts = BuildOptions {
        nccl_ref: Some(args.nccl_ref.clone()),
        cuda_archs: args.cuda_arch.clone(),
        mesh_plugin: args.mesh_plugin,
        nccl_tests_ref: args.nccl_tests_ref.clone(),
        cuda_devel_image: args.cuda_devel_image.clone(),
        cuda_runtime_image: args.cuda_runtime_image.clone(),
        jobs: args.jobs,
        tag: args.tag.clone(),
    };
    let plan = nccl_build::build_plan(&nodes, &opts).invalid()?;
    if args.dry_run {
        if ctx.json {
            print_json(&plan)?;
        } else {
            print_out(&build_text(&plan));
        }
        return Ok(Outcome::Success);
    }
    let Some((targets, pool)) = targets else {
        return Err(anyhow::anyhow!(
            "snapshots stand in for nodes only to plan: add --dry-run (a build needs the nodes' engines)"
        ))
        .invalid();
    };
    let r = super::cmd_nccl_exec::build(&plan, targets, ctx).await;
    if let Some(pool) = pool {
        pool.close().await;
    }
    r
}

type BuildTargets = Option<(Vec<NodeTarget>, Option<crate::ssh::Pool>)>;

/// The nodes to build for, `(name, uname -m)` head first, and how to reach their engines
/// (`None` for snapshots, which only plan).
async fn build_nodes(
    args: &BuildArgs,
    ctx: &Context,
) -> Result<(Vec<(NodeName, Option<String>)>, BuildTargets), CmdError> {
    if args.target.uses_snapshots() {
        let inputs = read_snapshots(&args.target.snapshots).invalid()?;
        let nodes = inputs.into_iter().map(|n| (n.name, n.facts.arch)).collect();
        return Ok((nodes, None));
    }
    if let Some(t) = engine_targets(&args.engines)? {
        // Engines given by socket run on this machine: they build for its architecture.
        let (_, facts) = local_node().await?;
        let nodes = t
            .iter()
            .map(|x| (x.name.clone(), facts.arch.clone()))
            .collect();
        return Ok((nodes, Some((t, None))));
    }
    if args.local {
        let (name, facts) = local_node().await?;
        let t = vec![NodeTarget::local(name.clone(), Role::Head)];
        return Ok((vec![(name, facts.arch)], Some((t, None))));
    }
    let cluster = resolve(&args.target, ctx).await?;
    let nodes = cluster
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.facts.arch.clone()))
        .collect();
    let targets = match &cluster.pool {
        Some(pool) => node_targets(pool),
        None => return Err(no_targets()).invalid(),
    };
    Ok((nodes, Some((targets, cluster.pool))))
}

fn build_text(plan: &nccl_build::BuildPlan) -> String {
    let mut out = String::new();
    for b in &plan.builds {
        out.push_str(&format!(
            "build {} ({}) on {}\n",
            b.tag, b.platform, b.build_on
        ));
        for (k, v) in &b.build_args {
            out.push_str(&format!("  --build-arg {k}={v}\n"));
        }
        if b.push_to.is_empty() {
            out.push_str("  no other node of this architecture\n");
        } else {
            out.push_str(&format!(
                "  then image push to {}\n",
                b.push_to
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out
}

fn no_targets() -> anyhow::Error {
    anyhow::anyhow!(
        "no nodes given: pass `--local` for this machine, `--snapshot NAME=DIR` once per node (the first is the head) with --dry-run, `--hosts`, or add nodes to the cluster file"
    )
}

/// This machine as the only node, probed live; named as the executor names it.
async fn local_node() -> Result<(NodeName, probe::NodeFacts), CmdError> {
    let facts = super::args::local_facts().await?;
    Ok((local_node_name(), facts))
}

/// The nodes of a test, head first, with facts: snapshots (plans only), this machine, or the
/// live nodes of `--hosts` / the cluster file (with their SSH connections, kept for the run).
async fn test_inputs(
    args: &TestArgs,
    ctx: &Context,
) -> Result<(Vec<NodeInput>, Option<crate::ssh::Pool>), CmdError> {
    if args.target.uses_snapshots() {
        if !args.launch.dry_run {
            return Err(anyhow::anyhow!(
                "snapshots stand in for nodes only to plan: add --dry-run (a live run needs the nodes themselves)"
            ))
            .invalid();
        }
        return Ok((read_snapshots(&args.target.snapshots).invalid()?, None));
    }
    if args.local {
        let (name, facts) = local_node().await?;
        return Ok((vec![NodeInput { name, facts }], None));
    }
    let cluster = resolve(&args.target, ctx).await?;
    Ok((cluster.nodes, cluster.pool))
}

/// How the executor reaches each node: `--engine NAME=SOCKET` when given (names must be the
/// test's nodes), else the SSH connections the facts came through, else this machine.
fn exec_targets(
    args: &TestArgs,
    plan: &NcclTestPlan,
    pool: Option<&crate::ssh::Pool>,
) -> Result<Vec<NodeTarget>, CmdError> {
    if let Some(t) = engine_targets(&args.launch.nodes)? {
        let missing: Vec<&str> = plan
            .plan
            .nodes
            .iter()
            .filter(|p| !t.iter().any(|x| x.name == p.node))
            .map(|p| p.node.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(anyhow::anyhow!(
                "--engine names no engine for {}: give one `--engine NAME=SOCKET` per node of the test",
                missing.join(", ")
            ))
            .invalid();
        }
        return Ok(t);
    }
    if let Some(pool) = pool {
        return Ok(node_targets(pool));
    }
    Ok(vec![NodeTarget::local(
        plan.nodes[0].name.clone(),
        Role::Head,
    )])
}

/// Builds the plan from the arguments (facts, derive, workload). Shared by dry-run and run.
pub(super) async fn test_plan(
    args: &TestArgs,
    ctx: &Context,
) -> Result<(NcclTestPlan, Option<crate::ssh::Pool>), CmdError> {
    let (inputs, pool) = test_inputs(args, ctx).await?;
    let cluster = match derive::derive(&inputs) {
        Ok(c) => Some(c),
        // One node needs no fabric: its ranks talk over NVLink/PCIe/shared memory.
        Err(refusal) if inputs.len() == 1 => {
            ctx.reporter.warn(&format!(
                "{}: no fabric environment derived ({}); a single node needs none",
                inputs[0].name,
                refusal
                    .violations
                    .first()
                    .map(|v| v.problem.clone())
                    .unwrap_or_default()
            ));
            None
        }
        Err(refusal) => return Err(refusal).invalid(),
    };
    if let Some(c) = &cluster {
        for n in &c.nodes {
            for w in &n.warnings {
                ctx.reporter.warn(&format!("{}: {w}", n.name));
            }
        }
    }
    let ssh_dir = args.ssh_dir.clone().unwrap_or_else(|| {
        std::env::var("HOME")
            .map(|h| format!("{}/.ssh", h.trim_end_matches('/')))
            .unwrap_or_else(|_| "/root/.ssh".into())
    });
    let mut nodes: Vec<TestNode> =
        nccl_test::test_nodes(&inputs, cluster.as_ref(), args.gpus_per_node, &ssh_dir);
    for h in &args.host_keys {
        match h.split_once('=') {
            Some((name, dir)) => {
                let Some(n) = nodes.iter_mut().find(|n| n.name.as_str() == name) else {
                    return Err(anyhow::anyhow!(
                        "--host-keys names no node of the test: {name}"
                    ))
                    .invalid();
                };
                n.host_keys_dir = dir.to_string();
            }
            None => nodes.iter_mut().for_each(|n| n.host_keys_dir = h.clone()),
        }
    }
    let mut opts = NcclTestOptions::new(args.job.clone());
    if !args.ops.is_empty() {
        opts.ops = args.ops.clone();
    }
    opts.min_bytes = args.min_bytes;
    opts.max_bytes = args.max_bytes;
    opts.factor = args.factor;
    opts.iters = args.iters;
    opts.warmup = args.warmup;
    opts.runtime = args.launch.runtime;
    opts.image = args.image.clone();
    if let Some(d) = &args.tests_dir {
        opts.tests_dir = d.clone();
    }
    opts.mpirun = args.mpirun.clone();
    opts.extra_env = args.env.iter().cloned().collect::<BTreeMap<_, _>>();
    opts.timeout_s = args.timeout;
    opts.launch_check = args.launch_check;
    opts.as_root = match args.launch.runtime {
        RuntimeKind::Docker => true,
        // Open MPI refuses root unless told; only the local node's user is known here.
        RuntimeKind::Host => args.local && nix::unistd::geteuid().is_root(),
    };
    let mut plan =
        nccl_test::plan(&nodes, cluster.as_ref().map(|c| c.topology), &opts).invalid()?;
    // --gpus and --ulimit of the shared launch flags.
    args.launch.adjust(&mut plan.plan);
    Ok((plan, pool))
}

pub async fn test(args: TestArgs, ctx: &Context) -> CmdResult {
    let (plan, pool) = test_plan(&args, ctx).await?;
    if args.launch.dry_run {
        if ctx.json {
            print_json(&plan)?;
        } else {
            print_out(&plan_text(&plan));
        }
        if let Some(pool) = pool {
            pool.close().await;
        }
        return Ok(Outcome::Success);
    }
    let targets = exec_targets(&args, &plan, pool.as_ref())?;
    let captured = super::cmd_nccl_exec::run_test(&plan, targets, args.launch.keep, ctx).await;
    if let Some(pool) = pool {
        pool.close().await;
    }
    let captured = captured?;
    if let Some(path) = &args.save_log {
        std::fs::write(path, &captured.log)
            .map_err(|e| anyhow::anyhow!("cannot write the log to {}: {e}", path.display()))?;
    }
    if args.launch_check {
        return launch_check_result(&plan, &captured.log, ctx);
    }
    let analysis = analyse(&plan, &captured.log, captured.exit_code);
    if ctx.json {
        print_json(&analysis)?;
    } else {
        print_out(&nccl::render::text(&analysis));
    }
    Ok(if analysis.status == Status::Fail {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

/// `--launch-check`: every node must have answered `mpirun hostname` with each of its ranks.
fn launch_check_result(plan: &NcclTestPlan, log: &str, ctx: &Context) -> CmdResult {
    let expected: Vec<(String, String, u32)> = plan
        .nodes
        .iter()
        .map(|n| (n.name.to_string(), n.hostname.clone(), n.gpus))
        .collect();
    let check = nccl::launch::launch_check(log, &expected);
    if ctx.json {
        print_json(&check)?;
    } else {
        let mut out = String::new();
        for n in &check.nodes {
            let mark = if n.answered >= n.expected {
                "✓"
            } else {
                "✗"
            };
            out.push_str(&format!(
                "{mark} {} ({}): {} of {} rank{} answered\n",
                n.node,
                n.hostname,
                n.answered,
                n.expected,
                if n.expected == 1 { "" } else { "s" }
            ));
        }
        for u in &check.unexpected {
            out.push_str(&format!("? an unexpected host answered: {u}\n"));
        }
        match &check.cause {
            None => out.push_str("✓ mpirun reaches every node through the job's launch path\n"),
            Some(c) => {
                out.push_str(&format!("✗ FAILED: {}\n", c.problem));
                if let Some(f) = &c.fix {
                    out.push_str(&format!("  fix: {f}\n"));
                }
            }
        }
        print_out(&out);
    }
    Ok(if check.ok {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// The verdict on what the driver printed, with the derived HCAs of every node as the
/// expectation.
pub(super) fn analyse(plan: &NcclTestPlan, log: &str, exit_code: Option<i32>) -> Analysis {
    let mut expected = ExpectedHcas::new();
    for n in &plan.nodes {
        if !n.hcas.is_empty() {
            expected.insert(n.hostname.clone(), n.hcas.clone());
        }
    }
    let ctx = nccl::Context {
        expected_hcas: expected,
        topology: plan.topology,
        test_hint: None,
        exit_code,
    };
    nccl::analyse(log, &ctx)
}

/// `--dry-run` as text: where each node is reached and with which devices, the job's
/// containers (or the driver process) and steps, the hostfile, each mpirun line.
pub(super) fn plan_text(p: &NcclTestPlan) -> String {
    let ranks: u32 = p.nodes.iter().map(|n| n.gpus).sum();
    let mut out = format!(
        "nccl-test: {} node{}, {} rank{}{}\n",
        p.nodes.len(),
        if p.nodes.len() == 1 { "" } else { "s" },
        ranks,
        if ranks == 1 { "" } else { "s" },
        p.topology
            .map(|t| format!(", topology {t}"))
            .unwrap_or_default()
    );
    for n in &p.nodes {
        out.push_str(&format!(
            "  {} ({}) at {}, {} GPU{}{}\n",
            n.name,
            n.role,
            n.addr,
            n.gpus,
            if n.gpus == 1 { "" } else { "s" },
            if n.hcas.is_empty() {
                String::new()
            } else {
                format!(", RDMA {}", n.hcas.join(","))
            }
        ));
    }
    out.push('\n');
    // The head's command is the driver script: shown below as its hostfile and mpirun lines,
    // one app context per line, rather than as one long quoted string.
    let mut shown = p.plan.clone();
    for part in &mut shown.nodes {
        let command = match &mut part.launch {
            crate::plan::Launch::Container(c) => &mut c.command,
            crate::plan::Launch::Process(pr) => &mut pr.command,
        };
        if command.len() == 3 && command[2] == p.driver {
            command[2] = "<the driver: hostfile and mpirun lines below>".into();
        }
    }
    out.push_str(&plan_text_of_job(&shown));
    out.push_str(&format!("\nhostfile {}:\n", p.hostfile_path));
    for l in p.hostfile.lines() {
        out.push_str(&format!("  {l}\n"));
    }
    for r in &p.runs {
        out.push_str(&format!(
            "\n{} on {}:\n{}\n",
            r.test,
            p.nodes[0].name,
            r.pretty()
        ));
    }
    out
}
