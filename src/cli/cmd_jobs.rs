//! `spark-launch run`, `status`, `logs` and `stop`: flags and rendering. `run` is a launching
//! command (`apply::launch`); the others find any job's work by its labels on the nodes
//! (`apply::jobs`), never touching containers spark-launch did not label.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use futures::StreamExt;
use serde::Serialize;

use super::args::{ContainerFlags, EngineFlags, LaunchFlags, NodeFlags, RuntimeFlag};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out, render};
use crate::apply::jobs;
use crate::apply::launch::LaunchCommand;
use crate::node::NodeName;
use crate::plan::spec::{EnvVar, LABEL_JOB, Mount};
use crate::plan::{JobName, RuntimeKind};
use crate::resolve::{self, Needs, Purpose, ResolvedCluster};
use crate::runtime::{Cluster, JobEntry, RuntimeError};
use crate::workload::launch::LaunchRequest;
use crate::workload::run::RunRequest;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job's name; its containers are named sl-JOB-NODE.
    #[arg(long = "job", value_name = "NAME")]
    pub job: JobName,

    /// The image to run (not needed with --runtime host).
    #[arg(long)]
    pub image: Option<String>,

    /// An environment variable for the job (repeat).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<EnvVar>,

    /// A bind mount from the node (repeat): SRC:DST or SRC:DST:ro.
    #[arg(long = "mount", value_name = "SRC:DST[:ro]")]
    pub mounts: Vec<Mount>,

    /// A device node passed into the container (repeat), e.g. /dev/infiniband.
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<String>,

    /// A TCP port the job serves on the node, shown by `status` (repeat).
    #[arg(long = "port", value_name = "PORT", value_parser = crate::workload::limits::parse_port)]
    pub ports: Vec<u16>,

    /// How the job runs on each node: containers, or plain processes (no Docker needed).
    #[arg(long, value_enum, default_value_t = RuntimeFlag::Docker)]
    pub runtime: RuntimeFlag,

    #[command(flatten)]
    pub container: ContainerFlags,

    #[command(flatten)]
    pub launch: LaunchFlags,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,

    /// The command to run on every node (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this job.
    pub job: Option<JobName>,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The job whose logs to show.
    pub job: JobName,

    /// Only this node's log (no prefixes).
    #[arg(long, value_name = "NAME")]
    pub node: Option<NodeName>,

    /// Keep printing what the job writes until it ends (or Ctrl-C).
    #[arg(short, long)]
    pub follow: bool,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["job", "all"]))]
pub struct StopArgs {
    /// The job to stop and remove on every node.
    pub job: Option<JobName>,

    /// Every job spark-launch started (only containers and processes carrying its labels).
    #[arg(long)]
    pub all: bool,

    /// Seconds between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 10, value_name = "SECONDS", value_parser = crate::workload::limits::parse_seconds)]
    pub grace: u64,

    /// Say what would be stopped and removed on each node, and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

/// `spark-launch run`: start the same command on every node as one job.
pub async fn run(args: RunArgs, ctx: &Context) -> CmdResult {
    let mut selection = args.target.selection(ctx);
    selection.engines = args.engines.engines.clone();
    let request = LaunchRequest::Run(RunRequest {
        job: args.job,
        runtime: args.runtime.into(),
        image: args.image,
        env: args
            .env
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect::<BTreeMap<_, _>>(),
        mounts: args.mounts,
        devices: args.devices,
        ports: args.ports,
        command: args.command,
        overrides: args.container.overrides(),
    });
    let launch = LaunchCommand {
        request,
        selection,
        dry_run: args.launch.dry_run,
        options: args.launch.apply_options(),
        detach: true,
    };
    super::launch::run(launch, Default::default(), ctx).await
}

/// The live nodes of a job command: `--engine`, `--hosts`, the cluster file, else this machine.
async fn live(
    target: &NodeFlags,
    engines: &EngineFlags,
    purpose: Purpose,
    ctx: &Context,
) -> Result<ResolvedCluster, CmdError> {
    let mut selection = target.selection(ctx);
    selection.engines = engines.engines.clone();
    resolve::resolve(&selection, Needs::links(purpose), &ctx.reporter)
        .await
        .map_err(super::resolve_error)
}

/// The runtime view of resolved live nodes.
fn runtime(cluster: &ResolvedCluster) -> Result<Cluster, CmdError> {
    cluster.runtime().map_err(super::resolve_error)
}

/// One row of `status --json`.
#[derive(Debug, Serialize)]
struct StatusRow {
    #[serde(flatten)]
    entry: JobEntry,
    uptime_s: Option<i64>,
    /// The NCCL the container loads (`apply::nccl::in_containers`).
    #[serde(skip_serializing_if = "Option::is_none")]
    nccl: Option<crate::libnccl::Loads>,
}

#[derive(Debug, Serialize)]
struct Unreachable {
    node: NodeName,
    error: String,
}

impl Unreachable {
    /// One per node that failed, for `--json`.
    fn list(failed: &[(NodeName, RuntimeError)]) -> Vec<Unreachable> {
        failed
            .iter()
            .map(|(node, e)| Unreachable {
                node: node.clone(),
                error: e.to_string(),
            })
            .collect()
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `spark-launch status`.
pub async fn status(args: StatusArgs, ctx: &Context) -> CmdResult {
    let resolved = live(&args.target, &args.engines, Purpose::Observe("status"), ctx).await?;
    let cluster = runtime(&resolved)?;
    let found = jobs::find(&cluster, args.job.as_ref()).await;
    let nccl = crate::apply::nccl::in_containers(&cluster, &found.entries, 0).await;
    resolved.close().await;
    let order = cluster.names();
    let rows: Vec<StatusRow> = found
        .entries
        .into_iter()
        .zip(nccl)
        .map(|(entry, nccl)| {
            let uptime_s = match (entry.state.as_str(), entry.started_at) {
                ("running", Some(t)) => Some((now() - t).max(0)),
                _ => None,
            };
            StatusRow {
                entry,
                uptime_s,
                nccl,
            }
        })
        .collect();
    for (node, e) in &found.failed {
        ctx.reporter.warn(&format!("{node}: {e}"));
    }
    if ctx.json {
        let unreachable = Unreachable::list(&found.failed);
        print_json(&serde_json::json!({ "jobs": rows, "unreachable": unreachable }))?;
    } else if rows.is_empty() {
        print_out(&match &args.job {
            Some(j) => format!("no job named {j} on {}", render::names(&order)),
            None => format!("no spark-launch jobs on {}", render::names(&order)),
        });
    } else {
        let mut table = Table::new();
        table.load_style(UTF8_BORDERS_ONLY);
        table.set_header(vec![
            "JOB", "NODE", "RUNTIME", "STATE", "IMAGE", "UPTIME", "PORTS",
        ]);
        for r in &rows {
            let e = &r.entry;
            let state = match (e.state.as_str(), e.exit_code) {
                ("running", _) => "running".to_string(),
                (s, Some(c)) => format!("{s} ({c})"),
                (s, None) => s.to_string(),
            };
            table.add_row(vec![
                e.job.clone(),
                e.node.to_string(),
                e.runtime.to_string(),
                state,
                e.image.clone(),
                r.uptime_s
                    .map(|s| crate::progress::human_duration(Duration::from_secs(s.unsigned_abs())))
                    .unwrap_or_else(|| "-".to_string()),
                render::names(&e.ports),
            ]);
        }
        print_out(&table.to_string());
        let nccl: Vec<String> = rows
            .iter()
            .filter_map(|r| Some(format!("  {}  {}", r.entry.name, r.nccl.as_ref()?)))
            .collect();
        if !nccl.is_empty() {
            print_out(&format!("NCCL the containers load:\n{}", nccl.join("\n")));
        }
    }
    Ok(if found.failed.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// `spark-launch logs JOB [--node N] [-f]`: every node's log, each line prefixed with its
/// node; without `-f`, container logs are merged in time order.
pub async fn logs(args: LogsArgs, ctx: &Context) -> CmdResult {
    let resolved = live(&args.target, &args.engines, Purpose::Observe("logs"), ctx).await?;
    let result = logs_on(&args, &resolved, ctx).await;
    resolved.close().await;
    result
}

async fn logs_on(args: &LogsArgs, resolved: &ResolvedCluster, ctx: &Context) -> CmdResult {
    let cluster = runtime(resolved)?;
    if let Some(n) = &args.node {
        cluster.node(n).invalid()?;
    }
    let mut found = jobs::find(&cluster, Some(&args.job)).await;
    for (node, e) in &found.failed {
        ctx.reporter.warn(&format!("{node}: {e}"));
    }
    if let Some(n) = &args.node {
        found.entries.retain(|e| &e.node == n);
    }
    if found.entries.is_empty() {
        return Err(anyhow::anyhow!(
            "no job named {} on {}; see `spark-launch status`",
            args.job,
            args.node
                .as_ref()
                .map(|n| n.to_string())
                .unwrap_or_else(|| render::names(&cluster.names()))
        ))
        .invalid();
    }
    // Prefixes tell nodes apart; one node (or `--node`) needs none.
    let prefix = args.node.is_none() && cluster.names().len() > 1;
    let width = found
        .entries
        .iter()
        .map(|e| e.node.as_str().len())
        .max()
        .unwrap_or(0);
    let line = |l: &jobs::LogLine| {
        if prefix {
            format!("{:width$} | {}", l.node.as_str(), l.text)
        } else {
            l.text.clone()
        }
    };
    if args.follow {
        let mut merged = jobs::follow(&cluster, &found.entries).await?;
        loop {
            tokio::select! {
                _ = ctx.cancel.cancelled() => break,
                next = merged.next() => match next {
                    Some(Ok(l)) => super::print_raw(&line(&l)),
                    Some(Err(e)) => ctx.reporter.warn(&e.to_string()),
                    None => break,
                },
            }
        }
    } else {
        let all = jobs::logs(&cluster, &found.entries).await?;
        let text: String = all.iter().map(|l| line(l) + "\n").collect();
        if !text.is_empty() {
            super::print_raw(&text);
        }
    }
    Ok(if found.failed.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// `spark-launch stop JOB|--all`.
pub async fn stop(args: StopArgs, ctx: &Context) -> CmdResult {
    if args.dry_run {
        return stop_plan(&args, ctx).await;
    }
    let resolved = live(&args.target, &args.engines, Purpose::Act, ctx).await?;
    let cluster = runtime(&resolved)?;
    let grace = Duration::from_secs(args.grace);
    let names = render::names(&cluster.names());
    let step = ctx.reporter.step(&match &args.job {
        Some(j) => format!("Stop job {j} on {names}"),
        None => format!("Stop every spark-launch job on {names}"),
    });
    let (stopped, failed) = jobs::stop(&cluster, args.job.as_ref(), grace).await;
    resolved.close().await;
    let count: usize = stopped.iter().map(|s| s.removed.len()).sum();
    if failed.is_empty() {
        step.ok_with(&format!("removed {count}"));
    } else {
        step.fail(&format!("{} node(s) failed", failed.len()));
    }
    for (node, e) in &failed {
        ctx.reporter.warn(&format!("{node}: {e}"));
    }
    if ctx.json {
        let errors = Unreachable::list(&failed);
        print_json(
            &serde_json::json!({ "stopped": stopped, "failed": errors, "label": LABEL_JOB }),
        )?;
    } else if count == 0 {
        print_out(&match &args.job {
            Some(j) => format!("nothing to stop: no job named {j} on {names}"),
            None => format!("nothing to stop on {names}"),
        });
    } else {
        for s in &stopped {
            for name in &s.removed {
                print_out(&format!("{}: removed {name}", s.node));
            }
        }
    }
    if failed.is_empty() {
        Ok(Outcome::Success)
    } else {
        Err(anyhow::anyhow!(
            "stop failed on {}: what could be stopped elsewhere was",
            render::names(&failed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
        )
        .into())
    }
}

/// What `stop` would remove on one node: the containers and processes found there (live), or,
/// on a snapshot, what it would look for.
#[derive(Debug, Serialize)]
struct WouldStop {
    node: NodeName,
    /// Found on the live node (name, runtime, state). Empty on a snapshot.
    found: Vec<JobEntry>,
    /// On a snapshot: what a live stop removes there.
    #[serde(skip_serializing_if = "Option::is_none")]
    looks_for: Option<String>,
}

/// `stop --dry-run`: lists what a stop would remove, read-only. On snapshots (no engine to ask)
/// it names, per node, the containers and processes a live stop looks for.
async fn stop_plan(args: &StopArgs, ctx: &Context) -> CmdResult {
    let label = match &args.job {
        Some(j) => format!("{LABEL_JOB}={j}"),
        None => LABEL_JOB.to_string(),
    };
    let mut selection = args.target.selection(ctx);
    selection.engines = args.engines.engines.clone();
    let resolved = resolve::resolve(&selection, Needs::links(Purpose::Plan), &ctx.reporter)
        .await
        .map_err(super::resolve_error)?;
    let (plan, unreachable) = if resolved.snapshots {
        let plan: Vec<WouldStop> = resolved
            .names()
            .into_iter()
            .map(|node| WouldStop {
                looks_for: Some(match &args.job {
                    Some(j) => format!(
                        "container {} and host processes labelled {label}",
                        j.container_name(&node)
                    ),
                    None => format!("every container and host process labelled {label}"),
                }),
                node,
                found: Vec::new(),
            })
            .collect();
        (plan, Vec::new())
    } else {
        let cluster = runtime(&resolved)?;
        let found = jobs::find(&cluster, args.job.as_ref()).await;
        let plan: Vec<WouldStop> = cluster
            .names()
            .into_iter()
            .map(|node| WouldStop {
                found: found
                    .entries
                    .iter()
                    .filter(|e| e.node == node)
                    .cloned()
                    .collect(),
                node,
                looks_for: None,
            })
            .collect();
        (plan, Unreachable::list(&found.failed))
    };
    resolved.close().await;
    for u in &unreachable {
        ctx.reporter.warn(&format!("{}: {}", u.node, u.error));
    }
    if ctx.json {
        print_json(&serde_json::json!({
            "dry_run": true,
            "label": label,
            "grace_s": args.grace,
            "nodes": plan,
            "unreachable": unreachable,
        }))?;
    } else {
        let mut out = format!(
            "stop (dry run): SIGTERM, then SIGKILL after {}s, then remove; only what carries {label}\n",
            args.grace
        );
        for w in &plan {
            match &w.looks_for {
                Some(l) => out.push_str(&format!("  {}: {l}\n", w.node)),
                None if w.found.is_empty() => {
                    out.push_str(&format!("  {}: nothing to stop\n", w.node))
                }
                None => {
                    for e in &w.found {
                        let what = match e.runtime {
                            RuntimeKind::Docker => "container",
                            RuntimeKind::Host => "process",
                        };
                        out.push_str(&format!(
                            "  {}: would stop and remove {what} {} ({})\n",
                            w.node, e.name, e.state
                        ));
                    }
                }
            }
        }
        print_out(out.trim_end());
    }
    Ok(if unreachable.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}
