//! `doctor` on every fixture cluster, through the real reader, derive and checks: the table and
//! the JSON report are snapshot-tested, and every warning and refusal `derive` has for a
//! fixture shows up in the doctor check that owns it (doctor never hides what `env` says).

use spark_launch::derive::derive;
use spark_launch::doctor::{self, CheckSelection, CheckStatus, Inputs, Options, Report};
use spark_launch::node::NodeName;

mod support;
use support::fixtures::fixture_nodes;

fn report(name: &str) -> Report {
    let nodes = fixture_nodes(name);
    let derived = derive(&nodes);
    doctor::run(
        &Inputs {
            nodes: &nodes,
            derived: &derived,
            options: &Options::default(),
            live: None,
            unreachable: &[],
        },
        &CheckSelection::default(),
    )
}

macro_rules! snapshot_doctor {
    ($test:ident, $fixture:literal) => {
        #[test]
        fn $test() {
            let r = report($fixture);
            insta::assert_snapshot!(concat!($fixture, "-text"), doctor::render::text(&r));
            insta::assert_json_snapshot!(concat!($fixture, "-json"), r);
        }
    };
}

snapshot_doctor!(
    two_sparks_on_one_cable_pass_every_fact_check,
    "seed-001-two-sparks-both-twins"
);
snapshot_doctor!(the_seed_000_pair_fails_its_down_twins, "seed-000-one-twin");
snapshot_doctor!(
    a_link_local_pair_is_checked_like_any_other,
    "seed-002-link-local"
);
snapshot_doctor!(
    the_seed_003_triangle_notes_its_ring_control_plane,
    "seed-003-triangle"
);
snapshot_doctor!(
    a_spark_and_a_workstation_report_their_own_interface_names,
    "seed-004-spark-and-workstation"
);
snapshot_doctor!(three_sparks_on_a_switch, "switch-3-sparks");
snapshot_doctor!(four_sparks_in_a_ring, "ring-4-sparks");
snapshot_doctor!(
    twins_on_one_subnet_fail_the_twins_check_on_that_node,
    "broken-twins-one-subnet"
);
snapshot_doctor!(
    a_node_with_its_cable_unplugged_fails_rdma_active,
    "broken-link-down"
);
snapshot_doctor!(
    an_mtu_mismatch_fails_the_end_with_the_small_mtu,
    "broken-mtu-mismatch"
);

const FIXTURES: [&str; 10] = [
    "broken-link-down",
    "broken-mtu-mismatch",
    "broken-twins-one-subnet",
    "ring-4-sparks",
    "seed-000-one-twin",
    "seed-001-two-sparks-both-twins",
    "seed-002-link-local",
    "seed-003-triangle",
    "seed-004-spark-and-workstation",
    "switch-3-sparks",
];

/// Which doctor check owns each kind of derive warning.
fn owner(warning: &str) -> &'static str {
    if warning.contains("'s twin") && warning.contains("is not ACTIVE") {
        "fabric.twins-active"
    } else if warning.contains("is ACTIVE but left out of NCCL_IB_HCA") {
        "fabric.twins-used"
    } else if warning.starts_with("MTU differs") {
        "fabric.mtu-mismatch"
    } else if warning.starts_with("NCCL_IB_GID_INDEX") {
        "fabric.roce-gid"
    } else {
        "fabric.control-plane"
    }
}

#[test]
fn every_derive_warning_and_refusal_is_reported_by_the_check_that_owns_it() {
    for name in FIXTURES {
        let nodes = fixture_nodes(name);
        let r = report(name);
        let said = |id: &str, node: &NodeName| {
            let c = r.checks.iter().find(|c| c.info.id == id).unwrap();
            c.findings.iter().any(|f| &f.node == node) || c.notes.iter().any(|n| &n.node == node)
        };
        match derive(&nodes) {
            Ok(env) => {
                for n in &env.nodes {
                    for w in &n.warnings {
                        // An MTU mismatch is the smaller end's problem; derive warns both.
                        let id = owner(w);
                        if id == "fabric.mtu-mismatch" {
                            let c = r.checks.iter().find(|c| c.info.id == id).unwrap();
                            assert!(!c.findings.is_empty(), "{name}: {w}");
                            continue;
                        }
                        assert!(
                            said(id, &n.name),
                            "{name}: {} warns {w:?} but {id} says nothing",
                            n.name
                        );
                    }
                }
            }
            Err(refusal) => {
                for v in &refusal.violations {
                    let failed = r.checks.iter().any(|c| {
                        c.findings.iter().any(|f| {
                            f.node == v.node
                                && f.severity == doctor::Severity::Fail
                                && f.problem.fix.text == v.problem.fix
                        })
                    });
                    assert!(failed, "{name}: refusal {v} is not a FAIL finding");
                }
            }
        }
    }
}

#[test]
fn the_broken_fixtures_fail_and_the_good_ones_do_not() {
    for name in FIXTURES {
        let r = report(name);
        let broken = name.starts_with("broken-") || name == "seed-000-one-twin";
        assert_eq!(r.failed(), broken, "{name}: {}", doctor::render::text(&r));
        let live_skipped = r
            .checks
            .iter()
            .filter(|c| c.info.needs == doctor::CheckNeeds::Live)
            .all(|c| c.status == CheckStatus::Skipped);
        assert!(live_skipped, "{name}: a live check ran on snapshots");
    }
}

#[test]
fn a_gpu_machine_without_rdma_skips_what_it_has_nothing_to_check_on_saying_why() {
    // Probed on a real machine with an H200 GPU and no RDMA device (one node, no `ip`).
    let r = report("real-gpu-one-node-no-rdma");
    let status = |id: &str| {
        r.checks
            .iter()
            .find(|c| c.info.id == id)
            .map(|c| (c.status, c.skipped.first().map(|(_, why)| why.clone())))
            .unwrap_or_else(|| panic!("no check {id}"))
    };
    for id in [
        "fabric.twins-active",
        "fabric.link-speed",
        "fabric.interfaces",
    ] {
        assert_eq!(
            status(id),
            (
                CheckStatus::Skipped,
                Some("no RDMA device on this node: nothing to check".to_string())
            ),
            "{id}"
        );
    }
    assert_eq!(
        status("host.kernel"),
        (
            CheckStatus::Skipped,
            Some("one node: nothing to compare or reach between nodes".to_string())
        )
    );
    assert_eq!(status("fabric.rdma-active").0, CheckStatus::Fail);
    // Its own NCCL (`--runtime host`): nothing to compare on one node, what it loads noted.
    assert_eq!(
        status("host.nccl"),
        (
            CheckStatus::Skipped,
            Some("one node: nothing to compare or reach between nodes".to_string())
        )
    );
    let notes: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.info.id == "host.nccl")
        .flat_map(|c| c.notes.iter().map(|n| n.text.as_str()))
        .collect();
    assert_eq!(
        notes,
        [
            "its loader takes NCCL 2.28.3+cuda13.0 from /usr/lib/x86_64-linux-gnu/libnccl.so.2 → /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 (ld.so.cache)",
            "its python3's PyTorch takes NCCL 2.28.9 from /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2 (RPATH of /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so)"
        ]
    );
    for id in [
        "host.memlock",
        "host.nvidia-driver",
        "host.memory",
        "host.nccl-conf",
    ] {
        assert_eq!(status(id).0, CheckStatus::Ok, "{id}");
    }
    let oks: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::Ok)
        .map(|c| c.info.id)
        .collect();
    assert_eq!(
        oks,
        [
            "host.memlock",
            "host.nvidia-driver",
            "host.memory",
            "host.nccl-conf"
        ],
        "{}",
        doctor::render::text(&r)
    );
}
