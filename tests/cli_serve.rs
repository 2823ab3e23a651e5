//! `vllm`, `trtllm`, `up`, `profiles`, `compose` and `model pull` as a user runs them on
//! snapshots: plans on stdout (pure JSON with `--json`), refusals and invalid profiles exit 2
//! with the file, line and field, nothing touched.

use std::path::Path;
use std::process::{Command, Output};

mod support;
use support::fixtures;
use support::fixtures::snapshot_args;

/// Runs the binary with no cluster file and no user profiles (an empty config folder).
fn run(args: &[String]) -> Output {
    let cfg = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", cfg.path())
        // Dry runs on snapshots read a Hub model's config.json from the Hub unless told not to:
        // these tests must not depend on the internet.
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap()
}

fn args(prefix: &[&str], fixture: &str) -> Vec<String> {
    let mut a: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    a.extend(snapshot_args(fixture));
    a
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_readme_demo_plans_the_smoke_test_on_two_bundled_sparks() {
    // The README's first command, verbatim apart from the binary's path.
    let out = run(&args(
        &["up", "smoke-test", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.starts_with(
            "vllm (native) · Qwen/Qwen2.5-0.5B-Instruct@main · tp 2 × pp 1 on spark, spark2"
        ),
        "{plan}"
    );
    assert!(
        plan.contains(
            "--nnodes 2 --node-rank 1 --master-addr 192.168.177.11 --master-port 29501 --headless"
        ),
        "{plan}"
    );
    assert!(
        plan.contains("env      NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1"),
        "{plan}"
    );
    assert!(plan.contains("device   /dev/infiniband"), "{plan}");
    assert!(
        plan.contains("wait (≤ 20m00s) until http://127.0.0.1:8000/health answers on spark"),
        "{plan}"
    );
}

#[test]
fn a_dry_run_with_json_prints_only_the_whole_plan() {
    let mut a = args(
        &[
            "vllm",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--tp",
            "2",
            "--ray",
            "--dry-run",
            "--json",
        ],
        "seed-001-two-sparks-both-twins",
    );
    a.extend(["--", "--max-model-len", "4096"].map(String::from));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is pure JSON");
    assert_eq!(v["engine"], "vllm");
    assert_eq!(v["mode"], "ray");
    assert_eq!(v["endpoint"]["url"], "http://192.168.1.11:8000/v1");
    let head = &v["job"]["nodes"][0]["launch"]["container"];
    assert_eq!(head["network"], "host");
    assert_eq!(head["ipc"], "host");
    assert_eq!(head["env"]["RAY_memory_monitor_refresh_ms"], "0");
    let cmd: Vec<&str> = head["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        &cmd[cmd.len() - 2..],
        ["--max-model-len", "4096"],
        "extra args verbatim, last"
    );
    let steps: Vec<&str> = v["job"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "check-ports",
            "check-reachable",
            "ensure-image",
            "check-nccl",
            "stage-model",
            "ensure-folders",
            "start",
            "wait-ray",
            "wait-serving"
        ]
    );
}

#[test]
fn a_shape_the_cluster_cannot_hold_is_refused_with_exit_2_and_json() {
    let out = run(&args(
        &["trtllm", "org/m", "--tp", "4", "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["refused"][0]["problem"]
            .as_str()
            .unwrap()
            .contains("needs 4 nodes"),
        "{v}"
    );
}

#[test]
fn snapshots_without_dry_run_are_refused() {
    let out = run(&args(
        &["vllm", "org/m", "--tp", "2"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("add --dry-run"));
}

#[test]
fn an_invalid_profile_file_names_the_file_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.yaml");
    std::fs::write(
        &file,
        "name: broken\ndescription: x\nengine: vllm\nmodel:\n  id: org/m\ntp: 3\nnodes: 2\nengine_args: [--port, \"9000\"]\n",
    )
    .unwrap();
    let path = file.display().to_string();
    let out = run(&args(
        &["up", &path, "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{path}:6: tp: tp × pp = 3 × 1 = 3 GPUs")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{path}:8: engine_args[0]: extra argument --port")),
        "{err}"
    );

    std::fs::write(&file, "name: broken\nengine: vllm\ntpp: 2\n").unwrap();
    let out = run(&args(
        &["up", &path, "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("{path}:3:1: unknown field `tpp`")),
        "{}",
        text(&out)
    );
}

#[test]
fn set_changes_a_bundled_profile_and_an_unknown_profile_lists_the_known_ones() {
    let out = run(&args(
        &[
            "up",
            "smoke-test",
            "--set",
            "engine_args[1]=0.5",
            "--dry-run",
            "--json",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cmd = v["job"]["nodes"][0]["launch"]["container"]["command"].to_string();
    assert!(
        cmd.contains("\"--gpu-memory-utilization\",\"0.5\""),
        "{cmd}"
    );

    let out = run(&args(
        &["up", "no-such-demo", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("smoke-test"));
}

#[test]
fn a_ready_timeout_past_30_days_from_set_is_refused_with_exit_2_naming_the_field() {
    // Seen once: the flag was bounded, the profile field was not (a panic, exit 101,
    // after containers had started).
    let out = run(&args(
        &[
            "up",
            "smoke-test",
            "--set",
            "ready_timeout_s=18446744073709551615",
            "--dry-run",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "ready_timeout_s: 18446744073709551615 seconds is more than 2592000 (30 days)"
        ),
        "{}",
        text(&out)
    );
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

#[test]
fn a_local_model_folder_plans_the_hugging_face_cache_folder_created_on_every_node() {
    // Seen once: Start failed on a node without ~/.cache/huggingface (Docker refuses a
    // missing bind-mount source); the staging step now creates it, and the dry run says so.
    let out = run(&args(
        &["vllm", "/models/my-model", "--tp", "2", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    let step = plan
        .lines()
        .find(|l| l.contains("Stage /models/my-model on"))
        .unwrap_or_else(|| panic!("no staging step:\n{plan}"));
    assert!(
        step.ends_with("; each node's Hugging Face cache folder is created when missing"),
        "{step}"
    );
}

#[test]
fn profiles_lists_every_bundled_profile_with_whether_it_fits() {
    let out = run(&args(
        &["profiles", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for p in [
        "smoke-test",
        "llama-70b-tp2",
        "trtllm-qwen-7b-tp2",
        "nccl-allgather",
    ] {
        assert!(names.contains(&p), "{names:?}");
    }
    let smoke = rows.iter().find(|r| r["name"] == "smoke-test").unwrap();
    assert_eq!(smoke["fit"]["fit"], "yes", "{smoke}");

    // One Spark: every two-node profile says why not.
    let one = snapshot_args("seed-001-two-sparks-both-twins")[..2].to_vec();
    let mut a = vec!["profiles".to_string(), "--json".to_string()];
    a.extend(one);
    let out = run(&a);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let smoke = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "smoke-test")
        .unwrap();
    assert_eq!(smoke["fit"]["fit"], "no", "{smoke}");
    assert!(
        smoke["fit"]["why"][0]
            .as_str()
            .unwrap()
            .contains("needs 2 nodes")
    );
}

#[test]
fn compose_writes_one_file_per_node_with_the_exact_containers_and_a_readme() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = run(&args(
        &[
            "compose",
            "qwen-32b-ray-tp2",
            "--out",
            out_dir.path().to_str().unwrap(),
            "--json",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let head = std::fs::read_to_string(out_dir.path().join("spark.compose.yaml")).unwrap();
    let doc: serde_json::Value = yaml_to_json(&head);
    let svc = &doc["services"]["vllm"];
    let spec = &v["plan"]["job"]["nodes"][0]["launch"]["container"];
    assert_eq!(svc["container_name"], spec["name"]);
    assert_eq!(svc["image"], spec["image"]);
    assert_eq!(svc["network_mode"], "host");
    assert_eq!(
        svc["environment"]["NCCL_IB_HCA"],
        spec["env"]["NCCL_IB_HCA"]
    );
    // The head's script reaches docker compose with every `$` doubled.
    let script = svc["command"][2].as_str().unwrap();
    let original = spec["command"][2].as_str().unwrap();
    assert_eq!(script.replace("$$", "$"), original);
    assert_eq!(svc["volumes"][0]["source"], "${HOME}/.cache/huggingface");
    assert!(out_dir.path().join("spark2.compose.yaml").is_file());
    let readme = std::fs::read_to_string(out_dir.path().join("README.md")).unwrap();
    assert!(
        readme.contains("spark-launch model pull Qwen/Qwen2.5-32B-Instruct@main"),
        "{readme}"
    );
}

#[test]
fn compose_into_a_folder_with_a_file_it_did_not_write_refuses_naming_it_and_changes_nothing() {
    // Seen once: `compose smoke-test --out ./compose`, run from the clone's root as the
    // README showed, overwrote the tracked compose/README.md.
    let clone = tempfile::tempdir().unwrap();
    let tracked = clone.path().join("compose/README.md");
    std::fs::create_dir_all(tracked.parent().unwrap()).unwrap();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("compose/README.md"))
            .unwrap();
    std::fs::write(&tracked, &readme).unwrap();
    let compose = |extra: &[&str]| {
        let cfg = tempfile::tempdir().unwrap();
        let mut a = args(
            &["compose", "smoke-test", "--out", "./compose"],
            "seed-001-two-sparks-both-twins",
        );
        a.extend(extra.iter().map(|s| s.to_string()));
        Command::new(env!("CARGO_BIN_EXE_spark-launch"))
            .args(&a)
            .current_dir(clone.path())
            .env("SPARK_LAUNCH_NO_PROGRESS", "1")
            .env("XDG_CONFIG_HOME", cfg.path())
            .env("HF_HUB_OFFLINE", "1")
            .env_remove("SPARK_LAUNCH_PROFILES")
            .env_remove("SPARK_LAUNCH_CLUSTER")
            .output()
            .unwrap()
    };
    let out = compose(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("compose/README.md: exists and spark-launch did not write it"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&tracked).unwrap(), readme);
    assert!(!clone.path().join("compose/spark.compose.yaml").exists());

    // Into a folder of its own it writes, and a second run replaces only its own files.
    let own = clone.path().join("smoke");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(own.join("notes.txt"), "mine\n").unwrap();
    for _ in 0..2 {
        let cfg = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
            .args(args(
                &["compose", "smoke-test", "--out", "smoke"],
                "seed-001-two-sparks-both-twins",
            ))
            .current_dir(clone.path())
            .env("SPARK_LAUNCH_NO_PROGRESS", "1")
            .env("XDG_CONFIG_HOME", cfg.path())
            .env("HF_HUB_OFFLINE", "1")
            .env_remove("SPARK_LAUNCH_PROFILES")
            .env_remove("SPARK_LAUNCH_CLUSTER")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    assert_eq!(
        std::fs::read_to_string(own.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(own.join("README.md").is_file());

    // --force replaces the file it did not write (said on stderr).
    let out = compose(&["--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("replaced ./compose/README.md (--force)"),
        "{}",
        text(&out)
    );
}

#[test]
fn compose_on_snapshots_names_no_branch_folder_and_prints_the_warnings_of_up_dry_run() {
    // Seen once: compose wrote `…/snapshots/main` (a branch, no cache folder has that
    // name) and dropped the warnings `up --dry-run` printed for the same profile.
    let up = run(&args(
        &["up", "qwen-32b-ray-tp2", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let up_out = String::from_utf8_lossy(&up.stdout);
    let up_err = String::from_utf8_lossy(&up.stderr);
    let out_dir = tempfile::tempdir().unwrap();
    let out = run(&args(
        &[
            "compose",
            "qwen-32b-ray-tp2",
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The same warnings (stderr) and notes as the dry run.
    for w in up_err.lines().filter(|l| !l.trim().is_empty()) {
        assert!(stderr.contains(w.trim()), "`{w}` missing:\n{}", text(&out));
    }
    let notes = &up_out[up_out.find("\nnotes\n").expect("up --dry-run has notes")..];
    for n in notes.lines().filter(|l| l.starts_with("  - ")) {
        assert!(stdout.contains(n), "`{n}` missing:\n{}", text(&out));
    }
    // The commit is not recorded: the folder is resolved when compose runs, and both the
    // output and the README say how.
    let export = "export SL_MODEL_COMMIT=\"$(cat \"$HOME\"/.cache/huggingface/hub/models--Qwen--Qwen2.5-32B-Instruct/refs/main)\"";
    assert!(
        stdout.contains("the commit of Qwen/Qwen2.5-32B-Instruct@main is not recorded"),
        "{stdout}"
    );
    assert!(stdout.contains(export), "{stdout}");
    let readme = std::fs::read_to_string(out_dir.path().join("README.md")).unwrap();
    assert!(readme.contains(export), "{readme}");
    for f in ["spark.compose.yaml", "spark2.compose.yaml"] {
        let file = std::fs::read_to_string(out_dir.path().join(f)).unwrap();
        assert!(!file.contains("/snapshots/main"), "{f}:\n{file}");
    }
    // The head serves the model (the Ray worker only joins).
    let head = std::fs::read_to_string(out_dir.path().join("spark.compose.yaml")).unwrap();
    let cmd = yaml_to_json(&head)["services"]["vllm"]["command"].to_string();
    assert!(
        cmd.contains("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-32B-Instruct/snapshots/${SL_MODEL_COMMIT:?set it to the commit in"),
        "{cmd}"
    );

    // A commit given: its folder, nothing to set.
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let out_dir = tempfile::tempdir().unwrap();
    let out = run(&args(
        &[
            "compose",
            "qwen-32b-ray-tp2",
            "--set",
            &format!("model.revision={commit}"),
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("SL_MODEL_COMMIT"));
    let head = std::fs::read_to_string(out_dir.path().join("spark.compose.yaml")).unwrap();
    assert!(head.contains(&format!("/snapshots/{commit}")), "{head}");
    assert!(!head.contains("SL_MODEL_COMMIT"), "{head}");
}

#[test]
fn compose_of_a_trtllm_profile_mounts_the_jobs_keys_from_beside_the_file_and_says_how_to_make_them()
{
    let out_dir = tempfile::tempdir().unwrap();
    let out = run(&args(
        &[
            "compose",
            "trtllm-qwen-7b-tp2",
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mounts = |file: &str| -> Vec<(String, String)> {
        let doc = yaml_to_json(&std::fs::read_to_string(out_dir.path().join(file)).unwrap());
        doc["services"]["trtllm"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["source"].as_str().unwrap().starts_with("./job-ssh/"))
            .map(|v| {
                assert_eq!(v["read_only"], true, "{v}");
                (
                    v["source"].as_str().unwrap().to_string(),
                    v["target"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    // The head runs mpirun (its client key) and sshd (the host key); the worker only sshd.
    assert_eq!(
        mounts("spark.compose.yaml"),
        [
            (
                "./job-ssh/ssh_host_ed25519_key".to_string(),
                "/etc/spark-launch/job-ssh/ssh_host_ed25519_key".to_string()
            ),
            (
                "./job-ssh/id_ed25519".to_string(),
                "/etc/spark-launch/job-ssh/id_ed25519".to_string()
            ),
        ]
    );
    assert_eq!(
        mounts("spark2.compose.yaml"),
        [(
            "./job-ssh/ssh_host_ed25519_key".to_string(),
            "/etc/spark-launch/job-ssh/ssh_host_ed25519_key".to_string()
        )]
    );
    let head = std::fs::read_to_string(out_dir.path().join("spark.compose.yaml")).unwrap();
    assert!(
        head.contains("${SL_JOB_SSH_PUBKEY:?") && !head.contains("not-generated"),
        "{head}"
    );
    let readme = std::fs::read_to_string(out_dir.path().join("README.md")).unwrap();
    assert!(
        readme.contains("ssh-keygen -q -t ed25519 -N '' -f job-ssh/ssh_host_ed25519_key"),
        "{readme}"
    );
}

#[test]
fn model_pull_dry_run_says_where_the_weights_go() {
    let out = run(&args(
        &[
            "model",
            "pull",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--dry-run",
            "--json",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["head"], "spark");
    assert_eq!(v["copy_from"], "spark:192.168.177.11 over ssh");
    assert_eq!(
        v["nodes"][1]["dir"],
        "~/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct"
    );
}

#[test]
fn model_pull_of_a_gguf_spec_plans_the_head_alone() {
    let pulled = |extra: &[&str]| {
        let mut a = vec!["model", "pull", "--dry-run", "--json"];
        a.extend_from_slice(extra);
        let out = run(&args(&a, "seed-001-two-sparks-both-twins"));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = pulled(&["unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M"]);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["nodes"][0]["node"], "spark");
    assert_eq!(v["model"]["gguf"]["quant"], "Q4_K_M");
    // `--gguf`: llama.cpp's default quant of a plain repository.
    let v = pulled(&["unsloth/Qwen3-30B-A3B-GGUF", "--gguf"]);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["model"]["gguf"], serde_json::json!({}), "{v}");
    let out = run(&args(
        &["model", "pull", "/data/m", "--gguf", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("leave out --gguf"), "{}", text(&out));
}

fn yaml_to_json(text: &str) -> serde_json::Value {
    let v: yaml_serde::Value = yaml_serde::from_str(text).unwrap();
    serde_json::to_value(v).unwrap()
}

#[test]
fn up_runs_an_nccl_test_profile_through_nccl_test() {
    let out = run(&args(
        &["up", "nccl-allgather", "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is pure JSON");
    let line = v.to_string();
    assert!(line.contains("all_gather_perf"), "{line}");
    assert!(line.contains("all_reduce_perf"), "{line}");
    assert!(line.contains("sl-nccl-allgather-spark2"), "{line}");
}

#[test]
fn trtllm_mounts_nothing_of_ssh_prints_no_key_and_the_old_key_flags_are_unknown() {
    let out = run(&args(
        &["trtllm", "org/m", "--tp", "2", "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let all = text(&out);
    assert!(!all.contains("PRIVATE KEY"), "{all}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for i in 0..2 {
        let c = &v["job"]["nodes"][i]["launch"]["container"];
        for m in c["mounts"].as_array().unwrap() {
            let source = m["source"].as_str().unwrap();
            assert!(
                !source.contains(".ssh") && !source.starts_with("/etc/ssh"),
                "node {i} mounts {source}"
            );
        }
        // The private halves are files put into the container before it starts, shown
        // as `<set>`; the public halves are `<set>` too.
        for f in c["secret_files"].as_array().unwrap() {
            assert_eq!(f["content"], "<set>", "{f}");
            assert_eq!(f["mode"], 0o600, "{f}");
        }
        assert_eq!(c["env"]["SL_JOB_SSH_PUBKEY"], "<set>");
        assert_eq!(c["env"]["SL_JOB_HOST_PUBKEY"], "<set>");
    }
    let head = v["job"]["nodes"][0]["launch"]["container"]["secret_files"].to_string();
    let worker = v["job"]["nodes"][1]["launch"]["container"]["secret_files"].to_string();
    assert!(
        head.contains("/etc/spark-launch/job-ssh/id_ed25519"),
        "{head}"
    );
    assert!(!worker.contains("id_ed25519\""), "{worker}");
    assert!(worker.contains("ssh_host_ed25519_key"), "{worker}");

    // The flags that mounted the user's and the host's keys are gone.
    for (cmd, flag) in [
        ("trtllm", "--host-keys"),
        ("nccl-test", "--ssh-dir"),
        ("nccl-test", "--host-keys"),
    ] {
        let mut a = vec![cmd, flag, "/etc/ssh", "--dry-run"];
        if cmd == "trtllm" {
            a.insert(1, "org/m");
        }
        let out = run(&args(&a, "seed-001-two-sparks-both-twins"));
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("unexpected argument"), "{}", text(&out));
    }
}

/// The devices of each container of a serving plan, by node.
fn devices(plan: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    plan["job"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["launch"]["container"]["devices"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d["host"].as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn vllm_on_snapshots_that_do_not_record_dev_passes_infiniband_and_says_it_assumed_it() {
    // Seen once: on snapshots without `dev/`, `vllm --dry-run` planned containers without
    // /dev/infiniband and said nothing: NCCL would have run on TCP.
    let (_tmp, snaps) = fixtures::edited("seed-001-two-sparks-both-twins", fixtures::older_capture);
    let mut a: Vec<String> = [
        "vllm",
        "--tp",
        "2",
        "--dry-run",
        "--json",
        "Qwen/Qwen2.5-0.5B-Instruct",
    ]
    .map(String::from)
    .to_vec();
    a.extend(snaps.clone());
    let out = run(&a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (node, devs) in devices(&plan) {
        assert_eq!(devs, vec!["/dev/infiniband"], "{node}");
    }
    let notes = plan["notes"].to_string();
    assert!(notes.contains("do not record /dev/infiniband"), "{notes}");
    assert!(plan.get("sockets").is_none(), "{plan}");
}

#[test]
fn vllm_on_a_node_without_infiniband_devices_refuses_with_the_modprobe_fix_unless_tcp_is_allowed() {
    // spark2 was seen without /dev/infiniband (an empty folder): its ACTIVE RoCE devices are
    // out of reach of any container.
    let (_tmp, snaps) = fixtures::edited("seed-001-two-sparks-both-twins", |node| {
        if node.ends_with("spark2") {
            std::fs::remove_dir_all(node.join("dev/infiniband")).unwrap();
            std::fs::create_dir_all(node.join("dev/infiniband")).unwrap();
        }
    });
    let base: Vec<String> = [
        "vllm",
        "--tp",
        "2",
        "--dry-run",
        "Qwen/Qwen2.5-0.5B-Instruct",
    ]
    .map(String::from)
    .to_vec();
    let mut a = base.clone();
    a.extend(snaps.clone());
    let out = run(&a);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spark2: RDMA devices roceP2p1s0f1, rocep1s0f1 are ACTIVE but /dev/infiniband is missing"),
        "{err}"
    );
    assert!(err.contains("sudo modprobe ib_uverbs"), "{err}");
    assert!(out.stdout.is_empty(), "{}", text(&out));
    // --allow-tcp proceeds; the plan says NCCL will use sockets, on every node.
    let mut a = base.clone();
    a.extend(["--allow-tcp".to_string(), "--json".to_string()]);
    a.extend(snaps);
    let out = run(&a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        plan["sockets"]
            .as_str()
            .unwrap()
            .contains("spark2 has no usable /dev/infiniband"),
        "{plan}"
    );
    assert!(
        plan["notes"]
            .to_string()
            .contains("NCCL will use TCP sockets on every node")
    );
    assert_eq!(
        devices(&plan),
        vec![
            ("spark".to_string(), vec!["/dev/infiniband".to_string()]),
            ("spark2".to_string(), vec![])
        ]
    );
    for n in plan["job"]["nodes"].as_array().unwrap() {
        assert_eq!(
            n["launch"]["container"]["env"]["NCCL_IB_DISABLE"], "1",
            "{n}"
        );
    }
}

#[test]
fn absurd_tp_and_pp_are_refused_naming_the_limit_never_wrapped() {
    // Seen once: `--tp 4294967295 --pp 4294967295` planned a one-node job; `--tp 65536 --pp
    // 65536` said "refusing to start: 0 problems".
    for (tp, pp, want) in [
        (
            "4294967295",
            "4294967295",
            "--tp 4294967295: at most 1024 is supported",
        ),
        ("65536", "65536", "--tp 65536: at most 1024 is supported"),
        (
            "1024",
            "256",
            "tp × pp = 1024 × 256 = 262144 GPUs: at most 4096",
        ),
        ("2", "0", "--pp 0: must be at least 1"),
    ] {
        let out = run(&args(
            &[
                "vllm",
                "--tp",
                tp,
                "--pp",
                pp,
                "--dry-run",
                "Qwen/Qwen2.5-0.5B-Instruct",
            ],
            "seed-001-two-sparks-both-twins",
        ));
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{want}: {err}");
        assert!(!err.contains("0 problems"), "{err}");
        assert!(out.stdout.is_empty(), "{}", text(&out));
    }
    let out = run(&args(
        &[
            "up",
            "smoke-test",
            "--dry-run",
            "--set",
            "tp=65536",
            "--set",
            "pp=65536",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at most 1024 is supported"), "{err}");
    assert!(!err.contains("= 0 GPUs"), "{err}");
}

#[test]
fn port_0_is_refused_as_no_port() {
    // Seen once: `--port 0` was accepted.
    let out = run(&args(
        &[
            "vllm",
            "--port",
            "0",
            "--dry-run",
            "Qwen/Qwen2.5-0.5B-Instruct",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("port 0 is not a port"));
    let out = run(&[
        "run".to_string(),
        "--job".into(),
        "x".into(),
        "--port".into(),
        "0".into(),
        "--dry-run".into(),
        "--".into(),
        "true".into(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("port 0 is not a port"));
}

#[test]
fn a_secret_given_with_env_is_shown_as_set_in_the_plan_text_and_json() {
    // Seen once: secrets in plans. `--env HF_TOKEN=…` must not be printed by `--dry-run`.
    for json in [false, true] {
        let mut a = vec![
            "vllm",
            "--tp",
            "2",
            "--dry-run",
            "--env",
            "HF_TOKEN=hf_plan_secret",
            "--env",
            // Not the engine's own key variable (refused for --api-key), another secret.
            "WANDB_API_KEY=k3y",
        ];
        if json {
            a.push("--json");
        }
        a.push("Qwen/Qwen2.5-0.5B-Instruct");
        let out = run(&args(&a, "seed-001-two-sparks-both-twins"));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            !shown.contains("hf_plan_secret") && !shown.contains("k3y"),
            "{shown}"
        );
        assert!(
            shown.contains("HF_TOKEN") && shown.contains("<set>"),
            "{shown}"
        );
    }
}

#[test]
fn a_profile_image_with_shell_syntax_never_reaches_the_compose_readme() {
    // Seen once: a profile `image: "img; touch x"` landed in a paste-ready command of the
    // compose README.
    let out_dir = tempfile::tempdir().unwrap();
    let out = run(&args(
        &[
            "compose",
            "smoke-test",
            "--set",
            "image=img; touch x",
            "--out",
            &out_dir.path().display().to_string(),
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("image") && err.contains("is not an image reference"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(out_dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
    // `--image` of a serving command is checked the same way.
    let out = run(&args(
        &[
            "vllm",
            "--image",
            "img; touch x",
            "--dry-run",
            "Qwen/Qwen2.5-0.5B-Instruct",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an image reference"));
}

/// A model folder with Qwen/Qwen2.5-7B-Instruct's numbers from its public config.json: 28
/// attention heads, 4 KV heads, 28 layers.
fn qwen_7b_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28,
            "num_hidden_layers": 28, "num_key_value_heads": 4}"#,
    )
    .unwrap();
    dir
}

#[test]
fn a_tp_that_does_not_divide_the_heads_is_refused_before_anything_is_copied() {
    let model = qwen_7b_folder();
    let path = model.path().display().to_string();
    for engine in ["vllm", "trtllm"] {
        let out = run(&args(
            &[engine, &path, "--tp", "3", "--dry-run", "--json"],
            "switch-3-sparks",
        ));
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let name = model.path().file_name().unwrap().to_string_lossy();
        assert_eq!(
            v["refused"][0]["problem"],
            format!("tp 3 does not divide the 28 attention heads of {name}"),
            "{v}"
        );
        assert_eq!(v["refused"][0]["fix"], "use tp 1, 2, 4 or 28", "{v}");
    }
    // More stages than layers.
    let out = run(&args(
        &[
            "vllm",
            &path,
            "--tp",
            "1",
            "--pp",
            "29",
            "--gpus-per-node",
            "1",
            "--dry-run",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("pp 29 is more pipeline stages than the 28 layers"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_shape_that_fits_plans_and_an_unreadable_config_is_only_a_warning() {
    let model = qwen_7b_folder();
    let path = model.path().display().to_string();
    let out = run(&args(
        &["vllm", &path, "--tp", "2", "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("not checked"),
        "{}",
        text(&out)
    );
    // A Hub model with the Hub out of reach: planned, with a warning saying tp/pp were not checked.
    let out = run(&args(
        &["vllm", "org/m", "--tp", "2", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("tp 2 and pp 1 were not checked against org/m's heads and layers"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_api_key_never_appears_in_the_plan_json_text_or_stderr_only_set() {
    let key = "sk-do-not-print-4711";
    for json in [true, false] {
        let mut a = vec!["vllm", "org/m", "--tp", "2", "--api-key", key, "--dry-run"];
        if json {
            a.push("--json");
        }
        let out = run(&args(&a, "seed-001-two-sparks-both-twins"));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let all = text(&out);
        assert!(!all.contains(key), "the key was printed:\n{all}");
        assert!(all.contains("VLLM_API_KEY"), "{all}");
        if json {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let head = &v["job"]["nodes"][0]["launch"]["container"];
            assert_eq!(head["env"]["VLLM_API_KEY"], "<set>");
            // Workers serve no API: no key there.
            assert!(v["job"]["nodes"][1]["launch"]["container"]["env"]["VLLM_API_KEY"].is_null());
            assert!(!head["command"].to_string().contains("--api-key"), "{head}");
        }
        // A key is set: no warning about an open API.
        assert!(!all.contains("with no API key"), "{all}");
    }
}

#[test]
fn an_open_api_is_warned_about_and_bind_takes_the_heads_addresses_only() {
    let out = run(&args(
        &["vllm", "org/m", "--tp", "2", "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("listens on every interface with no API key"),
        "{}",
        text(&out)
    );
    let out = run(&args(
        &[
            "vllm",
            "org/m",
            "--tp",
            "2",
            "--bind",
            "fabric",
            "--dry-run",
            "--json",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["endpoint"]["url"], "http://192.168.177.11:8000/v1");
    let cmd = v["job"]["nodes"][0]["launch"]["container"]["command"].to_string();
    assert!(cmd.contains(r#""--host","192.168.177.11""#), "{cmd}");
    let out = run(&args(
        &[
            "vllm",
            "org/m",
            "--tp",
            "2",
            "--bind",
            "10.99.0.1",
            "--dry-run",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--bind 10.99.0.1:"), "{}", text(&out));
    assert!(text(&out).contains("has no such address"), "{}", text(&out));
}

#[test]
fn trtllm_refuses_an_api_key_it_cannot_enforce() {
    let out = run(&args(
        &[
            "trtllm",
            "org/m",
            "--tp",
            "2",
            "--api-key",
            "sk-x",
            "--dry-run",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "trtllm-serve has no API-key option, so spark-launch cannot make it enforce one"
        ),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("sk-x"), "{}", text(&out));
}

#[test]
fn a_profile_may_ask_for_an_auto_key_but_never_hold_one() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, key: &str| {
        let p = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &p,
            format!(
                "name: {name}\ndescription: t\nengine: vllm\nmodel: {{id: org/m}}\ntp: 2\nnodes: 2\napi_key: {key}\nbind: fabric\n"
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let ok = write("keyed", "auto");
    let out = run(&args(
        &["up", &ok, "--dry-run", "--json"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["job"]["nodes"][0]["launch"]["container"]["env"]["VLLM_API_KEY"],
        "<set>"
    );
    assert_eq!(v["endpoint"]["url"], "http://192.168.177.11:8000/v1");
    let bad = write("leaky", "sk-in-a-file");
    let out = run(&args(
        &["up", &bad, "--dry-run"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("a key written in a profile is refused"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("sk-in-a-file"), "{}", text(&out));
}

#[test]
fn sglang_plans_every_node_with_its_rank_takes_the_key_out_of_argv_and_refuses_flags_it_sets() {
    let out = run(&args(
        &[
            "sglang",
            "org/m",
            "--tp",
            "2",
            "--launcher",
            "serve",
            "--dist-port",
            "21000",
            "--api-key",
            "sl-cli-secret",
            "--dry-run",
            "--json",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("sl-cli-secret"), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "sglang");
    assert_eq!(v["mode"], "native");
    assert_eq!(v["endpoint"]["port"], 30000);
    let head = &v["job"]["nodes"][0]["launch"]["container"];
    assert_eq!(head["env"]["SL_SGLANG_API_KEY"], "<set>");
    let words = |c: &serde_json::Value| -> Vec<String> {
        c["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };
    let head_cmd = words(head);
    assert_eq!(head_cmd[..2], ["python3", "-c"]);
    assert!(
        head_cmd[3..]
            .join(" ")
            .starts_with("sglang serve --model-path "),
        "{head_cmd:?}"
    );
    let worker = words(&v["job"]["nodes"][1]["launch"]["container"]).join(" ");
    assert!(
        worker.starts_with("sglang serve ")
            && worker.contains("--nnodes 2 --node-rank 1 --dist-init-addr 192.168.177.11:21000")
            && !worker.contains("--port"),
        "{worker}"
    );
    // The rendezvous port moved with --dist-port: the plan checks that one.
    assert!(v.to_string().contains("\"port\":21000"), "{v}");

    let mut refused = args(
        &["sglang", "org/m", "--tp", "2", "--dry-run"],
        "seed-001-two-sparks-both-twins",
    );
    refused.extend(["--", "--tp", "4", "--host", "::"].map(String::from));
    let out = run(&refused);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("extra argument --tp (read as --tp-size) is set by spark-launch itself")
            && err.contains("use --tp"),
        "{err}"
    );
    assert!(err.contains("use --bind"), "{err}");
}

#[test]
fn the_engine_s_key_variable_given_with_env_is_refused_for_api_key_and_never_printed() {
    let out = run(&args(
        &[
            "vllm",
            "org/m",
            "--tp",
            "2",
            "--env",
            "VLLM_API_KEY=sk-env-2",
            "--dry-run",
        ],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "--env VLLM_API_KEY: VLLM_API_KEY is where spark-launch gives vLLM its API key"
        ),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("give the key with --api-key"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("sk-env-2"), "{}", text(&out));
}

#[test]
fn a_key_the_engine_cannot_enforce_is_refused_before_any_node_is_reached_or_key_file_written() {
    // A live launch on a node nothing answers for (link-local): the refusal used to come after
    // resolving the nodes and looking up the model, and `--api-key auto` had written its key
    // file by then.
    let cfg = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args([
            "trtllm",
            "--tp",
            "1",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--api-key",
            "auto",
            "--hosts",
            "here=nobody@169.254.77.1",
        ])
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", cfg.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no API-key option"), "{said}");
    assert!(!said.contains("169.254.77.1"), "a node was reached: {said}");
    assert!(
        !cfg.path().join("spark-launch/api-key").exists(),
        "the key file was written"
    );
}
