//! Profile parsing and validation: every bundled profile is valid, and each kind of mistake is
//! reported with its file, line and field.

use super::*;

const GOOD: &str = "name: demo
description: a demo
engine: vllm
model:
  id: org/model
  revision: main
tp: 2
nodes: 2
memory_gib: 16
engine_args:
  - --max-model-len
  - \"4096\"
";

fn errors(text: &str) -> Vec<String> {
    parse("my/demo.yaml", Some("demo"), text, &[])
        .unwrap_err()
        .0
        .iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn every_bundled_profile_is_valid_and_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("launch-profiles");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = bundled::FILES.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "launch-profiles/ and profile::bundled::FILES differ"
    );
    for (file, text) in bundled::FILES {
        let stem = file.trim_end_matches(".yaml");
        if let Err(e) = parse(file, Some(stem), text, &[]) {
            panic!("{e}");
        }
    }
    assert_eq!(bundled().len(), bundled::FILES.len());
}

#[test]
fn a_good_profile_parses_with_defaults() {
    let p = parse("demo.yaml", Some("demo"), GOOD, &[]).unwrap();
    assert_eq!(p.pp, 1);
    assert_eq!(p.gpus_per_node, 1);
    assert!(!p.ray);
    assert_eq!(p.model_label(), "org/model@main");
}

#[test]
fn a_type_error_names_file_line_column_and_field() {
    let e = errors(&GOOD.replace("tp: 2", "tp: two"));
    assert_eq!(
        e,
        vec!["my/demo.yaml:7:5: tp: invalid type: string \"two\", expected u32"]
    );
}

#[test]
fn a_misspelt_field_is_an_error_not_ignored() {
    let e = errors(&GOOD.replace("  revision: main", "  revison: main"));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("my/demo.yaml:6:3: model: unknown field `revison`"),
        "{e:?}"
    );
}

#[test]
fn a_yaml_syntax_error_has_its_location() {
    let e = errors("name: demo\nengine: [vllm\n");
    assert!(e[0].starts_with("my/demo.yaml:"), "{e:?}");
    assert!(e[0].contains(":3:") || e[0].contains(":2:"), "{e:?}");
}

#[test]
fn semantic_errors_are_all_reported_each_on_its_line() {
    let text = GOOD
        .replace("tp: 2", "tp: 3")
        .replace("  revision: main", "  revision: ../x")
        .replace("  - --max-model-len", "  - --tensor-parallel-size");
    let e = errors(&text);
    assert_eq!(
        e,
        vec![
            "my/demo.yaml:7: tp: tp × pp = 3 × 1 = 3 GPUs, but nodes × gpus_per_node = 2 × 1 = 2; make them equal",
            "my/demo.yaml:6: model.revision: invalid revision \"../x\": expected a branch, tag or commit (letters, digits, '.', '_', '-', '/')",
            "my/demo.yaml:11: engine_args[0]: extra argument --tensor-parallel-size is set by spark-launch itself; use --tp",
        ]
    );
}

#[test]
fn the_name_must_match_the_file() {
    let e = errors(&GOOD.replace("name: demo", "name: other"));
    assert_eq!(
        e,
        vec![
            "my/demo.yaml:1: name: \"other\" differs from the file name demo.yaml; make them equal"
        ]
    );
}

#[test]
fn sections_of_another_engine_are_refused() {
    let text = format!("{GOOD}ray: true\ntrtllm:\n  kv_cache_fraction: 2\n");
    let e = errors(&text);
    assert_eq!(
        e,
        vec![
            "my/demo.yaml:14: trtllm: this section is for trtllm profiles; this one runs vllm",
            "my/demo.yaml:15: trtllm.kv_cache_fraction: 2 is outside (0, 1]",
        ]
    );
}

#[test]
fn set_changes_a_field_before_validation() {
    let sets: Vec<SetArg> = vec![
        "tp=1".parse().unwrap(),
        "nodes=1".parse().unwrap(),
        "model.revision=v2".parse().unwrap(),
        "env.NCCL_DEBUG=INFO".parse().unwrap(),
        "engine_args[2]=--enforce-eager".parse().unwrap(),
    ];
    let p = parse("demo.yaml", Some("demo"), GOOD, &sets).unwrap();
    assert_eq!(p.tp, 1);
    assert_eq!(p.model.unwrap().revision.as_deref(), Some("v2"));
    assert_eq!(p.env["NCCL_DEBUG"], "INFO");
    assert_eq!(
        p.engine_args,
        vec!["--max-model-len", "4096", "--enforce-eager"]
    );
}

#[test]
fn a_bad_set_names_the_set_argument() {
    let e = parse("demo.yaml", Some("demo"), GOOD, &["tp=4".parse().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("demo.yaml: --set tp=4: tp: tp × pp = 4 × 1"),
        "{e}"
    );
    let e = parse("demo.yaml", Some("demo"), GOOD, &["tpp=4".parse().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--set tpp=4") && e.contains("unknown field `tpp`"),
        "{e}"
    );
    assert!("novalue".parse::<SetArg>().is_err());
}

#[test]
fn user_profiles_override_bundled_ones_by_name() {
    let mut p = bundled()
        .into_iter()
        .find(|l| l.profile.name == "smoke-test")
        .unwrap();
    p.origin = Origin::User;
    p.file = "/home/u/.config/spark-launch/profiles/smoke-test.yaml".into();
    let all = catalogue(vec![p]);
    let smoke = all.iter().find(|l| l.profile.name == "smoke-test").unwrap();
    assert_eq!(smoke.origin, Origin::User);
    assert_eq!(all.len(), bundled::FILES.len());
}

#[test]
fn fit_checks_node_count_and_unified_memory() {
    use super::fit::{Capacity, Fit, fit};
    let p = parse("demo.yaml", Some("demo"), GOOD, &[]).unwrap();
    let node = |n: &str, m: Option<f64>| Capacity {
        node: crate::node::NodeName::new(n).unwrap(),
        memory_gib: m,
    };
    assert_eq!(
        fit(&p, &[node("a", Some(119.0)), node("b", Some(119.0))]),
        Fit::Yes
    );
    assert!(matches!(fit(&p, &[node("a", Some(119.0))]), Fit::No(_)));
    assert!(matches!(
        fit(&p, &[node("a", Some(119.0)), node("b", Some(8.0))]),
        Fit::No(_)
    ));
    assert!(matches!(
        fit(&p, &[node("a", Some(119.0)), node("b", None)]),
        Fit::Unknown(_)
    ));
}
