//! Launch plans and the NCCL their containers load, on the seed topologies through the one
//! planner (`workload::launch::plan`): seed 003's triangle and the 4-Spark ring refuse an NCCL
//! older than 2.30.7 with the fix, show what every container loads, take `--nccl-from` (the
//! mount, the loader path with the image's own behind it, StageNccl and CheckNccl), and a pair
//! on one cable runs on 2.28.9. Without lookups (a dry run on snapshots) the NCCL is "not yet
//! known", a note.
//!
//! The reads handed to the planner are what `apply::nccl` reads from an NGC-like image with
//! NCCL 2.28.9 in its system folder and from an `nccl-build` image with 2.30.7 (the reading
//! itself is tested on real builds in tests/libnccl_images.rs and tests/nccl_sim.rs); the
//! image's LD_LIBRARY_PATH here is assumed, shaped like an NGC image's.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use spark_launch::derive::NodeInput;
use spark_launch::libnccl::loader::{Found, Machine, Resolution, Via};
use spark_launch::libnccl::version::parse_build_string;
use spark_launch::libnccl::{FromLib, FromRead, ImageRead, Loads};
use spark_launch::model::ModelSource;
use spark_launch::node::NodeName;
use spark_launch::plan::{CheckNccl, JobName, Launch, Step};
use spark_launch::probe::read_snapshot_dir;
use spark_launch::workload::engines::vllm::{self, DEFAULT_IMAGE as VLLM_IMAGE};
use spark_launch::workload::engines::{DEFAULT_READY_TIMEOUT_S, EngineKind, EngineOptions};
use spark_launch::workload::launch::{
    LaunchPlan, LaunchRefusal, LaunchRequest, Lookups, NcclTestRequest, Planned, ServeRequest,
};
use spark_launch::workload::nccl_lib::NcclReads;
use spark_launch::workload::nccl_test::NcclTestOptions;
use spark_launch::workload::serve::ServeOptions;

const COMMIT: &str = "7ae557604adf67be50417f59c2c2f167def9a775";
const BUILD: &str = "spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64";
const IMAGE_PATH: &str = "/usr/local/cuda/compat/lib:/usr/local/nvidia/lib64";

fn root(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn nodes(name: &str) -> Vec<NodeInput> {
    std::fs::read_to_string(root(name).join("nodes"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|n| NodeInput {
            name: NodeName::new(n.trim()).unwrap(),
            facts: read_snapshot_dir(&root(name).join(n.trim())).unwrap(),
        })
        .collect()
}

/// The one planner, on these nodes (their names and facts).
fn plan(
    request: &LaunchRequest,
    nodes: &[NodeInput],
    lookups: &Lookups,
) -> Result<Planned, LaunchRefusal> {
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    spark_launch::workload::launch::plan(request, &names, nodes, lookups)
}

fn serve(tp: u32, from: Option<&str>, allow_old: bool) -> LaunchRequest {
    LaunchRequest::Serve(Box::new(ServeRequest {
        engine: EngineKind::Vllm,
        serve: ServeOptions {
            job: JobName::new("ring").unwrap(),
            model: ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", Some(COMMIT)).unwrap(),
            image: VLLM_IMAGE.to_string(),
            port: 8000,
            tp,
            pp: 1,
            gpus_per_node: 1,
            engine_args: vec![],
            env: BTreeMap::new(),
            paths: BTreeMap::new(),
            ulimits: vec![],
            gpus: None,
            ready_timeout_s: DEFAULT_READY_TIMEOUT_S,
            stage_model: true,
            check_answers: true,
            allow_tcp: false,
            bind: Default::default(),
            api_key: None,
            memory: Default::default(),
        },
        tuning: EngineOptions {
            rendezvous_port: Some(vllm::DEFAULT_MASTER_PORT),
            ..EngineOptions::default()
        },
        gpus_per_node_given: true,
        hf_home: None,
        nccl_from: from.map(|f| f.parse().unwrap()),
        allow_old_nccl: allow_old,
        api_key: None,
        recipe: None,
        warnings: Vec::new(),
    }))
}

/// What the lookup reads from an NGC-like image carrying NCCL `version` in its system folder.
fn image_read(version: &str) -> ImageRead {
    ImageRead::Read {
        id: "sha256:0123".into(),
        machine: Some(Machine::Arm64),
        ld_library_path: Some(IMAGE_PATH.into()),
        resolution: Resolution {
            loads: Some(Found {
                path: "/usr/lib/aarch64-linux-gnu/libnccl.so.2".into(),
                file: Some(format!(
                    "/usr/lib/aarch64-linux-gnu/libnccl.so.{}",
                    version.split('+').next().unwrap()
                )),
                via: Via::LdSoCache,
                by: None,
                machine: Machine::Arm64,
                version: parse_build_string(version),
            }),
            ..Resolution::default()
        },
        ld_preload: None,
    }
}

fn lookups(nodes: &[NodeInput], image: &str, version: &str, from: bool) -> Lookups {
    let mut reads = NcclReads::default();
    for n in nodes {
        reads
            .images
            .insert(n.name.clone(), (image.to_string(), image_read(version)));
        if from {
            reads.from.insert(
                n.name.clone(),
                FromRead::Read(FromLib {
                    machine: Machine::Arm64,
                    version: parse_build_string("2.30.7+cuda13.0"),
                    source: format!(
                        "{BUILD}:/opt/nccl/lib/libnccl.so.2 → /opt/nccl/lib/libnccl.so.2.30.7"
                    ),
                }),
            );
        }
    }
    Lookups {
        nccl: Some(reads),
        ..Lookups::default()
    }
}

fn refusal(r: Result<spark_launch::workload::launch::Planned, LaunchRefusal>) -> String {
    match r {
        Err(e @ LaunchRefusal::Nccl(_)) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("planned"),
    }
}

#[test]
fn the_triangle_on_an_image_with_nccl_2_28_is_refused_with_nccl_from_as_the_fix() {
    let n = nodes("seed-003-triangle");
    let text = refusal(plan(
        &serve(3, None, false),
        &n,
        &lookups(&n, VLLM_IMAGE, "2.28.9+cuda12.9", false),
    ));
    insta::assert_snapshot!(text);
    assert!(text.contains(&format!("--nccl-from {BUILD}")), "{text}");
}

#[test]
fn the_triangle_with_nccl_from_loads_2_30_7_first_and_keeps_the_images_own_path_behind_it() {
    let n = nodes("seed-003-triangle");
    let planned = plan(
        &serve(3, Some(BUILD), false),
        &n,
        &lookups(&n, VLLM_IMAGE, "2.28.9+cuda12.9", true),
    )
    .expect("planned");
    let LaunchPlan::Serve(p) = &planned.plan else {
        panic!()
    };
    let text = spark_launch::cli::render::plan(&planned.plan);
    let section: String = text
        .lines()
        .skip_while(|l| !l.starts_with("NCCL the containers load"))
        .take(4)
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(section);
    let nccl = p.nccl.as_ref().unwrap();
    for x in &nccl.nodes {
        assert_eq!(x.loads.version().unwrap().to_string(), "2.30.7+cuda13.0");
    }
    for part in &p.job.nodes {
        let Launch::Container(c) = &part.launch else {
            panic!()
        };
        assert_eq!(
            c.env["LD_LIBRARY_PATH"],
            format!("/opt/spark-launch/nccl:{IMAGE_PATH}")
        );
        // Preloaded too: an RPATH (PyTorch's) comes before LD_LIBRARY_PATH, a preload before both.
        assert_eq!(c.env["LD_PRELOAD"], "/opt/spark-launch/nccl/libnccl.so.2");
        let m = c
            .mounts
            .iter()
            .find(|m| m.target == "/opt/spark-launch/nccl")
            .unwrap();
        assert!(m.read_only);
        assert!(
            m.source
                .starts_with("sl-nccl-spark-launch-nccl-tests-nccl-v2.30.7-1-sm121-arm64-")
        );
    }
    let steps: Vec<String> = p.job.steps.iter().map(|s| s.title()).collect();
    let at = |prefix: &str| steps.iter().position(|s| s.starts_with(prefix)).unwrap();
    assert!(at(&format!("Ensure image {VLLM_IMAGE}")) < at(&format!("Ensure image {BUILD}")));
    assert!(at(&format!("Ensure image {BUILD}")) < at("Stage the NCCL of"));
    assert!(at("Stage the NCCL of") < at("Check the NCCL each container loads"));
    assert!(at("Check the NCCL each container loads") < at("Start on"));
    // The triangle's cabling runs the wrong way at iceberg: a warning with the swap.
    assert!(
        planned
            .warnings
            .iter()
            .any(|w| w.contains("on iceberg, swap its two cables")),
        "{:?}",
        planned.warnings
    );
}

#[test]
fn the_four_node_ring_refuses_2_28_and_starts_with_allow_old_nccl_saying_so() {
    let n = nodes("ring-4-sparks");
    let l = lookups(&n, VLLM_IMAGE, "2.28.9+cuda12.9", false);
    let text = refusal(plan(&serve(4, None, false), &n, &l));
    assert!(
        text.contains(
            "ring1, ring2, ring3, ring4 would load NCCL 2.28.9+cuda12.9 on this switchless ring"
        ),
        "{text}"
    );
    let planned = plan(&serve(4, None, true), &n, &l).expect("planned");
    assert!(
        planned
            .warnings
            .iter()
            .any(|w| w.contains("--allow-old-nccl: starting anyway")),
        "{:?}",
        planned.warnings
    );
    // This ring is cabled port 0 → next port 1: no direction warning.
    assert!(!planned.warnings.iter().any(|w| w.contains("swap")));
    let LaunchPlan::Serve(p) = &planned.plan else {
        panic!()
    };
    assert_eq!(
        p.nccl.as_ref().unwrap().nodes[0].loads.to_string(),
        "NCCL 2.28.9+cuda12.9 from /usr/lib/aarch64-linux-gnu/libnccl.so.2 → /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9 (ld.so.cache)"
    );
    // An image with 2.30.7 of its own needs nothing more.
    let ok = plan(
        &serve(4, None, false),
        &n,
        &lookups(&n, VLLM_IMAGE, "2.30.7+cuda13.0", false),
    );
    assert!(ok.is_ok());
}

#[test]
fn nccl_test_on_the_four_node_ring_refuses_an_old_image_with_nccl_build_as_the_fix() {
    let n = nodes("ring-4-sparks");
    let request = LaunchRequest::NcclTest(NcclTestRequest {
        options: NcclTestOptions::new(JobName::new("nccl-test").unwrap()),
        gpus_per_node: None,
        overrides: Default::default(),
        allow_old_nccl: false,
    });
    let (asks, _) = request.nccl_asks(&n);
    assert_eq!(asks.len(), 4);
    assert_eq!(asks[&n[0].name].image, BUILD);
    // The default tag on the nodes holds 2.28.9: an image a user built before the default moved.
    let l = lookups(&n, BUILD, "2.28.9+cuda13.0", false);
    let text = refusal(plan(&request, &n, &l));
    assert!(
        text.contains("build the nccl-tests image with NCCL 2.30.7 or later"),
        "{text}"
    );
    let fresh = plan(&request, &n, &lookups(&n, BUILD, "2.30.7+cuda13.0", false)).unwrap();
    let LaunchPlan::NcclTest(t) = &fresh.plan else {
        panic!()
    };
    assert!(
        t.plan
            .steps
            .iter()
            .any(|s| matches!(s, Step::CheckNccl(CheckNccl { rule, .. }) if rule.ring))
    );
}

#[test]
fn two_sparks_on_one_cable_run_on_2_28_and_a_dry_run_on_snapshots_says_not_yet_known() {
    let n = nodes("seed-001-two-sparks-both-twins");
    let planned = plan(
        &serve(2, None, false),
        &n,
        &lookups(&n, VLLM_IMAGE, "2.28.9+cuda12.9", false),
    )
    .expect("not a ring: any one release will do");
    let LaunchPlan::Serve(p) = &planned.plan else {
        panic!()
    };
    assert!(!p.nccl.as_ref().unwrap().rule.ring);
    let dry = plan(&serve(2, None, false), &n, &Lookups::default()).unwrap();
    let LaunchPlan::Serve(p) = &dry.plan else {
        panic!()
    };
    let nccl = p.nccl.as_ref().unwrap();
    assert!(nccl.nodes.iter().all(|x| matches!(
        &x.loads,
        Loads::NotYetKnown { why } if why == "a dry run on snapshots reads no image"
    )));
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("not yet known") && n.contains("checks it before starting")),
        "{:?}",
        p.notes
    );
}

#[test]
fn different_releases_on_two_nodes_are_refused() {
    let n = nodes("seed-001-two-sparks-both-twins");
    let mut l = lookups(&n, VLLM_IMAGE, "2.28.9+cuda12.9", false);
    l.nccl.as_mut().unwrap().images.insert(
        n[1].name.clone(),
        (VLLM_IMAGE.to_string(), image_read("2.27.7+cuda12.9")),
    );
    let text = refusal(plan(&serve(2, None, false), &n, &l));
    assert!(
        text.contains("different NCCL releases (2.27.7 on spark2; 2.28.9 on spark)"),
        "{text}"
    );
}

fn cli(args: &[&str], fixture: &str) -> std::process::Output {
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    for n in std::fs::read_to_string(root(fixture).join("nodes"))
        .unwrap()
        .lines()
    {
        all.push("--snapshot".into());
        all.push(format!("{n}={}", root(fixture).join(n).display()));
    }
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(&all)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

#[test]
fn a_dry_run_on_the_triangle_shows_the_nccl_section_and_a_relative_nccl_from_is_refused() {
    let out = cli(
        &[
            "--json",
            "vllm",
            "--dry-run",
            "--tp",
            "3",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--nccl-from",
            BUILD,
        ],
        "seed-003-triangle",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nccl"]["rule"]["ring"], true);
    assert_eq!(v["nccl"]["nccl_from"]["image"], BUILD);
    assert_eq!(v["nccl"]["nodes"][0]["node"], "titanic");
    assert_eq!(v["nccl"]["nodes"][0]["state"], "not-yet-known");
    let out = cli(
        &[
            "vllm",
            "--dry-run",
            "--tp",
            "3",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--nccl-from",
            "./lib",
        ],
        "seed-003-triangle",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("absolute path"));
    let out = cli(
        &["nccl-build", "--dry-run", "--nccl-ref", "v2.29.7-1"],
        "ring-4-sparks",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("add --mesh-plugin"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
