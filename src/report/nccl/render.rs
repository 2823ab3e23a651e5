//! Text rendering of an [`Analysis`]: per test a results table (size, time, algbw, busbw,
//! #wrong for both placements), the bus bandwidth, a transport table (one line per rank:
//! RDMA with which devices, or TCP sockets, or intra-node), and the verdict with its causes and
//! fixes. Tables are comfy-table; the caller prints the string on stdout. Pure.

use comfy_table::{CellAlignment, ContentArrangement, LineStyle, Table, TableStyle};

/// Columns separated by spaces, one rule under the header: easy to read and to paste.
const BORDERS: TableStyle =
    TableStyle::new().header_separator(LineStyle::none().fill('─').junction('─'));

use super::{Analysis, Measure, ProcessTransport, Status, TestAnalysis, Transport};
use crate::progress::human_bytes;

/// The whole analysis as text.
pub fn text(a: &Analysis) -> String {
    let mut out = String::new();
    if let Some(src) = &a.source {
        out.push_str(&format!("== {src}\n"));
    }
    for (i, t) in a.tests.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&test(t));
    }
    out
}

fn test(t: &TestAnalysis) -> String {
    let run = &t.run;
    let v = &t.verdict;
    let mut out = String::new();
    let name = t.test.as_deref().unwrap_or("nccl-tests");
    let mut about = Vec::new();
    if let Some(ver) = &run.nccl_tests_version {
        about.push(format!("nccl-tests {ver}"));
    }
    if let Some(nccl) = run
        .transport
        .processes
        .iter()
        .find_map(|p| p.nccl_version.as_deref())
    {
        about.push(format!("NCCL {nccl}"));
    }
    if !run.devices.is_empty() {
        let mut hosts: Vec<&str> = run.devices.iter().map(|d| d.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let mut gpus: Vec<&str> = run.devices.iter().map(|d| d.gpu.as_str()).collect();
        gpus.sort_unstable();
        gpus.dedup();
        about.push(format!(
            "{} rank{} on {} host{}, {}",
            run.devices.len(),
            if run.devices.len() == 1 { "" } else { "s" },
            hosts.len(),
            if hosts.len() == 1 { "" } else { "s" },
            gpus.join(" + ")
        ));
    }
    out.push_str(name);
    if !about.is_empty() {
        out.push_str(&format!(" ({})", about.join(", ")));
    }
    out.push('\n');

    if !run.rows.is_empty() {
        out.push_str(&results(t));
        out.push('\n');
    }
    if !v.run_failed {
        let mut bw = Vec::new();
        if let Some(avg) = v.avg_busbw_gbs {
            bw.push(format!("average bus bandwidth {avg:.2} GB/s"));
        }
        if let (Some(p), Some(at)) = (v.peak_busbw_gbs, v.peak_at_bytes) {
            bw.push(format!("peak {p:.2} GB/s at {}", human_bytes(at)));
        }
        if !bw.is_empty() {
            out.push_str(&bw.join(", "));
            out.push('\n');
        }
    }
    if !run.transport.is_empty() {
        out.push_str(&transport(&run.transport.processes));
        out.push('\n');
    }
    for w in &v.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&verdict_lines(t));
    out
}

fn results(t: &TestAnalysis) -> String {
    let mut table = Table::new();
    table
        .load_style(BORDERS)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(vec![
            "size",
            "count",
            "type",
            "redop",
            "time (us)",
            "algbw",
            "busbw",
            "#wrong",
            "in-place (us)",
            "algbw",
            "busbw",
            "#wrong",
        ]);
    for r in &t.run.rows {
        let mut cells = vec![
            human_bytes(r.size_bytes),
            r.count.to_string(),
            r.dtype.clone().unwrap_or_default(),
            r.redop.clone().unwrap_or_default(),
        ];
        cells.extend(measure(r.out_of_place.as_ref()));
        cells.extend(measure(r.in_place.as_ref()));
        table.add_row(cells);
    }
    for i in [0, 1, 4, 5, 6, 7, 8, 9, 10, 11] {
        if let Some(c) = table.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
}

fn measure(m: Option<&Measure>) -> Vec<String> {
    match m {
        Some(m) => vec![
            format!("{:.2}", m.time_us),
            format!("{:.2}", m.algbw_gbs),
            format!("{:.2}", m.busbw_gbs),
            m.wrong
                .map(|w| w.to_string())
                .unwrap_or_else(|| "N/A".into()),
        ],
        None => vec![String::new(); 4],
    }
}

fn transport(procs: &[ProcessTransport]) -> String {
    let mut table = Table::new();
    table
        .load_style(BORDERS)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(vec!["rank", "host", "GPU", "transport", "devices", "paths"]);
    for p in procs {
        let devices = match p.transport {
            Transport::Socket => p.socket_ifaces.join(", "),
            _ if !p.ib_devices.is_empty() => {
                let mut d: Vec<String> = p
                    .ib_devices
                    .iter()
                    .map(|d| format!("{}:{}", d.device, d.port))
                    .collect();
                if p.gdr {
                    d.push("GPUDirect".into());
                }
                d.join(", ")
            }
            _ => String::new(),
        };
        let paths: Vec<&str> = p.paths.iter().map(|x| x.as_str()).collect();
        table.add_row(vec![
            p.label()
                .trim_start_matches("ranks ")
                .trim_start_matches("rank ")
                .to_string(),
            p.host.clone(),
            p.cuda_dev.map(|d| d.to_string()).unwrap_or_default(),
            p.transport.describe().to_string(),
            devices,
            paths.join(", "),
        ]);
    }
    table.to_string()
}

fn verdict_lines(t: &TestAnalysis) -> String {
    let v = &t.verdict;
    let mut out = String::new();
    match v.status {
        Status::Pass => {
            if let (Some(e), Some(p)) = (&v.expectation, v.peak_busbw_gbs) {
                out.push_str(&format!(
                    "✓ PASS: {} bus bandwidth peaked at {p:.2} GB/s, at least the {} GB/s that {} reach\n",
                    e.test, e.min_busbw_gbs, e.setup
                ));
            } else {
                out.push_str("✓ PASS\n");
            }
        }
        Status::Measured => {
            out.push_str("• measured (no pass/fail)");
            if let Some(why) = &v.no_expectation {
                out.push_str(&format!(": {why}"));
            }
            out.push('\n');
        }
        Status::Fail | Status::Incomplete => {
            for (i, c) in v.causes.iter().enumerate() {
                let lead = match (i, v.status) {
                    (0, Status::Fail) => "✗ FAILED: ",
                    (0, _) => "✗ INCOMPLETE: ",
                    _ => "  also: ",
                };
                let at = c.line.map(|l| format!(" (line {l})")).unwrap_or_default();
                out.push_str(&format!("{lead}{}{at}\n", c.problem.what));
                if let Some(fix) = &c.problem.fix {
                    out.push_str(&format!("  fix: {fix}\n"));
                }
            }
        }
    }
    out
}
