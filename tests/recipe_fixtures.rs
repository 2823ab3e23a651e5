//! The recipe fixtures (tests/fixtures/recipes, both formats) read end to end through the
//! loader: files, mods found on disk, registry lookup, the launch each asks for (snapshots of
//! what a plan would be built from), per-node env, and the refusals with their exit-2 texts.

use std::collections::BTreeMap;
use std::path::Path;

use spark_launch::recipe::loader::{self, RecipeLoadError};
use spark_launch::recipe::registry::RegistryDir;
use spark_launch::recipe::{RecipeInput, RecipeNode};

const EUGR: &str = "tests/fixtures/recipes/eugr-checkout";
const REGISTRY: &str = "tests/fixtures/recipes/sparkrun-registry";

fn input(sets: &[&str]) -> RecipeInput {
    RecipeInput {
        sets: sets
            .iter()
            .map(|s| s.parse().expect("a KEY=VALUE"))
            .collect(),
        user_env: BTreeMap::from([("HF_TOKEN".to_string(), "hf_fixture".to_string())]),
        gpus_per_node: 1,
        ray: false,
        nodes: None,
    }
}

#[test]
fn the_v1_fixture_reads_with_its_ray_flag_dropped_and_its_mod_from_the_checkout() {
    let path = format!("{EUGR}/recipes/demo-glm-flash-nvfp4.yaml");
    let launch = loader::load(&path, &[], &input(&[])).expect("the v1 fixture reads");
    assert_eq!(
        launch.mods[0].folder,
        Path::new(EUGR).join("mods/fix-demo-chat-template")
    );
    insta::assert_json_snapshot!(launch);
}

#[test]
fn a_v1_recipe_in_a_sub_folder_finds_its_mod_and_takes_sets() {
    let path = format!("{EUGR}/recipes/2x-cluster/demo-qwen-pp2.yaml");
    let launch = loader::load(&path, &[], &input(&["max_num_seqs=16"])).expect("reads");
    assert_eq!((launch.tp, launch.pp, launch.nodes), (1, 2, 2));
    assert!(!launch.ray);
    assert!(
        launch
            .argv
            .windows(2)
            .any(|w| w == ["--max-num-seqs", "16"])
    );
    assert_eq!(launch.mods[0].name, "fix-demo-chat-template");
}

#[test]
fn the_v2_sglang_fixture_is_found_by_name_and_its_env_is_rendered_per_node() {
    let launch = loader::load(
        "demo-qwen-sglang",
        &[RegistryDir::given(REGISTRY.into())],
        &input(&[]),
    )
    .expect("the v2 fixture reads");
    insta::assert_json_snapshot!(launch);
    let node = |rank: u32, host: &str| RecipeNode {
        num_nodes: 2,
        node_rank: rank,
        node_host: host.into(),
        ..RecipeNode::default()
    };
    let head = launch
        .env
        .render(&node(0, "169.254.10.1"))
        .expect("renders");
    let worker = launch
        .env
        .render(&node(1, "169.254.10.2"))
        .expect("renders");
    assert_eq!(head["SGLANG_DEMO_RANK"], "0/2");
    assert_eq!(worker["SGLANG_DEMO_RANK"], "1/2");
    assert_eq!(worker["SGLANG_DEMO_HOST"], "169.254.10.2");
    assert_eq!(worker["HF_TOKEN"], "hf_fixture");
}

#[test]
fn the_v2_fixture_without_a_command_gets_the_flag_table_command() {
    let launch = loader::load(
        "@official/demo-nemotron-vllm-table",
        &[RegistryDir::given(REGISTRY.into())],
        &input(&[]),
    )
    .expect("reads");
    insta::assert_json_snapshot!(launch);
}

#[test]
fn the_registry_lists_every_recipe_with_what_it_needs_or_why_not() {
    let entries = loader::list(&[RegistryDir::given(REGISTRY.into())], &input(&[])).expect("lists");
    let summary: Vec<String> = entries
        .iter()
        .map(|e| match &e.launch {
            Some(l) => format!(
                "@{}/{}{}: {} on {} node(s)",
                e.file.sub,
                e.file.name,
                if e.hidden { " (hidden)" } else { "" },
                l.engine,
                l.nodes
            ),
            None => format!(
                "@{}/{}{}: refused: {}",
                e.file.sub,
                e.file.name,
                if e.hidden { " (hidden)" } else { "" },
                e.problems.join(" | ")
            ),
        })
        .collect();
    insta::assert_snapshot!(summary.join("\n"));
}

fn refusal(name: &str) -> String {
    match loader::load(name, &[RegistryDir::given(REGISTRY.into())], &input(&[])) {
        Err(RecipeLoadError::Recipe(e)) => e.to_string(),
        other => panic!("{name} was not refused as a recipe: {other:?}"),
    }
}

#[test]
fn a_missing_mod_is_refused_before_anything_starts_naming_where_it_looked() {
    insta::assert_snapshot!(refusal("demo-missing-mod"));
}

#[test]
fn a_field_of_a_newer_sparkrun_is_a_named_problem() {
    insta::assert_snapshot!(refusal("demo-newer-sparkrun"));
}
