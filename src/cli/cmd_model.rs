//! `spark-launch model pull MODEL`: the weights on every node. The head downloads once from
//! the Hub (or already has the folder); every other node copies from the head over the fast
//! link, in parallel streams, resumable, keeping the Hugging Face cache layout. A GGUF spec
//! (`REPO:QUANT`, or `--gguf`) fetches only the file(s) llama.cpp's `-hf` would load, onto the
//! head alone. Flags and glue: one `pull::run` call, its report shown.

use super::args::NodeFlags;
use super::{CmdResult, Context, Invalid, coded, show};
use crate::model::ModelSource;
use crate::model::pull::PullRequest;
use crate::pull::{PullCommand, run as pull};

#[derive(Debug, clap::Args)]
pub struct ModelCmdArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Put a model's weights on every node: download once on the head, copy to the others
    /// over the fast link (parallel, resumable, skipping what is already there).
    Pull(PullArgs),
}

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// ORG/NAME[@REVISION] on the Hugging Face Hub, ORG/NAME:QUANT for the GGUF file(s) of
    /// one quant (as llama.cpp's -hf picks them; onto the head only), or an absolute folder on
    /// the head.
    pub model: String,

    /// A branch, tag or commit [default: main].
    #[arg(long)]
    pub revision: Option<String>,

    /// Only the GGUF file(s) llama.cpp would load from the repository (its default quant:
    /// Q4_K_M, else Q8_0, else the first), onto the head only; implied by ORG/NAME:QUANT.
    #[arg(long)]
    pub gguf: bool,

    /// The Hugging Face cache on every node [default: ~/.cache/huggingface of the SSH user].
    #[arg(long, value_name = "DIR")]
    pub hf_home: Option<String>,

    /// Long-lived copy streams per node (whole files spread over them; each its own SSH
    /// connection).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub streams: usize,

    /// Bytes per range in MiB: the unit of progress, retry and resume.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub range_mib: u64,

    /// Say what would be staged where, and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub target: NodeFlags,
}

pub async fn run(args: ModelCmdArgs, ctx: &Context) -> CmdResult {
    let ModelCommand::Pull(args) = args.command;
    let mut model = ModelSource::parse(&args.model, args.revision.as_deref()).invalid()?;
    if args.gguf {
        if let ModelSource::Local { .. } = model {
            return Err(anyhow::anyhow!(
                "--gguf picks GGUF file(s) of a Hub repository; {} is a folder on the head: leave out --gguf",
                args.model
            ))
            .invalid();
        }
        model = model.as_gguf();
    }
    let request = PullRequest {
        model,
        hf_home: args.hf_home.clone(),
        streams: args.streams.max(1),
        range_size: args.range_mib.max(1).saturating_mul(1024 * 1024),
    };
    let command = PullCommand {
        request,
        selection: args.target.selection(ctx),
        dry_run: args.dry_run,
    };
    match pull(&command, &ctx.reporter).await {
        Ok(report) => show(&report, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}
