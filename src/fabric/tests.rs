//! The plan's rules on facts built in code: fresh Sparks with only carrier and what their link
//! probes heard; the fixtures of the seeds are snapshot-tested in `tests/fabric_plans.rs`.

use super::*;
use crate::doctor::testkit::{Node, name};
use crate::probe::facts::NetIf;
use crate::probe::links::{LinkAnswer, LinkProbe, LinkProbeIface};

const F1: &str = "enp1s0f1np1";
const P2F1: &str = "enP2p1s0f1np1";
const F0: &str = "enp1s0f0np0";
const P2F0: &str = "enP2p1s0f0np0";
const ALL: &[&str] = &[F0, P2F0, F1, P2F1];

fn mac(node: usize, iface: &str) -> String {
    let k = match iface {
        F0 => 0,
        F1 => 1,
        P2F0 => 2,
        P2F1 => 3,
        _ => 9,
    };
    format!("94:6d:ae:{node:02x}:{k:02x}:01")
}

/// Fresh Sparks (nothing addressed, MTU 1500), each with the given netdevs plugged and a MAC
/// per interface.
fn fresh(n: usize, plugged: &[&[&str]]) -> Vec<NodeInput> {
    (0..n)
        .map(|i| {
            let mut node =
                Node::spark(&format!("s{}", i + 1)).mgmt(&format!("10.0.0.{}/24", i + 11));
            for p in plugged[i] {
                node = node.up(p);
            }
            for iface in &mut node.facts.interfaces {
                iface.mac = Some(mac(i, iface.name.as_str()));
            }
            node.facts.links = Some(LinkProbe::default());
            node.facts.netplan = Some(vec![]);
            node.named(&format!("s{}", i + 1))
        })
        .collect()
}

/// `a`'s netdev hears `b`'s and the other way round (a cable, as the link probe saw it).
fn hear(nodes: &mut [NodeInput], a: (usize, &str), b: (usize, &str)) {
    for ((x, xi), (y, yi)) in [(a, b), (b, a)] {
        let probe = nodes[x].facts.links.get_or_insert_with(LinkProbe::default);
        let answer = LinkAnswer {
            addr: "fe80::1".parse().unwrap(),
            mac: Some(mac(y, yi)),
        };
        match probe.ifaces.iter_mut().find(|i| i.iface.as_str() == xi) {
            Some(i) => i.answers.push(answer),
            None => probe.ifaces.push(LinkProbeIface {
                iface: NetIf::new(xi),
                carrier: Some(true),
                raised: false,
                pinged: true,
                answers: vec![answer],
                problem: None,
            }),
        }
    }
}

fn cable(nodes: &mut [NodeInput], a: usize, a_port: &[&str; 2], b: usize, b_port: &[&str; 2]) {
    hear(nodes, (a, a_port[0]), (b, b_port[0]));
    hear(nodes, (a, a_port[1]), (b, b_port[1]));
}

fn two_fresh_sparks() -> Vec<NodeInput> {
    let mut n = fresh(2, &[&[F1, P2F1], &[F1, P2F1]]);
    cable(&mut n, 0, &[F1, P2F1], 1, &[F1, P2F1]);
    n
}

fn refused(r: Result<FabricPlan, PlanError>) -> Vec<Problem> {
    match r {
        Err(PlanError::Refused(r)) => r.problems,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn two_fresh_sparks_get_a_subnet_per_twin_and_mtu_9000_on_all_four_netdevs() {
    let p = plan(&two_fresh_sparks(), &[], &PlanOptions::default()).unwrap();
    assert_eq!(p.topology, FabricTopology::Direct);
    let subnets: Vec<String> = p.links.iter().map(|l| l.subnet.to_string()).collect();
    assert_eq!(subnets, vec!["192.168.100.0/24", "192.168.101.0/24"]);
    assert_eq!(p.links[0].a.to_string(), "s1:enp1s0f1np1");
    assert_eq!(p.links[1].b.to_string(), "s2:enP2p1s0f1np1");
    let s2 = p.node(&name("s2")).unwrap();
    assert_eq!(
        s2.addresses[&NetIf::new(F1)].to_string(),
        "192.168.100.2/24"
    );
    assert_eq!(
        s2.addresses[&NetIf::new(P2F1)].to_string(),
        "192.168.101.2/24"
    );
    assert_eq!(
        s2.mtu.values().copied().collect::<Vec<_>>(),
        vec![9000, 9000]
    );
    assert_eq!(s2.file.as_deref(), Some(FILE));
    assert!(!p.nothing_to_do());
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn a_fabric_already_addressed_this_way_is_nothing_to_do() {
    let mut n = two_fresh_sparks();
    for (i, node) in n.iter_mut().enumerate() {
        crate::probe::testkit::add_ipv4(&mut node.facts, F1, &format!("192.168.100.{}/24", i + 1));
        crate::probe::testkit::add_ipv4(
            &mut node.facts,
            P2F1,
            &format!("192.168.101.{}/24", i + 1),
        );
        for f in [F1, P2F1] {
            crate::probe::testkit::if_mut(&mut node.facts, f).mtu = Some(9000);
        }
    }
    let p = plan(&n, &[], &PlanOptions::default()).unwrap();
    assert!(p.nothing_to_do());
    assert!(p.links.iter().all(|l| l.kept));
    assert_eq!(p.nodes[0].file, None);
}

#[test]
fn an_address_on_one_twin_is_kept_and_the_other_twin_gets_a_subnet_of_its_own() {
    let mut n = two_fresh_sparks();
    for (i, node) in n.iter_mut().enumerate() {
        crate::probe::testkit::add_ipv4(&mut node.facts, F1, &format!("192.168.177.{}/24", i + 11));
    }
    let p = plan(&n, &[], &PlanOptions::default()).unwrap();
    assert!(p.links[0].kept);
    assert_eq!(p.links[0].subnet.to_string(), "192.168.177.0/24");
    assert!(!p.links[1].kept);
    assert_eq!(p.links[1].subnet.to_string(), "192.168.100.0/24");
    assert_eq!(
        p.nodes[0].addresses[&NetIf::new(F1)].to_string(),
        "192.168.177.11/24"
    );
}

#[test]
fn three_sparks_in_a_ring_get_a_subnet_per_cable_per_twin() {
    let mut n = fresh(3, &[ALL, ALL, ALL]);
    cable(&mut n, 0, &[F1, P2F1], 1, &[F0, P2F0]);
    cable(&mut n, 1, &[F1, P2F1], 2, &[F0, P2F0]);
    cable(&mut n, 2, &[F1, P2F1], 0, &[F0, P2F0]);
    let p = plan(&n, &[], &PlanOptions::default()).unwrap();
    assert_eq!(p.topology, FabricTopology::Ring);
    assert_eq!(p.links.len(), 6);
    let mut subnets: Vec<String> = p.links.iter().map(|l| l.subnet.to_string()).collect();
    subnets.dedup();
    assert_eq!(subnets.len(), 6, "one subnet per cable per twin");
    // Every node's address ends in its position, whatever the subnet.
    let s3 = p.node(&name("s3")).unwrap();
    assert!(s3.addresses.values().all(|a| a.addr.octets()[3] == 3));
    assert_eq!(s3.addresses.len(), 4);
}

#[test]
fn a_chain_of_three_is_refused_with_the_cable_that_closes_the_ring() {
    let mut n = fresh(3, &[ALL, ALL, ALL]);
    cable(&mut n, 0, &[F1, P2F1], 1, &[F0, P2F0]);
    cable(&mut n, 1, &[F1, P2F1], 2, &[F0, P2F0]);
    let problems = refused(plan(&n, &[], &PlanOptions::default()));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].what.contains("cannot form a ring"));
    assert_eq!(
        problems[0].fix,
        "cable s1's free port (enp1s0f0np0) to s3's free port (enp1s0f1np1)"
    );
}

#[test]
fn two_cables_between_two_sparks_are_more_than_the_plan_can_use() {
    let mut n = fresh(2, &[ALL, ALL]);
    cable(&mut n, 0, &[F1, P2F1], 1, &[F0, P2F0]);
    cable(&mut n, 1, &[F1, P2F1], 0, &[F0, P2F0]);
    let problems = refused(plan(&n, &[], &PlanOptions::default()));
    assert!(
        problems[0]
            .what
            .contains("more cables than the plan can use")
    );
    assert!(problems[0].fix.starts_with("unplug the cable"));
}

#[test]
fn a_node_with_nothing_cabled_is_refused_with_its_ports() {
    let mut n = fresh(3, &[&[F1, P2F1], &[F1, P2F1], &[]]);
    cable(&mut n, 0, &[F1, P2F1], 1, &[F1, P2F1]);
    let problems = refused(plan(&n, &[], &PlanOptions::default()));
    assert!(problems.iter().any(|p| p.what
        == "s3 has nothing cabled: no fabric port hears another node"
        && p.fix.contains("enp1s0f0np0, enp1s0f1np1")));
}

#[test]
fn a_management_network_over_the_whole_default_pool_asks_for_another_pool() {
    let mut n = two_fresh_sparks();
    n[0] = Node {
        facts: n[0].facts.clone(),
    }
    .mgmt("192.168.1.11/16")
    .named("s1");
    let problems = refused(plan(&n, &[], &PlanOptions::default()));
    assert!(problems[0].what.contains("has no free /24"), "{problems:?}");
    assert_eq!(problems[0].fix, "give another pool: --pool 10.200.0.0/16");
    let opts = PlanOptions {
        pool: "10.200.0.0/16".parse().unwrap(),
        ..PlanOptions::default()
    };
    let p = plan(&n, &[], &opts).unwrap();
    assert_eq!(p.links[0].subnet.to_string(), "10.200.0.0/24");
}

#[test]
fn a_switch_gets_one_subnet_per_twin_for_every_node_and_a_jumbo_frame_warning() {
    let mut n = fresh(3, &[&[F1, P2F1], &[F0, P2F0], &[F1, P2F1]]);
    let ports = [(0, F1, P2F1), (1, F0, P2F0), (2, F1, P2F1)];
    for (i, (x, xa, xb)) in ports.iter().enumerate() {
        for (y, ya, yb) in &ports[i + 1..] {
            hear(&mut n, (*x, xa), (*y, ya));
            hear(&mut n, (*x, xb), (*y, yb));
        }
    }
    let p = plan(&n, &[], &PlanOptions::default()).unwrap();
    assert_eq!(p.topology, FabricTopology::Switch);
    let mut subnets: Vec<String> = p.links.iter().map(|l| l.subnet.to_string()).collect();
    subnets.sort();
    subnets.dedup();
    assert_eq!(subnets, vec!["192.168.100.0/24", "192.168.101.0/24"]);
    assert_eq!(
        p.node(&name("s2")).unwrap().addresses[&NetIf::new(F0)].to_string(),
        "192.168.100.2/24"
    );
    assert!(p.warnings[0].contains("jumbo frames"));
}

#[test]
fn link_local_addresses_one_twin_of_the_one_cable_and_only_for_a_direct_cable() {
    let opts = PlanOptions {
        link_local: true,
        ..PlanOptions::default()
    };
    let p = plan(&two_fresh_sparks(), &[], &opts).unwrap();
    assert_eq!(p.links.len(), 1);
    assert_eq!(p.links[0].subnet.to_string(), "169.254.0.0/16");
    let text = p.nodes[0].netplan.clone().unwrap();
    assert!(text.contains("    enp1s0f1np1:\n      dhcp4: false\n      dhcp6: false\n      link-local: [ ipv4 ]\n      mtu: 9000\n"));
    assert!(!text.contains("addresses"));
    let mut n = fresh(3, &[ALL, ALL, ALL]);
    cable(&mut n, 0, &[F1, P2F1], 1, &[F0, P2F0]);
    cable(&mut n, 1, &[F1, P2F1], 2, &[F0, P2F0]);
    cable(&mut n, 2, &[F1, P2F1], 0, &[F0, P2F0]);
    assert!(
        refused(plan(&n, &[], &opts))[0]
            .what
            .contains("--link-local")
    );
}

#[test]
fn without_a_cabling_record_the_plan_says_it_was_not_recorded_and_how_to_record_or_state_it() {
    // Seen once: snapshots with no link probe said "no fabric port hears another
    // node", though nothing had listened.
    let mut n = fresh(2, &[&[F1, P2F1], &[F1, P2F1]]);
    for node in &mut n {
        node.facts.links = None;
    }
    let problems = refused(plan(&n, &[], &PlanOptions::default()));
    assert_eq!(problems.len(), 2);
    let p = &problems[0];
    assert!(
        p.what
            .starts_with("s1's cabling was not recorded: its snapshot holds no link probe"),
        "{}",
        p.what
    );
    assert!(
        p.fix.contains("spark-launch probe --capture DIR"),
        "{}",
        p.fix
    );
    assert!(
        p.fix.contains("--link s1:enP2p1s0f1np1=OTHER-NODE:IF"),
        "{}",
        p.fix
    );
    assert!(!problems.iter().any(|p| p.what.contains("hears")));
    // A probe that listened and heard nobody still says so.
    let heard_nothing = fresh(2, &[&[F1, P2F1], &[F1, P2F1]]);
    let problems = refused(plan(&heard_nothing, &[], &PlanOptions::default()));
    assert!(
        problems[0]
            .what
            .contains("no fabric port hears another node")
    );
    // With --link, a node left out of every cable is named as such.
    let mut three = fresh(3, &[&[F1, P2F1], &[F1, P2F1], &[F1, P2F1]]);
    for node in &mut three {
        node.facts.links = None;
    }
    let given: Vec<LinkArg> = vec!["s1:enp1s0f1np1=s2:enp1s0f1np1".parse().unwrap()];
    let problems = refused(plan(&three, &given, &PlanOptions::default()));
    assert_eq!(problems[0].what, "s3 is in none of the --link cables given");
}

#[test]
fn a_link_argument_pairs_the_twins_and_unknown_names_are_refused() {
    let mut n = fresh(2, &[&[F1, P2F1], &[F1, P2F1]]);
    for node in &mut n {
        node.facts.links = None;
    }
    let given: Vec<LinkArg> = vec!["s1:enp1s0f1np1=s2:enp1s0f1np1".parse().unwrap()];
    let p = plan(&n, &given, &PlanOptions::default()).unwrap();
    assert_eq!(p.links.len(), 2, "the twins are paired too");
    assert_eq!(p.links[1].a.to_string(), "s1:enP2p1s0f1np1");
    assert_eq!(p.links[1].source, LinkSource::Given);
    let bad: Vec<LinkArg> = vec!["s1:eth9=s2:enp1s0f1np1".parse().unwrap()];
    let err = plan(&n, &bad, &PlanOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("s1 has no fabric interface eth9"),
        "{err}"
    );
}

#[test]
fn the_management_interface_is_never_planned_even_when_cabled() {
    let mut n = two_fresh_sparks();
    for node in &mut n {
        for r in &mut node.facts.routes {
            if r.is_default() {
                r.dev = Some(NetIf::new(F1));
            }
        }
    }
    let problems = refused(plan(&n, &[], &PlanOptions::default()));
    assert!(
        problems[0]
            .what
            .contains("never touches the management interface")
    );
}

#[test]
fn conflicting_netplan_files_are_listed_per_node() {
    let mut n = two_fresh_sparks();
    n[0].facts.netplan = Some(vec![crate::probe::facts::NetplanFile {
        path: "/etc/netplan/40-cx7.yaml".into(),
        content: Some(
            "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      mtu: 9000\n".into(),
        ),
    }]);
    let p = plan(&n, &[], &PlanOptions::default()).unwrap();
    assert_eq!(
        p.nodes[0].conflicts[0].describe(),
        "/etc/netplan/40-cx7.yaml configures enp1s0f1np1"
    );
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(
        json["nodes"]["s1"]["conflicts"][0],
        "/etc/netplan/40-cx7.yaml configures enp1s0f1np1"
    );
    assert_eq!(
        json["nodes"]["s1"]["addresses"]["enp1s0f1np1"],
        "192.168.100.1/24"
    );
    assert_eq!(json["links"][0]["a"], "s1:enp1s0f1np1");
}
