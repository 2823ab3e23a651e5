//! `spark-launch image push IMAGE [--to NODES]`: images on every node, compared by content,
//! streamed only where missing, all target nodes at once with a progress bar each.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::{EngineFlags, NodeFlags};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::images::PushError;
use crate::apply::images::ReadFrom;
use crate::apply::{NodePush, plan_push, push_image};
use crate::node::NodeName;
use crate::plan::image::PushAction;
use crate::resolve::{self, Needs, Purpose, ResolvedCluster};

use crate::runtime::Cluster;

#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    pub command: ImageCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ImageCommand {
    /// Copy an image from this machine's engine to the other nodes that lack it.
    Push(PushArgs),
}

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The image, as this machine's engine names it (`nccl-tests:2.28`).
    pub image: String,

    /// Only these nodes (comma-separated). Default: every node but the source.
    #[arg(long, value_delimiter = ',', value_name = "NODES")]
    pub to: Vec<NodeName>,

    /// Take the image from this node instead of this machine (or the head).
    #[arg(long, value_name = "NODE")]
    pub from: Option<NodeName>,

    /// Nodes pushed to at once (0 = all, one export shared by all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub concurrency: usize,

    /// Say which nodes would get the image (compared by content, read-only), and move nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

pub async fn run(args: ImageArgs, ctx: &Context) -> CmdResult {
    match args.command {
        ImageCommand::Push(a) => push(a, ctx).await,
    }
}

/// The source and targets of a push among `names`, or the user's mistake (exit 2).
fn source_and_targets(
    args: &PushArgs,
    names: &[NodeName],
    local: Option<&NodeName>,
) -> Result<(NodeName, Vec<NodeName>), CmdError> {
    crate::plan::image::push_route(args.from.as_ref(), &args.to, names, local)
        .map_err(anyhow::Error::msg)
        .invalid()
}

async fn push(args: PushArgs, ctx: &Context) -> CmdResult {
    let purpose = if args.dry_run {
        Purpose::Plan
    } else {
        Purpose::Act
    };
    let needs = if args.target.uses_snapshots() {
        Needs::facts(purpose)
    } else {
        Needs::links(purpose)
    };
    let mut selection = args.target.selection(ctx);
    selection.engines = args.engines.engines.clone();
    let resolved = resolve::resolve(&selection, needs, &ctx.reporter)
        .await
        .map_err(super::resolve_error)?;
    let result = if resolved.snapshots {
        plan_on_snapshots(&args, &resolved, ctx)
    } else {
        push_on(&args, &resolved, ctx).await
    };
    resolved.close().await;
    result
}

async fn push_on(args: &PushArgs, resolved: &ResolvedCluster, ctx: &Context) -> CmdResult {
    let cluster = resolved.runtime().map_err(super::resolve_error)?;
    let local = cluster
        .nodes()
        .iter()
        .find(|n| n.target.is_local())
        .map(|n| n.name().clone());
    let (source, to) = source_and_targets(args, &cluster.names(), local.as_ref())?;
    if args.dry_run {
        return plan_live(&cluster, args, &source, &to, ctx).await;
    }
    let reporter = &ctx.reporter;
    let cancel = &ctx.cancel;
    let step = reporter.step(&format!(
        "Push {} from {source} to {}",
        args.image,
        to.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
    ));
    let report = match push_image(
        &cluster,
        &source,
        &args.image,
        &to,
        args.concurrency,
        reporter,
        cancel,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => {
            let e = push_error(e);
            step.fail(if e.code == 2 { "not found" } else { "failed" });
            return Err(e);
        }
    };
    if report.ok() {
        step.ok_with(&report.summary());
    } else {
        step.fail(&report.summary());
    }
    if ctx.json {
        print_json(&report)?;
    } else {
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec!["NODE", "RESULT", "BYTES", "TIME", "RATE"]);
        for (node, p) in &report.nodes {
            let row = match p {
                NodePush::Skipped => vec![
                    "already there (same content)".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ],
                NodePush::SkippedOwnArch { id } => vec![
                    format!("kept its own {} build ({id})", "arch"),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ],
                NodePush::Pushed {
                    bytes,
                    seconds,
                    layers_sent,
                    layers,
                    read_from,
                } => vec![
                    format!(
                        "{}; {}",
                        if layers_sent < layers {
                            format!("pushed {layers_sent} of {layers} layers (held the rest)")
                        } else {
                            "pushed".into()
                        },
                        match read_from {
                            ReadFrom::LayerStore => "read from the layer store",
                            ReadFrom::Export => "exported by the engine",
                        }
                    ),
                    indicatif::HumanBytes(*bytes).to_string(),
                    format!("{seconds:.1}s"),
                    format!(
                        "{}/s",
                        indicatif::HumanBytes((*bytes as f64 / seconds.max(1e-3)) as u64)
                    ),
                ],
                NodePush::Refused { reason } => vec![
                    format!("refused: {reason}"),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ],
                NodePush::Failed { error } => vec![
                    format!("failed: {error}"),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ],
            };
            let mut cells = vec![node.to_string()];
            cells.extend(row);
            t.add_row(cells);
        }
        print_out(&format!(
            "{} ({}, {}/{}) from {}\n{}",
            report.image.reference,
            report.image.id,
            report.image.os,
            report.image.arch,
            report.source,
            t
        ));
    }
    if cancel.is_cancelled() {
        return Err(CmdError {
            code: 130,
            error: anyhow::anyhow!("interrupted"),
        });
    }
    if !report.refused().is_empty() {
        let mixed = report
            .mixed_arches
            .as_ref()
            .map(|a| {
                format!(
                    " (a mixed {} cluster: build the image once per architecture)",
                    a.join(" + ")
                )
            })
            .unwrap_or_default();
        return Err(CmdError {
            code: 2,
            error: anyhow::anyhow!(
                "refused on {}: the image is built for another CPU{mixed} (see above)",
                report
                    .refused()
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok(if report.failed().is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// An image missing where it must be is the user's to fix (exit 2); the rest is a failure.
fn push_error(e: PushError) -> CmdError {
    match e {
        PushError::NotOnSource { .. } | PushError::Nowhere { .. } => CmdError {
            code: 2,
            error: e.into(),
        },
        e => e.into(),
    }
}

/// `image push --dry-run` on live nodes: the same comparison as a push, read-only.
async fn plan_live(
    cluster: &Cluster,
    args: &PushArgs,
    source: &NodeName,
    to: &[NodeName],
    ctx: &Context,
) -> CmdResult {
    let plan = plan_push(cluster, source, &args.image, to)
        .await
        .map_err(push_error)?;
    if ctx.json {
        print_json(&serde_json::json!({ "dry_run": true, "plan": plan }))?;
        return Ok(Outcome::Success);
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["NODE", "WOULD"]);
    for (node, action) in &plan.nodes {
        let would = match action {
            PushAction::Skip => "skip: already there (same content)".to_string(),
            PushAction::SkipOwnArch { id } => format!("skip: keeps its own build ({id})"),
            PushAction::Push { missing, layers } if missing.len() < *layers => format!(
                "push {} of {layers} layers from {source} (it holds the others)",
                missing.len()
            ),
            PushAction::Push { .. } => format!("push from {source}"),
            PushAction::Refuse { reason } => format!("refuse: {reason}"),
        };
        t.add_row(vec![node.to_string(), would]);
    }
    print_out(&format!(
        "{} ({}, {}/{}) on {source} (dry run: nothing moved)\n{t}",
        plan.image.reference, plan.image.id, plan.image.os, plan.image.arch
    ));
    Ok(Outcome::Success)
}

/// `image push --dry-run --snapshot …`: what a live push compares and where it would stream
/// from, with each node's CPU where the snapshot knows it.
fn plan_on_snapshots(args: &PushArgs, resolved: &ResolvedCluster, ctx: &Context) -> CmdResult {
    let nodes = resolved.inputs();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let (source, to) = source_and_targets(args, &names, None)?;
    let arch = |name: &NodeName| {
        nodes
            .iter()
            .find(|n| n.name == *name)
            .and_then(|n| n.facts.arch.clone())
    };
    let plan = crate::plan::image::snapshot_push(&args.image, &source, &to, &arch);
    if ctx.json {
        print_json(&plan)?;
        return Ok(Outcome::Success);
    }
    let mut out = format!("push {} (dry run on snapshots)\n", plan.image);
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!("  {}. {s}\n", i + 1));
    }
    for n in std::iter::once(&plan.source).chain(&plan.targets) {
        out.push_str(&format!(
            "     {}: {}\n",
            n.node,
            n.arch.as_deref().unwrap_or("CPU not in the snapshot")
        ));
    }
    if let Some(m) = &plan.mixed_arches {
        out.push_str(&format!(
            "  a mixed {} cluster: each CPU needs its own build of the image\n",
            m.join(" + ")
        ));
    }
    print_out(out.trim_end());
    Ok(Outcome::Success)
}
