//! SGLang's own argument parser (the pinned release, `tests/standin/sglang_parse.py`) judges
//! SGLang command lines: the multi-node line spark-launch will plan passes, a misspelt flag
//! does not, and the SGLang line a recipe fixture asks for passes once the multi-node flags
//! are added.

mod support;

use std::path::Path;

use spark_launch::recipe::RecipeInput;
use spark_launch::recipe::loader;
use support::sglang::sglang_parse;

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

#[test]
fn sglangs_parser_accepts_a_multi_node_line_and_rejects_a_misspelt_flag() {
    let v = sglang_parse(&[
        words(
            "python3 -m sglang.launch_server --model-path M --tp-size 2 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:20000 --host 0.0.0.0 --port 30000 --api-key X",
        ),
        words(
            "sglang serve --model-path M --tp-size 2 --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:20000",
        ),
        words("python3 -m sglang.launch_server --model-path M --tp-szie 2"),
        words("vllm serve M"),
    ]);
    assert_eq!(v.version, "0.5.23");
    assert!(v.flags > 300, "the parser defines SGLang's flags: {v:?}");
    assert_eq!(v.lines[0], Ok(()));
    assert_eq!(
        v.lines[1],
        Ok(()),
        "`sglang serve` is a real spelling in this release"
    );
    assert_eq!(
        v.lines[2].clone().unwrap_err(),
        "sglang_parse.py: error: unrecognized arguments: --tp-szie 2"
    );
    assert!(
        v.lines[3]
            .clone()
            .unwrap_err()
            .starts_with("not an SGLang server command")
    );
}

#[test]
fn the_sglang_line_of_a_recipe_fixture_passes_sglangs_parser_with_multi_node_flags() {
    let launch = loader::load(
        "demo-qwen-sglang",
        Some(Path::new("tests/fixtures/recipes/sparkrun-registry")),
        &RecipeInput {
            gpus_per_node: 1,
            ..RecipeInput::default()
        },
    )
    .expect("the fixture reads");
    let mut head = launch.argv.clone();
    head.extend(words(
        "--nnodes 2 --node-rank 0 --dist-init-addr 169.254.10.1:20000",
    ));
    let v = sglang_parse(&[head]);
    assert_eq!(v.lines[0], Ok(()), "{v:?}");
}
