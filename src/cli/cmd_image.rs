//! `spark-launch image push IMAGE [--to NODES]`: images on every node, compared by content,
//! streamed only where missing, all target nodes at once with a progress bar each.

use std::sync::Arc;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::TargetArgs;
use super::launch::{NodeArgs, cancel_on_signals, resolve_targets};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::images::PushError;
use crate::apply::{NodePush, plan_push, push_image};
use crate::node::NodeName;
use crate::plan::image::PushAction;
use crate::progress::{NullReporter, Reporter};
use crate::runtime::Cluster;

#[derive(Debug, clap::Args)]
pub struct Args {
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
    pub nodes: NodeArgs,

    #[command(flatten)]
    pub target: TargetArgs,
}

pub async fn run(args: Args, ctx: &Context) -> CmdResult {
    match args.command {
        ImageCommand::Push(a) => push(a, ctx).await,
    }
}

/// The source (`--from`, else this machine, else the head) and the targets (`--to`, else every
/// other node) among `names` (head first); `local` is this machine's node, if it is one of them.
fn source_and_targets(
    args: &PushArgs,
    names: &[NodeName],
    local: Option<&NodeName>,
) -> Result<(NodeName, Vec<NodeName>), CmdError> {
    let known = |n: &NodeName| {
        if names.contains(n) {
            Ok(())
        } else {
            Err(anyhow::anyhow!(
                "no node named {n}; the nodes are {}",
                names
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .invalid()
        }
    };
    let source = match &args.from {
        Some(n) => {
            known(n)?;
            n.clone()
        }
        None => local
            .or_else(|| names.first())
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no nodes"))
            .invalid()?,
    };
    let to: Vec<NodeName> = if args.to.is_empty() {
        names.iter().filter(|n| **n != source).cloned().collect()
    } else {
        for n in &args.to {
            known(n)?;
        }
        args.to.clone()
    };
    Ok((source, to))
}

async fn push(args: PushArgs, ctx: &Context) -> CmdResult {
    if args.dry_run && args.target.uses_snapshots() {
        return plan_on_snapshots(&args, ctx);
    }
    let targets = resolve_targets(&args.nodes, &args.target, ctx).await?;
    let cluster = Cluster::new(targets);
    let local = cluster
        .nodes()
        .iter()
        .find(|n| n.target.is_local())
        .map(|n| n.name().clone());
    let (source, to) = source_and_targets(&args, &cluster.names(), local.as_ref())?;
    if args.dry_run {
        return plan_live(&cluster, &args, &source, &to, ctx).await;
    }
    let reporter: Arc<dyn Reporter> = if ctx.json {
        Arc::new(NullReporter)
    } else {
        ctx.reporter.clone()
    };
    let cancel = cancel_on_signals(ctx.reporter.clone());
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
        &reporter,
        &cancel,
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
                NodePush::Pushed { bytes, seconds } => vec![
                    "pushed".into(),
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
            PushAction::Push => format!("push from {source}"),
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

/// `image push --dry-run --snapshot …`: snapshots hold no images, so the plan says what a live
/// push compares and where it would stream from, with each node's CPU where the snapshot knows it.
fn plan_on_snapshots(args: &PushArgs, ctx: &Context) -> CmdResult {
    let nodes = super::args::read_snapshots(&args.target.snapshots).invalid()?;
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let (source, to) = source_and_targets(args, &names, None)?;
    let arch = |name: &NodeName| {
        nodes
            .iter()
            .find(|n| n.name == *name)
            .and_then(|n| n.facts.arch.clone())
    };
    let known: Vec<(NodeName, String)> = std::iter::once(&source)
        .chain(&to)
        .filter_map(|n| arch(n).map(|a| (n.clone(), a)))
        .collect();
    let mixed = crate::plan::image::mixed_arches(&known);
    let steps = [
        format!("read {} on {source} (it must be there)", args.image),
        format!(
            "compare it by content with what each of {} holds under that name",
            to.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
        ),
        "refuse a node whose CPU differs from the image's (unless it has its own build)"
            .to_string(),
        format!("stream one export from {source} to every node that lacks it, all at once"),
    ];
    if ctx.json {
        let targets: Vec<serde_json::Value> = to
            .iter()
            .map(|n| serde_json::json!({ "node": n, "arch": arch(n) }))
            .collect();
        print_json(&serde_json::json!({
            "dry_run": true,
            "image": args.image,
            "source": { "node": source, "arch": arch(&source) },
            "targets": targets,
            "mixed_arches": mixed,
            "steps": steps,
        }))?;
    } else {
        let mut out = format!("push {} (dry run on snapshots)\n", args.image);
        for (i, s) in steps.iter().enumerate() {
            out.push_str(&format!("  {}. {s}\n", i + 1));
        }
        for n in std::iter::once(&source).chain(&to) {
            out.push_str(&format!(
                "     {n}: {}\n",
                arch(n).unwrap_or_else(|| "CPU not in the snapshot".to_string())
            ));
        }
        if let Some(m) = &mixed {
            out.push_str(&format!(
                "  a mixed {} cluster: each CPU needs its own build of the image\n",
                m.join(" + ")
            ));
        }
        print_out(out.trim_end());
    }
    Ok(Outcome::Success)
}
