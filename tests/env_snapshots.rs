//! The full `env --json` output of every fixture cluster, through the real reader and derive,
//! snapshot-tested. A refused layout snapshots its violations instead.

use std::path::Path;

use spark_launch::derive::derive;

mod support;
use support::fixtures::fixture_nodes;

fn env_json(name: &str) -> serde_json::Value {
    match derive(&fixture_nodes(name)) {
        Ok(c) => serde_json::to_value(&c).expect("serialises"),
        Err(r) => serde_json::json!({ "refused": r.violations, "message": r.to_string() }),
    }
}

macro_rules! snapshot_env {
    ($test:ident, $fixture:literal) => {
        #[test]
        fn $test() {
            insta::assert_json_snapshot!($fixture, env_json($fixture));
        }
    };
}

snapshot_env!(
    two_sparks_on_one_cable_use_both_twins,
    "seed-001-two-sparks-both-twins"
);
snapshot_env!(
    the_seed_000_pair_uses_its_one_active_twin_and_warns_about_the_other,
    "seed-000-one-twin"
);
snapshot_env!(
    a_link_local_pair_shares_169_254_and_uses_the_left_port,
    "seed-002-link-local"
);
snapshot_env!(
    the_seed_003_triangle_is_a_ring_on_the_management_network,
    "seed-003-triangle"
);
snapshot_env!(
    a_spark_and_a_workstation_each_get_their_own_names,
    "seed-004-spark-and-workstation"
);
snapshot_env!(
    three_sparks_on_a_switch_each_use_their_cabled_port,
    "switch-3-sparks"
);
snapshot_env!(
    four_sparks_in_a_ring_add_the_ring_algorithm,
    "ring-4-sparks"
);
snapshot_env!(twins_on_one_subnet_are_refused, "broken-twins-one-subnet");
snapshot_env!(
    a_node_with_its_cable_unplugged_is_refused,
    "broken-link-down"
);
snapshot_env!(
    an_mtu_mismatch_is_a_warning_on_both_ends,
    "broken-mtu-mismatch"
);
snapshot_env!(
    fresh_sparks_without_fabric_addresses_use_the_management_network_and_say_why,
    "fresh-two-sparks"
);
snapshot_env!(
    fresh_sparks_beside_an_office_network_in_the_pool_do_the_same,
    "fresh-mgmt-in-pool"
);
snapshot_env!(
    a_fresh_triangle_has_no_fabric_subnet_yet_and_says_so,
    "fresh-triangle"
);
snapshot_env!(
    a_fresh_spark_and_workstation_have_no_fabric_subnet_yet_and_say_so,
    "fresh-spark-and-workstation"
);

snapshot_env!(
    a_real_gpu_machine_without_rdma_or_ip_is_refused_naming_both_with_their_fixes,
    "real-gpu-one-node-no-rdma"
);

#[test]
fn every_fixture_folder_is_snapshot_tested() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("nodes").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let tested = [
        "broken-link-down",
        "broken-mtu-mismatch",
        "broken-twins-one-subnet",
        "fresh-mgmt-in-pool",
        "fresh-spark-and-workstation",
        "fresh-triangle",
        "fresh-two-sparks",
        "real-gpu-one-node-no-rdma",
        "ring-4-sparks",
        "seed-000-one-twin",
        "seed-001-two-sparks-both-twins",
        "seed-002-link-local",
        "seed-003-triangle",
        "seed-004-spark-and-workstation",
        "switch-3-sparks",
    ];
    assert_eq!(
        found, tested,
        "a new fixture needs a snapshot_env! test above"
    );
}

#[test]
fn every_fixture_is_listed_in_the_readme_with_its_source() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("fixtures README");
    for e in std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
    {
        if e.path().join("nodes").is_file() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                readme.contains(&format!("`{name}`")),
                "{name} is not in tests/fixtures/README.md"
            );
        }
    }
}

#[test]
fn no_fixture_folder_is_empty_because_git_would_drop_it() {
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")];
    let mut empty = Vec::new();
    while let Some(d) = stack.pop() {
        let entries: Vec<_> = std::fs::read_dir(&d)
            .expect("readable")
            .filter_map(|e| e.ok())
            .collect();
        if entries.is_empty() {
            empty.push(d.display().to_string());
        }
        stack.extend(entries.into_iter().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    assert!(
        empty.is_empty(),
        "empty folders vanish in a fresh clone: {empty:#?}"
    );
}
