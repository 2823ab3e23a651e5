//! The nccl-tests output itself: every line format `*_perf` prints, from 2.9 to 2.19 — the
//! version and parameter header, `# Using devices`, the column header, result rows
//! (out-of-place and in-place, with or without per-iteration columns), the footer
//! (`# Out of bounds values`, `# Avg bus bandwidth`, `# Collective test concluded`), and every
//! way a run ends badly (`NCCL WARN`, `Test NCCL failure`, `Test CUDA failure`, timeouts,
//! usage errors, mpirun aborts and launch failures).
//!
//! A log may hold several tests (one mpirun per operation, concatenated); each becomes one
//! [`TestRun`]. NCCL debug lines are handed to the transport scanner of the test they belong
//! to. Pure: text in, data out.

use serde::Serialize;

use super::line::{self, Level};
use super::transport::{TransportReport, TransportScan};

/// One operation's run as nccl-tests printed it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TestRun {
    /// `all_gather_perf`, from `# Collective test starting:` (2.14+), else from the caller.
    pub test: Option<String>,
    /// `2.19.6`, from `# nccl-tests version` (2.14+).
    pub nccl_tests_version: Option<String>,
    /// `22803`: the NCCL version nccl-tests was compiled against and the one it loaded.
    pub nccl_headers: Option<u32>,
    pub nccl_library: Option<u32>,
    pub params: Option<Params>,
    pub devices: Vec<RankDevice>,
    pub rows: Vec<Row>,
    pub out_of_bounds: Option<u64>,
    /// `# Avg bus bandwidth` in GB/s (only meaningful when the run did not fail).
    pub avg_busbw_gbs: Option<f64>,
    /// `# Collective test concluded:` was printed.
    pub concluded: bool,
    /// Everything that went wrong, in the order it was printed.
    pub failures: Vec<Failure>,
    /// Notes nccl-tests printed that are not failures (`# Reducing maxBytes ...`).
    pub notes: Vec<String>,
    /// The transport NCCL used, per process, read from this test's `NCCL_DEBUG=INFO` lines.
    pub transport: TransportReport,
    /// 1-based line numbers of the first and last line of this test in the log.
    pub lines: (usize, usize),
    /// mpirun's exit status, when spark-launch's driver recorded it after the test.
    pub exit_status: Option<i32>,
}

/// The `# nThread ... iters ...` line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Params {
    pub nthread: Option<u32>,
    pub ngpus: Option<u32>,
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    /// `2(factor)` or `1048576(bytes)`.
    pub step: Option<String>,
    pub warmup_iters: Option<u32>,
    pub iters: Option<u32>,
    pub agg_iters: Option<u32>,
    pub validation: Option<u32>,
    pub graph: Option<u32>,
}

/// One line of `# Using devices`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankDevice {
    pub rank: u32,
    pub group: Option<u32>,
    pub pid: u32,
    pub host: String,
    pub cuda_dev: u32,
    /// `0000:01:00` (2.14+) or `0x01`.
    pub bus_id: String,
    /// `NVIDIA GB10`.
    pub gpu: String,
}

/// One result row: one message size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub size_bytes: u64,
    pub count: u64,
    pub dtype: Option<String>,
    pub redop: Option<String>,
    pub root: Option<i64>,
    pub out_of_place: Option<Measure>,
    pub in_place: Option<Measure>,
}

impl Row {
    /// The better bus bandwidth of the two placements.
    pub fn busbw_gbs(&self) -> Option<f64> {
        [&self.out_of_place, &self.in_place]
            .into_iter()
            .flatten()
            .map(|m| m.busbw_gbs)
            .reduce(f64::max)
    }

    /// Wrong elements in either placement (`None` when validation was off).
    pub fn wrong(&self) -> Option<u64> {
        let w: Vec<u64> = [&self.out_of_place, &self.in_place]
            .into_iter()
            .flatten()
            .filter_map(|m| m.wrong)
            .collect();
        (!w.is_empty()).then(|| w.iter().sum())
    }
}

/// Time and bandwidth of one placement of one row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Measure {
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
    /// `#wrong`; `None` when printed as `N/A` (validation off, `-c 0`).
    pub wrong: Option<u64>,
}

/// What kind of trouble a line reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// `NCCL WARN ...`: NCCL's own explanation, usually the root cause.
    NcclWarn,
    /// `HOST: Test NCCL failure file:line 'error / last error'`.
    TestNccl,
    /// `HOST: Test CUDA failure file:line 'error'`.
    TestCuda,
    /// `HOST: Test timeout (Ns) ...`.
    Timeout,
    /// Wrong values found by validation (`#wrong` > 0, `Out of bounds values : N FAILED`).
    DataCorruption,
    /// `# Avg bus bandwidth : X FAILED` (the `-a` check of nccl-tests).
    BandwidthCheck,
    /// The test refused its arguments or its setup (invalid sizes, too few GPUs, NCCL
    /// version mismatch).
    Setup,
    /// mpirun could not start the job on some node (ssh, host keys, missing executable,
    /// slots).
    Launch,
    /// ` .. HOST pid N: Test failure file:line`: the generic trace after a specific failure.
    TestFailure,
    /// mpirun's summary that the job was aborted or a process died.
    MpiAbort,
}

impl FailureKind {
    /// Generic kinds only repeat that something failed; the first cause is a specific one
    /// when there is any.
    pub fn is_generic(self) -> bool {
        matches!(self, FailureKind::TestFailure | FailureKind::MpiAbort)
    }
}

/// One line that reports trouble.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    /// 1-based line number in the log.
    pub line: usize,
    pub host: Option<String>,
    /// The line as printed (trimmed, without mpirun's tag), or a summary for row checks.
    pub text: String,
}

/// Splits a log into tests and parses each one.
pub fn parse_log(text: &str) -> Vec<TestRun> {
    let mut p = Parser::default();
    // A log is foreign text: every line is made printable (control characters escaped, `\r`
    // of CRLF endings dropped) before anything of it can reach a report.
    let text = crate::text::printable_lines(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let consumed = p.line(i + 1, lines[i], lines.get(i + 1).copied());
        i += consumed.max(1);
    }
    p.finish()
}

#[derive(Default)]
struct Parser {
    done: Vec<TestRun>,
    cur: Option<Section>,
}

#[derive(Default)]
struct Section {
    run: TestRun,
    /// The test spark-launch's driver announced (`# spark-launch: running X`).
    announced: Option<String>,
    columns: Option<Columns>,
    in_devices: bool,
    scan: TransportScan,
}

impl Section {
    fn is_empty(&self) -> bool {
        !self.has_header() && self.run.failures.is_empty() && self.scan.is_empty()
    }

    fn has_header(&self) -> bool {
        self.run.test.is_some()
            || self.run.nccl_tests_version.is_some()
            || self.run.params.is_some()
            || !self.run.rows.is_empty()
    }
}

impl Parser {
    fn section(&mut self, n: usize) -> &mut Section {
        self.cur.get_or_insert_with(|| Section {
            run: TestRun {
                lines: (n, n),
                ..TestRun::default()
            },
            ..Section::default()
        })
    }

    /// Starts a new test unless the current one has no header yet (lines before the first
    /// header, such as early NCCL lines from other ranks, belong to the first test).
    fn start(&mut self, n: usize, when: impl Fn(&Section) -> bool) {
        if let Some(s) = &self.cur
            && when(s)
        {
            let s = self.cur.take();
            self.close(s);
        }
        self.section(n);
    }

    fn close(&mut self, s: Option<Section>) {
        if let Some(mut s) = s {
            s.run.transport = s.scan.finish();
            if s.run.test.is_none() {
                s.run.test = s.announced.take();
            }
            check_rows(&mut s.run);
            self.done.push(s.run);
        }
    }

    fn finish(mut self) -> Vec<TestRun> {
        let s = self.cur.take();
        self.close(s);
        self.done
    }

    /// Handles one line; returns how many lines it consumed (mpirun's two-line messages).
    fn line(&mut self, n: usize, raw: &str, next: Option<&str>) -> usize {
        let (_tag, text) = line::strip_tag(raw);
        // ssh frames its warnings in `@` signs.
        let t = text.trim().trim_matches(|c| c == '@' || c == ' ');
        if t.is_empty() {
            return 1;
        }
        if let Some(d) = line::debug_line(text) {
            let s = self.section(n);
            s.run.lines.1 = n;
            s.scan.feed(&d);
            if d.level == Level::Warn {
                s.run.failures.push(Failure {
                    kind: FailureKind::NcclWarn,
                    line: n,
                    host: Some(d.host.to_string()),
                    text: d.message.to_string(),
                });
            }
            return 1;
        }
        if let Some(rest) = t.strip_prefix('#') {
            self.comment(n, rest.trim());
            return 1;
        }
        // A version line printed with NCCL_DEBUG=VERSION has no host prefix.
        if let Some(v) = t.strip_prefix("NCCL version ") {
            let s = self.section(n);
            s.scan.version_line(v);
            return 1;
        }
        if let Some(s) = &mut self.cur
            && let Some(cols) = &s.columns
            && let Some(row) = cols.row(t)
        {
            s.run.rows.push(row);
            s.run.lines.1 = n;
            return 1;
        }
        if self.cur.as_ref().is_none_or(|s| s.columns.is_none())
            && let Some(row) = Columns::guess_row(t)
        {
            let s = self.section(n);
            s.run.rows.push(row);
            s.run.lines.1 = n;
            return 1;
        }
        let (failure, used) = classify(n, t, next);
        if let Some(f) = failure {
            let s = self.section(n);
            s.run.lines.1 = n + used - 1;
            s.run.failures.push(f);
            return used;
        }
        1
    }

    fn comment(&mut self, n: usize, c: &str) {
        if let Some(name) = c.strip_prefix("spark-launch: running ") {
            // Lines of the previous test are done; lines before this one's header (early
            // NCCL lines, an mpirun that failed to start) belong to this test.
            if self
                .cur
                .as_ref()
                .is_some_and(|s| !s.is_empty() || s.announced.is_some())
            {
                let s = self.cur.take();
                self.close(s);
            }
            let s = self.section(n);
            s.announced = Some(name.trim().to_string());
            return;
        }
        if let Some(code) = c.strip_prefix("spark-launch: mpirun exit status ") {
            let s = self.section(n);
            s.run.exit_status = code.trim().parse().ok();
            s.run.lines.1 = n;
            return;
        }
        if let Some(v) = c.strip_prefix("nccl-tests version ") {
            self.start(n, |s| s.has_header());
            let s = self.section(n);
            let mut it = v.split_whitespace();
            s.run.nccl_tests_version = it.next().map(str::to_string);
            for tok in it {
                if let Some(h) = tok.strip_prefix("nccl-headers=") {
                    s.run.nccl_headers = h.parse().ok();
                } else if let Some(l) = tok.strip_prefix("nccl-library=") {
                    s.run.nccl_library = l.parse().ok();
                }
            }
            s.run.lines.1 = n;
            return;
        }
        if let Some(name) = c.strip_prefix("Collective test starting:") {
            self.start(n, |s| s.run.test.is_some() || !s.run.rows.is_empty());
            let s = self.section(n);
            s.run.test = Some(name.trim().to_string());
            s.run.lines.1 = n;
            return;
        }
        if c.starts_with("nThread ") {
            self.start(n, |s| s.run.params.is_some() || !s.run.rows.is_empty());
            let s = self.section(n);
            s.run.params = Some(params(c));
            s.run.lines.1 = n;
            return;
        }
        let s = self.section(n);
        s.run.lines.1 = n;
        if c == "Using devices" {
            s.in_devices = true;
            return;
        }
        if s.in_devices {
            if let Some(d) = device(c) {
                s.run.devices.push(d);
                return;
            }
            s.in_devices = false;
        }
        if let Some(cols) = Columns::from_header(c) {
            s.columns = Some(cols);
            return;
        }
        if let Some(v) = c.strip_prefix("Out of bounds values") {
            let v = v.trim_start_matches([' ', ':']);
            let mut it = v.split_whitespace();
            s.run.out_of_bounds = it.next().and_then(|x| x.parse().ok());
            if it.next() == Some("FAILED") {
                s.run.failures.push(Failure {
                    kind: FailureKind::DataCorruption,
                    line: n,
                    host: None,
                    text: format!("# {c}"),
                });
            }
            return;
        }
        if let Some(v) = c.strip_prefix("Avg bus bandwidth") {
            let v = v.trim_start_matches([' ', ':']);
            let mut it = v.split_whitespace();
            s.run.avg_busbw_gbs = it.next().and_then(|x| x.parse().ok());
            if it.next() == Some("FAILED") {
                s.run.failures.push(Failure {
                    kind: FailureKind::BandwidthCheck,
                    line: n,
                    host: None,
                    text: format!("# {c}"),
                });
            }
            return;
        }
        if c.starts_with("Collective test concluded") {
            s.run.concluded = true;
            return;
        }
        if let Some(e) = c.strip_prefix("error:") {
            s.run.notes.push(format!("NCCL's last error: {}", e.trim()));
            return;
        }
        if c.starts_with("Reducing maxBytes") || c.starts_with("Blocking Enabled") {
            s.run.notes.push(c.to_string());
        }
    }
}

fn params(c: &str) -> Params {
    let num = |k: &str| line::int_after(c, k).and_then(|v| u32::try_from(v).ok());
    // `warmup iters: 1 iters: 20 agg iters: 1`: keys with colons, some of two words.
    let after = |k: &str| -> Option<u32> {
        let i = c.find(k)? + k.len();
        c[i..].split_whitespace().next()?.parse().ok()
    };
    Params {
        nthread: num("nThread"),
        ngpus: num("nGpus"),
        min_bytes: line::int_after(c, "minBytes"),
        max_bytes: line::int_after(c, "maxBytes"),
        step: c
            .find("step:")
            .and_then(|i| c[i + 5..].split_whitespace().next())
            .map(str::to_string),
        warmup_iters: after("warmup iters:"),
        iters: c
            .match_indices("iters:")
            .find(|(i, _)| !c[..*i].ends_with("warmup ") && !c[..*i].ends_with("agg "))
            .and_then(|(i, _)| c[i + 6..].split_whitespace().next()?.parse().ok()),
        agg_iters: after("agg iters:"),
        validation: after("validation:"),
        graph: after("graph:"),
    }
}

/// `Rank  0 Group  0 Pid   1465 on         vm device  0 [0000:00:06] NVIDIA H200` (and the
/// 2.9 form without `Group`, with `[0x06]`).
fn device(c: &str) -> Option<RankDevice> {
    if !c.starts_with("Rank ") {
        return None;
    }
    let rank = u32::try_from(line::int_after(c, "Rank")?).ok()?;
    let group = line::int_after(c, "Group").and_then(|g| u32::try_from(g).ok());
    let pid = u32::try_from(line::int_after(c, "Pid")?).ok()?;
    let cuda_dev = u32::try_from(line::int_after(c, "device")?).ok()?;
    let mut toks = c.split_whitespace();
    toks.find(|t| *t == "on")?;
    let host = toks.next()?.to_string();
    let open = c.find(" [")?;
    let close = open + c[open..].find(']')?;
    let bus_id = c[open + 2..close].to_string();
    let gpu = c[close + 1..].trim().to_string();
    Some(RankDevice {
        rank,
        group,
        pid,
        host,
        cuda_dev,
        bus_id,
        gpu,
    })
}

/// Where each value sits in a row, read from the column header.
#[derive(Clone, Debug, PartialEq)]
struct Columns {
    /// Names of the leading columns (`size`, `count`, `type`, `redop`, `root`).
    prefix: Vec<String>,
    /// One group per placement (out-of-place first): offsets of time, algbw, busbw, wrong.
    groups: Vec<Group>,
    width: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Group {
    time: usize,
    algbw: usize,
    busbw: usize,
    wrong: Option<usize>,
}

impl Columns {
    /// `size  count  type  redop  root  time  algbw  busbw  #wrong  time ...`.
    fn from_header(c: &str) -> Option<Columns> {
        let names: Vec<&str> = c.split_whitespace().collect();
        if names.first() != Some(&"size") || !names.contains(&"busbw") {
            return None;
        }
        let is_time = |n: &str| n == "time" || n == "cputime";
        let first_time = names.iter().position(|n| is_time(n))?;
        let prefix = names[..first_time].iter().map(|s| s.to_string()).collect();
        let mut groups = Vec::new();
        let mut i = first_time;
        while i < names.len() {
            if !is_time(names[i]) {
                i += 1;
                continue;
            }
            let end = names[i + 1..]
                .iter()
                .position(|n| is_time(n))
                .map_or(names.len(), |p| i + 1 + p);
            let find = |want: &[&str]| (i..end).find(|&j| want.contains(&names[j]));
            groups.push(Group {
                time: i,
                algbw: find(&["algbw"])?,
                busbw: find(&["busbw"])?,
                wrong: find(&["#wrong", "error", "wrong"]),
            });
            i = end;
        }
        if groups.is_empty() {
            return None;
        }
        Some(Columns {
            prefix,
            groups,
            width: names.len(),
        })
    }

    /// The layout of every nccl-tests release since 2.10, for rows with no header in sight.
    fn default_layout(prefix: usize) -> Columns {
        let names = ["size", "count", "type", "redop", "root"];
        let prefix: Vec<String> = names
            .iter()
            .take(prefix.clamp(2, 5))
            .map(|s| s.to_string())
            .collect();
        let p = prefix.len();
        Columns {
            groups: vec![
                Group {
                    time: p,
                    algbw: p + 1,
                    busbw: p + 2,
                    wrong: Some(p + 3),
                },
                Group {
                    time: p + 4,
                    algbw: p + 5,
                    busbw: p + 6,
                    wrong: Some(p + 7),
                },
            ],
            width: p + 8,
            prefix,
        }
    }

    fn row(&self, t: &str) -> Option<Row> {
        let toks: Vec<&str> = t.split_whitespace().collect();
        let size: u64 = toks.first()?.parse().ok()?;
        let count: u64 = toks.get(1)?.parse().ok()?;
        let col = |name: &str| -> Option<&str> {
            let i = self.prefix.iter().position(|p| p == name)?;
            toks.get(i).copied()
        };
        let measures: Vec<Option<Measure>> = self
            .groups
            .iter()
            .map(|g| {
                Some(Measure {
                    time_us: float(toks.get(g.time)?)?,
                    algbw_gbs: float(toks.get(g.algbw)?)?,
                    busbw_gbs: float(toks.get(g.busbw)?)?,
                    wrong: g.wrong.and_then(|w| wrong(toks.get(w)?)),
                })
            })
            .collect();
        // Trace replay prints only the in-place half: the row is one group short.
        let (oop, ip) = match measures.as_slice() {
            [Some(a), Some(b), ..] => (Some(*a), Some(*b)),
            [Some(a), None, ..] if toks.len() + 4 <= self.width => (None, Some(*a)),
            [Some(a), None, ..] | [Some(a)] => (Some(*a), None),
            _ => return None,
        };
        Some(Row {
            size_bytes: size,
            count,
            dtype: col("type").map(str::to_string),
            redop: col("redop").map(str::to_string),
            root: col("root").and_then(|r| r.parse().ok()),
            out_of_place: oop,
            in_place: ip,
        })
    }

    /// A row seen with no column header before it (a pasted excerpt): read from the right.
    fn guess_row(t: &str) -> Option<Row> {
        let toks: Vec<&str> = t.split_whitespace().collect();
        if toks.len() < 10 || toks.len() > 13 {
            return None;
        }
        toks[0].parse::<u64>().ok()?;
        toks[1].parse::<u64>().ok()?;
        Columns::default_layout(toks.len() - 8).row(t)
    }
}

fn float(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn wrong(s: &str) -> Option<u64> {
    if s == "N/A" {
        return None;
    }
    let v = s.parse::<f64>().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

/// Rows with wrong elements make the run a failure (validation found corrupt data).
fn check_rows(run: &mut TestRun) {
    let bad: Vec<&Row> = run
        .rows
        .iter()
        .filter(|r| r.wrong().is_some_and(|w| w > 0))
        .collect();
    if let Some(first) = bad.first() {
        let line = run.lines.1;
        let text = format!(
            "{} of {} sizes returned wrong values (first at {} bytes: {} wrong elements)",
            bad.len(),
            run.rows.len(),
            first.size_bytes,
            first.wrong().unwrap_or(0)
        );
        if !run
            .failures
            .iter()
            .any(|f| f.kind == FailureKind::DataCorruption)
        {
            run.failures.push(Failure {
                kind: FailureKind::DataCorruption,
                line,
                host: None,
                text,
            });
        }
    }
}

/// Trouble reported outside NCCL's debug lines: nccl-tests' own checks, mpirun, ssh.
/// Returns the failure and how many lines it spans (mpirun splits some over two).
fn classify(n: usize, t: &str, next: Option<&str>) -> (Option<Failure>, usize) {
    let fail = |kind, host: Option<&str>, text: &str| Failure {
        kind,
        line: n,
        host: host.map(str::to_string),
        text: text.to_string(),
    };
    let host_before = |marker: &str| -> Option<&str> {
        let i = t.find(marker)?;
        let h = t[..i].trim().trim_end_matches(':').trim();
        (!h.is_empty() && !h.contains(' ')).then_some(h)
    };
    if t.contains("Test NCCL failure") {
        return (
            Some(fail(
                FailureKind::TestNccl,
                host_before("Test NCCL failure"),
                t,
            )),
            1,
        );
    }
    if t.contains("Test CUDA failure") {
        return (
            Some(fail(
                FailureKind::TestCuda,
                host_before("Test CUDA failure"),
                t,
            )),
            1,
        );
    }
    if t.contains(": Test timeout (") {
        return (
            Some(fail(FailureKind::Timeout, host_before("Test timeout"), t)),
            1,
        );
    }
    if let Some(rest) = t.strip_prefix(".. ")
        && rest.contains("Test failure")
    {
        let host = rest.split_whitespace().next();
        return (Some(fail(FailureKind::TestFailure, host, t)), 1);
    }
    const SETUP: &[&str] = &[
        "Invalid number of GPUs",
        "Incompatible NCCL versions",
        "invalid size specified",
        "invalid sizes for 'minbytes'",
        "invalid option '",
        "is not supported by this test",
        "error while loading shared libraries",
        "CUDA driver version is insufficient",
    ];
    if SETUP.iter().any(|p| t.contains(p)) {
        return (Some(fail(FailureKind::Setup, None, t)), 1);
    }
    const LAUNCH: &[&str] = &[
        "Host key verification failed",
        "Permission denied (publickey",
        "ssh: connect to host",
        "ssh: Could not resolve hostname",
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "orted: command not found",
        "orted: not found",
        "prted: command not found",
        "ORTE was unable to reliably start one or more daemons",
        "PRTE was unable to reliably start one or more daemons",
        "There are not enough slots available in the system",
        "mpirun was unable to launch the specified application",
        "mpirun was unable to find the specified executable file",
        "prterun was unable to find the specified executable file",
        "was unable to find the specified executable file",
        "An ORTE daemon has unexpectedly failed after launch",
        "ORTE has lost communication with a remote daemon",
        "PRTE has lost communication with a remote daemon",
        "A daemon (pid",
    ];
    if LAUNCH.iter().any(|p| t.contains(p)) {
        return (Some(fail(FailureKind::Launch, None, t)), 1);
    }
    // `Primary job  terminated normally, but 1 process returned` + `a non-zero exit code...`
    if t.starts_with("Primary job") && t.contains("terminated") {
        let joined = match next {
            Some(nx) if !nx.trim().is_empty() && !nx.trim_start().starts_with('-') => {
                return (
                    Some(fail(
                        FailureKind::MpiAbort,
                        None,
                        &format!("{} {}", t, nx.trim()),
                    )),
                    2,
                );
            }
            _ => t,
        };
        return (Some(fail(FailureKind::MpiAbort, None, joined)), 1);
    }
    const ABORT: &[&str] = &[
        "detected that one or more processes exited with non-zero status",
        "exited on signal",
        "MPI_ABORT was invoked",
        "mpirun noticed that",
        "prterun noticed that",
        "Segmentation fault",
        "Bus error",
        "Aborted (core dumped)",
    ];
    if ABORT.iter().any(|p| t.contains(p)) {
        let joined = match next {
            // mpirun wraps: "...exited with non-zero status, thus causing" / "the job to be
            // terminated. The first process to do so was:"
            Some(nx) if t.ends_with("thus causing") => format!("{} {}", t, nx.trim()),
            _ => t.to_string(),
        };
        let used = if joined.len() > t.len() { 2 } else { 1 };
        return (Some(fail(FailureKind::MpiAbort, None, &joined)), used);
    }
    (None, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2_19_column_header_maps_both_placements() {
        let c = Columns::from_header(
            "size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
        )
        .unwrap();
        assert_eq!(c.prefix, vec!["size", "count", "type", "redop", "root"]);
        assert_eq!(c.groups.len(), 2);
        let r = c
            .row("   536870912     134217728     float     sum      -1  1709.63  314.03  314.03       0  1700.29  315.75  315.75       0")
            .unwrap();
        assert_eq!(r.size_bytes, 536_870_912);
        assert_eq!(r.root, Some(-1));
        assert_eq!(r.out_of_place.unwrap().busbw_gbs, 314.03);
        assert_eq!(r.in_place.unwrap().busbw_gbs, 315.75);
        assert_eq!(r.wrong(), Some(0));
        assert_eq!(r.busbw_gbs(), Some(315.75));
    }

    #[test]
    fn the_2_9_all_gather_layout_without_redop_and_root_is_read() {
        let c = Columns::from_header(
            "size         count   type     time   algbw   busbw  error     time   algbw   busbw  error",
        )
        .unwrap();
        let r = c
            .row("     1048576         131072  float    51.02   20.55   10.28  0e+00    50.91   20.60   10.30  0e+00")
            .unwrap();
        assert_eq!(r.dtype.as_deref(), Some("float"));
        assert_eq!(r.redop, None);
        assert_eq!(r.in_place.unwrap().algbw_gbs, 20.60);
        assert_eq!(r.wrong(), Some(0));
    }

    #[test]
    fn per_iteration_columns_and_validation_off_are_understood() {
        let c = Columns::from_header(
            "size  count  type  redop  root  time  algbw  busbw  #wrong  i_min  i_max  i_p99  i_cv%  time  algbw  busbw  #wrong  i_min  i_max  i_p99  i_cv%",
        )
        .unwrap();
        let r = c
            .row("8  2  float  sum  -1  6.23  0.00  0.00  N/A  6.0  7.1  7.0  3.2  6.00  0.00  0.00  N/A  5.9  6.9  6.8  3.0")
            .unwrap();
        assert_eq!(r.out_of_place.unwrap().time_us, 6.23);
        assert_eq!(r.in_place.unwrap().time_us, 6.00);
        assert_eq!(r.wrong(), None);
    }

    #[test]
    fn a_pasted_row_without_header_is_read_from_the_right() {
        let r = Columns::guess_row(
            "  4294967296    1073741824     float    none      -1   185712   23.13   23.13       0   185330   23.17   23.17       0",
        )
        .unwrap();
        assert_eq!(r.size_bytes, 4_294_967_296);
        assert_eq!(r.redop.as_deref(), Some("none"));
        assert_eq!(r.busbw_gbs(), Some(23.17));
    }

    #[test]
    fn the_device_lines_of_both_generations_parse() {
        let d =
            device("Rank  1 Group  0 Pid   1466 on         vm device  1 [0000:00:07] NVIDIA H200")
                .unwrap();
        assert_eq!((d.rank, d.pid, d.cuda_dev), (1, 1466, 1));
        assert_eq!(d.host, "vm");
        assert_eq!(d.bus_id, "0000:00:07");
        assert_eq!(d.gpu, "NVIDIA H200");
        let d = device("Rank  0 Pid  20001 on spark-1d84 device  0 [0x01] NVIDIA GB10").unwrap();
        assert_eq!(d.group, None);
        assert_eq!(d.host, "spark-1d84");
        assert_eq!(d.gpu, "NVIDIA GB10");
    }

    #[test]
    fn the_parameter_line_keeps_iters_apart_from_warmup_and_agg_iters() {
        let p = params(
            "nThread 1 nGpus 1 minBytes 8 maxBytes 536870912 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
        );
        assert_eq!(p.min_bytes, Some(8));
        assert_eq!(p.max_bytes, Some(536_870_912));
        assert_eq!(p.step.as_deref(), Some("2(factor)"));
        assert_eq!(p.warmup_iters, Some(1));
        assert_eq!(p.iters, Some(20));
        assert_eq!(p.agg_iters, Some(1));
        assert_eq!(p.validation, Some(1));
        assert_eq!(p.graph, Some(0));
    }

    #[test]
    fn mpirun_two_line_abort_messages_are_joined() {
        let text = "Primary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, the job has been aborted.\n";
        let runs = parse_log(text);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].failures.len(), 1);
        assert_eq!(runs[0].failures[0].kind, FailureKind::MpiAbort);
        assert!(runs[0].failures[0].text.contains("non-zero exit code"));
    }

    #[test]
    fn two_tests_in_one_log_become_two_runs() {
        let text = "\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0 unalign: 0
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
           8             1     float    none      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0
# Avg bus bandwidth    : 0.001
# Collective test concluded: all_gather_perf
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
          16             4     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0
# Collective test concluded: all_reduce_perf
";
        let runs = parse_log(text);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].test.as_deref(), Some("all_gather_perf"));
        assert_eq!(runs[0].rows.len(), 1);
        assert_eq!(runs[0].nccl_library, Some(22809));
        assert_eq!(runs[1].test.as_deref(), Some("all_reduce_perf"));
        assert_eq!(runs[1].rows[0].size_bytes, 16);
        assert_eq!(runs[1].lines.0, 8);
    }

    #[test]
    fn wrong_elements_in_a_row_are_data_corruption() {
        let text = "\
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
     1048576        262144     float     sum      -1    40.00   26.21   26.21       3    40.00   26.21   26.21       0
# Out of bounds values : 3 FAILED
";
        let runs = parse_log(text);
        let kinds: Vec<FailureKind> = runs[0].failures.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, vec![FailureKind::DataCorruption]);
        assert_eq!(runs[0].out_of_bounds, Some(3));
    }

    #[test]
    fn the_driver_markers_name_each_test_and_carry_mpiruns_exit_status() {
        let text = "\
# spark-launch: running all_gather_perf
ssh: connect to host 192.168.177.12 port 2233: Connection refused
# spark-launch: mpirun exit status 1
# spark-launch: running all_reduce_perf
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
          16             4     float     sum      -1    10.00    0.00    0.00       0    10.00    0.00    0.00       0
# Collective test concluded: all_reduce_perf
# spark-launch: mpirun exit status 0
";
        let runs = parse_log(text);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].test.as_deref(), Some("all_gather_perf"));
        assert_eq!(runs[0].exit_status, Some(1));
        assert_eq!(runs[0].failures[0].kind, FailureKind::Launch);
        assert_eq!(runs[1].test.as_deref(), Some("all_reduce_perf"));
        assert_eq!(runs[1].exit_status, Some(0));
        assert_eq!(runs[1].rows.len(), 1);
    }
}
