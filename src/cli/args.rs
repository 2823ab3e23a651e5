//! Argument groups shared by many commands: which nodes to work on (`--snapshot`, `--hosts`,
//! `--nodes`) and how to launch (`--dry-run`, `--concurrency`, ...), plus the one resolver every
//! cluster command uses to turn them into nodes: [`resolve`] (facts of every node, head first,
//! and the live links) and [`configured_nodes`] / [`connect`] for commands that need less.
//!
//! ```ignore
//! #[derive(clap::Args)]
//! pub struct Args { #[command(flatten)] pub target: TargetArgs, /* ... */ }
//!
//! let cluster = args::resolve(&a.target, ctx).await?;   // snapshots, --hosts, --nodes or file
//! let env = derive::derive(&cluster.nodes)?;             // NodeInput, head first
//! if let Some(pool) = &cluster.pool {                    // None for --snapshot
//!     for node in pool.handles() {                       // the local node runs commands here
//!         let out = node.run(&["nvidia-smi", "-L"]).await?;
//!     }
//!     let targets = launch::node_targets(pool);          // the runtime's view (Docker over SSH)
//!     pool.close().await;
//! }
//! ```

use std::path::{Path, PathBuf};

use clap::Args;

use super::{CmdError, Context, Invalid};
use crate::apply::{NodeFailures, for_each_node};
use crate::derive::NodeInput;
use crate::inventory::{self, HostSpec, InventoryError, NodeConfig};
use crate::node::NodeName;
use crate::probe::{self, NodeFacts, ProbeError};
use crate::ssh::{self, Pool, SshOptions, SshTarget};

/// `NAME=DIR`: a probe snapshot standing in for a live node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotArg {
    pub name: NodeName,
    pub dir: PathBuf,
}

impl std::str::FromStr for SnapshotArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, dir) = s.split_once('=').ok_or_else(|| {
            format!("expected NAME=DIR (e.g. spark-a=./snapshots/spark-a), got {s:?}")
        })?;
        if dir.is_empty() {
            return Err(format!("no folder after '=' in {s:?}"));
        }
        let name = NodeName::new(name).map_err(|e| e.to_string())?;
        Ok(SnapshotArg {
            name,
            dir: PathBuf::from(dir),
        })
    }
}

/// Which nodes a cluster command works on. Without any of these: the cluster file.
#[derive(Clone, Debug, Default, Args)]
pub struct TargetArgs {
    /// Use a probe snapshot instead of a live node (repeat; the first is the head).
    #[arg(long = "snapshot", value_name = "NAME=DIR")]
    pub snapshots: Vec<SnapshotArg>,

    /// Nodes by address instead of the cluster file, comma-separated, the first is the head:
    /// [NAME=][user@]host[:port] (e.g. 169.254.3.7,spark-b=nvidia@169.254.3.8).
    #[arg(
        long,
        value_name = "HOSTS",
        value_delimiter = ',',
        conflicts_with = "snapshots"
    )]
    pub hosts: Vec<HostSpec>,

    /// Only these nodes of the cluster file (comma-separated names).
    #[arg(
        long = "nodes",
        value_name = "NAMES",
        value_delimiter = ',',
        conflicts_with_all = ["snapshots", "hosts"]
    )]
    pub nodes: Vec<NodeName>,
}

impl TargetArgs {
    pub fn uses_snapshots(&self) -> bool {
        !self.snapshots.is_empty()
    }

    /// Nodes named on the command line (`--hosts`), as opposed to the cluster file.
    pub fn uses_hosts(&self) -> bool {
        !self.hosts.is_empty()
    }
}

/// The nodes a live command works on, head first: `--hosts` if given, else the cluster file
/// (all nodes, or those named by `--nodes`). Invalid input is exit 2.
pub fn configured_nodes(
    target: &TargetArgs,
    cluster_file: &Path,
) -> Result<Vec<NodeConfig>, CmdError> {
    if target.uses_hosts() {
        let nodes: Vec<NodeConfig> = target.hosts.iter().map(HostSpec::to_node).collect();
        let mut seen = std::collections::BTreeSet::new();
        for n in &nodes {
            if !seen.insert(n.name.clone()) {
                return Err(anyhow::anyhow!(
                    "--hosts names node {} twice (give one entry per node, or name them: NAME=host)",
                    n.name
                ))
                .invalid();
            }
        }
        return Ok(nodes);
    }
    let inv = inventory::load(cluster_file).invalid()?;
    if inv.is_empty() {
        return Err(anyhow::anyhow!(
            "the cluster file {} has no nodes: add them with `spark-launch discover --save` or `spark-launch nodes add HOST`, or name them with `--hosts a,b`",
            cluster_file.display()
        ))
        .invalid();
    }
    if target.nodes.is_empty() {
        Ok(inv.ordered().into_iter().cloned().collect())
    } else {
        Ok(inv
            .select(&target.nodes)
            .invalid()?
            .into_iter()
            .cloned()
            .collect())
    }
}

/// This machine's facts (the local probe), used to recognise the local node.
pub async fn local_facts() -> Result<NodeFacts, CmdError> {
    let tree = tokio::task::spawn_blocking(probe::live::snapshot_local)
        .await
        .map_err(|e| anyhow::anyhow!("local probe: {e}"))??;
    Ok(probe::read_facts(&tree)?)
}

/// How to reach each node; the node that is this machine is marked local (no SSH).
pub fn ssh_targets(nodes: &[NodeConfig], local: &NodeFacts) -> Vec<SshTarget> {
    nodes
        .iter()
        .map(|n| SshTarget {
            name: n.name.clone(),
            addresses: n.addresses.clone(),
            user: n.user.clone(),
            port: n.port,
            local: inventory::is_this_machine(n, local),
        })
        .collect()
}

/// Connects to every node (in parallel; the local node needs no connection). Fails, listing
/// every node that could not be reached with its reason, unless all connected.
pub async fn connect(
    nodes: &[NodeConfig],
    local: &NodeFacts,
    ctx: &Context,
) -> Result<Pool, CmdError> {
    let targets = ssh_targets(nodes, local);
    let remote = targets.iter().filter(|t| !t.local).count();
    let step = ctx.reporter.step(&format!(
        "connect to {remote} node{}",
        if remote == 1 { "" } else { "s" }
    ));
    match Pool::connect(&targets, SshOptions::default()).await {
        Ok(pool) => {
            step.ok();
            Ok(pool)
        }
        Err(e) => {
            step.fail("");
            Err(e.into())
        }
    }
}

/// The nodes of a cluster command, resolved: their facts (head first) and, for live nodes,
/// the connections to them.
pub struct Cluster {
    pub nodes: Vec<NodeInput>,
    /// `None` when the nodes are snapshots.
    pub pool: Option<Pool>,
}

/// Resolves `--snapshot` / `--hosts` / `--nodes` / the cluster file into facts for every node,
/// head first. Live nodes are probed over SSH in parallel (the local node locally), with the
/// same reader as `probe --root`. Unreadable snapshots and invalid files are exit 2; nodes that
/// cannot be reached or probed are exit 1, every one of them named.
pub async fn resolve(target: &TargetArgs, ctx: &Context) -> Result<Cluster, CmdError> {
    if target.uses_snapshots() {
        return Ok(Cluster {
            nodes: read_snapshots(&target.snapshots).invalid()?,
            pool: None,
        });
    }
    let nodes = configured_nodes(target, &ctx.cluster_file)?;
    let local = local_facts().await?;
    let pool = connect(&nodes, &local, ctx).await?;
    let step = ctx.reporter.step(&format!("probe {} nodes", nodes.len()));
    let local = &local;
    let pool_ref = &pool;
    let results = for_each_node(pool.names(), pool.limit, |name| async move {
        let handle = pool_ref.get(&name)?;
        if handle.is_local() {
            Ok(local.clone())
        } else {
            ssh::probe::probe(handle).await
        }
    })
    .await;
    match crate::apply::all_ok(results) {
        Ok(facts) => {
            step.ok();
            Ok(Cluster {
                nodes: facts
                    .into_iter()
                    .map(|(name, facts)| NodeInput { name, facts })
                    .collect(),
                pool: Some(pool),
            })
        }
        Err(NodeFailures { total, failed }) => {
            step.fail("");
            pool.close().await;
            Err(anyhow::anyhow!("cannot probe: {}", NodeFailures { total, failed }).into())
        }
    }
}

/// Loads the cluster file for commands that edit it; a missing file is an empty cluster.
pub fn load_inventory(path: &Path) -> Result<inventory::Inventory, CmdError> {
    match inventory::load_or_empty(path) {
        Ok(inv) => Ok(inv),
        Err(e @ InventoryError::Invalid { .. }) => Err(e).invalid(),
        Err(e) => Err(e.into()),
    }
}

/// Reads every snapshot, reporting every unreadable one, in the order given (head first).
pub fn read_snapshots(snapshots: &[SnapshotArg]) -> Result<Vec<NodeInput>, SnapshotErrors> {
    let mut nodes = Vec::new();
    let mut errors = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for s in snapshots {
        if !seen.insert(s.name.clone()) {
            errors.push(format!("node name {} is given twice", s.name));
            continue;
        }
        match probe::read_snapshot_dir(&s.dir) {
            Ok(facts) => nodes.push(NodeInput {
                name: s.name.clone(),
                facts,
            }),
            Err(e) => errors.push(format!("{}: {}", s.name, describe(&e))),
        }
    }
    if errors.is_empty() {
        Ok(nodes)
    } else {
        Err(SnapshotErrors(errors))
    }
}

fn describe(e: &ProbeError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One or more snapshots could not be read; each line names the node.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the snapshots:\n  {}", .0.join("\n  "))]
pub struct SnapshotErrors(pub Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_argument_is_name_equals_dir() {
        let s: SnapshotArg = "spark-a=/tmp/x=y".parse().unwrap();
        assert_eq!(s.name.as_str(), "spark-a");
        assert_eq!(s.dir, PathBuf::from("/tmp/x=y"));
        assert!(
            "nodir"
                .parse::<SnapshotArg>()
                .unwrap_err()
                .contains("NAME=DIR")
        );
        assert!("bad name=/x".parse::<SnapshotArg>().is_err());
    }
}
