//! SGLang's own argument parser (the pinned release, `tests/standin/sglang_parse.py`) judges
//! SGLang command lines: the multi-node line spark-launch will plan passes, a misspelt flag
//! does not, and the SGLang line a recipe fixture asks for passes once the multi-node flags
//! are added.

mod support;

use spark_launch::recipe::RecipeInput;
use spark_launch::recipe::loader;
use spark_launch::workload::engines::{EngineKind, FlagMatch, match_flag};
use support::sglang::{IMAGE, NEWEST, Resolved, sglang_parse, sglang_resolve_with};

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
        &[spark_launch::recipe::registry::RegistryDir::given(
            "tests/fixtures/recipes/sparkrun-registry".into(),
        )],
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

#[test]
fn every_prefix_of_a_flag_spark_launch_writes_is_read_as_sglangs_parsers_read_it() {
    // Each prefix of each flag spark-launch owns (and its `_` spelling), asked of both pinned
    // releases' parsers: spark-launch takes it as the flag only where both read it as that
    // flag, refuses it as ambiguous only where one of them cannot read it as one flag alone,
    // and never keeps a word either parser reads as one of spark-launch's flags.
    let sglang = EngineKind::Sglang.engine();
    let mut words: Vec<String> = Vec::new();
    for f in sglang.owned_flags() {
        for end in 3..=f.name.len() {
            words.push(f.name[..end].to_string());
            words.push(f.name[..end].replace('-', "_").replacen("__", "--", 1));
        }
    }
    words.sort();
    words.dedup();
    let owned = |r: &Resolved| match r {
        Resolved::Flag(spellings) => sglang
            .owned_flags()
            .iter()
            .find(|f| spellings.iter().any(|s| s == f.name)),
        _ => None,
    };
    let pins: Vec<(String, Vec<Resolved>)> = [IMAGE, NEWEST]
        .iter()
        .map(|p| sglang_resolve_with(p, &words))
        .collect();
    assert_eq!(
        pins.iter().map(|(v, _)| v.as_str()).collect::<Vec<_>>(),
        ["0.5.12.post1", "0.5.23"]
    );
    for (i, word) in words.iter().enumerate() {
        let read: Vec<&Resolved> = pins.iter().map(|(_, r)| &r[i]).collect();
        match match_flag(sglang, word) {
            FlagMatch::Owned(f) => assert!(
                read.iter()
                    .all(|r| owned(r).is_some_and(|o| o.flag == f.flag)),
                "{word}: taken as {} but the parsers read {read:?}",
                f.name
            ),
            FlagMatch::Ambiguous(_) => assert!(
                read.iter()
                    .any(|r| !matches!(r, Resolved::Flag(_)) || owned(r).is_none()),
                "{word}: refused as ambiguous but both parsers read {read:?}"
            ),
            other => assert!(
                read.iter().all(|r| owned(r).is_none()),
                "{word}: {other:?}, but a parser reads it as one of spark-launch's flags: {read:?}"
            ),
        }
    }
    assert_eq!(
        match_flag(sglang, "--api_key"),
        FlagMatch::MisspeltKey("--api-key"),
        "SGLang refuses the spelling, spark-launch never keeps it"
    );
}
