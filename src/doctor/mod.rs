//! Named, independent checks of a cluster, each with a stable id (`fabric.twins-same-subnet`),
//! a plain-language failure text and the fix.
//!
//! Every check is a pure function of [`Inputs`]: the probe facts of every node, what `derive`
//! made of them, the user's options and — for live checks — the observations gathered on the
//! live nodes (`live::Observations`, made by running `live::script` on each node through the
//! SSH layer). Only [`gather`] touches the world (it resolves the nodes and runs the script on
//! them); the rest of this module judges what it gathered. A check that
//! needs live observations on a `--snapshot` run is skipped, with the reason.
//!
//! Fabric rules are `derive`'s: the checks wrap its `Refusal` violations and build on its
//! topology and twin helpers rather than restating them.

pub mod cabling;
pub mod check;
pub mod cluster;
pub mod fabric;
pub mod gather;
pub mod host;
pub mod live;
pub mod logs;
pub mod reach;
pub mod render;

#[cfg(test)]
pub(crate) mod testkit;

use std::collections::BTreeMap;

use serde::Serialize;

pub use check::{
    Category, CheckInfo, CheckNeeds, CheckStatus, Evaluation, Finding, Fix, Note, Severity,
};
pub use live::{ModelRef, Observations};

use crate::derive::{ClusterEnv, NodeInput, Refusal};
use crate::node::NodeName;
use crate::workload::engines::{self, EngineKind, EngineOptions, EnginePort, PortOn};

/// Where a port must be free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortScope {
    /// Only the head listens there (API server, rendezvous, Ray GCS).
    Head,
    /// Every node listens there (the containers' sshd).
    Every,
}

/// A TCP port (or a range of them) a workload needs free.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PortUse {
    pub port: u16,
    /// `port` for one port; the end of a range the workload picks ports from (Ray's workers).
    pub last: u16,
    pub what: String,
    pub scope: PortScope,
}

impl PortUse {
    pub fn new(port: u16, what: &str, scope: PortScope) -> PortUse {
        PortUse {
            port,
            last: port,
            what: what.to_string(),
            scope,
        }
    }

    /// An engine's port as doctor checks it.
    fn of(p: &EnginePort) -> PortUse {
        PortUse {
            port: p.first,
            last: p.last,
            what: p.what.to_string(),
            scope: match p.on {
                PortOn::Head => PortScope::Head,
                PortOn::Every => PortScope::Every,
            },
        }
    }
}

/// The ports the serving engines bind in their multi-node modes with default options (the
/// engine seam's `default_ports`): what doctor checks when not told which launch comes.
pub fn default_ports() -> Vec<PortUse> {
    engines::default_ports().iter().map(PortUse::of).collect()
}

/// The ports one serving launch binds on `nodes` nodes (`engine` with `tuning`, its API on
/// `api`), ranges included: the same list its plan's CheckPorts and CheckReachable come from.
pub fn serving_ports(
    engine: EngineKind,
    tuning: &EngineOptions,
    api: u16,
    nodes: usize,
) -> Vec<PortUse> {
    engine
        .engine()
        .ports(tuning, api, nodes)
        .iter()
        .map(PortUse::of)
        .collect()
}

/// What the user asked doctor to look at, beyond the nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The image the cluster will run (digest, architecture, container memlock, disk checks).
    pub image: Option<String>,
    /// A model whose weights must be on every node.
    pub model: Option<ModelRef>,
    /// What `model`'s files say about its memory, as read before judging (`None`: no model,
    /// or not read).
    pub footprint: Option<crate::model::footprint::Footprint>,
    pub ports: Vec<PortUse>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            image: None,
            model: None,
            footprint: None,
            ports: default_ports(),
        }
    }
}

/// Everything a check may look at.
pub struct Inputs<'a> {
    /// Every node, head first.
    pub nodes: &'a [NodeInput],
    /// `derive` run on `nodes`: the environment, or every violation it refused.
    pub derived: &'a Result<ClusterEnv, Refusal>,
    pub options: &'a Options,
    /// Observations from the live nodes; `None` on snapshots. A node whose gathering failed
    /// maps to the reason.
    pub live: Option<&'a BTreeMap<NodeName, Result<Observations, String>>>,
    /// Live nodes that could not be reached or probed at all, with the reason: they have no
    /// facts, `reach.ssh` fails them and every other check skips them.
    pub unreachable: &'a [(NodeName, String)],
}

impl<'a> Inputs<'a> {
    pub fn head(&self) -> Option<&'a NodeInput> {
        self.nodes.first()
    }

    /// Every node that has live observations, head first; every other node is skipped in `e`
    /// with the reason.
    pub fn observed_nodes(&self, e: &mut Evaluation) -> Vec<(&'a NodeInput, &'a Observations)> {
        let mut out = Vec::new();
        for n in self.nodes {
            match self.observed(&n.name) {
                Ok(o) => out.push((n, o)),
                Err(why) => e.skip(&n.name, why),
            }
        }
        out
    }

    /// The live observations of `node`, or why there are none.
    pub fn observed(&self, node: &NodeName) -> Result<&'a Observations, String> {
        match self.live {
            None => Err("needs live nodes (this run reads snapshots)".to_string()),
            Some(map) => match map.get(node) {
                Some(Ok(o)) => Ok(o),
                Some(Err(e)) => Err(format!("could not gather on this node: {e}")),
                None => Err("no observations from this node".to_string()),
            },
        }
    }
}

/// One check: its identity and its pure judgement.
#[derive(Clone, Copy)]
pub struct Check {
    pub info: CheckInfo,
    pub run: fn(&Inputs) -> Evaluation,
}

/// Every node check, in the order the table shows them. Ids are stable: scripts match on them.
pub fn checks() -> Vec<Check> {
    let mut all = Vec::new();
    all.extend(fabric::CHECKS.iter().copied());
    all.extend(cabling::CHECKS.iter().copied());
    all.extend(reach::CHECKS.iter().copied());
    all.extend(host::CHECKS.iter().copied());
    all.extend(cluster::CHECKS.iter().copied());
    all
}

/// The result of one check over the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    #[serde(flatten)]
    pub info: CheckInfo,
    /// The worst verdict over all nodes.
    pub status: CheckStatus,
    /// The verdict per node, in cluster order.
    #[serde(serialize_with = "ser_cells")]
    pub nodes: Vec<(NodeName, CheckStatus)>,
    pub findings: Vec<Finding>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_skipped")]
    pub skipped: Vec<(NodeName, String)>,
}

fn ser_cells<S: serde::Serializer>(
    cells: &[(NodeName, CheckStatus)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(cells.len()))?;
    for (n, st) in cells {
        m.serialize_entry(n.as_str(), st)?;
    }
    m.end()
}

fn ser_skipped<S: serde::Serializer>(
    skipped: &[(NodeName, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    #[derive(Serialize)]
    struct One<'a> {
        node: &'a NodeName,
        reason: &'a str,
    }
    let mut seq = s.serialize_seq(Some(skipped.len()))?;
    for (node, reason) in skipped {
        seq.serialize_element(&One { node, reason })?;
    }
    seq.end()
}

/// Counts of verdicts, one per (check, node) cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
    pub skipped: usize,
}

/// Everything doctor found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Node names, head first.
    pub nodes: Vec<NodeName>,
    pub summary: Summary,
    pub checks: Vec<CheckReport>,
    /// `--log FILE` analyses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<logs::LogReport>,
}

impl Report {
    /// True when any check or log analysis failed: the command then exits 1.
    pub fn failed(&self) -> bool {
        self.summary.fail > 0 || self.logs.iter().any(|l| l.status() == CheckStatus::Fail)
    }
}

/// Which checks to run: ids or category prefixes (`fabric`, `host.cma`); empty means all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSelection {
    pub only: Vec<String>,
    pub skip: Vec<String>,
}

impl CheckSelection {
    fn matches(pattern: &str, id: &str) -> bool {
        id == pattern
            || id
                .strip_prefix(pattern)
                .is_some_and(|rest| rest.starts_with('.'))
    }

    pub fn wants(&self, id: &str) -> bool {
        (self.only.is_empty() || self.only.iter().any(|p| Self::matches(p, id)))
            && !self.skip.iter().any(|p| Self::matches(p, id))
    }

    /// Patterns that match no check (a typo the user should hear about).
    pub fn unknown(&self) -> Vec<&str> {
        let all = checks();
        self.only
            .iter()
            .chain(&self.skip)
            .filter(|p| !all.iter().any(|c| Self::matches(p, c.info.id)))
            .map(|p| p.as_str())
            .collect()
    }
}

/// Checks that look only at RDMA devices and what hangs off them (twins, fabric interfaces and
/// addresses, their links): on a node with no RDMA device they have nothing to look at
/// (`fabric.rdma-active` and `host.infiniband-dev` say what is missing).
const ON_RDMA: &[&str] = &[
    "fabric.twins-active",
    "fabric.twins-used",
    "fabric.twins-same-subnet",
    "fabric.duplicate-address",
    "fabric.subnet-overlap",
    "fabric.mtu-mismatch",
    "fabric.mtu-path",
    "fabric.link-speed",
    "fabric.roce-gid",
    "fabric.interfaces",
    "fabric.cabling-ports",
    "reach.fabric",
];

/// Checks that compare nodes with each other or reach one node from another: a cluster of one
/// node has nothing for them to compare or reach. (The image and model checks also find a copy
/// missing on a node, which one node can show.)
const BETWEEN_NODES: &[&str] = &[
    "fabric.control-plane",
    "fabric.mtu-mismatch",
    "fabric.mtu-path",
    "fabric.cabling-ports",
    "fabric.ring-wiring",
    "fabric.ring-direction",
    "reach.ssh",
    "reach.fabric",
    "host.kernel",
    "host.nccl",
];

/// A check that found nothing wrong on a node where it had nothing to look at is a skip that
/// says why, never an ok: one node for a check between nodes, no RDMA device for a check of
/// the fabric. Its findings, where it made any, stand.
fn skip_nothing_to_check(inputs: &Inputs, id: &str, e: &mut Evaluation) {
    let one = inputs.nodes.len() + inputs.unreachable.len() == 1;
    for n in inputs.nodes {
        if e.status_of(&n.name) != CheckStatus::Ok {
            continue;
        }
        if one && BETWEEN_NODES.contains(&id) {
            e.skip(
                &n.name,
                "one node: nothing to compare or reach between nodes",
            );
        } else if ON_RDMA.contains(&id) && n.facts.rdma_devices.is_empty() {
            e.skip(&n.name, "no RDMA device on this node: nothing to check");
        }
    }
}

/// Runs every selected check and assembles the report (log analyses are added by the caller).
pub fn run(inputs: &Inputs, selection: &CheckSelection) -> Report {
    let mut names: Vec<NodeName> = inputs.nodes.iter().map(|n| n.name.clone()).collect();
    names.extend(inputs.unreachable.iter().map(|(n, _)| n.clone()));
    let mut summary = Summary::default();
    let mut reports = Vec::new();
    for check in checks().into_iter().filter(|c| selection.wants(c.info.id)) {
        let mut eval = if check.info.needs == CheckNeeds::Live && inputs.live.is_none() {
            let mut e = Evaluation::default();
            for n in &names {
                e.skip(n, "needs live nodes (this run reads snapshots)");
            }
            e
        } else {
            (check.run)(inputs)
        };
        if fabric::READS_ADDRESSES.contains(&check.info.id) {
            fabric::skip_unrecorded_addresses(inputs, &mut eval);
        }
        skip_nothing_to_check(inputs, check.info.id, &mut eval);
        for (node, why) in inputs.unreachable {
            if !eval.findings.iter().any(|f| &f.node == node) {
                eval.skip(node, format!("not reachable ({why})"));
            }
        }
        eval.findings.sort_by_key(|f| {
            (
                names.iter().position(|n| n == &f.node),
                std::cmp::Reverse(f.severity),
            )
        });
        let cells: Vec<(NodeName, CheckStatus)> = names
            .iter()
            .map(|n| (n.clone(), eval.status_of(n)))
            .collect();
        for (_, s) in &cells {
            match s {
                CheckStatus::Ok => summary.ok += 1,
                CheckStatus::Warn => summary.warn += 1,
                CheckStatus::Fail => summary.fail += 1,
                CheckStatus::Skipped => summary.skipped += 1,
            }
        }
        let status = cells
            .iter()
            .map(|(_, s)| *s)
            .filter(|s| *s != CheckStatus::Skipped)
            .max()
            .unwrap_or(CheckStatus::Skipped);
        // A skip is worth listing only for nodes that got no verdict at all.
        let skipped = eval
            .skipped
            .into_iter()
            .filter(|(n, _)| {
                cells
                    .iter()
                    .any(|(c, s)| c == n && *s == CheckStatus::Skipped)
            })
            .collect();
        reports.push(CheckReport {
            info: check.info,
            status,
            nodes: cells,
            findings: eval.findings,
            notes: eval.notes,
            skipped,
        });
    }
    Report {
        nodes: names,
        summary,
        checks: reports,
        logs: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
