//! The flagship launch profiles planned on seed 001's two Sparks (probe
//! snapshots, nothing looked up): each profile's whole dry-run plan, snapshot-tested, and the
//! engine flags its `speculative:` block becomes on every rank.

use std::path::Path;

use spark_launch::derive::NodeInput;
use spark_launch::launch_file::{self, FileSource};
use spark_launch::node::NodeName;
use spark_launch::plan::Launch;
use spark_launch::probe::read_snapshot_dir;
use spark_launch::workload::launch::{LaunchPlan, LaunchRequest, Lookups, plan};
use spark_launch::workload::partial::PartialServe;
use spark_launch::workload::serve::ServePlan;

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

/// The bundled profile `name` planned as `up NAME --dry-run` on seed 001 plans it.
fn planned(name: &str) -> ServePlan {
    let src = FileSource {
        profiles_dir: "/nonexistent".into(),
        ..FileSource::default()
    };
    let file = launch_file::read(name, &src, &PartialServe::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let request = launch_file::request(file, PartialServe::default()).unwrap();
    let nodes = seed_001();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let p = plan(&request, &names, &nodes, &Lookups::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(matches!(request, LaunchRequest::Serve(_)));
    let LaunchPlan::Serve(p) = p.plan else {
        panic!("{name}: not a serving plan")
    };
    *p
}

/// Every rank's command, joined.
fn commands(p: &ServePlan) -> Vec<String> {
    p.job
        .nodes
        .iter()
        .map(|n| match &n.launch {
            Launch::Container(c) => c.command.join(" "),
            Launch::Process(p) => p.command.join(" "),
        })
        .collect()
}

macro_rules! profile_plan {
    ($test:ident, $name:literal, $flags:literal) => {
        #[test]
        fn $test() {
            let p = planned($name);
            insta::assert_yaml_snapshot!($name, p);
            assert_eq!(p.nodes.len(), 2);
            for cmd in commands(&p) {
                assert!(cmd.contains($flags), "{cmd}");
            }
        }
    };
}

profile_plan!(
    qwen38_flash_next_on_sglang_drafts_with_its_mtp_head_as_nextn_3_1_4,
    "qwen38-flash-next-sglang-tp2",
    "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
);
profile_plan!(
    deepseek_v4_flash_drafts_two_tokens_with_its_mtp_head_on_every_rank,
    "deepseek-v4-flash-mtp-tp2",
    r#"--speculative-config {"method":"mtp","num_speculative_tokens":2}"#
);
profile_plan!(
    minimax_m2_7_nvfp4_serves_across_two_sparks_as_the_registry_recipe_does,
    "minimax-m27-nvfp4-tp2",
    "--load-format instanttensor"
);
profile_plan!(
    nemotron_3_super_nvfp4_serves_on_the_ngc_image_with_the_recipe_s_kernels,
    "nemotron3-super-nvfp4-tp2",
    "--moe-backend cutlass"
);
