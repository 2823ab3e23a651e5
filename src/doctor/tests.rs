//! Tests of the check registry and the report assembly (each check's own passing and failing
//! cases live next to it).

use std::collections::{BTreeMap, BTreeSet};

use super::testkit::*;
use super::*;
use crate::derive::derive;

#[test]
fn check_ids_are_unique_and_start_with_their_category() {
    let all = checks();
    let ids: BTreeSet<&str> = all.iter().map(|c| c.info.id).collect();
    assert_eq!(ids.len(), all.len(), "duplicate check ids");
    for c in &all {
        let (cat, rest) = c.info.id.split_once('.').expect("id is category.name");
        assert_eq!(cat, c.info.category.as_str(), "{}", c.info.id);
        assert!(
            rest.chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-'),
            "{} is not kebab-case",
            c.info.id
        );
    }
    for id in logs::ids() {
        assert!(id.starts_with("lastrun."));
    }
}

#[test]
fn a_selection_matches_ids_and_category_prefixes_and_reports_unknown_patterns() {
    let s = CheckSelection {
        only: vec!["fabric".into(), "host.cma".into()],
        skip: vec!["fabric.interfaces".into()],
    };
    assert!(s.wants("fabric.mtu-mismatch"));
    assert!(s.wants("host.cma"));
    assert!(!s.wants("host.cma-extra"));
    assert!(!s.wants("fabric.interfaces"));
    assert!(!s.wants("host.kernel"));
    let typo = CheckSelection {
        only: vec!["fabrik".into()],
        skip: vec![],
    };
    assert_eq!(typo.unknown(), vec!["fabrik"]);
}

fn report(
    nodes: &[crate::derive::NodeInput],
    live: Option<&BTreeMap<NodeName, Result<Observations, String>>>,
) -> Report {
    let derived = derive(nodes);
    let options = Options::default();
    run(
        &Inputs {
            nodes,
            derived: &derived,
            options: &options,
            live,
            unreachable: &[],
        },
        &CheckSelection::default(),
    )
}

#[test]
fn on_snapshots_every_live_check_is_skipped_with_the_reason_and_facts_pass() {
    let r = report(&pair(), None);
    assert!(!r.failed());
    for c in &r.checks {
        if c.info.needs == CheckNeeds::Live {
            assert_eq!(c.status, CheckStatus::Skipped, "{}", c.info.id);
            assert_eq!(
                c.skipped[0].1,
                "needs live nodes (this run reads snapshots)"
            );
        } else if c.info.id == "cluster.model-fit" {
            // Without --model there is no model to fit.
            assert_eq!(c.status, CheckStatus::Skipped, "{}", c.info.id);
        } else {
            assert_eq!(c.status, CheckStatus::Ok, "{}: {:?}", c.info.id, c.findings);
        }
    }
    let cells = r.checks.len() * 2;
    assert_eq!(
        r.summary.ok + r.summary.skipped + r.summary.warn + r.summary.fail,
        cells
    );
}

#[test]
fn two_faults_on_two_nodes_fail_exactly_two_cells() {
    let nodes = vec![
        Node::cabled_spark("spark-a", "192.168.177.11/24")
            .host(|h| h.cma_free_kib = Some(9_400_000))
            .named("spark-a"),
        Node::cabled_spark("spark-b", "192.168.177.12/24")
            .mgmt("10.0.0.12/24")
            .mtu("enp1s0f1np1", 1500)
            .mtu("enP2p1s0f1np1", 1500)
            .named("spark-b"),
    ];
    let r = report(&nodes, None);
    let fails: Vec<(&str, &str)> = r
        .checks
        .iter()
        .flat_map(|c| {
            c.nodes
                .iter()
                .filter(|(_, s)| *s == CheckStatus::Fail)
                .map(move |(n, _)| (c.info.id, n.as_str()))
        })
        .collect();
    assert_eq!(
        fails,
        vec![("fabric.mtu-mismatch", "spark-b"), ("host.cma", "spark-a")]
    );
    assert!(r.failed());
    assert_eq!(r.summary.fail, 2);
}

#[test]
fn a_node_that_cannot_be_reached_fails_reach_ssh_and_is_skipped_by_every_other_check() {
    let nodes = vec![pair().remove(0)];
    let live: BTreeMap<NodeName, Result<Observations, String>> =
        [(name("spark-a"), Ok(Observations::default()))].into();
    let unreachable = vec![(
        name("spark-b"),
        "ssh: connect to host 10.0.0.12 port 22: Connection refused".to_string(),
    )];
    let derived = derive(&nodes);
    let options = Options::default();
    let r = run(
        &Inputs {
            nodes: &nodes,
            derived: &derived,
            options: &options,
            live: Some(&live),
            unreachable: &unreachable,
        },
        &CheckSelection::default(),
    );
    assert_eq!(r.nodes, vec![name("spark-a"), name("spark-b")]);
    for c in &r.checks {
        let cell = c
            .nodes
            .iter()
            .find(|(n, _)| n.as_str() == "spark-b")
            .unwrap()
            .1;
        if c.info.id == "reach.ssh" {
            assert_eq!(cell, CheckStatus::Fail);
            assert_eq!(
                c.findings[0].problem.fix.commands,
                vec!["sudo systemctl enable --now ssh"]
            );
        } else {
            assert_eq!(cell, CheckStatus::Skipped, "{}", c.info.id);
        }
    }
}

#[test]
fn checks_between_nodes_on_a_live_cluster_of_one_node_are_skipped_saying_so() {
    let nodes = vec![Node::cabled_spark("solo", "192.168.177.11/24").named("solo")];
    let live: Live = [(name("solo"), Ok(Observations::default()))].into();
    let derived = derive(&nodes);
    let r = run(
        &Inputs {
            nodes: &nodes,
            derived: &derived,
            options: &Options::default(),
            live: Some(&live),
            unreachable: &[],
        },
        &CheckSelection {
            only: vec![
                "reach.ssh".into(),
                "reach.fabric".into(),
                "fabric.mtu-path".into(),
                "host.kernel".into(),
            ],
            skip: vec![],
        },
    );
    let got: Vec<(&str, CheckStatus, &str)> = r
        .checks
        .iter()
        .map(|c| {
            (
                c.info.id,
                c.status,
                c.skipped.first().map(|(_, w)| w.as_str()).unwrap_or(""),
            )
        })
        .collect();
    let one = "one node: nothing to compare or reach between nodes";
    assert_eq!(
        got,
        [
            ("fabric.mtu-path", CheckStatus::Skipped, one),
            ("reach.ssh", CheckStatus::Skipped, one),
            ("reach.fabric", CheckStatus::Skipped, one),
            ("host.kernel", CheckStatus::Skipped, one),
        ]
    );
}
