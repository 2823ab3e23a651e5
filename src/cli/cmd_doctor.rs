//! `spark-launch doctor`: every known way a multi-node setup silently goes wrong, checked on
//! every node, each problem with its fix.
//!
//! Glue only: read the facts (snapshots, or a probe of each live node), gather the live
//! observations on every node at once (`apply::for_each_node`), hand everything to
//! `doctor::run` and print the report. `--log FILE` adds the last-run analysers; with only
//! `--log`, no machine is touched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::args::{TargetArgs, read_snapshots};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::for_each_node;
use crate::derive::{NodeInput, derive};
use crate::doctor::live::{self, GatherPlan, Observations, SshTarget};
use crate::doctor::{self, Inputs, ModelRef, Options, PortScope, PortUse, Report, Selection};
use crate::node::NodeName;
use crate::probe;

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
        judge(&nodes, &options, None, &selection)
    } else {
        let (nodes, live) = gather_live(ctx, &options).await?;
        judge(&nodes, &options, Some(&live), &selection)
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
    selection: &Selection,
) -> Report {
    let derived = derive(nodes);
    doctor::run(
        &Inputs {
            nodes,
            derived: &derived,
            options,
            live,
            unreachable: &[],
        },
        selection,
    )
}

/// Where a node's commands run.
#[derive(Clone, Debug)]
enum Exec {
    /// This machine, through `sh`.
    Local,
}

impl Exec {
    async fn run(&self, script: String) -> Result<String, String> {
        match self {
            Exec::Local => tokio::task::spawn_blocking(move || probe::live::run_local(&script))
                .await
                .map_err(|e| format!("the local run was interrupted: {e}"))?
                .map_err(|e| e.to_string()),
        }
    }
}

/// Probes every live node and gathers its observations, all nodes at once.
async fn gather_live(
    ctx: &Context,
    options: &Options,
) -> Result<
    (
        Vec<NodeInput>,
        BTreeMap<NodeName, Result<Observations, String>>,
    ),
    CmdError,
> {
    // Until the inventory and the SSH layer land, the live cluster is this machine.
    let step = ctx.reporter.step("probe this machine");
    let facts = probe::read_facts(&probe::live::snapshot_local()?)?;
    step.ok();
    let name = NodeName::new(facts.hostname.clone())
        .or_else(|_| NodeName::new("local"))
        .invalid()?;
    let targets: Vec<(NodeName, Exec)> = vec![(name.clone(), Exec::Local)];
    let nodes = vec![NodeInput { name, facts }];

    let plans: BTreeMap<NodeName, GatherPlan> = live::plan(
        &nodes,
        &BTreeMap::<NodeName, SshTarget>::new(),
        options.image.as_deref(),
        options.model.as_ref(),
    )
    .into_iter()
    .zip(&nodes)
    .map(|(p, n)| (n.name.clone(), p))
    .collect();
    let execs: BTreeMap<NodeName, Exec> = targets.into_iter().collect();

    let step = ctx.reporter.step("run the live checks on every node");
    let results = for_each_node(nodes.iter().map(|n| n.name.clone()), 0, |node| {
        let plan = plans.get(&node).cloned().unwrap_or_default();
        let exec = execs.get(&node).cloned();
        async move {
            let Some(exec) = exec else {
                return Err(format!("{node}: no way to reach this node"));
            };
            let out = exec.run(live::script(&plan)).await?;
            live::parse(&plan, &out).map_err(|e| e.to_string())
        }
    })
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
    Ok((nodes, results.into_iter().collect()))
}
