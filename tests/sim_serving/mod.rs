//! Helpers for the serving tests on simulated nodes: SSH trust between every pair of nodes
//! (what `spark-launch trust` sets up), the `--hosts` argument, each node's Docker socket and
//! the stand-in serving image built onto a node's engine.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

use super::hub_standin::{FakeRepo, HubStandin, tiny_repo};
use super::support::{self, SimNet, describe};

/// Every node's key in every other node's `authorized_keys`, and every node's host key in
/// every node's known hosts under the node's name (what `spark-launch trust` sets up).
pub fn trust_all(net: &SimNet) {
    let mut keys = String::new();
    for i in 1..=net.len() {
        let out = net.exec_user(
            i,
            &[
                "sh",
                "-c",
                "mkdir -p ~/.ssh && chmod 700 ~/.ssh && { [ -f ~/.ssh/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519; } && cat ~/.ssh/id_ed25519.pub",
            ],
            &[],
            None,
        );
        assert!(
            out.status.success(),
            "ssh-keygen on n{i}: {}",
            describe(&out)
        );
        keys.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    let mut known = String::new();
    for i in 1..=net.len() {
        let key = support::simnet_root()
            .join(net.prefix())
            .join(format!("n{i}"))
            .join("state/ssh_host_ed25519_key.pub");
        let text =
            std::fs::read_to_string(&key).unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        let mut parts = text.split_whitespace();
        let (kind, body) = (parts.next().unwrap(), parts.next().unwrap());
        known.push_str(&format!("{} {kind} {body}\n", net.hostname(i)));
    }
    for i in 1..=net.len() {
        let ssh = net.home(i).join(".ssh");
        std::fs::write(ssh.join("authorized_keys"), &keys).unwrap();
        std::fs::write(ssh.join("known_hosts"), &known).unwrap();
        for f in ["authorized_keys", "known_hosts"] {
            std::os::unix::fs::chown(ssh.join(f), Some(4242), Some(4242)).unwrap();
        }
    }
}

pub fn hosts(net: &SimNet) -> String {
    (1..=net.len())
        .map(|i| format!("{}={}", net.hostname(i), net.fabric_addr(i)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Node `i`'s own Docker Engine socket as this test process reaches it (simnet `dockerd`).
pub fn docker_socket(net: &SimNet, i: usize) -> PathBuf {
    support::simnet_root()
        .join(net.prefix())
        .join(format!("n{i}"))
        .join("docker.sock")
}

/// Whether the stand-in serving image carries real Ray (only the Ray tests need its 230 MB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WithRay {
    Yes,
    No,
}

/// Builds the stand-in serving image (tests/standin/build-image) onto node `i`'s engine.
pub fn build_standin(net: &SimNet, i: usize, tag: &str, ray: WithRay) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/build-image");
    let out = Command::new("bash")
        .arg(&script)
        .args((ray == WithRay::No).then_some("--no-ray"))
        .arg(tag)
        .arg(format!("unix://{}", docker_socket(net, i).display()))
        .output()
        .expect("run tests/standin/build-image");
    assert!(out.status.success(), "build-image: {}", describe(&out));
}

/// Builds the stand-in image on node 1 and loads the same image (same ID) on every other
/// node with `docker save | docker load`, so the plan's EnsureImage finds it everywhere.
pub fn standin_on_every_node(net: &SimNet, tag: &str, ray: WithRay) {
    build_standin(net, 1, tag, ray);
    for i in 2..=net.len() {
        let script = format!(
            "docker -H unix://{} save {tag} | docker -H unix://{} load -q",
            docker_socket(net, 1).display(),
            docker_socket(net, i).display()
        );
        let out = Command::new("bash")
            .args(["-o", "pipefail", "-c", &script])
            .output()
            .expect("docker save | docker load");
        assert!(
            out.status.success(),
            "load {tag} on n{i}: {}",
            describe(&out)
        );
    }
}

/// Names of the containers on node `i` whose name starts with `prefix` (any state).
pub fn containers(net: &SimNet, i: usize, prefix: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["-H", &format!("unix://{}", docker_socket(net, i).display())])
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// The log (stdout and stderr) of container `name` on node `i`.
pub fn container_log(net: &SimNet, i: usize, name: &str) -> String {
    let out = Command::new("docker")
        .args(["-H", &format!("unix://{}", docker_socket(net, i).display())])
        .args(["logs", name])
        .output()
        .expect("docker logs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Removes the job's containers from every node (test clean-up; `spark-launch stop` is tested
/// with the runtime).
pub fn remove_job(net: &SimNet, job: &str) {
    for i in 1..=net.len() {
        let names = containers(net, i, &format!("sl-{job}-"));
        if names.is_empty() {
            continue;
        }
        let _ = Command::new("docker")
            .args(["-H", &format!("unix://{}", docker_socket(net, i).display())])
            .args(["rm", "-f"])
            .args(&names)
            .output();
    }
}

/// The TensorRT-LLM stand-in (tests/standin/trtllm) on every node: the nccl-tests
/// stand-in built on node 1 (tests/harness/nccl-standin), the trtllm stand-ins added with
/// `docker build`, then the same image loaded on every other node.
pub fn trtllm_standin_on_every_node(net: &SimNet, tag: &str) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let sock = docker_socket(net, 1);
    let out = Command::new("bash")
        .arg(repo.join("tests/harness/nccl-standin"))
        .arg("build")
        .arg(&sock)
        .output()
        .expect("run tests/harness/nccl-standin");
    assert!(
        out.status.success(),
        "the nccl-tests stand-in could not be built (debootstrap, docker, the Debian mirror): {}",
        describe(&out)
    );
    let base = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = Command::new("docker")
        .args(["-H", &format!("unix://{}", sock.display())])
        .args([
            "build",
            "-q",
            "--build-arg",
            &format!("BASE={base}"),
            "-t",
            tag,
        ])
        .arg(repo.join("tests/standin/trtllm"))
        .output()
        .expect("docker build");
    assert!(
        out.status.success(),
        "docker build {tag}: {}",
        describe(&out)
    );
    for i in 2..=net.len() {
        let script = format!(
            "docker -H unix://{} save {tag} | docker -H unix://{} load -q",
            sock.display(),
            docker_socket(net, i).display()
        );
        let out = Command::new("bash")
            .args(["-o", "pipefail", "-c", &script])
            .output()
            .expect("docker save | docker load");
        assert!(
            out.status.success(),
            "load {tag} on n{i}: {}",
            describe(&out)
        );
    }
}

/// The stand-in serving image without Ray, and with real Ray (a new tag: the image before it
/// had a fake `ray`); each test's image is this tag behind its simnet prefix.
pub const STANDIN_TAG: &str = "standin-noray:test";
pub const STANDIN_RAY_TAG: &str = "standin-ray2.60:test";

/// The flags every launch on the stand-in takes after its own: no GPUs here, and the limits
/// this machine allows.
pub const STANDIN_FLAGS: [&str; 6] = [
    "--gpus",
    "none",
    "--ulimit",
    "memlock=8388608",
    "--ulimit",
    "nofile=16384",
];

/// A simulated serving cluster: nodes with sshd and dockerd, trust between every pair, the
/// stand-in image on every node, and a stand-in Hub in node 1 (on the runtime it owns).
pub struct Serving {
    pub net: SimNet,
    pub hub: HubStandin,
    pub image: String,
    pub rt: tokio::runtime::Runtime,
}

impl Serving {
    /// `nodes` nodes (simnet tag `tag`), the stand-in with or without Ray on each, and a Hub
    /// serving `repos`.
    pub fn up(nodes: usize, tag: &str, ray: WithRay, repos: Vec<FakeRepo>) -> Serving {
        let net = SimNet::builder(nodes)
            .services("sshd,dockerd")
            .tag(tag)
            .up();
        trust_all(&net);
        let image = match ray {
            WithRay::Yes => format!("{}{STANDIN_RAY_TAG}", net.prefix()),
            WithRay::No => format!("{}{STANDIN_TAG}", net.prefix()),
        };
        // The same image on every node up front: EnsureImage then checks digests and skips
        // (image push itself is tested with the runtime).
        standin_on_every_node(&net, &image, ray);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
        let hub = rt.block_on(HubStandin::start_in_netns(repos, &netns));
        Serving {
            net,
            hub,
            image,
            rt,
        }
    }

    /// `spark-launch ARGS --hosts … --image … --gpus none --ulimit …` inside the head, then
    /// `-- EXTRA` for the engine when given, with the stand-in Hub as `HF_ENDPOINT`.
    pub fn launch(&self, args: &[&str], extra: &[&str]) -> Output {
        let h = hosts(&self.net);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--hosts", &h, "--image", &self.image]);
        all.extend(STANDIN_FLAGS);
        if !extra.is_empty() {
            all.push("--");
            all.extend(extra);
        }
        self.net
            .spark_launch_with(1, &all, &[("HF_ENDPOINT", self.hub.url.as_str())], None)
    }

    /// Asserts that no node keeps a container of `job`.
    pub fn gone(&self, job: &str) {
        for i in 1..=self.net.len() {
            let left = containers(&self.net, i, &format!("sl-{job}-"));
            assert!(left.is_empty(), "n{i} still has {left:?}");
        }
    }
}

/// The tiny repo `model` with the shape of Qwen/Qwen2.5-0.5B-Instruct's public config.json (14
/// attention heads, 2 KV heads, 24 layers): what the launch's tp/pp check reads; tp 2 divides it.
pub fn shaped_repo(model: &str) -> FakeRepo {
    let mut repo = tiny_repo(model, 200_000);
    for f in &mut repo.files {
        if f.path == "config.json" {
            f.content = br#"{"architectures":["TinyForCausalLM"],"hidden_size":64,"num_attention_heads":14,"num_key_value_heads":2,"num_hidden_layers":24}"#.to_vec();
        }
    }
    repo
}

/// Two nodes serving the stand-in without Ray, and a Hub serving `model` shaped for tp 2.
pub fn two_nodes_serving(tag: &str, model: &str) -> Serving {
    Serving::up(2, tag, WithRay::No, vec![shaped_repo(model)])
}

/// `docker ARGS` against node `node`'s own engine.
pub fn docker(net: &SimNet, node: usize, args: &[&str]) -> Output {
    Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", docker_socket(net, node).display()),
        ])
        .args(args)
        .output()
        .expect("docker")
}
