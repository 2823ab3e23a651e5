//! The fabric plan: from cabling facts to the addresses and MTU of every cabled ConnectX netdev,
//! as one netplan file per node (`spark-launch fabric plan`; `fabric apply` carries it out).
//!
//! Pure: facts (and `--link`, `--pool`, `--mtu`) in, a [`FabricPlan`] out, or a [`FabricRefusal`]
//! naming the cable to move. Nothing here touches a machine; the scripts a node runs to apply,
//! verify or roll back are rendered as text by [`script`] and run by `fabric_apply`.
//!
//! The address rule is NVIDIA's current one: each twin of each cabled port gets its own
//! subnet, one address per interface per subnet, the two ends of a cable share it (a ring: a
//! subnet per cable per twin); through a switch, one subnet per twin shared by every node. A
//! node's address in any subnet ends in its position in the cluster (head `.1`). Subnets come
//! from the pool and never overlap anything seen on any node. A twin pair already addressed
//! consistently keeps its addresses; a fabric entirely so, at the planned MTU, is "nothing to
//! do". The management interface, Wi-Fi and every non-fabric interface are never touched.
//!
//! - [`cabling`]: the link map (observed, `--link`, inferred) and the layout it makes.
//! - [`address`]: the pool, what is taken, the consistency rule.
//! - [`netplan`]: the file text and the other files that configure the same interfaces.
//! - [`render`]: the table and the JSON of a plan; [`diff`]: `apply --dry-run`'s file diff.
//! - [`script`]: what a node runs to apply (with a safety net), verify and roll back.
//! - [`perftest`]: which `ib_write_bw` runs `fabric test` makes, cable by cable.

pub mod address;
pub mod cabling;
pub mod diff;
pub mod netplan;
pub mod perftest;
pub mod render;
pub mod script;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::derive::NodeInput;
use crate::node::NodeName;
use crate::probe::facts::{Ipv4Iface, NetIf, Subnet};
use crate::probe::links::{End, LinkArg, LinkSource};
use crate::problem::Problem;

pub use address::AddressPool;
pub use cabling::{Layout, LinkArgError};
pub use netplan::{Conflict, FILE};

/// The MTU planned when `--mtu` is not given.
pub const DEFAULT_MTU: u32 = 9000;

/// What the user asked for besides the nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    pub pool: AddressPool,
    pub mtu: u32,
    /// `link-local: [ ipv4 ]` on one twin of the one cable instead of static subnets.
    pub link_local: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            pool: AddressPool::default(),
            mtu: DEFAULT_MTU,
            link_local: false,
        }
    }
}

/// The shape of the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FabricTopology {
    Direct,
    Switch,
    Ring,
}

impl fmt::Display for FabricTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FabricTopology::Direct => "direct",
            FabricTopology::Switch => "switch",
            FabricTopology::Ring => "ring",
        })
    }
}

/// One twin pair (or two switch ports) and the subnet they share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedLink {
    pub a: End,
    pub b: End,
    pub subnet: Subnet,
    /// The planned address of each end (`None` for link-local addressing).
    pub a_addr: Option<Ipv4Iface>,
    pub b_addr: Option<Ipv4Iface>,
    /// Both ends already hold these addresses.
    pub kept: bool,
    pub source: LinkSource,
}

/// What one node gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFabricPlan {
    pub name: NodeName,
    /// spark-launch's file and its text; `None` when the node has nothing to do.
    pub file: Option<String>,
    pub netplan: Option<String>,
    /// Planned (or kept) address of each cabled netdev that has one.
    pub addresses: BTreeMap<NetIf, Ipv4Iface>,
    /// MTU of every cabled fabric netdev.
    pub mtu: BTreeMap<NetIf, u32>,
    /// Other netplan files that configure these netdevs.
    pub conflicts: Vec<Conflict>,
    /// The node's current copy of spark-launch's file (`None`: absent or not recorded).
    pub current: Option<String>,
    /// The netdevs the file configures (cabled fabric netdevs), in file order.
    pub ifaces: Vec<NetIf>,
}

impl NodeFabricPlan {
    pub fn has_changes(&self) -> bool {
        self.file.is_some()
    }
}

/// The whole plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricPlan {
    pub topology: FabricTopology,
    pub links: Vec<PlannedLink>,
    pub nodes: Vec<NodeFabricPlan>,
    pub warnings: Vec<String>,
    pub mtu: u32,
}

impl FabricPlan {
    /// True when every node already has what the plan would give it.
    pub fn nothing_to_do(&self) -> bool {
        self.nodes.iter().all(|n| !n.has_changes())
    }

    pub fn node(&self, name: &NodeName) -> Option<&NodeFabricPlan> {
        self.nodes.iter().find(|n| &n.name == name)
    }
}

/// The plan cannot be made: every problem, each with its fix (exit 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FabricRefusal {
    pub problems: Vec<Problem>,
}

impl fmt::Display for FabricRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the fabric cannot be planned:")?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FabricRefusal {}

/// Why there is no plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Link(#[from] LinkArgError),
    #[error(transparent)]
    Refused(#[from] FabricRefusal),
}

fn refuse(problem: impl Into<String>, fix: impl Into<String>) -> PlanError {
    PlanError::Refused(FabricRefusal {
        problems: vec![Problem::new(problem, fix)],
    })
}

/// One group of netdevs that shares a subnet.
struct Net {
    ends: Vec<End>,
    /// The pairs listed as links (one for a twin pair, every pair on a switch).
    pairs: Vec<(End, End)>,
}

/// Plans the fabric of `nodes` (head first): the cables and the layout they make, one subnet
/// per group of netdevs (kept where already consistent, else from the pool), then every node's
/// netplan file.
pub fn plan(
    nodes: &[NodeInput],
    given: &[LinkArg],
    opts: &PlanOptions,
) -> Result<FabricPlan, PlanError> {
    let map = cabling::link_map(nodes, given)?;
    let layout = cabling::layout(nodes, &map).map_err(|problems| FabricRefusal { problems })?;
    let mut warnings: Vec<String> = map.notes.clone();
    // A ring cabled the wrong way round works but is not NVIDIA's ring wiring: name the node
    // whose two cables to swap, as doctor and launch plans do.
    warnings.extend(
        cabling::ring_direction(nodes, &map)
            .into_iter()
            .map(|(_, p)| format!("{} (fix: {})", p.what, p.fix)),
    );
    let (topology, nets) = nets_of(&layout, opts, &mut warnings);
    refuse_management(nodes, &nets)?;
    if opts.link_local && topology != FabricTopology::Direct {
        return Err(refuse(
            format!(
                "--link-local addresses one cable, and this fabric is a {topology} with {} twin pairs: link-local addresses on several cables of one node share 169.254.0.0/16, which breaks routing",
                nets.len()
            ),
            "leave out --link-local (one subnet per twin pair)",
        ));
    }
    let taken = address::taken(nodes);
    let kept = keep_consistent(nodes, &nets, &taken, opts);
    let assigned = assign(nodes, &nets, &kept, &taken, &map, opts, &mut warnings)?;
    if opts.link_local {
        warnings.push(
            "link-local: the cable's first twin gets a 169.254.x.y address of its own choosing (NVIDIA's first playbook); `link-local: [ ipv4 ]` turns IPv6 link-local off there, so a later `fabric plan` reads this cable from its addresses instead of probing it; the second twin carries RDMA without an address".to_string(),
        );
    }
    warn_down_twins(nodes, &nets, &mut warnings);
    let plans: Vec<NodeFabricPlan> = nodes
        .iter()
        .map(|n| node_plan(n, nodes, &nets, &kept, &assigned, opts, &mut warnings))
        .collect();
    refuse_unmatchable(nodes, &plans)?;
    Ok(FabricPlan {
        topology,
        links: assigned.links,
        nodes: plans,
        warnings,
        mtu: opts.mtu,
    })
}

/// The groups of netdevs that each share a subnet: a twin pair per cable (direct, ring), or
/// every port of one switch segment.
fn nets_of(
    layout: &Layout,
    opts: &PlanOptions,
    warnings: &mut Vec<String>,
) -> (FabricTopology, Vec<Net>) {
    let pair = |(a, b): &(End, End)| Net {
        ends: vec![a.clone(), b.clone()],
        pairs: vec![(a.clone(), b.clone())],
    };
    match layout {
        Layout::Direct(c) => (FabricTopology::Direct, c.pairs.iter().map(pair).collect()),
        Layout::Ring(cs) => (
            FabricTopology::Ring,
            cs.iter().flat_map(|c| c.pairs.iter()).map(pair).collect(),
        ),
        Layout::Switch(segs) => {
            let mut nets = Vec::new();
            for ends in cabling::switch_nets(segs) {
                let mut pairs = Vec::new();
                for (i, a) in ends.iter().enumerate() {
                    for b in &ends[i + 1..] {
                        pairs.push((a.clone(), b.clone()));
                    }
                }
                nets.push(Net { ends, pairs });
            }
            warnings.push(format!(
                "switch: every port of the switch that carries the fabric must pass jumbo frames (MTU {} plus headers), or traffic at that MTU is dropped",
                opts.mtu
            ));
            (FabricTopology::Switch, nets)
        }
    }
}

/// The management interface is never touched, even when it is a ConnectX port.
fn refuse_management(nodes: &[NodeInput], nets: &[Net]) -> Result<(), PlanError> {
    for e in nets.iter().flat_map(|n| n.ends.iter()) {
        let facts = nodes.iter().find(|x| x.name == e.node).map(|x| &x.facts);
        if let Some(f) = facts
            && f.management_interface().map(|i| &i.name) == Some(&e.iface)
        {
            return Err(refuse(
                format!(
                    "{e} holds the default route (the management network) and is cabled as fabric: spark-launch never touches the management interface"
                ),
                "put the management network on another port, or give the fabric cables with --link leaving this one out",
            ));
        }
    }
    Ok(())
}

/// An interface whose name networkd would unquote (`'cx5'`) is matched by its MAC; without a
/// recorded MAC no line of netplan names it safely.
fn refuse_unmatchable(nodes: &[NodeInput], plans: &[NodeFabricPlan]) -> Result<(), PlanError> {
    let mut problems = Vec::new();
    for p in plans.iter().filter(|p| p.has_changes()) {
        let Some(n) = nodes.iter().find(|n| n.name == p.name) else {
            continue;
        };
        for i in &p.ifaces {
            let mac = n.facts.interface(i).and_then(|f| f.mac.clone());
            let c = netplan::IfaceConfig {
                iface: i.clone(),
                address: None,
                link_local_ipv4: false,
                mtu: 0,
                mac,
            };
            if c.needs_mac() && c.mac.is_none() {
                problems.push(Problem::new(format!(
                        "{}:{} has a quote or backslash in its name, which networkd reads as quoting, and its MAC is not recorded: netplan cannot name it safely",
                        p.name,
                        crate::text::shell_word(i.as_str())
                    ), "capture the node again (`spark-launch probe --capture DIR` records each interface's MAC), or rename the interface (a udev rule or netplan `set-name`)".to_string()));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(PlanError::Refused(FabricRefusal { problems }))
    }
}

/// Per net, its subnet and addresses when they are already consistent and clear of everything
/// else (kept as they are); two kept nets that overlap are both planned anew.
fn keep_consistent(
    nodes: &[NodeInput],
    nets: &[Net],
    taken: &[address::Taken],
    opts: &PlanOptions,
) -> Vec<Option<(Subnet, Vec<Ipv4Iface>)>> {
    let mut kept: Vec<Option<(Subnet, Vec<Ipv4Iface>)>> = nets
        .iter()
        .map(|n| {
            if opts.link_local {
                return None;
            }
            let (subnet, addrs) = address::consistent(nodes, &n.ends)?;
            let clash = taken
                .iter()
                .any(|t| !t.fabric && t.subnet.overlaps(&subnet));
            (!clash).then_some((subnet, addrs))
        })
        .collect();
    for i in 0..kept.len() {
        let Some((s, _)) = kept[i].clone() else {
            continue;
        };
        let dup: Vec<usize> = (0..kept.len())
            .filter(|&j| j != i && kept[j].as_ref().is_some_and(|(t, _)| t.overlaps(&s)))
            .collect();
        if !dup.is_empty() {
            kept[i] = None;
            for j in dup {
                kept[j] = None;
            }
        }
    }
    kept
}

/// What [`assign`] gave the nets: the planned links and every end's address.
struct Assigned {
    links: Vec<PlannedLink>,
    addresses: BTreeMap<End, Ipv4Iface>,
    /// The ends that get a link-local address (`--link-local`: the first net's).
    link_local_ends: Vec<End>,
}

/// Gives every net its subnet (kept, link-local, or the next free one of the pool) and every
/// end its address; refuses when the pool runs out, naming what fills it.
fn assign(
    nodes: &[NodeInput],
    nets: &[Net],
    kept: &[Option<(Subnet, Vec<Ipv4Iface>)>],
    taken: &[address::Taken],
    map: &crate::probe::links::LinkMap,
    opts: &PlanOptions,
    warnings: &mut Vec<String>,
) -> Result<Assigned, PlanError> {
    let host = |node: &NodeName| {
        nodes
            .iter()
            .position(|n| &n.name == node)
            .map(|i| i as u32 + 1)
            .unwrap_or(1)
    };
    let source_of = |a: &End, b: &End| {
        map.links
            .iter()
            .find(|l| l.touches(a) && l.touches(b))
            .map(|l| l.source)
            .unwrap_or(LinkSource::Observed)
    };
    let mut avoid = taken.to_vec();
    for (s, _) in kept.iter().flatten() {
        avoid.push(address::Taken {
            subnet: *s,
            what: "a twin pair kept as it is".into(),
            fabric: true,
        });
    }
    let mut alloc = address::Allocator::new(&opts.pool, avoid);
    let mut out = Assigned {
        links: Vec::new(),
        addresses: BTreeMap::new(),
        link_local_ends: Vec::new(),
    };
    for (i, n) in nets.iter().enumerate() {
        let (subnet, is_kept) = if opts.link_local {
            if i > 0 {
                continue;
            }
            out.link_local_ends.extend(n.ends.iter().cloned());
            (link_local_net(), false)
        } else if let Some((s, addrs)) = &kept[i] {
            for (e, a) in n.ends.iter().zip(addrs) {
                out.addresses.insert(e.clone(), *a);
            }
            (*s, true)
        } else {
            let Some(s) = alloc.next_free() else {
                return Err(pool_exhausted(taken, nets.len(), opts));
            };
            for e in &n.ends {
                out.addresses
                    .insert(e.clone(), address::host_in(&s, host(&e.node)));
            }
            (s, false)
        };
        for (a, b) in &n.pairs {
            out.links.push(PlannedLink {
                a: a.clone(),
                b: b.clone(),
                subnet,
                a_addr: out.addresses.get(a).copied(),
                b_addr: out.addresses.get(b).copied(),
                kept: is_kept,
                source: source_of(a, b),
            });
        }
    }
    for (candidate, t) in &alloc.skipped {
        warnings.push(format!(
            "skipped {candidate} and everything else in {}: in use on {}",
            t.subnet, t.what
        ));
    }
    Ok(out)
}

fn link_local_net() -> Subnet {
    Ipv4Iface {
        addr: std::net::Ipv4Addr::new(169, 254, 0, 0),
        prefix: 16,
    }
    .subnet()
}

/// The pool has no free subnet left: what fills it, and a pool that is free.
fn pool_exhausted(taken: &[address::Taken], nets: usize, opts: &PlanOptions) -> PlanError {
    let suggest = ["10.200.0.0/16", "10.201.0.0/16", "172.30.0.0/16"]
        .iter()
        .find(|p| {
            p.parse::<AddressPool>().is_ok_and(|pool| {
                let first = pool.candidates()[0];
                !taken.iter().any(|t| t.subnet.overlaps(&first))
            })
        })
        .copied()
        .unwrap_or("10.200.0.0/16");
    refuse(
        format!(
            "the pool {} has no free /{} left for {nets} twin pairs: it overlaps {}",
            opts.pool,
            address::SUBNET_PREFIX,
            taken
                .iter()
                .filter(|t| t.subnet.overlaps(&subnet_of_pool(&opts.pool)))
                .map(|t| format!("{} ({})", t.subnet, t.what))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!("give another pool: --pool {suggest}"),
    )
}

/// A twin of a cabled port that is down carries nothing: say so (doctor's
/// fabric.twins-active fails it too).
fn warn_down_twins(nodes: &[NodeInput], nets: &[Net], warnings: &mut Vec<String>) {
    for e in nets.iter().flat_map(|n| n.ends.iter()) {
        let Some(f) = nodes.iter().find(|n| n.name == e.node).map(|n| &n.facts) else {
            continue;
        };
        if let Some(t) = cabling::twin_netdev(f, &e.iface)
            && f.interface(&t).is_some_and(|i| !i.is_up())
            && !nets
                .iter()
                .any(|x| x.ends.iter().any(|y| y.node == e.node && y.iface == t))
        {
            let w = format!(
                "{}:{t}, the twin of {e}, is down: the plan leaves it out, and RDMA gets half the port; bring it up (a live `fabric plan` as root raises it to probe it) or check what disables it",
                e.node
            );
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
}

/// One node's part: every cabled fabric netdev (the ends, and the twins of their ports with
/// carrier), their addresses and MTU, and the netplan file unless nothing changes.
fn node_plan(
    n: &NodeInput,
    nodes: &[NodeInput],
    nets: &[Net],
    kept: &[Option<(Subnet, Vec<Ipv4Iface>)>],
    assigned: &Assigned,
    opts: &PlanOptions,
    warnings: &mut Vec<String>,
) -> NodeFabricPlan {
    let mut ifaces: Vec<NetIf> = nets
        .iter()
        .flat_map(|x| x.ends.iter())
        .filter(|e| e.node == n.name)
        .map(|e| e.iface.clone())
        .collect();
    for i in ifaces.clone() {
        if let Some(t) = cabling::twin_netdev(&n.facts, &i)
            && !ifaces.contains(&t)
            && n.facts.interface(&t).is_some_and(|f| f.is_up())
        {
            ifaces.push(t);
        }
    }
    ifaces.sort();
    ifaces.dedup();
    let end = |i: &NetIf| End::new(n.name.clone(), i.clone());
    let node_addrs: BTreeMap<NetIf, Ipv4Iface> = ifaces
        .iter()
        .filter_map(|i| assigned.addresses.get(&end(i)).map(|a| (i.clone(), *a)))
        .collect();
    let mtu: BTreeMap<NetIf, u32> = ifaces.iter().map(|i| (i.clone(), opts.mtu)).collect();
    let all_kept = nets.iter().enumerate().all(|(k, x)| {
        !x.ends.iter().any(|e| e.node == n.name) || kept[k].is_some() && !opts.link_local
    });
    let facts_of = |node: &NodeName| nodes.iter().find(|x| &x.name == node).map(|x| &x.facts);
    let link_local_kept = opts.link_local
        && assigned
            .link_local_ends
            .iter()
            .filter(|e| e.node == n.name)
            .all(|e| {
                facts_of(&e.node)
                    .and_then(|f| f.interface(&e.iface))
                    .is_some_and(|i| i.ipv4.iter().any(|a| a.addr.is_link_local()))
            });
    let mtu_ok = ifaces
        .iter()
        .all(|i| n.facts.interface(i).and_then(|f| f.mtu) == Some(opts.mtu));
    let unchanged = (all_kept || link_local_kept) && mtu_ok;
    let current = n.facts.netplan.as_ref().and_then(|files| {
        files
            .iter()
            .find(|f| f.path == FILE)
            .and_then(|f| f.content.clone())
    });
    let configs: Vec<netplan::IfaceConfig> = ifaces
        .iter()
        .map(|i| netplan::IfaceConfig {
            iface: i.clone(),
            address: node_addrs.get(i).copied(),
            link_local_ipv4: assigned.link_local_ends.contains(&end(i)),
            mtu: opts.mtu,
            mac: n.facts.interface(i).and_then(|f| f.mac.clone()),
        })
        .collect();
    let conflicts = netplan::conflicts(&n.name, &n.facts, &ifaces);
    if !unchanged {
        warnings.extend(conflicts.unknown.iter().cloned());
    }
    NodeFabricPlan {
        name: n.name.clone(),
        file: (!unchanged).then(|| FILE.to_string()),
        netplan: (!unchanged).then(|| netplan::render(&n.name, &configs)),
        addresses: node_addrs,
        mtu,
        conflicts: if unchanged {
            Vec::new()
        } else {
            conflicts.files
        },
        current,
        ifaces,
    }
}

/// The conflicting files each node moves aside (`--replace`), or every conflict that stops the
/// apply, with its fix (exit 2). A file that configures anything besides the planned fabric
/// netdevs is never moved: it has to be edited by hand.
pub fn preflight(
    plan: &FabricPlan,
    replace: bool,
) -> Result<BTreeMap<NodeName, Vec<String>>, FabricRefusal> {
    let mut moves = BTreeMap::new();
    let mut problems = Vec::new();
    for n in plan.nodes.iter().filter(|n| n.has_changes()) {
        for c in &n.conflicts {
            if !c.replaceable() {
                problems.push(Problem::new(format!("{}: {}", n.name, c.describe()), format!(
                        "on {}, remove the sections of {} from {} by hand (spark-launch only moves files that configure nothing but fabric interfaces), then run again",
                        n.name,
                        c.ifaces
                            .iter()
                            .map(|i| i.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        c.path
                    )));
            } else if !replace {
                problems.push(Problem::new(format!("{}: {}", n.name, c.describe()), format!(
                        "rerun with --replace (it moves {} into {}/backup/, and `spark-launch fabric rollback` puts it back), or move it aside yourself",
                        c.path,
                        script::STATE_DIR
                    )));
            } else {
                moves
                    .entry(n.name.clone())
                    .or_insert_with(Vec::new)
                    .push(c.path.clone());
            }
        }
    }
    if problems.is_empty() {
        Ok(moves)
    } else {
        Err(FabricRefusal { problems })
    }
}

/// A warning when `node` is reached at `addr` and the plan takes that address away (the
/// connection is cut when the node applies; its safety net then undoes the change).
pub fn cuts_connection(
    plan: &FabricPlan,
    nodes: &[NodeInput],
    node: &NodeName,
    addr: std::net::Ipv4Addr,
) -> Option<String> {
    let facts = &nodes.iter().find(|n| &n.name == node)?.facts;
    let iface = facts
        .interfaces
        .iter()
        .find(|i| i.ipv4.iter().any(|a| a.addr == addr))?;
    let p = plan.node(node)?;
    if !p.has_changes() || !p.ifaces.contains(&iface.name) {
        return None;
    }
    if p.addresses.get(&iface.name).is_some_and(|a| a.addr == addr) {
        return None;
    }
    Some(format!(
        "spark-launch reaches {node} at {addr}, on {}, which this plan readdresses: the connection will drop when {node} applies, and {node} then undoes the change by itself; reach the nodes over the management network instead (--hosts NAME=user@MANAGEMENT-ADDRESS)",
        iface.name
    ))
}

fn subnet_of_pool(pool: &AddressPool) -> Subnet {
    Ipv4Iface {
        addr: pool.net.network(),
        prefix: pool.net.prefix_len(),
    }
    .subnet()
}

#[cfg(test)]
mod tests;
