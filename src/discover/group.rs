//! From mDNS answers to one row per node: a node seen on two twins (or answering twice) is one
//! node with several addresses, each with the local interface it was seen on; the machine we
//! run on is marked local. Pure.

use std::net::Ipv4Addr;

use serde::Serialize;

use crate::probe::facts::{NetIf, NodeFacts};

use super::MdnsAnswer;

/// One node that answered, as `discover` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiscoveredNode {
    /// The host name without `.local.` (`spark-1d84`).
    pub name: String,
    /// The mDNS host name (`spark-1d84.local.`).
    pub fqdn: String,
    /// Every IPv4 address it answered with, sorted.
    pub addresses: Vec<FoundAddress>,
    /// True for the machine spark-launch runs on.
    pub local: bool,
}

/// An address of a discovered node and the local interface it was seen on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FoundAddress {
    pub ip: Ipv4Addr,
    pub interface: NetIf,
}

/// Groups answers by host name; the local node first, then by name. This machine is always
/// listed (with its addresses on the browsed interfaces), whether or not its own responder
/// answered in time.
pub fn group(answers: &[MdnsAnswer], local: &NodeFacts, browsed: &[NetIf]) -> Vec<DiscoveredNode> {
    let me = MdnsAnswer {
        instance: String::new(),
        host: format!("{}.local.", local.hostname),
        port: 22,
        ipv4: browsed
            .iter()
            .filter_map(|n| local.interface(n))
            .flat_map(|i| i.ipv4.iter().map(|a| (a.addr, vec![i.name.clone()])))
            .collect(),
    };
    let mut nodes: Vec<DiscoveredNode> = Vec::new();
    for a in std::iter::once(&me).chain(answers) {
        let fqdn = fqdn_of(a);
        let idx = match nodes
            .iter()
            .position(|n| n.fqdn.eq_ignore_ascii_case(&fqdn))
        {
            Some(i) => i,
            None => {
                nodes.push(DiscoveredNode {
                    name: short_name(&fqdn),
                    fqdn: fqdn.clone(),
                    addresses: Vec::new(),
                    local: false,
                });
                nodes.len() - 1
            }
        };
        let node = &mut nodes[idx];
        for (ip, ifs) in &a.ipv4 {
            if node.addresses.iter().any(|x| x.ip == *ip) {
                continue;
            }
            let Some(interface) = pick_interface(*ip, ifs, local) else {
                continue;
            };
            node.addresses.push(FoundAddress { ip: *ip, interface });
        }
    }
    let local_ips: Vec<Ipv4Addr> = local
        .interfaces
        .iter()
        .flat_map(|i| i.ipv4.iter().map(|a| a.addr))
        .collect();
    for n in nodes.iter_mut() {
        n.addresses.sort_by_key(|a| a.ip);
        n.local = n.name.eq_ignore_ascii_case(&local.hostname)
            || n.addresses.iter().any(|a| local_ips.contains(&a.ip));
    }
    nodes.retain(|n| !n.addresses.is_empty());
    nodes.sort_by(|a, b| b.local.cmp(&a.local).then_with(|| a.name.cmp(&b.name)));
    nodes
}

fn fqdn_of(a: &MdnsAnswer) -> String {
    let host = if a.host.is_empty() {
        format!("{}.local.", a.instance.split('.').next().unwrap_or(""))
    } else {
        a.host.clone()
    };
    if host.ends_with('.') {
        host
    } else {
        format!("{host}.")
    }
}

fn short_name(fqdn: &str) -> String {
    let h = fqdn.trim_end_matches('.');
    h.strip_suffix(".local").unwrap_or(h).to_string()
}

/// The interface an address was seen on: the one whose subnet holds it, else the first.
fn pick_interface(ip: Ipv4Addr, seen_on: &[NetIf], local: &NodeFacts) -> Option<NetIf> {
    seen_on
        .iter()
        .find(|n| {
            local
                .interface(n)
                .is_some_and(|i| i.ipv4.iter().any(|a| a.net().contains(&ip)))
        })
        .or_else(|| seen_on.first())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> NodeFacts {
        serde_json::from_value(serde_json::json!({
            "hostname": "spark-a", "arch": null, "routes": [], "rdma_devices": [],
            "interfaces": [
                {"name": "enp1s0f1np1", "operstate": "up", "mtu": 1500, "speed_mbps": null, "carrier": true, "mac": null,
                 "ipv4": [{"addr": "169.254.1.1", "prefix": 16}], "ipv6": []},
                {"name": "enP2p1s0f1np1", "operstate": "up", "mtu": 1500, "speed_mbps": null, "carrier": true, "mac": null,
                 "ipv4": [{"addr": "192.168.50.1", "prefix": 24}], "ipv6": []}
            ]
        }))
        .unwrap()
    }

    fn answer(instance: &str, host: &str, ips: &[(&str, &[&str])]) -> MdnsAnswer {
        MdnsAnswer {
            instance: instance.into(),
            host: host.into(),
            port: 22,
            ipv4: ips
                .iter()
                .map(|(ip, ifs)| {
                    (
                        ip.parse().unwrap(),
                        ifs.iter().map(|i| NetIf::new(*i)).collect(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_node_seen_on_both_twins_is_one_node_with_two_addresses() {
        let nodes = group(
            &[
                answer(
                    "spark-b._ssh._tcp.local.",
                    "spark-b.local.",
                    &[("169.254.7.2", &["enP2p1s0f1np1", "enp1s0f1np1"])],
                ),
                answer(
                    "spark-b._ssh._tcp.local.",
                    "spark-b.local.",
                    &[("192.168.50.2", &["enP2p1s0f1np1"])],
                ),
            ],
            &local(),
            &[],
        );
        assert_eq!(
            nodes,
            vec![DiscoveredNode {
                name: "spark-b".into(),
                fqdn: "spark-b.local.".into(),
                addresses: vec![
                    FoundAddress {
                        ip: "169.254.7.2".parse().unwrap(),
                        interface: NetIf::new("enp1s0f1np1")
                    },
                    FoundAddress {
                        ip: "192.168.50.2".parse().unwrap(),
                        interface: NetIf::new("enP2p1s0f1np1")
                    },
                ],
                local: false,
            }]
        );
    }

    #[test]
    fn this_machine_is_marked_local_and_listed_first() {
        let nodes = group(
            &[
                answer(
                    "aaa._ssh._tcp.local.",
                    "aaa.local.",
                    &[("169.254.1.9", &["enp1s0f1np1"])],
                ),
                answer(
                    "spark-a._ssh._tcp.local.",
                    "spark-a.local.",
                    &[("169.254.1.1", &["enp1s0f1np1"])],
                ),
            ],
            &local(),
            &[NetIf::new("enp1s0f1np1")],
        );
        let order: Vec<(&str, bool)> = nodes.iter().map(|n| (n.name.as_str(), n.local)).collect();
        assert_eq!(order, vec![("spark-a", true), ("aaa", false)]);
    }

    #[test]
    fn this_machine_is_listed_even_when_its_own_responder_did_not_answer() {
        let nodes = group(
            &[answer(
                "b._ssh._tcp.local.",
                "b.local.",
                &[("169.254.1.2", &["enp1s0f1np1"])],
            )],
            &local(),
            &[NetIf::new("enp1s0f1np1")],
        );
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].name, "spark-a");
        assert!(nodes[0].local);
        assert_eq!(nodes[0].fqdn, "spark-a.local.");
        assert_eq!(nodes[0].addresses[0].ip.to_string(), "169.254.1.1");
    }

    #[test]
    fn the_json_shape_is_the_documented_one() {
        let nodes = group(
            &[answer(
                "spark-1d84._ssh._tcp.local.",
                "spark-1d84.local.",
                &[("169.254.12.7", &["enp1s0f1np1"])],
            )],
            &local(),
            &[],
        );
        assert_eq!(
            serde_json::to_string(&nodes).unwrap(),
            r#"[{"name":"spark-1d84","fqdn":"spark-1d84.local.","addresses":[{"ip":"169.254.12.7","interface":"enp1s0f1np1"}],"local":false}]"#
        );
    }
}
