//! One launch said three ways — the engine's flags, a launch profile, a sparkrun (v2) recipe —
//! planned as a user plans it (`--dry-run --json` on seed 001's two Sparks) through the one
//! merge of the input layer: the plans are the same, node by node, step by step. What only a
//! recipe has (its own section in the plan, the program words it wrote) is compared apart.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SEED: &str = "tests/fixtures/seed-001-two-sparks-both-twins";

fn snapshots() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(SEED);
    ["spark", "spark2"]
        .iter()
        .flat_map(|n| {
            [
                "--snapshot".to_string(),
                format!("{n}={}", root.join(n).display()),
            ]
        })
        .collect()
}

/// The plan the binary prints for `args` (the command and its launch first; no cluster file, no
/// user profiles, offline).
fn plan(args: &[&str]) -> Value {
    planned(args).0
}

/// The plan and what the binary said on stderr.
fn planned(args: &[&str]) -> (Value, String) {
    let cfg = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(&args[..2])
        .args(["--dry-run", "--json"])
        .args(snapshots())
        .args(&args[2..])
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const PROFILE: &str = "\
name: same-launch
description: One launch said three ways.
engine: vllm
image: vllm-node:demo
model:
  id: org/demo-model
tp: 2
nodes: 2
ports:
  api: 8001
engine_args: [--max-model-len, \"4096\", --kv-cache-dtype, fp8]
env:
  DEMO_SETTING: \"1\"
";

const RECIPE: &str = "\
recipe_version: \"2\"
model: org/demo-model
runtime: vllm
container: vllm-node:demo
min_nodes: 2
max_nodes: 2
defaults:
  tensor_parallel: 2
  port: 8001
command: vllm serve {model} --tensor-parallel-size {tensor_parallel} --port {port} --max-model-len 4096 --kv-cache-dtype fp8
";

/// The plan without what only says where it came from: a recipe's section.
fn comparable(mut plan: Value) -> Value {
    if let Some(o) = plan.as_object_mut() {
        o.remove("recipe");
    }
    plan
}

#[test]
fn flags_a_profile_and_a_recipe_that_ask_the_same_plan_the_same_launch() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("same-launch.yaml");
    std::fs::write(&profile, PROFILE).unwrap();
    let recipe = dir.path().join("same-launch-recipe.yaml");
    std::fs::write(&recipe, RECIPE).unwrap();

    let from_flags = plan(&[
        "vllm",
        "org/demo-model",
        "--tp",
        "2",
        "--image",
        "vllm-node:demo",
        "--port",
        "8001",
        "--gpus-per-node",
        "1",
        "--job",
        "same-launch",
        "--env",
        "DEMO_SETTING=1",
        "--",
        "--max-model-len",
        "4096",
        "--kv-cache-dtype",
        "fp8",
    ]);
    let from_profile = plan(&["up", profile.to_str().unwrap()]);
    let from_recipe = plan(&[
        "up",
        recipe.to_str().unwrap(),
        "--job",
        "same-launch",
        "--gpus-per-node",
        "1",
        "--env",
        "DEMO_SETTING=1",
    ]);
    assert_eq!(comparable(from_flags.clone()), comparable(from_profile));
    assert_eq!(comparable(from_flags), comparable(from_recipe.clone()));
    // The recipe's own part says where it came from, and nothing in it changes the launch.
    let part = &from_recipe["recipe"];
    assert_eq!(part["format"], "v2", "{part}");
}

#[test]
fn a_flag_over_a_profile_s_value_wins_and_the_warning_names_both() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("same-launch.yaml");
    std::fs::write(
        &profile,
        PROFILE.replace("image: vllm-node:demo\n", "image: vllm-node:old\n"),
    )
    .unwrap();
    let (p, stderr) = planned(&["up", profile.to_str().unwrap(), "--image", "vllm-node:demo"]);
    assert!(
        stderr.lines().any(|w| {
            w.starts_with("warning: ") && w.ends_with(
            "same-launch.yaml: --image vllm-node:demo replaces the profile's image vllm-node:old"
        )
        }),
        "{stderr}"
    );
    let images: Vec<&Value> = p["job"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["launch"]["container"]["image"])
        .collect();
    assert!(
        !images.is_empty() && images.iter().all(|i| *i == "vllm-node:demo"),
        "{images:?}"
    );
}
