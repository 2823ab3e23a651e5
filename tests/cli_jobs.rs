//! `run`, `status`, `logs`, `stop` and `image push` as a user types them, where no engine is
//! needed: plans from snapshots, usage errors and their exit codes.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

fn snapshot(node: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed-001-two-sparks-both-twins")
        .join(node);
    format!("{node}={}", dir.display())
}

#[test]
fn a_dry_run_from_snapshots_prints_the_whole_plan_as_json_and_touches_nothing() {
    let a = snapshot("spark");
    let b = snapshot("spark2");
    let out = run(&[
        "run",
        "--dry-run",
        "--json",
        "--job",
        "demo",
        "--image",
        "nvcr.io/nvidia/pytorch:25.09-py3",
        "--device",
        "/dev/infiniband",
        "--port",
        "8000",
        "--snapshot",
        &a,
        "--snapshot",
        &b,
        "--",
        "sleep",
        "infinity",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    insta::assert_json_snapshot!(plan);
}

#[test]
fn a_dry_run_in_text_lists_each_node_and_the_steps() {
    let a = snapshot("spark");
    let out = run(&[
        "run",
        "--dry-run",
        "--job",
        "demo",
        "--image",
        "img:1",
        "--gpus",
        "2",
        "--snapshot",
        &a,
        "--",
        "true",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("container sl-demo-spark  image img:1"),
        "{text}"
    );
    assert!(text.contains("gpus 2"), "{text}");
    assert!(text.contains("ulimit memlock=-1:-1"), "{text}");
    assert!(text.contains("1. Ensure image img:1 on spark"), "{text}");
    assert!(text.contains("2. Start on spark"), "{text}");
}

#[test]
fn stop_needs_a_job_or_all() {
    let out = run(&["stop"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_bad_engine_argument_is_a_usage_error() {
    let out = run(&["status", "--engine", "n1=tcp://10.0.0.1:2375"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unix:///path"));
}

#[test]
fn a_job_name_that_cannot_name_a_container_is_refused() {
    let out = run(&[
        "run",
        "--dry-run",
        "--job",
        "bad_name",
        "--image",
        "i",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid job name"));
}

#[test]
fn snapshots_do_not_stand_in_for_live_nodes() {
    let a = snapshot("spark");
    let out = run(&["status", "--snapshot", &a]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only with --dry-run"));
}

#[test]
fn a_dry_run_with_an_unreadable_snapshot_names_the_node() {
    let out = run(&[
        "run",
        "--dry-run",
        "--job",
        "demo",
        "--image",
        "i",
        "--snapshot",
        "x=/nonexistent/sl4",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("x: "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
