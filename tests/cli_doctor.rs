//! `spark-launch doctor` as a user runs it: on snapshots (facts only), on this machine (the
//! live checks run for real: ports, Docker, a test container), on saved logs; exit codes,
//! JSON purity, `--fix-hints-only`, `--check`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

mod support;
use support::fixtures;
use support::fixtures::snapshot_args;

/// A fixture log: `logs/NAME` or `nccl-tests/NAME` under tests/fixtures.
fn log(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// Runs the binary with its own cache folder: a live run reads the NCCL of `--image` and
/// caches it, never in the user's `~/.cache`.
fn run<S: AsRef<str>>(args: &[S]) -> Output {
    let cache = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args.iter().map(|a| a.as_ref()))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CACHE_HOME", cache.path())
        .output()
        .unwrap()
}

fn args(prefix: &[&str], fixture: &str) -> Vec<String> {
    let mut a: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    a.extend(snapshot_args(fixture));
    a
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not pure JSON ({e}): {}", describe(o)))
}

fn check<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {v}"))
}

#[test]
fn a_healthy_snapshot_pair_exits_0_with_pure_json() {
    let out = run(&args(
        &["doctor", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["nodes"], serde_json::json!(["spark", "spark2"]));
    assert_eq!(v["summary"]["fail"], 0);
    assert_eq!(check(&v, "reach.ssh")["status"], "skipped");
    assert_eq!(check(&v, "fabric.twins-active")["nodes"]["spark2"], "ok");
}

#[test]
fn a_broken_snapshot_exits_1_and_prints_the_problem_with_its_fix() {
    let out = run(&args(&["doctor"], "broken-mtu-mismatch"));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAIL fabric.mtu-mismatch on spark2"),
        "{text}"
    );
    assert!(
        text.contains("$ sudo ip link set dev enp1s0f1np1 mtu 9000"),
        "{text}"
    );
    // A refused layout is a doctor finding (exit 1), not invalid input (exit 2).
    let out = run(&args(&["doctor"], "broken-twins-one-subnet"));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
}

#[test]
fn fix_hints_only_prints_the_commands_grouped_by_node() {
    let out = run(&args(
        &["doctor", "--fix-hints-only"],
        "broken-mtu-mismatch",
    ));
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text.find("# on spark2").expect("a section for spark2");
    assert!(
        text[start..].contains("\nsudo ip link set dev enp1s0f1np1 mtu 9000\n"),
        "{text}"
    );
    assert!(!text.contains("what:"), "{text}");
}

#[test]
fn check_selects_categories_and_ids_and_an_unknown_one_is_invalid_input() {
    let out = run(&args(
        &[
            "doctor",
            "--json",
            "--check",
            "host.kernel",
            "--check",
            "reach",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let ids: Vec<String> = json(&out)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ids,
        vec!["reach.ssh", "reach.fabric", "reach.ports", "host.kernel"]
    );
    let out = run(&args(
        &["doctor", "--check", "fabrik"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no check matches fabrik; checks are: fabric.rdma-active"),
        "{err}"
    );
}

#[test]
fn a_log_alone_is_analysed_without_touching_any_machine() {
    let out = run(&[
        "doctor",
        "--json",
        "--log",
        &log("nccl-tests/all_reduce_2rank_net_socket.log"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    assert!(v["checks"].as_array().unwrap().is_empty());
    let socket = &v["logs"][0]["results"][0];
    assert_eq!(socket["id"], "lastrun.net-socket");
    assert_eq!(socket["status"], "fail");
    let out = run(&[
        "doctor",
        "--log",
        &log("nccl-tests/all_gather_2spark_both_twins.log"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let out = run(&["doctor", "--log", "/nonexistent.log"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn logs_and_snapshots_together_report_both() {
    let mut a = args(&["doctor", "--log"], "seed-001-two-sparks-both-twins");
    a.insert(2, log("logs/torch-diststoreerror-store.log"));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fabric.twins-active"), "{text}");
    assert!(text.contains("FAIL lastrun.rendezvous"), "{text}");
    assert!(
        text.contains("the rendezvous timed out: only 1 of 2 ranks joined"),
        "{text}"
    );
}

#[test]
fn on_this_machine_a_port_in_use_fails_reach_ports_for_real() {
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let out = run(&[
        "doctor",
        "--json",
        "--check",
        "reach.ports",
        "--port",
        &port,
    ]);
    let v = json(&out);
    let c = check(&v, "reach.ports");
    let mine: Vec<&serde_json::Value> = c["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["problem"]
                .as_str()
                .unwrap()
                .starts_with(&format!("port {port} "))
        })
        .collect();
    assert_eq!(mine.len(), 1, "{}", describe(&out));
    assert_eq!(mine[0]["severity"], "fail");
    drop(listener);
    let out = run(&[
        "doctor",
        "--json",
        "--check",
        "reach.ports",
        "--port",
        &port,
    ]);
    let v = json(&out);
    assert!(
        !check(&v, "reach.ports")["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["problem"]
                .as_str()
                .unwrap()
                .starts_with(&format!("port {port} "))),
        "{}",
        describe(&out)
    );
}

/// A tiny image made here (busybox), removed when dropped.
struct Image(String);

impl Image {
    fn build() -> Image {
        let tag = format!("sl6-{}-doctor:test", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect(
            "busybox-static must be installed (apt-get install busybox-static): the test image is built from it",
        );
        for applet in ["sh", "cat"] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
        std::fs::write(root.join("etc/nccl.conf"), "NCCL_DEBUG=WARN\n").unwrap();
        let tar = dir.path().join("rootfs.tar");
        let ok = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap()
            .success();
        assert!(ok, "tar failed");
        let out = Command::new("docker")
            .args(["import", "--change", "CMD [\"/bin/sh\"]"])
            .arg(&tar)
            .arg(&tag)
            .output()
            .expect("docker must be installed");
        assert!(
            out.status.success(),
            "docker import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Image(tag)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["image", "rm", "-f", &self.0])
            .output();
    }
}

fn docker_ps_doctor_containers() -> String {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=dev.spark-launch.job=doctor",
            "-q",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn on_this_machine_docker_the_image_and_a_test_container_are_checked_for_real() {
    let image = Image::build();
    let before = docker_ps_doctor_containers();
    // A home and a cache folder of the test's own: what the run caches (the image's NCCL)
    // goes to the cache folder, and nothing into the home (a user's `~/.cache`).
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("HOME", home.path().join("home"))
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .args([
            "doctor",
            "--json",
            "--image",
            &image.0,
            "--check",
            "host.docker",
            "--check",
            "host.container-memlock",
            "--check",
            "host.disk",
            "--check",
            "host.nccl-conf",
            "--check",
            "cluster.image-digest",
        ])
        .output()
        .unwrap();
    assert!(
        !home.path().join("home").exists(),
        "the run wrote into its HOME"
    );
    let cached = std::fs::read_dir(home.path().join("cache/spark-launch/libnccl"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(
        cached, 1,
        "the image's NCCL read, cached in the test's own folder"
    );
    let v = json(&out);
    assert_eq!(
        check(&v, "host.docker")["status"],
        "ok",
        "{}",
        describe(&out)
    );
    assert_eq!(
        check(&v, "cluster.image-digest")["status"],
        "ok",
        "{}",
        describe(&out)
    );
    assert_eq!(check(&v, "host.disk")["status"], "ok", "{}", describe(&out));
    // This machine's dockerd cannot raise RLIMIT_MEMLOCK (no CAP_SYS_RESOURCE): the test
    // container started like every spark-launch GPU container does not start, and doctor
    // says so with the reason; on a machine whose dockerd can, it reads `unlimited`.
    let memlock = check(&v, "host.container-memlock");
    let findings = memlock["findings"].as_array().unwrap();
    if memlock["status"] == "fail" {
        let p = findings[0]["problem"].as_str().unwrap();
        assert!(
            p.starts_with("a test container with `--ulimit memlock=-1` does not start"),
            "{p}"
        );
        assert!(p.contains("rlimit"), "{p}");
        assert!(
            findings[0]["fix"]["text"]
                .as_str()
                .unwrap()
                .contains("CAP_SYS_RESOURCE")
        );
    } else {
        assert_eq!(memlock["status"], "ok", "{}", describe(&out));
        let conf = check(&v, "host.nccl-conf");
        assert_eq!(
            conf["status"], "warn",
            "the image's /etc/nccl.conf is reported: {conf}"
        );
    }
    // The test container is gone (`--rm`), also when it could not start.
    assert_eq!(docker_ps_doctor_containers(), before);
}

#[test]
fn a_snapshot_run_never_starts_anything_even_with_an_image() {
    let out = run(&args(
        &["doctor", "--json", "--image", "nonexistent:none"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        check(&json(&out), "host.container-memlock")["status"],
        "skipped"
    );
}

#[test]
fn doctor_on_healthy_snapshots_without_dev_and_the_driver_skips_what_it_never_saw() {
    // Seen once: two healthy Sparks captured without `dev/` and `sys/module/nvidia` got
    // `FAIL host.infiniband-dev` and `FAIL host.nvidia-driver` on both nodes, exit 1.
    let (_tmp, snaps) = fixtures::edited("seed-001-two-sparks-both-twins", fixtures::older_capture);
    let mut a = vec!["doctor".to_string(), "--json".to_string()];
    a.extend(snaps.clone());
    let out = run(&a);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json(&out);
    for id in [
        "host.infiniband-dev",
        "host.nvidia-driver",
        "host.nccl-conf",
    ] {
        for node in ["spark", "spark2"] {
            assert_eq!(
                check(&v, id)["nodes"][node],
                "skipped",
                "{id} on {node}: {v}"
            );
        }
    }
    // The text says what to capture.
    let mut a = vec!["doctor".to_string()];
    a.extend(snaps);
    let text = String::from_utf8_lossy(&run(&a).stdout).into_owned();
    assert!(
        text.contains("does not record /dev/infiniband")
            && text.contains("spark-launch probe --capture"),
        "{text}"
    );
    // Observed absent is still a failure: an empty dev/infiniband folder and a capture that
    // says it looked for the driver.
    let (_tmp, snaps) = fixtures::edited("seed-001-two-sparks-both-twins", |node| {
        std::fs::remove_dir_all(node.join("dev/infiniband")).unwrap();
        std::fs::create_dir_all(node.join("dev/infiniband")).unwrap();
        std::fs::remove_dir_all(node.join("sys/module/nvidia")).unwrap();
    });
    let mut a = vec!["doctor".to_string(), "--json".to_string()];
    a.extend(snaps);
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(check(&v, "host.infiniband-dev")["nodes"]["spark"], "fail");
    assert_eq!(check(&v, "host.nvidia-driver")["nodes"]["spark2"], "fail");
}

/// Renames `from` to `to` in every file name and file of a snapshot folder.
fn rename_everywhere(dir: &Path, from: &str, to: &str) {
    let mut stack = vec![dir.to_path_buf()];
    let mut paths = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                std::fs::write(&p, text.replace(from, to)).unwrap();
            }
            paths.push(p);
        }
    }
    // Deepest first, so a folder is renamed after what is inside it.
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.contains(from) {
            std::fs::rename(&p, p.with_file_name(name.replace(from, to))).unwrap();
        }
    }
}

#[test]
fn garbage_bytes_from_sysfs_and_logs_are_never_echoed_raw_into_findings_and_fix_commands() {
    // Seen once: control characters from sysfs and logs reached the terminal,
    // and a hostile name reached a paste-ready fix command as shell syntax.
    let (_tmp, snaps) = fixtures::edited("broken-mtu-mismatch", |node| {
        if node.ends_with("spark2") {
            rename_everywhere(node, "enp1s0f1np1", "enp1s0f1np1;reboot");
            std::fs::write(node.join("hostname"), "spark2\u{1b}]0;owned\u{7}\n").unwrap();
            std::fs::create_dir_all(node.join("etc")).unwrap();
            std::fs::write(node.join("etc/nccl.conf"), "NCCL_DEBUG=WARN\u{1b}[2J\n").unwrap();
        }
    });
    let log = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        log.path(),
        "torch.distributed.DistStoreError: \u{1b}[31mTimed out after 601 seconds waiting for clients. 1/2 clients joined.\u{1b}[0m\n",
    )
    .unwrap();
    let mut a = vec!["doctor".to_string()];
    a.extend(snaps);
    a.push("--log".into());
    a.push(log.path().display().to_string());
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    for (what, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let bad: Vec<u8> = bytes
            .iter()
            .copied()
            .filter(|b| b.is_ascii_control() && *b != b'\n' && *b != b'\t')
            .collect();
        assert!(
            bad.is_empty(),
            "{what} carries raw control bytes {bad:?}:\n{}",
            describe(&out)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("$ sudo ip link set dev 'enp1s0f1np1;reboot' mtu 9000"),
        "{text}"
    );
    assert!(
        text.contains("\\u{1b}"),
        "escaped, so the user sees it: {text}"
    );
}

#[test]
fn a_nonsense_gid_is_not_blamed_on_a_missing_ipv4_address_that_is_there() {
    // Seen once: a GID slot holding garbage made roce-gid say the address had
    // no GID, with a fix that re-applies an address that is there.
    let (_tmp, snaps) = fixtures::edited("seed-001-two-sparks-both-twins", |node| {
        if node.ends_with("spark") {
            std::fs::write(
                node.join("sys/class/infiniband/rocep1s0f1/ports/1/gids/3"),
                "zz:not-a-gid\n",
            )
            .unwrap();
        }
    });
    let mut a = vec![
        "doctor".to_string(),
        "--check".to_string(),
        "fabric.roce-gid".to_string(),
    ];
    a.extend(snaps);
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "rocep1s0f1's GID table holds entries that are not GIDs (index 3: `zz:not-a-gid`)"
        ),
        "{text}"
    );
    assert!(!text.contains("has no RoCE v2 GID for"), "{text}");
    assert!(!text.contains("sudo ip addr del"), "{text}");
}

#[test]
fn a_garbage_mtu_no_longer_passes_fabric_mtu_mismatch() {
    // Seen once: an MTU of `abc` was skipped, and the check passed.
    let (_tmp, snaps) = fixtures::edited("seed-001-two-sparks-both-twins", |node| {
        if node.ends_with("spark2") {
            std::fs::write(node.join("sys/class/net/enp1s0f1np1/mtu"), "abc\n").unwrap();
        }
    });
    let mut a = vec![
        "doctor".to_string(),
        "--json".to_string(),
        "--check".to_string(),
        "fabric.mtu-mismatch".to_string(),
    ];
    a.extend(snaps);
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(
        check(&v, "fabric.mtu-mismatch")["nodes"]["spark2"],
        "fail",
        "{v}"
    );
    assert!(
        v.to_string()
            .contains("the MTU of enp1s0f1np1 reads `abc`, not a number"),
        "{v}"
    );
}

#[test]
fn doctor_help_names_every_port_the_engines_bind_by_default() {
    let help = run(&["doctor", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    for port in spark_launch::workload::engines::default_ports() {
        assert!(
            text.contains(&port.first.to_string()),
            "doctor --help does not name {} ({}): {text}",
            port.first,
            port.what
        );
    }
}
