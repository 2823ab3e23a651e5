//! How `bench`'s result is shown as text: a table per run with what its figures rest on
//! (who counted the tokens, failures), a soak's windows and stalls, the change against an
//! earlier run, and how the run stands against a launch profile's expected figures. Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::BenchOutcome;
use super::compare::{Comparison, ExpectReport, Figure};
use super::measure::{BenchReport, TokenCount};
use super::soak::{SoakReport, clock};

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

/// The run's table, then the comparisons.
pub fn text(o: &BenchOutcome, compare_file: Option<&std::path::Path>) -> String {
    let r = &o.report;
    if let Some(s) = &r.soak {
        return soak_text(o, s, compare_file);
    }
    let mut out = format!(
        "{} at {}{}: {} prompt + {} output tokens per request ({} API)\n",
        r.model,
        r.url,
        r.job
            .as_ref()
            .map(|j| format!(" (job {j})"))
            .unwrap_or_default(),
        r.prompt_tokens,
        r.output_tokens,
        r.api
    );
    out.push_str(&report_table(r));
    out.push('\n');
    for line in notes(r) {
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(c) = r.answer_check.as_ref().filter(|c| c.starts_with("skipped")) {
        out.push_str(&format!("answers not checked first: {c}\n"));
    }
    out.push_str(&format!("saved: {}\n", o.saved.display()));
    if let Some(c) = &o.comparison {
        out.push('\n');
        out.push_str(&comparison_text(
            c,
            compare_file
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ));
    }
    if let Some(e) = &o.expectations {
        out.push('\n');
        out.push_str(&expectations_text(e));
    }
    out
}

/// Rows of the soak's table at most; longer runs show several windows per row.
const SOAK_ROWS: usize = 30;

/// A soak: what ran, its windows (merged to at most [`SOAK_ROWS`] rows), every stall, the
/// totals, where it was saved, and the change against an earlier run.
fn soak_text(o: &BenchOutcome, s: &SoakReport, compare_file: Option<&std::path::Path>) -> String {
    let r = &o.report;
    let mut out = format!(
        "{} at {}{}: soak of {} with {} streams of {} prompt + {} output tokens ({} API)\n",
        r.model,
        r.url,
        r.job
            .as_ref()
            .map(|j| format!(" (job {j})"))
            .unwrap_or_default(),
        clock(s.duration_s),
        s.concurrency,
        r.prompt_tokens,
        r.output_tokens,
        r.api
    );
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "TIME",
        "OUTPUT TOK/S",
        "REQUESTS",
        "FAILED",
        "IN FLIGHT (MAX)",
        "",
    ]);
    let per_row = s.windows.len().div_ceil(SOAK_ROWS).max(1);
    for group in s.windows.chunks(per_row) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let tokens: u64 = group.iter().map(|w| w.tokens).sum();
        let span = last.end_s - first.start_s;
        let stalled = s
            .stalls
            .iter()
            .any(|st| st.start_s < last.end_s && st.end_s > first.start_s);
        t.add_row(vec![
            format!("{}–{}", clock(first.start_s), clock(last.end_s)),
            format!(
                "{:.1}",
                if span > 0.0 {
                    tokens as f64 / span
                } else {
                    0.0
                }
            ),
            group.iter().map(|w| w.requests).sum::<u32>().to_string(),
            group.iter().map(|w| w.failed).sum::<u32>().to_string(),
            group
                .iter()
                .map(|w| w.in_flight_max)
                .max()
                .unwrap_or(0)
                .to_string(),
            if stalled { "STALL" } else { "" }.to_string(),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    out.push_str(&format!(
        "{:.1} output tok/s over {} (text chunks counted); {} requests finished, {} failed, {} cut at the end{}\n",
        s.output_tokens_per_s,
        clock(s.elapsed_s),
        s.requests,
        s.failed,
        s.unfinished,
        s.ttft_ms
            .map(|p| format!("; TTFT p50 {:.0} ms, p95 {:.0} ms", p.p50, p.p95))
            .unwrap_or_default()
    ));
    if s.refused_and_resent > 0 {
        out.push_str(&format!(
            "{} times a request was refused before the server took it (no connection, 502/503: a restart) and was sent again\n",
            s.refused_and_resent
        ));
    }
    if let Some(e) = &s.first_error {
        out.push_str(&format!("first failure: {e}\n"));
    }
    if s.no_token() {
        out.push_str(&format!(
            "NO TOKEN: not a single token came in {} of soak: nothing was measured\n",
            clock(s.elapsed_s)
        ));
    } else if s.stalls.is_empty() {
        out.push_str(&format!(
            "no stall: while requests were in flight, a token came at least every {} s\n",
            s.stall_after_s
        ));
    }
    for st in &s.stalls {
        out.push_str(&format!(
            "STALL {}–{} ({:.0} s): {} request{} in flight and no token{}\n",
            clock(st.start_s),
            clock(st.end_s),
            st.duration_s,
            st.in_flight,
            if st.in_flight == 1 { "" } else { "s" },
            if st.ongoing_at_end {
                ", still stalled when the soak ended"
            } else {
                ""
            }
        ));
    }
    out.push_str(&format!("saved: {}\n", o.saved.display()));
    if let Some(c) = &o.comparison {
        out.push_str(&format!(
            "\nagainst the run of {} ({}):\n",
            c.earlier_started_at,
            compare_file
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ));
        for n in &c.notes {
            out.push_str(&format!("note: {n}\n"));
        }
    }
    out
}

fn report_table(r: &BenchReport) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "CONCURRENCY",
        "REQUESTS",
        "OUTPUT TOK/S",
        "REQ/S",
        "TTFT P50 ms",
        "TTFT P95 ms",
        "ITL P50 ms",
        "ITL P95 ms",
    ]);
    for l in &r.levels {
        t.add_row(vec![
            l.concurrency.to_string(),
            if l.failed == 0 {
                l.requests.to_string()
            } else {
                format!("{} ({} FAILED)", l.requests, l.failed)
            },
            format!("{:.1}", l.output_tokens_per_s),
            format!("{:.2}", l.requests_per_s),
            ms(l.ttft_ms.map(|p| p.p50)),
            ms(l.ttft_ms.map(|p| p.p95)),
            ms(l.itl_ms.map(|p| p.p50)),
            ms(l.itl_ms.map(|p| p.p95)),
        ]);
    }
    t.to_string()
}

/// What the figures rest on: who counted the tokens, failures.
fn notes(r: &BenchReport) -> Vec<String> {
    let mut out = Vec::new();
    let ok: Vec<_> = r.levels.iter().filter(|l| l.requests > 0).collect();
    if ok.iter().all(|l| l.tokens_counted_by == TokenCount::Usage) {
        let prompts: Vec<f64> = ok.iter().filter_map(|l| l.mean_prompt_tokens).collect();
        let outputs: Vec<f64> = ok.iter().map(|l| l.mean_output_tokens).collect();
        if let (Some(p), Some(o)) = (prompts.first(), outputs.first()) {
            out.push(format!(
                "tokens as the server counted them: {p:.0} prompt, {o:.0} output per request"
            ));
        }
        if let Some(o) = outputs
            .iter()
            .find(|o| (**o - f64::from(r.output_tokens)).abs() >= 0.5)
        {
            out.push(format!(
                "note: the server generated {o:.1} tokens per request, not the {} asked (it may ignore min_tokens / ignore_eos): tokens/s counts what it generated",
                r.output_tokens
            ));
        }
    } else {
        out.push(
            "the server reported no token usage: output tokens are the text chunks counted (usually one token each)"
                .to_string(),
        );
    }
    let failed: u32 = r.levels.iter().map(|l| l.failed).sum();
    if failed > 0 && ok.is_empty() {
        out.push(format!(
            "EVERY REQUEST FAILED ({failed} of {failed}): nothing was measured"
        ));
    }
    for l in &r.levels {
        if let Some(e) = &l.first_error {
            out.push(format!(
                "concurrency {}: {} of {} requests failed, first: {e}",
                l.concurrency,
                l.failed,
                l.failed + l.requests
            ));
        }
    }
    out
}

fn comparison_text(c: &Comparison, file: String) -> String {
    let mut out = format!(
        "change against the run of {} ({file}); throughput higher is better, latency lower:\n",
        c.earlier_started_at
    );
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    let mut header = vec!["CONCURRENCY".to_string()];
    header.extend(
        Figure::ALL
            .iter()
            .map(|f| f.to_string().to_uppercase().replace(" MS", " ms")),
    );
    t.set_header(header);
    for l in &c.levels {
        let mut row = vec![l.concurrency.to_string()];
        for f in Figure::ALL {
            row.push(match l.changes.iter().find(|ch| ch.figure == f) {
                None => "-".to_string(),
                Some(ch) => {
                    let value = if f == Figure::RequestsPerS {
                        format!("{:.2}", ch.after)
                    } else {
                        format!("{:.1}", ch.after)
                    };
                    match ch.change_pct {
                        // A change that shows as 0.0% is no change worth a word.
                        Some(p) if ch.better || p.abs() < 0.05 => format!("{value} ({p:+.1}%)"),
                        Some(p) => format!("{value} ({p:+.1}% worse)"),
                        None => value,
                    }
                }
            });
        }
        t.add_row(row);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    for n in &c.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    if !c.only_earlier.is_empty() {
        out.push_str(&format!(
            "only the earlier run measured concurrency {}\n",
            join(&c.only_earlier)
        ));
    }
    if !c.only_now.is_empty() {
        out.push_str(&format!(
            "only this run measured concurrency {}\n",
            join(&c.only_now)
        ));
    }
    out
}

fn expectations_text(e: &ExpectReport) -> String {
    let mut out = format!(
        "against the figures profile {} expects (near: within 10%):\n",
        e.profile
    );
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "CONCURRENCY",
        "FIGURE",
        "EXPECTED",
        "MEASURED",
        "CHANGE",
        "VERDICT",
    ]);
    for c in &e.checks {
        t.add_row(vec![
            c.concurrency.to_string(),
            c.figure.to_string(),
            format!(
                "{}{:.1}",
                if c.figure.higher_is_better() {
                    "≥ "
                } else {
                    "≤ "
                },
                c.expected
            ),
            ms(c.measured),
            c.change_pct
                .map(|p| format!("{p:+.1}%"))
                .unwrap_or_else(|| "-".into()),
            c.verdict.to_string(),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    for n in &e.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(if e.passed() {
        "every expected figure is met or within 10%\n"
    } else {
        "below expectations: a figure is worse than the profile expects by more than 10%\n"
    });
    out
}

fn join(levels: &[u32]) -> String {
    levels
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
