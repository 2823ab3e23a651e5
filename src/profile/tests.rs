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
    p.origin = ProfileOrigin::User;
    p.file = "/home/u/.config/spark-launch/profiles/smoke-test.yaml".into();
    let all = catalogue(vec![p]);
    let smoke = all.iter().find(|l| l.profile.name == "smoke-test").unwrap();
    assert_eq!(smoke.origin, ProfileOrigin::User);
    assert_eq!(all.len(), bundled::FILES.len());
}

#[test]
fn fit_checks_node_count_and_unified_memory() {
    use super::fit::{Fit, fit};
    let p = parse("demo.yaml", Some("demo"), GOOD, &[]).unwrap();
    let node = |n: &str, m: Option<u64>| {
        let mut facts: crate::probe::NodeFacts = serde_json::from_value(serde_json::json!({
            "hostname": n, "arch": "aarch64", "interfaces": [], "rdma_devices": [], "routes": []
        }))
        .unwrap();
        facts.host.gpus = vec![crate::probe::facts::GpuFacts {
            bus: "000f:01:00.0".into(),
            model: Some("NVIDIA GB10".into()),
        }];
        facts.host.mem_total_kib = m.map(|g| g * 1024 * 1024);
        crate::derive::NodeInput {
            name: crate::node::NodeName::new(n).unwrap(),
            facts,
        }
    };
    let two = [node("a", Some(119)), node("b", Some(119))];
    assert_eq!(fit(&p, &two, None), Fit::Yes);
    assert!(matches!(fit(&p, &two[..1], None), Fit::No(_)));
    assert!(matches!(
        fit(&p, &[node("a", Some(119)), node("b", Some(8))], None),
        Fit::No(_)
    ));
    assert!(matches!(
        fit(&p, &[node("a", Some(119)), node("b", None)], None),
        Fit::Unknown(_)
    ));
}

#[test]
fn fit_uses_the_memory_plan_when_the_model_s_files_were_read() {
    use super::fit::{Fit, fit};
    use crate::model::footprint::{Footprint, Known, KvLayout, WeightsSize};
    let p = parse("demo.yaml", Some("demo"), GOOD, &[]).unwrap();
    let node = |n: &str| {
        let mut facts: crate::probe::NodeFacts = serde_json::from_value(serde_json::json!({
            "hostname": n, "arch": "aarch64", "interfaces": [], "rdma_devices": [], "routes": []
        }))
        .unwrap();
        facts.host.gpus = vec![crate::probe::facts::GpuFacts {
            bus: "000f:01:00.0".into(),
            model: Some("NVIDIA GB10".into()),
        }];
        facts.host.mem_total_kib = Some(124_830_604);
        crate::derive::NodeInput {
            name: crate::node::NodeName::new(n).unwrap(),
            facts,
        }
    };
    let kv = KvLayout::parse(
        r#"{"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "hidden_size": 3584, "torch_dtype": "bfloat16", "max_position_embeddings": 32768}"#,
    )
    .unwrap();
    let footprint = |bytes| Footprint {
        kv: Known::Known(kv.clone()),
        weights: Known::Known(WeightsSize {
            bytes,
            from: "test".into(),
        }),
    };
    let two = [node("a"), node("b")];
    assert_eq!(fit(&p, &two, Some(&footprint(15 << 30))), Fit::Yes);
    let Fit::No(why) = fit(&p, &two, Some(&footprint(600 << 30))) else {
        panic!("600 GiB fits two Sparks?")
    };
    assert!(
        why[0].starts_with("a needs 304 GiB, vLLM may take 107 GiB"),
        "{why:?}"
    );
}

#[test]
fn expected_figures_parse_and_can_be_changed_with_set() {
    let text = format!(
        "{GOOD}expect:\n  prompt_tokens: 256\n  output_tokens: 64\n  levels:\n    - {{concurrency: 1, output_tokens_per_s: 40, ttft_p50_ms: 150}}\n    - concurrency: 16\n      output_tokens_per_s: 300\n"
    );
    let p = parse("demo.yaml", Some("demo"), &text, &[]).unwrap();
    let e = p.expect.unwrap();
    assert_eq!((e.prompt_tokens, e.output_tokens), (Some(256), Some(64)));
    assert_eq!(e.concurrencies(), vec![1, 16]);
    assert_eq!(e.levels[0].ttft_p50_ms, Some(150.0));
    let set: SetArg = "expect.levels[1].output_tokens_per_s=350".parse().unwrap();
    let p = parse("demo.yaml", Some("demo"), &text, &[set]).unwrap();
    assert_eq!(p.expect.unwrap().levels[1].output_tokens_per_s, Some(350.0));
}

#[test]
fn mistakes_in_expected_figures_name_their_line_and_field() {
    let text = format!(
        "{GOOD}expect:\n  levels:\n    - concurrency: 0\n      output_tokens_per_s: 40\n    - concurrency: 4\n      ttft_p50_ms: -1\n    - concurrency: 8\n"
    );
    let errs = errors(&text);
    assert_eq!(
        errs,
        vec![
            "my/demo.yaml:15: expect.levels[0].concurrency: must be at least 1",
            "my/demo.yaml:18: expect.levels[1].ttft_p50_ms: -1 is not a positive number",
            "my/demo.yaml:19: expect.levels[2]: give at least one figure: output_tokens_per_s, requests_per_s, ttft_p50_ms, ttft_p95_ms, itl_p50_ms, itl_p95_ms",
        ],
        "{errs:#?}"
    );
    let unknown = errors(&format!(
        "{GOOD}expect:\n  levels:\n    - {{concurrency: 1, tokens_per_s: 40}}\n"
    ));
    assert!(
        unknown[0].contains("unknown field `tokens_per_s`"),
        "{unknown:?}"
    );
}

#[test]
fn a_profile_shape_past_the_limits_is_refused_naming_them_never_multiplied_to_zero() {
    // Seen once: profiles printed "65536 × 65536 = 0 GPUs".
    let sets = ["tp=65536".parse().unwrap(), "pp=65536".parse().unwrap()];
    let e = parse("demo.yaml", Some("demo"), GOOD, &sets)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--set tp=65536: tp: at most 1024 is supported"),
        "{e}"
    );
    assert!(
        e.contains("--set pp=65536: pp: at most 256 is supported"),
        "{e}"
    );
    assert!(!e.contains("= 0 GPUs"), "{e}");
    let sets = ["nodes=4294967295".parse().unwrap()];
    let e = parse("demo.yaml", Some("demo"), GOOD, &sets)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nodes: at most 1024 is supported"), "{e}");
}

#[test]
fn a_ready_timeout_past_30_days_is_refused_in_the_file_and_by_set_naming_the_field() {
    // Seen once: u64::MAX panicked in the readiness wait after containers started.
    let text = format!("{GOOD}ready_timeout_s: 18446744073709551615\n");
    let e = errors(&text);
    assert!(
        e.iter()
            .any(|e| e.contains("my/demo.yaml:13: ready_timeout_s: 18446744073709551615 seconds is more than 2592000 (30 days)")),
        "{e:?}"
    );
    let sets = ["ready_timeout_s=18446744073709551615".parse().unwrap()];
    let e = parse("demo.yaml", Some("demo"), GOOD, &sets)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--set ready_timeout_s=18446744073709551615: ready_timeout_s: 18446744073709551615 seconds is more than 2592000 (30 days)"),
        "{e}"
    );
    let sets = ["ready_timeout_s=2592000".parse().unwrap()];
    let p = parse("demo.yaml", Some("demo"), GOOD, &sets).unwrap();
    assert_eq!(p.ready_timeout_s, Some(2_592_000));
}

#[test]
fn profile_type_errors_are_all_reported_at_once() {
    // Seen once: type errors stopped at the first one though the README promises
    // all at once.
    let text = GOOD
        .replace("tp: 2", "tp: two")
        .replace("nodes: 2", "nodes: [2]")
        .replace("name: demo", "name: demo\nray: maybe");
    let e = errors(&text);
    assert_eq!(e.len(), 3, "{e:#?}");
    assert!(
        e.iter()
            .any(|l| l.contains(": tp: invalid type: string \"two\", expected u32")),
        "{e:#?}"
    );
    assert!(
        e.iter()
            .any(|l| l.contains(": nodes: ") && l.contains("expected u32")),
        "{e:#?}"
    );
    assert!(
        e.iter().any(|l| l.starts_with("my/demo.yaml:2:6: ray: ")),
        "{e:#?}"
    );
}

#[test]
fn nccl_from_becomes_the_serving_request_s_and_a_flag_replaces_it() {
    use crate::workload::nccl_lib::NcclFrom;
    use crate::workload::partial::{self, Given, LaunchAsk, PartialServe};
    let text = format!("{GOOD}nccl_from: spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64\n");
    let p = parse("demo.yaml", Some("demo"), &text, &[]).unwrap();
    let request = |flags: PartialServe| {
        let LaunchAsk::Serve(ask) = p.ask("demo.yaml").unwrap() else {
            panic!("not a serving request")
        };
        partial::layer(*ask, flags).unwrap()
    };
    let s = request(PartialServe::default());
    assert_eq!(
        s.nccl_from,
        Some(NcclFrom::Image(
            "spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64".into()
        ))
    );
    let flag = PartialServe {
        nccl_from: Given::flag_opt(Some(NcclFrom::Path("/opt/nccl/lib".into())), "--nccl-from"),
        allow_old_nccl: Given::flag_opt(Some(true), "--allow-old-nccl"),
        ..PartialServe::default()
    };
    let s = request(flag);
    assert_eq!(s.nccl_from, Some(NcclFrom::Path("/opt/nccl/lib".into())));
    assert!(s.allow_old_nccl);
    let bad = errors(&format!("{GOOD}nccl_from: ./lib\n"));
    assert!(
        bad[0].starts_with(
            "my/demo.yaml:13: nccl_from: --nccl-from ./lib: give the folder as an absolute path"
        ),
        "{bad:?}"
    );
}

#[test]
fn a_speculative_block_is_checked_field_by_field_at_its_lines() {
    let e = errors(&format!(
        "{GOOD}speculative:\n  method: eagle3\n  draft_revision: v1\n  tokens: 0\n"
    ));
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with("my/demo.yaml:16: speculative.tokens: 0: draft from 1 to 16"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("my/demo.yaml:13: speculative.draft_model: eagle3 needs its draft"),
        "{e:?}"
    );
    assert!(
        e[2].starts_with("my/demo.yaml:15: speculative.draft_revision: there is no draft_model"),
        "{e:?}"
    );
}

#[test]
fn an_unknown_speculative_method_is_named_with_its_line_and_the_methods_there_are() {
    let e = errors(&format!(
        "{GOOD}speculative:\n  method: medusa\n  tokens: 2\n"
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("my/demo.yaml:14:11: speculative.method: unknown variant `medusa`"),
        "{e:?}"
    );
    assert!(
        e[0].contains("`eagle3`") && e[0].contains("`ngram`"),
        "{e:?}"
    );
}

#[test]
fn trtllm_refuses_a_method_it_cannot_express_and_the_sglang_section_is_sglangs() {
    let text = GOOD.replace("engine: vllm", "engine: trtllm").replace(
        "engine_args:\n  - --max-model-len\n  - \"4096\"\n",
        "speculative:\n  method: ngram\n  tokens: 4\nsglang:\n  launcher: serve\n",
    );
    let e = errors(&text);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with(
            "my/demo.yaml:13: sglang: this section is for sglang profiles; this one runs trtllm"
        ),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("my/demo.yaml:11: speculative.method: speculative method ngram: spark-launch maps only mtp"),
        "{e:?}"
    );
    let mtp = text
        .replace("method: ngram", "method: mtp")
        .replace("sglang:\n  launcher: serve\n", "");
    assert!(parse("my/demo.yaml", Some("demo"), &mtp, &[]).is_ok());
}

#[test]
fn an_sglang_profile_takes_its_launcher_and_refuses_its_speculative_flags_twice() {
    let text = GOOD.replace("engine: vllm", "engine: sglang").replace(
        "  - --max-model-len\n  - \"4096\"\n",
        "  - --speculative-algorithm=EAGLE\nsglang:\n  launcher: serve\nspeculative:\n  method: mtp\n  tokens: 3\n",
    );
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("speculative.method: extra argument --speculative-algorithm is set by spark-launch itself; remove --speculative-algorithm: the profile's speculative block sets it (mtp)"),
        "{e:?}"
    );
    let ok = text.replace(
        "  - --speculative-algorithm=EAGLE\n",
        "  - --trust-remote-code\n",
    );
    let p = parse("my/demo.yaml", Some("demo"), &ok, &[]).unwrap();
    let mut tuning = EngineOptions::default();
    p.read_section(&mut tuning);
    assert_eq!(
        tuning.launcher,
        Some(crate::workload::engines::Launcher::Serve)
    );
}

#[test]
fn an_engine_s_section_is_read_by_its_engine_each_problem_on_its_line() {
    let text = GOOD.replace("engine: vllm", "engine: trtllm").replace(
        "engine_args:\n  - --max-model-len\n  - \"4096\"\n",
        "trtllm:\n  kv_cache_fraction: 0.5\n  max_batch_size: many\n  bogus: 1\n",
    );
    let e = errors(&text);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("my/demo.yaml:12: trtllm.max_batch_size: invalid type: string \"many\""),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("my/demo.yaml:13: trtllm.bogus: unknown field `bogus`"),
        "{e:?}"
    );
    let good = text.replace(
        "  max_batch_size: many\n  bogus: 1\n",
        "  max_batch_size: 8\n",
    );
    let p = parse("my/demo.yaml", Some("demo"), &good, &[]).unwrap();
    let mut tuning = EngineOptions::default();
    p.read_section(&mut tuning);
    assert_eq!(
        (tuning.memory_fraction, tuning.max_batch_size),
        (Some(0.5), Some(8))
    );
}

#[test]
fn an_unknown_top_level_key_is_refused_where_it_is_written() {
    let e = errors(&format!("{GOOD}tokenizer: x\n"));
    assert!(
        e[0].starts_with("my/demo.yaml:13:1: unknown field `tokenizer`, expected one of `name`"),
        "{e:?}"
    );
    // Before the fields it lacks, which the parser finds missing only at the end.
    let e = errors("name: demo\nengine: vllm\ntpp: 2\n");
    assert!(
        e[0].starts_with("my/demo.yaml:3:1: unknown field `tpp`"),
        "{e:?}"
    );
    let set: SetArg = "sgl.launcher=serve".parse().unwrap();
    let e = parse("my/demo.yaml", Some("demo"), GOOD, &[set]).unwrap_err();
    assert!(e.to_string().contains("unknown field `sgl`"), "{e}");
}

#[test]
fn the_fields_a_profile_reads_are_the_fields_it_has() {
    let p = parse("demo.yaml", Some("demo"), GOOD, &[]).unwrap();
    let yaml_serde::Value::Mapping(m) = yaml_serde::to_value(&p).unwrap() else {
        panic!("a profile serializes as a mapping");
    };
    let keys: Vec<&str> = m.keys().filter_map(|k| k.as_str()).collect();
    assert_eq!(keys, FIELDS);
}

#[test]
fn a_type_error_elsewhere_leaves_the_key_bind_and_nccl_fields_known() {
    let text = format!(
        "{}api_key: auto\nbind: fabric\n",
        GOOD.replace("tp: 2", "tp: two")
    );
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
}

#[test]
fn a_deeply_nested_profile_is_refused_at_once_naming_its_line() {
    // 100 000 levels of flow nesting: the YAML parser alone takes minutes on this.
    let text = format!(
        "{GOOD}expect: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let started = std::time::Instant::now();
    let e = errors(&text);
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(
        e,
        [
            "my/demo.yaml:13: nested more than 64 levels deep at line 13; a recipe or profile nests a few levels: this is not one"
        ]
    );
}

#[test]
fn a_profile_that_is_a_fifo_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("demo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let e = files::find(fifo.to_str().unwrap(), dir.path(), &[]).unwrap_err();
    assert!(
        e.to_string()
            .contains("is not a regular file (a FIFO is never read)"),
        "{e}"
    );
}
