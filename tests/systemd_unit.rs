//! The systemd units `supervise::unit` writes, checked by the real `systemd-analyze verify`
//! (Debian's systemd; it parses a unit file offline, loads its dependencies and checks that the
//! command it runs is an executable file): a system unit and a user unit for this build's
//! binary, placed under a path with a space and a `%h` so the quoting and the `%%` escaping
//! are what systemd reads, with no warning at all. A unit naming a binary that is not there
//! fails the same check (the check bites).

use std::path::Path;
use std::process::{Command, Output};

use spark_launch::plan::JobName;
use spark_launch::supervise::unit::{UnitOptions, UnitScope, unit};

fn verify(file: &Path, user: bool, runtime_dir: &Path) -> Output {
    let mut c = Command::new("systemd-analyze");
    if user {
        // The user manager needs a runtime folder; verify runs none of the unit.
        c.arg("--user").env("XDG_RUNTIME_DIR", runtime_dir);
    }
    c.args(["verify", "--man=no"])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("systemd-analyze is needed (apt-get install systemd): {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// This build's binary, linked into a folder whose name systemd must quote and escape (`%h`
/// is a specifier systemd would expand to a home folder, were it not written `%%h`).
fn odd_binary(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("spark launch %h").join("spark-launch");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    let src = Path::new(env!("CARGO_BIN_EXE_spark-launch"));
    if std::fs::hard_link(src, &bin).is_err() {
        std::fs::copy(src, &bin).unwrap();
    }
    bin
}

fn options(scope: UnitScope, binary: &Path, dir: &Path) -> UnitOptions {
    UnitOptions {
        job: JobName::new("qwen-tp2").unwrap(),
        scope,
        binary: binary.to_path_buf(),
        cluster_file: dir.join("my cluster/cluster 50%.yaml"),
        supervise_args: vec!["--probe-every".into(), "5".into()],
        environment: vec![
            ("RUST_LOG".into(), "spark_launch=info".into()),
            (
                "SPARK_LAUNCH_STATE_DIR".into(),
                dir.join("state $HOME").display().to_string(),
            ),
        ],
        restart_sec: 10,
    }
}

#[test]
fn generated_system_and_user_units_pass_systemd_analyze_verify_without_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = odd_binary(tmp.path());
    let runtime = tmp.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    for (scope, user) in [
        (
            UnitScope::System {
                user: "sparkuser".into(),
            },
            false,
        ),
        (UnitScope::User, true),
    ] {
        let u = unit(&options(scope.clone(), &bin, tmp.path())).unwrap();
        let dir = tmp.path().join(if user { "user" } else { "system" });
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join(&u.name);
        std::fs::write(&file, &u.text).unwrap();
        let out = verify(&file, user, &runtime);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{scope:?}:\n{}\n--- the unit\n{}",
            text(&out),
            u.text
        );
        assert!(
            u.text.contains("ExecStart=\""),
            "the binary's path needs quotes: {}",
            u.text
        );
        assert!(u.text.contains("launch %%h/"), "{}", u.text);
    }
}

#[test]
fn a_unit_whose_binary_is_not_there_fails_the_same_check() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere/spark-launch");
    let u = unit(&options(
        UnitScope::System {
            user: "sparkuser".into(),
        },
        &missing,
        tmp.path(),
    ))
    .unwrap();
    let file = tmp.path().join(&u.name);
    std::fs::write(&file, &u.text).unwrap();
    let out = verify(&file, false, tmp.path());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("nowhere/spark-launch is not executable"),
        "{}",
        text(&out)
    );
}

/// A job's plan kept as a launch keeps it: `vllm --dry-run --json` on the two-Spark snapshots
/// (a local model folder with its config.json), written to `STATE/records/demo/plan.json`.
fn kept_plan(tmp: &Path) -> std::path::PathBuf {
    let model = tmp.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("config.json"),
        r#"{"architectures":["X"],"hidden_size":64,"num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":4}"#,
    )
    .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fresh-two-sparks");
    let mut args = vec![
        "vllm".to_string(),
        model.display().to_string(),
        "--tp".into(),
        "2".into(),
        "--job".into(),
        "demo".into(),
        "--dry-run".into(),
        "--json".into(),
    ];
    for n in ["spark-3f21", "spark-8c04"] {
        args.push("--snapshot".into());
        args.push(format!("{n}={}", fixtures.join(n).display()));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let state = tmp.join("state");
    let dir = state.join("records/demo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plan.json"), &out.stdout).unwrap();
    state
}

fn spark_launch(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_STATE_DIR", state)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

#[test]
fn export_systemd_writes_the_unit_of_a_kept_job_and_systemd_analyze_verify_accepts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = kept_plan(tmp.path());
    let runtime = tmp.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let file = tmp.path().join("spark-launch-demo.service");
    let out = spark_launch(
        &state,
        &[
            "export",
            "systemd",
            "demo",
            "--output",
            file.to_str().unwrap(),
            "--probe-every",
            "3",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let unit = std::fs::read_to_string(&file).unwrap();
    assert!(unit.contains(" supervise demo --cluster "), "{unit}");
    assert!(unit.contains("--probe-every 3"), "{unit}");
    assert!(
        unit.contains(&format!("SPARK_LAUNCH_STATE_DIR={}", state.display())),
        "{unit}"
    );
    let verified = verify(&file, true, &runtime);
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "{}\n--- the unit\n{unit}",
        text(&verified)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("systemctl --user daemon-reload"),
        "{}",
        text(&out)
    );
    // A job with no kept plan: refused (exit 2), naming where it looked.
    let out = spark_launch(&state, &["export", "systemd", "other", "--output", "-"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("records/other/plan.json"),
        "{}",
        text(&out)
    );
}

#[test]
fn supervise_dry_run_says_what_it_watches_and_the_order_of_a_restart_without_touching_a_node() {
    let tmp = tempfile::tempdir().unwrap();
    let state = kept_plan(tmp.path());
    let out = spark_launch(&state, &["supervise", "demo", "--dry-run", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let containers: Vec<&str> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["container"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["sl-demo-spark-3f21", "sl-demo-spark-8c04"]);
    assert_eq!(v["policy"]["interval_s"], 5.0);
    assert_eq!(v["policy"]["failures"], 2);
    let restart = v["restart"].as_array().unwrap();
    assert_eq!(restart[0]["stage"], "stop");
    assert_eq!(restart[0]["containers"][1], "sl-demo-spark-8c04");
    assert_eq!(restart[1]["stage"], "start");
    assert_eq!(
        restart[1]["nodes"],
        serde_json::json!(["spark-3f21", "spark-8c04"])
    );
    assert_eq!(restart.last().unwrap()["stage"], "run");
    assert!(
        restart.last().unwrap()["step"]
            .as_str()
            .unwrap()
            .contains("/v1/models lists model"),
        "{v}"
    );
    let out = spark_launch(&state, &["supervise", "demo", "--dry-run"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("a restart, of the whole group:"), "{shown}");
    assert!(
        shown.contains("1. stop sl-demo-spark-3f21, sl-demo-spark-8c04"),
        "{shown}"
    );
}

/// `spark-launch ARGS` with the state folder `state`, killed after 20 s (a FIFO read forever
/// would hang the test otherwise).
fn spark_launch_within(state: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("timeout");
    c.args(["-s", "KILL", "20"])
        .arg(env!("CARGO_BIN_EXE_spark-launch"));
    c.args(args)
        .env("SPARK_LAUNCH_STATE_DIR", state)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

#[test]
fn a_kept_record_that_is_not_what_spark_launch_wrote_is_refused_by_name_and_a_bad_event_line_hides_nothing_else()
 {
    let tmp = tempfile::tempdir().unwrap();
    let state = kept_plan(tmp.path());
    let dir = state.join("records/demo");
    // An event log with a line that is not UTF-8 between two good ones.
    let good = |at: &str| {
        format!(
            r#"{{"at":"{at}","kind":"stopped","detail":"supervising stopped (Ctrl-C); the job keeps running"}}"#
        )
    };
    let mut log = good("2026-11-26T18:00:00.000Z").into_bytes();
    log.extend_from_slice(b"\n{\"at\":\"x\",\"kind\":\"ready\",\"detail\":\"\xff\"}\n");
    log.extend_from_slice(good("2026-11-26T18:00:01.000Z").as_bytes());
    log.push(b'\n');
    std::fs::write(dir.join("events.jsonl"), log).unwrap();
    let out = spark_launch_within(&state, &["logs", "demo", "--events"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(shown.matches("supervising stopped").count(), 2, "{shown}");
    assert!(shown.contains("(1 line of "), "{shown}");

    // A kept plan whose job name breaks the rule a given name meets.
    let plan = std::fs::read_to_string(dir.join("plan.json")).unwrap();
    let bad = plan.replace("\"job\": \"demo\"", "\"job\": \"demo/../../x\"");
    assert_ne!(bad, plan, "the plan names its job");
    std::fs::write(dir.join("plan.json"), &bad).unwrap();
    let out = spark_launch_within(&state, &["supervise", "demo", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("invalid job name"), "{}", text(&out));

    // A FIFO in place of the plan: refused at once, never read forever.
    std::fs::remove_file(dir.join("plan.json")).unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.join("plan.json"))
        .status()
        .unwrap();
    assert!(made.success());
    for args in [
        &["supervise", "demo", "--dry-run"][..],
        &["export", "systemd", "demo", "--output", "-"][..],
    ] {
        let out = spark_launch_within(&state, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains("plan.json is not a regular file (a FIFO"),
            "{}",
            text(&out)
        );
    }
}
