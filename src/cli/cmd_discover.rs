//! `spark-launch discover`: find peers over mDNS (`_ssh._tcp`) on the fabric interfaces, one
//! row per node, and with `--save` merge them into the cluster file. Exit 1, naming the
//! interfaces browsed and the likely causes, when no other node answered.

use std::time::Duration;

use super::load_inventory;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::discover::{self, BrowseOptions, DiscoveredNode, InterfaceError, render};
use crate::inventory::{Added, save_edited};
use crate::node::NodeName;
use crate::probe::facts::NetIf;

#[derive(Debug, clap::Args)]
pub struct DiscoverArgs {
    /// Browse on this interface instead of the fabric (repeat, or separate with commas).
    #[arg(
        long = "interface",
        value_name = "IF",
        value_delimiter = ',',
        conflicts_with = "all_interfaces"
    )]
    pub interfaces: Vec<String>,

    /// Browse on every interface with an IPv4 address, not only the fabric.
    #[arg(long)]
    pub all_interfaces: bool,

    /// Seconds to wait when nothing answers; returns as soon as answers settle.
    #[arg(long, value_name = "SECONDS", default_value = "1.5", value_parser = parse_seconds)]
    pub timeout: Duration,

    /// Merge the nodes found into the cluster file (see `spark-launch nodes`).
    #[arg(long)]
    pub save: bool,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.05..=600.0).contains(&v) {
        return Err(format!("{v} s is out of range (0.05 to 600)"));
    }
    Ok(Duration::from_secs_f64(v))
}

pub async fn run(args: DiscoverArgs, ctx: &Context) -> CmdResult {
    let local = crate::resolve::local_facts()
        .await
        .map_err(super::resolve_error)?;
    let named: Vec<NetIf> = args.interfaces.iter().map(NetIf::new).collect();
    let choice = discover::choose_interfaces(&local, &named, args.all_interfaces).map_err(|e| {
        let code = match e {
            InterfaceError::Unknown(..) | InterfaceError::NoAddress(_) => 2,
            _ => 1,
        };
        CmdError {
            code,
            error: e.into(),
        }
    })?;
    for (i, why) in &choice.skipped {
        tracing::info!("not browsing fabric interface {i}: {why}");
    }
    let list = choice
        .interfaces
        .iter()
        .map(|i| i.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let step = ctx
        .reporter
        .step(&format!("browse mDNS for _ssh._tcp on {list}"));
    let opts = BrowseOptions {
        interfaces: choice.interfaces.clone(),
        timeout: args.timeout,
        quiet: discover::QUIET,
        local_addresses: local
            .interfaces
            .iter()
            .flat_map(|i| i.ipv4.iter().map(|a| a.addr))
            .collect(),
        sources: discover::sources(&local, &choice.interfaces),
    };
    let heard = tokio::task::spawn_blocking(move || discover::browse(&opts))
        .await
        .map_err(|e| anyhow::anyhow!("mDNS browse: {e}"))??;
    let nodes = discover::group(&heard.answers, &local, &choice.interfaces);
    let peers = nodes.iter().filter(|n| !n.local).count();
    if peers == 0 {
        step.fail("no other node answered");
        if ctx.json {
            print_json(&nodes)?;
        }
        return Err(anyhow::anyhow!(
            "{}",
            render::nothing_found(&choice.interfaces, &local, heard.took)
        )
        .into());
    }
    step.ok_with(&format!(
        "{} node{} in {:.1}s",
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" },
        heard.took.as_secs_f64()
    ));
    if ctx.json {
        print_json(&nodes)?;
    } else {
        print_out(&render::table(&nodes));
    }
    if args.save {
        save_nodes(&nodes, ctx)?;
    }
    Ok(Outcome::Success)
}

fn save_nodes(nodes: &[DiscoveredNode], ctx: &Context) -> Result<(), CmdError> {
    let before = load_inventory(&ctx.cluster_file)?;
    let mut inv = before.clone();
    let mut changed = 0;
    for n in nodes {
        let name = NodeName::new(n.name.clone())
            .map_err(|e| anyhow::anyhow!("cannot save {}: {e}", n.fqdn))
            .invalid()?;
        let addrs: Vec<String> = n.addresses.iter().map(|a| a.ip.to_string()).collect();
        if inv.merge_discovered(name, addrs) != Added::Unchanged {
            changed += 1;
        }
    }
    let step = ctx
        .reporter
        .step(&format!("save to {}", ctx.cluster_file.display()));
    if changed == 0 {
        step.ok_with("every node found is already there; nothing changed");
        return Ok(());
    }
    save_edited(&ctx.cluster_file, &before, &inv)?;
    step.ok_with(&format!(
        "{changed} node{} added or updated",
        if changed == 1 { "" } else { "s" }
    ));
    Ok(())
}
