//! nccl-tests logs: parse every test in a log, read the transport NCCL used per rank, and give
//! one verdict. `spark-launch nccl-test` applies it to what it just ran; `spark-launch report
//! nccl FILE...` to saved logs. Pure: text in, [`Analysis`] out; rendering is in [`render`].
//!
//! - [`parse`]: the nccl-tests output (header, devices, rows, footer, failures).
//! - [`transport`]: `NCCL_DEBUG=INFO` lines → per-process transport and its problems
//!   (reusable on any log with NCCL debug lines: [`detect_transport`], [`transport_problems`]).
//! - [`verdict`]: pass / fail / measured against the hardware's reference figure.
//! - [`render`]: comfy-table text.

pub mod launch;
pub mod line;
pub mod parse;
pub mod render;
pub mod transport;
pub mod verdict;

use serde::Serialize;

pub use parse::{Failure, FailureKind, Measure, RankDevice, Row, TestRun, parse_log};
pub use transport::{
    ExpectedHcas, ProblemKind, ProcessTransport, Transport, TransportProblem, TransportReport,
    detect_transport, transport_problems,
};
pub use verdict::{AnalysisContext, Cause, Expectation, Status, TestVerdict, judge};

/// One test of a log with its verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestAnalysis {
    /// The test binary (`all_gather_perf`), from the log or the caller's hint.
    pub test: Option<String>,
    pub verdict: TestVerdict,
    pub run: TestRun,
}

/// A whole log (or several): every test and the overall status.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    /// Where the text came from (a file name), when known.
    pub source: Option<String>,
    /// `fail` when any test failed; else `incomplete` when any log stops before its closing
    /// lines; `pass` when every test with a reference passed and at least one had a reference;
    /// else `measured`.
    pub status: Status,
    pub tests: Vec<TestAnalysis>,
}

impl Analysis {
    /// The first cause of the first failed test.
    pub fn first_cause(&self) -> Option<&Cause> {
        self.tests
            .iter()
            .find(|t| t.verdict.status == Status::Fail)
            .and_then(|t| t.verdict.causes.first())
    }
}

/// Parses and judges a whole log.
pub fn analyse(text: &str, ctx: &AnalysisContext) -> Analysis {
    let mut runs = parse_log(text);
    if runs.is_empty() {
        // An empty log is a failed run with nothing to show, not an empty success.
        runs.push(TestRun::default());
    }
    let tests: Vec<TestAnalysis> = runs
        .into_iter()
        .map(|run| {
            let verdict = judge(&run, ctx);
            TestAnalysis {
                test: run.test.clone().or_else(|| ctx.test_hint.clone()),
                verdict,
                run,
            }
        })
        .collect();
    Analysis {
        source: None,
        status: overall(tests.iter().map(|t| t.verdict.status)),
        tests,
    }
}

/// Combines test statuses: any failure fails; otherwise any incomplete test makes the whole
/// incomplete; otherwise pass if anything passed.
pub fn overall(statuses: impl IntoIterator<Item = Status>) -> Status {
    let mut out = Status::Measured;
    for s in statuses {
        match s {
            Status::Fail => return Status::Fail,
            Status::Incomplete => out = Status::Incomplete,
            Status::Pass if out != Status::Incomplete => out = Status::Pass,
            Status::Pass | Status::Measured => {}
        }
    }
    out
}
