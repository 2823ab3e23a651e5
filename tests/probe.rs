//! The emitter script and the reader agree: a snapshot read as a folder and the same snapshot
//! streamed by the emitter (the path remote probes take over SSH) give identical facts, under
//! the shells a node may have. And the live probe works on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::probe::{DirTree, MemTree, emit, read_facts};

fn fixture_nodes() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok())
    {
        let nodes = e.path().join("nodes");
        if let Ok(list) = std::fs::read_to_string(&nodes) {
            for n in list.lines().filter(|l| !l.is_empty()) {
                out.push(e.path().join(n));
            }
        }
    }
    assert!(
        out.len() >= 20,
        "expected the seed fixtures, found {}",
        out.len()
    );
    out
}

fn emit_with(shell: &[&str], root: &Path) -> String {
    let out = Command::new(shell[0])
        .args(&shell[1..])
        .arg("-c")
        .arg(emit::SCRIPT)
        .env("SL_ROOT", root)
        .output()
        .unwrap_or_else(|e| {
            panic!("{shell:?} must be installed (apt-get install dash busybox-static): {e}")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stream")
}

fn check_shell(shell: &[&str]) {
    for node in fixture_nodes() {
        let from_dir = read_facts(&DirTree::new(&node)).expect("dir reads");
        let stream = emit_with(shell, &node);
        let from_stream =
            read_facts(&MemTree::parse(&stream).expect("stream parses")).expect("stream reads");
        assert_eq!(from_dir, from_stream, "{shell:?} on {}", node.display());
    }
}

#[test]
fn the_emitter_under_dash_streams_every_fixture_exactly_as_the_folder_reads() {
    check_shell(&["dash"]);
}

#[test]
fn the_emitter_under_busybox_sh_streams_every_fixture_exactly_as_the_folder_reads() {
    check_shell(&["busybox", "sh"]);
}

#[test]
fn an_unreadable_gid_slot_is_an_empty_slot_in_both_readers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path();
    std::fs::write(base.join("hostname"), "n\n").unwrap();
    let port = base.join("sys/class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(port.join("gids")).unwrap();
    std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
    std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
    std::fs::write(
        port.join("gids/0"),
        "fe80:0000:0000:0000:0000:0000:0000:0001\n",
    )
    .unwrap();
    std::fs::write(port.join("gid_attrs/types/0"), "RoCE v2\n").unwrap();
    // Slot 1 is a folder: reading it fails like an unused sysfs slot does.
    std::fs::create_dir_all(port.join("gids/1")).unwrap();
    let a = read_facts(&DirTree::new(base)).unwrap();
    let b = read_facts(&MemTree::parse(&emit_with(&["sh"], base)).unwrap()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.rdma_devices[0].ports[0].gids.len(), 1);
}

#[test]
fn a_snapshot_without_the_nodes_own_nccl_reads_it_as_not_recorded_and_garbage_as_garbage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path();
    std::fs::write(base.join("hostname"), "n\n").unwrap();
    let facts = read_facts(&DirTree::new(base)).unwrap();
    assert_eq!(facts.host.nccl, None);
    std::fs::write(base.join("host-nccl.json"), "{not json").unwrap();
    let facts = read_facts(&DirTree::new(base)).unwrap();
    assert_eq!(facts.host.nccl, None);
    assert!(
        facts
            .read_warnings()
            .iter()
            .any(|w| w.starts_with("host-nccl.json: not what the probe writes there")),
        "{:?}",
        facts.read_warnings()
    );
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_spark-launch")
}

#[test]
fn the_live_probe_reads_this_machine() {
    let out = Command::new(bin())
        .args(["probe", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is only JSON");
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(v["hostname"], hostname.trim());
    let names: Vec<&str> = v["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"lo"), "{names:?}");
    let lo = v["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "lo")
        .unwrap();
    assert_eq!(lo["ipv4"][0]["addr"], "127.0.0.1");
}

#[test]
fn a_capture_reads_back_as_the_same_machine_and_refuses_a_non_empty_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snap");
    let out = Command::new(bin())
        .args(["probe", "--capture"])
        .arg(&dir)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("ip-addr.json").is_file());
    assert!(dir.join("hostname").is_file());
    let live = Command::new(bin())
        .args(["probe", "--json"])
        .output()
        .unwrap();
    let back = Command::new(bin())
        .args(["probe", "--json", "--root"])
        .arg(&dir)
        .output()
        .unwrap();
    let live: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back.stdout).unwrap();
    assert_eq!(live["hostname"], back["hostname"]);
    assert_eq!(
        live["interfaces"].as_array().map(|a| a.len()),
        back["interfaces"].as_array().map(|a| a.len())
    );
    assert_eq!(live["routes"], back["routes"]);
    // The capture records what it looked at: read back, a machine without
    // /dev/infiniband or the NVIDIA driver (this one, in CI) shows them absent, not unknown.
    assert!(dir.join("recorded").is_file());
    assert!(dir.join("dev/infiniband").is_dir());
    for key in ["infiniband_dev_nodes", "nvidia_driver", "nccl_conf"] {
        assert_eq!(live["host"][key], back["host"][key], "{key}");
        assert_ne!(back["host"][key], "not_recorded", "{key}: {back}");
    }
    // What this machine's own processes load for NCCL (`--runtime host`) is captured too, and
    // reads back as it was read live.
    assert!(dir.join("host-nccl.json").is_file());
    assert!(live["host"]["nccl"]["loader"].is_object(), "{live}");
    assert_eq!(live["host"]["nccl"], back["host"]["nccl"]);

    let again = Command::new(bin())
        .args(["probe", "--capture"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));
}

/// A copy of a healthy fixture snapshot, to make hostile.
fn copy_of_a_snapshot() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("snap");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed-001-two-sparks-both-twins/spark");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&dst)
            .status()
            .unwrap()
            .success()
    );
    (tmp, dst)
}

/// `spark-launch probe --root DIR`, killed (and failed) after 20 s: a hang is a failure.
fn probe_root(dir: &Path) -> std::process::Output {
    let mut child = Command::new(bin())
        .args(["probe", "--root"])
        .arg(dir)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("probe --root {} hangs", dir.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_fifo_in_a_snapshot_is_refused_without_hanging() {
    // Seen once: a FIFO hung `probe`.
    let (_tmp, snap) = copy_of_a_snapshot();
    std::fs::remove_file(snap.join("sys/class/net/enp1s0f1np1/mtu")).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(snap.join("sys/class/net/enp1s0f1np1/mtu"))
            .status()
            .unwrap()
            .success()
    );
    let out = probe_root(&snap);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("sys/class/net/enp1s0f1np1/mtu: not a regular file"),
        "{err}"
    );
}

#[test]
fn a_snapshot_file_that_is_dev_urandom_or_huge_is_refused_within_bounded_memory() {
    // Seen once: a snapshot file that is /dev/urandom grew memory without bound.
    let (_tmp, snap) = copy_of_a_snapshot();
    std::fs::remove_file(snap.join("proc/meminfo")).unwrap();
    std::os::unix::fs::symlink("/dev/urandom", snap.join("proc/meminfo")).unwrap();
    let out = probe_root(&snap);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("proc/meminfo"),
        "{}",
        stderr_of(&out)
    );
    // A sparse 200 GB file: refused by its size, never read.
    let (_tmp, snap) = copy_of_a_snapshot();
    let f = std::fs::File::create(snap.join("ip-addr.json")).unwrap();
    f.set_len(200 << 30).unwrap();
    let out = probe_root(&snap);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("ip-addr.json: 214748364800 bytes, more than"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_symlink_out_of_the_snapshot_is_never_followed() {
    // Seen once: a snapshot's `etc/nccl.conf -> /etc/shadow` printed the host's file.
    let (tmp, snap) = copy_of_a_snapshot();
    let outside = tmp.path().join("private");
    std::fs::write(&outside, "NCCL_SECRET_MARKER=do-not-print\n").unwrap();
    std::fs::create_dir_all(snap.join("etc")).unwrap();
    std::os::unix::fs::symlink(&outside, snap.join("etc/nccl.conf")).unwrap();
    let out = probe_root(&snap);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("etc/nccl.conf: a symlink to"),
        "{}",
        stderr_of(&out)
    );
    for o in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(o).contains("do-not-print"));
    }
    // Doctor, which prints /etc/nccl.conf, refuses the snapshot the same way.
    let out = Command::new(bin())
        .args(["doctor", "--snapshot"])
        .arg(format!("a={}", snap.display()))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("do-not-print"));
    // A symlink that stays inside the snapshot is fine.
    std::fs::remove_file(snap.join("etc/nccl.conf")).unwrap();
    std::fs::write(snap.join("etc/real.conf"), "NCCL_DEBUG=WARN\n").unwrap();
    std::os::unix::fs::symlink("real.conf", snap.join("etc/nccl.conf")).unwrap();
    let out = probe_root(&snap);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}

#[test]
fn a_snapshot_given_as_a_file_is_named_as_not_a_folder() {
    // Seen once: `--snapshot a=/etc/passwd` said "does not exist".
    let out = Command::new(bin())
        .args(["env", "--snapshot", "a=/etc/passwd"])
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(err.contains("/etc/passwd is not a folder"), "{err}");
    assert!(!err.contains("does not exist"), "{err}");
}

#[test]
fn a_busy_read_only_command_ends_at_once_on_the_first_signal_and_names_no_launch() {
    // Seen once: `probe` and `env` busy probing ignored the first SIGTERM/Ctrl-C, and
    // the second said "check with `spark-launch status`". Here the machine's `ip` is a
    // stand-in that says it started, then takes 20 s (a slow or hung `ip`).
    use nix::sys::signal::{Signal, kill};
    // `--hosts` naming this machine: `env` probes it locally, without SSH.
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let me = me.trim();
    for (args, signal) in [
        (&["probe"][..], Signal::SIGTERM),
        (&["env", "--json", "--hosts", me][..], Signal::SIGINT),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let busy = dir.path().join("busy");
        let ip = dir.path().join("ip");
        std::fs::write(&ip, "#!/bin/sh\n: > \"$SL_BUSY\"\nexec sleep 20\n").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&ip, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap()
        );
        let child = Command::new(bin())
            .args(args)
            .env("PATH", path)
            .env("SL_BUSY", &busy)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env_remove("SPARK_LAUNCH_CLUSTER")
            .env("SPARK_LAUNCH_NO_PROGRESS", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while !busy.exists() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "{args:?} never ran ip"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let signalled = std::time::Instant::now();
        kill(pid, signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let took = signalled.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            took < std::time::Duration::from_secs(3),
            "{args:?} took {took:?} after {signal}: {err}"
        );
        assert_eq!(out.status.code(), Some(130), "{args:?}: {err}");
        assert!(err.contains("interrupted"), "{args:?}: {err}");
        assert!(
            !err.contains("status") && !err.contains("clean-up"),
            "{args:?}: {err}"
        );
    }
}

/// A folder of links to this machine's tools, `ip` left out: the PATH of a minimal GPU VM image
///.
fn path_without_ip() -> tempfile::TempDir {
    let bin = tempfile::tempdir().unwrap();
    for tool in [
        "sh", "cat", "sed", "uname", "mktemp", "id", "grep", "sleep", "rm", "ping",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
        assert!(!path.is_empty(), "{tool} must be installed");
        std::os::unix::fs::symlink(&path, bin.path().join(tool)).unwrap();
    }
    bin
}

#[test]
fn a_capture_without_ip_records_no_addresses_and_every_reader_says_so() {
    let tools = path_without_ip();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("snap");
    let out = Command::new(bin())
        .args(["probe", "--capture"])
        .arg(&dir)
        .env("PATH", tools.path())
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    // The capture claims nothing it did not record.
    let recorded = std::fs::read_to_string(dir.join("recorded")).unwrap();
    assert!(
        !recorded.lines().any(|l| l.starts_with("ip-")),
        "{recorded}"
    );
    assert!(recorded.lines().any(|l| l == "sys/class/net"), "{recorded}");
    assert!(!dir.join("ip-addr.json").exists());
    assert!(!dir.join("links/probe").exists(), "no cabling without ip");

    let json = Command::new(bin())
        .args(["probe", "--json", "--root"])
        .arg(&dir)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        v["ip_recorded"],
        serde_json::json!({"addresses": false, "routes": false})
    );
    let text = probe_root(&dir);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("warning: its IPv4 addresses and routes were not recorded")
            && text.contains("install iproute2"),
        "{text}"
    );

    // env refuses (nothing can be derived from unknown addresses), naming why and the fix.
    let env = Command::new(bin())
        .args(["env", "--snapshot"])
        .arg(format!("here={}", dir.display()))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert_eq!(env.status.code(), Some(2), "{}", stderr_of(&env));
    assert!(
        stderr_of(&env).contains("addresses and routes were not recorded"),
        "{}",
        stderr_of(&env)
    );
    // doctor skips the address checks on it, saying why, rather than judging "no address".
    let doctor = Command::new(bin())
        .args(["doctor", "--json", "--snapshot"])
        .arg(format!("here={}", dir.display()))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    let d: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let checks = d["checks"].as_array().expect("checks");
    for id in ["fabric.subnet-overlap", "fabric.control-plane"] {
        let c = checks.iter().find(|c| c["id"] == id).expect(id);
        assert_eq!(c["status"], "skipped", "{id}: {c}");
        assert!(c.to_string().contains("not recorded"), "{id}: {c}");
    }
}

#[test]
fn an_out_of_range_field_in_ip_json_is_named_and_the_rest_of_the_entry_kept() {
    // Seen once: `"mtu": 4294967296` on the fabric entry dropped its addresses, and
    // env moved the control plane to the management interface.
    let tmp = tempfile::tempdir().unwrap();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-001-two-sparks-both-twins");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(tmp.path().join("pair"))
            .status()
            .unwrap()
            .success()
    );
    let head = tmp.path().join("pair/spark");
    let file = head.join("ip-addr.json");
    let mut entries: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let k = entries
        .iter()
        .position(|e| e["ifname"] == "enp1s0f1np1")
        .unwrap();
    entries[k]["mtu"] = serde_json::json!(4294967296u64);
    std::fs::write(&file, serde_json::to_string(&entries).unwrap()).unwrap();

    let facts = read_facts(&DirTree::new(&head)).unwrap();
    let fabric = facts
        .interfaces
        .iter()
        .find(|i| i.name.as_str() == "enp1s0f1np1")
        .unwrap();
    assert_eq!(fabric.ipv4[0].to_string(), "192.168.177.11/24");
    let named = format!("ip-addr.json: .[{k}].mtu (enp1s0f1np1)");
    assert_eq!(facts.unparsed_at(&named), Some("4294967296"));

    let env = Command::new(bin())
        .args(["env", "--json"])
        .arg("--snapshot")
        .arg(format!("spark={}", head.display()))
        .arg("--snapshot")
        .arg(format!(
            "spark2={}",
            tmp.path().join("pair/spark2").display()
        ))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert!(env.status.success(), "{}", stderr_of(&env));
    let v: serde_json::Value = serde_json::from_slice(&env.stdout).unwrap();
    assert_eq!(
        v["nodes"]["spark"]["env"]["NCCL_SOCKET_IFNAME"],
        "enp1s0f1np1"
    );
    let warnings = v["nodes"]["spark"]["warnings"].to_string();
    assert!(
        warnings.contains(&named) && warnings.contains("4294967296"),
        "{warnings}"
    );
    let text = probe_root(&head);
    assert!(String::from_utf8_lossy(&text.stdout).contains(&named));
}
