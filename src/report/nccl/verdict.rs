//! The verdict on a parsed nccl-tests run: failed (with its first cause and the fix), passed
//! against the figure the detected hardware and topology must reach, or just measured.
//!
//! Reference figures (NVIDIA's own acceptance numbers for DGX Spark): two Sparks on one cable
//! reach at least 21.875 GB/s all_gather bus bandwidth with both RoCE twins in use; a 3-node
//! ring at least 10 GB/s. For other hardware there is no reference: the figures are reported
//! with no pass/fail. A run that failed is a failure with its first cause, never 0 GB/s. A log
//! that stops before nccl-tests' closing lines (`# Avg bus bandwidth`) is incomplete: its rows
//! are figures of a run cut short (a truncated paste, a run still going), never a result. Pure.

use serde::Serialize;

use super::parse::{Failure, FailureKind, TestRun};
use super::transport::{ExpectedHcas, TransportProblem, transport_problems};
use crate::derive::Topology;
use crate::problem::Problem;

/// What the caller knows beyond the log.
#[derive(Clone, Debug, Default)]
pub struct AnalysisContext {
    /// The RDMA devices each host should use (derived `NCCL_IB_HCA`), by hostname.
    pub expected_hcas: ExpectedHcas,
    /// The fabric's shape, when derived from the nodes' facts (or given by the user).
    pub topology: Option<Topology>,
    /// The test binary when the log does not name it (nccl-tests before 2.14).
    pub test_hint: Option<String>,
    /// mpirun's exit status, when the caller ran it.
    pub exit_code: Option<i32>,
}

/// How a test ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Reached the reference figure of this hardware and topology.
    Pass,
    /// Failed to run, fell back to sockets, missed a twin, or stayed below the figure.
    Fail,
    /// Ran cleanly; no reference figure applies, so only the figures are reported.
    Measured,
    /// The log stops before the test's closing lines: what it shows so far is no result.
    Incomplete,
}

impl Status {
    /// True for the statuses that are not a good result (exit 1): failed, or incomplete.
    pub fn is_bad(self) -> bool {
        matches!(self, Status::Fail | Status::Incomplete)
    }
}

/// Why a test failed, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// What failed and, when there is one thing to do, the fix.
    #[serde(flatten)]
    pub problem: Problem<Option<String>>,
    pub host: Option<String>,
    /// 1-based line in the log, when one line says it.
    pub line: Option<usize>,
}

/// The figure a setup must reach.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    /// `two DGX Sparks, one cable`.
    pub setup: String,
    /// The test the figure is for (`all_gather_perf`).
    pub test: String,
    pub min_busbw_gbs: f64,
}

/// Two DGX Sparks on one 200 GbE cable, both twins: NVIDIA's pass mark.
pub const SPARK_PAIR_MIN_BUSBW_GBS: f64 = 21.875;
/// A ring of three DGX Sparks (one cable per pair).
pub const SPARK_RING3_MIN_BUSBW_GBS: f64 = 10.0;
/// Smaller largest messages do not reach the link's bandwidth; no pass/fail below this.
pub const MIN_SIZE_FOR_VERDICT: u64 = 1 << 30;

/// The verdict on one test.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestVerdict {
    pub status: Status,
    /// The run itself failed (it did not finish measuring): its figures are not results.
    pub run_failed: bool,
    /// The best bus bandwidth of any size (absent when the run failed).
    pub peak_busbw_gbs: Option<f64>,
    pub peak_at_bytes: Option<u64>,
    /// `# Avg bus bandwidth` (absent when the run failed).
    pub avg_busbw_gbs: Option<f64>,
    pub expectation: Option<Expectation>,
    /// Why no figure applies, when none does.
    pub no_expectation: Option<String>,
    /// The first cause of a failure, then every other reason it failed.
    pub causes: Vec<Cause>,
    pub problems: Vec<TransportProblem>,
    /// Things worth reading that did not fail the run (non-fatal NCCL WARNs, idle HCAs).
    pub warnings: Vec<String>,
}

/// Judges one parsed test.
pub fn judge(run: &TestRun, ctx: &AnalysisContext) -> TestVerdict {
    let problems = transport_problems(&run.transport, &ctx.expected_hcas);
    let mut warnings: Vec<String> = run
        .failures
        .iter()
        .filter(|f| f.kind == FailureKind::NcclWarn)
        .map(|f| format!("{}: NCCL WARN {}", f.host.as_deref().unwrap_or("?"), f.text))
        .collect();
    warnings.extend(problems.iter().filter(|p| !p.kind.fails()).map(|p| {
        format!(
            "{} {}: {} (fix: {})",
            p.host, p.ranks, p.problem, p.problem.fix
        )
    }));
    let (expectation, no_expectation) = match expectation(run, ctx) {
        Ok(e) => (Some(e), None),
        Err(why) => (None, Some(why)),
    };
    let mut v = TestVerdict {
        status: Status::Measured,
        run_failed: false,
        peak_busbw_gbs: None,
        peak_at_bytes: None,
        avg_busbw_gbs: None,
        expectation,
        no_expectation,
        causes: Vec::new(),
        problems: problems.clone(),
        warnings,
    };

    let run_failed = match run_failure(run, ctx) {
        Some(cause) => {
            v.status = Status::Fail;
            v.causes.push(cause);
            true
        }
        None => false,
    };
    for p in problems.iter().filter(|p| p.kind.fails()) {
        v.status = Status::Fail;
        v.causes.push(Cause {
            problem: Problem::with_fix(
                format!("{} {}: {}", p.host, p.ranks, p.problem.what),
                Some(p.problem.fix.clone()),
            ),
            host: Some(p.host.clone()),
            line: None,
        });
    }
    if run_failed {
        v.run_failed = true;
        // NCCL's WARNs are the failure's story now (its first cause), not side notes.
        v.warnings.retain(|w| !w.contains(": NCCL WARN "));
        // The run itself failed: its figures are not results.
        v.expectation = None;
        v.no_expectation = None;
        return v;
    }
    if let Some((size, bw)) = peak(run) {
        v.peak_busbw_gbs = Some(bw);
        v.peak_at_bytes = Some(size);
    }
    v.avg_busbw_gbs = run.avg_busbw_gbs;
    if v.status == Status::Fail {
        return v;
    }
    if !run.concluded && run.avg_busbw_gbs.is_none() {
        v.status = Status::Incomplete;
        v.causes.push(Cause { problem: Problem::with_fix(format!(
                "the log ends at line {} before nccl-tests' closing lines (`# Avg bus bandwidth`): the output was cut off or the run had not finished, so its {} row{} are no result",
                run.lines.1,
                run.rows.len(),
                if run.rows.len() == 1 { "" } else { "s" }
            ), Some(
                "capture the complete output of mpirun (until `# Avg bus bandwidth` and `# Collective test concluded`), then read it again".into(),
            )), host: None, line: (run.lines.1 > 0).then_some(run.lines.1) });
        v.expectation = None;
        v.no_expectation = None;
        return v;
    }
    let Some(e) = &v.expectation else {
        return v;
    };
    let largest = run.rows.iter().map(|r| r.size_bytes).max().unwrap_or(0);
    if largest < MIN_SIZE_FOR_VERDICT {
        v.no_expectation = Some(format!(
            "the largest message ({}) is too small to reach the link's bandwidth; run up to 1 GiB or more (-e 4G) for a verdict against {} GB/s",
            crate::progress::human_bytes(largest),
            e.min_busbw_gbs
        ));
        v.expectation = None;
        return v;
    }
    match v.peak_busbw_gbs {
        Some(bw) if bw >= e.min_busbw_gbs => v.status = Status::Pass,
        Some(bw) => {
            v.status = Status::Fail;
            v.causes.push(Cause { problem: Problem::with_fix(format!(
                    "{} bus bandwidth peaked at {bw:.2} GB/s, below the {} GB/s that {} reach",
                    e.test, e.min_busbw_gbs, e.setup
                ), Some(
                    "check that every node uses both RoCE twins (transport table above), that both ends of each cable have MTU 9000, and run `spark-launch doctor`".into(),
                )), host: None, line: None });
        }
        None => {}
    }
    v
}

/// The largest bus bandwidth of any row and its size.
pub fn peak(run: &TestRun) -> Option<(u64, f64)> {
    run.rows
        .iter()
        .filter_map(|r| Some((r.size_bytes, r.busbw_gbs()?)))
        .fold(None, |best, (s, bw)| match best {
            Some((_, b)) if b >= bw => best,
            _ => Some((s, bw)),
        })
}

/// The reference figure for this run's hardware, topology and test, or why there is none.
pub fn expectation(run: &TestRun, ctx: &AnalysisContext) -> Result<Expectation, String> {
    if run.devices.is_empty() {
        return Err("the log has no `# Using devices` list, so the hardware is unknown".into());
    }
    let mut hosts: Vec<&str> = run.devices.iter().map(|d| d.host.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let gpus: Vec<&str> = run.devices.iter().map(|d| d.gpu.as_str()).collect();
    let all_spark = gpus.iter().all(|g| g.contains("GB10"));
    if !all_spark {
        let mut names = gpus.clone();
        names.sort_unstable();
        names.dedup();
        return Err(format!(
            "no reference figure for {} on {} host{}",
            names.join(" + "),
            hosts.len(),
            if hosts.len() == 1 { "" } else { "s" }
        ));
    }
    let test = run
        .test
        .clone()
        .or_else(|| ctx.test_hint.clone())
        .unwrap_or_default();
    if test != "all_gather_perf" {
        return Err(format!(
            "DGX Spark reference figures are for all_gather_perf{}",
            if test.is_empty() {
                " (this log does not name its test)".to_string()
            } else {
                format!(", not {test}")
            }
        ));
    }
    let (setup, min) = match (hosts.len(), ctx.topology) {
        (2, None | Some(Topology::Direct)) => {
            ("two DGX Sparks, one cable", SPARK_PAIR_MIN_BUSBW_GBS)
        }
        (3, Some(Topology::Ring)) => ("three DGX Sparks in a ring", SPARK_RING3_MIN_BUSBW_GBS),
        (n, topo) => {
            return Err(format!(
                "no reference figure for {n} DGX Spark{}{}",
                if n == 1 { "" } else { "s" },
                topo.map(|t| format!(" ({t} topology)")).unwrap_or_default()
            ));
        }
    };
    if gpus.len() != hosts.len() {
        return Err(format!(
            "the reference figures are for one rank per DGX Spark; this run has {} ranks on {} hosts",
            gpus.len(),
            hosts.len()
        ));
    }
    Ok(Expectation {
        setup: setup.into(),
        test,
        min_busbw_gbs: min,
    })
}

/// The run's own failure, if it failed: its first cause.
fn run_failure(run: &TestRun, ctx: &AnalysisContext) -> Option<Cause> {
    let hard: Vec<&Failure> = run
        .failures
        .iter()
        .filter(|f| f.kind != FailureKind::NcclWarn)
        .collect();
    let exit_code = run.exit_status.or(ctx.exit_code);
    let exit_failed = exit_code.is_some_and(|c| c != 0);
    let failed = !hard.is_empty() || run.rows.is_empty() || exit_failed;
    if !failed {
        return None;
    }
    let warns = run
        .failures
        .iter()
        .filter(|f| f.kind == FailureKind::NcclWarn && !f.text.contains("non-fatal"));
    // NCCL's WARN explains a failure better than the test's "Test NCCL failure" that follows
    // it; both beat mpirun's generic "process exited" summary.
    let first = warns
        .chain(hard.iter().copied().filter(|f| !f.kind.is_generic()))
        .min_by_key(|f| f.line)
        .or_else(|| hard.iter().copied().find(|f| f.kind.is_generic()));
    if let Some(f) = first {
        return Some(Cause {
            problem: Problem::with_fix(
                match &f.host {
                    Some(h) if !f.text.contains(h.as_str()) => format!("{h}: {}", f.text),
                    _ => f.text.clone(),
                },
                fix_for(&f.text).map(str::to_string),
            ),
            host: f.host.clone(),
            line: Some(f.line),
        });
    }
    if let Some(code) = exit_code.filter(|c| *c != 0) {
        return Some(Cause {
            problem: Problem::with_fix(
                format!(
                    "mpirun exited with status {code} and printed no reason{}",
                    if run.rows.is_empty() {
                        " and no results"
                    } else {
                        ""
                    }
                ),
                Some("rerun with -v to see mpirun's own output".into()),
            ),
            host: None,
            line: (run.lines.1 > 0).then_some(run.lines.1),
        });
    }
    Some(Cause {
        problem: Problem::with_fix(
            if run.test.is_none() && run.params.is_none() {
                "no nccl-tests output in this log (no header, no result rows)"
            } else {
                "nccl-tests printed no result rows: the run stopped before measuring"
            },
            Some(
                "capture the complete output of mpirun (stdout and stderr, with NCCL_DEBUG=INFO)"
                    .into(),
            ),
        ),
        host: None,
        line: (run.lines.1 > 0).then_some(run.lines.1),
    })
}

/// What to do about a known failure message.
pub fn fix_for(text: &str) -> Option<&'static str> {
    const FIXES: &[(&[&str], &str)] = &[
        (
            &["ibv_reg_mr", "Cannot allocate memory", "memlock"],
            "RDMA could not register memory: the locked-memory limit is too low; run the container with `--ulimit memlock=-1` and `--cap-add IPC_LOCK` (spark-launch does), on the host raise `memlock` in /etc/security/limits.conf",
        ),
        (
            &[
                "Bootstrap : no socket interface found",
                "no device found matching",
                "No usable listening interface",
                "NET/Socket : no interface",
            ],
            "NCCL_SOCKET_IFNAME names no interface of this node: interface names differ per node; use the derived value (`spark-launch env`)",
        ),
        (
            &[
                "transport retry counter exceeded",
                "status=12",
                "retry counter",
            ],
            "RDMA packets are lost between the nodes: check that both ends of the cable have the same MTU (9000) and a RoCE v2 GID on the address they use (`spark-launch doctor`)",
        ),
        (
            &["out of memory"],
            "the GPU ran out of memory: lower the largest size (`-e`), or stop what else runs on that GPU",
        ),
        (
            &[
                "Invalid number of GPUs",
                "no CUDA-capable device",
                "CUDA driver version is insufficient",
            ],
            "the process sees fewer GPUs than ranks were placed on its node: pass the GPUs into the container (`--gpus all`) and start one rank per GPU",
        ),
        (
            &["Incompatible NCCL versions"],
            "nccl-tests was built against another NCCL than the one it loads: rebuild the image (`spark-launch nccl-build`) so both come from one NCCL",
        ),
        (
            &["error while loading shared libraries"],
            "a library is missing on that node: use the same image on every node (`spark-launch image push`) or set LD_LIBRARY_PATH to the NCCL build",
        ),
        (
            &[
                "Host key verification failed",
                "REMOTE HOST IDENTIFICATION HAS CHANGED",
            ],
            "the node's host key does not match the pinned one: re-pin the cluster's keys with `spark-launch trust`",
        ),
        (
            &["Permission denied (publickey"],
            "the node does not accept this key: distribute the public keys with `spark-launch trust`",
        ),
        (
            &["ssh: connect to host"],
            "mpirun's ssh could not reach the node's sshd (port 2233 in spark-launch's containers): check that the job's containers run on every node (`spark-launch status`)",
        ),
        (
            &[
                "orted: command not found",
                "orted: not found",
                "unable to reliably start",
                "prted: command not found",
            ],
            "Open MPI could not start its daemon on a node: the same image (with Open MPI) must run on every node",
        ),
        (
            &["not enough slots"],
            "the hostfile offers fewer slots than ranks: one slot per GPU of each node",
        ),
        (
            &[
                "unable to find the specified executable",
                "unable to launch the specified application",
            ],
            "the test binary is missing on some node: use the same image everywhere (`spark-launch image push`)",
        ),
        (
            &[
                "Connection refused",
                "No route to host",
                "Connection timed out",
                "connect to",
                "Connection closed by remote peer",
            ],
            "the ranks could not reach each other over TCP: check that NCCL_SOCKET_IFNAME is on a subnet every node shares and that no firewall blocks it (`spark-launch doctor`)",
        ),
        (
            &["wrong values", "Out of bounds values"],
            "validation found corrupt data: rerun; if it repeats, check the cable and `dmesg` for PCIe or NIC errors",
        ),
        (
            &["Test timeout"],
            "a collective hung: a rank stopped answering, usually a network path that accepts connections but drops RDMA traffic (`spark-launch doctor`)",
        ),
    ];
    FIXES
        .iter()
        .find(|(pats, _)| pats.iter().any(|p| text.contains(p)))
        .map(|(_, fix)| *fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_failures_get_a_fix() {
        assert!(
            fix_for("Call to ibv_reg_mr failed with error Cannot allocate memory")
                .unwrap()
                .contains("memlock=-1")
        );
        assert!(
            fix_for("Bootstrap : no socket interface found")
                .unwrap()
                .contains("NCCL_SOCKET_IFNAME")
        );
        assert!(fix_for("something new").is_none());
        // An ssh failure is about ssh, though its text says "Connection refused".
        assert!(
            fix_for("ssh: connect to host 169.254.100.2 port 2233: Connection refused")
                .unwrap()
                .contains("sshd")
        );
    }
}
