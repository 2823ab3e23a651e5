//! `nccl-test` plans for the seed topologies (tests/fixtures/, each documented in its README):
//! the exact mpirun lines and the whole per-node plan (container specs with env, devices,
//! mounts, ulimits; steps), snapshot-tested; and `nccl-test --snapshot ... --dry-run --json` as
//! a user runs it.

use std::process::Command;

use spark_launch::derive::derive;
use spark_launch::plan::{JobName, Launch, RuntimeKind, Step};
use spark_launch::workload::job_ssh::JobSshKeys;
use spark_launch::workload::nccl_test::{self, NcclTestOptions, NcclTestPlan};

mod support;
use support::fixtures::{fixture_nodes, snapshot_args};

fn plan_for(name: &str, runtime: RuntimeKind) -> NcclTestPlan {
    let inputs = fixture_nodes(name);
    let cluster = derive(&inputs).expect("the fixture derives");
    let nodes = nccl_test::test_nodes(&inputs, Some(&cluster), None);
    let mut opts = NcclTestOptions::new(JobName::new("nccl-test").unwrap());
    opts.runtime = runtime;
    opts.as_root = runtime == RuntimeKind::Docker;
    nccl_test::plan(
        &nodes,
        Some(cluster.topology),
        &opts,
        &JobSshKeys::placeholder(),
        Vec::new(),
    )
    .expect("a plan")
}

fn mpirun_text(p: &NcclTestPlan) -> String {
    p.runs
        .iter()
        .map(|r| format!("# {}\n{}\n", r.test, r.pretty()))
        .collect()
}

macro_rules! snapshot_plan {
    ($test:ident, $fixture:literal) => {
        #[test]
        fn $test() {
            let p = plan_for($fixture, RuntimeKind::Docker);
            insta::assert_snapshot!(concat!("mpirun_", $fixture), mpirun_text(&p));
            insta::assert_json_snapshot!(concat!("plan_", $fixture), p.plan);
        }
    };
}

snapshot_plan!(
    two_sparks_on_one_cable_pass_both_twins_to_every_rank,
    "seed-001-two-sparks-both-twins"
);
snapshot_plan!(
    the_seed_000_pair_runs_on_its_one_active_twin,
    "seed-000-one-twin"
);
snapshot_plan!(
    a_link_local_pair_reaches_its_ranks_on_169_254,
    "seed-002-link-local"
);
snapshot_plan!(
    the_seed_003_triangle_runs_mpi_on_the_management_network_and_nccl_on_the_ring,
    "seed-003-triangle"
);
snapshot_plan!(
    a_spark_and_a_workstation_each_get_their_own_names_and_image,
    "seed-004-spark-and-workstation"
);
snapshot_plan!(
    three_sparks_on_a_switch_each_use_their_cabled_port,
    "switch-3-sparks"
);
snapshot_plan!(
    four_sparks_in_a_ring_pass_the_ring_algorithm,
    "ring-4-sparks"
);

#[test]
fn every_rank_gets_its_own_nodes_hca_names_never_the_heads() {
    let p = plan_for("seed-004-spark-and-workstation", RuntimeKind::Docker);
    let argv = &p.runs[0].argv;
    let colon = argv
        .iter()
        .position(|a| a == ":")
        .expect("two app contexts");
    let hca = |part: &[String]| {
        part.iter()
            .find(|a| a.starts_with("NCCL_IB_HCA="))
            .cloned()
            .expect("NCCL_IB_HCA in every context")
    };
    let (spark, ws) = argv.split_at(colon);
    assert_ne!(hca(spark), hca(ws));
    assert!(hca(ws).contains("mlx5"), "{}", hca(ws));
    for n in &p.nodes {
        let Some(Launch::Container(c)) = p.plan.node(&n.name).map(|x| &x.launch) else {
            panic!("{} has a container", n.name)
        };
        assert_eq!(c.env["NCCL_IB_HCA"], n.env["NCCL_IB_HCA"]);
    }
    // Two architectures, two images, each ensured only where it runs.
    let ensures: Vec<&Step> = p
        .plan
        .steps
        .iter()
        .filter(|s| matches!(s, Step::EnsureImage(_)))
        .collect();
    assert_eq!(ensures.len(), 2);
}

#[test]
fn the_host_runtime_runs_one_driver_process_on_the_head() {
    let p = plan_for("seed-001-two-sparks-both-twins", RuntimeKind::Host);
    assert_eq!(p.plan.nodes.len(), 1);
    assert!(matches!(p.plan.nodes[0].launch, Launch::Process(_)));
    insta::assert_snapshot!("driver_host_seed-001", p.driver);
}

#[test]
fn the_driver_is_valid_posix_shell() {
    for runtime in [RuntimeKind::Docker, RuntimeKind::Host] {
        let p = plan_for("switch-3-sparks", runtime);
        let out = Command::new("sh")
            .args(["-n", "-c", &p.driver])
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "sh -n refused the driver: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn spark_launch(args: &[String]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .expect("the binary runs")
}

#[test]
fn dry_run_json_from_snapshots_prints_the_whole_plan_and_nothing_else() {
    let mut args: Vec<String> = ["--json", "nccl-test", "--dry-run"]
        .map(String::from)
        .to_vec();
    args.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = spark_launch(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["plan"]["workload"], "nccl-test");
    assert_eq!(v["plan"]["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(v["topology"], "direct");
    let c = &v["plan"]["nodes"][1]["launch"]["container"];
    assert_eq!(c["env"]["NCCL_IB_HCA"], "rocep1s0f1,roceP2p1s0f1");
    assert_eq!(c["network"], "host");
    assert_eq!(c["devices"][0]["host"], "/dev/infiniband");
    assert!(v["runs"][0]["argv"].as_array().unwrap().len() > 20);
    let steps: Vec<&str> = v["plan"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        vec!["ensure-image", "check-nccl", "start", "wait-exit", "stop"]
    );
}

#[test]
fn a_host_runtime_plan_names_each_nodes_own_nccl_and_how_the_loader_finds_it() {
    // The real GPU machine's snapshot (tests/fixtures/README.md): its loader's copy is 2.28.3
    // (ld.so.cache), PyTorch's wheel 2.28.9 (torch's RPATH). nccl-tests' binaries take the
    // loader's; the plan says what a PyTorch program would take instead.
    let mut args: Vec<String> = ["--json", "nccl-test", "--dry-run", "--runtime", "host"]
        .map(String::from)
        .to_vec();
    args.extend(snapshot_args("real-gpu-one-node-no-rdma"));
    let out = spark_launch(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let n = &v["nccl"]["nodes"][0];
    assert_eq!(n["node"], "vm");
    assert_eq!(n["state"], "known", "{n}");
    assert_eq!(n["origin"], "host");
    assert_eq!(n["path"], "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
    assert_eq!(n["via"], "ld-so-cache");
    assert_eq!(n["version"], "2.28.3+cuda13.0");
    assert_eq!(v["nccl"]["rule"]["host"], true);
    let notes: Vec<&str> = v["nccl"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x.as_str())
        .collect();
    assert_eq!(
        notes,
        [
            "vm: a PyTorch program there loads NCCL 2.28.9 from /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2 (RPATH of /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so) instead"
        ]
    );
    // In text, under the plan's heading for the host runtime.
    let text = spark_launch(&args[1..]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("NCCL each node's own processes load (--runtime host):\n  vm  NCCL 2.28.3+cuda13.0 from /usr/lib/x86_64-linux-gnu/libnccl.so.2 → /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 (ld.so.cache)"),
        "{text}"
    );
}

#[test]
fn a_host_runtime_plan_on_a_snapshot_without_the_nodes_own_nccl_says_it_is_not_known() {
    let mut args: Vec<String> = ["--json", "nccl-test", "--dry-run", "--runtime", "host"]
        .map(String::from)
        .to_vec();
    args.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = spark_launch(&args);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    for n in v["nccl"]["nodes"].as_array().unwrap() {
        assert_eq!(n["state"], "not-yet-known", "{n}");
        assert!(n["why"].as_str().unwrap().contains("host-nccl.json"), "{n}");
    }
}

#[test]
fn an_env_value_never_reaches_the_mpirun_command_line_only_its_name_does() {
    // Seen once: `--env HF_TOKEN=hf_X` printed `-x 'HF_TOKEN=hf_X'`, and live the token
    // was in `ps` and `docker inspect`'s Cmd. Now `-x HF_TOKEN` forwards it from the head's
    // environment, where the plan shows it as set.
    for json in [false, true] {
        let mut args: Vec<String> = [
            "nccl-test",
            "--dry-run",
            "--env",
            "HF_TOKEN=hf_X",
            "--env",
            "MY_FLAG=on",
        ]
        .map(String::from)
        .to_vec();
        if json {
            args.insert(0, "--json".into());
        }
        args.extend(snapshot_args("seed-001-two-sparks-both-twins"));
        let out = spark_launch(&args);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{printed}");
        assert!(!printed.contains("hf_X"), "json={json}: {printed}");
        if json {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let argv: Vec<&str> = v["runs"][0]["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            let named = argv
                .windows(2)
                .filter(|w| w[0] == "-x" && w[1] == "HF_TOKEN")
                .count();
            assert_eq!(
                named, 2,
                "one `-x HF_TOKEN` per node's app context: {argv:?}"
            );
            assert!(!argv.iter().any(|a| a.starts_with("HF_TOKEN=")), "{argv:?}");
            // The head's container carries the values (masked when secret); its command
            // (docker inspect's Cmd) names them only.
            let head = &v["plan"]["nodes"][0]["launch"]["container"];
            assert_eq!(head["env"]["HF_TOKEN"], "<set>", "{head}");
            assert_eq!(head["env"]["MY_FLAG"], "on", "{head}");
            assert!(
                !head["command"].to_string().contains("MY_FLAG=on"),
                "{head}"
            );
        }
    }
}

#[test]
fn the_dry_run_shows_what_each_worker_runs_never_an_empty_command() {
    // Seen once: the worker's `command` printed empty; it runs the image's entrypoint,
    // which starts the sshd the head's mpirun reaches it through.
    let mut args: Vec<String> = ["nccl-test", "--dry-run"].map(String::from).to_vec();
    args.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = spark_launch(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let worker = &text[text.find("spark2 (worker): container").expect("the worker")..];
    assert!(
        worker.contains("  entry    /usr/local/bin/sl-entrypoint\n  command  (none: the entrypoint runs alone)\n"),
        "{worker}"
    );
    assert!(!text.lines().any(|l| l.trim_end() == "command"), "{text}");
}

#[test]
fn snapshots_without_dry_run_are_refused_as_invalid() {
    let mut args: Vec<String> = vec!["nccl-test".into()];
    args.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = spark_launch(&args);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dry-run"));
}

#[test]
fn a_refused_layout_is_invalid_input_with_the_fix() {
    let mut args: Vec<String> = ["nccl-test", "--dry-run"].map(String::from).to_vec();
    args.extend(snapshot_args("broken-twins-one-subnet"));
    let out = spark_launch(&args);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fix"));
}

#[test]
fn ranks_per_node_default_to_the_gpus_the_probe_found_and_a_flag_overrides_them() {
    let mut inputs = fixture_nodes("seed-004-spark-and-workstation");
    // A second GPU in the workstation.
    let extra = inputs[1].facts.host.gpus[0].clone();
    inputs[1]
        .facts
        .host
        .gpus
        .push(spark_launch::probe::facts::GpuFacts {
            bus: "0000:c1:00.0".into(),
            ..extra
        });
    let cluster = derive(&inputs).expect("derives");
    let nodes = nccl_test::test_nodes(&inputs, Some(&cluster), None);
    let gpus: Vec<u32> = nodes.iter().map(|n| n.gpus).collect();
    assert_eq!(gpus, vec![1, 2]);
    let nodes = nccl_test::test_nodes(&inputs, Some(&cluster), Some(1));
    assert!(nodes.iter().all(|n| n.gpus == 1));
    // No GPU listed (no driver, or an old snapshot): one rank.
    inputs[0].facts.host.gpus.clear();
    let nodes = nccl_test::test_nodes(&inputs, Some(&cluster), None);
    assert_eq!(nodes[0].gpus, 1);
}
