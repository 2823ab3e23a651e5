//! Cabling checks: which port of which node is cabled to which, read the way `fabric plan`
//! reads it (`fabric::cabling`: what each node's link probe heard, else the addresses already
//! on the fabric), judged where the wiring matters.
//!
//! - `fabric.cabling-ports`: two Sparks on one cable use the same port on both ends (warn when
//!   not: spark-launch derives names per node, but NVIDIA's playbooks and the community
//!   launchers copy one node's interface names to the other, and break).
//! - `fabric.ring-wiring`: three or more nodes without a switch form one ring, each node cabled
//!   to two different nodes (fail when not, naming the cable to move: a chain or two islands
//!   leave pairs of nodes with no path NCCL can use).
//! - `fabric.ring-direction`: a ring runs each node's port 0 to the next node's port 1, so no
//!   two nodes face a third with the same port index (warn when not, naming the node whose two
//!   cables to swap).
//!
//! A cluster whose cabling cannot be read (no link probe recorded, no fabric address) is
//! skipped with the reason, never judged. Pure.

use std::collections::BTreeSet;

use super::check::*;
use super::{Check, Inputs};
use crate::fabric::cabling::{self, Layout, port_key, twin_netdev};
use crate::node::NodeName;
use crate::probe::links::LinkMap;

const fn info(id: &'static str, title: &'static str) -> CheckInfo {
    CheckInfo {
        id,
        category: Category::Fabric,
        needs: CheckNeeds::Facts,
        title,
    }
}

pub const CHECKS: &[Check] = &[
    Check {
        info: info("fabric.cabling-ports", "same port on both ends of a cable"),
        run: cabling_ports,
    },
    Check {
        info: info("fabric.ring-wiring", "3+ nodes without a switch: one ring"),
        run: ring_wiring,
    },
    Check {
        info: info("fabric.ring-direction", "ring cabled port 0 → next port 1"),
        run: ring_direction,
    },
];

const NOT_RECORDED: &str = "the cabling is not recorded: no link probe in the facts and no fabric address to read it from (`spark-launch fabric plan` probes it; a snapshot records it with `probe --capture`)";

/// The cabling, or every node skipped with the reason.
fn map(inputs: &Inputs, e: &mut Evaluation) -> Option<LinkMap> {
    match cabling::link_map(inputs.nodes, &[]) {
        Ok(m) if !m.is_empty() => Some(m),
        _ => {
            for n in inputs.nodes {
                e.skip(&n.name, NOT_RECORDED);
            }
            None
        }
    }
}

fn port_name(port: &str) -> String {
    if port.contains("f0np0") {
        format!("{port}, the inner port")
    } else if port.contains("f1np1") {
        format!("{port}, the outer port")
    } else {
        port.to_string()
    }
}

fn cabling_ports(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let Some(map) = map(inputs, &mut e) else {
        return e;
    };
    // Only one cable between two nodes has two ends that should match: a ring joins
    // different ports by design, and on a switch each node has its own cable.
    let Ok(Layout::Direct(cable)) = cabling::layout(inputs.nodes, &map) else {
        return e;
    };
    let facts = |n: &NodeName| inputs.nodes.iter().find(|x| &x.name == n).map(|x| &x.facts);
    let Some((a, b)) = cable.pairs.first() else {
        return e;
    };
    let sparks = match (facts(&a.node), facts(&b.node)) {
        (Some(fa), Some(fb)) => {
            twin_netdev(fa, &a.iface).is_some() && twin_netdev(fb, &b.iface).is_some()
        }
        _ => false,
    };
    if !sparks || cable.a_port == cable.b_port {
        return e;
    }
    for (here, there, port, other_port) in [
        (a, b, &cable.a_port, &cable.b_port),
        (b, a, &cable.b_port, &cable.a_port),
    ] {
        e.push(Finding::warn(
            &here.node,
            format!(
                "the cable goes from {here} ({}) to {there} ({})",
                port_name(port),
                port_name(other_port)
            ),
            "spark-launch derives the interface names of each node, so this works here; but NVIDIA's playbooks and community launchers use one node's names on every node, and break on mixed ports",
            Fix::text(format!(
                "move the cable on {} into the port of {} (or on {} into the port of {}), then run `spark-launch fabric apply` again",
                b.node,
                port_key(&a.iface),
                a.node,
                port_key(&b.iface)
            )),
        ));
    }
    e
}

fn ring_wiring(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    // Two nodes, or a switch: there is no ring to get wrong.
    if inputs.nodes.len() < 3 {
        return e;
    }
    let Some(map) = map(inputs, &mut e) else {
        return e;
    };
    if cabling::segments(&map).iter().any(|s| s.ends.len() > 2) {
        return e;
    }
    let Err(problems) = cabling::layout(inputs.nodes, &map) else {
        return e;
    };
    for p in problems {
        let named: BTreeSet<&NodeName> = inputs
            .nodes
            .iter()
            .map(|n| &n.name)
            .filter(|n| {
                p.what
                    .split(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
                    .any(|w| w == n.as_str())
            })
            .collect();
        let whom: Vec<&NodeName> = if named.is_empty() {
            inputs.nodes.iter().map(|n| &n.name).take(1).collect()
        } else {
            named.into_iter().collect()
        };
        for n in whom {
            e.push(Finding::fail(
                n,
                p.what.clone(),
                "without a switch, three or more nodes need a ring: NCCL reaches a node only through a cable of its own, so a chain or two islands leave pairs of nodes that cannot talk over RDMA",
                Fix::text(p.fix.clone()),
            ));
        }
    }
    e
}

fn ring_direction(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    if inputs.nodes.len() < 3 {
        return e;
    }
    let Some(map) = map(inputs, &mut e) else {
        return e;
    };
    for (node, p) in cabling::ring_direction(inputs.nodes, &map) {
        e.push(Finding::warn(
            &node,
            p.what,
            "NVIDIA's ring wiring sends from each node's port 0 to the next node's port 1; NCCL's ring and subnet-aware routing are validated on that wiring, and tools that assume it (one port index per direction) pick the wrong port on this node",
            Fix::text(p.fix),
        ));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::testkit::{Node, name};
    use crate::doctor::{CheckSelection, run};

    fn evaluate(nodes: Vec<crate::derive::NodeInput>, id: &str) -> crate::doctor::CheckReport {
        let derived = crate::derive::derive(&nodes);
        let options = crate::doctor::Options::default();
        let inputs = Inputs {
            nodes: &nodes,
            derived: &derived,
            options: &options,
            live: None,
            unreachable: &[],
        };
        let report = run(
            &inputs,
            &CheckSelection {
                only: vec![id.into()],
                skip: vec![],
            },
        );
        report.checks.into_iter().next().unwrap()
    }

    #[test]
    fn two_sparks_cabled_from_the_inner_to_the_outer_port_warn_with_the_cable_to_move() {
        let a = Node::spark("a")
            .up("enp1s0f0np0")
            .up("enP2p1s0f0np0")
            .addr("enp1s0f0np0", "192.168.100.1/24")
            .named("a");
        let b = Node::spark("b")
            .mgmt("10.0.0.12/24")
            .up("enp1s0f1np1")
            .up("enP2p1s0f1np1")
            .addr("enp1s0f1np1", "192.168.100.2/24")
            .named("b");
        let r = evaluate(vec![a, b], "fabric.cabling-ports");
        assert_eq!(r.status, CheckStatus::Warn);
        assert_eq!(
            r.findings[0].problem.what,
            "the cable goes from a:enp1s0f0np0 (enp1s0f0np0, the inner port) to b:enp1s0f1np1 (enp1s0f1np1, the outer port)"
        );
        assert!(
            r.findings[0]
                .problem
                .fix
                .text
                .starts_with("move the cable on b")
        );
    }

    #[test]
    fn a_chain_of_three_fails_the_ring_check_naming_the_cable_that_closes_it() {
        let n1 = Node::spark("n1")
            .up("enp1s0f1np1")
            .addr("enp1s0f1np1", "192.168.100.1/24")
            .named("n1");
        let n2 = Node::spark("n2")
            .mgmt("10.0.0.12/24")
            .up("enp1s0f0np0")
            .up("enp1s0f1np1")
            .addr("enp1s0f0np0", "192.168.100.2/24")
            .addr("enp1s0f1np1", "192.168.101.2/24")
            .named("n2");
        let n3 = Node::spark("n3")
            .mgmt("10.0.0.13/24")
            .up("enp1s0f0np0")
            .addr("enp1s0f0np0", "192.168.101.3/24")
            .named("n3");
        let r = evaluate(vec![n1, n2, n3], "fabric.ring-wiring");
        assert_eq!(r.status, CheckStatus::Fail);
        let f = &r.findings[0];
        assert!(f.problem.what.contains("cannot form a ring"), "{f:?}");
        assert!(
            f.problem.fix.text.starts_with("cable n1's free port"),
            "{f:?}"
        );
    }

    #[test]
    fn seed_003s_triangle_names_the_node_whose_two_cables_to_swap_and_a_ring_cabled_right_passes() {
        let fixture = |name: &str| -> Vec<crate::derive::NodeInput> {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name);
            std::fs::read_to_string(root.join("nodes"))
                .unwrap()
                .lines()
                .map(|n| crate::derive::NodeInput {
                    name: NodeName::new(n.trim()).unwrap(),
                    facts: crate::probe::read_snapshot_dir(&root.join(n.trim())).unwrap(),
                })
                .collect()
        };
        let r = evaluate(fixture("seed-003-triangle"), "fabric.ring-direction");
        assert_eq!(r.status, CheckStatus::Warn);
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        let f = &r.findings[0];
        assert_eq!(f.node.as_str(), "iceberg");
        assert!(
            f.problem
                .what
                .contains("titanic:enp1s0f0np0 ↔ iceberg:enp1s0f0np0 (port 0 to port 0)"),
            "{}",
            f.problem.what
        );
        assert!(
            f.problem.fix.text.starts_with("on iceberg, swap its two cables: the one in enp1s0f0np0 (to titanic) goes into enp1s0f1np1"),
            "{}",
            f.problem.fix.text
        );
        let ok = evaluate(fixture("ring-4-sparks"), "fabric.ring-direction");
        assert_eq!(ok.status, CheckStatus::Ok, "{:?}", ok.findings);
    }

    #[test]
    fn unreadable_cabling_is_skipped_with_the_reason() {
        let r = evaluate(
            vec![Node::spark("a").named("a"), Node::spark("b").named("b")],
            "fabric.cabling-ports",
        );
        assert_eq!(r.status, CheckStatus::Skipped);
        assert!(r.skipped[0].1.contains("not recorded"));
        let _ = name("a");
    }
}
