//! The systemd units `supervise::unit` writes, checked by the real `systemd-analyze verify`
//! (Debian's systemd; it parses a unit file offline, loads its dependencies and checks that the
//! command it runs is an executable file): a system unit and a user unit for this build's
//! binary, placed under a path with a space and a `%h` so the quoting and the `%%` escaping
//! are what systemd reads, with no warning at all. A unit naming a binary that is not there
//! fails the same check (the check bites).

use std::path::Path;
use std::process::{Command, Output};

use spark_launch::plan::JobName;
use spark_launch::supervise::unit::{UnitNodes, UnitOptions, UnitScope, unit};

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
/// is a specifier systemd would expand to a home folder, were it not written `%%h`; a `$`
/// must reach systemd as a `$`, as it reads no `$$` in the binary's path).
fn odd_binary(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("spark launch %h $HOME").join("spark-launch");
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
        nodes: UnitNodes::ClusterFile(dir.join("my cluster/cluster 50%.yaml")),
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
            u.text.contains("ExecStart=:\""),
            "the binary's path needs quotes, and no variable expansion: {}",
            u.text
        );
        assert!(u.text.contains("launch %%h $HOME/"), "{}", u.text);
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

/// A cluster file naming the two nodes of the kept plan (written by hand in the layout
/// `discover --save` writes; the addresses are those of the `fresh-two-sparks` snapshots'
/// management interfaces), beside the state folder.
fn cluster_file(state: &Path) -> std::path::PathBuf {
    let file = state.parent().unwrap().join("cluster.yaml");
    std::fs::write(
        &file,
        "nodes:\n  - name: spark-3f21\n    addresses: [192.168.1.41]\n  - name: spark-8c04\n    addresses: [192.168.1.42]\n",
    )
    .unwrap();
    file
}

fn spark_launch(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_STATE_DIR", state)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("SPARK_LAUNCH_CLUSTER", cluster_file(state))
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
        .env("SPARK_LAUNCH_CLUSTER", cluster_file(state))
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

#[test]
fn a_job_launched_with_hosts_gets_a_unit_that_reaches_those_hosts_and_one_the_cluster_file_does_not_name_is_refused()
 {
    let tmp = tempfile::tempdir().unwrap();
    let state = kept_plan(tmp.path());
    let runtime = tmp.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    // No hosts kept, and a cluster file that does not name spark-8c04: refused, naming it.
    let other = tmp.path().join("other.yaml");
    std::fs::write(
        &other,
        "nodes:\n  - name: spark-3f21\n    addresses: [192.168.1.41]\n",
    )
    .unwrap();
    let out = spark_launch(
        &state,
        &[
            "export",
            "systemd",
            "demo",
            "-o",
            "-",
            "--cluster",
            other.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("it does not name spark-8c04") && text(&out).contains("--hosts"),
        "{}",
        text(&out)
    );
    // The hosts the launch kept (`vllm ... --hosts 192.168.1.41,spark-8c04=nvidia@192.168.1.42:2222`
    // keeps them so): the unit passes them, and no cluster file.
    std::fs::write(
        state.join("records/demo/hosts.json"),
        r#"{"hosts": ["spark-3f21=192.168.1.41", "spark-8c04=nvidia@192.168.1.42:2222"]}"#,
    )
    .unwrap();
    let file = tmp.path().join("spark-launch-demo.service");
    let out = spark_launch(
        &state,
        &[
            "export",
            "systemd",
            "demo",
            "-o",
            file.to_str().unwrap(),
            "--cluster",
            other.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let unit = std::fs::read_to_string(&file).unwrap();
    assert!(
        unit.contains(
            " supervise demo --hosts spark-3f21=192.168.1.41,spark-8c04=nvidia@192.168.1.42:2222\n"
        ),
        "{unit}"
    );
    assert!(!unit.contains("--cluster"), "{unit}");
    // `supervise` without them says which were kept.
    let out = spark_launch_within(&state, &["supervise", "demo", "--cluster", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("it was launched with --hosts: give them again (--hosts spark-3f21=192.168.1.41,spark-8c04=nvidia@192.168.1.42:2222)"),
        "{}",
        text(&out)
    );
    let verified = verify(&file, true, &runtime);
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "{}\n--- the unit\n{unit}",
        text(&verified)
    );
    // The entries are read back as --hosts reads them: one that is not a host is refused.
    std::fs::write(
        state.join("records/demo/hosts.json"),
        r#"{"hosts": ["spark-3f21=192.168.1.41; rm -rf ~"]}"#,
    )
    .unwrap();
    let out = spark_launch(&state, &["export", "systemd", "demo", "-o", "-"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("not the nodes spark-launch kept"),
        "{}",
        text(&out)
    );
}

#[test]
fn export_writes_over_no_file_it_did_not_write_and_never_through_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let state = kept_plan(tmp.path());
    let export = |path: &Path, force: bool| {
        let mut args = vec!["export", "systemd", "demo", "-o", path.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        spark_launch(&state, &args)
    };
    // A file of the user's: refused, untouched; --force replaces it.
    let theirs = tmp.path().join("notes.txt");
    std::fs::write(&theirs, "mine\n").unwrap();
    let out = export(&theirs, false);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("exists and spark-launch did not write it")
            && text(&out).contains("--force"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "mine\n");
    // Its own unit: written again.
    let unit = tmp.path().join("spark-launch-demo.service");
    assert!(export(&unit, false).status.success());
    let out = export(&unit, false);
    assert!(out.status.success(), "{}", text(&out));
    // A link: refused, the file it points at untouched; with --force the link itself is
    // replaced by the unit, never written through.
    let target = tmp.path().join("target.txt");
    std::fs::write(&target, "theirs\n").unwrap();
    let link = tmp.path().join("link.service");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = export(&link, false);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("is a link (never written through)"),
        "{}",
        text(&out)
    );
    let out = export(&link, true);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs\n");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.is_file(), "the link was replaced by the unit");
    assert!(
        std::fs::read_to_string(&link)
            .unwrap()
            .starts_with("# Written by spark-launch")
    );
    let out = export(&theirs, true);
    assert!(out.status.success(), "{}", text(&out));
    // A folder in its place: refused, even with --force.
    let dir = tmp.path().join("a-folder");
    std::fs::create_dir(&dir).unwrap();
    let out = export(&dir, true);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("is not a regular file"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_system_unit_whose_user_is_not_known_says_where_the_name_comes_from_and_how_to_give_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = kept_plan(tmp.path());
    let run = |envs: &[(&str, &str)], extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_spark-launch"));
        c.args(["export", "systemd", "demo", "--system", "-o", "-"])
            .args(extra)
            .env("SPARK_LAUNCH_STATE_DIR", &state)
            .env("SPARK_LAUNCH_NO_PROGRESS", "1")
            .env("SPARK_LAUNCH_CLUSTER", cluster_file(&state))
            .env_remove("USER")
            .env_remove("SUDO_USER");
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    // As root in a service or a container: neither variable set.
    let out = run(&[("USER", ""), ("SUDO_USER", "")], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("$SUDO_USER (set by sudo) and $USER are empty") && t.contains("--run-as NAME"),
        "{t}"
    );
    assert!(!t.contains("\"\" is not a user name"), "{t}");
    // A name from the environment that User= cannot take: where it came from.
    let out = run(&[("SUDO_USER", "a b")], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("(the name came from $SUDO_USER)"),
        "{}",
        text(&out)
    );
    // Given: used.
    let out = run(&[("USER", "")], &["--run-as", "sparkuser"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nUser=sparkuser\n"));
    let out = run(&[("SUDO_USER", "nvidia"), ("USER", "root")], &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nUser=nvidia\n"));
}
