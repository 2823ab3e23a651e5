//! Subnets for the fabric: a pool (`--pool CIDR`, by default 192.168.0.0/16 starting at
//! 192.168.100.0/24, the range NVIDIA's guides use) handed out one /24 at a time, skipping
//! every subnet or route seen on any node (management, Docker bridges, VPNs, old fabric
//! addresses), and the rule that keeps a fabric that is already addressed consistently.
//!
//! Pure: facts in, subnets out.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;

use crate::derive::NodeInput;
use crate::probe::facts::{Ipv4Iface, Subnet};
use crate::probe::links::End;

/// The prefix length of every planned subnet.
pub const SUBNET_PREFIX: u8 = 24;

/// Where fabric subnets come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressPool {
    pub net: Ipv4Net,
    /// The first /24 offered (the pool wraps around to its start after its last one).
    pub first: Ipv4Net,
}

impl Default for AddressPool {
    fn default() -> Self {
        AddressPool {
            net: Ipv4Net::new(Ipv4Addr::new(192, 168, 0, 0), 16).unwrap_or_default(),
            first: Ipv4Net::new(Ipv4Addr::new(192, 168, 100, 0), 24).unwrap_or_default(),
        }
    }
}

impl fmt::Display for AddressPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.net)
    }
}

impl FromStr for AddressPool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let net: Ipv4Net = s
            .parse()
            .map_err(|_| format!("--pool {s:?} is not an IPv4 CIDR (e.g. 10.200.0.0/16)"))?;
        let net = net.trunc();
        if net.prefix_len() > SUBNET_PREFIX {
            return Err(format!(
                "--pool {s} is smaller than one /{SUBNET_PREFIX}: give a /{SUBNET_PREFIX} or larger (e.g. 10.200.0.0/16)"
            ));
        }
        if net.network().is_link_local() || net.network().is_loopback() {
            return Err(format!(
                "--pool {s} is link-local or loopback: give a private range (e.g. 10.200.0.0/16); for link-local addressing use --link-local"
            ));
        }
        let first = Ipv4Net::new(net.network(), SUBNET_PREFIX).map_err(|e| e.to_string())?;
        Ok(AddressPool { net, first })
    }
}

impl AddressPool {
    /// Every /24 of the pool, starting at `first` and wrapping around.
    pub fn candidates(&self) -> Vec<Subnet> {
        let Ok(all) = self.net.subnets(SUBNET_PREFIX) else {
            return Vec::new();
        };
        let all: Vec<Ipv4Net> = all.collect();
        let start = all.iter().position(|n| *n == self.first).unwrap_or(0);
        all[start..]
            .iter()
            .chain(&all[..start])
            .map(|n| subnet_of(*n))
            .collect()
    }
}

fn subnet_of(net: Ipv4Net) -> Subnet {
    Ipv4Iface {
        addr: net.network(),
        prefix: net.prefix_len(),
    }
    .subnet()
}

/// A subnet seen on a node, and where (for the notes and refusals).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub subnet: Subnet,
    pub what: String,
    /// Seen on a fabric netdev (an address or route of the fabric itself).
    pub fabric: bool,
}

/// Every subnet and route seen on any node, except link-local and loopback.
pub fn taken(nodes: &[NodeInput]) -> Vec<Taken> {
    let mut out: Vec<Taken> = Vec::new();
    // Each subnet once (the first sighting), through a set: linear in interfaces and routes.
    let mut seen = std::collections::HashSet::new();
    let mut push = |subnet: Subnet, what: String, fabric: bool| {
        if subnet.is_link_local()
            || subnet.net().network().is_loopback()
            || subnet.net().prefix_len() == 0
        {
            return;
        }
        if seen.insert(subnet) {
            out.push(Taken {
                subnet,
                what,
                fabric,
            });
        }
    };
    for n in nodes {
        let mgmt = n.facts.management_interface().map(|i| i.name.clone());
        for i in &n.facts.interfaces {
            for a in &i.ipv4 {
                let role = if Some(&i.name) == mgmt.as_ref() {
                    " (management)"
                } else {
                    ""
                };
                push(
                    a.subnet(),
                    format!("{} {}{role}", n.name, i.name),
                    n.facts.is_fabric_interface(&i.name),
                );
            }
        }
        for r in &n.facts.routes {
            if let Some(s) = r.subnet() {
                let dev = r
                    .dev
                    .as_ref()
                    .map(|d| d.to_string())
                    .unwrap_or_else(|| "?".into());
                let fabric = r
                    .dev
                    .as_ref()
                    .is_some_and(|d| n.facts.is_fabric_interface(d));
                push(s, format!("{} route {} via {dev}", n.name, r.dst), fabric);
            }
        }
    }
    out
}

/// Hands out subnets from the pool, never one that overlaps what is taken or already given.
pub struct Allocator {
    candidates: std::vec::IntoIter<Subnet>,
    avoid: Vec<Taken>,
    /// Candidates passed over, with what they overlap (first time each).
    pub skipped: Vec<(Subnet, Taken)>,
}

impl Allocator {
    pub fn new(pool: &AddressPool, avoid: Vec<Taken>) -> Allocator {
        Allocator {
            candidates: pool.candidates().into_iter(),
            avoid,
            skipped: Vec::new(),
        }
    }

    /// The next free subnet, or `None` when the pool is used up.
    pub fn next_free(&mut self) -> Option<Subnet> {
        for c in self.candidates.by_ref() {
            match self.avoid.iter().find(|t| t.subnet.overlaps(&c)) {
                Some(t) => {
                    if !self.skipped.iter().any(|(_, s)| s.subnet == t.subnet) {
                        self.skipped.push((c, t.clone()));
                    }
                }
                None => {
                    self.avoid.push(Taken {
                        subnet: c,
                        what: "this plan".into(),
                        fabric: true,
                    });
                    return Some(c);
                }
            }
        }
        None
    }
}

/// Address `host` (1-based) in `subnet`.
pub fn host_in(subnet: &Subnet, host: u32) -> Ipv4Iface {
    let base = u32::from(subnet.net().network());
    Ipv4Iface {
        addr: Ipv4Addr::from(base + host),
        prefix: subnet.net().prefix_len(),
    }
}

/// The addresses a group of ends holds when it is already addressed consistently: every end
/// has exactly one (non link-local) IPv4 address, all on one subnet, all different. `None`
/// otherwise.
pub fn consistent(nodes: &[NodeInput], ends: &[End]) -> Option<(Subnet, Vec<Ipv4Iface>)> {
    let mut addrs = Vec::new();
    for e in ends {
        let facts = &nodes.iter().find(|n| n.name == e.node)?.facts;
        let iface = facts.interface(&e.iface)?;
        match iface.ipv4.as_slice() {
            [one] if !one.addr.is_link_local() => addrs.push(*one),
            _ => return None,
        }
    }
    let subnet = addrs.first()?.subnet();
    let distinct = addrs
        .iter()
        .enumerate()
        .all(|(i, a)| addrs[..i].iter().all(|b| b.addr != a.addr));
    (addrs.iter().all(|a| a.subnet() == subnet) && distinct).then_some((subnet, addrs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pool_starts_at_192_168_100_and_wraps_around() {
        let c = AddressPool::default().candidates();
        assert_eq!(c.len(), 256);
        assert_eq!(c[0].to_string(), "192.168.100.0/24");
        assert_eq!(c[155].to_string(), "192.168.255.0/24");
        assert_eq!(c[156].to_string(), "192.168.0.0/24");
    }

    #[test]
    fn a_pool_smaller_than_one_subnet_or_link_local_is_refused_with_an_example() {
        assert!(
            "10.0.0.0/28"
                .parse::<AddressPool>()
                .unwrap_err()
                .contains("smaller than one /24")
        );
        assert!(
            "169.254.0.0/16"
                .parse::<AddressPool>()
                .unwrap_err()
                .contains("--link-local")
        );
        let p: AddressPool = "10.200.7.9/16".parse().unwrap();
        assert_eq!(p.candidates()[0].to_string(), "10.200.0.0/24");
    }

    #[test]
    fn the_allocator_skips_what_overlaps_and_says_why() {
        let s: Subnet = Ipv4Iface {
            addr: Ipv4Addr::new(192, 168, 100, 0),
            prefix: 22,
        }
        .subnet();
        let mut a = Allocator::new(
            &AddressPool::default(),
            vec![Taken {
                subnet: s,
                what: "spark enP7s7 (management)".into(),
                fabric: false,
            }],
        );
        assert_eq!(a.next_free().unwrap().to_string(), "192.168.104.0/24");
        assert_eq!(a.next_free().unwrap().to_string(), "192.168.105.0/24");
        assert_eq!(a.skipped.len(), 1);
        assert_eq!(a.skipped[0].0.to_string(), "192.168.100.0/24");
        assert_eq!(host_in(&s, 3).to_string(), "192.168.100.3/22");
    }
}
