//! The cluster's cabling: the link map from what each node's link probe heard (or `--link`, or
//! the addresses already there), and the layout it makes — one cable between two nodes
//! (`direct`), a switch, or a ring — or the refusal that names the cable to move.
//!
//! Pure: facts and `--link` in, a [`LinkMap`] and a [`Layout`] out.
//!
//! - Observed: an answer on `A:ifa` whose MAC (or link-local address) is `B:ifb`'s joins the
//!   two. Answers from the node itself are ignored; answers nobody owns become notes.
//! - Given (`--link`): exactly the cables named; naming one twin pairs the other twins of the
//!   two ports too (a ConnectX port without twins, a workstation's, pairs only the one named).
//! - Inferred (no probe recorded): two fabric netdevs with addresses on one subnet are joined,
//!   and so are the twins of a cabled Spark port. Added to observed links for netdevs the
//!   probe could not place (IPv6 disabled by `link-local: [ipv4]`).
//!
//! Netdevs that hear each other form a segment. A segment of two netdevs on two nodes is one
//! twin pair of a cable; a bigger one is a switch. Cables are the twin pairs between the same
//! two ports.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::derive::NodeInput;
use crate::derive::topology::{SubnetMap, fabric_addrs};
use crate::derive::twins::{twin_key, twins_of};
use crate::node::NodeName;
use crate::probe::facts::{NetIf, NodeFacts};
use crate::probe::links::{End, Link, LinkAnswer, LinkArg, LinkMap, LinkSource};
use crate::problem::Problem;

/// A `--link` that does not fit the nodes (exit 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LinkArgError {
    #[error("--link {given}: there is no node {node} (nodes: {known})")]
    UnknownNode {
        given: String,
        node: NodeName,
        known: String,
    },
    #[error(
        "--link {given}: {node} has no fabric interface {iface} (its fabric interfaces: {known})"
    )]
    UnknownInterface {
        given: String,
        node: NodeName,
        iface: NetIf,
        known: String,
    },
}

/// The link map of `nodes`: `--link` when given, else what the probes heard, completed by what
/// the addresses say.
pub fn link_map(nodes: &[NodeInput], given: &[LinkArg]) -> Result<LinkMap, LinkArgError> {
    let order: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    if !given.is_empty() {
        return given_map(nodes, given, &order);
    }
    let mut map = observed_map(nodes, &order);
    let observed = map.links.clone();
    for link in inferred_map(nodes, &order).links {
        let placed = observed
            .iter()
            .any(|l| l.touches(&link.a) || l.touches(&link.b));
        if !placed {
            map.add(link);
        }
    }
    Ok(map)
}

fn node<'a>(nodes: &'a [NodeInput], name: &NodeName) -> Option<&'a NodeInput> {
    nodes.iter().find(|n| &n.name == name)
}

/// The other twin of `iface` on `facts` (same port, other PCIe function), if it has one.
pub fn twin_netdev(facts: &NodeFacts, iface: &NetIf) -> Option<NetIf> {
    let dev = facts.rdma_device_of(iface)?;
    twins_of(facts, &dev.name)
        .into_iter()
        .filter_map(|t| facts.rdma_device(t))
        .flat_map(|d| d.netdevs.iter())
        .find(|n| n != &iface)
        .cloned()
}

/// The port an interface belongs to: its twin key (both twins share it), else its own name.
pub fn port_key(iface: &NetIf) -> String {
    twin_key(iface).unwrap_or_else(|| iface.as_str().to_string())
}

/// Which twin of its port an interface is: `""` for the first PCIe domain (`enp1s0f1np1`, or
/// a netdev without twins), else the domain part (`P2` for `enP2p1s0f1np1`).
pub fn twin_side(iface: &NetIf) -> String {
    let name = iface.as_str();
    match (twin_key(iface), name.strip_prefix("en")) {
        (Some(_), Some(rest)) if rest.starts_with('P') => {
            let digits: String = rest[1..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            format!("P{digits}")
        }
        _ => String::new(),
    }
}

fn fabric_netdevs(facts: &NodeFacts) -> Vec<NetIf> {
    let mut out: Vec<NetIf> = facts
        .rdma_devices
        .iter()
        .flat_map(|d| d.netdevs.iter().cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn given_map(
    nodes: &[NodeInput],
    given: &[LinkArg],
    order: &[NodeName],
) -> Result<LinkMap, LinkArgError> {
    let known_nodes = order
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let mut map = LinkMap::default();
    for g in given {
        let text = format!("{}={}", g.a, g.b);
        let mut facts = Vec::new();
        for end in [&g.a, &g.b] {
            let n = node(nodes, &end.node).ok_or_else(|| LinkArgError::UnknownNode {
                given: text.clone(),
                node: end.node.clone(),
                known: known_nodes.clone(),
            })?;
            let fabric = fabric_netdevs(&n.facts);
            if !fabric.contains(&end.iface) {
                return Err(LinkArgError::UnknownInterface {
                    given: text.clone(),
                    node: end.node.clone(),
                    iface: end.iface.clone(),
                    known: fabric
                        .iter()
                        .map(|i| i.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            facts.push(&n.facts);
        }
        map.add(Link::new(
            g.a.clone(),
            g.b.clone(),
            LinkSource::Given,
            order,
        ));
        if let (Some(ta), Some(tb)) = (
            twin_netdev(facts[0], &g.a.iface),
            twin_netdev(facts[1], &g.b.iface),
        ) {
            map.add(Link::new(
                End::new(g.a.node.clone(), ta),
                End::new(g.b.node.clone(), tb),
                LinkSource::Given,
                order,
            ));
        }
    }
    Ok(map)
}

fn owns(facts: &NodeFacts, answer: &LinkAnswer) -> Option<NetIf> {
    let by_mac = answer.mac.as_deref().and_then(|mac| {
        facts.interfaces.iter().find(|i| {
            i.mac
                .as_deref()
                .is_some_and(|m| m.eq_ignore_ascii_case(mac))
        })
    });
    by_mac
        .or_else(|| {
            facts
                .interfaces
                .iter()
                .find(|i| i.ipv6.iter().any(|a| a.addr == answer.addr))
        })
        .map(|i| i.name.clone())
}

fn observed_map(nodes: &[NodeInput], order: &[NodeName]) -> LinkMap {
    let mut map = LinkMap::default();
    let any = nodes.iter().any(|n| n.facts.links.is_some());
    for n in nodes {
        let Some(probe) = &n.facts.links else {
            if any {
                map.notes.push(format!(
                    "{}: no link probe recorded (capture it with `spark-launch probe --capture`, or give the cables with --link)",
                    n.name
                ));
            }
            continue;
        };
        for pi in &probe.ifaces {
            let here = End::new(n.name.clone(), pi.iface.clone());
            let mut heard = 0;
            for answer in &pi.answers {
                if owns(&n.facts, answer).is_some() {
                    continue;
                }
                let owner = nodes
                    .iter()
                    .filter(|m| m.name != n.name)
                    .find_map(|m| owns(&m.facts, answer).map(|i| (m, i)));
                match owner {
                    Some((m, iface)) if m.facts.is_fabric_interface(&iface) => {
                        heard += 1;
                        map.add(Link::new(
                            here.clone(),
                            End::new(m.name.clone(), iface),
                            LinkSource::Observed,
                            order,
                        ));
                    }
                    Some((m, iface)) => map.notes.push(format!(
                        "{here} hears {}:{iface}, which is not a fabric interface (is the fabric cable in the office network's switch?)",
                        m.name
                    )),
                    None => map.notes.push(format!(
                        "{here} hears {}{}, which belongs to no node of this cluster (another machine, or a switch)",
                        answer.addr,
                        answer
                            .mac
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    )),
                }
            }
            if pi.pinged && heard == 0 && pi.answers.iter().all(|a| owns(&n.facts, a).is_some()) {
                map.notes.push(format!(
                    "{here} has carrier but nobody answered on it{}",
                    pi.problem
                        .as_deref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    map
}

/// Links read from the addresses: fabric netdevs on one subnet hear each other; the twins of
/// a cabled Spark port (both up, no address of their own) are cabled the same way.
pub fn inferred_map(nodes: &[NodeInput], order: &[NodeName]) -> LinkMap {
    let mut map = LinkMap::default();
    let addrs: Vec<_> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| fabric_addrs(i, &n.facts))
        .collect();
    let subnets = SubnetMap::build(&addrs);
    for (subnet, members) in &subnets.members {
        if members.len() < 2 {
            continue;
        }
        let ends: Vec<End> = addrs
            .iter()
            .filter(|a| a.active && &a.subnet() == subnet)
            .map(|a| End::new(nodes[a.node].name.clone(), a.iface.clone()))
            .collect();
        for (i, a) in ends.iter().enumerate() {
            for b in &ends[i + 1..] {
                if a.node != b.node {
                    map.add(Link::new(a.clone(), b.clone(), LinkSource::Inferred, order));
                }
            }
        }
    }
    let direct: Vec<Link> = map.links.clone();
    for l in &direct {
        let (Some(na), Some(nb)) = (node(nodes, &l.a.node), node(nodes, &l.b.node)) else {
            continue;
        };
        let (Some(ta), Some(tb)) = (
            twin_netdev(&na.facts, &l.a.iface),
            twin_netdev(&nb.facts, &l.b.iface),
        ) else {
            continue;
        };
        let quiet = |f: &NodeFacts, t: &NetIf| {
            f.interface(t)
                .is_some_and(|i| i.is_up() && i.ipv4.is_empty())
        };
        let ea = End::new(l.a.node.clone(), ta.clone());
        let eb = End::new(l.b.node.clone(), tb.clone());
        // A twin with an address of its own is placed by that address.
        let placed = direct.iter().any(|x| x.touches(&ea) || x.touches(&eb));
        if quiet(&na.facts, &ta) && quiet(&nb.facts, &tb) && !placed {
            map.add(Link::new(ea, eb, LinkSource::Inferred, order));
        }
    }
    map
}

/// Netdevs that hear each other: one twin pair of a cable (two ends), or a switch (more).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub ends: Vec<End>,
}

impl Segment {
    pub fn nodes(&self) -> BTreeSet<&NodeName> {
        self.ends.iter().map(|e| &e.node).collect()
    }
}

/// One cable between two nodes: its twin pairs (two on Spark ports, one where a port has no
/// twins), `a` on the earlier node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cable {
    pub a: NodeName,
    pub a_port: String,
    pub b: NodeName,
    pub b_port: String,
    /// (end on `a`, end on `b`), first twin first.
    pub pairs: Vec<(End, End)>,
}

impl Cable {
    fn describe(&self) -> String {
        match self.pairs.first() {
            Some((a, b)) => format!("{a} ↔ {b}"),
            None => format!("{} ↔ {}", self.a, self.b),
        }
    }
}

/// The shape the cabling makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Two nodes, one cable.
    Direct(Cable),
    /// Three or more nodes in a ring, each cable in ring order from the head.
    Ring(Vec<Cable>),
    /// Nodes joined through a switch: each segment's ends, grouped by twin side.
    Switch(Vec<Segment>),
}

/// The groups of a switch that share one subnet each: in every segment, each node's first
/// netdev (by twin side), then each node's second, ... A segment that holds one netdev per
/// node is one group; one that holds both twins of every node (one VLAN) is two.
pub fn switch_nets(segs: &[Segment]) -> Vec<Vec<End>> {
    let mut out = Vec::new();
    for s in segs {
        let mut per_node: Vec<(&NodeName, Vec<&End>)> = Vec::new();
        for e in &s.ends {
            match per_node.iter_mut().find(|(n, _)| *n == &e.node) {
                Some((_, v)) => v.push(e),
                None => per_node.push((&e.node, vec![e])),
            }
        }
        for (_, v) in &mut per_node {
            v.sort_by_key(|e| (twin_side(&e.iface), e.iface.clone()));
        }
        let slots = per_node.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        for k in 0..slots {
            let net: Vec<End> = per_node
                .iter()
                .filter_map(|(_, v)| v.get(k).map(|e| (*e).clone()))
                .collect();
            if net.len() >= 2 {
                out.push(net);
            }
        }
    }
    out
}

/// Groups the map's links into segments (connected netdevs), in link order.
pub fn segments(map: &LinkMap) -> Vec<Segment> {
    let mut segs: Vec<Vec<End>> = Vec::new();
    for l in &map.links {
        let hit: Vec<usize> = segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.contains(&l.a) || s.contains(&l.b))
            .map(|(i, _)| i)
            .collect();
        match hit.as_slice() {
            [] => segs.push(vec![l.a.clone(), l.b.clone()]),
            [first, rest @ ..] => {
                let first = *first;
                for &j in rest.iter().rev() {
                    let moved = segs.remove(j);
                    for e in moved {
                        if !segs[first].contains(&e) {
                            segs[first].push(e);
                        }
                    }
                }
                for e in [&l.a, &l.b] {
                    if !segs[first].contains(e) {
                        segs[first].push(e.clone());
                    }
                }
            }
        }
    }
    segs.into_iter().map(|ends| Segment { ends }).collect()
}

/// The layout of `nodes` cabled as `map` says, or every problem with the cable to move.
pub fn layout(nodes: &[NodeInput], map: &LinkMap) -> Result<Layout, Vec<Problem>> {
    let order: Vec<&NodeName> = nodes.iter().map(|n| &n.name).collect();
    let pos = |n: &NodeName| order.iter().position(|o| *o == n).unwrap_or(usize::MAX);
    let mut problems = Vec::new();
    if nodes.len() < 2 {
        return Err(vec![Problem::new(
            format!("a fabric needs at least two nodes (got {})", nodes.len()),
            "name every node: the cluster file, --hosts a,b or --snapshot NAME=DIR for each",
        )]);
    }
    let segs = segments(map);
    let given = map.links.iter().any(|l| l.source == LinkSource::Given);
    for n in nodes {
        if !segs.iter().any(|s| s.nodes().contains(&n.name)) {
            problems.push(nothing_cabled(n, given));
        }
    }
    for s in segs
        .iter()
        .filter(|s| s.ends.len() == 2 && s.nodes().len() == 1)
    {
        problems.push(Problem::new(
            format!(
                "{} and {} are cabled to each other on the same node",
                s.ends[0], s.ends[1]
            ),
            format!("plug the cable at {} into another node", s.ends[1]),
        ));
    }
    let shared: Vec<&Segment> = segs.iter().filter(|s| s.ends.len() > 2).collect();
    if !shared.is_empty() {
        for s in &segs {
            if s.ends.len() == 2 && s.nodes().len() == 2 {
                problems.push(Problem::new(
                    format!(
                        "{} ↔ {} is a cable beside the switch: more cables than the plan can use",
                        s.ends[0], s.ends[1]
                    ),
                    format!("plug {} into the switch, or unplug that cable", s.ends[0]),
                ));
            }
        }
        // One port per node on the switch (its twins are that port's two functions).
        let mut ports: BTreeMap<&NodeName, Vec<(String, &End)>> = BTreeMap::new();
        for e in shared.iter().flat_map(|s| s.ends.iter()) {
            let key = port_key(&e.iface);
            let mine = ports.entry(&e.node).or_default();
            if !mine.iter().any(|(k, _)| *k == key) {
                mine.push((key, e));
            }
        }
        for (node, mine) in &ports {
            for (_, e) in mine.iter().skip(1) {
                problems.push(Problem::new(
                    format!(
                        "{node} has two ports on the switch ({} and {e}): more cables than the plan can use",
                        mine[0].1
                    ),
                    format!("unplug the cable at {e} (one port per node on the switch)"),
                ));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut segs: Vec<Segment> = shared.into_iter().cloned().collect();
        for s in &mut segs {
            s.ends.sort_by_key(|e| (pos(&e.node), e.iface.clone()));
        }
        return Ok(Layout::Switch(segs));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let cables = cables(&segs, &pos);
    if nodes.len() == 2 {
        return match cables.as_slice() {
            [one] => Ok(Layout::Direct(one.clone())),
            [first, rest @ ..] => Err(rest
                .iter()
                .map(|c| {
                    Problem::new(
                        format!(
                            "{} and {} are joined by {} cables: more cables than the plan can use (one carries the full bandwidth)",
                            first.a,
                            first.b,
                            cables.len()
                        ),
                        format!("unplug the cable {}", c.describe()),
                    )
                })
                .collect()),
            [] => Err(nodes.iter().map(|n| nothing_cabled(n, given)).collect()),
        };
    }
    ring(nodes, cables, &pos)
}

/// A node no cable reaches: nothing heard (the link probe listened), nothing recorded (no
/// probe, no `--link`), or left out of the `--link`s given.
fn nothing_cabled(n: &NodeInput, given: bool) -> Problem {
    let netdevs = fabric_netdevs(&n.facts);
    let ports: BTreeSet<String> = netdevs.iter().map(port_key).collect();
    // The example names a port that is up (cabled, most likely), else any.
    let example = netdevs
        .iter()
        .find(|i| n.facts.interface(i).is_some_and(|f| f.is_up()))
        .or(netdevs.first())
        .map(|i| format!("--link {}:{i}=OTHER-NODE:IF", n.name))
        .unwrap_or_else(|| "--link NODE:IF=NODE:IF".to_string());
    if !ports.is_empty() && given {
        return Problem::new(
            format!("{} is in none of the --link cables given", n.name),
            format!("give its cable too ({example}), or leave the node out"),
        );
    }
    if !ports.is_empty() && n.facts.links.is_none() {
        return Problem::new(
            format!(
                "{}'s cabling was not recorded: its snapshot holds no link probe (`links/`), and no address on its fabric ports ({}) is on a subnet of another node",
                n.name,
                ports.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            format!(
                "record it: run `spark-launch probe --capture DIR` on {} (live, it listens on every fabric port; `fabric plan` run on live nodes does the same), or state each cable: {example}",
                n.name
            ),
        );
    }
    Problem::new(
        format!(
            "{} has nothing cabled: no fabric port hears another node",
            n.name
        ),
        if ports.is_empty() {
            format!(
                "{} has no RDMA-capable port: it cannot join the fabric",
                n.name
            )
        } else {
            format!(
                "plug a QSFP cable into one of {}'s ports ({}) and the other end into another node; or give it with --link",
                n.name,
                ports.into_iter().collect::<Vec<_>>().join(", ")
            )
        },
    )
}

fn cables(segs: &[Segment], pos: &dyn Fn(&NodeName) -> usize) -> Vec<Cable> {
    let mut out: Vec<Cable> = Vec::new();
    for s in segs {
        let (mut x, mut y) = (s.ends[0].clone(), s.ends[1].clone());
        if (pos(&y.node), y.iface.clone()) < (pos(&x.node), x.iface.clone()) {
            std::mem::swap(&mut x, &mut y);
        }
        let (xp, yp) = (port_key(&x.iface), port_key(&y.iface));
        match out
            .iter_mut()
            .find(|c| c.a == x.node && c.b == y.node && c.a_port == xp && c.b_port == yp)
        {
            Some(c) => c.pairs.push((x, y)),
            None => out.push(Cable {
                a: x.node.clone(),
                a_port: xp,
                b: y.node.clone(),
                b_port: yp,
                pairs: vec![(x, y)],
            }),
        }
    }
    for c in &mut out {
        c.pairs
            .sort_by_key(|(a, b)| (twin_side(&a.iface), twin_side(&b.iface), a.iface.clone()));
    }
    out.sort_by_key(|c| (pos(&c.a), pos(&c.b), c.a_port.clone(), c.b_port.clone()));
    out
}

fn free_port(n: &NodeInput, cables: &[Cable]) -> Option<String> {
    let used: BTreeSet<&String> = cables
        .iter()
        .flat_map(|c| {
            let mut v = Vec::new();
            if c.a == n.name {
                v.push(&c.a_port);
            }
            if c.b == n.name {
                v.push(&c.b_port);
            }
            v
        })
        .collect();
    fabric_netdevs(&n.facts)
        .iter()
        .map(port_key)
        .find(|p| !used.contains(p))
}

fn ring(
    nodes: &[NodeInput],
    cables: Vec<Cable>,
    pos: &dyn Fn(&NodeName) -> usize,
) -> Result<Layout, Vec<Problem>> {
    let mut problems = Vec::new();
    let degree = |n: &NodeName| cables.iter().filter(|c| &c.a == n || &c.b == n).count();
    let port_text = |n: &NodeInput| {
        free_port(n, &cables)
            .map(|p| format!("{}'s free port ({p})", n.name))
            .unwrap_or_else(|| format!("{} (no free port: unplug one first)", n.name))
    };
    let mut pairs: BTreeMap<(usize, usize), Vec<&Cable>> = BTreeMap::new();
    for c in &cables {
        pairs.entry((pos(&c.a), pos(&c.b))).or_default().push(c);
    }
    for twice in pairs.values().filter(|v| v.len() > 1) {
        let c = twice[1];
        problems.push(Problem::new(
            format!(
                "{} and {} are joined by {} cables, so this cabling cannot form a ring (each node needs cables to two different nodes)",
                c.a,
                c.b,
                twice.len()
            ),
            format!(
                "move one end of {} to another node's free port",
                c.describe()
            ),
        ));
    }
    for n in nodes {
        if degree(&n.name) > 2 {
            let extra: Vec<&Cable> = cables
                .iter()
                .filter(|c| c.a == n.name || c.b == n.name)
                .skip(2)
                .collect();
            for c in extra {
                problems.push(Problem::new(
                    format!(
                        "{} has {} cables: more cables than the plan can use (a ring uses two per node)",
                        n.name,
                        degree(&n.name)
                    ),
                    format!("unplug the cable {}", c.describe()),
                ));
            }
        }
    }
    // Islands: nodes joined among themselves but not to the others.
    let mut islands: Vec<BTreeSet<usize>> = Vec::new();
    for (i, _) in nodes.iter().enumerate() {
        if islands.iter().any(|s| s.contains(&i)) {
            continue;
        }
        let mut seen = BTreeSet::from([i]);
        let mut stack = vec![i];
        while let Some(x) = stack.pop() {
            for c in &cables {
                let (a, b) = (pos(&c.a), pos(&c.b));
                let other = if a == x {
                    b
                } else if b == x {
                    a
                } else {
                    continue;
                };
                if seen.insert(other) {
                    stack.push(other);
                }
            }
        }
        islands.push(seen);
    }
    let open: Vec<&NodeInput> = nodes.iter().filter(|n| degree(&n.name) == 1).collect();
    if islands.len() > 1 {
        let names: Vec<String> = islands
            .iter()
            .map(|s| {
                s.iter()
                    .map(|&i| nodes[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        let (x, y) = match (islands[0].iter().next_back(), islands[1].iter().next()) {
            (Some(&x), Some(&y)) => (&nodes[x], &nodes[y]),
            _ => (&nodes[0], &nodes[nodes.len() - 1]),
        };
        problems.push(Problem::new(
            format!(
                "the cables form {} separate groups ({}), so this cabling cannot form a ring",
                islands.len(),
                names.join(" | ")
            ),
            format!("cable {} to {}", port_text(x), port_text(y)),
        ));
    } else if problems.is_empty() && !open.is_empty() {
        let fix = match open.as_slice() {
            [x, y] => format!("cable {} to {}", port_text(x), port_text(y)),
            _ => format!(
                "give every node a cable to each of two different nodes ({} have one)",
                open.iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        problems.push(Problem::new(
            format!(
                "{} {} only one cable, so this cabling cannot form a ring",
                open.iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" and "),
                if open.len() == 1 { "has" } else { "have" }
            ),
            fix,
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // Walk the ring from the head.
    let mut ordered: Vec<Cable> = Vec::new();
    let mut at = 0usize;
    let mut used: BTreeSet<usize> = BTreeSet::new();
    while ordered.len() < cables.len() {
        let Some((i, c)) = cables
            .iter()
            .enumerate()
            .find(|(i, c)| !used.contains(i) && (pos(&c.a) == at || pos(&c.b) == at))
        else {
            break;
        };
        used.insert(i);
        at = if pos(&c.a) == at {
            pos(&c.b)
        } else {
            pos(&c.a)
        };
        ordered.push(c.clone());
    }
    Ok(Layout::Ring(ordered))
}

/// A port's index on its adapter: the PCI function of `enp1s0f1np1` (1); `None` for a name
/// without one.
pub fn port_index(port: &str) -> Option<u32> {
    let b = port.as_bytes();
    for (i, _) in port.match_indices('f') {
        let digits: String = port[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if !digits.is_empty()
            && port[i + 1 + digits.len()..].starts_with("np")
            && i > 0
            && b[i - 1].is_ascii_digit()
        {
            return digits.parse().ok();
        }
    }
    None
}

/// A ring's cabling direction: each node's port 0 cabled to the next node's port 1 (NVIDIA's
/// ring wiring), so no two nodes face a third with the same port index. Checked on the link map
/// (observed, given, or read from the addresses); every node whose two cables run the other way
/// round is named, with the swap that fixes it. Nothing for a cabling that is not a ring, or
/// whose ports carry no index.
pub fn ring_direction(nodes: &[NodeInput], map: &LinkMap) -> Vec<(NodeName, Problem)> {
    let Ok(Layout::Ring(cables)) = layout(nodes, map) else {
        return Vec::new();
    };
    let Some(head) = nodes.first().map(|n| &n.name) else {
        return Vec::new();
    };
    // Walk the ring from the head: for every node, the port facing the next node and the one
    // facing the previous node.
    struct Hop<'a> {
        node: &'a NodeName,
        out_port: &'a str,
        next: &'a NodeName,
        next_in_port: &'a str,
    }
    let mut hops: Vec<Hop> = Vec::new();
    let mut at = head;
    for c in &cables {
        let hop = if &c.a == at {
            Hop {
                node: &c.a,
                out_port: &c.a_port,
                next: &c.b,
                next_in_port: &c.b_port,
            }
        } else {
            Hop {
                node: &c.b,
                out_port: &c.b_port,
                next: &c.a,
                next_in_port: &c.a_port,
            }
        };
        at = hop.next;
        hops.push(hop);
    }
    let mut faces_next: Vec<(&NodeName, u32)> = Vec::new();
    for h in &hops {
        match (port_index(h.out_port), port_index(h.next_in_port)) {
            (Some(o), Some(_)) => faces_next.push((h.node, o)),
            _ => return Vec::new(),
        }
    }
    let wrong: Vec<&Hop> = hops
        .iter()
        .filter(|h| port_index(h.out_port) == port_index(h.next_in_port))
        .collect();
    if wrong.is_empty() {
        return Vec::new();
    }
    // Every node must face the next one with the same port; the fewer that do not, swap.
    let head_way = faces_next[0].1;
    let (same, other): (Vec<_>, Vec<_>) = faces_next.iter().partition(|(_, p)| *p == head_way);
    let swap: Vec<&NodeName> = if other.len() <= same.len() {
        other.iter().map(|(n, _)| *n).collect()
    } else {
        same.iter().map(|(n, _)| *n).collect()
    };
    let cables_text = wrong
        .iter()
        .map(|h| {
            format!(
                "{}:{} ↔ {}:{} (port {} to port {})",
                h.node,
                h.out_port,
                h.next,
                h.next_in_port,
                port_index(h.out_port).unwrap_or(0),
                port_index(h.next_in_port).unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    swap.into_iter()
        .map(|n| {
            let mine: Vec<(&str, &NodeName)> = hops
                .iter()
                .filter_map(|h| {
                    if h.node == n {
                        Some((h.out_port, h.next))
                    } else if h.next == n {
                        Some((h.next_in_port, h.node))
                    } else {
                        None
                    }
                })
                .collect();
            let fix = match mine.as_slice() {
                [(p1, n1), (p2, n2)] => format!(
                    "on {n}, swap its two cables: the one in {p1} (to {n1}) goes into {p2}, the one in {p2} (to {n2}) into {p1}; then `spark-launch fabric apply` again"
                ),
                _ => format!("on {n}, swap its two cables between its ports"),
            };
            (
                n.clone(),
                Problem::new(
                    format!(
                        "the ring is not cabled port 0 → next node's port 1: {cables_text} join the same port index, so two nodes face a third on the same port"
                    ),
                    fix,
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> End {
        s.parse().unwrap()
    }

    #[test]
    fn twin_sides_and_ports_come_from_the_pci_names() {
        assert_eq!(twin_side(&NetIf::new("enp1s0f1np1")), "");
        assert_eq!(twin_side(&NetIf::new("enP2p1s0f1np1")), "P2");
        assert_eq!(twin_side(&NetIf::new("eth0")), "");
        assert_eq!(port_key(&NetIf::new("enP2p1s0f1np1")), "enp1s0f1np1");
        assert_eq!(port_key(&NetIf::new("eth3")), "eth3");
    }

    #[test]
    fn links_that_share_an_end_are_one_segment() {
        let order: Vec<NodeName> = ["a", "b", "c"]
            .iter()
            .map(|n| NodeName::new(*n).unwrap())
            .collect();
        let mut m = LinkMap::default();
        m.add(Link::new(e("a:x"), e("b:x"), LinkSource::Given, &order));
        m.add(Link::new(e("c:x"), e("d:x"), LinkSource::Given, &order));
        m.add(Link::new(e("b:x"), e("c:x"), LinkSource::Given, &order));
        let s = segments(&m);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].ends.len(), 4);
    }
}
