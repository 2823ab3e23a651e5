//! `spark-launch image push IMAGE [--to NODES]`: images on every node, compared by content,
//! streamed only where missing, all target nodes at once with a progress bar each. Flags and
//! glue: one `images::push` call, its report shown.

use super::args::{EngineFlags, NodeFlags};
use super::{CmdResult, Context, coded, show};
use crate::images::{ImagePushRequest, push};
use crate::node::NodeName;

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
    let ImageCommand::Push(a) = args.command;
    let mut selection = a.target.selection(ctx);
    selection.engines = a.engines.engines;
    let request = ImagePushRequest {
        selection,
        image: a.image,
        to: a.to,
        from: a.from,
        concurrency: a.concurrency,
        dry_run: a.dry_run,
    };
    match push(&request, &ctx.reporter, &ctx.cancel).await {
        Ok(report) => show(&report, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}
