//! llama.cpp plans on probe snapshots, through the real derive and launch planner: two Sparks
//! (an RPC server on the worker bound to its fabric address, `llama-server --rpc` on the head,
//! the servers started first), one node without any fabric (a GPU server: nothing derived, no
//! NCCL steps), the RPC path on one machine (`--rpc-gpus`) as host processes, and a GGUF
//! folder. One two-node plan is snapshot-tested whole.

use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::model::ModelSource;
use spark_launch::node::NodeName;
use spark_launch::plan::{JobName, Launch, RuntimeKind, Step};
use spark_launch::probe::read_snapshot_dir;
use spark_launch::workload::engines::llamacpp::{self, RpcTransport};
use spark_launch::workload::engines::{EngineKind, EngineOptions};
use spark_launch::workload::launch::{LaunchPlan, LaunchRequest, Lookups, ServeRequest, plan};
use spark_launch::workload::serve::{ServeOptions, ServePlan};

fn fixture(name: &str) -> Vec<NodeInput> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(root.join("nodes"))
        .expect("fixture has a nodes file")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|n| NodeInput {
            name: NodeName::new(n.trim()).unwrap(),
            facts: read_snapshot_dir(&root.join(n.trim())).unwrap(),
        })
        .collect()
}

/// `spark-launch llamacpp MODEL --workers N` as the CLI builds it.
fn request(model: &str, nodes: usize, runtime: RuntimeKind, tuning: EngineOptions) -> ServeRequest {
    let model = ModelSource::parse(model, None).unwrap();
    let mut serve = ServeOptions::new(EngineKind::Llamacpp, JobName::new("ll").unwrap(), model);
    serve.nodes = Some(nodes);
    serve.runtime = runtime;
    serve.stage_model = false;
    ServeRequest {
        engine: EngineKind::Llamacpp,
        serve,
        tuning: EngineOptions {
            rpc_port: Some(llamacpp::DEFAULT_RPC_PORT),
            ..tuning
        },
        gpus_per_node_given: false,
        hf_home: None,
        nccl_from: None,
        allow_old_nccl: false,
        api_key: None,
        recipe: None,
        warnings: Vec::new(),
    }
}

fn serve_plan(r: &ServeRequest, nodes: &[NodeInput]) -> ServePlan {
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let planned = plan(
        &LaunchRequest::Serve(Box::new(r.clone())),
        &names,
        nodes,
        &Lookups::default(),
    )
    .unwrap_or_else(|e| panic!("the plan: {e}"));
    let LaunchPlan::Serve(p) = planned.plan else {
        panic!("not a serving plan")
    };
    *p
}

fn commands(p: &ServePlan) -> Vec<Vec<String>> {
    p.job
        .nodes
        .iter()
        .map(|n| match &n.launch {
            Launch::Container(c) => c.command.clone(),
            Launch::Process(p) => p.command.clone(),
        })
        .collect()
}

#[test]
fn two_sparks_run_an_rpc_server_on_the_worker_s_fabric_address_then_the_head_s_server() {
    let nodes = fixture("seed-001-two-sparks-both-twins");
    let p = serve_plan(
        &request(
            "/models/q4.gguf",
            2,
            RuntimeKind::Docker,
            EngineOptions::default(),
        ),
        &nodes,
    );
    insta::assert_json_snapshot!(p);
    assert_eq!(p.mode, "rpc");
    let cmds = commands(&p);
    let worker = cmds[1].join(" ");
    assert!(
        worker.starts_with("/app/ggml-rpc-server --host 192.168."),
        "{worker}"
    );
    assert!(!worker.contains("0.0.0.0"), "{worker}");
    let head = cmds[0].join(" ");
    assert!(
        head.starts_with("/app/llama-server --model /models/q4.gguf"),
        "{head}"
    );
    let addr = &cmds[1][2];
    assert!(head.contains(&format!("--rpc {addr}:50052")), "{head}");
    // The worker's server first, waited for on its port, then the head; no NCCL steps.
    let kinds: Vec<String> = p.job.steps.iter().map(|s| s.title()).collect();
    let start_worker = kinds
        .iter()
        .position(|t| t.starts_with("Start on") && t.contains(nodes[1].name.as_str()));
    let start_head = kinds.iter().rposition(|t| t.starts_with("Start on"));
    assert!(start_worker < start_head, "{kinds:#?}");
    assert!(
        !p.job.steps.iter().any(|s| matches!(s, Step::CheckNccl(_))),
        "{kinds:#?}"
    );
    assert!(p.nccl.is_none());
}

#[test]
fn one_gpu_server_without_a_fabric_plans_host_processes_with_rpc_servers_beside_the_server() {
    let nodes = fixture("real-gpu-one-node-no-rdma");
    let mut r = request(
        "/data/tiny.gguf",
        1,
        RuntimeKind::Host,
        EngineOptions {
            rpc_gpus: vec![1],
            programs: Some("/opt/llama/bin".into()),
            ..EngineOptions::default()
        },
    );
    r.serve.gpus_per_node = 2;
    r.gpus_per_node_given = true;
    let p = serve_plan(&r, &nodes);
    assert_eq!(p.job.runtime, RuntimeKind::Host);
    assert!(
        !p.job
            .steps
            .iter()
            .any(|s| matches!(s, Step::EnsureImage(_)))
    );
    let cmd = &commands(&p)[0];
    assert_eq!(cmd[0], "bash");
    let script = &cmd[2];
    assert!(script.contains(
        "CUDA_VISIBLE_DEVICES=1 '/opt/llama/bin/ggml-rpc-server' --host 127.0.0.1 --port 50052 &"
    ));
    assert!(
        script.contains("export CUDA_VISIBLE_DEVICES=0\n"),
        "{script}"
    );
    assert!(script.contains("m='/data/tiny.gguf'"), "{script}");
    let rest = cmd[4..].join(" ");
    assert!(
        rest.starts_with("/opt/llama/bin/llama-server --host 0.0.0.0 --port 8080"),
        "{rest}"
    );
    assert!(rest.contains("--rpc 127.0.0.1:50052"), "{rest}");
}

#[test]
fn a_gguf_folder_is_searched_for_its_first_file_by_the_head() {
    let nodes = fixture("real-gpu-one-node-no-rdma");
    let p = serve_plan(
        &request(
            "/data/qwen-gguf",
            1,
            RuntimeKind::Docker,
            EngineOptions::default(),
        ),
        &nodes,
    );
    let cmd = &commands(&p)[0];
    assert_eq!(cmd[0], "bash");
    assert!(cmd[2].contains("ls \"$m\"/*.gguf"), "{}", cmd[2]);
    assert!(cmd[2].contains("m='/models/qwen-gguf'"), "{}", cmd[2]);
    assert!(!cmd[4..].iter().any(|w| w == "--rpc"));
}

#[test]
fn the_transport_verdict_reads_the_rpc_logs() {
    assert_eq!(
        llamacpp::transport("RDMA activated: qpn=7->9 mtu=4096 rx_depth=24"),
        RpcTransport::Rdma
    );
    assert_eq!(
        llamacpp::transport("  transport      : TCP (RDMA auto-negotiate enabled)"),
        RpcTransport::NotRecorded
    );
    assert_eq!(RpcTransport::NotRecorded.as_str(), "not recorded");
}
