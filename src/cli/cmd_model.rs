//! `spark-launch model pull MODEL`: the weights on every node. The head downloads once from
//! the Hub (or already has the folder); every other node copies from the head over the fast
//! link, in parallel streams, resumable, keeping the Hugging Face cache layout. Flags and
//! rendering: the plan is `model::pull`'s, the work `apply::pull`'s.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::NodeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::pull::{PullError, pull};
use crate::model::ModelSource;
use crate::model::pull::{PullPlan, PullRequest, plan};
use crate::progress::human_bytes;
use crate::resolve::{self, Needs, Purpose};

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
    /// ORG/NAME[@REVISION] on the Hugging Face Hub, or an absolute folder on the head.
    pub model: String,

    /// A branch, tag or commit [default: main].
    #[arg(long)]
    pub revision: Option<String>,

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
    match args.command {
        ModelCommand::Pull(a) => pull_cmd(a, ctx).await,
    }
}

async fn pull_cmd(args: PullArgs, ctx: &Context) -> CmdResult {
    let req = PullRequest {
        model: ModelSource::parse(&args.model, args.revision.as_deref()).invalid()?,
        hf_home: args.hf_home.clone(),
        streams: args.streams.max(1),
        range_size: args.range_mib.max(1).saturating_mul(1024 * 1024),
    };
    let purpose = if args.dry_run {
        Purpose::Plan
    } else {
        Purpose::Act
    };
    let cluster = resolve::resolve(
        &args.target.selection(ctx),
        Needs::facts(purpose),
        &ctx.reporter,
    )
    .await
    .map_err(super::resolve_error)?;
    let Some(plan) = plan(&req, &cluster.inputs(), &crate::apply::stage::hf_endpoint()) else {
        cluster.close().await;
        return Err(anyhow::anyhow!("no nodes to pull to")).invalid();
    };
    if args.dry_run {
        cluster.close().await;
        if ctx.json {
            print_json(&plan)?;
        } else {
            print_out(&plan_text(&plan));
        }
        return Ok(Outcome::Success);
    }
    let pulled = pull(&req, &plan, &cluster, &ctx.reporter).await;
    cluster.close().await;
    let pulled = pulled.map_err(|e| {
        let code = match &e {
            PullError::Lookup(l) if l.is_refusal() => 2,
            _ => 1,
        };
        CmdError {
            code,
            error: e.into(),
        }
    })?;
    if ctx.json {
        print_json(&pulled)?;
        return Ok(Outcome::Success);
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "node",
        "fetched",
        "resumed",
        "already there",
        "time",
        "rate",
    ]);
    for r in &pulled.nodes {
        let secs = (r.millis as f64 / 1000.0).max(0.001);
        t.add_row(vec![
            r.node.to_string(),
            format!(
                "{} ({} files)",
                human_bytes(r.fetched_bytes),
                r.fetched_files
            ),
            human_bytes(r.resumed_bytes),
            format!(
                "{} ({} files)",
                human_bytes(r.present_bytes),
                r.present_files
            ),
            format!("{secs:.1}s"),
            if r.fetched_bytes > 0 {
                format!("{}/s", human_bytes((r.fetched_bytes as f64 / secs) as u64))
            } else {
                "-".into()
            },
        ]);
    }
    print_out(&t.to_string());
    Ok(Outcome::Success)
}

fn plan_text(p: &PullPlan) -> String {
    let mut out = format!("stage {} on {}\n", p.model, p.nodes.len());
    out.push_str(&format!(
        "  1. {}: download from {}\n",
        p.head, p.download_from
    ));
    for n in &p.nodes[1..] {
        out.push_str(&format!(
            "  2. {}: copy from {} ({} streams)\n",
            n.node,
            p.head_addr().unwrap_or(p.head.as_str()),
            p.streams
        ));
    }
    for n in &p.nodes {
        out.push_str(&format!("     {} keeps it in {}\n", n.node, n.dir));
    }
    out
}
