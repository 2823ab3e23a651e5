//! `spark-launch image push IMAGE [--to NODES]`: images on every node, compared by content,
//! streamed only where missing, all target nodes at once with a progress bar each.

use std::sync::Arc;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::TargetArgs;
use super::launch::{NodeArgs, cancel_on_signals, resolve_targets};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::images::PushError;
use crate::apply::{NodePush, push_image};
use crate::node::NodeName;
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

async fn push(args: PushArgs, ctx: &Context) -> CmdResult {
    let targets = resolve_targets(&args.nodes, &args.target, ctx).await?;
    let cluster = Cluster::new(targets);
    let source = match &args.from {
        Some(n) => {
            cluster.node(n).invalid()?;
            n.clone()
        }
        None => cluster
            .nodes()
            .iter()
            .find(|n| n.target.is_local())
            .or_else(|| cluster.head())
            .map(|n| n.name().clone())
            .ok_or_else(|| anyhow::anyhow!("no nodes"))
            .invalid()?,
    };
    let to: Vec<NodeName> = if args.to.is_empty() {
        cluster
            .names()
            .into_iter()
            .filter(|n| *n != source)
            .collect()
    } else {
        for n in &args.to {
            cluster.node(n).invalid()?;
        }
        args.to.clone()
    };
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
        Err(e @ (PushError::NotOnSource { .. } | PushError::Nowhere { .. })) => {
            step.fail("not found");
            return Err(CmdError {
                code: 2,
                error: e.into(),
            });
        }
        Err(e) => {
            step.fail("failed");
            return Err(e.into());
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
