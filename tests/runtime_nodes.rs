//! Jobs on simulated nodes that each run their own dockerd (tests/harness/simnet, `dockerd`
//! service): spark-launch runs inside the head node as the test user, exactly as on a real
//! cluster — the head's engine on its own /var/run/docker.sock, every other node's engine
//! through its Docker socket forwarded over the multiplexed SSH connection. The base image is
//! built here, loaded on the head only, and reaches the others through `image push`.

mod support;

use std::process::Output;

use support::docker::{
    containers_named, hosts_arg, import_busybox, inspect, load_busybox_for_arch, trust_from,
};
use support::{SimNet, describe, stderr, stdout};

const IMAGE: &str = "sl4base:test";

/// Limits this machine lets containers have (no CAP_SYS_RESOURCE here; see tests/harness/README.md).
const ULIMITS: [&str; 4] = ["--ulimit", "memlock=8388608", "--ulimit", "nofile=16384"];

fn up(n: usize, tag: &str) -> SimNet {
    let net = SimNet::builder(n).services("sshd,dockerd").tag(tag).up();
    trust_from(&net, 1);
    net
}

fn sock(net: &SimNet, i: usize) -> String {
    net.docker_socket(i).display().to_string()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `spark-launch ARGS --hosts <every node>` inside the head, as the test user.
fn sl(net: &SimNet, args: &[&str]) -> Output {
    let hosts = hosts_arg(net);
    // Before any `--`: what follows it is the job's command.
    let cut = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut all: Vec<&str> = args[..cut].to_vec();
    all.extend(["--hosts", hosts.as_str()]);
    all.extend(&args[cut..]);
    net.spark_launch_with(1, &all, &[("SPARK_LAUNCH_NO_PROGRESS", "0")], None)
}

fn run_job(net: &SimNet, job: &str, command: &[&str]) -> Output {
    let mut args = vec!["run", "--job", job, "--image", IMAGE, "--gpus", "none"];
    args.extend(ULIMITS);
    args.push("--");
    args.extend(command);
    sl(net, &args)
}

#[test]
fn image_push_reaches_two_nodes_in_parallel_and_a_second_push_skips_both() {
    let net = up(3, "p");
    rt().block_on(import_busybox(&sock(&net, 1), IMAGE));

    // A dry run compares exactly as the push will, and moves nothing.
    let plan = sl(&net, &["image", "push", IMAGE, "--dry-run", "--json"]);
    assert!(plan.status.success(), "{}", describe(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let nodes = plan["plan"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{plan}");
    for n in nodes {
        assert_eq!(n[1]["action"], "push", "{plan}");
    }
    for i in 2..=3 {
        let out = std::process::Command::new("docker")
            .args(["-H", &format!("unix://{}", sock(&net, i))])
            .args(["image", "inspect", IMAGE])
            .output()
            .unwrap();
        assert!(!out.status.success(), "n{i} got the image from a dry run");
    }

    let first = sl(&net, &["image", "push", IMAGE, "--json"]);
    assert!(first.status.success(), "{}", describe(&first));
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{report}");
    for n in nodes {
        assert_eq!(n[1]["result"], "pushed", "{report}");
        assert!(n[1]["bytes"].as_u64().unwrap() > 1_000_000, "{report}");
    }
    // Both imports ran at once from one export: each node's transfer overlaps the other's.
    let id = report["image"]["id"].as_str().unwrap().to_string();
    for i in 2..=3 {
        let out = std::process::Command::new("docker")
            .args([
                "-H",
                &format!("unix://{}", sock(&net, i)),
                "image",
                "inspect",
                "-f",
                "{{.Id}}",
                IMAGE,
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id, "n{i}");
    }

    let second = sl(&net, &["image", "push", IMAGE, "--json"]);
    assert!(second.status.success(), "{}", describe(&second));
    let report: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    for n in report["nodes"].as_array().unwrap() {
        assert_eq!(n[1]["result"], "skipped", "{report}");
    }
}

/// Builds `tag` on the engine at `socket` with the legacy builder: `FROM base`, then one
/// `COPY` of `mib` MiB of random bytes (one new layer).
fn build_layer(socket: &str, base: &str, tag: &str, mib: usize, seed: u8) {
    let dir = tempfile::tempdir().unwrap();
    let mut data = vec![0u8; mib * 1024 * 1024];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(seed);
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(dir.path().join(format!("blob{seed}")), data).unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {base}\nCOPY blob{seed} /blob{seed}\n"),
    )
    .unwrap();
    let out = std::process::Command::new("docker")
        .env("DOCKER_BUILDKIT", "0")
        .args(["-H", &format!("unix://{socket}"), "build", "-q", "-t", tag])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
}

fn layers_of(socket: &str, image: &str) -> serde_json::Value {
    inspect(socket, image)[0]["RootFS"]["Layers"].clone()
}

#[test]
fn an_updated_image_sends_only_the_layers_a_node_lacks_and_loads_whole_on_the_real_engine() {
    // Both sources are proven here: the engine's export (the store unreadable), then the
    // engine's layer store read directly (`runtime::layer_store`), whose layer tars the
    // receiving engines check against the diff IDs as they load them.
    let net = up(3, "u");
    let head = sock(&net, 1);
    rt().block_on(import_busybox(&head, "sl14base:test"));
    // Yesterday's build: busybox + a 6 MiB layer, on the head and on n2.
    build_layer(&head, "sl14base:test", "sl14upd:test", 6, 1);
    let first = sl(
        &net,
        &[
            "image",
            "push",
            "sl14upd:test",
            "--to",
            &format!("{}n2", net.prefix()),
            "--json",
        ],
    );
    assert!(first.status.success(), "{}", describe(&first));
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(report["nodes"][0][1]["layers_sent"], 2, "{report}");
    // The test user cannot read the head engine's store: the engine exported the image.
    assert_eq!(report["nodes"][0][1]["read_from"], "export", "{report}");

    // Today's build: the same two layers and a new 1 MiB one on top, under the same name.
    build_layer(&head, "sl14upd:test", "sl14upd:test", 1, 2);
    let plan = sl(
        &net,
        &["image", "push", "sl14upd:test", "--dry-run", "--json"],
    );
    assert!(plan.status.success(), "{}", describe(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let actions: Vec<&serde_json::Value> = plan["plan"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n[1])
        .collect();
    assert_eq!(actions[0]["missing"], serde_json::json!([2]), "{plan}");
    assert_eq!(
        actions[1]["missing"],
        serde_json::json!([0, 1, 2]),
        "{plan}"
    );

    // Now it may (README, "Image updates"): the layers come straight from the store.
    let info = std::process::Command::new("docker")
        .args(["-H", &format!("unix://{head}"), "info", "-f"])
        .arg("{{.DockerRootDir}} {{.Driver}}")
        .output()
        .unwrap();
    let info = stdout(&info);
    let (root, driver) = info.trim().split_once(' ').unwrap();
    for args in [
        vec!["-m", "u:4242:x", root],
        vec![
            "-R",
            "-m",
            "u:4242:rX",
            &format!("{root}/image"),
            &format!("{root}/{driver}"),
        ],
    ] {
        let out = std::process::Command::new("setfacl")
            .args(&args)
            .output()
            .expect("setfacl (apt-get install acl)");
        assert!(out.status.success(), "{}", describe(&out));
    }

    let second = sl(&net, &["image", "push", "sl14upd:test", "--json"]);
    assert!(second.status.success(), "{}", describe(&second));
    let report: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    for n in nodes {
        assert_eq!(n[1]["read_from"], "layer-store", "{report}");
    }
    // n2 held the two lower layers: it got the top one (1 MiB) and the small entries only.
    assert_eq!(nodes[0][1]["result"], "pushed", "{report}");
    assert_eq!(nodes[0][1]["layers_sent"], 1, "{report}");
    let sent = nodes[0][1]["bytes"].as_u64().unwrap();
    assert!(
        (1024 * 1024..1024 * 1024 + 64 * 1024).contains(&sent),
        "n2 was sent {sent} bytes for a 1 MiB layer: {report}"
    );
    // n3 held nothing: every layer.
    assert_eq!(nodes[1][1]["layers_sent"], 3, "{report}");
    assert!(
        nodes[1][1]["bytes"].as_u64().unwrap() > 7 * 1024 * 1024,
        "{report}"
    );
    // The engines hold the very layers of the head's image, and it runs.
    for i in 2..=3 {
        assert_eq!(
            layers_of(&sock(&net, i), "sl14upd:test"),
            layers_of(&head, "sl14upd:test"),
            "n{i}"
        );
    }
    let out = std::process::Command::new("docker")
        .args(["-H", &format!("unix://{}", sock(&net, 2)), "run", "--rm"])
        .args(ULIMITS)
        .args(["sl14upd:test", "sh", "-c", "cat /blob1 /blob2 | wc -c"])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out).trim(),
        (7 * 1024 * 1024).to_string(),
        "{}",
        describe(&out)
    );
}

#[test]
fn an_image_built_for_another_cpu_is_refused_with_what_to_do() {
    let net = up(2, "a");
    let foreign = if std::env::consts::ARCH == "aarch64" {
        "amd64"
    } else {
        "arm64"
    };
    rt().block_on(load_busybox_for_arch(
        &sock(&net, 1),
        "sl4foreign:test",
        foreign,
    ));
    let out = sl(&net, &["image", "push", "sl4foreign:test"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains(&format!("built for linux/{foreign}")),
        "{text}"
    );
    assert!(text.contains("--platform"), "{text}");
}

#[test]
fn a_three_node_job_runs_on_every_node_with_its_own_network_and_stops_cleanly() {
    let net = up(3, "j");
    rt().block_on(import_busybox(&sock(&net, 1), IMAGE));
    let job = "sl4three";

    // Nodes 2 and 3 lack the image: the launch pushes it (EnsureImage), then starts.
    let out = run_job(
        &net,
        job,
        &[
            "sh",
            "-c",
            "ip -o -4 addr show enp1s0f1np1; ulimit -l; sleep 600",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let progress = stderr(&out);
    assert!(
        progress.contains(&format!("✓ Ensure image {IMAGE} on")),
        "{progress}"
    );
    assert!(progress.contains("Finished in "), "{progress}");

    // Each container sees its own node's fabric address: host networking is real.
    let logs = sl(&net, &["logs", job]);
    assert!(logs.status.success(), "{}", describe(&logs));
    let text = stdout(&logs);
    for i in 1..=3 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&net.hostname(i)) && l.contains("inet "))
            .unwrap_or_else(|| panic!("no address line for n{i} in:\n{text}"));
        assert!(
            line.contains(&format!("inet {}/16", net.fabric_addr(i))),
            "{line}"
        );
    }
    assert!(
        text.contains("| 8192"),
        "ulimit -l inside shows the configured limit:\n{text}"
    );

    // The real containers carry what the spec says.
    for i in 1..=3 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        let c = inspect(&sock(&net, i), &name);
        assert_eq!(c["Config"]["Labels"]["dev.spark-launch.job"], job);
        assert_eq!(
            c["Config"]["Labels"]["dev.spark-launch.node"],
            net.hostname(i)
        );
        assert_eq!(
            c["Config"]["Labels"]["dev.spark-launch.role"],
            if i == 1 { "head" } else { "worker" }
        );
        assert_eq!(c["HostConfig"]["NetworkMode"], "host");
        assert_eq!(c["HostConfig"]["CapAdd"], serde_json::json!(["IPC_LOCK"]));
        assert_eq!(c["HostConfig"]["AutoRemove"], false);
        assert_eq!(c["State"]["Running"], true);
    }

    let status = sl(&net, &["status", "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let rows = v["jobs"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{v}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["job"], job);
        assert_eq!(r["node"], net.hostname(i + 1));
        assert_eq!(r["state"], "running");
        assert_eq!(r["image"], IMAGE);
    }
    let table = sl(&net, &["status"]);
    assert!(stdout(&table).contains("running"), "{}", describe(&table));

    // A second job of the same name is refused, saying how to stop the first.
    let clash = run_job(&net, job, &["sleep", "1"]);
    assert_eq!(clash.status.code(), Some(2), "{}", describe(&clash));
    assert!(
        stderr(&clash).contains(&format!("job {job} already exists")),
        "{}",
        describe(&clash)
    );
    assert!(
        stderr(&clash).contains(&format!("spark-launch stop {job}")),
        "{}",
        describe(&clash)
    );

    // `stop` removes our containers and leaves a container we did not label alone.
    let stranger = format!("{}stranger", net.prefix());
    let st = std::process::Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", sock(&net, 2)),
            "run",
            "-d",
            "--name",
            &stranger,
        ])
        .args([
            "--network",
            "host",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
        ])
        .args([
            "--label",
            "dev.spark-launch.role=head",
            IMAGE,
            "sleep",
            "600",
        ])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let stop = sl(&net, &["stop", "--all"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    for i in 1..=3 {
        assert!(
            containers_named(&sock(&net, i), &format!("sl-{job}")).is_empty(),
            "n{i}"
        );
    }
    assert_eq!(
        containers_named(&sock(&net, 2), &stranger),
        vec![stranger.clone()]
    );
    let again = sl(&net, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert!(v["jobs"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn a_two_node_job_is_created_started_and_stopped() {
    let net = up(2, "t");
    rt().block_on(import_busybox(&sock(&net, 1), IMAGE));
    let out = run_job(&net, "sl4two", &["sleep", "600"]);
    assert!(out.status.success(), "{}", describe(&out));
    for i in 1..=2 {
        assert_eq!(
            containers_named(&sock(&net, i), "sl-sl4two-").len(),
            1,
            "n{i}"
        );
    }
    // A dry run lists what a stop would remove on each node and leaves it running.
    let plan = sl(&net, &["stop", "sl4two", "--dry-run", "--json"]);
    assert!(plan.status.success(), "{}", describe(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    for (i, n) in plan["nodes"].as_array().unwrap().iter().enumerate() {
        let found = n["found"].as_array().unwrap();
        assert_eq!(found.len(), 1, "{plan}");
        assert_eq!(
            found[0]["name"],
            format!("sl-sl4two-{}", net.hostname(i + 1))
        );
        assert_eq!(found[0]["state"], "running", "{plan}");
    }
    for i in 1..=2 {
        assert_eq!(
            containers_named(&sock(&net, i), "sl-sl4two-").len(),
            1,
            "n{i}"
        );
    }
    let stop = sl(&net, &["stop", "sl4two"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    assert!(
        stdout(&stop).contains("removed sl-sl4two-"),
        "{}",
        describe(&stop)
    );
    for i in 1..=2 {
        assert!(
            containers_named(&sock(&net, i), "sl-sl4two-").is_empty(),
            "n{i}"
        );
    }

    // `logs -f` follows every node's container until it ends, each line under its node.
    let out = run_job(
        &net,
        "sl4follow",
        &["sh", "-c", "echo first; sleep 2; echo second"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let follow = sl(&net, &["logs", "sl4follow", "-f"]);
    assert!(follow.status.success(), "{}", describe(&follow));
    for i in 1..=2 {
        for word in ["first", "second"] {
            assert!(
                stdout(&follow).contains(&format!("{} | {word}", net.hostname(i))),
                "{}",
                describe(&follow)
            );
        }
    }
    // Ended containers stay (their logs outlive them) until `stop`.
    let status = sl(&net, &["status", "sl4follow", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for r in v["jobs"].as_array().unwrap() {
        assert_eq!(r["state"], "exited", "{v}");
        assert_eq!(r["exit_code"], 0, "{v}");
    }
    let one = sl(&net, &["logs", "sl4follow", "--node", &net.hostname(2)]);
    assert_eq!(stdout(&one), "first\nsecond\n", "{}", describe(&one));
    assert!(sl(&net, &["stop", "sl4follow"]).status.success());
}

#[test]
fn an_unreachable_node_is_named_and_nothing_is_left_on_the_others() {
    let net = up(3, "u");
    rt().block_on(import_busybox(&sock(&net, 1), IMAGE));
    net.stop(3, "dockerd");
    let out = run_job(&net, "sl4down", &["sleep", "600"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}: Docker is not reachable", net.hostname(3))),
        "{err}"
    );
    assert!(
        !err.contains(&format!("{}: Docker", net.hostname(2))),
        "{err}"
    );
    for i in 1..=2 {
        assert!(
            containers_named(&sock(&net, i), "sl-sl4down-").is_empty(),
            "n{i}"
        );
    }
}

#[test]
fn a_gpu_request_on_nodes_without_gpu_support_is_a_clear_error_and_leaves_no_container() {
    let net = up(2, "g");
    rt().block_on(import_busybox(&sock(&net, 1), IMAGE));
    let mut args = vec!["run", "--job", "sl4gpu", "--image", IMAGE, "--gpus", "all"];
    args.extend(ULIMITS);
    args.extend(["--", "sleep", "600"]);
    let out = sl(&net, &args);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("GPUs requested (--gpus all)"), "{err}");
    assert!(err.contains("nvidia-ctk"), "{err}");
    for i in 1..=2 {
        assert!(
            containers_named(&sock(&net, i), "sl-sl4gpu-").is_empty(),
            "n{i}"
        );
    }
}

/// A unix-socket proxy that holds every new connection for `delay` before passing it on to
/// `to`: an engine that answers slowly, so a test can act in the middle of a start.
struct SlowSocket {
    child: std::process::Child,
    path: std::path::PathBuf,
}

impl SlowSocket {
    fn new(to: &str, path: std::path::PathBuf, delay: f64) -> SlowSocket {
        // socat splits addresses at ':', so the slow leg lives in a script.
        let script = path.with_extension("sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\nsleep {delay}\nexec socat STDIO UNIX-CONNECT:{to}\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = std::process::Command::new("socat")
            .arg(format!("UNIX-LISTEN:{},fork,mode=600", path.display()))
            .arg(format!("SYSTEM:{}", script.display()))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("socat (apt-get install socat)");
        for _ in 0..100 {
            if path.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(path.exists(), "socat did not listen on {}", path.display());
        SlowSocket { child, path }
    }
}

impl Drop for SlowSocket {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn sigint_in_the_middle_of_a_start_leaves_no_container_behind() {
    let net = SimNet::builder(3).services("dockerd").tag("i").up();
    let runtime = rt();
    for i in 1..=3 {
        runtime.block_on(import_busybox(&sock(&net, i), IMAGE));
    }
    // Node 3's engine answers every request a second late; nodes 1 and 2 at once.
    let dir = tempfile::tempdir().unwrap();
    let slow = SlowSocket::new(&sock(&net, 3), dir.path().join("n3.sock"), 1.0);
    let engines = [
        format!("n1=unix://{}", sock(&net, 1)),
        format!("n2=unix://{}", sock(&net, 2)),
        format!("n3=unix://{}", slow.path.display()),
    ];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_spark-launch"));
    cmd.args(["run", "--job", "sl4int", "--image", IMAGE, "--gpus", "none"])
        .args(ULIMITS);
    for e in &engines {
        cmd.args(["--engine", e]);
    }
    // Its own process group, signalled as a whole below: what a terminal's Ctrl-C does.
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .args(["--", "sleep", "600"])
        .process_group(0)
        .env("SPARK_LAUNCH_NO_PROGRESS", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until nodes 1 and 2 have their containers: node 3's create is still on its way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let started = (1..=2)
            .filter(|&i| !containers_named(&sock(&net, i), "sl-sl4int-").is_empty())
            .count();
        if started == 2 {
            break;
        }
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "spark-launch ended before the start reached nodes 1 and 2:\n{}",
                describe(&out)
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the start never reached nodes 1 and 2"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        containers_named(&sock(&net, 3), "sl-sl4int-").is_empty()
            || inspect(&sock(&net, 3), "sl-sl4int-n3")["State"]["Running"] == false,
        "node 3 was meant to be still starting"
    );
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("interrupted"), "{err}");
    assert!(err.contains("Clean up: Start on n1, n2, n3"), "{err}");
    for i in 1..=3 {
        assert!(
            containers_named(&sock(&net, i), "sl-sl4int-").is_empty(),
            "n{i}:\n{err}"
        );
    }
}

#[test]
fn the_host_runtime_runs_the_same_job_model_as_processes_over_ssh() {
    let net = SimNet::builder(2).services("sshd").tag("h").up();
    trust_from(&net, 1);
    let out = sl(
        &net,
        &[
            "run",
            "--job",
            "sl4host",
            "--runtime",
            "host",
            "--port",
            "8000",
            "--",
            "sh",
            "-c",
            "echo started on $(hostname); exec sleep 4242601",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The nodes share this host's PID namespace: both processes are visible from anywhere.
    let running = || {
        let ps = net.exec_root(
            1,
            &[
                "sh",
                "-c",
                "ps -eo args | grep -c '^[s]leep 4242601' || true",
            ],
        );
        stdout(&ps).trim().to_string()
    };
    assert_eq!(running(), "2");
    for i in 1..=2 {
        let dir = net
            .home(i)
            .join(".local/state/spark-launch/jobs")
            .join(format!("sl-sl4host-{}", net.hostname(i)));
        assert!(
            dir.join("pid").exists() && dir.join("log").exists(),
            "n{i}: {}",
            dir.display()
        );
    }

    let status = sl(&net, &["status", "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let rows = v["jobs"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["runtime"], "host");
        assert_eq!(r["state"], "running");
        assert_eq!(r["node"], net.hostname(i + 1));
        assert_eq!(r["ports"], serde_json::json!([8000]));
    }

    let logs = sl(&net, &["logs", "sl4host"]);
    assert!(logs.status.success(), "{}", describe(&logs));
    for i in 1..=2 {
        assert!(
            stdout(&logs).contains(&format!(
                "{} | started on {}",
                net.hostname(i),
                net.hostname(i)
            )),
            "{}",
            describe(&logs)
        );
    }

    // `logs -f` on remote processes streams until they end.
    let out = sl(
        &net,
        &[
            "run",
            "--job",
            "sl4hostf",
            "--runtime",
            "host",
            "--",
            "sh",
            "-c",
            "echo first; sleep 2; echo second",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let follow = sl(&net, &["logs", "sl4hostf", "-f"]);
    assert!(follow.status.success(), "{}", describe(&follow));
    for i in 1..=2 {
        assert!(
            stdout(&follow).contains(&format!("{} | second", net.hostname(i))),
            "{}",
            describe(&follow)
        );
    }
    assert!(sl(&net, &["stop", "sl4hostf"]).status.success());

    let clash = sl(
        &net,
        &["run", "--job", "sl4host", "--runtime", "host", "--", "true"],
    );
    assert_eq!(clash.status.code(), Some(2), "{}", describe(&clash));

    let stop = sl(&net, &["stop", "sl4host"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    assert_eq!(running(), "0", "the job's processes survived stop");
    let after = sl(&net, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert!(v["jobs"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn a_user_outside_the_docker_group_is_told_how_to_join_it_locally_and_on_a_remote_node() {
    let net = up(2, "d");
    // On the head itself: the test user without its supplementary groups.
    let bin = net.binary().display().to_string();
    let out = net.exec_root(
        1,
        &[
            "setpriv",
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            "--",
            "env",
            "HOME=/home/sparkuser",
            &bin,
            "status",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("permission denied on /var/run/docker.sock"),
        "{err}"
    );
    assert!(err.contains("usermod -aG docker"), "{err}");

    // On node 2: the test user is dropped from that node's docker group.
    let group = support::simnet_root()
        .join(net.prefix())
        .join("n2/etc/group");
    let text = std::fs::read_to_string(&group).unwrap();
    let edited: String = text
        .lines()
        .map(|l| {
            if l.starts_with("docker:") {
                let mut f: Vec<&str> = l.split(':').collect();
                let members: Vec<&str> = f[3]
                    .split(',')
                    .filter(|m| *m != "sparkuser" && !m.is_empty())
                    .collect();
                let joined = members.join(",");
                f[3] = &joined;
                f.join(":") + "\n"
            } else {
                l.to_string() + "\n"
            }
        })
        .collect();
    std::fs::write(&group, edited).unwrap();
    let out = sl(&net, &["status"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}: permission denied on /var/run/docker.sock on the node",
            net.hostname(2)
        )),
        "{err}"
    );
}

#[test]
fn without_push_a_missing_image_refuses_the_start_and_names_the_push_command() {
    let net = up(2, "n");
    rt().block_on(import_busybox(&sock(&net, 1), IMAGE));
    let mut args = vec![
        "run",
        "--job",
        "sl4nopush",
        "--image",
        IMAGE,
        "--gpus",
        "none",
        "--no-push",
    ];
    args.extend(ULIMITS);
    args.extend(["--", "sleep", "600"]);
    let out = sl(&net, &args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "spark-launch image push {IMAGE} --to {}",
            net.hostname(2)
        )),
        "{err}"
    );
    for i in 1..=2 {
        assert!(
            containers_named(&sock(&net, i), "sl-sl4nopush-").is_empty(),
            "n{i}"
        );
    }
}

/// A plan for `job` on nodes 1..=n of `net`, reached through their engine sockets.
fn plan_on(
    net: &SimNet,
    job: &str,
    n: usize,
) -> (spark_launch::plan::JobPlan, spark_launch::runtime::Cluster) {
    use spark_launch::node::{NodeName, Role};
    use spark_launch::plan::{
        ContainerSpec, EnsureImage, Gpus, JobName, JobPlan, Launch, NodePlan, RuntimeKind, Start,
        Step,
    };
    use spark_launch::runtime::{Cluster, EngineEndpoint, NodeTarget};
    let job = JobName::new(job).unwrap();
    let mut parts = Vec::new();
    let mut targets = Vec::new();
    for i in 1..=n {
        let node = NodeName::new(format!("n{i}")).unwrap();
        let role = if i == 1 { Role::Head } else { Role::Worker };
        let mut spec = ContainerSpec::gpu(&job, &node, role, IMAGE, false);
        spec.gpus = Gpus::None;
        spec.override_ulimits(&[
            "memlock=8388608".parse().unwrap(),
            "nofile=16384".parse().unwrap(),
        ]);
        spec.command = vec!["sleep".into(), "600".into()];
        parts.push(NodePlan {
            node: node.clone(),
            role,
            launch: Launch::Container(spec),
        });
        targets.push(NodeTarget::engine_only(
            node,
            role,
            EngineEndpoint::unix(net.docker_socket(i)),
        ));
    }
    let names: Vec<NodeName> = parts.iter().map(|p| p.node.clone()).collect();
    let plan = JobPlan {
        job,
        workload: "test".into(),
        runtime: RuntimeKind::Docker,
        nodes: parts,
        steps: vec![
            Step::EnsureImage(EnsureImage {
                image: IMAGE.into(),
                nodes: names.clone(),
            }),
            Step::Start(Start { nodes: names }),
        ],
    };
    (plan, Cluster::new(targets))
}

#[test]
fn a_start_that_fails_on_one_node_names_it_and_removes_the_job_from_the_others() {
    use spark_launch::apply::{ApplyOptions, execute};
    use spark_launch::plan::{Launch, spec::Mount};
    let net = SimNet::builder(3).services("dockerd").tag("f").up();
    let runtime = rt();
    runtime.block_on(import_busybox(&sock(&net, 1), IMAGE));
    let (mut plan, cluster) = plan_on(&net, "sl4fail", 3);
    // Node 3 alone is asked to mount a folder it does not have: its create fails.
    if let Launch::Container(spec) = &mut plan.nodes[2].launch {
        spec.mounts.push(Mount {
            source: "/nonexistent/sl4/data".into(),
            target: "/data".into(),
            read_only: true,
            kind: spark_launch::plan::spec::MountKind::Bind,
        });
    }
    let reporter = spark_launch::progress::RecordingReporter::new();
    let err = runtime
        .block_on(execute(
            &plan,
            &cluster,
            &ApplyOptions::default(),
            reporter.clone(),
            tokio_util::sync::CancellationToken::new(),
        ))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "Start on n1, n2, n3: failed on 1 of 3 nodes:\n  n3: create container sl-sl4fail-n3:"
        ),
        "{text}"
    );
    assert!(text.contains("/nonexistent/sl4/data"), "{text}");
    assert!(
        text.ends_with("(what had started was stopped and removed)"),
        "{text}"
    );
    assert_eq!(err.exit_code(), 1);
    for i in 1..=3 {
        assert!(
            containers_named(&sock(&net, i), "sl-sl4fail-").is_empty(),
            "n{i}"
        );
    }
    let events = reporter.events();
    let titles: Vec<&str> = events
        .iter()
        .filter_map(|e| e.strip_prefix("start:"))
        .collect();
    assert_eq!(
        titles,
        vec![
            "Connect to the nodes",
            "Check that the job name is free",
            &format!("Ensure image {IMAGE} on n1, n2, n3"),
            "Start on n1, n2, n3",
            "Clean up: Start on n1, n2, n3",
        ]
    );
    assert!(
        events.contains(&"fail:Start on n1, n2, n3".to_string()),
        "{events:?}"
    );

    // With --keep the two started containers stay, and the error says how to stop them.
    let options = ApplyOptions {
        keep: true,
        ..ApplyOptions::default()
    };
    let err = runtime
        .block_on(execute(
            &plan,
            &cluster,
            &options,
            std::sync::Arc::new(spark_launch::progress::NullReporter),
            tokio_util::sync::CancellationToken::new(),
        ))
        .unwrap_err();
    assert!(
        err.to_string().contains("spark-launch stop sl4fail"),
        "{err}"
    );
    for i in 1..=2 {
        assert_eq!(
            containers_named(&sock(&net, i), "sl-sl4fail-").len(),
            1,
            "n{i}"
        );
    }
}

#[test]
fn a_signal_at_any_instant_of_run_leaves_nothing_or_says_exactly_what_keeps_running() {
    let net = up(2, "g");
    let runtime = rt();
    for i in 1..=2 {
        runtime.block_on(import_busybox(&sock(&net, i), IMAGE));
    }
    let hosts = hosts_arg(&net);
    let bin = net.binary().display().to_string();
    let mut fully_started = 0;
    let mut cleaned = 0;
    // SIGINT every 25 ms over the first second of `run` (connect, probe-free resolve, name
    // check, image check, start): `timeout` delivers it to spark-launch at that instant.
    for k in 0..=40u32 {
        let job = format!("sg{k}");
        let offset = format!("{:.3}", f64::from(k) * 0.025);
        let mut argv: Vec<&str> = vec![
            "timeout",
            // One signal to spark-launch alone, as a terminal's Ctrl-C gives it once (without
            // --foreground, timeout signals the process and then its group again).
            "--foreground",
            "--preserve-status",
            "-s",
            "INT",
            &offset,
            &bin,
            "run",
            "--job",
            &job,
            "--image",
            IMAGE,
            "--gpus",
            "none",
        ];
        argv.extend(ULIMITS);
        argv.extend(["--hosts", hosts.as_str(), "--", "sleep", "600"]);
        let out = net.exec_user(1, &argv, &[("SPARK_LAUNCH_NO_PROGRESS", "0")], None);
        let left: Vec<String> = (1..=2)
            .flat_map(|i| containers_named(&sock(&net, i), &format!("sl-{job}-")))
            .collect();
        let err = stderr(&out);
        match out.status.code() {
            // The signal came after the job had fully started: it says so and how to stop it.
            Some(130) if err.contains("keeps running") => {
                assert_eq!(left.len(), 2, "at {offset}s: {left:?}\n{err}");
                assert!(err.contains(&format!("spark-launch stop {job}")), "{err}");
                fully_started += 1;
            }
            // Interrupted before that: nothing is left anywhere.
            Some(130) => {
                assert!(left.is_empty(), "at {offset}s {left:?} was left:\n{err}");
                cleaned += 1;
            }
            // It finished before the signal: started, said so, exit 0.
            Some(0) => {
                assert_eq!(left.len(), 2, "at {offset}s: {left:?}");
                fully_started += 1;
            }
            other => panic!("at {offset}s: exit {other:?}\n{}", describe(&out)),
        }
        if !left.is_empty() {
            let stop = sl(&net, &["stop", &job]);
            assert!(stop.status.success(), "{}", describe(&stop));
        }
    }
    assert!(
        cleaned > 0,
        "no offset interrupted the run before it finished"
    );
    assert!(fully_started > 0, "no run got to the end within a second");
}

#[test]
fn the_name_clash_refusal_for_an_unlabelled_container_never_suggests_a_stop_that_cannot_remove_it()
{
    // Seen once: the refusal said "stop it first with `spark-launch stop JOB`",
    // which never touches a container spark-launch did not label.
    let net = SimNet::builder(1).services("dockerd").tag("u").up();
    let runtime = rt();
    runtime.block_on(import_busybox(&sock(&net, 1), IMAGE));
    let name = "sl-sl12clash-n1";
    let st = std::process::Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", sock(&net, 1)),
            "run",
            "-d",
            "--name",
            name,
        ])
        .args([
            "--network",
            "host",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
        ])
        .args([IMAGE, "sleep", "600"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args([
            "run",
            "--job",
            "sl12clash",
            "--image",
            IMAGE,
            "--gpus",
            "none",
        ])
        .args(ULIMITS)
        .args(["--engine", &format!("n1=unix://{}", sock(&net, 1))])
        .args(["--", "sleep", "1"])
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("a container spark-launch did not start"),
        "{err}"
    );
    assert!(err.contains(&format!("docker rm -f {name}")), "{err}");
    assert!(!err.contains("spark-launch stop"), "{err}");
    // Untouched.
    assert_eq!(inspect(&sock(&net, 1), name)["State"]["Running"], true);
}
