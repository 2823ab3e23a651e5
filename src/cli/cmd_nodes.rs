//! `spark-launch nodes`: list the cluster file, `nodes add HOST`, `nodes rm NAME`, and
//! `nodes probe` (probe every node over SSH and cache its fabric facts in the file). Every
//! change edits only the lines of the nodes concerned (`inventory::edit`).

use super::args::NodeFlags;
use super::load_inventory;
use super::{CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::inventory::{Added, HostSpec, NodeConfig, save_edited};
use crate::node::{NodeName, Role};

#[derive(Debug, clap::Args)]
pub struct NodesArgs {
    #[command(subcommand)]
    pub action: Option<Action>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// List the nodes (the default).
    List,
    /// Add a node, or more addresses to a known one: [NAME=][user@]host[:port].
    Add(AddArgs),
    /// Remove a node by name.
    Rm {
        /// The node's name (see `spark-launch nodes`).
        name: NodeName,
    },
    /// Probe every node over SSH and cache its fabric facts in the cluster file.
    Probe {
        #[command(flatten)]
        target: NodeFlags,
    },
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The node: [NAME=][user@]host[:port], e.g. spark-b=nvidia@169.254.3.8.
    pub host: HostSpec,
    /// Make it the head (the node that runs rank 0 and the API server).
    #[arg(long)]
    pub head: bool,
}

pub async fn run(args: NodesArgs, ctx: &Context) -> CmdResult {
    match args.action.unwrap_or(Action::List) {
        Action::List => list(ctx),
        Action::Add(a) => add(a, ctx),
        Action::Rm { name } => rm(&name, ctx),
        Action::Probe { target } => probe(target, ctx).await,
    }
}

fn list(ctx: &Context) -> CmdResult {
    let inv = load_inventory(&ctx.cluster_file)?;
    if ctx.json {
        print_json(&inv.nodes)?;
        return Ok(Outcome::Success);
    }
    if inv.is_empty() {
        print_out(&format!(
            "no nodes in {} yet: `spark-launch discover --save` finds them on the fabric, `spark-launch nodes add HOST` adds one",
            ctx.cluster_file.display()
        ));
        return Ok(Outcome::Success);
    }
    print_out(&inv.table());
    Ok(Outcome::Success)
}

fn add(a: AddArgs, ctx: &Context) -> CmdResult {
    let before = load_inventory(&ctx.cluster_file)?;
    let mut inv = before.clone();
    let mut node: NodeConfig = a.host.to_node();
    if a.head {
        for n in inv.nodes.iter_mut() {
            if n.role == Some(Role::Head) && n.name != node.name {
                n.role = Some(Role::Worker);
            }
        }
        node.role = Some(Role::Head);
    }
    let name = node.name.clone();
    let what = inv.add(node);
    if let Some((_, problem)) = inv.problems().into_iter().next() {
        return Err(anyhow::anyhow!("{problem}")).invalid();
    }
    let text = match &what {
        Added::New => format!("added {name} to {}", ctx.cluster_file.display()),
        Added::Merged(addrs) if addrs.is_empty() => format!("updated {name}"),
        Added::Merged(addrs) => format!("added {} to {name}", addrs.join(", ")),
        Added::Unchanged => format!("{name} is already in the cluster file; nothing changed"),
    };
    if what != Added::Unchanged {
        // Only the lines of the nodes concerned change; the user's comments stay.
        save_edited(&ctx.cluster_file, &before, &inv)?;
    }
    if ctx.json {
        print_json(&serde_json::json!({
            "node": name,
            "changed": what != Added::Unchanged,
        }))?;
    } else {
        print_out(&text);
    }
    Ok(Outcome::Success)
}

fn rm(name: &NodeName, ctx: &Context) -> CmdResult {
    let before = load_inventory(&ctx.cluster_file)?;
    let mut inv = before.clone();
    if inv.remove(name).is_none() {
        let known: Vec<&str> = inv.nodes.iter().map(|n| n.name.as_str()).collect();
        return Err(anyhow::anyhow!(
            "no node named {name} in {} (it has: {})",
            ctx.cluster_file.display(),
            if known.is_empty() {
                "no nodes".to_string()
            } else {
                known.join(", ")
            }
        ))
        .invalid();
    }
    save_edited(&ctx.cluster_file, &before, &inv)?;
    if ctx.json {
        print_json(&serde_json::json!({ "removed": name }))?;
    } else {
        print_out(&format!("removed {name}"));
    }
    Ok(Outcome::Success)
}

async fn probe(target: NodeFlags, ctx: &Context) -> CmdResult {
    if target.uses_snapshots() || !target.hosts.is_empty() {
        return Err(anyhow::anyhow!(
            "`nodes probe` caches facts of the cluster file's nodes: use --nodes to choose some, not --snapshot or --hosts"
        ))
        .invalid();
    }
    let nodes = crate::resolve::inputs(
        &target.selection(ctx),
        crate::resolve::Needs::facts(crate::resolve::Purpose::Act),
        &ctx.reporter,
    )
    .await
    .map_err(super::resolve_error)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let before = load_inventory(&ctx.cluster_file)?;
    let mut inv = before.clone();
    inv.cache_facts(&nodes, now);
    save_edited(&ctx.cluster_file, &before, &inv)?;
    if ctx.json {
        print_json(&inv.nodes)?;
    } else {
        print_out(&inv.table());
    }
    Ok(Outcome::Success)
}
