//! perftest's output (`ib_write_bw`, `ib_send_bw`, `ib_read_bw`, `ib_write_lat`, ...) as data,
//! and the verdict on a twin pair's bandwidth.
//!
//! The parser reads the header (`Device : rocep1s0f1`, `Number of qps : 4`, `Link type :
//! Ethernet`, `Mtu : 1024[B]`, `GID index : 3`), the result table of a bandwidth test
//! (`BW peak[Gb/sec]`, `[MB/sec]` or `[MiB/sec]`: perftest's MB is 2^20 bytes, so both are
//! converted the same way) or of a latency test (`t_min[usec]` ... `99.9% percentile`), and the
//! lines that say why a run failed (`Port number 1 state is Down`, `Couldn't ...`, `Unable to
//! ...`). A run with no result row and no such line is a failure too, never 0 Gb/s.
//!
//! The verdict ([`judge`]): a twin pair passes at 75 % of what its rate allows, warns below
//! that, fails below half, fails when it carries at most half of what the other twin pair of
//! the same cable carries, warns on RoCE with an MTU below 4096 (the netdev MTU is below ~4200:
//! set 9000), and fails when it gave no figure. Without a known rate it is only measured. Pure.

use serde::Serialize;

use crate::fabric::perftest::TestPlan;

/// A bandwidth table row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BwRow {
    pub bytes: u64,
    pub iterations: u64,
    pub peak_gbps: f64,
    pub avg_gbps: f64,
    pub msg_rate_mpps: f64,
}

/// A latency table row (microseconds).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatRow {
    pub bytes: u64,
    pub iterations: u64,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

/// One perftest run, as printed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PerftestOutput {
    /// `RDMA_Write BW Test`, `Send BW Test`, `RDMA_Write Latency Test`.
    pub test: Option<String>,
    pub device: Option<String>,
    pub qps: Option<u32>,
    pub transport: Option<String>,
    pub link_type: Option<String>,
    /// The RDMA MTU in bytes (`Mtu : 4096[B]`).
    pub mtu: Option<u32>,
    pub gid_index: Option<u32>,
    /// The unit the table was printed in (`Gb/sec`, `MB/sec`, `MiB/sec`).
    pub unit: Option<String>,
    pub bw: Vec<BwRow>,
    pub lat: Vec<LatRow>,
    pub errors: Vec<String>,
}

impl PerftestOutput {
    /// The average bandwidth of the largest message size, Gb/s.
    pub fn avg_gbps(&self) -> Option<f64> {
        self.bw.iter().max_by_key(|r| r.bytes).map(|r| r.avg_gbps)
    }

    /// The typical latency of the smallest message size, µs.
    pub fn typical_usec(&self) -> Option<f64> {
        self.lat.iter().min_by_key(|r| r.bytes).map(|r| r.t_typical)
    }

    /// True when the run printed a result.
    pub fn has_result(&self) -> bool {
        !self.bw.is_empty() || !self.lat.is_empty()
    }
}

/// `key : value` pairs of a header line (two per line, separated by a run of spaces).
fn header_pairs(line: &str) -> Vec<(String, String)> {
    let parts: Vec<&str> = line.split(" : ").collect();
    if parts.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut key = parts[0].trim().to_string();
    for (i, part) in parts.iter().enumerate().skip(1) {
        let part = part.trim_start();
        if i + 1 < parts.len() {
            match part.find("  ") {
                Some(cut) => {
                    out.push((key, part[..cut].trim().to_string()));
                    key = part[cut..].trim().to_string();
                }
                None => {
                    out.push((key, part.trim().to_string()));
                    key = String::new();
                }
            }
        } else {
            out.push((key.clone(), part.trim().to_string()));
        }
    }
    out
}

fn number_prefix(s: &str) -> Option<u32> {
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

const FAILURE_WORDS: [&str; 9] = [
    "couldn't",
    "unable",
    "failed",
    "error",
    "state is",
    "no such",
    "not found",
    "timed out",
    "refused",
];

/// Parses one run's output.
pub fn parse(text: &str) -> PerftestOutput {
    let mut run = PerftestOutput::default();
    enum Table {
        None,
        Bw { factor: f64 },
        Lat,
    }
    let mut table = Table::None;
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with("----") {
            continue;
        }
        if line.starts_with("#bytes") {
            if line.contains("t_min") || line.contains("t_avg") {
                table = Table::Lat;
            } else {
                let unit = line
                    .split("BW average[")
                    .nth(1)
                    .and_then(|r| r.split(']').next())
                    .unwrap_or("Gb/sec")
                    .to_string();
                let factor = match unit.as_str() {
                    "Gb/sec" => 1.0,
                    // perftest's MB is 2^20 bytes (format_factor 0x100000).
                    "MB/sec" | "MiB/sec" => 1_048_576.0 * 8.0 / 1e9,
                    _ => 1.0,
                };
                run.unit = Some(unit);
                table = Table::Bw { factor };
            }
            continue;
        }
        if line.ends_with(" Test") && !line.contains(':') {
            run.test = Some(line.to_string());
            continue;
        }
        let first_is_number = line
            .split_whitespace()
            .next()
            .is_some_and(|w| w.parse::<u64>().is_ok());
        if first_is_number {
            let nums: Vec<f64> = line
                .split_whitespace()
                .filter_map(|w| w.parse::<f64>().ok())
                .collect();
            match table {
                Table::Bw { factor } if nums.len() >= 5 => run.bw.push(BwRow {
                    bytes: nums[0] as u64,
                    iterations: nums[1] as u64,
                    peak_gbps: nums[2] * factor,
                    avg_gbps: nums[3] * factor,
                    msg_rate_mpps: nums[4],
                }),
                Table::Lat if nums.len() >= 9 => run.lat.push(LatRow {
                    bytes: nums[0] as u64,
                    iterations: nums[1] as u64,
                    t_min: nums[2],
                    t_max: nums[3],
                    t_typical: nums[4],
                    t_avg: nums[5],
                    t_stdev: nums[6],
                    p99: nums[7],
                    p999: nums[8],
                }),
                _ => {}
            }
            continue;
        }
        let pairs = header_pairs(raw);
        if !pairs.is_empty() && !line.to_ascii_lowercase().starts_with("couldn't") {
            for (k, v) in pairs {
                match k.as_str() {
                    "Device" => run.device = Some(v),
                    "Number of qps" => run.qps = v.parse().ok(),
                    "Transport type" => run.transport = Some(v),
                    "Link type" => run.link_type = Some(v),
                    "Mtu" => run.mtu = number_prefix(&v),
                    "GID index" => run.gid_index = v.parse().ok(),
                    _ => {}
                }
            }
            continue;
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("local address")
            || lower.starts_with("remote address")
            || lower.starts_with("gid:")
            || lower.contains("conflicting cpu frequency")
            || lower.starts_with("waiting for client")
            || lower.starts_with("*")
        {
            continue;
        }
        if FAILURE_WORDS.iter().any(|w| lower.contains(w)) {
            run.errors.push(line.to_string());
        }
    }
    if !run.has_result() && run.errors.is_empty() {
        run.errors.push(
            "perftest printed no result (it was stopped, or its peer never connected)".into(),
        );
    }
    run
}

/// The verdict on one twin pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PerfVerdict {
    Pass,
    /// No rate known: only the figure.
    Measured,
    Warn,
    Fail,
}

impl PerfVerdict {
    pub fn label(self) -> &'static str {
        match self {
            PerfVerdict::Pass => "pass",
            PerfVerdict::Measured => "measured",
            PerfVerdict::Warn => "warn",
            PerfVerdict::Fail => "FAIL",
        }
    }
}

/// One twin pair to judge.
#[derive(Clone, Debug)]
pub struct Pair {
    /// Which cable it belongs to (pairs of one cable are compared with each other).
    pub cable: usize,
    pub label: String,
    /// The client's run (the side that reports the figure), or why there is none.
    pub run: Result<PerftestOutput, String>,
    pub allowed_gbps: Option<f64>,
}

/// The judged twin pair.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairResult {
    pub cable: usize,
    pub link: String,
    pub gbps: Option<f64>,
    pub allowed_gbps: Option<f64>,
    pub verdict: PerfVerdict,
    pub notes: Vec<String>,
}

/// Judges every twin pair (see the module header for the rules).
pub fn judge(pairs: &[Pair]) -> Vec<PairResult> {
    let gbps: Vec<Option<f64>> = pairs
        .iter()
        .map(|p| p.run.as_ref().ok().and_then(|r| r.avg_gbps()))
        .collect();
    pairs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut notes = Vec::new();
            let mut verdict = PerfVerdict::Measured;
            match (&p.run, gbps[i]) {
                (Err(why), _) => {
                    verdict = PerfVerdict::Fail;
                    notes.push(why.clone());
                }
                (Ok(run), None) => {
                    verdict = PerfVerdict::Fail;
                    notes.push(format!("no figure: {}", run.errors.join("; ")));
                }
                (Ok(run), Some(g)) => {
                    if let Some(allowed) = p.allowed_gbps.filter(|a| *a > 0.0) {
                        let ratio = g / allowed;
                        verdict = if ratio < 0.5 {
                            notes.push(format!(
                                "{g:.1} Gb/s is less than half of the {allowed:.0} Gb/s its rate allows"
                            ));
                            PerfVerdict::Fail
                        } else if ratio < 0.75 {
                            notes.push(format!(
                                "{g:.1} Gb/s is below 75 % of the {allowed:.0} Gb/s its rate allows"
                            ));
                            PerfVerdict::Warn
                        } else {
                            PerfVerdict::Pass
                        };
                    }
                    let sibling = pairs
                        .iter()
                        .enumerate()
                        .filter(|(j, q)| *j != i && q.cable == p.cable)
                        .filter_map(|(j, _)| gbps[j])
                        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
                    if let Some(s) = sibling
                        && g <= s / 2.0
                    {
                        verdict = PerfVerdict::Fail;
                        notes.push(format!(
                            "carries {g:.1} Gb/s, at most half of the {s:.1} Gb/s its twin pair on the same cable carries"
                        ));
                    }
                    let ethernet = run
                        .link_type
                        .as_deref()
                        .is_some_and(|l| l.eq_ignore_ascii_case("ethernet"));
                    if ethernet && run.mtu.is_some_and(|m| m < 4096) {
                        verdict = verdict.max(PerfVerdict::Warn);
                        notes.push(format!(
                            "RoCE ran with a {}-byte MTU: the interface MTU is below about 4200; set 9000 on both ends (`spark-launch fabric apply` does)",
                            run.mtu.unwrap_or(0)
                        ));
                    }
                }
            }
            PairResult {
                cable: p.cable,
                link: p.label.clone(),
                gbps: gbps[i],
                allowed_gbps: p.allowed_gbps,
                verdict,
                notes,
            }
        })
        .collect()
}

/// What one twin pair's run printed on both sides (or why a side printed nothing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunOutput {
    pub port: u16,
    pub client: Result<String, String>,
    pub server: Result<String, String>,
}

/// Every run of one round (one cable), in the round's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoundOutput {
    pub cable: String,
    pub runs: Vec<RunOutput>,
}

/// One cable's total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CableTotal {
    pub cable: String,
    pub gbps: f64,
    pub twin_pairs: usize,
}

/// `fabric test`'s result: every twin pair judged, the total per cable, the worst verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestReport {
    pub verdict: PerfVerdict,
    pub pairs: Vec<PairResult>,
    pub cables: Vec<CableTotal>,
    pub skipped: Vec<String>,
}

/// Reads every client's output (the server's complaint when the client has none) and judges.
pub fn report(plan: &TestPlan, outputs: &[RoundOutput]) -> TestReport {
    let mut pairs = Vec::new();
    for (c, (round, out)) in plan.rounds.iter().zip(outputs).enumerate() {
        for run in &round.runs {
            let got = out.runs.iter().find(|o| o.port == run.port);
            let parsed = match got {
                None => Err("not run".to_string()),
                Some(o) => match &o.client {
                    Ok(text) => {
                        let mut r = parse(text);
                        if !r.has_result()
                            && let Ok(server) = &o.server
                        {
                            let s = parse(server);
                            r.errors
                                .extend(s.errors.into_iter().map(|e| format!("server: {e}")));
                        }
                        Ok(r)
                    }
                    Err(e) => Err(e.clone()),
                },
            };
            pairs.push(Pair {
                cable: c,
                label: format!("{} ↔ {}", run.client, run.server),
                run: parsed,
                allowed_gbps: run.allowed_gbps,
            });
        }
    }
    let judged = judge(&pairs);
    let cables = plan
        .rounds
        .iter()
        .enumerate()
        .map(|(c, r)| CableTotal {
            cable: r.cable.clone(),
            gbps: judged
                .iter()
                .filter(|p| p.cable == c)
                .filter_map(|p| p.gbps)
                .sum(),
            twin_pairs: r.runs.len(),
        })
        .collect();
    TestReport {
        verdict: judged
            .iter()
            .map(|p| p.verdict)
            .max()
            .unwrap_or(PerfVerdict::Measured),
        pairs: judged,
        cables,
        skipped: plan.skipped.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_hold_two_pairs_each() {
        let p = header_pairs(" Dual-port       : OFF          Device         : rocep1s0f1");
        assert_eq!(
            p,
            vec![
                ("Dual-port".to_string(), "OFF".to_string()),
                ("Device".to_string(), "rocep1s0f1".to_string())
            ]
        );
        assert_eq!(
            header_pairs(" Mtu             : 1024[B]"),
            vec![("Mtu".to_string(), "1024[B]".to_string())]
        );
    }

    fn run(gbps: f64) -> PerftestOutput {
        PerftestOutput {
            link_type: Some("Ethernet".into()),
            mtu: Some(4096),
            bw: vec![BwRow {
                bytes: 65536,
                iterations: 1000,
                peak_gbps: gbps,
                avg_gbps: gbps,
                msg_rate_mpps: 0.1,
            }],
            ..PerftestOutput::default()
        }
    }

    fn pair(cable: usize, gbps: Option<f64>, allowed: Option<f64>) -> Pair {
        Pair {
            cable,
            label: format!("l{cable}"),
            run: match gbps {
                Some(g) => Ok(run(g)),
                None => Err("the client could not connect".into()),
            },
            allowed_gbps: allowed,
        }
    }

    #[test]
    fn both_twins_near_line_rate_pass() {
        let r = judge(&[
            pair(0, Some(95.0), Some(100.0)),
            pair(0, Some(93.0), Some(100.0)),
        ]);
        assert!(r.iter().all(|x| x.verdict == PerfVerdict::Pass), "{r:?}");
    }

    #[test]
    fn a_twin_pair_at_half_of_its_sibling_fails_and_one_without_a_figure_fails() {
        let r = judge(&[
            pair(0, Some(95.0), Some(100.0)),
            pair(0, Some(45.0), Some(100.0)),
        ]);
        assert_eq!(r[0].verdict, PerfVerdict::Pass);
        assert_eq!(r[1].verdict, PerfVerdict::Fail);
        assert!(r[1].notes.iter().any(|n| n.contains("its twin pair")));
        let r = judge(&[pair(0, Some(95.0), Some(100.0)), pair(0, None, Some(100.0))]);
        assert_eq!(r[1].verdict, PerfVerdict::Fail);
        assert_eq!(r[1].gbps, None);
    }

    #[test]
    fn below_three_quarters_warns_and_without_a_rate_it_is_only_measured() {
        assert_eq!(
            judge(&[pair(0, Some(70.0), Some(100.0))])[0].verdict,
            PerfVerdict::Warn
        );
        assert_eq!(
            judge(&[pair(0, Some(70.0), None)])[0].verdict,
            PerfVerdict::Measured
        );
    }

    #[test]
    fn roce_with_a_small_mtu_warns_with_the_fix() {
        let mut p = pair(0, Some(96.0), Some(100.0));
        if let Ok(r) = &mut p.run {
            r.mtu = Some(1024);
        }
        let r = judge(&[p]);
        assert_eq!(r[0].verdict, PerfVerdict::Warn);
        assert!(r[0].notes[0].contains("set 9000"));
    }
}
