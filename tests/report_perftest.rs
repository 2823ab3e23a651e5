//! perftest's outputs as `report::perftest` reads them: the seeds' real `ib_write_bw`,
//! `ib_write_lat` and `ib_send_bw` outputs and captured variants (both twins at once, one twin
//! down, RoCE at MTU 1024), and `fabric test`'s plan and verdict on a fixture cluster.

use std::path::Path;

use spark_launch::fabric::perftest::{self as plan, TestPlan};
use spark_launch::report::perftest::{self, PerfVerdict, RoundOutput, RunOutput};

mod support;
use support::fixtures::fixture_nodes;

fn text(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/perftest")
            .join(name),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn seed_001s_ib_write_bw_reads_as_111_gbps_on_four_qps() {
    let r = perftest::parse(&text("ib_write_bw-seed-001.txt"));
    assert_eq!(r.test.as_deref(), Some("RDMA_Write BW Test"));
    assert_eq!(r.device.as_deref(), Some("rocep1s0f1"));
    assert_eq!(r.qps, Some(4));
    assert_eq!(r.mtu, Some(1024));
    assert_eq!(r.link_type.as_deref(), Some("IB"));
    assert_eq!(r.unit.as_deref(), Some("Gb/sec"));
    assert_eq!(r.avg_gbps(), Some(111.71));
    assert_eq!(r.bw[0].peak_gbps, 111.72);
    assert_eq!(r.bw[0].iterations, 20000);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
}

#[test]
fn seed_001s_ib_write_lat_reads_every_column() {
    let r = perftest::parse(&text("ib_write_lat-seed-001.txt"));
    assert_eq!(r.test.as_deref(), Some("RDMA_Write Latency Test"));
    assert!(r.bw.is_empty());
    insta::assert_json_snapshot!("ib_write_lat-seed-001", r.lat);
    assert_eq!(r.typical_usec(), Some(1.47));
}

#[test]
fn seed_004s_ib_send_bw_in_mb_per_second_converts_with_perftests_2_to_the_20() {
    let r = perftest::parse(&text("ib_send_bw-seed-004.txt"));
    assert_eq!(r.test.as_deref(), Some("Send BW Test"));
    assert_eq!(r.link_type.as_deref(), Some("Ethernet"));
    assert_eq!(r.unit.as_deref(), Some("MB/sec"));
    let g = r.avg_gbps().unwrap();
    // 11664.25 × 2^20 B/s × 8 = 97.85 Gb/s (the seed's 93.3 used 10^6 bytes per MB).
    assert!((g - 97.846).abs() < 0.01, "{g}");
}

#[test]
fn a_twin_whose_port_is_down_gives_no_figure_and_perftests_reason() {
    let r = perftest::parse(&text("ib_write_bw-twin-down.txt"));
    assert!(!r.has_result());
    assert_eq!(
        r.errors,
        vec![
            "Port number 1 state is Down",
            "Couldn't set the link layer",
            "Couldn't get context for the device"
        ]
    );
}

#[test]
fn roce_at_mtu_1024_is_read_with_its_gid_index() {
    let r = perftest::parse(&text("ib_write_bw-roce-mtu-1024.txt"));
    assert_eq!(r.mtu, Some(1024));
    assert_eq!(r.gid_index, Some(3));
    assert_eq!(r.avg_gbps(), Some(86.31));
}

fn outputs(plan: &TestPlan, clients: &[&[&str]]) -> Vec<RoundOutput> {
    plan.rounds
        .iter()
        .zip(clients)
        .map(|(r, files)| RoundOutput {
            cable: r.cable.clone(),
            runs: r
                .runs
                .iter()
                .zip(files.iter())
                .map(|(run, f)| RunOutput {
                    port: run.port,
                    client: Ok(text(f)),
                    server: Ok(String::new()),
                })
                .collect(),
        })
        .collect()
}

#[test]
fn fabric_test_runs_both_twins_of_the_one_cable_at_once_and_passes_near_line_rate() {
    let p = plan::plan(&fixture_nodes("seed-001-two-sparks-both-twins"), &[], 5).unwrap();
    insta::assert_json_snapshot!("test-plan-seed-001", p);
    assert_eq!(p.rounds.len(), 1);
    assert_eq!(
        p.rounds[0].runs.len(),
        1,
        "the second twin has no address: {p:?}"
    );
    // With both twins addressed (after `fabric apply`), both run at once.
    let p = plan::plan(&fixture_nodes("ring-4-sparks"), &[], 5).unwrap();
    assert_eq!(p.rounds.len(), 4, "one cable after another");
    assert!(p.skipped.len() == 4, "{:?}", p.skipped);
}

#[test]
fn both_twins_pass_a_twin_down_fails_and_an_mtu_of_1024_warns() {
    // A plan with two twin pairs on one cable, as after `fabric apply` on two Sparks.
    let nodes = fixture_nodes("seed-001-two-sparks-both-twins");
    let mut p = plan::plan(&nodes, &[], 5).unwrap();
    let mut second = p.rounds[0].runs[0].clone();
    second.port += 1;
    second.client.iface = spark_launch::probe::facts::NetIf::new("enP2p1s0f1np1");
    second.server.iface = spark_launch::probe::facts::NetIf::new("enP2p1s0f1np1");
    second.client_device = spark_launch::probe::facts::IbDevice::new("roceP2p1s0f1");
    second.server_device = spark_launch::probe::facts::IbDevice::new("roceP2p1s0f1");
    second.server_addr = "192.168.100.2".parse().unwrap();
    p.skipped.clear();
    p.rounds[0].runs.push(second);
    assert_eq!(p.rounds[0].runs[0].allowed_gbps, Some(100.0));

    let r = perftest::report(
        &p,
        &outputs(
            &p,
            &[&[
                "ib_write_bw-both-twins-1.txt",
                "ib_write_bw-both-twins-2.txt",
            ]],
        ),
    );
    assert_eq!(r.verdict, PerfVerdict::Pass, "{r:#?}");
    assert!((r.cables[0].gbps - 189.33).abs() < 0.01);

    let r = perftest::report(
        &p,
        &outputs(
            &p,
            &[&["ib_write_bw-both-twins-1.txt", "ib_write_bw-twin-down.txt"]],
        ),
    );
    assert_eq!(r.verdict, PerfVerdict::Fail);
    assert_eq!(r.pairs[1].verdict, PerfVerdict::Fail);
    assert!(
        r.pairs[1].notes[0].contains("Port number 1 state is Down"),
        "{r:#?}"
    );

    let r = perftest::report(
        &p,
        &outputs(
            &p,
            &[&[
                "ib_write_bw-roce-mtu-1024.txt",
                "ib_write_bw-both-twins-2.txt",
            ]],
        ),
    );
    assert_eq!(r.pairs[0].verdict, PerfVerdict::Warn);
    assert!(r.pairs[0].notes.iter().any(|n| n.contains("set 9000")));
    insta::assert_json_snapshot!("report-mtu-1024", r);
}
