//! `spark-launch env`: the variables derived for every node, as JSON, shell, docker args or
//! a readable listing.

use std::path::PathBuf;

use super::args::NodeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::derive::{ClusterEnv, NodeEnv, NodeInput, derive};
use crate::node::NodeName;
use crate::quote::{NulByte, Style, quote};

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
        Format::Text => print_out(&text(&cluster, &selected)),
        Format::Sh => print_out(&shell(&selected).invalid()?),
        Format::Docker => print_out(&docker(&selected).invalid()?),
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

fn text(cluster: &ClusterEnv, nodes: &[&NodeEnv]) -> String {
    let mut out = format!("topology: {}   head: {}\n", cluster.topology, cluster.head);
    for n in nodes {
        out.push_str(&format!("\n{} ({})\n", n.name, n.role));
        for (k, v) in &n.env {
            out.push_str(&format!("  {k}={v}\n"));
        }
        for w in &n.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
    }
    out
}

fn shell(nodes: &[&NodeEnv]) -> Result<String, NulByte> {
    let mut out = String::new();
    for n in nodes {
        if nodes.len() > 1 {
            out.push_str(&format!("# node {} ({})\n", n.name, n.role));
        }
        for w in &n.warnings {
            out.push_str(&format!("# warning: {w}\n"));
        }
        for (k, v) in &n.env {
            out.push_str(&format!("export {k}={}\n", quote(v, Style::Plain)?));
        }
    }
    Ok(out)
}

fn docker(nodes: &[&NodeEnv]) -> Result<String, NulByte> {
    let mut out = String::new();
    for n in nodes {
        if nodes.len() > 1 {
            out.push_str(&format!("# node {} ({})\n", n.name, n.role));
        }
        let args: Vec<String> = n
            .env
            .iter()
            .map(|(k, v)| Ok(format!("-e {}", quote(&format!("{k}={v}"), Style::Plain)?)))
            .collect::<Result<_, NulByte>>()?;
        out.push_str(&args.join(" "));
        out.push('\n');
    }
    Ok(out)
}
