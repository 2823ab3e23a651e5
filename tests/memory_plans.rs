//! The memory plan as a user meets it: `vllm`, `sglang` and `up` on the snapshots of two Sparks
//! (`tests/fixtures/seed-001-two-sparks-both-twins`: a GB10 each, `MemTotal` 124830604 kB)
//! with a local model folder (a real model's `config.json` from `tests/fixtures/models`, and a
//! `model.safetensors.index.json` whose `metadata.total_size` says how large the weights are).
//! A launch that fits is planned with its figures per node and every container capped; one
//! that does not is refused before anything is copied or started (exit 2) with the figures
//! and the ways out; `--allow-overcommit` plans it anyway, saying so; what cannot be known is
//! said, never guessed.

use std::path::Path;
use std::process::{Command, Output};

mod support;
use support::fixtures::snapshot_args;

/// Runs the binary with no cluster file, no user profiles and no Hub.
fn run(args: &[String]) -> Output {
    let cfg = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", cfg.path().join("hf"))
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `ENGINE FOLDER --tp 2 [extra] --dry-run --json` on the two Sparks, then `-- engine_args`.
fn plan(engine: &str, folder: &Path, flags: &[&str], engine_args: &[&str]) -> Output {
    let mut a: Vec<String> = [engine, &folder.display().to_string(), "--tp", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(flags.iter().map(|s| s.to_string()));
    a.extend(["--dry-run".to_string(), "--json".to_string()]);
    a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    if !engine_args.is_empty() {
        a.push("--".into());
        a.extend(engine_args.iter().map(|s| s.to_string()));
    }
    run(&a)
}

/// A model folder with `model`'s config.json (from tests/fixtures/models) and an index whose
/// `metadata.total_size` is `bytes` (no shard files: the plan reads the index).
fn folder(model: &str, bytes: Option<u64>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(model)
        .join("config.json");
    std::fs::copy(config, dir.path().join("config.json")).unwrap();
    if let Some(b) = bytes {
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            format!(r#"{{"metadata": {{"total_size": {b}}}, "weight_map": {{}}}}"#),
        )
        .unwrap();
    }
    dir
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

const MINIMAX: &str = "nvidia--MiniMax-M2.7-NVFP4";

#[test]
fn a_600_gb_model_on_two_sparks_is_refused_with_the_figures_and_the_ways_out_and_overcommit_plans_it_anyway()
 {
    let m = folder(MINIMAX, Some(600_000_000_000));
    let out = plan("vllm", m.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let v = json(&out);
    let problem = v["refused"][0]["problem"].as_str().unwrap();
    // 300 GB of weights per node (279.4 GiB), the KV cache of one 196608-token sequence at
    // tp 2 (23.25 GiB), the 4 GiB reserve; vLLM takes 0.9 of the node's 119.05 GiB.
    assert!(
        problem.contains(
            "spark needs 306.6 GiB (weights 279.4 + KV cache 23.2 for 1 × 196608 tokens + reserve 4.0) of its 119.0 GiB, but vLLM takes at most 107.1 GiB there"
        ),
        "{problem}"
    );
    let fix = v["refused"][0]["fix"].as_str().unwrap();
    assert!(fix.contains("more nodes: 8 nodes (--tp 8)"), "{fix}");
    assert!(fix.contains("quantized variant"), "{fix}");
    assert!(fix.contains("--allow-overcommit"), "{fix}");
    let out = plan("vllm", m.path(), &["--allow-overcommit"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v = json(&out);
    assert_eq!(v["memory"]["overcommit"], true, "{v}");
    assert_eq!(v["memory"]["nodes"]["spark"]["fits"], "no", "{v}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("starting anyway (--allow-overcommit)"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_model_that_fits_is_planned_with_its_memory_per_node_and_every_container_capped() {
    let m = folder(MINIMAX, Some(120 << 30));
    let out = plan("vllm", m.path(), &[], &["--max-model-len", "32768"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v = json(&out);
    let spark = &v["memory"]["nodes"]["spark"];
    assert_eq!(spark["weights_gib"], 60.0, "{v}");
    assert_eq!(spark["kv_cache_gib"], 3.88, "{v}");
    assert_eq!(spark["reserve_gib"], 4.0, "{v}");
    assert_eq!(spark["need_gib"], 67.88, "{v}");
    assert_eq!(spark["have_gib"], 119.05, "{v}");
    assert_eq!(spark["limit_gib"], 113.05, "{v}");
    assert_eq!(spark["fits"], "yes", "{v}");
    assert_eq!(
        v["memory"]["weights_from"],
        "model.safetensors.index.json metadata.total_size"
    );
    // Every container carries the cap: MemTotal less the host's 6 GiB.
    let cap = 124_830_604u64 * 1024 - (6 << 30);
    for n in v["job"]["nodes"].as_array().unwrap() {
        assert_eq!(n["launch"]["container"]["memory_limit"], cap, "{n}");
    }
    // --memory-limit changes it (and the plan's figure); vLLM's default 0.9 of the node would
    // then allocate past the cap, so the launch says to give it a share under it.
    let out = plan(
        "vllm",
        m.path(),
        &["--memory-limit", "100G"],
        &["--max-model-len", "32768"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let fix = json(&out)["refused"][0]["fix"].to_string();
    assert!(
        fix.contains("a share under the cap: --gpu-memory-utilization 0.83 or less"),
        "{fix}"
    );
    let out = plan(
        "vllm",
        m.path(),
        &["--memory-limit", "100G"],
        &[
            "--max-model-len",
            "32768",
            "--gpu-memory-utilization",
            "0.8",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v = json(&out);
    assert_eq!(v["memory"]["nodes"]["spark2"]["limit_gib"], 100.0, "{v}");
    assert_eq!(
        v["job"]["nodes"][1]["launch"]["container"]["memory_limit"],
        100u64 << 30
    );
    // The text plan says it too.
    let mut a: Vec<String> = [
        "vllm",
        &m.path().display().to_string(),
        "--tp",
        "2",
        "--dry-run",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    a.extend(["--", "--max-model-len", "32768"].map(String::from));
    let out = run(&a);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "spark: need 67.9 GiB (weights 60.0 + KV cache 3.9 + reserve 4.0) · engine 107.1 GiB (0.9) · cap 113.0 GiB · has 119.0 GiB · fits yes"
        ),
        "{}",
        text(&out)
    );
}

#[test]
fn a_model_that_fits_only_with_a_shorter_context_is_refused_naming_the_context_that_fits() {
    // 180 GiB of weights: 90 GiB per node; the model's own 196608-token context needs 23.25
    // GiB of KV cache per node, more than the 13.1 GiB vLLM's 0.9 leaves.
    let m = folder(MINIMAX, Some(180 << 30));
    let out = plan("vllm", m.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let v = json(&out);
    let fix = v["refused"][0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("a shorter context: --max-model-len 110592 fits"),
        "{fix}"
    );
    let out = plan("vllm", m.path(), &[], &["--max-model-len", "110592"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // SGLang names its own flag for the same way out.
    let out = plan("sglang", m.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        json(&out)["refused"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("a shorter context: --context-length"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_kv_cache_grows_with_the_context_the_engine_is_given() {
    let m = folder(MINIMAX, Some(40 << 30));
    let kv = |len: &str| {
        let out = plan("vllm", m.path(), &[], &["--max-model-len", len]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        json(&out)["memory"]["nodes"]["spark"]["kv_cache_gib"]
            .as_f64()
            .unwrap()
    };
    let (short, long) = (kv("8192"), kv("131072"));
    assert!(short < long, "{short} {long}");
    assert!((long / short - 16.0).abs() < 0.1, "{short} {long}");
}

#[test]
fn what_cannot_be_read_is_said_as_not_known_and_nothing_is_refused_for_it() {
    // A folder with no config.json and no index: planned, with both figures not known.
    let empty = tempfile::tempdir().unwrap();
    let out = plan("vllm", empty.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v = json(&out);
    let spark = &v["memory"]["nodes"]["spark"];
    assert!(
        spark["weights_gib"].is_null() && spark["need_gib"].is_null(),
        "{v}"
    );
    assert_eq!(spark["fits"], "not_known");
    // The cap does not depend on the model: it is there all the same.
    assert_eq!(spark["limit_gib"], 113.05);
    let why = v["memory"]["not_known"].to_string();
    assert!(why.contains("the weights of"), "{why}");
    assert!(why.contains("the KV cache of"), "{why}");
}

#[test]
fn a_memory_limit_above_the_node_s_memory_is_refused_as_capping_nothing() {
    let m = folder(MINIMAX, Some(40 << 30));
    let out = plan(
        "vllm",
        m.path(),
        &["--memory-limit", "500G"],
        &["--max-model-len", "8192"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        json(&out)["refused"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("would cap nothing"),
        "{}",
        text(&out)
    );
    let out = run(&[
        "vllm".to_string(),
        "org/m".into(),
        "--memory-limit".into(),
        "lots".into(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("110G"), "{}", text(&out));
}
