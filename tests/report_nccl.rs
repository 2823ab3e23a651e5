//! The nccl-tests parser, transport check and verdict on every fixture log
//! (`tests/fixtures/nccl-tests/`, each described in its README), and `spark-launch report
//! nccl` on them as a user runs it.

use std::path::Path;
use std::process::Command;

use spark_launch::derive::Topology;
use spark_launch::report::nccl::{self, AnalysisContext, Status, Transport, render};

mod support;
use support::fixtures::fixture;

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture("nccl-tests").join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// What each fixture must yield: status, the transport of every process, and a phrase of the
/// first cause (for failures).
const EXPECTED: &[(&str, Status, Option<Transport>, Option<&str>)] = &[
    (
        "all_reduce_2gpu_nvlink.log",
        Status::Measured,
        Some(Transport::IntraNode),
        None,
    ),
    (
        "all_reduce_2rank_net_socket.log",
        Status::Fail,
        Some(Transport::Socket),
        Some("data went over TCP sockets"),
    ),
    (
        "all_gather_2spark_both_twins.log",
        Status::Pass,
        Some(Transport::Rdma),
        None,
    ),
    (
        "all_gather_2spark_one_twin.log",
        Status::Fail,
        Some(Transport::Rdma),
        Some("roceP2p1s0f1 carries no traffic"),
    ),
    (
        "all_gather_2spark_socket_fallback.log",
        Status::Fail,
        Some(Transport::Socket),
        Some("no RDMA device matching NCCL_IB_HCA"),
    ),
    (
        "all_reduce_2spark_ibv_reg_mr_failure.log",
        Status::Fail,
        Some(Transport::Rdma),
        Some("Call to ibv_reg_mr failed"),
    ),
    (
        "mpirun_host_key_changed.log",
        Status::Fail,
        None,
        Some("REMOTE HOST IDENTIFICATION HAS CHANGED"),
    ),
    (
        "gpu_h200x2_all_reduce_plain.log",
        Status::Measured,
        Some(Transport::IntraNode),
        None,
    ),
    (
        "gpu_h200x2_all_gather_plain.log",
        Status::Measured,
        Some(Transport::IntraNode),
        None,
    ),
    (
        "gpu_h200x2_all_reduce_socket_plain.log",
        Status::Fail,
        Some(Transport::Socket),
        Some("NCCL_IB_DISABLE=1 turned RDMA off"),
    ),
    (
        "gpu_h200x2_spark_launch.log",
        Status::Measured,
        Some(Transport::IntraNode),
        None,
    ),
    (
        "gpu_h200x2_spark_launch_socket.log",
        Status::Fail,
        Some(Transport::Socket),
        Some("NCCL_IB_DISABLE=1 turned RDMA off"),
    ),
];

#[test]
fn every_fixture_log_gets_the_verdict_its_readme_promises() {
    let mut logs: Vec<String> = std::fs::read_dir(fixture("nccl-tests"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".log"))
        .collect();
    logs.sort();
    for log in &logs {
        assert!(
            EXPECTED.iter().any(|(n, ..)| n == log),
            "{log} has no expected verdict in this test: add it to EXPECTED"
        );
    }
    for (name, status, transport, cause) in EXPECTED {
        if !logs.iter().any(|l| l == name) {
            panic!("fixture {name} is missing from tests/fixtures/nccl-tests/");
        }
        let a = nccl::analyse(&read(name), &AnalysisContext::default());
        assert_eq!(a.status, *status, "{name}: status\n{}", render::text(&a));
        for t in &a.tests {
            for p in &t.run.transport.processes {
                assert_eq!(
                    Some(p.transport),
                    *transport,
                    "{name}: {} {}",
                    p.host,
                    p.label()
                );
            }
            if transport.is_none() {
                assert!(t.run.transport.is_empty(), "{name}: no NCCL lines expected");
            }
        }
        match cause {
            Some(c) => {
                let first = a
                    .first_cause()
                    .unwrap_or_else(|| panic!("{name}: no cause"));
                assert!(
                    first.problem.what.contains(c),
                    "{name}: first cause {:?} should mention {c:?}",
                    first.problem.what
                );
            }
            None => assert!(a.first_cause().is_none(), "{name}: {:?}", a.first_cause()),
        }
    }
}

#[test]
fn every_fixture_renders_the_same_table_and_verdict_as_reviewed() {
    for (name, ..) in EXPECTED {
        let a = nccl::analyse(&read(name), &AnalysisContext::default());
        let name = name.trim_end_matches(".log");
        insta::assert_snapshot!(format!("report_{name}"), render::text(&a));
    }
}

#[test]
fn the_shared_nvlink_log_parses_every_row_and_the_footer() {
    let a = nccl::analyse(
        &read("all_reduce_2gpu_nvlink.log"),
        &AnalysisContext::default(),
    );
    let t = &a.tests[0];
    assert_eq!(t.test.as_deref(), Some("all_reduce_perf"));
    assert_eq!(t.run.rows.len(), 27);
    assert_eq!(t.run.rows[26].size_bytes, 536_870_912);
    assert_eq!(t.run.avg_busbw_gbs, Some(80.7242));
    assert_eq!(t.run.out_of_bounds, Some(0));
    assert!(t.run.concluded);
    assert_eq!(t.run.devices.len(), 2);
    assert_eq!(t.verdict.peak_busbw_gbs, Some(315.75));
    let hosts = t.run.transport.hosts();
    assert_eq!(hosts, vec!["vm"]);
    assert_eq!(t.run.transport.processes[0].ranks, vec![0]);
    assert_eq!(t.run.transport.processes[1].ranks, vec![1]);
}

#[test]
fn the_gpu_run_through_spark_launch_holds_both_tests_with_their_exit_status() {
    let a = nccl::analyse(
        &read("gpu_h200x2_spark_launch.log"),
        &AnalysisContext::default(),
    );
    let tests: Vec<&str> = a.tests.iter().filter_map(|t| t.test.as_deref()).collect();
    assert_eq!(tests, vec!["all_reduce_perf", "all_gather_perf"]);
    for t in &a.tests {
        assert_eq!(t.run.exit_status, Some(0));
        assert_eq!(t.run.devices.len(), 2);
        assert!(
            t.run
                .transport
                .processes
                .iter()
                .all(|p| p.nnodes == Some(1))
        );
    }
    // The figures recorded in tests/gpu/README.md.
    assert_eq!(a.tests[0].verdict.peak_busbw_gbs, Some(330.76));
    assert_eq!(a.tests[1].run.avg_busbw_gbs, Some(70.1281));
}

#[test]
fn a_failed_run_is_failed_with_its_first_cause_never_zero_bandwidth() {
    let a = nccl::analyse(
        &read("all_reduce_2spark_ibv_reg_mr_failure.log"),
        &AnalysisContext::default(),
    );
    let v = &a.tests[0].verdict;
    assert!(v.run_failed);
    assert_eq!(v.peak_busbw_gbs, None);
    assert_eq!(v.avg_busbw_gbs, None);
    assert!(
        v.causes[0]
            .problem
            .fix
            .as_deref()
            .unwrap()
            .contains("memlock=-1")
    );
    assert_eq!(v.causes[0].host.as_deref(), Some("spark-1d84"));
    assert!(!render::text(&a).contains("GB/s"));
}

#[test]
fn a_three_spark_ring_is_judged_against_ten_gb_per_second_only_when_the_ring_is_known() {
    // Take the two-node pass log and give it a third Spark: no pair figure applies any more.
    let text = read("all_gather_2spark_both_twins.log").replace(
        "#  Rank  1 Group  0 Pid   3107 on spark-1d84 device  0 [000f:01:00] NVIDIA GB10",
        "#  Rank  1 Group  0 Pid   3107 on spark-1d84 device  0 [000f:01:00] NVIDIA GB10\n#  Rank  2 Group  0 Pid   4001 on spark-22aa device  0 [000f:01:00] NVIDIA GB10",
    );
    let a = nccl::analyse(&text, &AnalysisContext::default());
    assert_eq!(a.status, Status::Measured);
    let ring = AnalysisContext {
        topology: Some(Topology::Ring),
        ..AnalysisContext::default()
    };
    let a = nccl::analyse(&text, &ring);
    assert_eq!(a.status, Status::Pass);
    assert_eq!(
        a.tests[0]
            .verdict
            .expectation
            .as_ref()
            .unwrap()
            .min_busbw_gbs,
        10.0
    );
}

#[test]
fn a_pair_below_the_pass_mark_fails_with_the_figure_named() {
    // The one-twin log, without its transport lines, still fails on bandwidth alone.
    let text: String = read("all_gather_2spark_one_twin.log")
        .lines()
        .filter(|l| !l.contains("NCCL INFO"))
        .map(|l| format!("{l}\n"))
        .collect();
    let a = nccl::analyse(&text, &AnalysisContext::default());
    assert_eq!(a.status, Status::Fail);
    let cause = a.first_cause().unwrap();
    assert!(
        cause.problem.what.contains("below the 21.875 GB/s"),
        "{}",
        cause.problem.what
    );
}

#[test]
fn a_small_largest_message_gives_figures_but_no_pass_or_fail() {
    let text = read("all_gather_2spark_both_twins.log");
    // Keep rows up to 512 MiB only.
    let kept: String = text
        .lines()
        .filter(|l| {
            let first = l.split_whitespace().next().unwrap_or("");
            first.parse::<u64>().map_or(true, |s| s < (1 << 30))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let a = nccl::analyse(&kept, &AnalysisContext::default());
    assert_eq!(a.status, Status::Measured);
    assert!(
        a.tests[0]
            .verdict
            .no_expectation
            .as_deref()
            .unwrap()
            .contains("too small")
    );
}

fn spark_launch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spark-launch"));
    c.env("SPARK_LAUNCH_NO_PROGRESS", "1");
    c
}

#[test]
fn report_nccl_exits_one_on_a_fallback_and_zero_on_a_clean_log() {
    let out = spark_launch()
        .args(["report", "nccl"])
        .arg(fixture("nccl-tests").join("all_reduce_2rank_net_socket.log"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("✗ FAILED"), "{stdout}");
    let out = spark_launch()
        .args(["report", "nccl"])
        .arg(fixture("nccl-tests").join("all_reduce_2gpu_nvlink.log"))
        .arg(fixture("nccl-tests").join("all_gather_2spark_both_twins.log"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn report_nccl_json_is_one_clean_document_with_every_log() {
    let out = spark_launch()
        .args(["--json", "report", "nccl"])
        .arg(fixture("nccl-tests").join("all_gather_2spark_one_twin.log"))
        .arg(fixture("nccl-tests").join("all_reduce_2gpu_nvlink.log"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["status"], "fail");
    assert_eq!(v["logs"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["logs"][0]["tests"][0]["verdict"]["problems"][0]["kind"],
        "missing-hca"
    );
    assert_eq!(v["logs"][1]["status"], "measured");
}

#[test]
fn report_nccl_on_a_missing_file_is_invalid_input() {
    let out = spark_launch()
        .args(["report", "nccl", "/nonexistent/log.txt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/log.txt"), "{err}");
    // Its cause is said once, in the error's own line, not again as `caused by:`.
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_log_cut_before_its_closing_lines_is_incomplete_not_measured() {
    // Seen once: `report nccl` on a log whose last lines were cut off said "measured".
    for name in [
        "all_reduce_2gpu_nvlink.log",
        "all_gather_2spark_both_twins.log",
    ] {
        let text = read(name);
        let cut = text
            .find("# Out of bounds values")
            .unwrap_or_else(|| panic!("{name} has no closing lines"));
        let a = nccl::analyse(&text[..cut], &AnalysisContext::default());
        assert_eq!(a.status, Status::Incomplete, "{name}\n{}", render::text(&a));
        let shown = render::text(&a);
        assert!(shown.contains("INCOMPLETE"), "{shown}");
        assert!(shown.contains("closing lines"), "{shown}");
        // Cut in the middle of the rows, too.
        let rows_cut = text[..cut].rfind("\n  ").unwrap_or(cut);
        let a = nccl::analyse(&text[..rows_cut], &AnalysisContext::default());
        assert_eq!(a.status, Status::Incomplete, "{name}");
    }
    // And `report nccl` exits 1 on it, saying so.
    let dir = tempfile::tempdir().unwrap();
    let text = read("all_reduce_2gpu_nvlink.log");
    let cut = text.find("# Out of bounds values").unwrap();
    let path = dir.path().join("cut.log");
    std::fs::write(&path, &text[..cut]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(["report", "nccl"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("INCOMPLETE"));
}

#[test]
fn report_nccl_on_dev_zero_or_a_fifo_is_refused_at_once() {
    // Seen once: `report nccl /dev/zero` hung.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for target in [Path::new("/dev/zero"), fifo.as_path()] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
            .args(["report", "nccl"])
            .arg(target)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                panic!("report nccl {} hangs", target.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not a regular file"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
