//! `spark-launch fabric` as a user runs it on snapshots: output, exit codes and messages of
//! `plan`, `apply --dry-run` and `test --dry-run` (the live paths run on simulated nodes in
//! `tests/fabric_sim.rs`).

use std::process::{Command, Output};

mod support;
use support::fixtures::snapshot_args;

fn run(prefix: &[&str], fixture: &str) -> Output {
    let mut a: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    a.extend(snapshot_args(fixture));
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(&a)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn plan_json_is_only_json_with_the_documented_keys() {
    let o = run(&["fabric", "plan", "--json"], "fresh-two-sparks");
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("only JSON on stdout");
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, vec!["links", "nodes", "topology", "warnings"]);
    let node = v["nodes"]["spark-3f21"].as_object().unwrap();
    let keys: Vec<&String> = node.keys().collect();
    assert_eq!(
        keys,
        vec!["addresses", "conflicts", "file", "mtu", "netplan"]
    );
    let link = v["links"][0].as_object().unwrap();
    assert_eq!(link.keys().collect::<Vec<_>>(), vec!["a", "b", "subnet"]);
}

#[test]
fn a_refused_plan_exits_2_with_the_cable_to_move_and_json_says_refused() {
    let o = run(&["fabric", "plan"], "broken-link-down");
    assert_eq!(o.status.code(), Some(2));
    // The fixture records no link probe: said so, with how to record or state the cables
    // (it said "nothing cabled" and "plug a QSFP cable").
    assert!(
        err(&o).contains("spark2's cabling was not recorded"),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("fix: record it"), "{}", err(&o));
    let o = run(&["fabric", "plan", "--json"], "broken-link-down");
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["refused"].as_array().unwrap().len(), 2);
}

#[test]
fn the_triangle_is_planned_from_link_arguments_and_a_bad_one_is_refused() {
    let o = run(
        &[
            "fabric",
            "plan",
            "--json",
            "--link",
            "titanic:enp1s0f0np0=iceberg:enp1s0f0np0",
            "--link",
            "titanic:enp1s0f1np1=carpathia:enp1s0f0np0",
            "--link",
            "iceberg:enp1s0f1np1=carpathia:enp1s0f1np1",
        ],
        "fresh-triangle",
    );
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["topology"], "ring");
    let o = run(
        &[
            "fabric",
            "plan",
            "--link",
            "titanic:eth9=iceberg:enp1s0f0np0",
        ],
        "fresh-triangle",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("titanic has no fabric interface eth9 (its fabric interfaces: enP2p1s0f0np0, enP2p1s0f1np1, enp1s0f0np0, enp1s0f1np1)"),
        "{}",
        err(&o)
    );
    let o = run(
        &["fabric", "plan", "--link", "titanic-enp1"],
        "fresh-triangle",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("NODE:IF=NODE:IF"), "{}", err(&o));
    let o = run(
        &["fabric", "plan", "--pool", "10.0.0.0/28"],
        "fresh-two-sparks",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("smaller than one /24"), "{}", err(&o));
}

#[test]
fn apply_on_snapshots_needs_dry_run_and_a_dry_run_shows_each_nodes_file_diff() {
    let o = run(&["fabric", "apply"], "fresh-two-sparks");
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("use --dry-run"), "{}", err(&o));
    let o = run(&["fabric", "apply", "--dry-run"], "fresh-two-sparks");
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    assert!(text.starts_with("dry run: nothing is changed"), "{text}");
    assert!(
        text.contains("--- /dev/null\n  +++ /etc/netplan/40-spark-launch.yaml"),
        "{text}"
    );
    assert!(text.contains("+        - 192.168.100.1/24"), "{text}");
}

#[test]
fn a_dry_run_over_a_conflicting_file_shows_the_diff_then_refuses_unless_replace() {
    let o = run(
        &["fabric", "apply", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        out(&o).contains("+        - 192.168.100.1/24"),
        "{}",
        out(&o)
    );
    assert!(
        err(&o).contains("spark: /etc/netplan/40-cx7.yaml configures enP2p1s0f1np1, enp1s0f1np1"),
        "{}",
        err(&o)
    );
    let o = run(
        &["fabric", "apply", "--dry-run", "--replace", "--json"],
        "seed-001-two-sparks-both-twins",
    );
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["moves"]["spark2"],
        serde_json::json!(["/etc/netplan/40-cx7.yaml"])
    );
    assert!(
        v["diff"]["spark"]
            .as_str()
            .unwrap()
            .contains("+        - 192.168.100.1/24")
    );
}

#[test]
fn an_addressed_fabric_is_nothing_to_do() {
    let o = run(&["fabric", "plan"], "seed-000-one-twin");
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        out(&o).contains("nothing to do: the fabric is already addressed as planned"),
        "{}",
        out(&o)
    );
}

#[test]
fn test_dry_run_lists_the_ib_write_bw_runs_per_cable_and_a_live_test_needs_nodes() {
    let o = run(
        &["fabric", "test", "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    );
    assert!(o.status.success(), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["rounds"][0]["server_node"], "spark2");
    assert_eq!(v["rounds"][0]["runs"][0]["server_addr"], "192.168.177.12");
    let o = run(
        &["fabric", "test", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    );
    assert!(
        out(&o).contains(
            "ib_write_bw -d 'rocep1s0f1' -p 18515 -q 4 -F -R --report_gbits -D 5 192.168.177.12"
        ),
        "{}",
        out(&o)
    );
    let o = run(&["fabric", "test"], "seed-001-two-sparks-both-twins");
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["fabric", "test", "--dry-run"], "fresh-two-sparks");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("`spark-launch fabric apply`"),
        "{}",
        err(&o)
    );
}
