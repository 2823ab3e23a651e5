//! What every launching command shares (nccl-test, vllm, trtllm, up, run): the runtime and
//! GPU flags, `--keep`/`--no-push`/`--concurrency`/`--dry-run`, which nodes to reach
//! (`--engine NAME=SOCKET`, else `--hosts` or the cluster file over SSH, else this machine),
//! Ctrl-C handling, and one function that
//! runs a `JobPlan` through the executor and turns its outcome into an exit code. Glue only.
//!
//! A launching command flattens [`LaunchArgs`], builds its plan (pure), then calls
//! [`run_plan`]. With `--dry-run` it prints the plan instead ([`print_plan`]).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::args::{TargetArgs, configured_nodes, connect, local_facts};
use super::{CmdError, Context, Invalid, print_json, print_out};
use crate::apply::{ApplyError, ApplyOptions, PushPolicy, execute};
use crate::node::{NodeName, Role};
use crate::plan::{Gpus, JobPlan, Launch, RuntimeKind, Step, Ulimit};
use crate::progress::{NullReporter, Reporter};
use crate::runtime::remote::SshNode;
use crate::runtime::{Cluster, EngineEndpoint, NodeTarget, Reach};
use crate::ssh::Pool;

/// `NAME=unix:///path/to/docker.sock` (or `NAME=local` for this machine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineArg {
    pub name: NodeName,
    /// `None`: this machine (local engine and local processes).
    pub endpoint: Option<EngineEndpoint>,
}

impl std::str::FromStr for EngineArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, ep) = s.split_once('=').ok_or_else(|| {
            format!("expected NAME=unix:///path/docker.sock or NAME=local, got {s:?}")
        })?;
        let name = NodeName::new(name).map_err(|e| e.to_string())?;
        let endpoint = if ep == "local" {
            None
        } else {
            Some(EngineEndpoint::parse(ep)?)
        };
        Ok(EngineArg { name, endpoint })
    }
}

/// Which nodes a job command reaches.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct NodeArgs {
    /// Reach a node through a Docker socket on this machine (repeat; the first is the head):
    /// NAME=unix:///path/docker.sock, or NAME=local for this machine. Default: this machine.
    #[arg(long = "engine", value_name = "NAME=SOCKET")]
    pub engines: Vec<EngineArg>,
}

/// The flags of every launching command.
#[derive(Clone, Debug, clap::Args)]
pub struct LaunchArgs {
    /// How the job runs on each node: containers, or plain processes (no Docker needed).
    #[arg(long, value_enum, default_value_t = RuntimeKind::Docker)]
    pub runtime: RuntimeKind,

    /// GPUs per container: none, all, or a count.
    #[arg(long, value_name = "none|all|N")]
    pub gpus: Option<Gpus>,

    /// Override a container ulimit (repeat): memlock=-1, nofile=65536:65536.
    #[arg(long = "ulimit", value_name = "NAME=SOFT[:HARD]")]
    pub ulimits: Vec<Ulimit>,

    /// After a failure or Ctrl-C, leave what started in place (for debugging).
    #[arg(long)]
    pub keep: bool,

    /// Refuse to start when a node lacks the image, instead of pushing it there.
    #[arg(long)]
    pub no_push: bool,

    /// Nodes worked on at once (0 = all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub concurrency: usize,

    /// Print the plan (per node: container spec or process, and the steps) and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub nodes: NodeArgs,
}

impl LaunchArgs {
    pub fn apply_options(&self) -> ApplyOptions {
        ApplyOptions {
            keep: self.keep,
            concurrency: self.concurrency,
            push: if self.no_push {
                PushPolicy::Refuse
            } else {
                PushPolicy::Push
            },
            ..ApplyOptions::default()
        }
    }

    /// Applies `--gpus` and `--ulimit` to every container of the plan.
    pub fn adjust(&self, plan: &mut JobPlan) {
        for part in &mut plan.nodes {
            if let Launch::Container(spec) = &mut part.launch {
                if let Some(g) = self.gpus {
                    spec.gpus = g;
                }
                spec.override_ulimits(&self.ulimits);
            }
        }
    }
}

/// This machine's name as a node name (its hostname, or `local`).
pub fn local_node_name() -> NodeName {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .and_then(|h| NodeName::new(h).ok())
        .unwrap_or_else(|| NodeName::new("local").expect("a constant, valid node name"))
}

/// The nodes given with `--engine` (head first), or `None` when there were none.
pub fn engine_targets(args: &NodeArgs) -> Result<Option<Vec<NodeTarget>>, CmdError> {
    if args.engines.is_empty() {
        return Ok(None);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, e) in args.engines.iter().enumerate() {
        if !seen.insert(e.name.clone()) {
            return Err(CmdError {
                code: 2,
                error: anyhow::anyhow!("node {} is given twice with --engine", e.name),
            });
        }
        let role = if i == 0 { Role::Head } else { Role::Worker };
        out.push(match &e.endpoint {
            None => NodeTarget::local(e.name.clone(), role),
            Some(ep) => NodeTarget::engine_only(e.name.clone(), role, ep.clone()),
        });
    }
    Ok(Some(out))
}

/// The runtime's view of connected nodes (head first): the local node runs here, the others
/// through their SSH sessions (Docker socket forwarded, scripts over SSH). For workloads that
/// resolved their nodes with `args::resolve`.
pub fn node_targets(pool: &Pool) -> Vec<NodeTarget> {
    pool.handles()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let role = if i == 0 { Role::Head } else { Role::Worker };
            if h.is_local() {
                NodeTarget::local(h.name().clone(), role)
            } else {
                NodeTarget {
                    name: h.name().clone(),
                    role,
                    reach: Reach::Remote(Arc::new(SshNode::new(h.clone()))),
                    docker_socket: None,
                }
            }
        })
        .collect()
}

/// The live nodes of a job command: `--engine` sockets if given; else `--hosts` or the cluster
/// file (connected over SSH, this machine marked local); else, with no cluster file, this
/// machine alone.
pub async fn resolve_targets(
    nodes: &NodeArgs,
    target: &TargetArgs,
    ctx: &Context,
) -> Result<Vec<NodeTarget>, CmdError> {
    if let Some(t) = engine_targets(nodes)? {
        if target.uses_hosts() || !target.nodes.is_empty() {
            return Err(anyhow::anyhow!(
                "--engine cannot be combined with --hosts or --nodes"
            ))
            .invalid();
        }
        return Ok(t);
    }
    if target.uses_snapshots() {
        return Err(anyhow::anyhow!(
            "--snapshot stands in for nodes only with --dry-run; to act on live nodes use the cluster file, --hosts or --engine"
        ))
        .invalid();
    }
    let no_cluster_file = !target.uses_hosts()
        && target.nodes.is_empty()
        && crate::inventory::load(&ctx.cluster_file)
            .map(|inv| inv.is_empty())
            .unwrap_or_else(|e| matches!(e, crate::inventory::InventoryError::Missing { .. }));
    if no_cluster_file {
        return Ok(vec![NodeTarget::local(local_node_name(), Role::Head)]);
    }
    let configured = configured_nodes(target, &ctx.cluster_file)?;
    let local = local_facts().await?;
    let pool = connect(&configured, &local, ctx).await?;
    Ok(node_targets(&pool))
}

/// A token fired by Ctrl-C (or SIGTERM/SIGHUP): the executor then stops and cleans up. A
/// second Ctrl-C exits at once.
pub fn cancel_on_signals(reporter: Arc<dyn Reporter>) -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
        reporter.warn("interrupted: stopping and cleaning up (Ctrl-C again to quit at once)");
        t.cancel();
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("quitting without clean-up: check with `spark-launch status`");
        std::process::exit(130);
    });
    token
}

/// Prints a plan: JSON with `--json`, otherwise per node and the steps.
pub fn print_plan(plan: &JobPlan, ctx: &Context) -> Result<(), CmdError> {
    if ctx.json {
        return print_json(plan);
    }
    if plan.is_noop() {
        print_out("nothing to do");
        return Ok(());
    }
    print_out(&plan_text(plan));
    Ok(())
}

/// A plan as text: per node its container spec or process, then the steps.
pub fn plan_text(plan: &JobPlan) -> String {
    let mut out = format!(
        "job {} ({}, runtime {:?})\n",
        plan.job, plan.workload, plan.runtime
    );
    for part in &plan.nodes {
        out.push_str(&format!("\n{} ({})\n", part.node, part.role));
        match &part.launch {
            Launch::Container(c) => {
                out.push_str(&format!("  container {}  image {}\n", c.name, c.image));
                out.push_str(&format!(
                    "  network {:?}, ipc {:?}, gpus {}\n",
                    c.network, c.ipc, c.gpus
                ));
                if let Some(ep) = &c.entrypoint {
                    out.push_str(&format!(
                        "  entrypoint {}\n",
                        crate::plan::job::shell_words(ep)
                    ));
                }
                out.push_str(&format!(
                    "  command {}\n",
                    crate::plan::job::shell_words(&c.command)
                ));
                for u in &c.ulimits {
                    out.push_str(&format!("  ulimit {}={}:{}\n", u.name, u.soft, u.hard));
                }
                for d in &c.devices {
                    out.push_str(&format!("  device {}\n", d.host));
                }
                for m in &c.mounts {
                    out.push_str(&format!(
                        "  mount {} -> {}{}\n",
                        m.source,
                        m.target,
                        if m.read_only { " (ro)" } else { "" }
                    ));
                }
                for cap in &c.cap_add {
                    out.push_str(&format!("  cap-add {cap}\n"));
                }
                for (k, v) in &c.env {
                    out.push_str(&format!("  env {k}={v}\n"));
                }
            }
            Launch::Process(p) => {
                out.push_str(&format!(
                    "  process {}: {}\n",
                    p.name,
                    crate::plan::job::shell_words(&p.command)
                ));
                for (k, v) in &p.env {
                    out.push_str(&format!("  env {k}={v}\n"));
                }
            }
        }
    }
    out.push_str("\nsteps:\n");
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!("  {}. {}\n", i + 1, s.title()));
    }
    out
}

/// Runs `plan` on `targets` through the executor with Ctrl-C handling; maps the outcome to an
/// exit code (0 ok, 1 failed, 2 refused, 130 interrupted). Returns the captures on success; a
/// caller that needs the captures of a failed run uses [`execute_plan`] and [`apply_failed`].
pub async fn run_plan(
    plan: &JobPlan,
    targets: Vec<NodeTarget>,
    options: &ApplyOptions,
    ctx: &Context,
) -> Result<crate::apply::Applied, CmdError> {
    execute_plan(plan, targets, options, ctx)
        .await
        .map_err(apply_failed)
}

/// Like [`run_plan`], but the error is the executor's own, with what was captured before the
/// failure (`ApplyError::captures`): e.g. a failed mpirun's log, to report its first cause.
pub async fn execute_plan(
    plan: &JobPlan,
    targets: Vec<NodeTarget>,
    options: &ApplyOptions,
    ctx: &Context,
) -> Result<crate::apply::Applied, ApplyError> {
    let reporter: Arc<dyn Reporter> = if ctx.json {
        Arc::new(NullReporter)
    } else {
        ctx.reporter.clone()
    };
    let cluster = Cluster::new(targets);
    let cancel = cancel_on_signals(ctx.reporter.clone());
    execute(plan, &cluster, options, reporter, cancel).await
}

/// The command error for a failed apply, with its exit code (2 refused, 130 interrupted, 1).
pub fn apply_failed(e: ApplyError) -> CmdError {
    CmdError {
        code: e.exit_code(),
        error: anyhow::Error::new(e),
    }
}

/// Fills in the nodes of a `Start` / `EnsureImage` step list for a plan whose parts are set.
pub fn start_steps(plan: &JobPlan) -> Vec<Step> {
    let nodes = plan.node_names();
    let mut steps = Vec::new();
    if plan.runtime == RuntimeKind::Docker {
        let mut images: Vec<String> = Vec::new();
        for part in &plan.nodes {
            if let Launch::Container(c) = &part.launch
                && !images.contains(&c.image)
            {
                images.push(c.image.clone());
            }
        }
        for image in images {
            let on: Vec<NodeName> = plan
                .nodes
                .iter()
                .filter(|p| matches!(&p.launch, Launch::Container(c) if c.image == image))
                .map(|p| p.node.clone())
                .collect();
            steps.push(Step::EnsureImage { image, nodes: on });
        }
    }
    steps.push(Step::Start { nodes });
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_argument_is_a_node_name_and_a_unix_socket_or_local() {
        let e: EngineArg = "n2=unix:///tmp/n2/docker.sock".parse().unwrap();
        assert_eq!(e.name.as_str(), "n2");
        assert_eq!(
            e.endpoint,
            Some(EngineEndpoint::unix("/tmp/n2/docker.sock"))
        );
        let e: EngineArg = "me=local".parse().unwrap();
        assert_eq!(e.endpoint, None);
        assert!("n2".parse::<EngineArg>().is_err());
        assert!("n2=tcp://1.2.3.4:2375".parse::<EngineArg>().is_err());
    }
}
