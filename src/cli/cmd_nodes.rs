//! `spark-launch nodes`: list the cluster file, `nodes add HOST`, `nodes rm NAME`, and
//! `nodes probe` (probe every node over SSH and cache its fabric facts in the file).

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::{TargetArgs, load_inventory, resolve};
use super::{CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::inventory::{Added, FabricCache, HostSpec, Inventory, NodeConfig, save};
use crate::node::{NodeName, Role};

#[derive(Debug, clap::Args)]
pub struct Args {
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
        target: TargetArgs,
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

pub async fn run(args: Args, ctx: &Context) -> CmdResult {
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
    print_out(&table(&inv));
    Ok(Outcome::Success)
}

/// The listing: one row per node, head first.
pub fn table(inv: &Inventory) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "node",
        "role",
        "addresses",
        "user",
        "port",
        "fabric (cached)",
    ]);
    let head = inv.head().map(|h| h.name.clone());
    for n in inv.ordered() {
        let role = if Some(&n.name) == head.as_ref() {
            Role::Head
        } else {
            Role::Worker
        };
        let fabric = n
            .fabric
            .as_ref()
            .map(|f| {
                f.interfaces
                    .iter()
                    .filter(|i| i.active)
                    .map(|i| format!("{} ({})", i.name, i.rdma_device))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "-".into());
        t.add_row(vec![
            n.name.to_string(),
            role.to_string(),
            n.addresses.join(", "),
            n.user.clone().unwrap_or_else(|| "(yours)".into()),
            n.port.to_string(),
            fabric,
        ]);
    }
    t.to_string()
}

fn add(a: AddArgs, ctx: &Context) -> CmdResult {
    let mut inv = load_inventory(&ctx.cluster_file)?;
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
        save(&ctx.cluster_file, &inv)?;
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
    let mut inv = load_inventory(&ctx.cluster_file)?;
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
    save(&ctx.cluster_file, &inv)?;
    if ctx.json {
        print_json(&serde_json::json!({ "removed": name }))?;
    } else {
        print_out(&format!("removed {name}"));
    }
    Ok(Outcome::Success)
}

async fn probe(target: TargetArgs, ctx: &Context) -> CmdResult {
    if target.uses_snapshots() || target.uses_hosts() {
        return Err(anyhow::anyhow!(
            "`nodes probe` caches facts of the cluster file's nodes: use --nodes to choose some, not --snapshot or --hosts"
        ))
        .invalid();
    }
    let cluster = resolve(&target, ctx).await?;
    if let Some(pool) = &cluster.pool {
        pool.close().await;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut inv = load_inventory(&ctx.cluster_file)?;
    for n in &cluster.nodes {
        if let Some(cfg) = inv.nodes.iter_mut().find(|c| c.name == n.name) {
            cfg.fabric = Some(FabricCache::from_facts(&n.facts, now));
        }
    }
    save(&ctx.cluster_file, &inv)?;
    if ctx.json {
        print_json(&inv.nodes)?;
    } else {
        print_out(&table(&inv));
    }
    Ok(Outcome::Success)
}
