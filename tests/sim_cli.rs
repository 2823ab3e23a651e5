//! `spark-launch sim` as a new user runs it in a root shell: `sim up --nodes 2` builds a
//! simulated cluster on this machine (namespaces with their own sshd and Docker Engine, the
//! stand-in engine image, the stand-in Hub), `up smoke-test` runs against its cluster file as
//! against Sparks until it serves a token, `bench` measures it briefly, spark-launch's own
//! SGLang recipe (`recipes/`) starts beside it, and `sim down` leaves
//! no namespace, process, folder or image of it. Without root, or without a Docker Engine,
//! `sim up` refuses with the fix and makes nothing.
//!
//! Each test names its sim after its process (`t<pid>`), so it never meets a user's `sim`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = "/var/tmp/spark-launch-sim";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_spark-launch")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A sim name of this test process.
fn sim_name(tag: &str) -> String {
    format!("t{tag}{:x}", std::process::id() % 0xfffff)
}

/// `spark-launch ARGS` as root, progress plain, no user config or cluster file in the way.
fn sl(args: &[&str], env: &[(&str, &str)], home: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .env_remove("HF_ENDPOINT")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Every pid in the sim's network namespaces, with its start time (so a reused pid is not
/// taken for a survivor).
fn processes_of(prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ns in names_in(Path::new("/run/netns")) {
        if !ns.starts_with(prefix) {
            continue;
        }
        let pids = Command::new("ip")
            .args(["netns", "pids", &ns])
            .output()
            .unwrap();
        for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
            if let Some(start) = start_time(pid) {
                out.push((pid.to_string(), start));
            }
        }
    }
    out
}

/// When the process `pid` started, while it runs (an exited process not yet reaped, a zombie,
/// has none).
fn start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields 3 (the state) and 22, counted after the command's closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19).map(|s| s.to_string())
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the sim should the test fail half-way (the command under test, then a check).
struct Guard(String);

impl Drop for Guard {
    fn drop(&mut self) {
        let home = std::env::temp_dir();
        let _ = sl(&["sim", "down", "--name", &self.0], &[], &home);
    }
}

#[test]
fn a_new_user_makes_a_sim_launches_the_smoke_test_and_a_recipe_on_it_benches_it_and_sim_down_leaves_nothing()
 {
    let name = sim_name("");
    let prefix = format!("{name}-");
    let home = tempfile::tempdir().unwrap();
    let _guard = Guard(name.clone());

    // What it would make, as JSON; nothing made yet.
    let planned = sl(
        &[
            "sim",
            "up",
            "--nodes",
            "2",
            "--name",
            &name,
            "--dry-run",
            "--json",
        ],
        &[],
        home.path(),
    );
    assert_eq!(planned.status.code(), Some(0), "{}", text(&planned));
    let plan: serde_json::Value = serde_json::from_slice(&planned.stdout).unwrap();
    let plan = &plan["plan"];
    assert_eq!(plan["nodes"].as_array().unwrap().len(), 2);
    assert!(!Path::new(ROOT).join(&name).exists());
    let images: Vec<&str> = plan["image"]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert!(
        images.contains(&"nvcr.io/nvidia/vllm:26.04-py3"),
        "{images:?}"
    );

    // Made: what it says is what it made (another sim may have taken the network the dry run
    // chose since).
    let up = sl(
        &["sim", "up", "--nodes", "2", "--name", &name, "--json"],
        &[],
        home.path(),
    );
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let made: serde_json::Value = serde_json::from_slice(&up.stdout).unwrap();
    let plan = &made["plan"];
    let shown = made["next"].to_string();
    let cluster = PathBuf::from(plan["cluster_file"].as_str().unwrap());
    assert!(cluster.is_file(), "{shown}");
    assert!(
        shown.contains(&format!(
            "export SPARK_LAUNCH_CLUSTER={} HF_ENDPOINT=",
            cluster.display()
        )),
        "{shown}"
    );
    let hub = plan["hub"]["url"].as_str().unwrap().to_string();
    let flags: Vec<String> = plan["launch_flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    let status = sl(&["sim", "status", "--json"], &[], home.path());
    let listed: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        listed["sims"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == name.as_str() && s["state"] == "up"),
        "{listed}"
    );

    // The smoke test, as against Sparks: the launch returns once a token came back.
    let c = cluster.display().to_string();
    let mut args = vec![
        "--cluster",
        &c,
        "up",
        "smoke-test",
        "-d",
        "--timeout",
        "300",
    ];
    args.extend(flags.iter().map(String::as_str));
    let launched = sl(&args, &[("HF_ENDPOINT", &hub)], home.path());
    assert_eq!(launched.status.code(), Some(0), "{}", text(&launched));
    let said = text(&launched);
    assert!(said.contains("first token"), "{said}");
    assert!(
        said.contains("serves Qwen/Qwen2.5-0.5B-Instruct (job smoke-test"),
        "{said}"
    );

    // bench, briefly: every request finished with tokens.
    let bench = sl(
        &[
            "--cluster",
            &c,
            "bench",
            "smoke-test",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--json",
        ],
        &[],
        home.path(),
    );
    assert_eq!(bench.status.code(), Some(0), "{}", text(&bench));
    let report: serde_json::Value = serde_json::from_slice(&bench.stdout).unwrap();
    let level = &report["report"]["levels"][0];
    assert_eq!(level["failed"], 0, "{report}");
    assert!(
        level["output_tokens_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );

    // spark-launch's own SGLang recipe (recipes/), from the registry folder of the clone, on
    // the same nodes beside the smoke test.
    let registry = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes");
    let registry = registry.display().to_string();
    let mut args = vec![
        "--cluster",
        &c,
        "up",
        "qwen2.5-0.5b-sglang-v2",
        "--registry",
        &registry,
        "-d",
        "--timeout",
        "300",
    ];
    args.extend(flags.iter().map(String::as_str));
    let recipe = sl(&args, &[("HF_ENDPOINT", &hub)], home.path());
    assert_eq!(recipe.status.code(), Some(0), "{}", text(&recipe));
    assert!(text(&recipe).contains("first token"), "{}", text(&recipe));

    // Down: nothing of it is left.
    let before = processes_of(&prefix);
    assert!(
        before.len() >= 6,
        "sshd, dockerd, containerd and the Hub: {before:?}"
    );
    let down = sl(&["sim", "down", "--name", &name], &[], home.path());
    assert_eq!(down.status.code(), Some(0), "{}", text(&down));
    let namespaces: Vec<String> = names_in(Path::new("/run/netns"))
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(namespaces.is_empty(), "{namespaces:?}");
    assert!(
        !names_in(Path::new("/sys/class/net")).contains(&format!("{prefix}h")),
        "this machine's link is left"
    );
    let survivors: Vec<&(String, String)> = before
        .iter()
        .filter(|(pid, start)| start_time(pid).as_ref() == Some(start))
        .collect();
    let named: Vec<String> = survivors
        .iter()
        .map(|(pid, _)| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            )
        })
        .collect();
    assert!(named.is_empty(), "still running: {named:#?}");
    for left in [
        Path::new(ROOT).join(&name),
        Path::new(ROOT).join("nodes").join(&prefix),
        cluster.clone(),
    ] {
        assert!(!left.exists(), "{} is left", left.display());
    }
    // The images lived in the nodes' engines (gone with their folders); this machine's own
    // engine never had one.
    let host_images = Command::new("docker")
        .args(["images", "-q", "spark-launch-sim/standin"])
        .output();
    if let Ok(o) = host_images
        && o.status.success()
    {
        assert!(String::from_utf8_lossy(&o.stdout).trim().is_empty());
    }
}

/// A folder on `PATH` with every program `sim up` looks for there, except `skip`.
fn path_without(skip: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for p in [
        "dockerd",
        "containerd",
        "docker",
        "ip",
        "nsenter",
        "unshare",
        "setpriv",
        "setsid",
        "perl",
        "ssh",
        "ssh-keygen",
        "curl",
        "base64",
    ] {
        if skip.contains(&p) {
            continue;
        }
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .unwrap();
        let at = String::from_utf8_lossy(&found.stdout).trim().to_string();
        assert!(!at.is_empty(), "{p} is not installed here");
        std::os::unix::fs::symlink(at, dir.path().join(p)).unwrap();
    }
    dir
}

#[test]
fn sim_up_without_root_or_without_a_docker_engine_is_refused_with_the_fix_and_makes_nothing() {
    let name = sim_name("r");
    let home = tempfile::tempdir().unwrap();
    // Not root: the same binary as nobody.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(bin())
        .args(["sim", "up", "--name", &name])
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs root"), "{err}");
    assert!(
        err.contains("fix: run it in a root shell: sudo spark-launch sim up"),
        "{err}"
    );

    // Root, but no Docker Engine on PATH.
    let path = path_without(&["dockerd", "containerd", "docker"]);
    let out = sl(
        &["sim", "up", "--name", &name],
        &[("PATH", path.path().to_str().unwrap())],
        home.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no Docker Engine on this machine (dockerd, containerd, docker not found)"),
        "{err}"
    );
    assert!(
        err.contains("fix: install it: sudo apt-get install docker.io"),
        "{err}"
    );
    assert!(!err.contains("missing on this machine"), "{err}");
    assert!(!Path::new(ROOT).join(&name).exists());
    assert!(
        !names_in(Path::new("/run/netns"))
            .iter()
            .any(|n| n.starts_with(&format!("{name}-")))
    );
}

#[test]
fn ctrl_c_during_sim_up_removes_the_half_made_sim() {
    let name = sim_name("c");
    let prefix = format!("{name}-");
    let home = tempfile::tempdir().unwrap();
    let _guard = Guard(name.clone());
    let child = Command::new(bin())
        .args(["sim", "up", "--name", &name])
        .env("HOME", home.path())
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupted once its nodes exist.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !names_in(Path::new("/run/netns")).contains(&format!("{prefix}n2")) {
        assert!(std::time::Instant::now() < deadline, "no node came up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("what was made of the sim is removed"),
        "{}",
        text(&out)
    );
    assert!(
        !names_in(Path::new("/run/netns"))
            .iter()
            .any(|n| n.starts_with(&prefix))
    );
    assert!(!names_in(Path::new("/sys/class/net")).contains(&format!("{prefix}h")));
    assert!(!Path::new(ROOT).join(&name).exists());
    assert!(!Path::new(ROOT).join("nodes").join(&prefix).exists());
}
