//! The check's report as text: one row per check (verdict, check, what was asked, why), the
//! evidence under a failed or skipped row's reason, and a closing line. Pure.

use std::fmt::Write as _;

use super::{AnswerReport, Mark};

/// The table `spark-launch check` prints.
pub fn text(r: &AnswerReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} at {} (temperature 0, at most {} tokens an answer, seed {})",
        crate::text::printable(&r.model),
        r.url,
        r.max_tokens,
        r.seed
    );
    let width = r
        .checks
        .iter()
        .map(|c| c.check.len() + c.subject.chars().count() + 3)
        .max()
        .unwrap_or(0);
    for c in &r.checks {
        let what = if c.subject.is_empty() {
            c.check.clone()
        } else {
            format!("{} ({})", c.check, c.subject)
        };
        let _ = writeln!(
            out,
            "  {:<4}  {:<width$}  {}",
            c.mark.as_str(),
            what,
            c.reason
        );
        // The answer under a failed check: what it said instead (ok rows say it in `--json`).
        if let Some(e) = c.evidence.as_ref().filter(|_| c.mark == Mark::Fail) {
            let _ = writeln!(out, "  {:<4}  {:<width$}  answer: {e}", "", "");
        }
    }
    let verdict = if r.passed() {
        "answers right"
    } else {
        "answers WRONG"
    };
    let _ = writeln!(out, "{verdict}: {}", r.summary());
    if r.checks.iter().any(|c| c.mark == Mark::Fail) {
        let _ = writeln!(
            out,
            "(a model that answers wrong at temperature 0 is misconfigured or broken: check its chat template, quantization and the engine's logs)"
        );
    }
    out
}
