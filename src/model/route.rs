//! Which path each worker's copy of the weights takes to the head over the fabric. Two nodes
//! that share a fabric subnet (a cable, or a switch) are neighbours: the worker reaches the
//! head's address on that subnet directly. In a ring (one subnet per cable) a worker that is
//! not the head's neighbour goes through a node that is a neighbour of both: its SSH
//! connection to the head is carried through that node's sshd (`ssh -W`), nothing is written
//! there. With no fabric path at all, the copy uses the control-plane address, as before.
//!
//! Pure: probed facts in (`derive::topology`'s fabric addresses, ACTIVE devices only), one
//! route per worker out.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::derive::NodeInput;
use crate::derive::topology::fabric_addrs;
use crate::node::NodeName;

/// How one worker reaches the head for its copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "route", rename_all = "kebab-case")]
pub enum CopyRoute {
    /// The head's address on a subnet the worker shares with it.
    Direct { head_addr: Ipv4Addr },
    /// Through `via`: the worker connects to `via_addr` (on the subnet it shares with `via`),
    /// and from there to `head_addr` (on the subnet `via` shares with the head).
    Relay {
        via: NodeName,
        via_addr: Ipv4Addr,
        head_addr: Ipv4Addr,
    },
    /// No fabric path: the control-plane address the caller already has.
    Control,
}

/// Active fabric addresses of node `i`: (subnet, address).
fn addrs(i: usize, n: &NodeInput) -> Vec<(crate::probe::facts::Subnet, Ipv4Addr)> {
    fabric_addrs(i, &n.facts)
        .into_iter()
        .filter(|a| a.active)
        .map(|a| (a.subnet(), a.addr.addr))
        .collect()
}

/// `a`'s address on a subnet it shares with `b`, and `b`'s on it.
fn shared(
    a: &[(crate::probe::facts::Subnet, Ipv4Addr)],
    b: &[(crate::probe::facts::Subnet, Ipv4Addr)],
) -> Option<(Ipv4Addr, Ipv4Addr)> {
    a.iter()
        .find_map(|(sa, aa)| b.iter().find(|(sb, _)| sb == sa).map(|(_, ba)| (*aa, *ba)))
}

/// One route per worker (`nodes[1..]`), the head being `nodes[0]`. A relay is the first node
/// (in cluster order, the head's neighbours first found) that shares a subnet with both.
pub fn copy_routes(nodes: &[NodeInput]) -> Vec<(NodeName, CopyRoute)> {
    let all: Vec<_> = nodes.iter().enumerate().map(|(i, n)| addrs(i, n)).collect();
    let Some(head) = all.first() else {
        return Vec::new();
    };
    (1..nodes.len())
        .map(|w| {
            let route = if let Some((head_addr, _)) = shared(head, &all[w]) {
                CopyRoute::Direct { head_addr }
            } else {
                (1..nodes.len())
                    .filter(|m| *m != w)
                    .find_map(|m| {
                        let (head_addr, _) = shared(head, &all[m])?;
                        let (via_addr, _) = shared(&all[m], &all[w])?;
                        Some(CopyRoute::Relay {
                            via: nodes[m].name.clone(),
                            via_addr,
                            head_addr,
                        })
                    })
                    .unwrap_or(CopyRoute::Control)
            };
            (nodes[w].name.clone(), route)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::*;
    use crate::probe::testkit::{SPARK_FUNCS, add_ipv4, iface, plug, spark_devices};

    /// A Spark with port 0 (`enp1s0f0np0`) and port 1 (`enp1s0f1np1`) cabled and addressed.
    fn spark(host: &str, port0: &str, port1: &str) -> NodeFacts {
        let mut facts = NodeFacts {
            hostname: host.into(),
            arch: Some("aarch64".into()),
            interfaces: SPARK_FUNCS.iter().map(|(_, n)| iface(n)).collect(),
            rdma_devices: spark_devices(),
            routes: vec![],
            host: HostFacts::default(),
            links: None,
            netplan: None,
            unparsed: Vec::new(),
            ip_recorded: Default::default(),
        };
        for (netdev, cidr) in [("enp1s0f0np0", port0), ("enp1s0f1np1", port1)] {
            plug(&mut facts, netdev);
            add_ipv4(&mut facts, netdev, cidr);
        }
        facts
    }

    fn ring4() -> Vec<NodeInput> {
        // n1 -a- n2 -b- n3 -c- n4 -d- n1, one /24 per cable: port 1 to the next node, port 0
        // to the previous one.
        let links = [
            ("169.254.11.1", "169.254.11.2"),
            ("169.254.12.1", "169.254.12.2"),
            ("169.254.13.1", "169.254.13.2"),
            ("169.254.14.1", "169.254.14.2"),
        ];
        (0..4)
            .map(|i| NodeInput {
                name: NodeName::new(format!("n{}", i + 1)).unwrap(),
                facts: spark(
                    &format!("n{}", i + 1),
                    &format!("{}/24", links[(i + 3) % 4].1),
                    &format!("{}/24", links[i].0),
                ),
            })
            .collect()
    }

    #[test]
    fn in_a_ring_the_far_node_goes_through_a_neighbour_of_both() {
        let routes = copy_routes(&ring4());
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            routes[0].1,
            CopyRoute::Direct {
                head_addr: ip("169.254.11.1")
            }
        );
        assert_eq!(
            routes[1].1,
            CopyRoute::Relay {
                via: NodeName::new("n2").unwrap(),
                via_addr: ip("169.254.12.1"),
                head_addr: ip("169.254.11.1"),
            }
        );
        assert_eq!(
            routes[2].1,
            CopyRoute::Direct {
                head_addr: ip("169.254.14.2")
            }
        );
    }
}
