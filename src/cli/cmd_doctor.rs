//! `spark-launch doctor`: every known way a multi-node setup silently goes wrong, checked on
//! every node, each problem with its fix.
//!
//! Glue only: read the facts (snapshots, or a probe of each live node over the SSH layer; the
//! local node runs here), run doctor's gather script on every node at once
//! (`apply::for_each_node`), hand everything to `doctor::run` and print the report. A node
//! that cannot be reached is a finding, not an error. `--log FILE` adds the last-run
//! analysers; with only `--log`, no machine is touched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::args::{
    TargetArgs, configured_nodes, load_inventory, local_facts, read_snapshots, ssh_targets,
};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::for_each_node;
use crate::derive::{NodeInput, derive};
use crate::doctor::live::{self, GatherPlan, Observations, SshTarget};
use crate::doctor::{self, Inputs, ModelRef, Options, PortScope, PortUse, Report, Selection};
use crate::inventory::NodeConfig;
use crate::node::NodeName;
use crate::probe::NodeFacts;
use crate::ssh::{self, Pool, RunOptions, SshOptions, stderr_tail};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Print only the fixes, grouped by node (commands ready to paste).
    #[arg(long)]
    pub fix_hints_only: bool,

    /// Analyse the log of a last run (nccl-tests, vLLM, Ray); repeatable. Alone, no machine
    /// is touched.
    #[arg(long = "log", value_name = "FILE")]
    pub logs: Vec<PathBuf>,

    /// The image the cluster will run: same digest and right architecture on every node,
    /// memlock inside a test container, disk for twice its size.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// A model whose weights must be on every node: `org/name[@revision]` (Hugging Face
    /// cache) or an absolute path.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<ModelRef>,

    /// Run only these checks: ids or categories (`fabric`, `host.cma`); repeatable.
    #[arg(long = "check", value_name = "ID")]
    pub only: Vec<String>,

    /// Leave these checks out: ids or categories; repeatable.
    #[arg(long = "skip", value_name = "ID")]
    pub skip: Vec<String>,

    /// Another TCP port that must be free on the head (beyond 8000, 8355, 29500, 6379, and
    /// 2233 on every node); repeatable.
    #[arg(long = "port", value_name = "PORT")]
    pub ports: Vec<u16>,
}

pub async fn run(args: Args, ctx: &Context) -> CmdResult {
    let selection = Selection {
        only: args.only.clone(),
        skip: args.skip.clone(),
    };
    let unknown = selection.unknown();
    if !unknown.is_empty() {
        let ids: Vec<&str> = doctor::checks().iter().map(|c| c.info.id).collect();
        return Err(anyhow::anyhow!(
            "no check matches {}; checks are: {}",
            unknown.join(", "),
            ids.join(", ")
        ))
        .invalid();
    }
    let mut options = Options {
        image: args.image.clone(),
        model: args.model.clone(),
        ..Options::default()
    };
    for p in &args.ports {
        options.ports.push(PortUse::new(
            *p,
            "a port given with --port",
            PortScope::Head,
        ));
    }

    let logs = read_logs(&args.logs)?;
    let logs_only = !args.logs.is_empty() && !args.target.uses_snapshots();

    let mut report = if logs_only {
        empty_report()
    } else if args.target.uses_snapshots() {
        let nodes = read_snapshots(&args.target.snapshots).invalid()?;
        judge(&nodes, &options, None, &[], &selection)
    } else {
        let g = gather_live(&args.target, ctx, &options).await?;
        judge(
            &g.nodes,
            &options,
            Some(&g.live),
            &g.unreachable,
            &selection,
        )
    };
    report.logs = logs;

    if ctx.json {
        print_json(&report)?;
    } else if args.fix_hints_only {
        print_out(&doctor::render::fix_hints(&report));
    } else {
        print_out(&doctor::render::text(&report));
    }
    Ok(if report.failed() {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

fn empty_report() -> Report {
    Report {
        nodes: Vec::new(),
        summary: Default::default(),
        checks: Vec::new(),
        logs: Vec::new(),
    }
}

fn read_logs(paths: &[PathBuf]) -> Result<Vec<doctor::logs::LogReport>, CmdError> {
    let mut out = Vec::new();
    for p in paths {
        let bytes = std::fs::read(p)
            .map_err(|e| anyhow::anyhow!("cannot read the log {}: {e}", p.display()))
            .invalid()?;
        out.push(doctor::logs::analyse(
            &p.display().to_string(),
            &String::from_utf8_lossy(&bytes),
        ));
    }
    Ok(out)
}

fn judge(
    nodes: &[NodeInput],
    options: &Options,
    live: Option<&BTreeMap<NodeName, Result<Observations, String>>>,
    unreachable: &[(NodeName, String)],
    selection: &Selection,
) -> Report {
    let derived = derive(nodes);
    doctor::run(
        &Inputs {
            nodes,
            derived: &derived,
            options,
            live,
            unreachable,
        },
        selection,
    )
}

/// What the live run gathered: facts of every node it could probe, the observations per node,
/// and the nodes it could not reach at all.
struct Gathered {
    nodes: Vec<NodeInput>,
    live: BTreeMap<NodeName, Result<Observations, String>>,
    unreachable: Vec<(NodeName, String)>,
}

/// The live nodes: `--hosts`, the cluster file (or `--nodes` of it); with neither, this
/// machine alone.
fn live_nodes(
    target: &TargetArgs,
    ctx: &Context,
    local: &NodeFacts,
) -> Result<Vec<NodeConfig>, CmdError> {
    let no_file = !target.uses_hosts()
        && target.nodes.is_empty()
        && load_inventory(&ctx.cluster_file)?.is_empty();
    if !no_file {
        return configured_nodes(target, &ctx.cluster_file);
    }
    ctx.reporter.warn(&format!(
        "no cluster file at {}: checking this machine only (add nodes with `spark-launch discover --save` or `spark-launch nodes add HOST`, or name them with --hosts)",
        ctx.cluster_file.display()
    ));
    let name = NodeName::new(local.hostname.clone())
        .or_else(|_| NodeName::new("local"))
        .invalid()?;
    Ok(vec![NodeConfig {
        name,
        addresses: vec!["localhost".into()],
        user: None,
        port: 22,
        role: None,
        fabric: None,
    }])
}

/// Connects to every node it can (the local one runs here), probes them, then runs the
/// gather script on every probed node at once. A node that cannot be reached or probed is
/// reported, never fatal: doctor is how the user finds out why.
async fn gather_live(
    target: &TargetArgs,
    ctx: &Context,
    options: &Options,
) -> Result<Gathered, CmdError> {
    let local = local_facts().await?;
    let configured = live_nodes(target, ctx, &local)?;
    let targets = ssh_targets(&configured, &local);
    let mut pool = Pool::new(SshOptions::default())?;
    let remote = targets.iter().filter(|t| !t.local).count();
    let step = ctx.reporter.step(&format!(
        "connect to {remote} node{}",
        if remote == 1 { "" } else { "s" }
    ));
    let mut unreachable: Vec<(NodeName, String)> = pool
        .connect_all(&targets, None)
        .await
        .into_iter()
        .map(|(n, e)| (n, e.to_string()))
        .collect();
    if unreachable.is_empty() {
        step.ok();
    } else {
        step.fail(&format!("{} unreachable", unreachable.len()));
    }

    let n = pool.handles().len();
    let step = ctx
        .reporter
        .step(&format!("probe {n} node{}", if n == 1 { "" } else { "s" }));
    let mut nodes = Vec::new();
    for (name, r) in ssh::probe::probe_all(&pool).await {
        match r {
            Ok(facts) => nodes.push(NodeInput { name, facts }),
            Err(e) => unreachable.push((name, e.to_string())),
        }
    }
    step.ok();
    // Keep the cluster's order (head first) for both lists.
    let order = |n: &NodeName| configured.iter().position(|c| &c.name == n);
    nodes.sort_by_key(|n| order(&n.name));
    unreachable.sort_by_key(|(n, _)| order(n));

    // How each node reaches the others: the first address the cluster knows for it.
    let peers: BTreeMap<NodeName, SshTarget> = configured
        .iter()
        .filter_map(|c| {
            let host = c.addresses.first()?;
            Some((
                c.name.clone(),
                SshTarget {
                    peer: c.name.clone(),
                    destination: match &c.user {
                        Some(u) => format!("{u}@{host}"),
                        None => host.clone(),
                    },
                    port: Some(c.port),
                },
            ))
        })
        .collect();
    let plans: BTreeMap<NodeName, GatherPlan> = live::plan(
        &nodes,
        &peers,
        options.image.as_deref(),
        options.model.as_ref(),
    )
    .into_iter()
    .zip(&nodes)
    .map(|(p, n)| (n.name.clone(), p))
    .collect();

    let step = ctx.reporter.step("run the live checks on every node");
    let plans = &plans;
    let pool_ref = &pool;
    let results = for_each_node(
        nodes.iter().map(|n| n.name.clone()),
        pool.limit,
        |node| async move {
            let plan = plans.get(&node).cloned().unwrap_or_default();
            let handle = pool_ref.get(&node).map_err(|e| e.to_string())?;
            let script = live::script(&plan);
            let out = handle
                .output(&["sh", "-c", &script], &RunOptions::timeout(GATHER_TIMEOUT))
                .await
                .map_err(|e| e.to_string())?;
            if !out.success() {
                return Err(format!(
                    "the doctor script failed (exit {}): {}",
                    out.code,
                    stderr_tail(&out.stderr, 3)
                ));
            }
            live::parse(&plan, &out.stdout_text()).map_err(|e| e.to_string())
        },
    )
    .await;
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    if failed == 0 {
        step.ok();
    } else {
        step.fail(&format!(
            "{failed} of {} nodes could not be checked",
            results.len()
        ));
    }
    pool.close().await;
    Ok(Gathered {
        nodes,
        live: results.into_iter().collect(),
        unreachable,
    })
}

/// How long one node's gather script may run (pings and SSH attempts have their own short
/// timeouts; this only stops a hung node from hanging doctor).
const GATHER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);
