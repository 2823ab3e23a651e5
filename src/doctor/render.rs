//! The human view of a doctor report: a table of checks × nodes (ok / warn / FAIL / skip), then
//! every problem with what is wrong, why it matters and the fix, then what was skipped and why,
//! then the notes (interface names, `/etc/nccl.conf` content...). `--fix-hints-only` prints
//! just the fixes, grouped by node. JSON is the report's own serialisation.
//!
//! Pure: report in, text out. Tables have a fixed layout (no terminal-width wrapping) so the
//! output is the same everywhere and can be snapshot-tested.

use std::fmt::Write as _;

use comfy_table::{ContentArrangement, Table, presets::UTF8_BORDERS_ONLY};

use super::check::{CheckStatus, Finding, Fix};
use super::logs::LogReport;
use super::{CheckReport, Report};

fn table() -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_content_arrangement(ContentArrangement::Disabled);
    t
}

/// The whole text report.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    if !report.checks.is_empty() {
        out.push_str(&checks_table(report));
        out.push('\n');
    }
    let problems = problems(report);
    if !problems.is_empty() {
        out.push_str("\nProblems\n");
        out.push_str(&problems);
    }
    for log in &report.logs {
        out.push_str(&format!("\nLast run: {}\n", log.file));
        out.push_str(&log_section(log));
    }
    let skipped = skipped(report);
    if !skipped.is_empty() {
        out.push_str("\nSkipped\n");
        out.push_str(&skipped);
    }
    let notes = notes(report);
    if !notes.is_empty() {
        out.push_str("\nNotes\n");
        out.push_str(&notes);
    }
    let s = &report.summary;
    let log_fails = report
        .logs
        .iter()
        .flat_map(|l| &l.results)
        .filter(|r| r.status == CheckStatus::Fail)
        .count();
    let _ = writeln!(
        out,
        "\n{} FAIL, {} warn, {} ok, {} skipped{}",
        s.fail,
        s.warn,
        s.ok,
        s.skipped,
        if log_fails > 0 {
            format!(
                "; {log_fails} problem{} in the logs",
                if log_fails == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        }
    );
    out
}

fn checks_table(report: &Report) -> String {
    let mut t = table();
    let mut header = vec!["check".to_string(), "what it checks".to_string()];
    header.extend(report.nodes.iter().map(|n| n.to_string()));
    t.set_header(header);
    for c in &report.checks {
        let mut row = vec![c.info.id.to_string(), c.info.title.to_string()];
        row.extend(c.nodes.iter().map(|(_, s)| s.label().to_string()));
        t.add_row(row);
    }
    t.to_string()
}

fn fix_lines(fix: &Fix, indent: &str) -> String {
    let mut out = format!("{indent}fix:  {}\n", fix.text);
    for c in &fix.commands {
        let _ = writeln!(out, "{indent}      $ {c}");
    }
    out
}

fn finding(c: &CheckReport, f: &Finding) -> String {
    let status: CheckStatus = f.severity.into();
    let mut out = format!("{} {} on {}\n", status.label(), c.info.id, f.node);
    let _ = writeln!(out, "  what: {}", f.problem.what);
    let _ = writeln!(out, "  why:  {}", f.problem.why);
    out.push_str(&fix_lines(&f.problem.fix, "  "));
    out
}

fn problems(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.checks {
        for f in &c.findings {
            out.push_str(&finding(c, f));
        }
    }
    out
}

fn log_section(log: &LogReport) -> String {
    let mut t = table();
    t.set_header(vec!["analyser", "verdict"]);
    for r in &log.results {
        t.add_row(vec![r.id.to_string(), r.status.label().to_string()]);
    }
    let mut out = t.to_string();
    out.push('\n');
    for r in &log.results {
        if let Some(f) = &r.finding {
            let status: CheckStatus = f.severity.into();
            let _ = writeln!(out, "{} {}", status.label(), r.id);
            let _ = writeln!(out, "  what:  {}", f.problem.what);
            let _ = writeln!(out, "  cause: {}", f.problem.why);
            out.push_str(&fix_lines(&f.problem.fix, "  "));
            for e in &f.evidence {
                let _ = writeln!(out, "  line {}: {}", e.line, e.text.trim());
            }
        }
        if let Some(why) = &r.skipped {
            let _ = writeln!(out, "skip {}: {why}", r.id);
        }
    }
    out
}

fn skipped(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.checks {
        if c.skipped.is_empty() {
            continue;
        }
        // One line when every node was skipped for the same reason.
        let first = &c.skipped[0].1;
        if c.skipped.len() == report.nodes.len() && c.skipped.iter().all(|(_, r)| r == first) {
            let _ = writeln!(out, "{}: {first}", c.info.id);
            continue;
        }
        for (n, r) in &c.skipped {
            let _ = writeln!(out, "{} on {n}: {r}", c.info.id);
        }
    }
    out
}

fn notes(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.checks {
        for n in &c.notes {
            let mut lines = n.text.lines();
            let first = lines.next().unwrap_or_default();
            let _ = writeln!(out, "{} {}: {first}", c.info.id, n.node);
            for l in lines {
                let _ = writeln!(out, "    {l}");
            }
        }
    }
    out
}

/// `--fix-hints-only`: every fix, grouped by node, commands ready to paste.
pub fn fix_hints(report: &Report) -> String {
    let mut out = String::new();
    for node in &report.nodes {
        let mine: Vec<(&CheckReport, &Finding)> = report
            .checks
            .iter()
            .flat_map(|c| c.findings.iter().map(move |f| (c, f)))
            .filter(|(_, f)| &f.node == node)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# on {node}");
        for (c, f) in mine {
            let status: CheckStatus = f.severity.into();
            let _ = writeln!(
                out,
                "# {} {}: {}",
                status.label(),
                c.info.id,
                f.problem.what
            );
            let _ = writeln!(out, "#   {}", f.problem.fix.text);
            for cmd in &f.problem.fix.commands {
                let _ = writeln!(out, "{cmd}");
            }
        }
        out.push('\n');
    }
    for log in &report.logs {
        for r in &log.results {
            if let Some(f) = &r.finding {
                let _ = writeln!(out, "# {} ({}): {}", r.id, log.file, f.problem.why);
                let _ = writeln!(out, "#   {}", f.problem.fix.text);
                for cmd in &f.problem.fix.commands {
                    let _ = writeln!(out, "{cmd}");
                }
            }
        }
    }
    if out.is_empty() {
        out.push_str("# nothing to fix\n");
    }
    out
}
