//! `spark-launch env`: the variables derived for every node, as JSON, shell, docker args or
//! a readable listing.

use std::path::PathBuf;

use super::args::NodeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::derive::{NodeEnv, NodeInput, derive, render};
use crate::node::NodeName;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A readable listing per node.
    Text,
    /// The same as `--json`.
    Json,
    /// `export VAR=value` lines (one block per node).
    Sh,
    /// `-e VAR=value` arguments for `docker run`.
    Docker,
}

#[derive(Debug, clap::Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// One node only: a snapshot folder (its hostname names the node).
    #[arg(long, value_name = "DIR", conflicts_with = "snapshots")]
    pub root: Option<PathBuf>,

    /// Output format [default: text, or json with --json].
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// Print only this node (for `eval "$(spark-launch env --format sh --node NAME ...)"`).
    #[arg(long, value_name = "NAME")]
    pub node: Option<NodeName>,
}

pub async fn run(args: EnvArgs, ctx: &Context) -> CmdResult {
    let nodes = inputs(&args, ctx).await?;
    let format = args
        .format
        .unwrap_or(if ctx.json { Format::Json } else { Format::Text });
    let cluster = match derive(&nodes) {
        Ok(c) => c,
        Err(refusal) => {
            if format == Format::Json {
                print_json(&serde_json::json!({ "refused": refusal.violations }))?;
            }
            return Err(refusal).invalid();
        }
    };
    let selected: Vec<&NodeEnv> = match &args.node {
        Some(name) => match cluster.node(name) {
            Some(n) => vec![n],
            None => {
                return Err(anyhow::anyhow!(
                    "no node named {name} (nodes: {})",
                    cluster
                        .nodes
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .invalid();
            }
        },
        None => cluster.nodes.iter().collect(),
    };
    for n in &selected {
        for w in &n.warnings {
            tracing::info!("{}: {}", n.name, w);
        }
    }
    match format {
        Format::Json => print_json(&cluster)?,
        Format::Text => print_out(&render::text(&cluster, &selected)),
        Format::Sh => print_out(&render::shell(&selected).invalid()?),
        Format::Docker => print_out(&render::docker(&selected).invalid()?),
    }
    Ok(Outcome::Success)
}

/// The nodes: `--root DIR` (one snapshot), else `--snapshot`, `--hosts`, `--nodes` or the
/// cluster file through the resolve stage (live nodes probed over SSH).
async fn inputs(args: &EnvArgs, ctx: &Context) -> Result<Vec<NodeInput>, CmdError> {
    let mut selection = args.target.selection(ctx);
    selection.root = args.root.clone();
    crate::resolve::inputs(
        &selection,
        crate::resolve::Needs::facts(crate::resolve::Purpose::Plan),
        &ctx.reporter,
    )
    .await
    .map_err(super::resolve_error)
}
