//! Serving plans on the seed topologies, through the real snapshot reader and derive: the exact
//! per-node containers (env, mounts, devices, limits), commands and step order of vLLM native,
//! vLLM with Ray and TensorRT-LLM, snapshot-tested; and the refusals.

use std::collections::BTreeMap;

use spark_launch::derive::NodeInput;
use spark_launch::model::ModelSource;
use spark_launch::plan::{JobName, Launch, Step};
use spark_launch::workload::engines::{
    DEFAULT_READY_TIMEOUT_S, EngineKind, EngineOptions, ray, trtllm, vllm,
};
use spark_launch::workload::job_ssh::{self, JobSshKeys};
use spark_launch::workload::launch::LaunchRefusal;
use spark_launch::workload::serve::{ServeOptions, ServePlan};
use spark_launch::workload::skeleton::{self, ServeInput};

mod support;
use support::fixtures::fixture_nodes;

const COMMIT: &str = "7ae557604adf67be50417f59c2c2f167def9a775";

fn serve(tp: u32, image: &str) -> ServeOptions {
    ServeOptions {
        job: JobName::new("smoke").unwrap(),
        model: ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", Some(COMMIT)).unwrap(),
        image: image.to_string(),
        port: 8000,
        tp,
        pp: 1,
        gpus_per_node: 1,
        engine_args: vec!["--max-model-len".into(), "4096".into()],
        env: BTreeMap::new(),
        paths: BTreeMap::new(),
        ulimits: vec![],
        gpus: None,
        ready_timeout_s: DEFAULT_READY_TIMEOUT_S,
        stage_model: true,
        check_answers: true,
        allow_tcp: false,
        bind: Default::default(),
        api_key: None,
        memory: Default::default(),
        runtime: Default::default(),
        nodes: None,
    }
}

/// The shared serving options and the engine's own.
struct Opts {
    serve: ServeOptions,
    tuning: EngineOptions,
}

fn vllm_opts(tp: u32, tuning: EngineOptions) -> Opts {
    Opts {
        serve: serve(tp, vllm::DEFAULT_IMAGE),
        tuning,
    }
}

fn native() -> EngineOptions {
    EngineOptions {
        rendezvous_port: Some(vllm::DEFAULT_MASTER_PORT),
        ..EngineOptions::default()
    }
}

fn trt_opts(tp: u32) -> Opts {
    let mut s = serve(tp, trtllm::DEFAULT_IMAGE);
    s.port = trtllm::DEFAULT_PORT;
    s.engine_args = vec![];
    Opts {
        serve: s,
        tuning: EngineOptions {
            ssh_port: Some(trtllm::DEFAULT_SSH_PORT),
            max_batch_size: Some(4),
            max_num_tokens: Some(32768),
            ..EngineOptions::default()
        },
    }
}

/// The engine's plan alone (no launch: no copy routes, no NCCL), as the engine planners
/// returned it.
fn plan_alone(
    engine: EngineKind,
    o: &Opts,
    nodes: &[NodeInput],
    keys: &JobSshKeys,
) -> Result<ServePlan, LaunchRefusal> {
    skeleton::plan(&ServeInput {
        engine,
        opts: &o.serve,
        tuning: &o.tuning,
        nodes,
        keys,
        launch: None,
        recipe: None,
    })
    .map(|s| s.plan)
}

fn vllm_plan(o: &Opts, nodes: &[NodeInput]) -> Result<ServePlan, LaunchRefusal> {
    plan_alone(EngineKind::Vllm, o, nodes, &JobSshKeys::placeholder())
}

fn trtllm_plan(
    o: &Opts,
    nodes: &[NodeInput],
    keys: &JobSshKeys,
) -> Result<ServePlan, LaunchRefusal> {
    plan_alone(EngineKind::Trtllm, o, nodes, keys)
}

#[test]
fn vllm_native_on_two_sparks_runs_serve_on_both_with_ranks_and_a_headless_worker() {
    let plan = vllm_plan(
        &vllm_opts(2, native()),
        &fixture_nodes("seed-001-two-sparks-both-twins"),
    )
    .unwrap();
    insta::assert_yaml_snapshot!(plan);
    let Launch::Container(worker) = &plan.job.nodes[1].launch else {
        panic!("not a container")
    };
    let cmd = worker.command.join(" ");
    assert!(
        cmd.contains(
            "--nnodes 2 --node-rank 1 --master-addr 192.168.177.11 --master-port 29501 --headless"
        ),
        "{cmd}"
    );
    assert_eq!(worker.env["NCCL_IB_HCA"], "rocep1s0f1,roceP2p1s0f1");
    assert_eq!(worker.env["VLLM_HOST_IP"], "192.168.177.12");
    assert_eq!(worker.env["HF_HUB_OFFLINE"], "1");
    assert!(worker.devices.iter().any(|d| d.host == "/dev/infiniband"));
}

#[test]
fn vllm_with_ray_waits_for_every_node_at_its_intended_address() {
    let plan = vllm_plan(
        &vllm_opts(
            2,
            EngineOptions {
                ray: true,
                ray_port: Some(ray::DEFAULT_PORT),
                ..EngineOptions::default()
            },
        ),
        &fixture_nodes("seed-001-two-sparks-both-twins"),
    )
    .unwrap();
    insta::assert_yaml_snapshot!(plan);
    let steps: Vec<&str> = plan.job.steps.iter().map(step_name).collect();
    assert_eq!(
        steps,
        vec![
            "check-ports",
            "check-reachable",
            "ensure-image",
            "stage-model",
            "ensure-folders",
            "start",
            "wait-ray",
            "wait-serving"
        ]
    );
}

#[test]
fn trtllm_on_two_sparks_runs_mpirun_from_the_head_over_sshd_on_2233() {
    let plan = trtllm_plan(
        &trt_opts(2),
        &fixture_nodes("seed-001-two-sparks-both-twins"),
        &JobSshKeys::placeholder(),
    )
    .unwrap();
    insta::assert_yaml_snapshot!(plan);
    // The endpoint is named by the model id the user typed, not the snapshot folder.
    assert_eq!(plan.served_name, "Qwen/Qwen2.5-0.5B-Instruct");
    let Launch::Container(head) = &plan.job.nodes[0].launch else {
        panic!("not a container")
    };
    // sh -c SL_ENTRYPOINT sl-entrypoint sh -c HEAD_SH spark-launch-trtllm-head mpirun ...
    assert_eq!(head.command[3], "sl-entrypoint");
    assert_eq!(head.command[7], "spark-launch-trtllm-head");
    let cmd = head.command[8..].join(" ");
    assert!(
        cmd.starts_with("mpirun --allow-run-as-root --hostfile /etc/spark-launch/hostfile --bind-to none --mca plm_rsh_args -p 2233 -i /etc/spark-launch/job-ssh/id_ed25519 -o IdentitiesOnly=yes -o UserKnownHostsFile=/etc/spark-launch/job-ssh/known_hosts -o StrictHostKeyChecking=yes --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include 192.168.177.0/24"),
        "{cmd}"
    );
    assert!(cmd.contains("trtllm-llmapi-launch trtllm-serve"), "{cmd}");
    assert!(
        cmd.contains(
            "--served_model_name Qwen/Qwen2.5-0.5B-Instruct --tp_size 2 --host 0.0.0.0 --port 8355"
        ),
        "{cmd}"
    );
    // One app context per node, each with that node's own variables.
    let contexts: Vec<&str> = cmd.split(" : ").collect();
    assert_eq!(contexts.len(), 2, "{cmd}");
    assert!(contexts[0].contains("-np 1 -H 192.168.177.11:1"), "{cmd}");
    assert!(contexts[1].contains("-np 1 -H 192.168.177.12:1"), "{cmd}");
    for c in &contexts {
        assert!(c.contains("-x NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1"), "{c}");
        assert!(c.contains("-x HF_HUB_OFFLINE=1"), "{c}");
    }
    let Launch::Container(worker) = &plan.job.nodes[1].launch else {
        panic!("not a container")
    };
    assert_eq!(
        worker.command.len(),
        4,
        "a worker runs only the entrypoint (sshd)"
    );
    assert_eq!(worker.env["SL_SSHD_LISTEN"], "192.168.177.12");
    // The job's own SSH identity: nothing of ~/.ssh or /etc/ssh mounted anywhere; the host
    // key in every container, the client key in the head's only (it runs mpirun).
    for c in [head, worker] {
        assert!(
            c.mounts
                .iter()
                .all(|m| !m.source.contains(".ssh") && !m.source.starts_with("/etc/ssh")),
            "{:?}",
            c.mounts
        );
    }
    let files = |c: &spark_launch::plan::ContainerSpec| -> Vec<String> {
        c.secret_files.iter().map(|f| f.path.clone()).collect()
    };
    assert_eq!(
        files(head),
        vec![job_ssh::HOST_KEY_FILE, job_ssh::CLIENT_KEY_FILE]
    );
    assert_eq!(files(worker), vec![job_ssh::HOST_KEY_FILE]);
    assert_eq!(
        head.env["SL_HOSTFILE"],
        "192.168.177.11 slots=1\n192.168.177.12 slots=1"
    );
}

#[test]
fn a_spark_and_a_workstation_each_get_their_own_interface_names() {
    let plan = vllm_plan(
        &vllm_opts(2, native()),
        &fixture_nodes("seed-004-spark-and-workstation"),
    )
    .unwrap();
    insta::assert_yaml_snapshot!(plan);
}

#[test]
fn the_triangle_serves_on_the_management_network_with_subnet_aware_routing() {
    let plan = vllm_plan(&vllm_opts(3, native()), &fixture_nodes("seed-003-triangle")).unwrap();
    insta::assert_yaml_snapshot!(plan);
}

#[test]
fn trtllm_on_link_local_sparks() {
    let plan = trtllm_plan(
        &trt_opts(2),
        &fixture_nodes("seed-002-link-local"),
        &JobSshKeys::placeholder(),
    )
    .unwrap();
    insta::assert_yaml_snapshot!(plan);
}

#[test]
fn tp_2_on_three_switched_sparks_uses_the_first_two_and_says_so() {
    let plan = vllm_plan(&vllm_opts(2, native()), &fixture_nodes("switch-3-sparks")).unwrap();
    assert_eq!(plan.nodes.len(), 2);
    assert_eq!(plan.unused.len(), 1);
    assert!(
        plan.notes[0].contains("use 2 of the cluster's 3 nodes"),
        "{:?}",
        plan.notes
    );
    assert_eq!(plan.job.nodes.len(), 2);
}

#[test]
fn a_shape_that_does_not_fit_and_a_broken_fabric_are_refused_together() {
    let mut o = vllm_opts(4, native());
    o.serve.engine_args = vec!["--tensor-parallel-size".into(), "4".into()];
    let e = vllm_plan(&o, &fixture_nodes("seed-001-two-sparks-both-twins")).unwrap_err();
    insta::assert_snapshot!(e.to_string());

    let e = vllm_plan(
        &vllm_opts(2, native()),
        &fixture_nodes("broken-twins-one-subnet"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("one subnet"), "{e}");
}

#[test]
fn a_user_variable_replaces_the_derived_one_and_the_plan_says_so() {
    let mut o = vllm_opts(2, native());
    o.serve
        .env
        .insert("NCCL_IB_HCA".into(), "rocep1s0f1".into());
    o.serve.env.insert("NCCL_DEBUG".into(), "INFO".into());
    let plan = vllm_plan(&o, &fixture_nodes("seed-001-two-sparks-both-twins")).unwrap();
    let Launch::Container(c) = &plan.job.nodes[0].launch else {
        panic!()
    };
    assert_eq!(c.env["NCCL_IB_HCA"], "rocep1s0f1");
    assert_eq!(c.env["NCCL_DEBUG"], "INFO");
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("replaces the derived NCCL_IB_HCA"))
    );
}

#[test]
fn trtllm_forwards_a_users_variable_by_name_so_its_value_is_on_no_command_line() {
    // Seen once: `--env HF_TOKEN=hf_X` went onto mpirun's argv as `-x HF_TOKEN=hf_X`
    // (every local user's `ps`, `docker inspect`'s Cmd). The value rides in the containers'
    // env; mpirun forwards it by name from the head's.
    let mut o = trt_opts(2);
    o.serve.env.insert("HF_TOKEN".into(), "hf_X".into());
    o.serve.env.insert("MY_FLAG".into(), "on".into());
    let plan = trtllm_plan(
        &o,
        &fixture_nodes("seed-001-two-sparks-both-twins"),
        &JobSshKeys::placeholder(),
    )
    .unwrap();
    for n in &plan.job.nodes {
        let Launch::Container(c) = &n.launch else {
            panic!("not a container")
        };
        let cmd = c.command.join(" ");
        assert!(
            !cmd.contains("hf_X") && !cmd.contains("MY_FLAG=on"),
            "{cmd}"
        );
        assert_eq!(c.env["HF_TOKEN"], "hf_X");
    }
    let Launch::Container(head) = &plan.job.nodes[0].launch else {
        panic!("not a container")
    };
    // sh -c SL_ENTRYPOINT sl-entrypoint sh -c HEAD_SH spark-launch-trtllm-head mpirun ...
    let mpirun = head.command[8..].join(" ");
    let contexts: Vec<&str> = mpirun.split(" : ").collect();
    assert_eq!(contexts.len(), 2, "{mpirun}");
    for c in contexts {
        assert!(c.contains("-x HF_TOKEN -x MY_FLAG "), "{c}");
    }
    let printed = serde_json::to_string(&plan).unwrap();
    assert!(!printed.contains("hf_X"), "{printed}");
}

#[test]
fn a_printed_plan_survives_a_json_round_trip_with_its_secrets_still_set() {
    let plan = trtllm_plan(
        &trt_opts(2),
        &fixture_nodes("seed-001-two-sparks-both-twins"),
        &JobSshKeys::placeholder(),
    )
    .unwrap();
    let text = serde_json::to_string(&plan).unwrap();
    let back: ServePlan = serde_json::from_str(&text).unwrap();
    // What was printed reads back and prints the same; the keys it held were never printed.
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
    assert_eq!(plan.job.steps, back.job.steps);
}

/// Real keys, as a launch makes them: neither private half appears in the plan as JSON, as
/// text (the one renderer `--dry-run` uses) or as Debug; the printed plans show `<set>` for
/// the public halves too.
#[tokio::test]
async fn no_half_of_the_jobs_real_ssh_keys_appears_in_a_printed_plan() {
    let keys = spark_launch::launch::job_ssh::generate("smoke")
        .await
        .expect("ssh-keygen makes the job's keys");
    let plan = trtllm_plan(
        &trt_opts(2),
        &fixture_nodes("seed-001-two-sparks-both-twins"),
        &keys,
    )
    .unwrap();
    let Launch::Container(head) = &plan.job.nodes[0].launch else {
        panic!("not a container")
    };
    assert_eq!(
        head.secret_files[1].content.expose(),
        keys.client.private.expose().trim()
    );
    let launch = spark_launch::workload::launch::LaunchPlan::Serve(Box::new(plan.clone()));
    let printed = [
        serde_json::to_string_pretty(&plan).unwrap(),
        spark_launch::cli::render::plan(&launch),
        format!("{plan:?}"),
    ];
    let body = |k: &str| -> String {
        k.lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<String>()
    };
    for text in &printed {
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        for k in [&keys.client.private, &keys.host.private] {
            let b = body(k.expose());
            assert!(!text.contains(&b[..40]), "a private key in:\n{text}");
        }
    }
    // What `--dry-run` prints (JSON, text) shows `<set>` for the public halves too.
    for text in &printed[..2] {
        for p in [&keys.client.public, &keys.host.public] {
            let b = p.split_whitespace().nth(1).unwrap();
            assert!(!text.contains(b), "a public key in:\n{text}");
        }
    }
}

fn step_name(s: &Step) -> &'static str {
    match s {
        Step::EnsureImage(_) => "ensure-image",
        Step::EnsureFolders(_) => "ensure-folders",
        Step::Start(_) => "start",
        Step::WriteFile(_) => "write-file",
        Step::Exec(_) => "exec",
        Step::WaitHttp(_) => "wait-http",
        Step::CheckPorts(_) => "check-ports",
        Step::CheckReachable(_) => "check-reachable",
        Step::StageModel(_) => "stage-model",
        Step::WaitRay(_) => "wait-ray",
        Step::WaitServing(_) => "wait-serving",
        Step::WaitExit(_) => "wait-exit",
        Step::StageNccl(_) => "stage-nccl",
        Step::CheckNccl(_) => "check-nccl",
        Step::Stop(_) => "stop",
    }
}
