//! One test per derivation rule, on facts built in code (the fixture snapshots under
//! `tests/fixtures/` prove the same rules end to end through the reader).

use std::net::Ipv4Addr;

use super::*;
use crate::probe::facts::*;
use crate::probe::testkit::{self, SPARK_FUNCS, iface, v4};

/// Builds Spark-like facts: four CX-7 functions (two per QSFP port, twins), all DOWN, plus a
/// management NIC `enP7s7` with the default route.
struct Node {
    facts: NodeFacts,
}

impl Node {
    fn spark(host: &str, mgmt: Option<&str>) -> Node {
        let mut interfaces: Vec<InterfaceFacts> =
            SPARK_FUNCS.iter().map(|(_, n)| iface(n)).collect();
        let mut routes = vec![];
        if let Some(m) = mgmt {
            let mut i = iface("enP7s7");
            i.operstate = OperState::Up;
            i.ipv4.push(v4(m));
            interfaces.push(i);
            routes.push(RouteFacts {
                dst: "default".into(),
                dev: Some(NetIf::new("enP7s7")),
                gateway: None,
                prefsrc: None,
                metric: Some(100),
            });
        }
        let rdma_devices = testkit::spark_devices();
        let mut facts = NodeFacts {
            hostname: host.into(),
            arch: Some("aarch64".into()),
            interfaces,
            rdma_devices,
            routes,
            host: HostFacts::default(),
            links: None,
            netplan: None,
            unparsed: Vec::new(),
            ip_recorded: Default::default(),
        };
        facts.interfaces.sort_by(|a, b| a.name.cmp(&b.name));
        Node { facts }
    }

    fn dev_of(&mut self, netdev: &str) -> &mut RdmaDeviceFacts {
        testkit::dev_of(&mut self.facts, netdev)
    }

    fn if_mut(&mut self, netdev: &str) -> &mut InterfaceFacts {
        testkit::if_mut(&mut self.facts, netdev)
    }

    /// Cable plugged: netdev up, device ACTIVE with its link-local GIDs.
    fn up(mut self, netdev: &str) -> Self {
        testkit::plug(&mut self.facts, netdev);
        self
    }

    /// An IPv4 address on the netdev, with the GIDs the kernel adds for it (2: v1, 3: v2).
    fn addr(mut self, netdev: &str, cidr: &str) -> Self {
        testkit::add_ipv4(&mut self.facts, netdev, cidr);
        self
    }

    fn mtu(mut self, netdev: &str, mtu: u32) -> Self {
        self.if_mut(netdev).mtu = Some(mtu);
        self
    }

    fn named(self, name: &str) -> NodeInput {
        NodeInput {
            name: NodeName::new(name).unwrap(),
            facts: self.facts,
        }
    }
}

/// Two Sparks on one cable, IP on one twin (seed 001).
fn seed_001_pair() -> Vec<NodeInput> {
    vec![
        Node::spark("spark", Some("10.0.0.11/24"))
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f1np1", "192.168.177.11/24")
            .named("spark"),
        Node::spark("spark2", Some("10.0.0.12/24"))
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f1np1", "192.168.177.12/24")
            .named("spark2"),
    ]
}

fn env<'a>(c: &'a ClusterEnv, node: &str, var: &str) -> Option<&'a str> {
    c.nodes
        .iter()
        .find(|n| n.name.as_str() == node)?
        .env
        .get(var)
        .map(|s| s.as_str())
}

#[test]
fn nccl_ib_hca_includes_both_twins_even_the_one_without_an_ip() {
    let c = derive(&seed_001_pair()).unwrap();
    assert_eq!(c.topology, Topology::Direct);
    assert_eq!(
        env(&c, "spark", "NCCL_IB_HCA"),
        Some("rocep1s0f1,roceP2p1s0f1")
    );
    assert_eq!(
        env(&c, "spark2", "NCCL_IB_HCA"),
        Some("rocep1s0f1,roceP2p1s0f1")
    );
}

#[test]
fn nccl_ib_hca_never_includes_a_down_device_and_warns_about_the_down_twin() {
    // Seed 000: the author's "disable unused NICs" script downed enp1s0f0np0, the twin of the
    // interface carrying the IP.
    let nodes = vec![
        Node::spark("spark-01", None)
            .up("enP2p1s0f0np0")
            .addr("enP2p1s0f0np0", "192.168.100.1/24")
            .named("spark-01"),
        Node::spark("spark-02", None)
            .up("enP2p1s0f0np0")
            .addr("enP2p1s0f0np0", "192.168.100.2/24")
            .named("spark-02"),
    ];
    let c = derive(&nodes).unwrap();
    assert_eq!(env(&c, "spark-01", "NCCL_IB_HCA"), Some("roceP2p1s0f0"));
    let w = &c.nodes[0].warnings;
    assert!(
        w.iter()
            .any(|w| w.contains("twin rocep1s0f0 (enp1s0f0np0) is not ACTIVE")),
        "{w:#?}"
    );
}

#[test]
fn names_are_each_nodes_own_never_the_heads() {
    // Heterogeneous pair (seed 004): a Spark and a ConnectX-5 workstation.
    let mut ws = Node::spark("ws", Some("192.168.1.20/24"));
    ws.facts.rdma_devices = vec![RdmaDeviceFacts {
        name: IbDevice::new("mlx5_0"),
        netdevs: vec![NetIf::new("enp1s0f0np0")],
        ports: ws.facts.rdma_devices[0].ports.clone(),
        hca_type: None,
        fw_ver: None,
        board_id: None,
    }];
    ws.facts
        .interfaces
        .retain(|i| i.name.as_str() == "enp1s0f0np0" || i.name.as_str() == "enP7s7");
    let ws = ws.up("enp1s0f0np0").addr("enp1s0f0np0", "192.168.200.2/24");
    let nodes = vec![
        Node::spark("spark", Some("192.168.1.10/24"))
            .up("enp1s0f0np0")
            .up("enP2p1s0f0np0")
            .addr("enp1s0f0np0", "192.168.200.1/24")
            .named("spark"),
        ws.named("ws"),
    ];
    let c = derive(&nodes).unwrap();
    assert_eq!(
        env(&c, "spark", "NCCL_IB_HCA"),
        Some("rocep1s0f0,roceP2p1s0f0")
    );
    assert_eq!(env(&c, "ws", "NCCL_IB_HCA"), Some("mlx5_0"));
    assert_eq!(env(&c, "ws", "NCCL_SOCKET_IFNAME"), Some("enp1s0f0np0"));
    assert_eq!(env(&c, "ws", "NCCL_IB_GID_INDEX"), Some("3"));
}

#[test]
fn the_control_plane_uses_the_interface_on_the_subnet_shared_with_the_head() {
    let c = derive(&seed_001_pair()).unwrap();
    for var in [
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "OMPI_MCA_btl_tcp_if_include",
        "OMPI_MCA_oob_tcp_if_include",
    ] {
        assert_eq!(env(&c, "spark2", var), Some("enp1s0f1np1"), "{var}");
    }
    assert_eq!(env(&c, "spark2", "MASTER_ADDR"), Some("192.168.177.11"));
    assert_eq!(env(&c, "spark", "MASTER_ADDR"), Some("192.168.177.11"));
    for var in [
        "VLLM_HOST_IP",
        "RAY_NODE_IP_ADDRESS",
        "RAY_OVERRIDE_NODE_IP_ADDRESS",
    ] {
        assert_eq!(env(&c, "spark2", var), Some("192.168.177.12"), "{var}");
    }
    assert_eq!(env(&c, "spark", "NCCL_IB_DISABLE"), Some("0"));
}

#[test]
fn a_switch_of_three_uses_the_shared_subnet_with_each_nodes_own_interface() {
    let nodes = vec![
        Node::spark("a", None)
            .up("enp1s0f0np0")
            .up("enP2p1s0f0np0")
            .addr("enp1s0f0np0", "10.10.0.1/24")
            .named("a"),
        Node::spark("b", None)
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f1np1", "10.10.0.2/24")
            .named("b"),
        Node::spark("c", None)
            .up("enP2p1s0f0np0")
            .up("enp1s0f0np0")
            .addr("enP2p1s0f0np0", "10.10.0.3/24")
            .named("c"),
    ];
    let c = derive(&nodes).unwrap();
    assert_eq!(c.topology, Topology::Switch);
    assert_eq!(env(&c, "a", "NCCL_SOCKET_IFNAME"), Some("enp1s0f0np0"));
    assert_eq!(env(&c, "b", "NCCL_SOCKET_IFNAME"), Some("enp1s0f1np1"));
    assert_eq!(env(&c, "c", "NCCL_SOCKET_IFNAME"), Some("enP2p1s0f0np0"));
    assert_eq!(env(&c, "c", "NCCL_IB_HCA"), Some("roceP2p1s0f0,rocep1s0f0"));
    assert_eq!(env(&c, "c", "MASTER_ADDR"), Some("10.10.0.1"));
    assert_eq!(env(&c, "a", "NCCL_IB_SUBNET_AWARE_ROUTING"), None);
}

/// Seed 003: a triangle, one /24 per cable.
fn triangle() -> Vec<NodeInput> {
    vec![
        Node::spark("titanic", Some("10.0.0.170/24"))
            .up("enp1s0f0np0")
            .up("enP2p1s0f0np0")
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f0np0", "192.168.101.2/24")
            .addr("enp1s0f1np1", "192.168.100.2/24")
            .named("titanic"),
        Node::spark("iceberg", Some("10.0.0.171/24"))
            .up("enp1s0f0np0")
            .up("enP2p1s0f0np0")
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f0np0", "192.168.101.3/24")
            .addr("enp1s0f1np1", "192.168.102.2/24")
            .named("iceberg"),
        Node::spark("carpathia", Some("10.0.0.172/24"))
            .up("enp1s0f0np0")
            .up("enP2p1s0f0np0")
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f0np0", "192.168.100.3/24")
            .addr("enp1s0f1np1", "192.168.102.3/24")
            .named("carpathia"),
    ]
}

#[test]
fn a_ring_puts_the_control_plane_on_the_management_network_with_a_warning() {
    let c = derive(&triangle()).unwrap();
    assert_eq!(c.topology, Topology::Ring);
    assert_eq!(env(&c, "iceberg", "NCCL_SOCKET_IFNAME"), Some("enP7s7"));
    assert_eq!(env(&c, "iceberg", "MASTER_ADDR"), Some("10.0.0.170"));
    assert_eq!(env(&c, "iceberg", "VLLM_HOST_IP"), Some("10.0.0.171"));
    assert!(
        c.nodes[1]
            .warnings
            .iter()
            .any(|w| w.contains("management interface enP7s7"))
    );
    assert_eq!(
        env(&c, "iceberg", "NCCL_IB_HCA"),
        Some("rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1")
    );
}

#[test]
fn a_ring_sets_subnet_aware_routing_and_from_four_nodes_the_ring_algorithm() {
    let c = derive(&triangle()).unwrap();
    assert_eq!(
        env(&c, "titanic", "NCCL_IB_SUBNET_AWARE_ROUTING"),
        Some("1")
    );
    assert_eq!(env(&c, "titanic", "NCCL_NET_PLUGIN"), Some("none"));
    assert_eq!(env(&c, "titanic", "NCCL_IB_MERGE_NICS"), Some("0"));
    assert_eq!(env(&c, "titanic", "NCCL_ALGO"), None);

    let port = |n: &str, m: &str, a: &str, b: &str| {
        Node::spark(n, Some(m))
            .up("enp1s0f0np0")
            .up("enp1s0f1np1")
            .addr("enp1s0f0np0", a)
            .addr("enp1s0f1np1", b)
            .named(n)
    };
    let ring4 = vec![
        port("n1", "10.0.0.1/24", "10.1.1.1/24", "10.1.4.1/24"),
        port("n2", "10.0.0.2/24", "10.1.1.2/24", "10.1.2.2/24"),
        port("n3", "10.0.0.3/24", "10.1.2.3/24", "10.1.3.3/24"),
        port("n4", "10.0.0.4/24", "10.1.3.4/24", "10.1.4.4/24"),
    ];
    let c = derive(&ring4).unwrap();
    assert_eq!(c.topology, Topology::Ring);
    assert_eq!(env(&c, "n3", "NCCL_ALGO"), Some("Ring"));
}

#[test]
fn gid_index_is_set_only_when_every_hca_has_its_ipv4_roce_v2_gid_at_one_index() {
    // Twin without IP: no IPv4 GID there, so unset with a warning.
    let c = derive(&seed_001_pair()).unwrap();
    assert_eq!(env(&c, "spark", "NCCL_IB_GID_INDEX"), None);
    assert!(
        c.nodes[0]
            .warnings
            .iter()
            .any(|w| w.starts_with("NCCL_IB_GID_INDEX left unset: roceP2p1s0f1 (its netdev enP2p1s0f1np1 has no IPv4 address)")),
        "{:#?}",
        c.nodes[0].warnings
    );
    // Both twins with addresses on different subnets: index 3 on both.
    let both = |n: &str, a: &str, b: &str| {
        Node::spark(n, None)
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f1np1", a)
            .addr("enP2p1s0f1np1", b)
            .named(n)
    };
    let c = derive(&[
        both("a", "192.168.177.11/24", "192.168.178.11/24"),
        both("b", "192.168.177.12/24", "192.168.178.12/24"),
    ])
    .unwrap();
    assert_eq!(env(&c, "a", "NCCL_IB_GID_INDEX"), Some("3"));
    assert!(c.nodes[0].warnings.is_empty(), "{:#?}", c.nodes[0].warnings);
}

#[test]
fn gid_index_at_different_indexes_is_left_unset_with_the_indexes_named() {
    let mut nodes = seed_001_pair();
    // Give the twins addresses, but on spark the twin's IPv4 GID sits at index 5.
    for n in nodes.iter_mut() {
        let facts = std::mem::replace(&mut n.facts, Node::spark("x", None).facts);
        let last = if n.name.as_str() == "spark" {
            "21"
        } else {
            "22"
        };
        n.facts = Node { facts }
            .addr("enP2p1s0f1np1", &format!("192.168.178.{last}/24"))
            .facts;
    }
    let dev = nodes[0]
        .facts
        .rdma_devices
        .iter_mut()
        .find(|d| d.name.as_str() == "roceP2p1s0f1")
        .unwrap();
    for g in dev.ports[0].gids.iter_mut().filter(|g| g.index >= 2) {
        g.index += 2;
    }
    let c = derive(&nodes).unwrap();
    assert_eq!(env(&c, "spark", "NCCL_IB_GID_INDEX"), None);
    assert!(
        c.nodes[0]
            .warnings
            .iter()
            .any(|w| w.contains("different indexes (roceP2p1s0f1: 5, rocep1s0f1: 3)")),
        "{:#?}",
        c.nodes[0].warnings
    );
    assert_eq!(env(&c, "spark2", "NCCL_IB_GID_INDEX"), Some("3"));
}

#[test]
fn twins_on_one_subnet_are_refused_naming_node_interfaces_and_fix() {
    let mut nodes = seed_001_pair();
    let facts = std::mem::replace(&mut nodes[0].facts, Node::spark("x", None).facts);
    nodes[0].facts = Node { facts }
        .addr("enP2p1s0f1np1", "192.168.177.13/24")
        .facts;
    let err = derive(&nodes).unwrap_err();
    assert_eq!(err.violations.len(), 1);
    let v = &err.violations[0];
    assert_eq!(v.kind, ViolationKind::TwinsSameSubnet);
    assert_eq!(v.node.as_str(), "spark");
    assert!(
        v.problem.what.contains("enP2p1s0f1np1 (192.168.177.13/24)"),
        "{}",
        v.problem
    );
    assert!(
        v.problem.what.contains("enp1s0f1np1 (192.168.177.11/24)"),
        "{}",
        v.problem
    );
    assert!(
        v.problem
            .fix
            .contains("`sudo ip addr del 192.168.177.13/24 dev enP2p1s0f1np1`"),
        "the fix removes the address from the secondary twin, keeping the original: {}",
        v.problem.fix
    );
}

#[test]
fn link_local_addresses_on_two_cabled_interfaces_are_the_same_mistake() {
    let nodes = vec![
        Node::spark("a", None)
            .up("enp1s0f0np0")
            .up("enp1s0f1np1")
            .addr("enp1s0f0np0", "169.254.10.1/16")
            .addr("enp1s0f1np1", "169.254.20.1/16")
            .named("a"),
        Node::spark("b", None)
            .up("enp1s0f0np0")
            .addr("enp1s0f0np0", "169.254.10.2/16")
            .named("b"),
    ];
    let err = derive(&nodes).unwrap_err();
    assert_eq!(err.violations.len(), 1);
    assert!(err.violations[0].problem.what.contains("link-local"));
    assert!(err.violations[0].problem.fix.contains("link-local: []"));
}

#[test]
fn a_node_without_an_active_rdma_device_is_refused() {
    let nodes = vec![
        seed_001_pair().remove(0),
        Node::spark("spark2", Some("10.0.0.12/24"))
            .addr("enp1s0f1np1", "192.168.177.12/24")
            .named("spark2"),
    ];
    let err = derive(&nodes).unwrap_err();
    assert!(
        err.violations
            .iter()
            .any(|v| v.node.as_str() == "spark2" && v.kind == ViolationKind::NoActiveRdma),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("rocep1s0f1 (enp1s0f1np1): 1: DOWN"),
        "{err}"
    );
}

#[test]
fn a_node_with_no_shared_subnet_and_no_management_is_refused() {
    let nodes = vec![
        Node::spark("a", None)
            .up("enp1s0f1np1")
            .addr("enp1s0f1np1", "192.168.177.11/24")
            .named("a"),
        Node::spark("b", None)
            .up("enp1s0f1np1")
            .addr("enp1s0f1np1", "192.168.99.12/24")
            .named("b"),
    ];
    let err = derive(&nodes).unwrap_err();
    assert!(
        err.violations
            .iter()
            .any(|v| v.node.as_str() == "b" && v.kind == ViolationKind::Unreachable),
        "{err}"
    );
}

#[test]
fn a_node_with_no_shared_subnet_but_a_management_network_falls_back_with_a_warning() {
    let nodes = vec![
        Node::spark("a", Some("10.0.0.1/24"))
            .up("enp1s0f1np1")
            .addr("enp1s0f1np1", "192.168.177.11/24")
            .named("a"),
        Node::spark("b", Some("10.0.0.2/24"))
            .up("enp1s0f1np1")
            .addr("enp1s0f1np1", "192.168.99.12/24")
            .named("b"),
    ];
    let c = derive(&nodes).unwrap();
    assert_eq!(env(&c, "b", "NCCL_SOCKET_IFNAME"), Some("enP7s7"));
    assert!(
        c.nodes[1]
            .warnings
            .iter()
            .any(|w| w.contains("b shares no fabric subnet with the head a"))
    );
}

#[test]
fn all_violations_of_all_nodes_are_reported_together() {
    let nodes = vec![
        Node::spark("a", None)
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f1np1", "192.168.177.11/24")
            .addr("enP2p1s0f1np1", "192.168.177.21/24")
            .named("a"),
        Node::spark("b", None)
            .addr("enp1s0f1np1", "192.168.177.12/24")
            .named("b"),
    ];
    let err = derive(&nodes).unwrap_err();
    let kinds: Vec<_> = err
        .violations
        .iter()
        .map(|v| (v.node.as_str(), v.kind.clone()))
        .collect();
    assert!(kinds.contains(&("a", ViolationKind::TwinsSameSubnet)));
    assert!(kinds.contains(&("b", ViolationKind::NoActiveRdma)));
    assert!(err.to_string().starts_with("refusing this fabric layout: "));
}

#[test]
fn an_mtu_mismatch_across_a_link_is_a_warning_on_both_ends() {
    let mut nodes = seed_001_pair();
    let f0 = std::mem::replace(&mut nodes[0].facts, Node::spark("x", None).facts);
    nodes[0].facts = Node { facts: f0 }.mtu("enp1s0f1np1", 9000).facts;
    let c = derive(&nodes).unwrap();
    for n in &c.nodes {
        assert!(
            n.warnings.iter().any(|w| w.starts_with("MTU differs across the link on 192.168.177.0/24 (spark enp1s0f1np1=9000, spark2 enp1s0f1np1=1500)")),
            "{:#?}",
            n.warnings
        );
    }
    assert!(
        c.nodes[0]
            .warnings
            .iter()
            .any(|w| w.contains("fix: on spark2: `sudo ip link set dev enp1s0f1np1 mtu 9000`"))
    );
}

#[test]
fn a_device_name_that_prefixes_another_gets_exact_matching() {
    let mut nodes = seed_001_pair();
    let mut extra = nodes[0].facts.rdma_devices[1].clone();
    extra.name = IbDevice::new("rocep1s0f10");
    extra.netdevs = vec![NetIf::new("enp1s0f10np0")];
    extra.ports[0].state = PortState::parse("1: DOWN");
    nodes[0].facts.rdma_devices.push(extra);
    let c = derive(&nodes).unwrap();
    assert_eq!(
        env(&c, "spark", "NCCL_IB_HCA"),
        Some("=rocep1s0f1,roceP2p1s0f1")
    );
    assert_eq!(
        env(&c, "spark2", "NCCL_IB_HCA"),
        Some("rocep1s0f1,roceP2p1s0f1")
    );
}

#[test]
fn an_interface_name_that_prefixes_a_vlan_gets_exact_socket_matching() {
    let mut nodes = seed_001_pair();
    let mut vlan = nodes[0].facts.interfaces[0].clone();
    vlan.name = NetIf::new("enp1s0f1np1.100");
    nodes[0].facts.interfaces.push(vlan);
    let c = derive(&nodes).unwrap();
    assert_eq!(env(&c, "spark", "NCCL_SOCKET_IFNAME"), Some("=enp1s0f1np1"));
    assert_eq!(env(&c, "spark", "GLOO_SOCKET_IFNAME"), Some("enp1s0f1np1"));
}

#[test]
fn a_single_node_uses_its_own_fabric_address() {
    let c = derive(&seed_001_pair()[..1]).unwrap();
    assert_eq!(c.topology, Topology::Single);
    assert_eq!(env(&c, "spark", "MASTER_ADDR"), Some("192.168.177.11"));
    assert_eq!(
        env(&c, "spark", "NCCL_IB_HCA"),
        Some("rocep1s0f1,roceP2p1s0f1")
    );
}

#[test]
fn an_active_device_on_an_unshared_subnet_is_left_out_with_a_warning() {
    let mut nodes = seed_001_pair();
    let f0 = std::mem::replace(&mut nodes[0].facts, Node::spark("x", None).facts);
    nodes[0].facts = Node { facts: f0 }
        .up("enp1s0f0np0")
        .addr("enp1s0f0np0", "172.31.9.1/24")
        .facts;
    let c = derive(&nodes).unwrap();
    assert_eq!(
        env(&c, "spark", "NCCL_IB_HCA"),
        Some("rocep1s0f1,roceP2p1s0f1")
    );
    assert!(c.nodes[0].warnings.iter().any(|w| w.starts_with(
        "rocep1s0f0 is ACTIVE but left out of NCCL_IB_HCA: its subnet 172.31.9.0/24"
    )));
}

#[test]
fn env_json_has_the_documented_shape_with_nodes_in_cluster_order() {
    let c = derive(&seed_001_pair()).unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["topology"], "direct");
    assert_eq!(v["head"], "spark");
    let keys: Vec<&String> = v["nodes"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 2);
    assert!(v["nodes"]["spark2"]["env"]["MASTER_ADDR"] == "192.168.177.11");
    assert!(v["nodes"]["spark2"]["warnings"].is_array());
    let _ = Ipv4Addr::LOCALHOST;
}

#[test]
fn two_nodes_with_the_same_fabric_address_are_refused() {
    let mut nodes = seed_001_pair();
    nodes[1].facts = nodes[0].facts.clone();
    let err = derive(&nodes).unwrap_err();
    assert!(
        err.violations
            .iter()
            .any(|v| v.kind == ViolationKind::DuplicateAddress && v.node.as_str() == "spark2"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("192.168.177.11 on enp1s0f1np1 is also the address of spark"),
        "{err}"
    );
}

#[test]
fn roce_over_a_vlan_uses_the_vlan_interface_the_gid_table_ties_to_the_device() {
    let vlan = |n: &str, ip: &str| {
        let mut node = Node::spark(n, None).up("enp1s0f1np1").up("enP2p1s0f1np1");
        let mut v = iface("enp1s0f1np1.100");
        v.operstate = OperState::Up;
        v.mtu = Some(9000);
        v.ipv4.push(v4(ip));
        node.facts.interfaces.push(v);
        let a = v4(ip);
        let port = &mut node.dev_of("enp1s0f1np1").ports[0];
        port.gids.push(GidEntry {
            index: 3,
            gid: a.addr.to_ipv6_mapped(),
            gid_type: Some(GidType::RoceV2),
            ndev: Some(NetIf::new("enp1s0f1np1.100")),
        });
        node.named(n)
    };
    let c = derive(&[vlan("a", "10.9.0.1/24"), vlan("b", "10.9.0.2/24")]).unwrap();
    assert_eq!(env(&c, "b", "NCCL_SOCKET_IFNAME"), Some("enp1s0f1np1.100"));
    assert_eq!(env(&c, "b", "MASTER_ADDR"), Some("10.9.0.1"));
    assert_eq!(env(&c, "b", "NCCL_IB_HCA"), Some("rocep1s0f1,roceP2p1s0f1"));
}

#[test]
fn the_management_interface_is_the_default_route_with_the_lowest_metric() {
    let mut nodes = triangle();
    for n in nodes.iter_mut() {
        let mut wifi = iface("wlP9s9");
        wifi.operstate = OperState::Up;
        wifi.ipv4.push(v4("192.168.50.9/24"));
        n.facts.interfaces.push(wifi);
        n.facts.routes.insert(
            0,
            RouteFacts {
                dst: "default".into(),
                dev: Some(NetIf::new("wlP9s9")),
                gateway: None,
                prefsrc: None,
                metric: Some(600),
            },
        );
    }
    let c = derive(&nodes).unwrap();
    assert_eq!(env(&c, "iceberg", "NCCL_SOCKET_IFNAME"), Some("enP7s7"));
    assert_eq!(env(&c, "iceberg", "MASTER_ADDR"), Some("10.0.0.170"));
}
