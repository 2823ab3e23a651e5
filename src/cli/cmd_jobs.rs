//! `spark-launch run`, `status`, `logs` and `stop`: jobs found by their labels on the nodes.
//! `run` starts the same container (or process) on every node as a job; the others find any
//! job's work by label, never touching containers spark-launch did not label.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use futures::StreamExt;
use serde::Serialize;

use super::args::TargetArgs;
use super::launch::{LaunchArgs, NodeArgs, print_plan, resolve_targets, run_plan, start_steps};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::{all_ok, for_each_node};
use crate::node::{NodeName, Role};
use crate::plan::spec::{Device, LABEL_JOB, Mount};
use crate::plan::{
    ContainerSpec, Gpus, JobName, JobPlan, Launch, NodePlan, ProcessSpec, RuntimeKind,
};
use crate::runtime::{Cluster, JobEntry, RuntimeError};

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
    pub env: Vec<String>,

    /// A bind mount from the node (repeat): SRC:DST or SRC:DST:ro.
    #[arg(long = "mount", value_name = "SRC:DST[:ro]")]
    pub mounts: Vec<String>,

    /// A device node passed into the container (repeat), e.g. /dev/infiniband.
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<String>,

    /// A TCP port the job serves on the node, shown by `status` (repeat).
    #[arg(long = "port", value_name = "PORT")]
    pub ports: Vec<u16>,

    #[command(flatten)]
    pub launch: LaunchArgs,

    #[command(flatten)]
    pub target: TargetArgs,

    /// The command to run on every node (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this job.
    pub job: Option<JobName>,

    #[command(flatten)]
    pub nodes: NodeArgs,

    #[command(flatten)]
    pub target: TargetArgs,
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
    pub nodes: NodeArgs,

    #[command(flatten)]
    pub target: TargetArgs,
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
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub grace: u64,

    /// Say what would be stopped and removed on each node, and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub nodes: NodeArgs,

    #[command(flatten)]
    pub target: TargetArgs,
}

/// Builds the plan of `run`: the same container (or process) on every node.
fn run_plan_of(args: &RunArgs, nodes: &[(NodeName, Role)]) -> Result<JobPlan, CmdError> {
    if args.command.is_empty() && args.launch.runtime == RuntimeKind::Host {
        return Err(anyhow::anyhow!("give the command to run after `--`")).invalid();
    }
    let mut env = BTreeMap::new();
    for e in &args.env {
        let (k, v) = e
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--env wants KEY=VALUE, got {e:?}"))
            .invalid()?;
        env.insert(k.to_string(), v.to_string());
    }
    let mut mounts = Vec::new();
    for m in &args.mounts {
        let parts: Vec<&str> = m.split(':').collect();
        let (source, target, read_only) = match parts.as_slice() {
            [s, t] => (*s, *t, false),
            [s, t, "ro"] => (*s, *t, true),
            _ => {
                return Err(anyhow::anyhow!(
                    "--mount wants SRC:DST or SRC:DST:ro, got {m:?}"
                ))
                .invalid();
            }
        };
        mounts.push(Mount {
            source: source.to_string(),
            target: target.to_string(),
            read_only,
        });
    }
    let mut parts = Vec::new();
    for (node, role) in nodes {
        let launch = match args.launch.runtime {
            RuntimeKind::Docker => {
                let image = args
                    .image
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--image is needed with the docker runtime"))
                    .invalid()?;
                let mut spec = ContainerSpec::gpu(&args.job, node, *role, image, false);
                spec.gpus = Gpus::All;
                spec.command = args.command.clone();
                spec.env = env.clone();
                spec.mounts = mounts.clone();
                spec.ports = args.ports.clone();
                for d in &args.devices {
                    spec.devices.push(Device {
                        host: d.clone(),
                        container: d.clone(),
                        permissions: "rwm".to_string(),
                    });
                }
                Launch::Container(spec)
            }
            RuntimeKind::Host => {
                let mut p = ProcessSpec::new(&args.job, node, *role, args.command.clone());
                p.env = env.clone();
                if !args.ports.is_empty() {
                    let ports: Vec<String> = args.ports.iter().map(|p| p.to_string()).collect();
                    p.labels
                        .insert(crate::plan::spec::LABEL_PORTS.to_string(), ports.join(","));
                }
                Launch::Process(p)
            }
        };
        parts.push(NodePlan {
            node: node.clone(),
            role: *role,
            launch,
        });
    }
    let mut plan = JobPlan {
        job: args.job.clone(),
        workload: "run".to_string(),
        runtime: args.launch.runtime,
        nodes: parts,
        steps: Vec::new(),
    };
    args.launch.adjust(&mut plan);
    plan.steps = start_steps(&plan);
    Ok(plan)
}

/// `spark-launch run`: start the same command on every node as one job.
pub async fn run(args: RunArgs, ctx: &Context) -> CmdResult {
    if args.launch.dry_run {
        // Plan only: node names from --snapshot, --engine, --hosts or the cluster file.
        let nodes = dry_run_nodes(&args, ctx)?;
        let plan = run_plan_of(&args, &nodes)?;
        print_plan(&plan, ctx)?;
        return Ok(Outcome::Success);
    }
    let targets = resolve_targets(&args.launch.nodes, &args.target, ctx).await?;
    let nodes: Vec<(NodeName, Role)> = targets.iter().map(|t| (t.name.clone(), t.role)).collect();
    let plan = run_plan_of(&args, &nodes)?;
    run_plan(&plan, targets, &args.launch.apply_options(), ctx).await?;
    if ctx.json {
        let names: Vec<serde_json::Value> = plan
            .nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "node": n.node,
                    "name": plan.job.container_name(&n.node),
                })
            })
            .collect();
        print_json(&serde_json::json!({ "job": plan.job, "started": names }))?;
    } else {
        print_out(&format!(
            "job {} runs on {} node{}: `spark-launch status {}`, `spark-launch logs {}`, `spark-launch stop {}`",
            plan.job,
            plan.nodes.len(),
            if plan.nodes.len() == 1 { "" } else { "s" },
            plan.job,
            plan.job,
            plan.job
        ));
    }
    Ok(Outcome::Success)
}

/// The nodes a dry run plans for, touching no machine.
fn dry_run_nodes(args: &RunArgs, ctx: &Context) -> Result<Vec<(NodeName, Role)>, CmdError> {
    let names: Vec<NodeName> = if !args.target.snapshots.is_empty() {
        // Read them all, so a bad folder is reported as for every other command.
        super::args::read_snapshots(&args.target.snapshots)
            .invalid()?
            .into_iter()
            .map(|n| n.name)
            .collect()
    } else if let Some(t) = super::launch::engine_targets(&args.launch.nodes)? {
        t.into_iter().map(|t| t.name).collect()
    } else if args.target.uses_hosts() || !args.target.nodes.is_empty() {
        super::args::configured_nodes(&args.target, &ctx.cluster_file)?
            .into_iter()
            .map(|n| n.name)
            .collect()
    } else {
        match crate::inventory::load(&ctx.cluster_file) {
            Ok(inv) if !inv.is_empty() => {
                inv.ordered().into_iter().map(|n| n.name.clone()).collect()
            }
            _ => vec![super::launch::local_node_name()],
        }
    };
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n, if i == 0 { Role::Head } else { Role::Worker }))
        .collect())
}

/// One row of `status --json`.
#[derive(Debug, Serialize)]
struct StatusRow {
    #[serde(flatten)]
    entry: JobEntry,
    uptime_s: Option<i64>,
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

fn human(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Every labelled container and process on every node (of `job` when given), with the nodes
/// that could not be asked.
async fn gather(
    cluster: &Cluster,
    job: Option<&JobName>,
) -> (Vec<JobEntry>, Vec<(NodeName, RuntimeError)>) {
    let results = for_each_node(cluster.names(), 0, |node| async move {
        cluster.node(&node)?.jobs(job, None).await
    })
    .await;
    let mut entries = Vec::new();
    let mut failed = Vec::new();
    for (node, r) in results {
        match r {
            Ok(mut e) => entries.append(&mut e),
            Err(e) => failed.push((node, e)),
        }
    }
    (entries, failed)
}

/// `spark-launch status`.
pub async fn status(args: StatusArgs, ctx: &Context) -> CmdResult {
    live_only(&args.target, "status")?;
    let cluster = Cluster::new(resolve_targets(&args.nodes, &args.target, ctx).await?);
    let (entries, failed) = gather(&cluster, args.job.as_ref()).await;
    let order: Vec<NodeName> = cluster.names();
    let mut rows: Vec<StatusRow> = entries
        .into_iter()
        .map(|entry| {
            let uptime_s = match (entry.state.as_str(), entry.started_at) {
                ("running", Some(t)) => Some((now() - t).max(0)),
                _ => None,
            };
            StatusRow { entry, uptime_s }
        })
        .collect();
    rows.sort_by_key(|r| {
        (
            r.entry.job.clone(),
            order.iter().position(|n| *n == r.entry.node),
            r.entry.name.clone(),
        )
    });
    for (node, e) in &failed {
        ctx.reporter.warn(&format!("{node}: {e}"));
    }
    if ctx.json {
        let unreachable = Unreachable::list(&failed);
        print_json(&serde_json::json!({ "jobs": rows, "unreachable": unreachable }))?;
    } else if rows.is_empty() {
        print_out(
            match &args.job {
                Some(j) => format!("no job named {j} on {}", names(&order)),
                None => format!("no spark-launch jobs on {}", names(&order)),
            }
            .as_str(),
        );
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
                match e.runtime {
                    RuntimeKind::Docker => "docker".to_string(),
                    RuntimeKind::Host => "host".to_string(),
                },
                state,
                e.image.clone(),
                r.uptime_s.map(human).unwrap_or_else(|| "-".to_string()),
                e.ports
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ]);
        }
        print_out(&table.to_string());
    }
    Ok(if failed.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// `status` and `logs` read what runs on live nodes: a snapshot has nothing to show.
fn live_only(target: &TargetArgs, command: &str) -> Result<(), CmdError> {
    if target.uses_snapshots() {
        return Err(anyhow::anyhow!(
            "`{command}` reads what runs on live nodes, and a snapshot holds only a node's facts: \
             give the nodes with the cluster file, --hosts or --engine instead of --snapshot"
        ))
        .invalid();
    }
    Ok(())
}

fn names(nodes: &[NodeName]) -> String {
    nodes
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `spark-launch logs JOB [--node N] [-f]`: every node's log, each line prefixed with its
/// node; without `-f`, container logs are merged in time order.
pub async fn logs(args: LogsArgs, ctx: &Context) -> CmdResult {
    live_only(&args.target, "logs")?;
    let cluster = Cluster::new(resolve_targets(&args.nodes, &args.target, ctx).await?);
    if let Some(n) = &args.node {
        cluster.node(n).invalid()?;
    }
    let (mut entries, failed) = gather(&cluster, Some(&args.job)).await;
    for (node, e) in &failed {
        ctx.reporter.warn(&format!("{node}: {e}"));
    }
    if let Some(n) = &args.node {
        entries.retain(|e| &e.node == n);
    }
    if entries.is_empty() {
        return Err(anyhow::anyhow!(
            "no job named {} on {}; see `spark-launch status`",
            args.job,
            args.node
                .as_ref()
                .map(|n| n.to_string())
                .unwrap_or_else(|| names(&cluster.names()))
        ))
        .invalid();
    }
    // Prefixes tell nodes apart; one node (or `--node`) needs none.
    let prefix = args.node.is_none() && cluster.names().len() > 1;
    let width = entries
        .iter()
        .map(|e| e.node.as_str().len())
        .max()
        .unwrap_or(0);
    let label = |e: &JobEntry| {
        if prefix {
            format!("{:width$} | ", e.node.as_str())
        } else {
            String::new()
        }
    };
    if args.follow {
        let cancel = super::launch::cancel_on_signals(ctx.reporter.clone());
        let opened = for_each_node(
            entries.iter().map(|e| e.node.clone()).collect::<Vec<_>>(),
            0,
            |node| {
                let cluster = &cluster;
                let entry = entries.iter().find(|e| e.node == node).cloned();
                async move {
                    let entry = entry.ok_or_else(|| RuntimeError::Other("gone".into()))?;
                    let stream = cluster
                        .node(&node)?
                        .logs(entry.runtime, &entry.name, true, false)
                        .await?;
                    Ok::<_, RuntimeError>((entry, stream))
                }
            },
        )
        .await;
        let opened = all_ok(opened)?;
        let streams = opened.into_iter().map(|(_, (entry, stream))| {
            let tag = label(&entry);
            lines(stream)
                .map(move |l| l.map(|line| format!("{tag}{line}")))
                .boxed()
        });
        let mut merged = futures::stream::select_all(streams);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                next = merged.next() => match next {
                    Some(Ok(line)) => print_out(&line),
                    Some(Err(e)) => ctx.reporter.warn(&e.to_string()),
                    None => break,
                },
            }
        }
    } else {
        let read = for_each_node(
            entries.iter().map(|e| e.node.clone()).collect::<Vec<_>>(),
            0,
            |node| {
                let cluster = &cluster;
                let entry = entries.iter().find(|e| e.node == node).cloned();
                async move {
                    let entry = entry.ok_or_else(|| RuntimeError::Other("gone".into()))?;
                    let timestamps = entry.runtime == RuntimeKind::Docker;
                    let stream = cluster
                        .node(&node)?
                        .logs(entry.runtime, &entry.name, false, timestamps)
                        .await?;
                    let all: Vec<String> = lines(stream)
                        .collect::<Vec<_>>()
                        .await
                        .into_iter()
                        .collect::<Result<_, _>>()?;
                    Ok::<_, RuntimeError>((entry, all))
                }
            },
        )
        .await;
        let read = all_ok(read)?;
        // (sort key, node order, text): docker lines start with an RFC 3339 timestamp.
        let mut out: Vec<(String, usize, String)> = Vec::new();
        for (i, (_, (entry, all))) in read.into_iter().enumerate() {
            let tag = label(&entry);
            for line in all {
                let (key, text) = if entry.runtime == RuntimeKind::Docker {
                    match line.split_once(' ') {
                        Some((ts, rest)) => (ts.to_string(), rest.to_string()),
                        None => (String::new(), line),
                    }
                } else {
                    (String::new(), line)
                };
                out.push((key, i, format!("{tag}{text}")));
            }
        }
        // A stable sort keeps each node's own order for equal (or missing) timestamps.
        out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let text: String = out.into_iter().map(|(_, _, l)| l + "\n").collect();
        if !text.is_empty() {
            print_out(&text);
        }
    }
    Ok(if failed.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// Splits a byte stream into lines (without their newline); a last partial line is kept.
fn lines(
    stream: futures::stream::BoxStream<'static, Result<bytes::Bytes, RuntimeError>>,
) -> impl futures::Stream<Item = Result<String, RuntimeError>> + Send + 'static {
    futures::stream::unfold(
        (stream, Vec::<u8>::new(), false),
        |(mut stream, mut buf, mut done)| async move {
            loop {
                if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let text = String::from_utf8_lossy(&line[..line.len() - 1])
                        .trim_end_matches('\r')
                        .to_string();
                    return Some((Ok(text), (stream, buf, done)));
                }
                if done {
                    if buf.is_empty() {
                        return None;
                    }
                    let text = String::from_utf8_lossy(&buf).to_string();
                    buf.clear();
                    return Some((Ok(text), (stream, buf, done)));
                }
                match stream.next().await {
                    Some(Ok(b)) => buf.extend_from_slice(&b),
                    Some(Err(e)) => return Some((Err(e), (stream, buf, true))),
                    None => done = true,
                }
            }
        },
    )
}

#[derive(Debug, Serialize)]
struct Stopped {
    node: NodeName,
    removed: Vec<String>,
}

/// `spark-launch stop JOB|--all`.
pub async fn stop(args: StopArgs, ctx: &Context) -> CmdResult {
    if args.dry_run {
        return stop_plan(&args, ctx).await;
    }
    let cluster = Cluster::new(resolve_targets(&args.nodes, &args.target, ctx).await?);
    let grace = Duration::from_secs(args.grace);
    let job = args.job.clone();
    let all = args.all;
    let step = ctx.reporter.step(&match &job {
        Some(j) => format!("Stop job {j} on {}", names(&cluster.names())),
        None => format!("Stop every spark-launch job on {}", names(&cluster.names())),
    });
    let results = for_each_node(cluster.names(), 0, |node| {
        let cluster = &cluster;
        let job = job.clone();
        async move {
            let handle = cluster.node(&node)?;
            match (&job, all) {
                (Some(j), _) => handle.stop_job(j, None, grace).await,
                (None, _) => {
                    let mut removed = Vec::new();
                    let mut jobs: Vec<String> = handle
                        .jobs(None, None)
                        .await?
                        .into_iter()
                        .map(|e| e.job)
                        .collect();
                    jobs.sort();
                    jobs.dedup();
                    for j in jobs {
                        // Labels we wrote are valid job names; anything else is not ours.
                        let Ok(j) = JobName::new(j) else { continue };
                        removed.extend(handle.stop_job(&j, None, grace).await?);
                    }
                    Ok(removed)
                }
            }
        }
    })
    .await;
    let mut stopped = Vec::new();
    let mut failed = Vec::new();
    for (node, r) in results {
        match r {
            Ok(removed) => stopped.push(Stopped { node, removed }),
            Err(e) => failed.push((node, e)),
        }
    }
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
        print_out(&match &job {
            Some(j) => format!(
                "nothing to stop: no job named {j} on {}",
                names(&cluster.names())
            ),
            None => format!("nothing to stop on {}", names(&cluster.names())),
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
            failed
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
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
    let (plan, unreachable) = if args.target.uses_snapshots() {
        let nodes = super::args::read_snapshots(&args.target.snapshots).invalid()?;
        let plan: Vec<WouldStop> = nodes
            .into_iter()
            .map(|n| {
                let looks_for = match &args.job {
                    Some(j) => format!(
                        "container {} and host processes labelled {label}",
                        j.container_name(&n.name)
                    ),
                    None => format!("every container and host process labelled {label}"),
                };
                WouldStop {
                    node: n.name,
                    found: Vec::new(),
                    looks_for: Some(looks_for),
                }
            })
            .collect();
        (plan, Vec::new())
    } else {
        let cluster = Cluster::new(resolve_targets(&args.nodes, &args.target, ctx).await?);
        let (entries, failed) = gather(&cluster, args.job.as_ref()).await;
        let plan: Vec<WouldStop> = cluster
            .names()
            .into_iter()
            .map(|node| WouldStop {
                found: entries.iter().filter(|e| e.node == node).cloned().collect(),
                node,
                looks_for: None,
            })
            .collect();
        let unreachable = Unreachable::list(&failed);
        (plan, unreachable)
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        run: RunArgs,
    }

    fn plan(args: &[&str]) -> JobPlan {
        let t = T::try_parse_from(args).unwrap();
        let nodes = vec![
            (NodeName::new("a").unwrap(), Role::Head),
            (NodeName::new("b").unwrap(), Role::Worker),
        ];
        run_plan_of(&t.run, &nodes).unwrap()
    }

    #[test]
    fn run_plans_the_same_gpu_container_on_every_node_with_the_overrides() {
        let p = plan(&[
            "t",
            "--job",
            "demo",
            "--image",
            "img:1",
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "-e",
            "A=1",
            "--mount",
            "/data:/data:ro",
            "--device",
            "/dev/infiniband",
            "--port",
            "8000",
            "--",
            "sleep",
            "60",
        ]);
        insta::assert_json_snapshot!(p);
    }

    #[test]
    fn run_with_the_host_runtime_plans_processes_and_no_image_step() {
        let p = plan(&[
            "t",
            "--job",
            "demo",
            "--runtime",
            "host",
            "--",
            "sleep",
            "60",
        ]);
        assert!(matches!(p.nodes[1].launch, Launch::Process(_)));
        assert_eq!(p.steps.len(), 1);
        assert!(p.problems().is_empty());
    }

    #[test]
    fn uptimes_read_like_docker_ps() {
        assert_eq!(human(5), "5s");
        assert_eq!(human(125), "2m05s");
        assert_eq!(human(7260), "2h01m");
        assert_eq!(human(90_000), "1d01h");
    }

    #[tokio::test]
    async fn log_lines_are_split_across_chunks_and_keep_a_last_partial_line() {
        let chunks: Vec<Result<bytes::Bytes, RuntimeError>> =
            vec![Ok("a\nb".into()), Ok("c\n".into()), Ok("tail".into())];
        let got: Vec<String> = lines(futures::stream::iter(chunks).boxed())
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(got, vec!["a", "bc", "tail"]);
    }
}
