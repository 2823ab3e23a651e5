//! Which interfaces discovery listens on: the fabric (netdevs of RDMA devices, from the local
//! probe) that are up with an IPv4 address, or what the user chose (`--interface`,
//! `--all-interfaces`). Pure: facts in, a choice (or the reason there is none) out.

use crate::probe::facts::{InterfaceFacts, NetIf, NodeFacts};

/// The interfaces to browse, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricChoice {
    pub interfaces: Vec<NetIf>,
    /// Fabric interfaces skipped (down or without IPv4), with the reason, for messages.
    pub skipped: Vec<(NetIf, String)>,
}

/// No interface to browse on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InterfaceError {
    #[error(
        "this machine has no RDMA devices (/sys/class/infiniband is empty), so it has no fabric interface to browse: name one with --interface IF, or use --all-interfaces"
    )]
    NoRdma,
    #[error("no fabric interface is up with an IPv4 address ({}): check the cable and the address (ip -br addr), or name one with --interface IF", .0.iter().map(|(i, why)| format!("{i}: {why}")).collect::<Vec<_>>().join("; "))]
    NoneUsable(Vec<(NetIf, String)>),
    #[error("no interface named {0} on this machine (it has: {1})")]
    Unknown(NetIf, String),
    #[error("{0} has no IPv4 address: mDNS over IPv4 needs one (ip -br addr show {0})")]
    NoAddress(NetIf),
    #[error("no interface other than loopback is up with an IPv4 address")]
    NoneAtAll,
}

fn usable(i: &InterfaceFacts) -> Result<(), String> {
    if !i.is_up() {
        return Err("down".into());
    }
    if i.ipv4.is_empty() {
        return Err("no IPv4 address".into());
    }
    Ok(())
}

/// Chooses the interfaces: `named` when given (each must exist and have IPv4), every
/// non-loopback interface with IPv4 when `all`, else the usable fabric interfaces.
pub fn choose_interfaces(
    facts: &NodeFacts,
    named: &[NetIf],
    all: bool,
) -> Result<FabricChoice, InterfaceError> {
    if !named.is_empty() {
        for n in named {
            let Some(i) = facts.interface(n) else {
                let have: Vec<&str> = facts.interfaces.iter().map(|i| i.name.as_str()).collect();
                return Err(InterfaceError::Unknown(n.clone(), have.join(", ")));
            };
            if i.ipv4.is_empty() {
                return Err(InterfaceError::NoAddress(n.clone()));
            }
        }
        return Ok(FabricChoice {
            interfaces: named.to_vec(),
            skipped: Vec::new(),
        });
    }
    if all {
        let interfaces: Vec<NetIf> = facts
            .interfaces
            .iter()
            .filter(|i| i.name.as_str() != "lo" && usable(i).is_ok())
            .filter(|i| i.ipv4.iter().any(|a| !a.addr.is_loopback()))
            .map(|i| i.name.clone())
            .collect();
        if interfaces.is_empty() {
            return Err(InterfaceError::NoneAtAll);
        }
        return Ok(FabricChoice {
            interfaces,
            skipped: Vec::new(),
        });
    }
    if facts.rdma_devices.is_empty() {
        return Err(InterfaceError::NoRdma);
    }
    let mut interfaces = Vec::new();
    let mut skipped = Vec::new();
    let mut fabric: Vec<&NetIf> = facts
        .rdma_devices
        .iter()
        .flat_map(|d| d.netdevs.iter())
        .collect();
    fabric.sort();
    fabric.dedup();
    for n in fabric {
        match facts.interface(n) {
            Some(i) => match usable(i) {
                Ok(()) => interfaces.push(n.clone()),
                Err(why) => skipped.push((n.clone(), why)),
            },
            None => skipped.push((n.clone(), "not in /sys/class/net".into())),
        }
    }
    if interfaces.is_empty() {
        return Err(InterfaceError::NoneUsable(skipped));
    }
    Ok(FabricChoice {
        interfaces,
        skipped,
    })
}

/// Each chosen interface with its first IPv4 address: where one-shot queries are sent from.
pub fn sources(facts: &NodeFacts, interfaces: &[NetIf]) -> Vec<(NetIf, std::net::Ipv4Addr)> {
    interfaces
        .iter()
        .filter_map(|n| Some((n.clone(), facts.interface(n)?.ipv4.first()?.addr)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NodeFacts {
        serde_json::from_value(serde_json::json!({
            "hostname": "spark", "arch": null, "routes": [],
            "interfaces": [
                {"name": "enP7s7", "operstate": "up", "mtu": 1500, "speed_mbps": null, "carrier": true, "mac": null,
                 "ipv4": [{"addr": "10.0.0.5", "prefix": 24}], "ipv6": []},
                {"name": "enp1s0f1np1", "operstate": "up", "mtu": 1500, "speed_mbps": null, "carrier": true, "mac": null,
                 "ipv4": [{"addr": "169.254.3.7", "prefix": 16}], "ipv6": []},
                {"name": "enP2p1s0f1np1", "operstate": "up", "mtu": 1500, "speed_mbps": null, "carrier": true, "mac": null,
                 "ipv4": [], "ipv6": []},
                {"name": "enp1s0f0np0", "operstate": "down", "mtu": 1500, "speed_mbps": null, "carrier": null, "mac": null,
                 "ipv4": [], "ipv6": []},
                {"name": "lo", "operstate": "unknown", "mtu": 65536, "speed_mbps": null, "carrier": true, "mac": null,
                 "ipv4": [{"addr": "127.0.0.1", "prefix": 8}], "ipv6": []}
            ],
            "rdma_devices": [
                {"name": "rocep1s0f1", "netdevs": ["enp1s0f1np1"], "ports": [], "hca_type": null, "fw_ver": null, "board_id": null},
                {"name": "roceP2p1s0f1", "netdevs": ["enP2p1s0f1np1"], "ports": [], "hca_type": null, "fw_ver": null, "board_id": null},
                {"name": "rocep1s0f0", "netdevs": ["enp1s0f0np0"], "ports": [], "hca_type": null, "fw_ver": null, "board_id": null}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn only_fabric_interfaces_that_are_up_with_ipv4_are_browsed() {
        let c = choose_interfaces(&facts(), &[], false).unwrap();
        assert_eq!(c.interfaces, vec![NetIf::new("enp1s0f1np1")]);
        assert_eq!(
            c.skipped,
            vec![
                (NetIf::new("enP2p1s0f1np1"), "no IPv4 address".to_string()),
                (NetIf::new("enp1s0f0np0"), "down".to_string())
            ]
        );
    }

    #[test]
    fn all_interfaces_widens_to_every_addressed_one_but_loopback() {
        let c = choose_interfaces(&facts(), &[], true).unwrap();
        assert_eq!(
            c.interfaces,
            vec![NetIf::new("enP7s7"), NetIf::new("enp1s0f1np1")]
        );
    }

    #[test]
    fn a_named_interface_must_exist_and_have_ipv4() {
        let f = facts();
        assert_eq!(
            choose_interfaces(&f, &[NetIf::new("enP7s7")], false)
                .unwrap()
                .interfaces,
            vec![NetIf::new("enP7s7")]
        );
        assert!(matches!(
            choose_interfaces(&f, &[NetIf::new("eth9")], false),
            Err(InterfaceError::Unknown(..))
        ));
        assert_eq!(
            choose_interfaces(&f, &[NetIf::new("enP2p1s0f1np1")], false),
            Err(InterfaceError::NoAddress(NetIf::new("enP2p1s0f1np1")))
        );
    }

    #[test]
    fn a_machine_without_rdma_or_without_a_usable_fabric_link_says_what_to_do() {
        let mut f = facts();
        f.rdma_devices.clear();
        assert!(
            choose_interfaces(&f, &[], false)
                .unwrap_err()
                .to_string()
                .contains("--interface IF, or use --all-interfaces")
        );
        let mut f = facts();
        f.interfaces.retain(|i| i.name.as_str() != "enp1s0f1np1");
        let e = choose_interfaces(&f, &[], false).unwrap_err().to_string();
        assert!(e.contains("enp1s0f1np1: not in /sys/class/net"), "{e}");
    }
}
