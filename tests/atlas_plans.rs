//! Atlas through the engine seam, planned as `up RECIPE --dry-run --json` and `spark-launch
//! atlas MODEL --dry-run --json` plan it, on the seed-001 snapshots (two DGX Sparks, both
//! twins cabled): real recipes of Avarok's atlas-recipes registry (copied into
//! tests/fixtures/recipes/atlas-recipes, each file saying where from) read through the loader
//! under sparkrun's `@atlas` namespace, then the one launch planner. The plans are
//! snapshot-tested; the assertions name what Atlas needs of them: one rank per Spark with its
//! world, rank and rendezvous, the workers serving no API, the head started first, the same
//! speculative flags on every rank, the key on no command line.

use spark_launch::recipe::registry::RegistryDir;
use std::collections::BTreeMap;
use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::launch_file::{self, FileSource};
use spark_launch::model::ModelSource;
use spark_launch::node::NodeName;
use spark_launch::plan::secret::Secret;
use spark_launch::plan::{ContainerSpec, Launch, Step};
use spark_launch::probe::read_snapshot_dir;
use spark_launch::recipe::RecipeInput;
use spark_launch::recipe::loader;
use spark_launch::workload::endpoint::{ApiKey, ApiKeyAsk};
use spark_launch::workload::engines::atlas::KEY_SH;
use spark_launch::workload::engines::{EngineKind, EngineOptions};
use spark_launch::workload::launch::{LaunchPlan, LaunchRequest, Lookups, Planned, plan};
use spark_launch::workload::partial::{self, Given, PartialServe};
use spark_launch::workload::serve::ServePlan;

const REGISTRY: &str = "tests/fixtures/recipes/atlas-recipes";

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

fn user_env() -> BTreeMap<String, String> {
    BTreeMap::from([("HOME".to_string(), "/home/tester".to_string())])
}

/// `up @atlas/NAME --registry <the fixture registry>` with `flags` over it.
fn recipe(name: &str, flags: PartialServe) -> LaunchRequest {
    let source = FileSource {
        registries: vec![RegistryDir::given(REGISTRY.into())],
        registry_given: true,
        user_env: user_env(),
        ..FileSource::default()
    };
    let file = launch_file::read(name, &source, &flags).expect("the recipe reads");
    launch_file::request(file, flags).expect("the recipe's launch")
}

fn planned(r: &LaunchRequest, lookups: &Lookups) -> Planned {
    let nodes = seed_001();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    plan(r, &names, &nodes, lookups).expect("the launch plans")
}

fn serving(p: &Planned) -> &ServePlan {
    match &p.plan {
        LaunchPlan::Serve(s) => s,
        _ => panic!("not a serving plan"),
    }
}

fn container(s: &ServePlan, i: usize) -> &ContainerSpec {
    match &s.job.nodes[i].launch {
        Launch::Container(c) => c,
        Launch::Process(_) => panic!("not a container"),
    }
}

fn line(s: &ServePlan, i: usize) -> String {
    container(s, i).command.join(" ")
}

/// The steps as their tags (`start`, `wait-port`, …), in order.
fn step_kinds(s: &ServePlan) -> Vec<String> {
    s.job
        .steps
        .iter()
        .map(|step: &Step| {
            serde_json::to_value(step).unwrap()["step"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn the_minimax_expert_parallel_recipe_plans_one_rank_per_spark_the_head_first() {
    let p = planned(
        &recipe("@atlas/minimax-m2.7-nvfp4-ep2", PartialServe::default()),
        &Lookups::default(),
    );
    insta::assert_json_snapshot!(p.plan);
    let s = serving(&p);
    assert_eq!(s.nodes.len(), 2);
    assert_eq!(s.mode, "native");
    assert_eq!((s.tp, s.expert_parallel), (1, Some(2)));
    let (head, worker) = (line(s, 0), line(s, 1));
    assert!(head.starts_with("spark serve /root/.cache/huggingface/hub/models--lukealonso--MiniMax-M2.7-NVFP4/snapshots/main --model-name lukealonso/MiniMax-M2.7-NVFP4 --tp-size 1 --ep-size 2 --bind 0.0.0.0 --port 8888 --world-size 2 --rank 0 --master-addr 192.168.177.11 --master-port 29500"), "{head}");
    assert!(
        worker.contains("--port 0 --world-size 2 --rank 1 --master-addr 192.168.177.11"),
        "{worker}"
    );
    // The recipe's own settings, after what spark-launch writes, on both ranks.
    for l in [&head, &worker] {
        assert!(
            l.ends_with("--gpu-memory-utilization 0.9 --max-seq-len 12288 --kv-cache-dtype bf16 --max-batch-size 1 --oom-guard-mb 512 --enable-prefix-caching"),
            "{l}"
        );
    }
    // The image's entrypoint (`spark`) cleared, the GB10 NCCL settings beside the derived
    // fabric variables.
    let c = container(s, 1);
    assert_eq!(c.entrypoint, Some(Vec::new()));
    // Docker's seccomp filter off (io_uring for --high-speed-swap), as sparkrun runs Atlas,
    // on both ranks, in the plan's text too.
    for i in 0..2 {
        assert_eq!(container(s, i).security_opt, ["seccomp=unconfined"]);
    }
    let text = spark_launch::workload::render::plan(&p.plan);
    assert_eq!(
        text.matches("· security-opt seccomp=unconfined").count(),
        2,
        "{text}"
    );
    assert_eq!(c.env["NCCL_PROTO"], "Simple");
    assert_eq!(c.env["NCCL_IB_HCA"], "rocep1s0f1,roceP2p1s0f1");
    // The head's rendezvous port is waited for (an `exec` on the head) before the worker.
    let kinds = step_kinds(s);
    let start = kinds.iter().position(|k| k == "start").unwrap();
    assert_eq!(
        kinds[start..start + 3],
        ["start", "exec", "start"],
        "{kinds:?}"
    );
}

#[test]
fn the_qwen_122b_expert_parallel_recipe_gives_both_ranks_the_same_speculative_flags() {
    let p = planned(
        &recipe(
            "@atlas/qwen3.5-122b-a10b-nvfp4-ep2",
            PartialServe::default(),
        ),
        &Lookups::default(),
    );
    insta::assert_json_snapshot!(p.plan);
    let s = serving(&p);
    assert_eq!(s.nodes.len(), 2);
    // Mismatched flags land the worker's MTP verify where it has no buffers (the recipe's
    // own note): every rank carries them.
    for i in 0..2 {
        assert!(
            line(s, i).ends_with("--mtp-quantization bf16 --speculative"),
            "{}",
            line(s, i)
        );
    }
}

#[test]
fn the_single_spark_flagship_passes_atlas_s_lm_head_flag_and_leaves_the_other_spark_idle() {
    let p = planned(
        &recipe("@atlas/qwen3.6-35b-a3b-fp8-mtp", PartialServe::default()),
        &Lookups::default(),
    );
    insta::assert_json_snapshot!(p.plan);
    let s = serving(&p);
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.mode, "single");
    assert_eq!(s.expert_parallel, None);
    let head = line(s, 0);
    assert!(head.contains("--lm-head-dtype bf16"), "{head}");
    assert!(head.contains("--max-prefill-tokens 32768"), "{head}");
    assert!(!head.contains("--world-size"), "{head}");
    // Alone, a rank needs no NCCL settings of a group.
    assert!(!container(s, 0).env.contains_key("NCCL_PROTO"));
    assert!(
        s.notes.iter().any(|n| n.contains("spark2 stays idle")),
        "{:?}",
        s.notes
    );
}

#[test]
fn every_recipe_of_the_registry_is_listed_as_running_on_two_sparks() {
    let input = RecipeInput {
        user_env: user_env(),
        gpus_per_node: 1,
        ..RecipeInput::default()
    };
    let entries = loader::list(&[RegistryDir::given(REGISTRY.into())], &input).expect("lists");
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
            "@atlas/minimax-m2.7-nvfp4-ep2: yes",
            "@atlas/qwen3.5-122b-a10b-nvfp4-ep2: yes",
            "@atlas/qwen3.6-35b-a3b-fp8-mtp: yes",
        ]
    );
    // Expert parallelism 2 needs both Sparks.
    let one = entries[0]
        .fit(Some(1))
        .map(|f| f.label())
        .unwrap_or_default();
    assert!(one.starts_with("no:"), "{one}");
}

#[test]
fn an_api_key_reaches_atlas_as_a_tokens_file_and_is_on_no_command_line() {
    let flags = PartialServe {
        api_key: Some(Given::flag(
            ApiKeyAsk::Given(Secret::new("sk-atlas-not-real").unwrap()),
            "--api-key",
        )),
        ..PartialServe::default()
    };
    let r = recipe("@atlas/minimax-m2.7-nvfp4-ep2", flags);
    let lookups = Lookups {
        api_key: Some(ApiKey {
            key: Secret::new("sk-atlas-not-real").unwrap(),
            file: None,
        }),
        ..Lookups::default()
    };
    let p = planned(&r, &lookups);
    let s = serving(&p);
    let head = container(s, 0);
    assert_eq!(
        head.command[..4],
        ["sh", "-c", KEY_SH, "spark-launch-atlas"]
    );
    assert_eq!(head.command[4..6], ["spark", "serve"]);
    assert_eq!(head.env["SL_ATLAS_AUTH_TOKEN"], "sk-atlas-not-real");
    let printed = serde_json::to_string(&p.plan).unwrap();
    assert!(!printed.contains("sk-atlas-not-real"), "the key is printed");
    for i in 0..2 {
        assert!(!line(s, i).contains("sk-atlas"), "{}", line(s, i));
    }
    // The script adds `--require-auth --auth-tokens-file` as it starts Atlas; the worker serves
    // no API and needs neither.
    assert!(!head.command[4..].contains(&"--require-auth".to_string()));
    assert!(!line(s, 1).contains("auth"), "{}", line(s, 1));
}

#[test]
fn spark_launch_atlas_with_ep_2_plans_the_same_group_as_the_recipe() {
    let ask = PartialServe {
        engine: Some(Given::flag(EngineKind::Atlas, "the command")),
        model: Some(Given::flag(
            ModelSource::parse("lukealonso/MiniMax-M2.7-NVFP4", None).unwrap(),
            "MODEL",
        )),
        tuning: EngineOptions {
            expert_parallel: Some(2),
            ..EngineOptions::default()
        },
        ..PartialServe::default()
    };
    let r = LaunchRequest::Serve(Box::new(
        partial::layer(PartialServe::default(), ask).expect("the flags layer"),
    ));
    let p = planned(&r, &Lookups::default());
    insta::assert_json_snapshot!(p.plan);
    let s = serving(&p);
    assert_eq!(s.nodes.len(), 2);
    assert!(
        line(s, 1).ends_with("--tp-size 1 --ep-size 2 --port 0 --world-size 2 --rank 1 --master-addr 192.168.177.11 --master-port 29500"),
        "{}",
        line(s, 1)
    );
    assert_eq!(container(s, 0).image, "avarok/atlas-gb10:latest");
}
