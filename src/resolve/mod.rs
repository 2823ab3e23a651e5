//! The resolve stage: what the user typed about *which nodes* — `--snapshot NAME=DIR`,
//! `--hosts`, the cluster file (or `--nodes` of it), `--engine NAME=SOCKET`, `--local` — becomes
//! one [`ResolvedCluster`]: the nodes, head first, with their facts where the command needs them
//! and the live links to them. One set of rules and one set of errors for every cluster command,
//! all checked before anything changes: nothing else in the crate reads
//! the cluster file for a command or connects to its nodes.
//!
//! The rules, in order:
//! - `--snapshot` folders stand in for nodes; they can only be planned on (`--dry-run`).
//! - `--engine` names nodes by a Docker socket on this machine (no shell, this machine's facts);
//!   it cannot be mixed with `--hosts` or `--nodes`.
//! - `--local` is this machine alone.
//! - `--hosts` names nodes by address; else the cluster file, all of it or its `--nodes`.
//! - With neither and no cluster file, [`Fallback`] says what the command does: refuse, or use
//!   this machine (with a warning where the user likely meant a cluster).
//!
//! Live nodes are connected over SSH in parallel (this machine needs no connection) and, when
//! the command needs facts, probed with the same reader as `probe --root`. Effects only through
//! `ssh` and `probe`; every decision about what to do with the nodes is the caller's.

mod selection;

pub use selection::{EngineRef, Selection, SnapshotRef};

use std::sync::Arc;

use crate::derive::NodeInput;
use crate::inventory::{self, InventoryError, NodeConfig, SshSettings};
use crate::node::{NodeFailures, NodeName, Role, for_each_node};
use crate::probe::{self, NodeFacts, ProbeError};
use crate::progress::Reporter;
use crate::runtime::remote::SshNode;
use crate::runtime::{Cluster, NodeTarget, Reach};
use crate::ssh::{Pool, PoolError, SshError, SshOptions, SshTarget};

/// What the command will do with the nodes it resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Plan only (`--dry-run`): snapshots may stand in for nodes; live nodes are still read.
    Plan,
    /// Act on live nodes: snapshots are refused.
    Act,
    /// Read what runs on live nodes (`status`, `logs`): a snapshot has nothing to show.
    Observe(&'static str),
}

/// What a command does when no node is named and there is no cluster file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Refuse, saying how to name nodes.
    Refuse,
    /// This machine alone (job commands: `run`, `status`, `stop`, ...).
    ThisMachine,
    /// This machine alone, with a warning that the cluster file is missing (`doctor`).
    ThisMachineWarn,
}

/// What to do about a node that cannot be reached or probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// Fail, naming every such node.
    Fail,
    /// Keep going with the others and report them (`doctor`: finding out is the point).
    Report,
}

/// What the command needs from the resolve stage.
#[derive(Clone, Copy, Debug)]
pub struct Needs {
    pub purpose: Purpose,
    /// Probe live nodes for their facts (derive, plans, doctor).
    pub facts: bool,
    pub fallback: Fallback,
    pub unreachable: Unreachable,
}

impl Needs {
    /// Facts of every node, all reachable; no cluster file is refused.
    pub fn facts(purpose: Purpose) -> Self {
        Needs {
            purpose,
            facts: true,
            fallback: Fallback::Refuse,
            unreachable: Unreachable::Fail,
        }
    }

    /// Only the nodes and the links to them (job commands), this machine when there is no
    /// cluster file.
    pub fn links(purpose: Purpose) -> Self {
        Needs {
            purpose,
            facts: false,
            fallback: Fallback::ThisMachine,
            unreachable: Unreachable::Fail,
        }
    }

    pub fn with_fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    pub fn with_unreachable(mut self, unreachable: Unreachable) -> Self {
        self.unreachable = unreachable;
        self
    }
}

/// One node of the resolved cluster: its three shapes side by side: what the user
/// wrote (`config`), what probe saw (`facts`) and the live link (`target`). Planning reads the
/// facts through [`ResolvedCluster::inputs`] (derive's `NodeInput`), the one conversion on the
/// launch path; the executor reads the targets through [`ResolvedCluster::runtime`].
#[derive(Clone, Debug)]
pub struct ResolvedNode {
    pub name: NodeName,
    pub role: Role,
    /// What the probe (or the snapshot) saw; `None` when the command needs no facts.
    pub facts: Option<NodeFacts>,
    /// How the cluster file or `--hosts` describes it (addresses, user, port); `None` for
    /// snapshots and `--engine` nodes.
    pub config: Option<NodeConfig>,
    /// The live link; `None` for snapshots.
    pub target: Option<NodeTarget>,
}

/// The nodes of one command, head first, and the live connections to them.
pub struct ResolvedCluster {
    pub nodes: Vec<ResolvedNode>,
    /// With [`Unreachable::Report`]: the nodes that could not be reached or probed, in the
    /// cluster's order, with why.
    pub unreachable: Vec<(NodeName, String)>,
    /// Snapshots stand in for the nodes: nothing can run on them.
    pub snapshots: bool,
    /// A warning the command should show (the cluster file is missing, this machine is used).
    pub warnings: Vec<String>,
    /// Every node the cluster file or `--hosts` named, reachable or not, head first (how the
    /// nodes reach each other: doctor's reach checks).
    pub configured: Vec<NodeConfig>,
    pool: Option<Pool>,
}

impl ResolvedCluster {
    pub fn names(&self) -> Vec<NodeName> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The facts of every node, head first (nodes resolved without facts are left out).
    pub fn inputs(&self) -> Vec<NodeInput> {
        self.nodes
            .iter()
            .filter_map(|n| {
                n.facts.as_ref().map(|f| NodeInput {
                    name: n.name.clone(),
                    facts: f.clone(),
                })
            })
            .collect()
    }

    pub fn node(&self, name: &NodeName) -> Option<&ResolvedNode> {
        self.nodes.iter().find(|n| &n.name == name)
    }

    /// The runtime's view of the live nodes (engines, shells, the job operations), head first.
    pub fn runtime(&self) -> Result<Cluster, ResolveError> {
        if self.snapshots {
            return Err(ResolveError::SnapshotsCannotRun);
        }
        Ok(Cluster::new(
            self.nodes.iter().filter_map(|n| n.target.clone()).collect(),
        ))
    }

    /// The live SSH connections (`None` for snapshots, `--engine` and this machine alone).
    pub fn pool(&self) -> Option<&Pool> {
        self.pool.as_ref()
    }

    /// Runs `work` on the cluster, then closes its SSH connections (masters and forwards)
    /// whatever `work` returned: an early return or `?` inside it included. The cluster is
    /// owned here, so nothing can use it after the close. Should the future be dropped before
    /// it ends (Ctrl-C on a read-only command, a panic), every SSH master still ends: a
    /// `Session` runs `ssh -O exit` when it is dropped.
    pub async fn scope<T>(self, work: impl AsyncFnOnce(&ResolvedCluster) -> T) -> T {
        let out = work(&self).await;
        if let Some(pool) = &self.pool {
            pool.close().await;
        }
        out
    }
}

/// The facts of the selected nodes, head first, with the connections closed again: for the
/// commands that only plan or record (`env`, `nodes probe`, the fit of `profiles`).
pub async fn inputs(
    selection: &Selection,
    needs: Needs,
    reporter: &Arc<dyn Reporter>,
) -> Result<Vec<NodeInput>, ResolveError> {
    let cluster = resolve(selection, needs, reporter).await?;
    Ok(cluster.scope(async |c| c.inputs()).await)
}

/// Why the nodes of a command could not be resolved. [`ResolveError::is_invalid_input`] tells
/// the user's mistakes (exit 2) from nodes that could not be reached (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "--snapshot stands in for nodes only with --dry-run: add --dry-run to plan on the snapshots, or give live nodes (the cluster file, --hosts or --engine)"
    )]
    SnapshotsNeedDryRun,
    #[error(
        "`{0}` reads what runs on live nodes, and a snapshot holds only a node's facts: give the nodes with the cluster file, --hosts or --engine instead of --snapshot"
    )]
    SnapshotsHoldNothingRunning(&'static str),
    #[error(
        "`{0}` works on live nodes over SSH: give them with the cluster file, --nodes or --hosts (not --snapshot, --engine or --local)"
    )]
    NeedsSsh(&'static str),
    #[error("snapshots stand in for nodes only to plan: nothing can run on them")]
    SnapshotsCannotRun,
    #[error("cannot read the snapshots:\n  {}", .0.join("\n  "))]
    Snapshots(Vec<String>),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error(transparent)]
    UnknownNodes(#[from] inventory::UnknownNodes),
    #[error(
        "the cluster file {0} has no nodes: add them with `spark-launch discover --save` or `spark-launch nodes add HOST`, or name them with `--hosts a,b`"
    )]
    NoNodes(String),
    #[error("cannot probe this machine: {0}")]
    LocalProbe(String),
    #[error("{0}")]
    Ssh(#[from] SshError),
    #[error("{0}")]
    Connect(#[from] PoolError),
    #[error("cannot probe: {0}")]
    Probe(NodeFailures<ProbeFailure>),
}

impl ResolveError {
    /// The user's input is wrong or refused (exit 2), as opposed to a node that could not be
    /// reached or probed (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            ResolveError::SnapshotsNeedDryRun
                | ResolveError::SnapshotsHoldNothingRunning(_)
                | ResolveError::SnapshotsCannotRun
                | ResolveError::NeedsSsh(_)
                | ResolveError::Snapshots(_)
                | ResolveError::Conflict(_)
                | ResolveError::UnknownNodes(_)
                | ResolveError::NoNodes(_)
                | ResolveError::Inventory(_)
        )
    }
}

/// A node that was reached but could not be probed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProbeFailure(String);

/// This machine's facts (the local probe), used to recognise the local node among the
/// configured ones and to stand in for nodes reached through a local socket.
pub async fn local_facts() -> Result<NodeFacts, ResolveError> {
    let tree = tokio::task::spawn_blocking(probe::live::snapshot_local)
        .await
        .map_err(|e| ResolveError::LocalProbe(e.to_string()))?
        .map_err(|e| ResolveError::LocalProbe(e.to_string()))?;
    probe::read_facts(&tree).map_err(|e| ResolveError::LocalProbe(e.to_string()))
}

/// This machine's name as a node name (its hostname, or `local`).
pub fn local_node_name() -> NodeName {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .and_then(|h| NodeName::new(h.trim()).ok())
        .unwrap_or_else(NodeName::local)
}

/// Resolves the nodes of one command (see the module docs for the rules).
pub async fn resolve(
    selection: &Selection,
    needs: Needs,
    reporter: &Arc<dyn Reporter>,
) -> Result<ResolvedCluster, ResolveError> {
    selection.check()?;
    if let Some(root) = &selection.root {
        let facts = probe::read_snapshot_dir(root).map_err(|e| {
            ResolveError::Snapshots(vec![format!("{}: {}", root.display(), describe(&e))])
        })?;
        let name = NodeName::new(facts.hostname.clone()).unwrap_or_else(|_| NodeName::local());
        let snapshot = SnapshotRef {
            name,
            dir: root.clone(),
        };
        return read_snapshots(std::slice::from_ref(&snapshot));
    }
    if !selection.snapshots.is_empty() {
        return match needs.purpose {
            Purpose::Plan => read_snapshots(&selection.snapshots),
            Purpose::Act => Err(ResolveError::SnapshotsNeedDryRun),
            Purpose::Observe(command) => Err(ResolveError::SnapshotsHoldNothingRunning(command)),
        };
    }
    if !selection.engines.is_empty() {
        return engines(&selection.engines, needs).await;
    }
    if selection.local {
        return this_machine(needs, Vec::new()).await;
    }
    let mut warnings = Vec::new();
    let (configured, ssh) = match configured(selection)? {
        Ok(found) => found,
        Err(none) => match needs.fallback {
            Fallback::Refuse => return Err(none),
            Fallback::ThisMachine | Fallback::ThisMachineWarn => {
                if needs.fallback == Fallback::ThisMachineWarn {
                    warnings.push(format!(
                        "no cluster file at {}: checking this machine only (add nodes with `spark-launch discover --save` or `spark-launch nodes add HOST`, or name them with --hosts)",
                        selection.cluster_file.display()
                    ));
                }
                return this_machine(needs, warnings).await;
            }
        },
    };
    let local = local_facts().await?;
    let targets = targets_of(&configured, &local);
    let remote = targets.iter().filter(|t| !t.local).count();
    let mut unreachable: Vec<(NodeName, String)> = Vec::new();
    let step = reporter.step(&format!(
        "connect to {remote} node{}",
        if remote == 1 { "" } else { "s" }
    ));
    let pool = match needs.unreachable {
        Unreachable::Fail => match Pool::connect(&targets, ssh_options(&ssh)).await {
            Ok(pool) => pool,
            Err(e) => {
                step.fail("");
                return Err(e.into());
            }
        },
        Unreachable::Report => {
            let mut pool = Pool::new(ssh_options(&ssh))?;
            unreachable = pool
                .connect_all(&targets, None)
                .await
                .into_iter()
                .map(|(n, e)| (n, e.to_string()))
                .collect();
            pool
        }
    };
    if unreachable.is_empty() {
        step.ok();
    } else {
        step.fail(&format!("{} unreachable", unreachable.len()));
    }
    let mut facts: Vec<(NodeName, Option<NodeFacts>)> =
        pool.names().into_iter().map(|n| (n, None)).collect();
    if needs.facts {
        match probe_all(&pool, &local, needs.unreachable, reporter).await {
            Ok((probed, failed)) => {
                facts = probed;
                unreachable.extend(failed);
            }
            Err(e) => {
                pool.close().await;
                return Err(e);
            }
        }
    }
    // The cluster's order (head first) for both lists.
    let order = |n: &NodeName| configured.iter().position(|c| &c.name == n);
    facts.sort_by_key(|(n, _)| order(n));
    unreachable.sort_by_key(|(n, _)| order(n));
    let nodes = facts
        .into_iter()
        .enumerate()
        .filter_map(|(i, (name, facts))| {
            let handle = pool.get(&name).ok()?;
            let role = if i == 0 { Role::Head } else { Role::Worker };
            let target = if handle.is_local() {
                NodeTarget::local(name.clone(), role)
            } else {
                NodeTarget {
                    name: name.clone(),
                    role,
                    reach: Reach::Remote(Arc::new(SshNode::new(handle.clone()))),
                    docker_socket: None,
                }
            };
            Some(ResolvedNode {
                config: configured.iter().find(|c| c.name == name).cloned(),
                name,
                role,
                facts,
                target: Some(target),
            })
        })
        .collect();
    Ok(ResolvedCluster {
        nodes,
        unreachable,
        snapshots: false,
        warnings,
        configured,
        pool: Some(pool),
    })
}

/// The facts of every node of `pool` (this machine's are `local`, already read), probed at
/// once. A node that cannot be probed fails them all ([`Unreachable::Fail`]) or is returned
/// beside the others' facts, with why ([`Unreachable::Report`]).
async fn probe_all(
    pool: &Pool,
    local: &NodeFacts,
    on_failure: Unreachable,
    reporter: &Arc<dyn Reporter>,
) -> Result<FactsAndFailures, ResolveError> {
    let n = pool.names().len();
    let step = reporter.step(&format!("probe {n} node{}", if n == 1 { "" } else { "s" }));
    let results = for_each_node(pool.names(), pool.limit, |name| async move {
        let handle = pool.get(&name).map_err(|e| ProbeFailure(e.to_string()))?;
        if handle.is_local() {
            Ok(local.clone())
        } else {
            let mut facts = crate::ssh::probe::probe(handle)
                .await
                .map_err(|e| ProbeFailure(e.to_string()))?;
            // What the node's own processes load for NCCL, read through its shell: the
            // emitter cannot (probe's module docs).
            let shell = SshNode::new(handle.clone());
            facts.host.nccl =
                Some(crate::runtime::host_nccl::read_through(&shell, facts.arch.as_deref()).await);
            Ok(facts)
        }
    })
    .await;
    let total = results.len();
    let mut facts = Vec::new();
    let mut failed = Vec::new();
    for (name, r) in results {
        match r {
            Ok(f) => facts.push((name, Some(f))),
            Err(e) => failed.push((name, e)),
        }
    }
    if !failed.is_empty() && on_failure == Unreachable::Fail {
        step.fail("");
        return Err(ResolveError::Probe(NodeFailures { total, failed }));
    }
    step.ok();
    let failed = failed
        .into_iter()
        .map(|(n, e)| (n, e.to_string()))
        .collect();
    Ok((facts, failed))
}

/// The nodes probed (their facts, if asked for) and those that could not be, with why.
type FactsAndFailures = (Vec<(NodeName, Option<NodeFacts>)>, Vec<(NodeName, String)>);

/// How to reach each configured node over SSH; the node that is this machine is marked local.
fn targets_of(configured: &[NodeConfig], local: &NodeFacts) -> Vec<SshTarget> {
    configured
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

/// The SSH targets of the selected nodes, by the same rules, without connecting: for `trust`,
/// whose first contact may need a password per node (`ssh::trust::connect`).
pub async fn ssh_targets(
    selection: &Selection,
    command: &'static str,
) -> Result<Vec<SshTarget>, ResolveError> {
    selection.check()?;
    if !selection.snapshots.is_empty() || !selection.engines.is_empty() || selection.local {
        return Err(ResolveError::NeedsSsh(command));
    }
    let (configured, _) = configured(selection)??;
    let local = local_facts().await?;
    Ok(targets_of(&configured, &local))
}

/// The SSH targets of the selected nodes and the options every connection to them gets (the
/// cluster file's `ssh:` settings over the defaults), without connecting: for commands that
/// connect by themselves (`sim up`'s trust between the nodes it made).
pub async fn ssh_links(
    selection: &Selection,
    command: &'static str,
) -> Result<(Vec<SshTarget>, SshOptions), ResolveError> {
    selection.check()?;
    if !selection.snapshots.is_empty() || !selection.engines.is_empty() || selection.local {
        return Err(ResolveError::NeedsSsh(command));
    }
    let (configured, ssh) = configured(selection)??;
    let local = local_facts().await?;
    Ok((targets_of(&configured, &local), ssh_options(&ssh)))
}

/// The options of every connection: the defaults, with the cluster file's key offered and
/// its known-hosts file, when it names one, as the only one (a host key not in it is refused,
/// and nothing is learned into the user's own files).
fn ssh_options(settings: &SshSettings) -> SshOptions {
    let mut opts = SshOptions {
        identity: settings.identity.clone(),
        ..SshOptions::default()
    };
    if let Some(k) = &settings.known_hosts {
        opts.known_hosts = vec![k.clone()];
        opts.accept_new_host_keys = false;
    }
    opts
}

/// The names of the nodes the cluster file at `path` lists, head first, reaching none of
/// them: what a command given this file would look for.
pub fn cluster_file_nodes(path: &std::path::Path) -> Result<Vec<NodeName>, ResolveError> {
    let inv = inventory::load(path)?;
    Ok(inv.ordered().into_iter().map(|n| n.name.clone()).collect())
}

/// The nodes `--hosts` or the cluster file name, head first; `Ok(Err(why))` when neither
/// names any (no `--hosts`, no `--nodes`, and no cluster file or an empty one), with the error
/// a command that needs nodes reports.
fn configured(
    selection: &Selection,
) -> Result<Result<(Vec<NodeConfig>, SshSettings), ResolveError>, ResolveError> {
    if !selection.hosts.is_empty() {
        return Ok(Ok((
            selection.hosts.iter().map(|h| h.to_node()).collect(),
            SshSettings::default(),
        )));
    }
    let inv = match inventory::load(&selection.cluster_file) {
        Ok(inv) => inv,
        Err(e @ InventoryError::Missing { .. }) if selection.nodes.is_empty() => {
            return Ok(Err(e.into()));
        }
        Err(e) => return Err(e.into()),
    };
    let empty = || ResolveError::NoNodes(selection.cluster_file.display().to_string());
    if inv.is_empty() {
        return if selection.nodes.is_empty() {
            Ok(Err(empty()))
        } else {
            Err(empty())
        };
    }
    let nodes = if selection.nodes.is_empty() {
        inv.ordered().into_iter().cloned().collect()
    } else {
        inv.select(&selection.nodes)?.into_iter().cloned().collect()
    };
    Ok(Ok((nodes, inv.ssh)))
}

/// This machine as the only node (`--local`, or no cluster file where the command allows it).
async fn this_machine(
    needs: Needs,
    warnings: Vec<String>,
) -> Result<ResolvedCluster, ResolveError> {
    let facts = if needs.facts {
        Some(local_facts().await?)
    } else {
        None
    };
    let name = local_node_name();
    let config = NodeConfig::new(name.clone(), "localhost");
    Ok(ResolvedCluster {
        configured: vec![config.clone()],
        nodes: vec![ResolvedNode {
            config: Some(config),
            target: Some(NodeTarget::local(name.clone(), Role::Head)),
            name,
            role: Role::Head,
            facts,
        }],
        unreachable: Vec::new(),
        snapshots: false,
        warnings,
        pool: None,
    })
}

/// Nodes given as Docker sockets on this machine: they share this machine's facts.
async fn engines(engines: &[EngineRef], needs: Needs) -> Result<ResolvedCluster, ResolveError> {
    let facts = if needs.facts {
        Some(local_facts().await?)
    } else {
        None
    };
    let nodes = engines
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let role = if i == 0 { Role::Head } else { Role::Worker };
            ResolvedNode {
                name: e.name.clone(),
                role,
                facts: facts.clone(),
                config: None,
                target: Some(match &e.endpoint {
                    None => NodeTarget::local(e.name.clone(), role),
                    Some(ep) => NodeTarget::engine_only(e.name.clone(), role, ep.clone()),
                }),
            }
        })
        .collect();
    Ok(ResolvedCluster {
        nodes,
        unreachable: Vec::new(),
        snapshots: false,
        warnings: Vec::new(),
        configured: Vec::new(),
        pool: None,
    })
}

/// Reads every snapshot, reporting every unreadable one, in the order given (head first).
fn read_snapshots(snapshots: &[SnapshotRef]) -> Result<ResolvedCluster, ResolveError> {
    let mut nodes = Vec::new();
    let mut errors = Vec::new();
    for (i, s) in snapshots.iter().enumerate() {
        match probe::read_snapshot_dir(&s.dir) {
            Ok(facts) => nodes.push(ResolvedNode {
                name: s.name.clone(),
                role: if i == 0 { Role::Head } else { Role::Worker },
                facts: Some(facts),
                config: None,
                target: None,
            }),
            Err(e) => errors.push(format!("{}: {}", s.name, describe(&e))),
        }
    }
    if !errors.is_empty() {
        return Err(ResolveError::Snapshots(errors));
    }
    Ok(ResolvedCluster {
        nodes,
        unreachable: Vec::new(),
        snapshots: true,
        warnings: Vec::new(),
        configured: Vec::new(),
        pool: None,
    })
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
