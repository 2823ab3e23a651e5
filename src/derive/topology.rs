//! The fabric as the nodes' addresses describe it: which fabric subnets join which nodes, and
//! what shape that makes (`single`, `direct`, `switch`, `ring`).
//!
//! A fabric address is an IPv4 address on a netdev of an RDMA device. Only addresses on ACTIVE
//! devices join nodes: a cable that is down connects nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::probe::facts::{IbDevice, Ipv4Iface, NetIf, NodeFacts, Subnet};

/// The shape of the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// One node.
    Single,
    /// Two nodes sharing a fabric subnet (one cable, or a switch with two nodes).
    Direct,
    /// Three or more nodes on one shared fabric subnet (a switch).
    Switch,
    /// Three or more nodes where each fabric subnet joins exactly two nodes (one subnet per
    /// cable; a 3-node triangle is a ring).
    Ring,
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Topology::Single => "single",
            Topology::Direct => "direct",
            Topology::Switch => "switch",
            Topology::Ring => "ring",
        })
    }
}

impl std::str::FromStr for Topology {
    type Err = String;
    /// `direct`, `switch`, `ring`, `single` (what `--topology` takes).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Topology::Direct,
            Topology::Switch,
            Topology::Ring,
            Topology::Single,
        ]
        .into_iter()
        .find(|t| t.to_string() == s)
        .ok_or_else(|| format!("expected direct, switch, ring or single, got {s:?}"))
    }
}

/// One IPv4 address on a fabric interface of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricAddr {
    pub node: usize,
    pub iface: NetIf,
    pub addr: Ipv4Iface,
    pub device: IbDevice,
    /// The device has an ACTIVE port.
    pub active: bool,
}

impl FabricAddr {
    pub fn subnet(&self) -> Subnet {
        self.addr.subnet()
    }
}

/// Every fabric address of one node, in interface order.
pub fn fabric_addrs(node: usize, facts: &NodeFacts) -> Vec<FabricAddr> {
    let mut out = Vec::new();
    for dev in &facts.rdma_devices {
        for netdev in &dev.all_netdevs() {
            let Some(iface) = facts.interface(netdev) else {
                continue;
            };
            for addr in &iface.ipv4 {
                out.push(FabricAddr {
                    node,
                    iface: netdev.clone(),
                    addr: *addr,
                    device: dev.name.clone(),
                    active: dev.is_active(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.iface.cmp(&b.iface).then(a.addr.cmp(&b.addr)));
    out
}

/// Which nodes each fabric subnet joins (ACTIVE devices only).
#[derive(Clone, Debug, Default)]
pub struct SubnetMap {
    pub members: BTreeMap<Subnet, BTreeSet<usize>>,
}

impl SubnetMap {
    pub fn build(addrs: &[FabricAddr]) -> SubnetMap {
        let mut members: BTreeMap<Subnet, BTreeSet<usize>> = BTreeMap::new();
        for a in addrs.iter().filter(|a| a.active) {
            members.entry(a.subnet()).or_default().insert(a.node);
        }
        SubnetMap { members }
    }

    /// Subnets that every one of `n` nodes is on.
    pub fn common(&self, n: usize) -> Vec<Subnet> {
        self.members
            .iter()
            .filter(|(_, m)| m.len() == n)
            .map(|(s, _)| *s)
            .collect()
    }

    /// True when `subnet` joins `node` with at least one other node.
    pub fn is_shared_by(&self, subnet: &Subnet, node: usize) -> bool {
        self.members
            .get(subnet)
            .is_some_and(|m| m.contains(&node) && m.len() >= 2)
    }

    /// Subnets that join at least two nodes.
    fn links(&self) -> impl Iterator<Item = (&Subnet, &BTreeSet<usize>)> {
        self.members.iter().filter(|(_, m)| m.len() >= 2)
    }
}

/// How the nodes are joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    Single,
    /// Every node is on each of these subnets (at least one).
    Shared(Vec<Subnet>),
    /// Every joining subnet joins exactly two nodes and they form one connected graph.
    Ring,
    /// None of the above: some nodes share no subnet with some others.
    Partitioned,
}

/// Classifies `n` nodes joined as `map` says.
pub fn classify(n: usize, map: &SubnetMap) -> Shape {
    if n <= 1 {
        return Shape::Single;
    }
    let common = map.common(n);
    if !common.is_empty() {
        return Shape::Shared(common);
    }
    let links: Vec<&BTreeSet<usize>> = map.links().map(|(_, m)| m).collect();
    if n >= 3 && !links.is_empty() && links.iter().all(|m| m.len() == 2) && connected(n, &links) {
        return Shape::Ring;
    }
    Shape::Partitioned
}

fn connected(n: usize, links: &[&BTreeSet<usize>]) -> bool {
    let mut seen = BTreeSet::from([0usize]);
    let mut frontier = vec![0usize];
    while let Some(node) = frontier.pop() {
        for m in links.iter().filter(|m| m.contains(&node)) {
            for &other in m.iter() {
                if seen.insert(other) {
                    frontier.push(other);
                }
            }
        }
    }
    seen.len() == n
}

/// The topology label for a shape.
pub fn topology_of(n: usize, shape: &Shape) -> Topology {
    match shape {
        Shape::Single => Topology::Single,
        Shape::Ring => Topology::Ring,
        Shape::Shared(_) | Shape::Partitioned => {
            if n == 2 {
                Topology::Direct
            } else {
                Topology::Switch
            }
        }
    }
}

/// Each node's neighbours in the fabric graph (nodes it shares a subnet with).
pub fn neighbours(map: &SubnetMap, node: usize) -> BTreeSet<usize> {
    map.links()
        .filter(|(_, m)| m.contains(&node))
        .flat_map(|(_, m)| m.iter().copied())
        .filter(|&o| o != node)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(links: &[(&str, &[usize])]) -> SubnetMap {
        let mut members = BTreeMap::new();
        for (s, nodes) in links {
            let subnet: Ipv4Iface = {
                let (a, p) = s.split_once('/').unwrap();
                Ipv4Iface {
                    addr: a.parse().unwrap(),
                    prefix: p.parse().unwrap(),
                }
            };
            members.insert(subnet.subnet(), nodes.iter().copied().collect());
        }
        SubnetMap { members }
    }

    #[test]
    fn one_subnet_for_all_nodes_is_direct_for_two_and_switch_for_more() {
        let m = map(&[("10.0.0.0/24", &[0, 1])]);
        assert_eq!(topology_of(2, &classify(2, &m)), Topology::Direct);
        let m = map(&[("10.0.0.0/24", &[0, 1, 2, 3])]);
        assert_eq!(topology_of(4, &classify(4, &m)), Topology::Switch);
    }

    #[test]
    fn a_triangle_with_a_subnet_per_cable_is_a_ring() {
        let m = map(&[
            ("192.168.101.0/24", &[0, 1]),
            ("192.168.100.0/24", &[0, 2]),
            ("192.168.102.0/24", &[1, 2]),
        ]);
        assert_eq!(classify(3, &m), Shape::Ring);
    }

    #[test]
    fn a_four_node_ring_is_a_ring() {
        let m = map(&[
            ("10.0.1.0/24", &[0, 1]),
            ("10.0.2.0/24", &[1, 2]),
            ("10.0.3.0/24", &[2, 3]),
            ("10.0.4.0/24", &[3, 0]),
        ]);
        assert_eq!(classify(4, &m), Shape::Ring);
    }

    #[test]
    fn two_islands_are_partitioned_not_a_ring() {
        let m = map(&[("10.0.1.0/24", &[0, 1]), ("10.0.2.0/24", &[2, 3])]);
        assert_eq!(classify(4, &m), Shape::Partitioned);
        let m = map(&[("10.0.1.0/24", &[0]), ("10.0.2.0/24", &[1])]);
        assert_eq!(classify(2, &m), Shape::Partitioned);
    }

    #[test]
    fn a_switch_with_one_node_also_on_a_side_cable_is_still_shared() {
        let m = map(&[("10.0.0.0/24", &[0, 1, 2]), ("10.9.0.0/24", &[0, 1])]);
        assert!(matches!(classify(3, &m), Shape::Shared(_)));
    }
}
