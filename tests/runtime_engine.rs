//! The Docker runtime against this machine's real engine (`/var/run/docker.sock`): the
//! executor's phases end to end on one node, the create request as the engine stores it
//! (labels, ulimits, capabilities, mounts), memlock, GPU refusal and clean-up after a failed
//! start. Every name carries this run's prefix; a guard removes what the test made.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use spark_launch::apply::{ApplyErrorKind, ApplyOptions, PhaseError, execute};
use spark_launch::node::{NodeName, Role};
use spark_launch::plan::spec::{LABEL_JOB, LABEL_NODE, LABEL_ROLE, Mount};
use spark_launch::plan::{
    ContainerSpec, EnsureImage, Exec, Gpus, JobName, JobPlan, Launch, NodePlan, RuntimeKind, Start,
    Step, Stop, WriteFile,
};
use spark_launch::progress::{NullReporter, RecordingReporter};
use spark_launch::runtime::{Cluster, Engine, EngineEndpoint, NodeTarget, RuntimeError};
use support::docker::{Cleanup, HOST_SOCKET, containers_named, import_busybox, inspect, unique};
use tokio_util::sync::CancellationToken;

fn node(name: &str) -> NodeName {
    NodeName::new(name).unwrap()
}

fn one_node_cluster(name: &NodeName) -> Cluster {
    Cluster::new(vec![NodeTarget::engine_only(
        name.clone(),
        Role::Head,
        EngineEndpoint::unix(HOST_SOCKET),
    )])
}

/// Explicit limits this machine allows (it lacks CAP_SYS_RESOURCE; see tests/harness/README.md).
fn allowed_ulimits(spec: &mut ContainerSpec) {
    spec.override_ulimits(&[
        "memlock=8388608".parse().unwrap(),
        "nofile=16384".parse().unwrap(),
    ]);
}

fn host_dockerd_pid() -> u32 {
    std::fs::read_to_string("/var/run/docker.pid")
        .expect("the host dockerd's pid file")
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_one_node_job_starts_takes_a_file_runs_a_command_and_is_stopped() {
    let prefix = unique("e");
    let image = format!("{prefix}img:test");
    let mut guard = Cleanup::new(HOST_SOCKET);
    guard.images.push(image.clone());
    import_busybox(HOST_SOCKET, &image).await;
    let n = node("solo");
    let job = JobName::new(format!("{prefix}job")).unwrap();
    guard.containers.push(job.container_name(&n));
    let mut spec = ContainerSpec::gpu(&job, &n, Role::Head, &image, false);
    spec.gpus = Gpus::None;
    allowed_ulimits(&mut spec);
    spec.command = vec!["sleep".into(), "600".into()];
    let plan = JobPlan {
        job: job.clone(),
        workload: "test".into(),
        runtime: RuntimeKind::Docker,
        nodes: vec![NodePlan {
            node: n.clone(),
            role: Role::Head,
            launch: Launch::Container(spec),
        }],
        steps: vec![
            Step::EnsureImage(EnsureImage {
                image: image.clone(),
                nodes: vec![n.clone()],
            }),
            Step::Start(Start {
                nodes: vec![n.clone()],
            }),
            Step::WriteFile(WriteFile {
                node: n.clone(),
                path: "/etc/spark/hostfile".into(),
                content: "solo slots=1\n".into(),
                mode: 0o644,
            }),
            Step::Exec(Exec {
                node: n.clone(),
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    "cat /etc/spark/hostfile; echo $GREETING; ulimit -l".into(),
                ],
                env: BTreeMap::from([("GREETING".to_string(), "hello".to_string())]),
                capture: Some("out".into()),
                timeout_s: 30,
            }),
            Step::Stop(Stop),
        ],
    };
    let cluster = one_node_cluster(&n);
    let reporter = RecordingReporter::new();
    let applied = execute(
        &plan,
        &cluster,
        &ApplyOptions::default(),
        reporter.clone(),
        CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        applied.captures["out"].stdout,
        "solo slots=1\nhello\n8192\n"
    );
    assert_eq!(
        applied.phases,
        vec![
            "Connect to the nodes".to_string(),
            "Check that the job name is free".to_string(),
            format!("Ensure image {image} on solo"),
            "Start on solo".to_string(),
            "Write /etc/spark/hostfile on solo".to_string(),
            "Run `sh -c 'cat /etc/spark/hostfile; echo $GREETING; ulimit -l'` on solo".to_string(),
            "Stop the job".to_string(),
        ]
    );
    let events = reporter.events();
    assert!(
        events.last().unwrap().starts_with("info:Finished in "),
        "{events:?}"
    );
    assert!(containers_named(HOST_SOCKET, &prefix).is_empty());
}

#[tokio::test]
async fn the_created_container_carries_labels_ulimits_capabilities_mounts_and_host_namespaces() {
    let prefix = unique("c");
    let image = format!("{prefix}img:test");
    let mut guard = Cleanup::new(HOST_SOCKET);
    guard.images.push(image.clone());
    import_busybox(HOST_SOCKET, &image).await;
    let n = node("n1");
    let job = JobName::new(format!("{prefix}job")).unwrap();
    let name = job.container_name(&n);
    guard.containers.push(name.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut spec = ContainerSpec::gpu(&job, &n, Role::Worker, &image, false);
    spec.gpus = Gpus::None;
    spec.mount_hf_cache(dir.path().to_str().unwrap());
    spec.mounts.push(Mount {
        source: dir.path().to_str().unwrap().to_string(),
        target: "/data".into(),
        read_only: true,
        kind: spark_launch::plan::spec::MountKind::Bind,
    });
    spec.ports = vec![8000];
    spec.command = vec!["sleep".into(), "600".into()];
    let engine = Engine::connect(&n, EngineEndpoint::unix(HOST_SOCKET))
        .await
        .unwrap();
    engine.create(&spec).await.unwrap();
    let c = inspect(HOST_SOCKET, &name);
    let labels = &c["Config"]["Labels"];
    assert_eq!(labels[LABEL_JOB], job.as_str());
    assert_eq!(labels[LABEL_NODE], "n1");
    assert_eq!(labels[LABEL_ROLE], "worker");
    assert_eq!(labels["dev.spark-launch.ports"], "8000");
    let hc = &c["HostConfig"];
    assert_eq!(hc["NetworkMode"], "host");
    assert_eq!(hc["IpcMode"], "host");
    assert_eq!(hc["CapAdd"], serde_json::json!(["IPC_LOCK"]));
    assert_eq!(hc["AutoRemove"], false);
    assert_eq!(hc["Init"], true);
    assert_eq!(
        hc["Ulimits"],
        serde_json::json!([
            {"Name": "memlock", "Soft": -1, "Hard": -1},
            {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
            {"Name": "nofile", "Soft": 65536, "Hard": 65536},
        ])
    );
    let mounts = hc["Mounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["Target"] == "/root/.cache/huggingface" && m["Type"] == "bind")
    );
    assert!(
        mounts
            .iter()
            .any(|m| m["Target"] == "/data" && m["ReadOnly"] == true)
    );
    assert!(
        c["Config"]["Env"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("HF_HOME=/root/.cache/huggingface"))
    );
    engine.remove(&name, Duration::ZERO).await.unwrap();
}

#[tokio::test]
async fn memlock_unlimited_is_requested_and_either_shows_inside_or_fails_to_start_with_a_named_error()
 {
    let prefix = unique("m");
    let image = format!("{prefix}img:test");
    let mut guard = Cleanup::new(HOST_SOCKET);
    guard.images.push(image.clone());
    import_busybox(HOST_SOCKET, &image).await;
    let n = node("n1");
    let job = JobName::new(format!("{prefix}job")).unwrap();
    let name = job.container_name(&n);
    guard.containers.push(name.clone());
    let mut spec = ContainerSpec::gpu(&job, &n, Role::Head, &image, false);
    spec.gpus = Gpus::None;
    spec.command = vec!["sh".into(), "-c".into(), "ulimit -l; sleep 600".into()];
    let engine = Engine::connect(&n, EngineEndpoint::unix(HOST_SOCKET))
        .await
        .unwrap();

    // The created container asks for memlock -1, whatever this host allows.
    engine.create(&spec).await.unwrap();
    let c = inspect(HOST_SOCKET, &name);
    assert_eq!(
        c["HostConfig"]["Ulimits"][0],
        serde_json::json!({"Name": "memlock", "Soft": -1, "Hard": -1})
    );
    engine.remove(&name, Duration::ZERO).await.unwrap();

    let cancel = CancellationToken::new();
    if support::docker::has_cap_sys_resource(host_dockerd_pid()) {
        engine.run(&spec).await.unwrap();
        let out = engine
            .exec(
                &name,
                &["sh".into(), "-c".into(), "ulimit -l".into()],
                &[],
                Duration::from_secs(30),
                &cancel,
            )
            .await
            .unwrap();
        assert_eq!(out.stdout.trim(), "unlimited");
        engine.remove(&name, Duration::ZERO).await.unwrap();
    } else {
        let err = engine.run(&spec).await.unwrap_err();
        assert!(matches!(err, RuntimeError::UlimitRefused { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&format!("start container {name}")), "{text}");
        assert!(text.contains("memlock=-1:-1"), "{text}");
        assert!(text.contains("CAP_SYS_RESOURCE"), "{text}");
        // The created-but-not-started container was removed.
        assert!(containers_named(HOST_SOCKET, &prefix).is_empty());
    }

    // An allowed value shows inside, proving the limit really reaches the workload.
    allowed_ulimits(&mut spec);
    engine.run(&spec).await.unwrap();
    let out = engine
        .exec(
            &name,
            &[
                "sh".into(),
                "-c".into(),
                "ulimit -l; ulimit -n; ulimit -s".into(),
            ],
            &[],
            Duration::from_secs(30),
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "8192\n16384\n65536\n");
    engine.remove(&name, Duration::ZERO).await.unwrap();
}

#[tokio::test]
async fn a_gpu_request_on_an_engine_without_gpu_support_is_refused_and_leaves_no_container() {
    let prefix = unique("g");
    let image = format!("{prefix}img:test");
    let mut guard = Cleanup::new(HOST_SOCKET);
    guard.images.push(image.clone());
    import_busybox(HOST_SOCKET, &image).await;
    let n = node("n1");
    let job = JobName::new(format!("{prefix}job")).unwrap();
    guard.containers.push(job.container_name(&n));
    let mut spec = ContainerSpec::gpu(&job, &n, Role::Head, &image, false);
    allowed_ulimits(&mut spec);
    spec.command = vec!["sleep".into(), "600".into()];
    assert_eq!(spec.gpus, Gpus::All);
    let plan = JobPlan {
        job: job.clone(),
        workload: "test".into(),
        runtime: RuntimeKind::Docker,
        nodes: vec![NodePlan {
            node: n.clone(),
            role: Role::Head,
            launch: Launch::Container(spec),
        }],
        steps: vec![Step::Start(Start {
            nodes: vec![n.clone()],
        })],
    };
    let cluster = one_node_cluster(&n);
    let err = execute(
        &plan,
        &cluster,
        &ApplyOptions::default(),
        Arc::new(NullReporter),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("n1: GPUs requested (--gpus all)"), "{text}");
    assert!(
        text.contains("neither the NVIDIA runtime nor CDI"),
        "{text}"
    );
    assert!(matches!(
        err.kind,
        ApplyErrorKind::Failed {
            error: PhaseError::Nodes(_),
            ..
        }
    ));
    assert!(containers_named(HOST_SOCKET, &prefix).is_empty());
}

#[tokio::test]
async fn a_docker_socket_that_does_not_exist_is_reported_as_docker_missing() {
    let n = node("n1");
    let err = Engine::connect(&n, EngineEndpoint::unix("/nonexistent/sl4/docker.sock"))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::DockerMissing { .. }), "{err}");
    assert!(err.to_string().contains("systemctl start docker"));
}

#[tokio::test]
async fn the_engine_reports_its_version_architecture_and_runtimes() {
    let n = node("n1");
    let engine = Engine::connect(&n, EngineEndpoint::unix(HOST_SOCKET))
        .await
        .unwrap();
    let f = engine.features();
    assert!(f.api >= spark_launch::runtime::features::MIN_API);
    assert!(f.runtimes.contains(&"runc".to_string()), "{f:?}");
    assert!(!f.arch.as_str().is_empty());
}
