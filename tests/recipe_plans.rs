//! Community recipes planned as `up RECIPE --dry-run --json` plans them, on the seed-001
//! snapshots (two DGX Sparks, both twins cabled): the recipe fixtures (tests/fixtures/recipes)
//! read through the loader into the serving request, then the one launch planner. The whole
//! plan is snapshot-tested: the recipe's engine words kept verbatim after what spark-launch
//! writes, the per-node environment (templates rendered per node, the derived fabric
//! variables winning), the mods' files and the script that runs them, the steps.

use std::collections::BTreeMap;
use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::launch_file::{self, FileSource};
use spark_launch::model::ModelSource;
use spark_launch::model::hub::parse_info;
use spark_launch::node::NodeName;
use spark_launch::plan::{Launch, Step};
use spark_launch::probe::read_snapshot_dir;
use spark_launch::recipe::RecipeInput;
use spark_launch::recipe::loader;
use spark_launch::recipe::registry::RegistryDir;
use spark_launch::workload::endpoint::{ApiKey, ApiKeyAsk};
use spark_launch::workload::launch::{LaunchPlan, LaunchRequest, Lookups, Planned, plan};
use spark_launch::workload::partial::{Given, PartialServe};

const EUGR: &str = "tests/fixtures/recipes/eugr-checkout";
const REGISTRY: &str = "tests/fixtures/recipes/sparkrun-registry";
const LOCAL: &str = "tests/fixtures/recipes/local";

fn seed_001() -> Vec<NodeInput> {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-001-two-sparks-both-twins");
    ["spark", "spark2"]
        .iter()
        .map(|n| NodeInput {
            name: NodeName::new(*n).unwrap(),
            facts: read_snapshot_dir(&root.join(n)).unwrap(),
        })
        .collect()
}

fn input() -> RecipeInput {
    RecipeInput {
        sets: Vec::new(),
        user_env: BTreeMap::from([("HOME".to_string(), "/home/tester".to_string())]),
        gpus_per_node: 1,
        ray: false,
        nodes: None,
    }
}

/// Where `up` would look the recipe up, with the tester's environment.
fn source(registry: Option<&str>) -> FileSource {
    FileSource {
        registries: registry
            .map(|r| vec![RegistryDir::given(r.into())])
            .unwrap_or_default(),
        registry_given: registry.is_some(),
        user_env: input().user_env,
        ..FileSource::default()
    }
}

/// The recipe's launch with `flags` over it, as `up` makes it.
fn request(name: &str, registry: Option<&str>, flags: PartialServe) -> LaunchRequest {
    let file = launch_file::read(name, &source(registry), &flags).expect("the recipe reads");
    launch_file::request(file, flags).expect("the recipe's launch")
}

fn planned(r: &LaunchRequest) -> Planned {
    let nodes = seed_001();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    plan(r, &names, &nodes, &Lookups::default()).expect("the recipe plans")
}

fn env_of(p: &Planned, i: usize) -> BTreeMap<String, String> {
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    match &s.job.nodes[i].launch {
        Launch::Container(c) => c.env.clone(),
        Launch::Process(_) => panic!("not a container"),
    }
}

#[test]
fn the_v1_recipe_plans_natively_without_its_ray_flag_with_its_mod_in_both_containers() {
    let path = format!("{EUGR}/recipes/demo-glm-flash-nvfp4.yaml");
    let p = planned(&request(&path, None, PartialServe::default()));
    insta::assert_json_snapshot!(p.plan);
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    assert_eq!(s.mode, "native");
    assert!(
        p.warnings.iter().any(|w| w.ends_with(
            "command: --distributed-executor-backend ray dropped, as eugr's runner does without --ray: vLLM runs in its native multi-node mode; give --ray to keep it"
        )),
        "{:?}",
        p.warnings
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("build_args") && w.contains("--exp-demo")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn the_v2_recipe_without_a_command_plans_the_flag_table_line_natively() {
    let p = planned(&request(
        "@official/demo-nemotron-vllm-table",
        Some(REGISTRY),
        PartialServe::default(),
    ));
    insta::assert_json_snapshot!(p.plan);
}

#[test]
fn a_v2_recipe_s_env_templates_are_rendered_per_node_and_the_derived_fabric_wins() {
    let path = format!("{LOCAL}/demo-llama-vllm-env.yaml");
    let p = planned(&request(&path, None, PartialServe::default()));
    insta::assert_json_snapshot!(p.plan);
    let (head, worker) = (env_of(&p, 0), env_of(&p, 1));
    assert_eq!(head["DEMO_RANK"], "0/2@192.168.177.11");
    assert_eq!(worker["DEMO_RANK"], "1/2@192.168.177.12");
    assert_eq!(worker["DEMO_PORT"], "8010");
    assert_eq!(worker["VLLM_ATTENTION_BACKEND"], "FLASHINFER");
    assert_eq!(worker["NCCL_SOCKET_IFNAME"], "enp1s0f1np1");
    for node in ["spark", "spark2"] {
        let w = format!(
            "{node}: the recipe's NCCL_SOCKET_IFNAME=eth0 is not used: spark-launch's NCCL_SOCKET_IFNAME=enp1s0f1np1 for this node wins (--recipe-env keeps the recipe's)"
        );
        assert!(p.warnings.contains(&w), "no `{w}` in {:?}", p.warnings);
    }
    // --recipe-env keeps the recipe's value, said per node.
    let kept = planned(&request(
        &path,
        None,
        PartialServe {
            keep_recipe_env: Given::flag_opt(Some(true), "--recipe-env"),
            ..PartialServe::default()
        },
    ));
    assert_eq!(env_of(&kept, 1)["NCCL_SOCKET_IFNAME"], "eth0");
}

#[test]
fn a_recipe_s_empty_executor_entrypoint_clears_the_image_s_in_every_container_and_the_plan_says_so()
{
    let path = format!("{LOCAL}/demo-qwen-consuming-entrypoint.yaml");
    let p = planned(&request(&path, None, PartialServe::default()));
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    for n in &s.job.nodes {
        let Launch::Container(c) = &n.launch else {
            panic!("not a container")
        };
        assert_eq!(c.entrypoint, Some(vec![]), "{}", n.node);
        assert_eq!(c.command[0], "vllm", "{}: the command runs alone", n.node);
    }
    let json = serde_json::to_value(&p.plan).unwrap();
    assert_eq!(json["recipe"]["entrypoint"], "", "{json}");
    assert_eq!(
        json["job"]["nodes"][1]["launch"]["container"]["entrypoint"],
        serde_json::json!([])
    );
    let text = spark_launch::workload::render::plan(&p.plan);
    assert!(
        text.contains(
            "executor_config.entrypoint \"\": the image's entrypoint is cleared in every container"
        ),
        "{text}"
    );
    assert_eq!(
        text.matches("entry    (the image's cleared: the command runs alone)")
            .count(),
        2,
        "{text}"
    );
    assert!(
        !p.warnings.iter().any(|w| w.contains("executor_config")),
        "an applied entrypoint is not warned about: {:?}",
        p.warnings
    );
}

#[test]
fn flags_beside_up_win_over_the_recipe_and_say_so() {
    let path = format!("{LOCAL}/demo-llama-vllm-env.yaml");
    let o = PartialServe {
        port: Given::flag_opt(Some(9000), "--port"),
        image: Given::flag_opt(Some("vllm-node".into()), "--image"),
        ..PartialServe::default()
    };
    let p = planned(&request(&path, None, o));
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    assert_eq!(s.endpoint.port, 9000);
    assert_eq!(s.served_name, "llama-demo");
    let file = format!("{LOCAL}/demo-llama-vllm-env.yaml");
    for w in [
        format!("{file}: --port 9000 replaces the recipe's --port 8010"),
        format!(
            "{file}: --image vllm-node replaces the recipe's container vllm/vllm-openai:v0.11.0"
        ),
    ] {
        assert!(p.warnings.contains(&w), "no `{w}` in {:?}", p.warnings);
    }
}

#[test]
fn an_sglang_recipe_plans_every_rank_with_its_own_launcher_and_no_key_in_any_command() {
    let r = request(
        "@official/demo-qwen-sglang",
        Some(REGISTRY),
        PartialServe::default(),
    );
    // The key the recipe's command carried, resolved as the launch resolves a given key.
    let LaunchRequest::Serve(serve) = &r else {
        panic!("not a serving request")
    };
    let Some(ApiKeyAsk::Given(key)) = serve.api_key.clone() else {
        panic!("the recipe's key is not asked for: {:?}", serve.api_key)
    };
    let lookups = Lookups {
        api_key: Some(ApiKey { key, file: None }),
        ..Lookups::default()
    };
    let nodes = seed_001();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let p = plan(&r, &names, &nodes, &lookups).expect("the recipe plans");
    insta::assert_json_snapshot!(p.plan);
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    // Each command after the mods' wrapper (`sh -c SCRIPT spark-launch-mods ENGINE…`).
    let command = |i: usize| match &s.job.nodes[i].launch {
        Launch::Container(c) => {
            let engine = c.command.iter().position(|w| w == "spark-launch-mods");
            c.command[engine.map_or(0, |i| i + 1)..].to_vec()
        }
        Launch::Process(_) => panic!("not a container"),
    };
    let (head, worker) = (command(0), command(1));
    // The recipe's `python3 -m sglang.launch_server`, the key moved out of the words into
    // the head's environment (the prelude hands it to SGLang).
    assert_eq!(worker[..3], ["python3", "-m", "sglang.launch_server"]);
    assert_eq!(head[..2], ["python3", "-c"]);
    assert_eq!(head[3..6], ["python3", "-m", "sglang.launch_server"]);
    for c in [&head, &worker] {
        assert!(!c.join(" ").contains("sk-fixture-not-real"), "{c:?}");
        assert!(c.join(" ").contains("--attention-backend triton"), "{c:?}");
    }
    assert!(
        worker.join(" ").contains("--node-rank 1 --dist-init-addr"),
        "{worker:?}"
    );
    assert_eq!(s.served_name, "qwen3-2x");
    assert_eq!(env_of(&p, 1)["SGLANG_DEMO_RANK"], "1/2");
}

#[test]
fn a_llama_cpp_recipe_naming_a_hub_quant_plans_the_picked_file_on_the_head() {
    let r = request(
        "@experimental/demo-gguf-llama-cpp",
        Some(REGISTRY),
        PartialServe::default(),
    );
    let LaunchRequest::Serve(s) = &r else {
        panic!("not a serving launch")
    };
    let spec = s.serve.model.clone();
    assert_eq!(spec.served_name(), "Qwen/Qwen3-1.7B-GGUF:Q8_0");
    // The Hub's answer (`?blobs=true` model info, as `model::hub` reads it) for a repository
    // in Qwen's GGUF naming (`MODEL-QUANT.gguf`), written for this test: not a copy of the
    // repository's listing.
    let ModelSource::Hub {
        repo,
        revision,
        gguf: Some(g),
        ..
    } = &spec
    else {
        panic!("not a GGUF spec: {spec:?}")
    };
    let body = format!(
        r#"{{"sha":"{}","siblings":[{},{}]}}"#,
        "c0ffee".repeat(6) + "c0ff",
        r#"{"rfilename":"Qwen3-1.7B-Q4_K_M.gguf","size":1107409600,"blobId":"0000000000000000000000000000000000000001","lfs":{"sha256":"0000000000000000000000000000000000000000000000000000000000000001","size":1107409600}}"#,
        r#"{"rfilename":"Qwen3-1.7B-Q8_0.gguf","size":1834426016,"blobId":"0000000000000000000000000000000000000002","lfs":{"sha256":"0000000000000000000000000000000000000000000000000000000000000002","size":1834426016}}"#
    );
    let listing = parse_info("u", repo, revision, &body)
        .unwrap()
        .picking(g)
        .unwrap();
    let nodes = seed_001();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let lookups = Lookups {
        model: Some(listing),
        ..Lookups::default()
    };
    let p = plan(&r, &names, &nodes, &lookups).expect("the recipe plans");
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    assert_eq!(s.job.nodes.len(), 1, "max_nodes: 1");
    let Launch::Container(c) = &s.job.nodes[0].launch else {
        panic!("not a container")
    };
    let line = c.command.join(" ");
    assert!(
        line.contains("--model /root/.cache/huggingface/hub/models--Qwen--Qwen3-1.7B-GGUF/snapshots/c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff/Qwen3-1.7B-Q8_0.gguf"),
        "{line}"
    );
    // The recipe's `-hf {model}` is the model: gone from the line; its other words kept.
    assert!(!line.contains("-hf"), "{line}");
    assert!(line.contains("--port 8000"), "{line}");
    assert!(
        line.ends_with("--ctx-size 8192 --jinja --no-mmap"),
        "{line}"
    );
}

#[test]
fn a_registry_listing_says_which_recipes_this_version_runs_on_two_nodes() {
    let entries = loader::list(&[RegistryDir::given(REGISTRY.into())], &input()).expect("lists");
    let fits: Vec<String> = entries
        .iter()
        .map(|e| {
            let fit = e.fit(Some(2)).map(|f| f.label()).unwrap_or_default();
            format!("{}: {fit}", e.label())
        })
        .collect();
    assert_eq!(
        fits,
        [
            "@official/demo-nemotron-vllm-table: yes",
            "@official/demo-qwen-sglang: yes",
            "@experimental/demo-gguf-llama-cpp: yes",
            "@experimental/demo-missing-mod: no: mods[0]: mod \"fix-that-does-not-exist\" not found",
            "@experimental/demo-newer-sparkrun: no: readiness: not a field spark-launch knows",
        ]
    );
    let one = entries[0]
        .fit(Some(1))
        .map(|f| f.label())
        .unwrap_or_default();
    assert!(
        one.starts_with("no: tp × pp = 2 × 1 needs 2 nodes"),
        "{one}"
    );
}

#[test]
fn a_kept_plan_holds_each_mod_file_s_digest_never_its_bytes() {
    // What the launch keeps for `supervise JOB` (records/JOB/plan.json): the plan as printed,
    // each file put into a container as its SHA-256 and size.
    let path = format!("{EUGR}/recipes/demo-glm-flash-nvfp4.yaml");
    let p = planned(&request(&path, None, PartialServe::default()));
    let LaunchPlan::Serve(serve) = &p.plan else {
        panic!("not a serving plan")
    };
    let template =
        std::fs::read_to_string(format!("{EUGR}/mods/fix-demo-chat-template/chat.jinja")).unwrap();
    let printed = serde_json::to_string(&p.plan).unwrap();
    assert!(
        printed.contains("m.content"),
        "the dry run shows the mod's files"
    );
    let state = tempfile::tempdir().unwrap();
    let kept_at = spark_launch::records::save_plan(state.path(), serve).unwrap();
    let kept = std::fs::read_to_string(&kept_at).unwrap();
    assert!(
        !kept.contains("m.content"),
        "the kept plan holds a mod's bytes"
    );
    assert!(!kept.contains("fix-demo-chat-template applied"));
    let digest = spark_launch::digest::sha256_hex(template.as_bytes());
    assert_eq!(kept.matches(&digest).count(), 2, "one per rank: {kept}");
    // The supervisor reads it back.
    let back = spark_launch::records::load_plan(state.path(), &serve.job.job).unwrap();
    assert_eq!(back.job.nodes.len(), 2);
}

const PUBLIC: &str = "tests/fixtures/recipes/public";

/// The recipe at `path` with `sets` and `flags` over it, as `up PATH --set …` makes it.
fn request_with(path: &str, sets: &[&str], flags: PartialServe) -> Result<LaunchRequest, String> {
    let source = FileSource {
        sets: sets
            .iter()
            .map(|s| s.parse().expect("a KEY=VALUE"))
            .collect(),
        ..source(None)
    };
    let file = launch_file::read(path, &source, &flags).map_err(|e| e.to_string())?;
    launch_file::request(file, flags).map_err(|e| e.to_string())
}

fn serve_plan(p: &Planned) -> &spark_launch::workload::serve::ServePlan {
    let LaunchPlan::Serve(s) = &p.plan else {
        panic!("not a serving plan")
    };
    s
}

fn command_of(p: &Planned, i: usize) -> Vec<String> {
    match &serve_plan(p).job.nodes[i].launch {
        Launch::Container(c) => c.command.clone(),
        Launch::Process(_) => panic!("not a container"),
    }
}

#[test]
fn the_public_gguf_recipes_asking_for_more_nodes_at_tensor_parallel_one_plan_one_node_as_sparkrun_does()
 {
    for (name, asked) in [
        ("qwen3.5-397b-gguf-q3km-llama-cpp", 2),
        ("qwen3.5-397b-gguf-q6k-llama-cpp", 4),
    ] {
        let path = format!("{PUBLIC}/{name}.yaml");
        let p = planned(&request(&path, None, PartialServe::default()));
        let s = serve_plan(&p);
        assert_eq!((s.nodes.len(), s.mode.as_str()), (1, "single"), "{name}");
        let said = format!(
            "{path}: min_nodes: the recipe asks for at least {asked} nodes, but tensor_parallel 1 sizes it to one node, as sparkrun sizes it (it uses as many hosts as tensor_parallel says): --set tensor_parallel={asked} spreads it over {asked} nodes with RPC"
        );
        // Said before it runs, and kept in the plan's recipe (the JSON of --dry-run --json).
        assert!(p.warnings.contains(&said), "{:?}", p.warnings);
        let recipe = s.recipe.as_ref().expect("the plan's recipe");
        assert!(recipe.warnings.contains(&said), "{:?}", recipe.warnings);
        let line = command_of(&p, 0).join(" ");
        assert!(
            !line.contains("--rpc") && !line.contains("--split-mode"),
            "{line}"
        );
    }
}

#[test]
fn a_tensor_parallel_over_the_public_gguf_recipe_spreads_it_over_rpc_split_by_layers_as_sparkrun_s_head()
 {
    let path = format!("{PUBLIC}/qwen3.5-397b-gguf-q3km-llama-cpp.yaml");
    let said = format!(
        "{path}: tensor_parallel: tensor_parallel 2 spreads the job over 2 nodes (llama-server's RPC servers); across nodes llama-server splits the model by layers (its default), as sparkrun's head does, not by rows"
    );
    // `--set tensor_parallel=2` (sparkrun's `--tp 2`), and `--tp 2` beside `up`, alike.
    for r in [
        request_with(&path, &["tensor_parallel=2"], PartialServe::default()),
        request_with(
            &path,
            &[],
            PartialServe {
                tp: Given::flag_opt(Some(2), "--tp"),
                ..PartialServe::default()
            },
        ),
    ] {
        let p = planned(&r.expect("the recipe's launch"));
        let s = serve_plan(&p);
        assert_eq!((s.nodes.len(), s.mode.as_str()), (2, "rpc"));
        let head = command_of(&p, 0);
        assert!(
            head.join(" ").contains("--rpc 192.168.177.12:50052"),
            "{head:?}"
        );
        assert!(!head.contains(&"--split-mode".to_string()), "{head:?}");
        assert!(p.warnings.contains(&said), "{:?}", p.warnings);
        let recipe = s.recipe.as_ref().expect("the plan's recipe");
        assert!(recipe.warnings.contains(&said), "{:?}", recipe.warnings);
        assert!(
            !p.warnings
                .iter()
                .any(|w| w.contains("min_nodes") && w.contains("sizes it to 2")),
            "{:?}",
            p.warnings
        );
    }
    // Pipeline parallel over two nodes: the same layer split, the line as written.
    let p =
        planned(&request_with(&path, &["pipeline_parallel=2"], PartialServe::default()).unwrap());
    assert!(!command_of(&p, 0).contains(&"--split-mode".to_string()));
}

#[test]
fn tensor_and_pipeline_parallel_both_above_one_are_refused_naming_both() {
    let path = format!("{PUBLIC}/qwen3.5-397b-gguf-q3km-llama-cpp.yaml");
    let e = request_with(
        &path,
        &["tensor_parallel=2", "pipeline_parallel=2"],
        PartialServe::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("tensor_parallel 2 and pipeline_parallel 2 are both above 1")
            && e.contains("--set pipeline_parallel=1"),
        "{e}"
    );
    // `--tp` beside `up` over a recipe's pipeline parallel: the same refusal.
    let e = request_with(
        &path,
        &["pipeline_parallel=2"],
        PartialServe {
            tp: Given::flag_opt(Some(2), "--tp"),
            ..PartialServe::default()
        },
    )
    .unwrap_err();
    assert!(
        e.contains("tensor_parallel 2 and pipeline_parallel 2"),
        "{e}"
    );
}

#[test]
fn the_public_dflash_scripts_run_their_commands_before_the_server_on_the_head() {
    for name in [
        "qwen3.6-27b-q4km-dflash-llamacpp-ishan5ain",
        "qwen3.6-27b-q4km-dflash-thinking-llamacpp-ishan5ain",
    ] {
        let path = format!("{PUBLIC}/{name}.yaml");
        let p = planned(&request(&path, None, PartialServe::default()));
        let s = serve_plan(&p);
        assert_eq!(s.nodes.len(), 1, "max_nodes: 1");
        let recipe = s.recipe.as_ref().expect("the plan's recipe");
        let before = recipe
            .before_engine
            .as_deref()
            .expect("the commands before the server");
        assert!(
            before.starts_with("if [ ! -f /tmp/dflash-draft.gguf ]; then"),
            "{before}"
        );
        assert!(
            before.contains("curl -sL --max-time 300 -o /tmp/dflash-draft.gguf \"https://huggingface.co/spiritbuun/Qwen3.6-27B-DFlash-GGUF/resolve/main/dflash-draft-3.6-q8_0.gguf\""),
            "{before}"
        );
        assert!(before.ends_with("fi &&"), "{before}");
        // One bash runs them, then becomes the server spark-launch writes: the model staged
        // (never `-hf`), the recipe's port, the draft it fetched.
        let head = command_of(&p, 0);
        assert_eq!(head[..2], ["bash", "-c"]);
        assert_eq!(head[2], format!("{before}\nexec \"$@\"\n"));
        assert_eq!(head[3], "spark-launch-recipe");
        let line = head[4..].join(" ");
        assert!(!line.contains("-hf ") && !line.contains("curl"), "{line}");
        assert!(
            line.contains("--port 8080") && line.contains("-md /tmp/dflash-draft.gguf"),
            "{line}"
        );
        assert!(line.ends_with("-ctk turbo4 -ctv turbo4"), "{line}");
        assert_eq!(s.endpoint.port, 8080);
        // Readiness is the server's own, on the recipe's port; the model is staged on the head.
        let json = serde_json::to_string(&p.plan).unwrap();
        assert!(json.contains("\"before_engine\""), "{json}");
        let text = spark_launch::workload::render::plan(&p.plan);
        assert!(
            text.contains("until http://127.0.0.1:8080/health answers on spark"),
            "{text}"
        );
        assert!(text.contains("before the engine (on the head"), "{text}");
    }
    let thinking = format!("{PUBLIC}/qwen3.6-27b-q4km-dflash-thinking-llamacpp-ishan5ain.yaml");
    let p = planned(&request(&thinking, None, PartialServe::default()));
    let head = command_of(&p, 0);
    assert!(
        head.windows(2)
            .any(|w| w == ["--chat-template-kwargs", "{\"preserve_thinking\":true}"]),
        "{head:?}"
    );
}

#[test]
fn a_script_recipe_asked_onto_two_nodes_is_refused_naming_why() {
    // A script without max_nodes, written for this test, with `--tp 2` beside `up`.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.yaml");
    std::fs::write(
        &path,
        "recipe_version: \"2\"\nmodel: org/m-GGUF:Q4_K_M\nruntime: llama-cpp\ncommand: |\n  echo ready &&\n  llama-server -hf {model} --port 8080\n",
    )
    .unwrap();
    let r = request_with(
        path.to_str().unwrap(),
        &[],
        PartialServe {
            tp: Given::flag_opt(Some(2), "--tp"),
            ..PartialServe::default()
        },
    )
    .expect("the recipe's launch");
    let nodes = seed_001();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let e = match plan(&r, &names, &nodes, &Lookups::default()) {
        Ok(_) => panic!("a script planned on two nodes"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("runs commands before the server (a script), which runs on one node only")
            && e.contains("pre_exec"),
        "{e}"
    );
}

#[test]
fn a_recipe_s_draft_and_its_distribution_config_are_staged_beside_the_model_at_their_pins() {
    let path = format!("{PUBLIC}/glm-5.3-flash-dflash2-distribution.yaml");
    let p =
        planned(&request_with(&path, &[], PartialServe::default()).expect("the recipe's launch"));
    let staged: Vec<(String, usize)> = serve_plan(&p)
        .job
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::StageModel(m) => Some((m.model.to_string(), m.nodes.len())),
            _ => None,
        })
        .collect();
    // The drafter once (named by speculative_config and by distribution_config), at its own
    // commit, on the one node max_nodes allows; the served model at its pin.
    assert_eq!(
        staged,
        vec![
            (
                "turboderp/GLM-5.3-Flash-exl3@51058cd551c7e570d87bd32a4adee720edce2349".to_string(),
                1
            ),
            (
                "incoai/GLM-5.3-Flash-DFlash2@bf582e4eacc1810f76656d1811693ff6c6737d2a".to_string(),
                1
            ),
        ]
    );
    assert!(
        !p.warnings.iter().any(|w| w.contains("distribution_config")),
        "nothing of it is left unapplied: {:?}",
        p.warnings
    );
}
