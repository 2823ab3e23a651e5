//! `nccl-build`'s build path on this machine's real Docker Engine: a small Dockerfile FROM a
//! base imported here (no registry is reachable), built through `POST /build` with build
//! arguments and a platform, its output streamed line by line as the build goes; a failing
//! step is an error naming the node, the tag, the engine's message and the last output. Also
//! `spark-launch nccl-build --dry-run` as a user runs it. Every image name carries this run's
//! prefix and is removed at the end.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};

use spark_launch::node::NodeName;
use spark_launch::runtime::build::{BuildError, BuildRequest, build_image};
use spark_launch::runtime::{Engine, EngineEndpoint};
use support::docker::{Cleanup, HOST_SOCKET, import_busybox, unique};
use tokio_util::sync::CancellationToken;

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "linux/arm64",
        _ => "linux/amd64",
    }
}

async fn engine() -> Engine {
    Engine::connect(
        &NodeName::new("here").unwrap(),
        EngineEndpoint::unix(HOST_SOCKET),
    )
    .await
    .expect("the host's Docker Engine (CI starts dockerd)")
}

#[tokio::test]
async fn a_build_streams_every_line_applies_build_args_and_tags_the_image() {
    let base = format!("{}:base", unique("-nb"));
    let tag = format!("{}:nccl-vtest-sm121-{}", unique("-nb"), &host_arch()[6..]);
    let mut cleanup = Cleanup::new(HOST_SOCKET);
    cleanup.images.push(tag.clone());
    cleanup.images.push(base.clone());
    import_busybox(HOST_SOCKET, &base).await;

    let dockerfile = format!(
        "FROM {base}\nARG NCCL_REF=unset\nARG NVCC_GENCODE=unset\nRUN echo \"building NCCL $NCCL_REF for $NVCC_GENCODE\"\nRUN echo step-two > /built\nCOPY sl-entrypoint /usr/local/bin/sl-entrypoint\nLABEL dev.spark-launch.nccl-ref=$NCCL_REF\n"
    );
    let args = BTreeMap::from([
        ("NCCL_REF".to_string(), "v2.28.9-1".to_string()),
        (
            "NVCC_GENCODE".to_string(),
            "-gencode=arch=compute_121,code=sm_121".to_string(),
        ),
    ]);
    let files = [
        ("Dockerfile", dockerfile.as_str(), 0o644),
        ("sl-entrypoint", "#!/bin/sh\nexec \"$@\"\n", 0o755),
    ];
    let req = BuildRequest {
        tag: &tag,
        platform: Some(host_arch()),
        build_args: &args,
        files: &files,
        labels: BTreeMap::from([("dev.spark-launch.test".to_string(), "1".to_string())]),
    };
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let mut on_line = move |l: &str| sink.lock().unwrap().push(l.to_string());
    let built = build_image(
        &engine().await,
        &req,
        &mut on_line,
        &CancellationToken::new(),
    )
    .await
    .expect("the build succeeds");
    let lines = lines.lock().unwrap().clone();
    assert!(built.lines >= 5, "{lines:#?}");
    assert_eq!(built.lines, lines.len());
    assert!(
        lines.iter().any(
            |l| l.contains("building NCCL v2.28.9-1 for -gencode=arch=compute_121,code=sm_121")
        ),
        "the build argument reached the RUN step: {lines:#?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("Step 1/")), "{lines:#?}");
    let id = built.image_id.expect("the engine reports the image id");
    assert!(id.starts_with("sha256:"), "{id}");

    let out = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{index .Config.Labels \"dev.spark-launch.nccl-ref\"}} {{index .Config.Labels \"dev.spark-launch.test\"}} {{.Id}}",
            &tag,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), format!("v2.28.9-1 1 {id}"));
}

#[tokio::test]
async fn a_failing_step_names_the_node_the_tag_the_cause_and_the_last_output() {
    let base = format!("{}:base", unique("-nf"));
    let tag = format!("{}:broken", unique("-nf"));
    let mut cleanup = Cleanup::new(HOST_SOCKET);
    cleanup.images.push(tag.clone());
    cleanup.images.push(base.clone());
    import_busybox(HOST_SOCKET, &base).await;
    let dockerfile = format!("FROM {base}\nRUN echo before-the-failure\nRUN exit 7\n");
    let files = [("Dockerfile", dockerfile.as_str(), 0o644)];
    let args = BTreeMap::new();
    let req = BuildRequest {
        tag: &tag,
        platform: None,
        build_args: &args,
        files: &files,
        labels: BTreeMap::new(),
    };
    let mut on_line = |_: &str| {};
    let err = build_image(
        &engine().await,
        &req,
        &mut on_line,
        &CancellationToken::new(),
    )
    .await
    .expect_err("exit 7 fails the build");
    let text = err.to_string();
    assert!(matches!(err, BuildError::Failed { .. }), "{text}");
    assert!(text.starts_with("here: build "), "{text}");
    assert!(text.contains(&tag), "{text}");
    assert!(text.contains("returned a non-zero code: 7"), "{text}");
    assert!(text.contains("before-the-failure"), "{text}");
}

#[test]
fn nccl_build_dry_run_prints_one_build_per_architecture_with_its_arguments() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let f = root.join("seed-004-spark-and-workstation");
    let names: Vec<String> = std::fs::read_to_string(f.join("nodes"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut args: Vec<String> = ["--json", "nccl-build", "--dry-run", "--mesh-plugin"]
        .map(String::from)
        .to_vec();
    for n in &names {
        args.push("--snapshot".into());
        args.push(format!("{n}={}", f.join(n).display()));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(&args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let builds = v["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 2);
    assert_eq!(builds[0]["platform"], "linux/arm64");
    assert_eq!(builds[1]["platform"], "linux/amd64");
    assert_eq!(builds[0]["build_args"]["MESH_PLUGIN"], "1");
    assert_eq!(
        builds[0]["tag"],
        "spark-launch/nccl-tests:nccl-v2.30.7-1-sm121-arm64-mesh"
    );
}

#[test]
fn nccl_build_from_snapshots_without_dry_run_is_refused_before_touching_anything() {
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed-001-two-sparks-both-twins");
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(["nccl-build", "--snapshot"])
        .arg(format!("spark={}", f.join("spark").display()))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dry-run"));
}
