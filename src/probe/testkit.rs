//! Test-only building blocks for node facts made in code, shared by the derive and doctor
//! tests: a DGX Spark's four CX-7 functions (two twins per QSFP port, seed 001), and what the
//! kernel shows when a cable is plugged (netdev up, port ACTIVE/LinkUp, link-local GIDs 0: v1
//! and 1: v2) or an IPv4 address is added (its IPv4-mapped GIDs, v1 then v2, at the next free
//! indexes). Builds data, touches nothing.

use super::facts::*;

/// (RDMA device, its netdev) of a Spark's four CX-7 functions.
pub const SPARK_FUNCS: [(&str, &str); 4] = [
    ("rocep1s0f0", "enp1s0f0np0"),
    ("rocep1s0f1", "enp1s0f1np1"),
    ("roceP2p1s0f0", "enP2p1s0f0np0"),
    ("roceP2p1s0f1", "enP2p1s0f1np1"),
];

/// A Spark's four CX-7 functions as RDMA devices, no cable plugged: port 1 DOWN/Disabled,
/// Ethernet, no GIDs, nothing else recorded.
pub fn spark_devices() -> Vec<RdmaDeviceFacts> {
    SPARK_FUNCS
        .iter()
        .map(|(d, n)| RdmaDeviceFacts {
            name: IbDevice::new(*d),
            netdevs: vec![NetIf::new(*n)],
            ports: vec![PortFacts {
                port: 1,
                state: PortState::parse("1: DOWN"),
                phys_state: Some(PhysState::parse("3: Disabled")),
                link_layer: LinkLayer::Ethernet,
                rate: None,
                gids: vec![],
            }],
            hca_type: None,
            fw_ver: None,
            board_id: None,
        })
        .collect()
}

/// An interface that is down, MTU 1500, with no address.
pub fn iface(name: &str) -> InterfaceFacts {
    InterfaceFacts {
        name: NetIf::new(name),
        operstate: OperState::Down,
        mtu: Some(1500),
        speed_mbps: None,
        carrier: None,
        mac: None,
        ipv4: vec![],
        ipv6: vec![],
    }
}

/// `a.b.c.d/p`.
pub fn v4(s: &str) -> Ipv4Iface {
    let (a, p) = s.split_once('/').unwrap();
    Ipv4Iface {
        addr: a.parse().unwrap(),
        prefix: p.parse().unwrap(),
    }
}

/// The RDMA device whose first netdev is `netdev`.
pub fn dev_of<'a>(facts: &'a mut NodeFacts, netdev: &str) -> &'a mut RdmaDeviceFacts {
    facts
        .rdma_devices
        .iter_mut()
        .find(|d| d.netdevs[0].as_str() == netdev)
        .unwrap()
}

/// The interface named `netdev`.
pub fn if_mut<'a>(facts: &'a mut NodeFacts, netdev: &str) -> &'a mut InterfaceFacts {
    facts
        .interfaces
        .iter_mut()
        .find(|i| i.name.as_str() == netdev)
        .unwrap()
}

/// Cable plugged: netdev up with carrier, its device's port ACTIVE with its link-local GIDs.
pub fn plug(facts: &mut NodeFacts, netdev: &str) {
    let i = if_mut(facts, netdev);
    i.operstate = OperState::Up;
    i.carrier = Some(true);
    let nd = NetIf::new(netdev);
    let p = &mut dev_of(facts, netdev).ports[0];
    p.state = PortState::parse("4: ACTIVE");
    p.phys_state = Some(PhysState::parse("5: LinkUp"));
    p.gids = vec![
        GidEntry {
            index: 0,
            gid: "fe80::1".parse().unwrap(),
            gid_type: Some(GidType::IbRoceV1),
            ndev: Some(nd.clone()),
        },
        GidEntry {
            index: 1,
            gid: "fe80::1".parse().unwrap(),
            gid_type: Some(GidType::RoceV2),
            ndev: Some(nd),
        },
    ];
}

/// An IPv4 address on `netdev`, with the GIDs the kernel adds for it (v1, then v2).
pub fn add_ipv4(facts: &mut NodeFacts, netdev: &str, cidr: &str) {
    let a = v4(cidr);
    if_mut(facts, netdev).ipv4.push(a);
    let nd = NetIf::new(netdev);
    let p = &mut dev_of(facts, netdev).ports[0];
    let next = p.gids.iter().map(|g| g.index + 1).max().unwrap_or(0);
    let mapped = a.addr.to_ipv6_mapped();
    p.gids.push(GidEntry {
        index: next,
        gid: mapped,
        gid_type: Some(GidType::IbRoceV1),
        ndev: Some(nd.clone()),
    });
    p.gids.push(GidEntry {
        index: next + 1,
        gid: mapped,
        gid_type: Some(GidType::RoceV2),
        ndev: Some(nd),
    });
}
