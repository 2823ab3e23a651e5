//! `spark-launch nccl-test --local --runtime host` on this machine, through the real executor,
//! the host-process runtime and the real Open MPI `mpirun`, with stand-in nccl-tests binaries
//! that print captured logs (the GPU machine runs the real ones: tests/gpu/). A clean run exits
//! 0; a run that falls back to sockets, with mpirun failing, exits 1 with its cause.

mod support;
use support::fixtures::fixture;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use support::describe;

/// A folder of stand-in `*_perf` binaries: rank 0 prints the log, the exit status is given.
fn perf_dir(dir: &Path, logs: &[(&str, &str, i32)]) {
    for (op, log, code) in logs {
        let path = dir.join(format!("{op}_perf"));
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\n[ \"${{OMPI_COMM_WORLD_RANK:-0}}\" = 0 ] && cat {}\nexit {code}\n",
                fixture(&format!("nccl-tests/{log}")).display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn run(dir: &Path, state: &Path, job: &str, extra: &[&str]) -> Output {
    assert!(
        Command::new("mpirun").arg("--version").output().is_ok(),
        "Open MPI's mpirun is needed (apt-get install openmpi-bin)"
    );
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args([
            "--json",
            "nccl-test",
            "--local",
            "--runtime",
            "host",
            "--job",
            job,
        ])
        .arg("--tests-dir")
        .arg(dir)
        .args(extra)
        .env("SPARK_LAUNCH_STATE_DIR", state)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

#[test]
fn a_clean_local_run_goes_through_real_mpirun_and_is_measured() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    perf_dir(
        &bin,
        &[
            ("all_gather", "gpu_h200x2_all_gather_plain.log", 0),
            ("all_reduce", "gpu_h200x2_all_reduce_plain.log", 0),
        ],
    );
    let job = format!("sl5h{}", std::process::id());
    let log = tmp.path().join("saved.log");
    let out = run(
        &bin,
        &tmp.path().join("state"),
        &job,
        &["--save-log", log.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["status"], "measured");
    let tests: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, vec!["all_gather_perf", "all_reduce_perf"]);
    let saved = std::fs::read_to_string(&log).unwrap();
    assert!(
        saved.contains("# spark-launch: mpirun exit status 0"),
        "{saved}"
    );
    // The job is gone: stop removed its process record.
    let left = std::fs::read_dir(tmp.path().join("state/jobs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "the job's process folder is still there");
    let hostfile = format!("/tmp/sl-{job}.hostfile");
    assert!(!Path::new(&hostfile).exists(), "{hostfile} was left behind");
}

#[test]
fn a_socket_fallback_with_a_failing_mpirun_exits_one_with_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    perf_dir(
        &bin,
        &[("all_reduce", "gpu_h200x2_all_reduce_socket_plain.log", 3)],
    );
    let job = format!("sl5s{}", std::process::id());
    let out = run(
        &bin,
        &tmp.path().join("state"),
        &job,
        &["--op", "all_reduce"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["status"], "fail");
    let t = &v["tests"][0];
    assert_eq!(t["run"]["exit_status"], 3);
    let kinds: Vec<&str> = t["verdict"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["socket-fallback"]);
}
