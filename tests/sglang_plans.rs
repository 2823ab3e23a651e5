//! SGLang plans on the seed topologies (probe snapshots through the real derive and launch
//! planner), and every SGLang line they hold judged by SGLang's own argument parser
//! (`tests/support/sglang.rs`): the release inside the default image (0.5.12.post1) and the
//! newest pinned one (0.5.23). Two Sparks, the 3-node ring, the 4-node ring, three switched
//! Sparks, one node, an API key (the head's prelude adds `--api-key`), `sglang serve` with
//! pipeline stages, moved ports, and every speculative method. The bundled SGLang profiles'
//! lines are judged by the newest pin (they name images newer than the default). One plan is
//! snapshot-tested whole.

mod support;

use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::model::ModelSource;
use spark_launch::node::NodeName;
use spark_launch::plan::secret::Secret;
use spark_launch::plan::{JobName, Launch, Step};
use spark_launch::probe::read_snapshot_dir;
use spark_launch::profile;
use spark_launch::workload::endpoint::{ApiKey, ApiKeyAsk};
use spark_launch::workload::engines::speculative::{SpecMethod, Speculative};
use spark_launch::workload::engines::{EngineKind, EngineOptions, Launcher, sglang};
use spark_launch::workload::launch::{LaunchPlan, LaunchRequest, Lookups, ServeRequest, plan};
use spark_launch::workload::partial::{self, LaunchAsk, PartialServe};
use spark_launch::workload::serve::{ServeOptions, ServePlan};
use support::sglang::{IMAGE, NEWEST, sglang_parse_with};

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

const COMMIT: &str = "7ae557604adf67be50417f59c2c2f167def9a775";

/// `spark-launch sglang --tp TP --pp PP Qwen/Qwen2.5-0.5B-Instruct` as the CLI builds it.
fn request(tp: u32, pp: u32, tuning: EngineOptions) -> ServeRequest {
    let model = ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", Some(COMMIT)).unwrap();
    let mut serve = ServeOptions::new(EngineKind::Sglang, JobName::new("sg").unwrap(), model);
    serve.tp = tp;
    serve.pp = pp;
    serve.engine_args = vec!["--mem-fraction-static".into(), "0.8".into()];
    ServeRequest {
        engine: EngineKind::Sglang,
        serve,
        tuning: EngineOptions {
            rendezvous_port: Some(sglang::DEFAULT_DIST_PORT),
            ..tuning
        },
        gpus_per_node_given: true,
        hf_home: None,
        nccl_from: None,
        allow_old_nccl: false,
        api_key: None,
        recipe: None,
        warnings: Vec::new(),
    }
}

fn serve_plan(r: &ServeRequest, nodes: &[NodeInput], lookups: &Lookups) -> ServePlan {
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

/// Every serving node's SGLang line (as SGLang's parser sees it), head first.
fn lines(p: &ServePlan) -> Vec<Vec<String>> {
    p.job
        .nodes
        .iter()
        .map(|n| {
            let Launch::Container(c) = &n.launch else {
                panic!("not a container")
            };
            sglang::engine_line(&c.command)
                .unwrap_or_else(|| panic!("{}: no SGLang line in {:?}", n.node, c.command))
        })
        .collect()
}

fn speculative(method: SpecMethod, draft: Option<&str>) -> EngineOptions {
    EngineOptions {
        speculative: Some(Speculative {
            method,
            draft_model: draft.map(str::to_string),
            draft_revision: draft.map(|_| "v1.0".to_string()),
            tokens: 3,
        }),
        ..EngineOptions::default()
    }
}

/// `(case, nodes it serves on, its lines)` for every shape and option the SGLang engine plans.
fn cases() -> Vec<(String, usize, Vec<Vec<String>>)> {
    let none = Lookups::default();
    let mut out = Vec::new();
    let mut add = |case: &str, r: ServeRequest, nodes: &[NodeInput], l: &Lookups| {
        let p = serve_plan(&r, nodes, l);
        out.push((case.to_string(), p.nodes.len(), lines(&p)));
    };
    let two = fixture("seed-001-two-sparks-both-twins");
    add(
        "two Sparks",
        request(2, 1, EngineOptions::default()),
        &two,
        &none,
    );
    add(
        "3-node ring",
        request(3, 1, EngineOptions::default()),
        &fixture("seed-003-triangle"),
        &none,
    );
    add(
        "4-node ring",
        request(4, 1, EngineOptions::default()),
        &fixture("ring-4-sparks"),
        &none,
    );
    add(
        "three switched Sparks",
        request(3, 1, EngineOptions::default()),
        &fixture("switch-3-sparks"),
        &none,
    );
    add(
        "one node",
        request(1, 1, EngineOptions::default()),
        &two[..1],
        &none,
    );
    let mut keyed = request(2, 1, EngineOptions::default());
    keyed.api_key = Some(ApiKeyAsk::Given(Secret::new("sl-test-key").unwrap()));
    let with_key = Lookups {
        api_key: Some(ApiKey {
            key: Secret::new("sl-test-key").unwrap(),
            file: None,
        }),
        ..Lookups::default()
    };
    add("an API key", keyed, &two, &with_key);
    add(
        "sglang serve with pipeline stages",
        request(
            1,
            2,
            EngineOptions {
                launcher: Some(Launcher::Serve),
                ..EngineOptions::default()
            },
        ),
        &two,
        &none,
    );
    let mut moved = request(2, 1, EngineOptions::default());
    moved.serve.port = 9100;
    moved.tuning.rendezvous_port = Some(29600);
    add("moved ports", moved, &two, &none);
    for (method, draft) in [
        (SpecMethod::Mtp, None),
        (SpecMethod::Mtp, Some("org/mtp-head")),
        (SpecMethod::Eagle, Some("org/eagle-head")),
        (SpecMethod::Eagle3, Some("org/eagle3-head")),
        (SpecMethod::Draft, Some("org/small-model")),
        (SpecMethod::Ngram, None),
    ] {
        add(
            &format!("speculative {method} {draft:?}"),
            request(2, 1, speculative(method, draft)),
            &two,
            &none,
        );
    }
    out
}

#[test]
fn every_planned_sglang_line_passes_the_parsers_of_the_default_image_and_the_newest_release() {
    let cases = cases();
    let mut all: Vec<(String, Vec<String>)> = Vec::new();
    for (case, nodes, lines) in &cases {
        assert_eq!(lines.len(), *nodes, "{case}: one line per node");
        for (rank, line) in lines.iter().enumerate() {
            let text = line.join(" ");
            if *nodes > 1 {
                assert!(
                    text.contains(&format!("--nnodes {nodes} --node-rank {rank} ")),
                    "{case}: {text}"
                );
            } else {
                assert!(!text.contains("--nnodes"), "{case}: {text}");
            }
            assert_eq!(text.contains("--port "), rank == 0, "{case}: {text}");
            all.push((format!("{case}, rank {rank}"), line.clone()));
        }
    }
    let keyed = &cases.iter().find(|c| c.0 == "an API key").unwrap().2;
    assert!(keyed[0].ends_with(&["--api-key".to_string(), "<set>".to_string()]));
    assert!(!keyed[1].contains(&"--api-key".to_string()));
    let words: Vec<Vec<String>> = all.iter().map(|(_, l)| l.clone()).collect();
    for (pins, release) in [(IMAGE, "0.5.12.post1"), (NEWEST, "0.5.23")] {
        let v = sglang_parse_with(pins, &words);
        assert_eq!(v.version, release);
        for ((case, line), verdict) in all.iter().zip(&v.lines) {
            assert_eq!(
                verdict,
                &Ok(()),
                "SGLang {release} refuses the line of {case}: {}",
                line.join(" ")
            );
        }
    }
    // The oracle is not a rubber stamp: a misspelt flag in the same place is refused (argparse
    // takes a unique prefix, `--speculative-num-step`, so the typo must not be one).
    let mut bad = all[0].1.clone();
    bad.push("--speculative-num-stepz".into());
    bad.push("3".into());
    let v = sglang_parse_with(IMAGE, &[bad]);
    assert!(v.lines[0].is_err(), "{v:?}");
}

#[test]
fn every_bundled_sglang_profiles_lines_pass_the_parser_of_the_newest_release() {
    let nodes = fixture("seed-001-two-sparks-both-twins");
    let mut judged = Vec::new();
    for l in profile::bundled() {
        let LaunchAsk::Serve(ask) = l.profile.ask(&l.file).unwrap() else {
            continue;
        };
        let r = partial::layer(*ask, PartialServe::default()).unwrap();
        if r.engine != EngineKind::Sglang {
            continue;
        }
        let p = serve_plan(&r, &nodes[..l.profile.nodes as usize], &Lookups::default());
        for line in lines(&p) {
            judged.push((l.profile.name.clone(), line));
        }
    }
    assert!(!judged.is_empty(), "a bundled SGLang profile");
    let words: Vec<Vec<String>> = judged.iter().map(|(_, l)| l.clone()).collect();
    let v = sglang_parse_with(NEWEST, &words);
    for ((name, line), verdict) in judged.iter().zip(&v.lines) {
        assert_eq!(
            verdict,
            &Ok(()),
            "{name}: SGLang {} refuses {}",
            v.version,
            line.join(" ")
        );
    }
}

#[test]
fn sglang_on_two_sparks_runs_the_server_on_both_with_ranks_and_the_key_in_the_heads_env() {
    let mut r = request(
        2,
        1,
        speculative(SpecMethod::Eagle3, Some("org/eagle3-head")),
    );
    r.api_key = Some(ApiKeyAsk::Auto);
    let lookups = Lookups {
        api_key: Some(ApiKey {
            key: Secret::new("sl-test-key").unwrap(),
            file: Some("~/.config/spark-launch/api-key".into()),
        }),
        ..Lookups::default()
    };
    let p = serve_plan(&r, &fixture("seed-001-two-sparks-both-twins"), &lookups);
    insta::assert_yaml_snapshot!(p);
    assert_eq!(p.mode, "native");
    let Launch::Container(head) = &p.job.nodes[0].launch else {
        panic!("not a container")
    };
    assert_eq!(head.env[sglang::API_KEY_VAR], "sl-test-key");
    assert!(!head.command.iter().any(|w| w.contains("sl-test-key")));
    let Launch::Container(worker) = &p.job.nodes[1].launch else {
        panic!("not a container")
    };
    assert_eq!(worker.env["SGLANG_HOST_IP"], "192.168.177.12");
    assert!(!worker.env.contains_key(sglang::API_KEY_VAR));
    // The draft is staged after the model, on both nodes, at its own revision.
    let staged: Vec<String> = p
        .job
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::StageModel(m) => Some(m.model.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        staged,
        vec![
            format!("Qwen/Qwen2.5-0.5B-Instruct@{COMMIT}"),
            "org/eagle3-head@v1.0".to_string()
        ]
    );
}
