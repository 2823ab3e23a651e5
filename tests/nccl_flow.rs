//! `spark-launch nccl-test` end to end on simulated nodes (tests/harness/simnet with sshd and a
//! dockerd per node), with the CPU stand-in for the nccl-tests image
//! (tests/harness/nccl-standin: Debian with Open MPI and openssh, spark-launch's own
//! sl-entrypoint, and "nccl-tests" binaries that report where each rank runs, then print a
//! real captured nccl-tests log). Everything but the GPU is real: spark-launch runs inside the
//! head as the test user, probes both nodes over SSH, derives their environment, pushes the
//! image to the worker, starts a container per node whose sshd listens on the node's fabric
//! address on port 2233 with the node's own host key, writes the hostfile, runs mpirun across
//! the containers, parses the output, and stops everything.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use support::docker::{containers_named, hosts_arg, trust_from};
use support::{SimNet, USER, describe, stderr, stdout};

/// Limits this machine lets containers have (no CAP_SYS_RESOURCE here; see tests/harness/README.md).
const ULIMITS: [&str; 4] = ["--ulimit", "memlock=8388608", "--ulimit", "nofile=16384"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds (or finds, by content hash) the stand-in image on this machine's engine.
fn standin_image() -> String {
    let out = Command::new("bash")
        .arg(repo().join("tests/harness/nccl-standin"))
        .arg("build")
        .output()
        .expect("run tests/harness/nccl-standin");
    assert!(
        out.status.success(),
        "the nccl-tests stand-in image could not be built (needs debootstrap, docker and the Debian mirror):\n{}",
        describe(&out)
    );
    stdout(&out).trim().to_string()
}

/// `docker save TAG | docker -H NODE load`: the image on the head's engine only; the job's
/// EnsureImage step pushes it to the others.
fn load_on(net: &SimNet, i: usize, tag: &str) {
    let mut save = Command::new("docker")
        .args(["save", tag])
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker save");
    let status = Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", net.docker_socket(i).display()),
            "load",
        ])
        .stdin(save.stdout.take().expect("docker save's stdout"))
        .stdout(Stdio::null())
        .status()
        .expect("docker load");
    assert!(
        save.wait().unwrap().success() && status.success(),
        "loading {tag} on n{i}"
    );
}

/// `spark-launch ARGS` inside the head as the test user, on every node (`--hosts`), with the
/// stand-in image, no GPUs and this machine's limits. Nothing of the user's `~/.ssh` or the
/// nodes' host keys reaches the containers: mpirun between them uses the job's own keys.
fn nccl_test(net: &SimNet, image: &str, args: &[&str]) -> Output {
    let hosts = hosts_arg(net);
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend(
        [
            "--hosts", &hosts, "--image", image, "--gpus", "none", "--job", "sl5flow",
        ]
        .map(String::from),
    );
    all.extend(ULIMITS.map(String::from));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    net.spark_launch_with(1, &refs, &[("SPARK_LAUNCH_NO_PROGRESS", "0")], None)
}

fn assert_no_containers_left(net: &SimNet) {
    for i in 1..=net.len() {
        let left = containers_named(&net.docker_socket(i).display().to_string(), "sl-sl5flow");
        assert!(left.is_empty(), "n{i} still has {left:?}");
    }
}

#[test]
fn nccl_test_runs_mpirun_across_node_containers_and_reports_the_captured_log() {
    let image = standin_image();
    let net = SimNet::builder(2).services("sshd,dockerd").tag("n").up();
    trust_from(&net, 1);
    load_on(&net, 1, &image);

    // 0. --no-push: the worker lacks the image, so the job is refused before anything starts,
    //    and nothing is copied there (the flag once went missing on its way to the executor).
    let out = nccl_test(&net, &image, &["nccl-test", "--launch-check", "--no-push"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains(&net.hostname(2)), "{err}");
    assert!(!err.contains("✓ Start on"), "{err}");
    let on_worker = Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", net.docker_socket(2).display()),
            "image",
            "inspect",
            &image,
        ])
        .output()
        .expect("docker image inspect");
    assert!(
        !on_worker.status.success(),
        "--no-push still put {image} on n2"
    );
    assert_no_containers_left(&net);

    // 1. The launch path alone: `mpirun hostname` over sshd on 2233 prints every node.
    let out = nccl_test(&net, &image, &["nccl-test", "--launch-check"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    for i in 1..=2 {
        assert!(
            text.contains(&format!(
                "✓ {} ({}): 1 of 1 rank answered",
                net.hostname(i),
                net.hostname(i)
            )),
            "{text}"
        );
    }
    assert!(text.contains("mpirun reaches every node"), "{text}");
    let progress = stderr(&out);
    assert!(progress.contains("Ensure image"), "{progress}");
    assert!(
        !progress.contains("PRIVATE KEY") && !text.contains("PRIVATE KEY"),
        "{}",
        describe(&out)
    );
    assert_no_containers_left(&net);

    // 2. The whole test: both operations, each node's own variables on its rank, the captured
    //    log parsed into results and a verdict, the raw log saved.
    let saved = format!("/home/{USER}/nccl.log");
    let out = nccl_test(&net, &image, &["--json", "nccl-test", "--save-log", &saved]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["status"], "measured", "{v}");
    let tests: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, vec!["all_gather_perf", "all_reduce_perf"]);
    for t in v["tests"].as_array().unwrap() {
        assert_eq!(t["run"]["exit_status"], 0, "{t}");
        assert!(
            t["verdict"]["peak_busbw_gbs"].as_f64().unwrap() > 100.0,
            "{t}"
        );
    }
    let log = std::fs::read_to_string(net.home(1).join("nccl.log")).expect("--save-log wrote it");
    for i in 1..=2 {
        let line = log
            .lines()
            .find(|l| {
                l.starts_with("# stand-in: rank")
                    && l.contains(&format!(" on {} ", net.hostname(i)))
            })
            .unwrap_or_else(|| panic!("no rank ran on n{i}:\n{log}"));
        // Every rank got its own node's derived variables through its app context.
        assert!(
            line.contains("NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1"),
            "{line}"
        );
        assert!(line.contains("NCCL_SOCKET_IFNAME=enp1s0f1np1"), "{line}");
        assert!(line.contains("NCCL_DEBUG=INFO"), "{line}");
        assert!(line.contains("args=-b 8 -e 4G -f 2 -g 1 -n 20"), "{line}");
    }
    assert_no_containers_left(&net);
}
