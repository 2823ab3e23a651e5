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
fn status_and_logs_on_snapshots_say_they_need_live_nodes() {
    let a = snapshot("spark");
    for args in [vec!["status"], vec!["logs", "demo"]] {
        let mut all = args.clone();
        all.extend(["--snapshot", &a]);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("live nodes"), "{args:?}: {err}");
        assert!(err.contains("--hosts or --engine"), "{args:?}: {err}");
    }
}

#[test]
fn snapshots_stand_in_for_live_nodes_only_in_a_dry_run() {
    let a = snapshot("spark");
    for args in [
        vec!["stop", "demo"],
        vec!["image", "push", "busybox:1"],
        vec!["run", "--job", "demo", "--image", "i"],
    ] {
        let mut all = args.clone();
        all.extend(["--snapshot", &a]);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("only with --dry-run"), "{args:?}: {err}");
    }
}

#[test]
fn stop_dry_run_on_snapshots_names_what_a_live_stop_would_remove_on_each_node() {
    let a = snapshot("spark");
    let b = snapshot("spark2");
    let out = run(&[
        "stop",
        "demo",
        "--dry-run",
        "--json",
        "--snapshot",
        &a,
        "--snapshot",
        &b,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["label"], "dev.spark-launch.job=demo");
    let nodes = plan["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for (n, name) in nodes.iter().zip(["spark", "spark2"]) {
        assert_eq!(n["node"], name);
        let looks_for = n["looks_for"].as_str().unwrap();
        assert!(
            looks_for.contains(&format!("sl-demo-{name}")),
            "{looks_for}"
        );
    }

    let text = run(&["stop", "--all", "--dry-run", "--snapshot", &a]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("spark: every container and host process labelled dev.spark-launch.job"),
        "{text}"
    );
}

#[test]
fn image_push_dry_run_on_snapshots_names_source_targets_and_a_mixed_cpu_cluster() {
    let spark = snapshot("spark");
    let ws = format!(
        "ws={}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/seed-004-spark-and-workstation/workstation")
            .display()
    );
    let out = run(&[
        "image",
        "push",
        "nccl-tests:2.28",
        "--dry-run",
        "--json",
        "--snapshot",
        &spark,
        "--snapshot",
        &ws,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["source"]["node"], "spark");
    assert_eq!(plan["source"]["arch"], "aarch64");
    assert_eq!(plan["targets"][0]["node"], "ws");
    assert_eq!(plan["targets"][0]["arch"], "x86_64");
    assert_eq!(
        plan["mixed_arches"],
        serde_json::json!(["aarch64", "x86_64"])
    );

    let unknown = run(&[
        "image",
        "push",
        "i",
        "--dry-run",
        "--to",
        "nope",
        "--snapshot",
        &spark,
    ]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no node named nope"));
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

#[test]
fn ulimit_nofile_10_5_is_refused_on_the_command_line() {
    // Seen once: `--ulimit nofile=10:5` (soft above hard) was accepted.
    let out = run(&[
        "run",
        "--job",
        "x",
        "--image",
        "busybox",
        "--ulimit",
        "nofile=10:5",
        "--dry-run",
        "--snapshot",
        &snapshot("spark"),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("soft limit (10) is above the hard limit (5)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_image_with_shell_syntax_is_refused_by_run_even_in_a_dry_run() {
    let out = run(&[
        "run",
        "--job",
        "x",
        "--image",
        "img; touch x",
        "--dry-run",
        "--snapshot",
        &snapshot("spark"),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an image reference"));
    assert!(out.stdout.is_empty());
}

#[test]
fn secret_env_and_secret_like_names_print_as_set_in_json_and_text_plans() {
    // Seen once: `DB_PASS` and `AUTH_BEARER` were printed, and no flag could mark a
    // variable named otherwise.
    let a = snapshot("spark");
    let b = snapshot("spark2");
    for format in ["--json", "--no-progress"] {
        let out = run(&[
            "run",
            "--dry-run",
            format,
            "--job",
            "demo",
            "--image",
            "nvcr.io/nvidia/pytorch:25.09-py3",
            "-e",
            "DB_PASS=hunter2",
            "-e",
            "AUTH_BEARER=bearer-xyz",
            "-e",
            "DATABASE_URL=postgres://u:pw-123@db/x",
            "-e",
            "NCCL_DEBUG=INFO",
            "--secret-env",
            "DATABASE_URL",
            "--snapshot",
            &a,
            "--snapshot",
            &b,
            "--",
            "sleep",
            "infinity",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for value in ["hunter2", "bearer-xyz", "pw-123"] {
            assert!(
                !stdout.contains(value),
                "{format}: {value} printed:\n{stdout}"
            );
        }
        assert!(
            stdout.contains("<set>") && stdout.contains("INFO"),
            "{stdout}"
        );
        assert!(stdout.contains("SPARK_LAUNCH_SECRET_ENV"), "{stdout}");
    }
    let bad = run(&[
        "run",
        "--dry-run",
        "--job",
        "demo",
        "--image",
        "i",
        "--secret-env",
        "1X",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not an environment variable name"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn a_closed_stdout_ends_status_watch() {
    // `status --watch | head`: once the reader has gone, the watch ends (exit 0) rather than
    // sampling the nodes for nobody. Run on this machine (no cluster file: the local node).
    use std::io::BufRead;
    use std::process::Stdio;
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(["status", "--watch"])
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("SPARK_LAUNCH_STATE_DIR", home.path().join("state"))
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read the first line of the first sample, then close the pipe as `head -1` does.
    let mut first = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut first).unwrap();
    assert!(first.contains("every job"), "{first:?}");
    drop(out);
    // The next sample comes within a few seconds and finds no reader.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("status --watch went on for 30 s after its stdout was closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}
