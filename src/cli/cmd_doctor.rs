//! `spark-launch doctor`: every known way a multi-node setup silently goes wrong, checked on
//! every node, each problem with its fix.
//!
//! Flags and rendering: the nodes come from the resolve stage (a node that cannot be reached
//! is a finding, not an error), the live observations from `apply::doctor::gather`, the
//! judgement from `doctor::run`. `--log FILE` adds the last-run analysers; with only `--log`,
//! no machine is touched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::args::NodeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::derive::{NodeInput, derive};
use crate::doctor::live::Observations;
use crate::doctor::{self, CheckSelection, Inputs, ModelRef, Options, PortScope, PortUse, Report};
use crate::node::NodeName;
use crate::resolve::{self, Fallback, Needs, Purpose, Unreachable};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub target: NodeFlags,

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

    /// Another TCP port that must be free on the head (beyond the ports the serving engines
    /// bind: 8000, 29501, 6379 and 8355 on the head, 2233 on every node); repeatable.
    #[arg(long = "port", value_name = "PORT", value_parser = crate::workload::limits::parse_port)]
    pub ports: Vec<u16>,
}

pub async fn run(args: DoctorArgs, ctx: &Context) -> CmdResult {
    let selection = CheckSelection {
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
    } else {
        let needs = Needs::facts(Purpose::Plan)
            .with_fallback(Fallback::ThisMachineWarn)
            .with_unreachable(Unreachable::Report);
        let cluster = resolve::resolve(&args.target.selection(ctx), needs, &ctx.reporter)
            .await
            .map_err(super::resolve_error)?;
        for w in &cluster.warnings {
            ctx.reporter.warn(w);
        }
        let live = if cluster.snapshots {
            None
        } else {
            Some(crate::apply::doctor::gather(&cluster, &options, &ctx.reporter).await)
        };
        let report = judge(
            &cluster.inputs(),
            &options,
            live.as_ref(),
            &cluster.unreachable,
            &selection,
        );
        cluster.close().await;
        report
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
        let text = crate::input::read_text(p, crate::input::MAX_LOG_BYTES)
            .map_err(|e| anyhow::anyhow!("cannot read the log: {e}"))
            .invalid()?;
        out.push(doctor::logs::analyse(&p.display().to_string(), &text));
    }
    Ok(out)
}

fn judge(
    nodes: &[NodeInput],
    options: &Options,
    live: Option<&BTreeMap<NodeName, Result<Observations, String>>>,
    unreachable: &[(NodeName, String)],
    selection: &CheckSelection,
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
