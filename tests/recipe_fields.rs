//! Recipe fields as each recipe's own runner treats them, planned as a user plans them:
//! `spark-launch up FILE --dry-run --json` on seed 001's two Sparks, the binary run as a user
//! runs it (no cluster file, no user profiles, offline). Each recipe here is written for the
//! test in the shape of the public recipe it names (eugr/spark-vllm-docker's recipes at
//! 358bf26, sparkrun's registries); none is copied.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SEED: &str = "tests/fixtures/seed-001-two-sparks-both-twins";

fn snapshots(nodes: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(SEED);
    nodes
        .iter()
        .flat_map(|n| {
            [
                "--snapshot".to_string(),
                format!("{n}={}", root.join(n).display()),
            ]
        })
        .collect()
}

/// What the binary answered: its exit code, the plan (when it printed one) and stderr.
struct Answer {
    code: Option<i32>,
    plan: Value,
    stdout: String,
    stderr: String,
}

/// `spark-launch up FILE --dry-run --json ARGS…` on `nodes` of seed 001, `text` written to
/// FILE (named `name`).
fn up(name: &str, text: &str, nodes: &[&str], args: &[&str]) -> Answer {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(name), text).unwrap();
    up_in(dir.path(), name, nodes, args, true)
}

/// `spark-launch up DIR/NAME --dry-run [--json] ARGS…` on `nodes` of seed 001.
fn up_in(dir: &Path, name: &str, nodes: &[&str], args: &[&str], json: bool) -> Answer {
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .arg("up")
        .arg(dir.join(name))
        .arg("--dry-run")
        .args(json.then_some("--json"))
        .args(snapshots(nodes))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("HOME", dir)
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap();
    Answer {
        code: out.status.code(),
        plan: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The plan of a launch that must plan.
fn plans(name: &str, text: &str, nodes: &[&str], args: &[&str]) -> Answer {
    let a = up(name, text, nodes, args);
    assert_eq!(a.code, Some(0), "{name} did not plan:\n{}", a.stderr);
    a
}

fn recipe_warnings(plan: &Value) -> Vec<String> {
    plan["recipe"]["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn has(warnings: &[String], part: &str) -> bool {
    warnings.iter().any(|w| w.contains(part))
}

/// eugr's nemotron-3-super-nvfp4.yaml (358bf26) writes `container:` twice at the top level;
/// PyYAML, which eugr's runner and sparkrun read recipes with, keeps the last. `defaults` here
/// also gives a key twice, one level down.
const CONTAINER_TWICE: &str = r#"# Recipe: a vLLM recipe that names its container twice
recipe_version: "1"
name: Demo-Container-Twice
model: org/demo-nvfp4
container: vllm-node-old
cluster_only: false
solo_only: false

env:
  VLLM_ALLOW_LONG_MAX_MODEL_LEN: 1

container: vllm-node
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 2
  max_model_len: 4096
  max_model_len: 8192

command: |
  vllm serve org/demo-nvfp4 \
  --host {host} \
  --port {port} \
  --max-model-len {max_model_len} \
  --tensor-parallel-size {tensor_parallel} \
  --distributed-executor-backend ray
"#;

#[test]
fn a_key_given_twice_takes_the_last_value_and_the_plan_warns_naming_both_lines() {
    let a = plans(
        "demo-container-twice.yaml",
        CONTAINER_TWICE,
        &["spark", "spark2"],
        &[],
    );
    let nodes = &a.plan["job"]["nodes"];
    for n in nodes.as_array().unwrap() {
        assert_eq!(n["launch"]["container"]["image"], "vllm-node", "{n}");
    }
    let warnings = recipe_warnings(&a.plan);
    for expected in [
        "demo-container-twice.yaml: container: given more than once (lines 5 and 12): the last value is used, as the recipe runners (PyYAML) read it",
        "demo-container-twice.yaml: defaults.max_model_len: given more than once (lines 17 and 18): the last value is used, as the recipe runners (PyYAML) read it",
    ] {
        assert!(has(&warnings, expected), "no `{expected}` in {warnings:?}");
        assert!(a.stderr.contains(expected), "{}", a.stderr);
    }
    let head = nodes[0]["launch"]["container"]["command"].to_string();
    assert!(head.contains(r#""--max-model-len","8192""#), "{head}");
}

/// A file with `recipe_version` is a recipe whatever else it holds: here also a launch
/// profile's `engine:` and `tp:` (fields a recipe does not have), and a key given twice.
const VERSIONED_WITH_PROFILE_FIELDS: &str = r#"recipe_version: "2"
name: demo-versioned
engine: vllm
tp: 1
model: org/demo
runtime: vllm
container: vllm-node
container: vllm-node
command: vllm serve {model} --port 8000
"#;

/// A launch profile, in the shape of `launch-profiles/llama-70b-tp2.yaml`.
const PROFILE: &str = "\
name: demo-profile
description: A launch profile with no recipe_version.
engine: vllm
image: vllm-node:demo
model:
  id: org/demo-model
tp: 1
nodes: 1
env:
  DEMO_SETTING: \"1\"
";

#[test]
fn a_file_with_recipe_version_is_read_as_a_recipe_and_one_without_stays_a_launch_profile() {
    let recipe = plans(
        "versioned.yaml",
        VERSIONED_WITH_PROFILE_FIELDS,
        &["spark"],
        &[],
    );
    assert_eq!(recipe.plan["recipe"]["format"], "v2", "{}", recipe.stderr);
    let warnings = recipe_warnings(&recipe.plan);
    assert!(
        has(&warnings, "engine: not a sparkrun recipe field"),
        "{warnings:?}"
    );
    assert!(
        !recipe.stderr.contains("unknown field"),
        "{}",
        recipe.stderr
    );
    // With a byte-order mark and Windows line ends, as an editor may save it.
    let marked = format!(
        "\u{feff}{}",
        VERSIONED_WITH_PROFILE_FIELDS.replace('\n', "\r\n")
    );
    let recipe = plans("marked.yaml", &marked, &["spark"], &[]);
    assert_eq!(recipe.plan["recipe"]["format"], "v2", "{}", recipe.stderr);

    let profile = plans("demo-profile.yaml", PROFILE, &["spark"], &[]);
    assert!(profile.plan.get("recipe").is_none(), "{}", profile.plan);
    assert_eq!(profile.plan["model"]["repo"], "org/demo-model");
    let head = profile.plan["job"]["nodes"][0]["launch"]["container"].clone();
    assert_eq!(head["env"]["DEMO_SETTING"], "1", "{head}");
}

/// The shape of eugr's gemma4-26b-a4b-nvfp4.yaml (358bf26): `solo_only: true` with
/// `tensor_parallel: 2` and the Ray executor in the command. eugr's runner runs it solo: one
/// node, tensor_parallel 1 (the user's `--tp` aside), the executor flag dropped.
const SOLO_ONLY: &str = r#"recipe_version: "1"
name: Demo-Solo-Only
model: org/demo-solo-nvfp4
cluster_only: false
solo_only: true
container: vllm-node
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 2
command: |
  vllm serve org/demo-solo-nvfp4 \
    --port {port} \
    --host {host} \
    -tp {tensor_parallel} --distributed-executor-backend ray
"#;

#[test]
fn a_solo_only_recipe_runs_on_one_node_with_tensor_parallel_one_as_eugrs_runner_runs_it() {
    let a = plans("demo-solo.yaml", SOLO_ONLY, &["spark", "spark2"], &[]);
    assert_eq!(a.plan["tp"], 1, "{}", a.stderr);
    assert_eq!(a.plan["nodes"], serde_json::json!(["spark"]));
    assert_eq!(a.plan["unused"], serde_json::json!(["spark2"]));
    assert_eq!(a.plan["mode"], "native");
    let warnings = recipe_warnings(&a.plan);
    for expected in [
        "demo-solo.yaml: solo_only: the recipe runs solo (one node), so tensor_parallel 2 becomes 1, as eugr's runner runs a solo recipe (--set tensor_parallel=N gives another)",
        "demo-solo.yaml: command: --distributed-executor-backend ray dropped: a solo_only recipe runs on one node, with no Ray, as eugr's runner runs it",
    ] {
        assert!(has(&warnings, expected), "no `{expected}` in {warnings:?}");
    }
    let head = a.plan["job"]["nodes"][0]["launch"]["container"]["command"].to_string();
    assert!(head.contains(r#""--tensor-parallel-size","1""#), "{head}");
    assert!(!head.contains("ray"), "{head}");
    // eugr's runner ignores --ray in solo mode, and so does spark-launch, said.
    let ray = plans(
        "demo-solo.yaml",
        SOLO_ONLY,
        &["spark", "spark2"],
        &["--ray"],
    );
    assert_eq!(ray.plan["mode"], "native", "{}", ray.stderr);
    assert!(
        has(
            &recipe_warnings(&ray.plan),
            "--ray is not used: the recipe runs solo (one node), and eugr's runner ignores --ray in solo mode"
        ),
        "{:?}",
        recipe_warnings(&ray.plan)
    );
    // A tensor-parallel size that needs two nodes is refused: the recipe runs on one.
    let two = up(
        "demo-solo.yaml",
        SOLO_ONLY,
        &["spark", "spark2"],
        &["--tp", "2"],
    );
    assert_eq!(two.code, Some(2), "{}", two.stderr);
    assert!(two.stderr.contains("max_nodes"), "{}", two.stderr);
}

/// The shape of eugr's two-node recipes (358bf26: `-tp {tensor_parallel}` with
/// `tensor_parallel: 2` and `--distributed-executor-backend ray` in the command).
const TWO_NODE_RAY: &str = r#"recipe_version: "1"
name: Demo-Two-Node
model: org/demo-two
container: vllm-node
cluster_only: true
defaults:
  port: 8000
  tensor_parallel: 2
command: |
  vllm serve org/demo-two \
    --port {port} \
    --tensor-parallel-size {tensor_parallel} \
    --distributed-executor-backend ray \
    --max-model-len 4096
"#;

#[test]
fn an_eugr_recipe_on_a_one_node_cluster_runs_solo_with_tensor_parallel_one_as_eugrs_runner_runs_it()
{
    // A plain two-node recipe (no cluster_only, no solo_only): eugr's runner runs it solo on
    // one node, `tensor_parallel` 1 unless the user gives one, the executor flag dropped.
    let plain = TWO_NODE_RAY.replace("cluster_only: true\n", "");
    let a = plans("demo-plain.yaml", &plain, &["spark"], &[]);
    assert_eq!(a.plan["tp"], 1, "{}", a.stderr);
    assert_eq!(a.plan["nodes"], serde_json::json!(["spark"]));
    assert!(!starts_ray(&a.plan), "{}", a.plan);
    let warnings = recipe_warnings(&a.plan);
    for expected in [
        "demo-plain.yaml: defaults.tensor_parallel: the cluster has one node, so the recipe runs solo and tensor_parallel 2 becomes 1, as eugr's runner runs a recipe on one node (--set tensor_parallel=N gives another)",
        "demo-plain.yaml: command: --distributed-executor-backend ray dropped: the cluster has one node, so the recipe runs solo, with no Ray, as eugr's runner runs it",
    ] {
        assert!(has(&warnings, expected), "no `{expected}` in {warnings:?}");
    }
    assert!(
        a.stderr.contains("becomes 1"),
        "said before it runs: {}",
        a.stderr
    );
    let head = a.plan["job"]["nodes"][0]["launch"]["container"]["command"].to_string();
    assert!(head.contains(r#""--tensor-parallel-size","1""#), "{head}");
    // --ray is ignored there, as eugr's runner ignores it in solo mode (said).
    let ray = plans("demo-plain.yaml", &plain, &["spark"], &["--ray"]);
    assert_eq!(ray.plan["mode"], "native", "{}", ray.stderr);
    assert!(
        has(
            &recipe_warnings(&ray.plan),
            "--ray is not used: the recipe runs solo"
        ),
        "{:?}",
        recipe_warnings(&ray.plan)
    );
    // The user's tensor_parallel is kept, and then needs a node this cluster lacks.
    let set = up(
        "demo-plain.yaml",
        &plain,
        &["spark"],
        &["--set", "tensor_parallel=2"],
    );
    assert_eq!(set.code, Some(2), "{}", set.stderr);
    assert!(!set.stderr.contains("becomes 1"), "{}", set.stderr);
    // On two nodes it runs as written; a cluster_only recipe is not run solo (refused on one
    // node, as eugr's runner refuses it).
    let two = plans("demo-plain.yaml", &plain, &["spark", "spark2"], &[]);
    assert_eq!(two.plan["tp"], 2, "{}", two.stderr);
    assert!(!has(&recipe_warnings(&two.plan), "becomes 1"));
    let cluster_only = up("demo-two.yaml", TWO_NODE_RAY, &["spark"], &[]);
    assert_eq!(cluster_only.code, Some(2), "{}", cluster_only.stderr);
    assert!(
        !cluster_only.stderr.contains("becomes 1"),
        "{}",
        cluster_only.stderr
    );
}

/// Whether any node of the plan starts Ray: a Ray head or member script, or Ray's variables.
fn starts_ray(plan: &Value) -> bool {
    plan["job"]["nodes"].as_array().unwrap().iter().any(|n| {
        let c = &n["launch"]["container"];
        let command = c["command"].to_string();
        command.contains("spark-launch-ray")
            || command.contains(r#""--distributed-executor-backend","ray""#)
            || c["env"].get("SL_RAY_PORT").is_some()
            || c["env"].get("SL_RAY_HEAD").is_some()
    })
}

#[test]
fn an_eugr_recipe_on_two_nodes_runs_without_ray_as_eugrs_runner_does_and_ray_keeps_it() {
    let a = plans("demo-two.yaml", TWO_NODE_RAY, &["spark", "spark2"], &[]);
    assert_eq!(a.plan["mode"], "native", "{}", a.stderr);
    assert!(!starts_ray(&a.plan), "{}", a.plan);
    for n in a.plan["job"]["nodes"].as_array().unwrap() {
        let command = n["launch"]["container"]["command"].to_string();
        assert!(command.contains(r#""--nnodes","2""#), "{command}");
    }
    let dropped = "demo-two.yaml: command: --distributed-executor-backend ray dropped, as eugr's runner does without --ray: vLLM runs in its native multi-node mode; give --ray to keep it";
    assert!(
        has(&recipe_warnings(&a.plan), dropped),
        "{:?}",
        recipe_warnings(&a.plan)
    );
    assert!(a.stderr.contains(dropped), "{}", a.stderr);

    let kept = plans(
        "demo-two.yaml",
        TWO_NODE_RAY,
        &["spark", "spark2"],
        &["--ray"],
    );
    assert_eq!(kept.plan["mode"], "ray", "{}", kept.stderr);
    assert!(starts_ray(&kept.plan));
    assert!(!has(&recipe_warnings(&kept.plan), "dropped"));
}

#[test]
fn a_sparkrun_recipe_keeps_the_ray_its_runtime_asks_for() {
    // sparkrun runs `runtime: vllm-ray` over Ray whatever the command says.
    let text = "recipe_version: \"2\"\nmodel: org/demo-two\nruntime: vllm-ray\ncontainer: vllm-node\nmin_nodes: 2\ndefaults:\n  tensor_parallel: 2\ncommand: vllm serve {model} -tp {tensor_parallel}\n";
    let a = plans("demo-ray.yaml", text, &["spark", "spark2"], &[]);
    assert_eq!(a.plan["mode"], "ray", "{}", a.stderr);
    assert!(starts_ray(&a.plan));
}

/// A sparkrun recipe with `pre_exec`, in the shape of the community registry's recipes that
/// patch their image before serving (a list of `python3 /opt/….py` commands), with a mod next
/// to it: sparkrun runs the recipe's commands, then each mod, in every container, before the
/// engine.
const PRE_EXEC: &str = r#"recipe_version: "2"
model: org/demo-two
runtime: vllm
container: vllm-node
min_nodes: 2
defaults:
  tensor_parallel: 2
  patch_dir: /opt/demo
mods:
  - demo-mod
pre_exec:
  - python3 {patch_dir}/patch_one.py
  - pip install --no-deps demo-extra==1.0
command: vllm serve {model} -tp {tensor_parallel}
"#;

#[test]
fn pre_exec_runs_in_every_container_before_the_mods_and_the_engine_and_the_plan_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("demo-pre.yaml"), PRE_EXEC).unwrap();
    std::fs::create_dir_all(dir.path().join("mods/demo-mod")).unwrap();
    std::fs::write(
        dir.path().join("mods/demo-mod/run.sh"),
        "#!/bin/sh\necho mod\n",
    )
    .unwrap();
    let a = up_in(dir.path(), "demo-pre.yaml", &["spark", "spark2"], &[], true);
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    let commands = [
        "python3 /opt/demo/patch_one.py",
        "pip install --no-deps demo-extra==1.0",
    ];
    assert_eq!(a.plan["recipe"]["pre_exec"], serde_json::json!(commands));
    for n in a.plan["job"]["nodes"].as_array().unwrap() {
        let argv: Vec<String> = n["launch"]["container"]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        let at = |word: &str| argv.iter().position(|w| w == word);
        let pre = at("spark-launch-pre-exec").expect("the pre_exec script");
        assert_eq!(
            argv[pre + 1..pre + 4],
            ["2", commands[0], commands[1]],
            "{argv:?}"
        );
        let mods = at("spark-launch-mods").expect("the mods' script");
        let engine = at("vllm").expect("the engine");
        assert!(pre < mods && mods < engine, "{argv:?}");
    }
    let text = up_in(
        dir.path(),
        "demo-pre.yaml",
        &["spark", "spark2"],
        &[],
        false,
    );
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(
        text.stdout.contains(
            "pre_exec (run in every container first, in order, each with bash -c):\n  [1] python3 /opt/demo/patch_one.py\n  [2] pip install --no-deps demo-extra==1.0\n"
        ),
        "{}",
        text.stdout
    );
    for node in ["spark (head)", "spark2 (worker)"] {
        let part = text.stdout.split(node).nth(1).unwrap_or_default();
        let command = part
            .lines()
            .find(|l| l.trim_start().starts_with("command"))
            .unwrap_or_default();
        assert!(
            command.contains("spark-launch-pre-exec 2 'python3 /opt/demo/patch_one.py' 'pip install --no-deps demo-extra==1.0'"),
            "{node}: {command}"
        );
    }
}

/// Every `{launch.…}` field sparkrun fills in a recipe's env (its list: num_nodes, node_rank,
/// node_host, model_path, model_revision, cluster_id, runtime_cache_dir), the runtime cache
/// aside: each one spark-launch knows has its value on every node.
const LAUNCH_FIELDS: &str = r#"recipe_version: "2"
model: org/demo-two
model_revision: 0123456789abcdef0123456789abcdef01234567
runtime: vllm
container: vllm-node
min_nodes: 2
defaults:
  tensor_parallel: 2
env:
  DEMO_NODES: "{launch.num_nodes}"
  DEMO_RANK: "{launch.node_rank}"
  DEMO_HOST: "{launch.node_host}"
  DEMO_PATH: "{launch.model_path}"
  DEMO_REVISION: "{launch.model_revision}"
  DEMO_CLUSTER: "{launch.cluster_id}"
command: vllm serve {model} -tp {tensor_parallel}
"#;

#[test]
fn every_launch_field_spark_launch_knows_is_filled_per_node_and_one_it_cannot_know_is_named() {
    let a = plans(
        "demo-launch.yaml",
        LAUNCH_FIELDS,
        &["spark", "spark2"],
        &["--job", "demo-job"],
    );
    let nodes = a.plan["job"]["nodes"].as_array().unwrap();
    let path = "/root/.cache/huggingface/hub/models--org--demo-two/snapshots/0123456789abcdef0123456789abcdef01234567";
    for (rank, (n, host)) in nodes
        .iter()
        .zip(["192.168.177.11", "192.168.177.12"])
        .enumerate()
    {
        let env = &n["launch"]["container"]["env"];
        assert_eq!(env["DEMO_NODES"], "2", "{env}");
        assert_eq!(env["DEMO_RANK"], rank.to_string());
        assert_eq!(env["DEMO_HOST"], host);
        assert_eq!(env["DEMO_PATH"], path);
        assert_eq!(
            env["DEMO_REVISION"],
            "0123456789abcdef0123456789abcdef01234567"
        );
        assert_eq!(env["DEMO_CLUSTER"], "demo-job");
    }
    // A model in a local folder has no Hub revision: named, with the fix.
    let local = LAUNCH_FIELDS
        .replace("model: org/demo-two", "model: /srv/models/demo-two")
        .replace(
            "model_revision: 0123456789abcdef0123456789abcdef01234567\n",
            "",
        );
    let e = up("demo-local.yaml", &local, &["spark", "spark2"], &[]);
    assert_eq!(e.code, Some(2), "{}", e.stderr);
    assert!(
        e.stderr.contains(
            "env.DEMO_REVISION: {launch.model_revision} has no value on node 0: the model is a local folder, which has no Hub revision (serve it from the Hub, or write the value out)"
        ),
        "{}",
        e.stderr
    );
    // A field sparkrun does not fill either is refused when the recipe is read.
    let unknown = LAUNCH_FIELDS.replace("{launch.cluster_id}", "{launch.head_ip}");
    let e = up("demo-unknown.yaml", &unknown, &["spark", "spark2"], &[]);
    assert_eq!(e.code, Some(2), "{}", e.stderr);
    assert!(
        e.stderr
            .contains("{launch.head_ip} is not a launch field (known: num_nodes, node_rank, node_host, model_path, model_revision, runtime_cache_dir, cluster_id)"),
        "{}",
        e.stderr
    );
}
