//! llama.cpp plans on probe snapshots, through the real derive and launch planner: two Sparks
//! (an RPC server on the worker bound to its fabric address, `llama-server --rpc` on the head,
//! the servers started first), one node without any fabric (a GPU server: nothing derived, no
//! NCCL steps), the RPC path on one machine (`--rpc-gpus`) as host processes, a GGUF
//! folder, and a Hub `REPO:QUANT` spec whose file(s) the Hub's listing picks (staged on the head
//! alone, the server given their path). One two-node plan is snapshot-tested whole.

use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::model::ModelSource;
use spark_launch::model::hub::{Resolved, parse_info};
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
    serve_plan_with(r, nodes, &Lookups::default())
}

fn serve_plan_with(r: &ServeRequest, nodes: &[NodeInput], lookups: &Lookups) -> ServePlan {
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let planned = plan(
        &LaunchRequest::Serve(Box::new(r.clone())),
        &names,
        nodes,
        lookups,
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

const SHA: &str = "5b2ad4f0d0c0ffee0ddba11c0ffee0ddba11c0fe";

/// The Hub's model-info answer (`?blobs=true`: `sha`, `siblings` with `rfilename`, `size`,
/// `lfs.sha256`, as `model::hub` reads it) for a GGUF repository in unsloth's naming (one file
/// per quant at the root, a split quant in a folder named after it, a projector), written for
/// this test: not a copy of any repository's listing. Resolved as the launch's lookup does,
/// then picked by `spec`.
fn hub_answer(spec: &ModelSource) -> Resolved {
    let ModelSource::Hub {
        repo,
        revision,
        gguf: Some(g),
        ..
    } = spec
    else {
        panic!("not a GGUF spec")
    };
    let lfs = |path: &str, size: u64, n: u32| {
        format!(
            r#"{{"rfilename":"{path}","size":{size},"blobId":"{n:040x}","lfs":{{"sha256":"{n:064x}","size":{size}}}}}"#
        )
    };
    let body = format!(
        r#"{{"sha":"{SHA}","siblings":[{}]}}"#,
        [
            r#"{"rfilename":"README.md","size":812,"blobId":"a6344aac8c09253b3b630fb776ae94478aa0275b"}"#
                .to_string(),
            lfs("BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 49_000_000_000, 1),
            lfs("BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf", 12_100_000_000, 2),
            lfs("Qwen3-30B-A3B-Q4_K_M.gguf", 18_600_000_000, 3),
            lfs("Qwen3-30B-A3B-Q8_0.gguf", 32_500_000_000, 4),
            lfs("mmproj-F16.gguf", 1_080_000_000, 5),
        ]
        .join(",")
    );
    parse_info("u", repo, revision, &body)
        .expect("the answer parses")
        .picking(g)
        .expect("the spec picks")
}

fn hub_spec_request(spec: &str, nodes: usize, runtime: RuntimeKind) -> (ServeRequest, Lookups) {
    let model = ModelSource::parse(spec, None).unwrap();
    let mut r = request(
        "/placeholder.gguf",
        nodes,
        runtime,
        EngineOptions::default(),
    );
    r.serve.model = model.clone();
    r.serve.stage_model = true;
    let lookups = Lookups {
        model: Some(hub_answer(&model)),
        ..Lookups::default()
    };
    (r, lookups)
}

#[test]
fn a_hub_quant_spec_stages_only_its_files_on_the_head_and_gives_the_server_their_path() {
    let nodes = fixture("seed-001-two-sparks-both-twins");
    let (r, lookups) =
        hub_spec_request("unsloth/Qwen3-30B-A3B-GGUF:q4_k_m", 2, RuntimeKind::Docker);
    let p = serve_plan_with(&r, &nodes, &lookups);
    let snapshot =
        format!("/root/.cache/huggingface/hub/models--unsloth--Qwen3-30B-A3B-GGUF/snapshots/{SHA}");
    let head = commands(&p)[0].join(" ");
    assert!(
        head.starts_with(&format!(
            "/app/llama-server --model {snapshot}/Qwen3-30B-A3B-Q4_K_M.gguf "
        )),
        "{head}"
    );
    assert!(
        head.contains(&format!("--mmproj {snapshot}/mmproj-F16.gguf")),
        "{head}"
    );
    assert!(
        head.contains("--alias unsloth/Qwen3-30B-A3B-GGUF:q4_k_m"),
        "{head}"
    );
    assert!(!head.contains("-hf"), "{head}");
    // Staged on the head alone, the picked files only.
    let stage = p
        .job
        .steps
        .iter()
        .find_map(|s| match s {
            Step::StageModel(m) => Some(m),
            _ => None,
        })
        .expect("a staging step");
    assert_eq!(stage.nodes, [nodes[0].name.clone()]);
    let files: Vec<&str> = stage
        .listing
        .as_ref()
        .unwrap()
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(files, ["Qwen3-30B-A3B-Q4_K_M.gguf", "mmproj-F16.gguf"]);
    // The RPC server reads no model file: no Hugging Face cache or model mounted (only the
    // runtime cache folder every rank gets).
    let Launch::Container(worker) = &p.job.nodes[1].launch else {
        panic!("not a container")
    };
    assert!(
        worker
            .mounts
            .iter()
            .all(|m| m.target == "/var/cache/spark-launch"),
        "{:?}",
        worker.mounts
    );
    assert!(worker.command[0].ends_with("ggml-rpc-server"));
}

#[test]
fn a_split_quant_as_host_processes_is_loaded_from_its_first_part_in_the_node_s_own_cache() {
    let nodes = fixture("real-gpu-one-node-no-rdma");
    let (mut r, lookups) =
        hub_spec_request("unsloth/Qwen3-30B-A3B-GGUF:BF16", 1, RuntimeKind::Host);
    r.hf_home = Some("/data/hf".into());
    // The projector is the user's choice here.
    r.serve.engine_args = vec!["--no-mmproj".into()];
    let p = serve_plan_with(&r, &nodes, &lookups);
    let head = commands(&p)[0].join(" ");
    assert!(
        head.contains(&format!(
            "--model /data/hf/hub/models--unsloth--Qwen3-30B-A3B-GGUF/snapshots/{SHA}/BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf"
        )),
        "{head}"
    );
    assert!(!head.contains("--mmproj"), "{head}");
    assert!(head.ends_with("--no-mmproj"), "{head}");
}

#[test]
fn a_hub_repository_without_a_quant_is_read_as_llama_cpp_s_default_and_other_engines_refuse_a_quant()
 {
    let plain = ModelSource::parse("unsloth/Qwen3-30B-A3B-GGUF", None).unwrap();
    let o = ServeOptions::new(EngineKind::Llamacpp, JobName::new("ll").unwrap(), plain);
    let g = o.model.gguf().expect("read as a GGUF spec");
    assert_eq!(g.quant, None);
    let mut r = request("/m.gguf", 1, RuntimeKind::Docker, EngineOptions::default());
    r.serve.model = o.model.clone();
    let lookups = Lookups {
        model: Some(hub_answer(&o.model)),
        ..Lookups::default()
    };
    let p = serve_plan_with(&r, &fixture("real-gpu-one-node-no-rdma"), &lookups);
    assert!(
        commands(&p)[0]
            .join(" ")
            .contains("/Qwen3-30B-A3B-Q4_K_M.gguf"),
        "Q4_K_M is llama.cpp's default"
    );

    let spec = ModelSource::parse("unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M", None).unwrap();
    let vllm = ServeRequest {
        engine: EngineKind::Vllm,
        serve: ServeOptions::new(EngineKind::Vllm, JobName::new("v").unwrap(), spec),
        ..request("/m.gguf", 1, RuntimeKind::Docker, EngineOptions::default())
    };
    let refused = LaunchRequest::Serve(Box::new(vllm))
        .refuse_before_nodes()
        .unwrap_err()
        .to_string();
    assert!(refused.contains("a GGUF spec (`:Q4_K_M`)"), "{refused}");
    assert!(refused.contains("spark-launch llamacpp"), "{refused}");
}

#[test]
fn the_llamacpp_command_writes_no_split_mode_and_keeps_the_one_after_the_double_dash() {
    // `spark-launch llamacpp MODEL --workers 1 [-- ARGS]` as the CLI lays its flags: no flag
    // of it has tensor-parallel meaning, so llama-server's own default split (layers) stands
    // unless the extra arguments say otherwise.
    use spark_launch::workload::partial::{self, Given, PartialServe};
    let nodes = fixture("seed-001-two-sparks-both-twins");
    for (extra, split) in [(vec![], None), (vec!["--split-mode", "row"], Some("row"))] {
        let ask = PartialServe {
            engine: Some(Given::flag(EngineKind::Llamacpp, "the command")),
            model: Some(Given::flag(
                ModelSource::parse("/models/q4.gguf", None).unwrap(),
                "MODEL",
            )),
            engine_args: Some(Given::flag(
                extra.iter().map(|s| s.to_string()).collect(),
                "--",
            )),
            nodes: Some(Given::flag(2, "--workers")),
            ..PartialServe::default()
        };
        let r = partial::layer(PartialServe::default(), ask).expect("the request");
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let p = serve_plan(&r, &nodes);
        assert_eq!(p.mode, "rpc");
        let head = &commands(&p)[0];
        let at: Vec<usize> = (0..head.len())
            .filter(|i| head[*i] == "--split-mode")
            .collect();
        match split {
            None => assert!(at.is_empty(), "{head:?}"),
            Some(mode) => {
                assert_eq!(at.len(), 1, "{head:?}");
                assert_eq!(head[at[0] + 1], mode);
            }
        }
    }
}
