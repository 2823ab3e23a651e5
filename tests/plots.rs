//! `--plot FILE.svg` for nccl-tests results, rendered to PNG by the real SVG renderer
//! (`rsvg-convert`) and checked not blank: `report nccl LOG --plot` on captured logs (two
//! DGX Sparks, both twins and one twin: tests/fixtures/nccl-tests), and `nccl-test --local
//! --runtime host --plot` through the real executor and Open MPI's mpirun with stand-in
//! `*_perf` binaries that print a captured log (as tests/nccl_host.rs runs them). The bench
//! pictures are drawn in tests/bench.rs, against its stand-in server.

mod picture;
mod support;
use support::fixtures::fixture;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use support::describe;

fn spark_launch(args: &[&str], state: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_STATE_DIR", state)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

#[test]
fn report_nccl_draws_each_logs_curve_and_the_figure_two_sparks_must_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let svg = tmp.path().join("busbw.svg");
    let both = fixture("nccl-tests/all_gather_2spark_both_twins.log");
    let one = fixture("nccl-tests/all_gather_2spark_one_twin.log");
    let out = spark_launch(
        &[
            "report",
            "nccl",
            one.to_str().unwrap(),
            both.to_str().unwrap(),
            "--topology",
            "direct",
            "--plot",
            svg.to_str().unwrap(),
        ],
        tmp.path(),
    );
    // One twin stays below the reference: the verdict is a failure, the picture is drawn.
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(200)]);
    for label in [
        "all_gather_perf (all_gather_2spark_one_twin.log)",
        "all_gather_perf (all_gather_2spark_both_twins.log)",
        "expected ≥ 21.875 GB/s: two DGX Sparks, one cable",
        "1 GiB",
    ] {
        assert!(text.contains(label), "no {label:?} in the SVG");
    }
    let p = picture::render(&svg);
    p.assert_not_blank();
    p.assert_drawn("the first log's curve", picture::NOW, 300);
    p.assert_drawn("the expected figure", picture::EXPECTED, 150);
}

#[test]
fn a_picture_must_be_svg_and_a_failed_run_draws_none_but_keeps_its_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let log = fixture("nccl-tests/all_gather_2spark_both_twins.log");
    let out = spark_launch(
        &[
            "report",
            "nccl",
            log.to_str().unwrap(),
            "--plot",
            "busbw.png",
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        describe(&out).contains("ending in .svg"),
        "{}",
        describe(&out)
    );
    // A run that failed before measuring has no curve: a warning, no file, the verdict.
    let svg = tmp.path().join("none.svg");
    let failed = fixture("nccl-tests/mpirun_host_key_changed.log");
    let out = spark_launch(
        &[
            "report",
            "nccl",
            failed.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        describe(&out).contains("no picture written to"),
        "{}",
        describe(&out)
    );
    assert!(!svg.exists());
}

#[test]
fn nccl_test_draws_the_run_it_just_measured() {
    assert!(
        Command::new("mpirun").arg("--version").output().is_ok(),
        "Open MPI's mpirun is needed (apt-get install openmpi-bin)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let perf = bin.join("all_gather_perf");
    std::fs::write(
        &perf,
        format!(
            "#!/bin/sh\n[ \"${{OMPI_COMM_WORLD_RANK:-0}}\" = 0 ] && cat {}\nexit 0\n",
            fixture("nccl-tests/all_gather_2spark_both_twins.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&perf, std::fs::Permissions::from_mode(0o755)).unwrap();
    let svg = tmp.path().join("nccl-test.svg");
    let out = spark_launch(
        &[
            "nccl-test",
            "--local",
            "--runtime",
            "host",
            "--job",
            "plotnccl",
            "--op",
            "all_gather",
            "--tests-dir",
            bin.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        &tmp.path().join("state"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("all_gather_perf"),
        "no curve label in the SVG"
    );
    let p = picture::render(&svg);
    p.assert_not_blank();
    p.assert_drawn("the curve", picture::NOW, 300);
}
