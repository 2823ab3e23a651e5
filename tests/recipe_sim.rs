//! `spark-launch up RECIPE` end to end on simulated nodes that each run their own dockerd
//! (tests/harness/simnet `sshd,dockerd`), with the stand-in serving image (tests/standin: a
//! fake `vllm` that checks its arguments and environment, does a real TCP rendezvous across
//! the nodes, serves /health and /v1/models, and logs the arguments it was given). Recipes in
//! both community formats, written here (not copied from any registry), run as they are: the
//! recipe's own flags reach every rank, each mod's files are put into every container and its
//! `run.sh` runs there before the engine (the tests read what it left behind with `docker
//! exec`), a v2 env template is rendered per node (read inside each container), the derived
//! fabric variables win over the recipe's, its `pre_exec` commands run in every container
//! before its mods and the engine; a missing mod, an unknown runtime and a mod file
//! linking out of its registry (to the user's private key) are refused with exit 2 before
//! anything starts, a failing mod or `pre_exec` command fails the start showing its output
//! (the command named), and the plan kept for
//! `supervise` holds the mods' digests, never their bytes.
//! No GPUs here: `--gpus none`, and limits this machine allows.

mod hub_standin;
mod sim_serving;
mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use hub_standin::{HubStandin, tiny_repo};
use sim_serving::{
    WithRay, container_log, containers, docker_socket, hosts, remove_job, standin_on_every_node,
    trust_all,
};
use support::{SimNet, describe, stderr, stdout};

const MODEL: &str = "spark-test/tiny";
const STANDIN_TAG: &str = "standin-noray:test";

struct Cluster {
    net: SimNet,
    hub: HubStandin,
    image: String,
    _rt: tokio::runtime::Runtime,
}

/// Two simulated nodes with the stand-in image on both and a stand-in Hub serving a tiny
/// model with the shape of Qwen2.5-0.5B (14 heads, 2 KV heads, 24 layers: tp 2 fits).
fn cluster(tag: &str) -> Cluster {
    let net = SimNet::builder(2).services("sshd,dockerd").tag(tag).up();
    trust_all(&net);
    let image = format!("{}{STANDIN_TAG}", net.prefix());
    standin_on_every_node(&net, &image, WithRay::No);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut repo = tiny_repo(MODEL, 200_000);
    for f in &mut repo.files {
        if f.path == "config.json" {
            f.content = br#"{"architectures":["TinyForCausalLM"],"hidden_size":64,"num_attention_heads":14,"num_key_value_heads":2,"num_hidden_layers":24}"#.to_vec();
        }
    }
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(vec![repo], &netns));
    Cluster {
        net,
        hub,
        image,
        _rt: rt,
    }
}

/// Writes `text` at `rel` under the test user's home on the head (as the user owns it);
/// returns the path as the head sees it.
fn put(c: &Cluster, rel: &str, text: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let home = c.net.home(1);
    let path = home.join(rel);
    let mut dir = path.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(&path, Some(4242), Some(4242)).unwrap();
    while dir != home {
        std::os::unix::fs::chown(&dir, Some(4242), Some(4242)).unwrap();
        dir = dir.parent().unwrap().to_path_buf();
    }
    format!("/home/{}/{rel}", support::USER)
}

/// `spark-launch up ARGS --hosts … --image … --gpus none --ulimit …` inside the head.
fn up(c: &Cluster, args: &[&str]) -> Output {
    let h = hosts(&c.net);
    let mut all = vec!["up"];
    all.extend(args);
    all.extend([
        "--hosts",
        &h,
        "--image",
        &c.image,
        "--gpus",
        "none",
        "--ulimit",
        "memlock=8388608",
        "--ulimit",
        "nofile=16384",
    ]);
    c.net
        .spark_launch_with(1, &all, &[("HF_ENDPOINT", c.hub.url.as_str())], None)
}

/// What `argv` prints inside container `name` on node `i` (`docker exec`).
fn exec_in(c: &Cluster, i: usize, name: &str, argv: &[&str]) -> String {
    let out = Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", docker_socket(&c.net, i).display()),
        ])
        .arg("exec")
        .arg(name)
        .args(argv)
        .output()
        .expect("docker exec");
    assert!(
        out.status.success(),
        "docker exec {argv:?} on n{i}: {}",
        describe(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A variable of container `name` on node `i`, as its processes see it.
fn env_in(c: &Cluster, i: usize, name: &str, var: &str) -> String {
    exec_in(c, i, name, &["sh", "-c", &format!("echo \"${var}\"")])
}

fn container(c: &Cluster, job: &str, i: usize) -> String {
    format!("sl-{job}-{}", c.net.hostname(i))
}

fn nothing_of(c: &Cluster, prefix: &str) {
    for i in 1..=c.net.len() {
        let left = containers(&c.net, i, prefix);
        assert!(left.is_empty(), "n{i} has {left:?}");
    }
}

/// A mod that leaves a mark in the container: the file it carries copied to /tmp, and a line
/// naming the address the node's container got.
const MARKER_RUN: &str = "#!/bin/sh\nset -e\ncp \"$(dirname \"$0\")/payload.txt\" /tmp/sim-marker.payload\necho \"sim-marker applied on $VLLM_HOST_IP in $WORKSPACE_DIR\"\n";

const V1: &str = r#"# eugr's v1 format, written for this test.
recipe_version: "1"
name: sim-tiny-v1
model: spark-test/tiny
container: vllm-node-sim
cluster_only: true
mods:
  - mods/sim-marker
defaults:
  port: 8000
  tensor_parallel: 2
  max_model_len: 2048
env:
  SIM_FLAVOUR: v1
command: |
  vllm serve spark-test/tiny --host 0.0.0.0 --port {port} \
    --tensor-parallel-size {tensor_parallel} --max-model-len {max_model_len} \
    --kv-cache-dtype fp8 \
    --speculative-config '{{"method":"mtp","num_speculative_tokens":2}}'
"#;

#[test]
fn a_v1_recipe_serves_across_two_nodes_with_its_mod_applied_in_both_containers() {
    let c = cluster("y");
    let recipe = put(&c, "recipes/sim-v1.yaml", V1, 0o644);
    put(&c, "recipes/mods/sim-marker/run.sh", MARKER_RUN, 0o755);
    put(
        &c,
        "recipes/mods/sim-marker/payload.txt",
        "payload of sim-marker\n",
        0o644,
    );
    // Refused before anything starts (exit 2): a mod no folder holds, a llama-cpp recipe whose
    // model has no GGUF file.
    let missing = put(
        &c,
        "recipes/sim-missing.yaml",
        &V1.replace("mods/sim-marker", "mods/not-there"),
        0o644,
    );
    let out = up(&c, &[&missing, "--dry-run"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("mod \"mods/not-there\" not found; looked in:"),
        "{}",
        describe(&out)
    );
    let llama = put(
        &c,
        "recipes/sim-llama.yaml",
        "recipe_version: \"2\"\nmodel: spark-test/tiny\nruntime: llama-cpp\ncommand: llama-server -hf spark-test/tiny\n",
        0o644,
    );
    let out = up(&c, &[&llama, "-d"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("spark-test/tiny@main has no .gguf model file"),
        "{}",
        describe(&out)
    );
    nothing_of(&c, "sl-");

    let job = "simv1";
    let out = up(
        &c,
        &[
            &recipe,
            "--set",
            "max_model_len=4096",
            "--job",
            job,
            "-d",
            "--timeout",
            "180",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let head_mgmt = c.net.mgmt_addr(1);
    assert!(
        stdout(&out).contains(&format!("ready: http://{head_mgmt}:8000/v1 serves {MODEL}")),
        "{}",
        describe(&out)
    );
    assert!(
        stderr(&out).contains("--image")
            && stderr(&out).contains("replaces the recipe's container vllm-node-sim"),
        "{}",
        describe(&out)
    );
    for i in 1..=2 {
        let name = container(&c, job, i);
        // The mod ran in this very container, before the engine, with the node's address.
        assert_eq!(
            exec_in(&c, i, &name, &["cat", "/tmp/sim-marker.payload"]),
            "payload of sim-marker"
        );
        let log = container_log(&c.net, i, &name);
        let fabric = c.net.fabric_addr(i);
        assert!(
            log.contains(&format!("sim-marker applied on {fabric}")),
            "n{i}: {log}"
        );
        let applied = log
            .find("spark-launch: mod sim-marker: applied")
            .expect("applied");
        let engine = log
            .find("vLLM API server version")
            .expect("the engine started");
        assert!(
            applied < engine,
            "n{i}: the mod ran after the engine: {log}"
        );
        // The recipe's own flags reach every rank verbatim, in order, `--set` applied.
        assert!(
            log.contains(r#"extra=['--max-model-len', '4096', '--kv-cache-dtype', 'fp8', '--speculative-config', '{"method":"mtp","num_speculative_tokens":2}']"#),
            "n{i}: {log}"
        );
        assert_eq!(env_in(&c, i, &name, "SIM_FLAVOUR"), "v1");
    }
    remove_job(&c.net, job);

    // A mod that fails stops the start, its last line shown, and nothing stays behind.
    put(
        &c,
        "recipes/mods/sim-broken/run.sh",
        "#!/bin/sh\necho 'sim-broken: cannot patch /nowhere/model.py'\nexit 3\n",
        0o755,
    );
    let broken = put(
        &c,
        "recipes/sim-broken.yaml",
        &V1.replace("mods/sim-marker", "mods/sim-broken"),
        0o644,
    );
    let job = "simbroken";
    let out = up(&c, &[&broken, "--job", job, "-d", "--timeout", "120"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains(
            "spark-launch: ERROR mod sim-broken failed (exit 3): sim-broken: cannot patch /nowhere/model.py"
        ),
        "{}",
        describe(&out)
    );
    nothing_of(&c, &format!("sl-{job}-"));
}

const V2: &str = r#"# sparkrun's v2 format, written for this test.
recipe_version: "2"
model: spark-test/tiny
runtime: vllm
container: standin-from-recipe:1
min_nodes: 2
max_nodes: 2
mods:
  - sim-marker
pre_exec:
  - echo "pre_exec {served} on $VLLM_HOST_IP" > /tmp/sim-pre.txt
  - test -s /tmp/sim-pre.txt && [[ ! -e /tmp/sim-marker.payload ]]
defaults:
  port: 8000
  tensor_parallel: 2
  served: tiny-v2
env:
  SIM_RANK: "{launch.node_rank}/{launch.num_nodes}@{launch.node_host}"
  SIM_PORT: "{config.port}"
  NCCL_SOCKET_IFNAME: eth-from-recipe
command: vllm serve {model} --tensor-parallel-size {tensor_parallel} --port {port} --served-model-name {served} --max-model-len 2048
"#;

#[test]
fn a_v2_recipe_from_a_registry_renders_its_env_per_node_and_the_derived_fabric_wins() {
    let c = cluster("z");
    put(
        &c,
        "reg/.sparkrun/registry.yaml",
        "registries:\n  - name: sim\n    recipes: sim-recipes\n    mods: sim-mods\n",
        0o644,
    );
    put(&c, "reg/sim-recipes/tiny/sim-v2.yaml", V2, 0o644);
    put(&c, "reg/sim-mods/sim-marker/run.sh", MARKER_RUN, 0o755);
    put(
        &c,
        "reg/sim-mods/sim-marker/payload.txt",
        "payload from the registry\n",
        0o644,
    );
    let reg = format!("/home/{}/reg", support::USER);
    // A registry is a git clone, and git stores links: a mod file that links to the user's
    // private key is refused by name before anything starts, and the key goes nowhere.
    put(
        &c,
        "reg/sim-mods/sim-leak/run.sh",
        "#!/bin/sh\ncat key\n",
        0o755,
    );
    std::os::unix::fs::symlink(
        "../../../.ssh/id_ed25519",
        c.net.home(1).join("reg/sim-mods/sim-leak/key"),
    )
    .unwrap();
    put(
        &c,
        "reg/sim-recipes/tiny/sim-leak.yaml",
        &V2.replace("  - sim-marker", "  - sim-leak"),
        0o644,
    );
    let out = up(&c, &["sim-leak", "--registry", &reg, "--dry-run", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("sim-mods/sim-leak/key links outside")
            && stderr(&out).contains(".ssh/id_ed25519)"),
        "{}",
        describe(&out)
    );
    assert!(
        !describe(&out).contains("PRIVATE KEY"),
        "{}",
        describe(&out)
    );
    let job = "simv2";
    let out = up(
        &c,
        &[
            "sim-v2",
            "--registry",
            &reg,
            "--job",
            job,
            "-d",
            "--timeout",
            "180",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("serves tiny-v2"),
        "{}",
        describe(&out)
    );
    let err = stderr(&out);
    for i in 1..=2 {
        let host = c.net.hostname(i);
        let name = container(&c, job, i);
        let fabric = c.net.fabric_addr(i);
        assert_eq!(
            env_in(&c, i, &name, "SIM_RANK"),
            format!("{}/2@{fabric}", i - 1)
        );
        assert_eq!(env_in(&c, i, &name, "SIM_PORT"), "8000");
        let ifname = env_in(&c, i, &name, "NCCL_SOCKET_IFNAME");
        assert_ne!(ifname, "eth-from-recipe");
        assert!(
            err.contains(&format!(
                "{host}: the recipe's NCCL_SOCKET_IFNAME=eth-from-recipe is not used: spark-launch's NCCL_SOCKET_IFNAME={ifname} for this node wins"
            )),
            "{err}"
        );
        assert_eq!(
            exec_in(&c, i, &name, &["cat", "/tmp/sim-marker.payload"]),
            "payload from the registry"
        );
        // The recipe's pre_exec ran here with bash, rendered, before the mod (its second
        // command checks the mod had not run yet) and before the engine.
        assert_eq!(
            exec_in(&c, i, &name, &["cat", "/tmp/sim-pre.txt"]),
            format!("pre_exec tiny-v2 on {fabric}")
        );
        let log = container_log(&c.net, i, &name);
        let order: Vec<usize> = [
            "spark-launch: pre_exec[2] of 2: done",
            "spark-launch: mod sim-marker: applied",
            "vLLM API server version",
        ]
        .iter()
        .map(|l| {
            log.find(l)
                .unwrap_or_else(|| panic!("n{i}: no `{l}` in {log}"))
        })
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "n{i}: {log}");
    }
    let models = c.net.exec_user(
        1,
        &["curl", "-s", "http://127.0.0.1:8000/v1/models"],
        &[],
        None,
    );
    assert!(stdout(&models).contains("tiny-v2"), "{}", describe(&models));
    // The plan kept for `supervise` holds each mod file's digest, never its bytes.
    let kept = c
        .net
        .home(1)
        .join(".local/state/spark-launch/records/simv2/plan.json");
    let kept = std::fs::read_to_string(&kept).unwrap_or_else(|e| panic!("{}: {e}", kept.display()));
    assert!(kept.contains("\"digest\""), "{kept}");
    assert!(!kept.contains("payload from the registry"), "{kept}");
    assert!(!kept.contains("sim-marker applied on"), "{kept}");
    remove_job(&c.net, job);

    // A pre_exec command that fails stops the start, naming the command and the last lines it
    // printed, and nothing stays behind.
    put(
        &c,
        "reg/sim-recipes/tiny/sim-pre-broken.yaml",
        &V2.replace(
            "  - test -s /tmp/sim-pre.txt",
            "  - \"echo 'patching /opt/x'; echo 'No such file: /opt/x/model.py' >&2; exit 4\"\n  - test -s /tmp/sim-pre.txt",
        ),
        0o644,
    );
    let job = "simprebroken";
    let out = up(
        &c,
        &[
            "sim-pre-broken",
            "--registry",
            &reg,
            "--job",
            job,
            "-d",
            "--timeout",
            "120",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains(
            "spark-launch: ERROR pre_exec[2] `echo 'patching /opt/x'; echo 'No such file: /opt/x/model.py' >&2; exit 4` failed (exit 4): patching /opt/x No such file: /opt/x/model.py"
        ),
        "{}",
        describe(&out)
    );
    nothing_of(&c, &format!("sl-{job}-"));
}
