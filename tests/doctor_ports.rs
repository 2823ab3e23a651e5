//! Doctor checks the ports the planned engine really binds. For every bundled serving profile,
//! and for each engine in each of its modes with ports moved off their defaults, on two nodes
//! and on one, the ports a plan's CheckPorts step names on each node (and those its
//! CheckReachable steps probe) are exactly the single ports `doctor::serving_ports` gives for
//! the same options; and a launch with default ports binds nothing that doctor's default list
//! (what `spark-launch doctor` checks) leaves out, on the node it binds it.
//!
//! The nodes are seed 001's two Sparks on one cable (probe snapshots); nothing is looked up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::doctor::{self, PortScope, PortUse};
use spark_launch::node::NodeName;
use spark_launch::plan::{CheckPorts, CheckReachable, Step};
use spark_launch::probe::read_snapshot_dir;
use spark_launch::profile;
use spark_launch::workload::engines::EngineKind;
use spark_launch::workload::launch::{LaunchPlan, LaunchRequest, Lookups, ServeRequest, plan};
use spark_launch::workload::partial::{self, LaunchAsk, PartialServe};

fn seed_001() -> Vec<NodeInput> {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-001-two-sparks-both-twins");
    ["spark", "spark2"]
        .iter()
        .map(|n| NodeInput {
            name: NodeName::new(*n).unwrap(),
            facts: read_snapshot_dir(&root.join(n)).unwrap(),
        })
        .collect()
}

/// Every bundled serving profile's request.
fn bundled() -> Vec<(String, ServeRequest)> {
    profile::bundled()
        .into_iter()
        .filter_map(|l| match l.profile.ask(&l.file).unwrap() {
            LaunchAsk::Serve(ask) => Some((
                l.profile.name.clone(),
                partial::layer(*ask, PartialServe::default()).unwrap(),
            )),
            LaunchAsk::NcclTest { .. } => None,
        })
        .collect()
}

/// Each engine in each mode with every port it takes moved off its default.
fn moved() -> Vec<(String, ServeRequest)> {
    let mut out = Vec::new();
    for (name, s) in bundled() {
        let mut s = s;
        s.serve.port = 9100;
        s.tuning.rendezvous_port = Some(29600);
        s.tuning.ray_port = Some(6400);
        s.tuning.ssh_port = Some(2300);
        out.push((format!("{name} with moved ports"), s));
    }
    out
}

/// What a plan checks on each node (CheckPorts), and the ports its CheckReachable steps probe.
fn plan_ports(
    s: &ServeRequest,
    nodes: &[NodeInput],
) -> (BTreeMap<NodeName, BTreeSet<u16>>, BTreeSet<u16>, usize) {
    let request = LaunchRequest::Serve(Box::new(s.clone()));
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let planned = plan(&request, &names, nodes, &Lookups::default()).expect("the plan");
    let LaunchPlan::Serve(p) = planned.plan else {
        panic!("not a serving plan")
    };
    let mut free = BTreeMap::new();
    let mut reached = BTreeSet::new();
    for step in &p.job.steps {
        match step {
            Step::CheckPorts(CheckPorts { ports }) => {
                for np in ports {
                    free.entry(np.node.clone())
                        .or_insert_with(BTreeSet::new)
                        .extend(np.ports.iter().copied());
                }
            }
            Step::CheckReachable(CheckReachable { port, .. }) => {
                reached.insert(*port);
            }
            _ => {}
        }
    }
    (free, reached, p.nodes.len())
}

/// Doctor's single ports on each of `nodes`, head first.
fn doctor_ports(ports: &[PortUse], nodes: &[NodeInput]) -> BTreeMap<NodeName, BTreeSet<u16>> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.name.clone(),
                ports
                    .iter()
                    .filter(|p| p.last == p.port && (i == 0 || p.scope == PortScope::Every))
                    .map(|p| p.port)
                    .collect(),
            )
        })
        .filter(|(_, ports): &(NodeName, BTreeSet<u16>)| !ports.is_empty())
        .collect()
}

#[test]
fn every_port_a_plan_checks_is_one_doctor_checks_for_the_same_options_and_no_other() {
    let two = seed_001();
    let one = &two[..1];
    let mut cases = bundled();
    cases.extend(moved());
    let engines: BTreeSet<EngineKind> = cases.iter().map(|(_, s)| s.engine).collect();
    assert_eq!(
        engines.len(),
        EngineKind::ALL.len(),
        "a bundled profile per engine"
    );
    assert!(cases.iter().any(|(_, s)| s.tuning.ray), "a Ray profile");
    for (name, s) in &cases {
        for nodes in [&two[..], one] {
            let mut s = s.clone();
            s.serve.tp = nodes.len() as u32;
            let (free, reached, n) = plan_ports(&s, nodes);
            let doctor = doctor::serving_ports(s.engine, &s.tuning, s.serve.port, n);
            assert_eq!(
                free,
                doctor_ports(&doctor, nodes),
                "{name} on {n} node(s): the plan's CheckPorts and doctor's ports differ"
            );
            let singles: BTreeSet<u16> = doctor.iter().map(|p| p.port).collect();
            assert!(
                reached.is_subset(&singles),
                "{name} on {n} node(s): the plan probes {reached:?}, doctor checks {singles:?}"
            );
        }
    }
}

#[test]
fn a_launch_with_default_ports_binds_nothing_doctor_s_default_list_leaves_out() {
    let nodes = seed_001();
    let defaults = doctor::default_ports();
    let checked = doctor_ports(&defaults, &nodes);
    for (name, s) in bundled() {
        let (free, _, n) = plan_ports(&s, &nodes);
        for (node, ports) in &free {
            let missing: Vec<&u16> = ports
                .iter()
                .filter(|p| !checked.get(node).is_some_and(|c| c.contains(p)))
                .collect();
            assert!(
                missing.is_empty(),
                "{name} on {n} nodes binds {missing:?} on {node}, which `spark-launch doctor` does not check ({defaults:?})"
            );
        }
    }
}
