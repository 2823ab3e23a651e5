//! How `trust`'s result is shown: what changed (or would, or that nothing did), the verified
//! all-pairs matrix, the failed pairs and nodes, as text or JSON, and how it ends (exit 1 when
//! trust is incomplete). Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::TrustOutcome;
use crate::node::NodeName;
use crate::report::shown::{Ending, Shown};

impl TrustOutcome {
    /// Every node that failed: unreachable first, then those that failed a step.
    fn failed(&self) -> Vec<(NodeName, String)> {
        let mut failed = self.unreachable.clone();
        failed.extend(self.report.failed.iter().cloned());
        failed
    }
}

impl Shown for TrustOutcome {
    fn json(&self) -> serde_json::Result<String> {
        let (report, dry_run) = (&self.report, self.dry_run);
        let failed = self.failed();
        let changes: serde_json::Map<String, serde_json::Value> = report
            .changes
            .iter()
            .map(|(n, c)| (n.to_string(), serde_json::json!(c)))
            .collect();
        let failures: serde_json::Map<String, serde_json::Value> = failed
            .iter()
            .map(|(n, c)| (n.to_string(), serde_json::json!(c)))
            .collect();
        let matrix: Vec<serde_json::Value> = report
            .matrix
            .iter()
            .map(|p| match &p.outcome {
                Ok(h) => serde_json::json!({"from": p.from, "to": p.to, "ok": true, "hostname": h}),
                Err(e) => serde_json::json!({"from": p.from, "to": p.to, "ok": false, "error": e}),
            })
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({
            "nodes": self.nodes,
            "dry_run": dry_run,
            "changed": !report.unchanged() && !dry_run,
            "would_change": !report.unchanged() && dry_run,
            "changes": changes,
            "failed": failures,
            "matrix": matrix,
            "ok": failed.is_empty() && report.all_ok(),
        }))
    }

    fn text(&self) -> String {
        let (report, dry_run) = (&self.report, self.dry_run);
        let failed = self.failed();
        let mut out = String::new();
        if !report.nodes.is_empty() {
            if report.unchanged() {
                out.push_str("nothing to change: every node already trusts every other node\n");
            } else {
                out.push_str(if dry_run {
                    "would change (dry run, nothing written):\n"
                } else {
                    "changed:\n"
                });
                for (n, c) in &report.changes {
                    if c.is_empty() {
                        out.push_str(&format!("  {n}: nothing\n"));
                    } else {
                        out.push_str(&format!("  {n}: {}\n", c.join("; ")));
                    }
                }
            }
            out.push('\n');
        }
        out.push_str(if dry_run {
            "ssh from (row) to (column), as it works today:\n"
        } else {
            "ssh from (row) to (column):\n"
        });
        out.push_str(&self.matrix_table(&failed));
        out.push('\n');
        let bad: Vec<String> = report
            .matrix
            .iter()
            .filter_map(|p| {
                p.outcome
                    .as_ref()
                    .err()
                    .map(|e| format!("  {} → {}: {e}", p.from, p.to))
            })
            .collect();
        if !bad.is_empty() {
            out.push_str("failed pairs:\n");
            out.push_str(&bad.join("\n"));
            out.push('\n');
        }
        if !failed.is_empty() {
            out.push_str("failed nodes:");
            out.push_str(&failure_lines(&failed));
            out.push('\n');
        }
        out
    }

    fn ending(&self) -> Ending {
        let report = &self.report;
        if self.too_few {
            return Ending::Error {
                code: 1,
                message: format!(
                    "fewer than two nodes could be reached, so nothing was changed anywhere:{}",
                    failure_lines(&self.unreachable)
                ),
            };
        }
        let clean = self.unreachable.is_empty();
        if (self.dry_run && report.failed.is_empty() && clean) || (report.all_ok() && clean) {
            return Ending::Ok;
        }
        let pairs = report.matrix.iter().filter(|p| p.outcome.is_err()).count();
        Ending::Error {
            code: 1,
            message: format!(
                "trust is incomplete:{}{}",
                failure_lines(&self.failed()),
                if pairs > 0 {
                    format!("\n  {pairs} pair(s) cannot ssh (see the matrix)")
                } else {
                    String::new()
                }
            ),
        }
    }
}

impl TrustOutcome {
    fn matrix_table(&self, failed: &[(NodeName, String)]) -> String {
        let all = &self.nodes;
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        let mut header = vec![String::new()];
        header.extend(all.iter().map(|n| n.to_string()));
        t.set_header(header);
        for from in all {
            let mut row = vec![from.to_string()];
            for to in all {
                let cell = if from == to {
                    "-".to_string()
                } else if failed.iter().any(|(n, _)| n == from || n == to) {
                    "✗ (node failed)".to_string()
                } else {
                    match self
                        .report
                        .matrix
                        .iter()
                        .find(|p| &p.from == from && &p.to == to)
                    {
                        Some(p) if p.outcome.is_ok() => "✓".to_string(),
                        Some(_) => "✗".to_string(),
                        None => "?".to_string(),
                    }
                };
                row.push(cell);
            }
            t.add_row(row);
        }
        t.to_string()
    }
}

fn failure_lines(failed: &[(NodeName, String)]) -> String {
    failed
        .iter()
        .map(|(n, why)| format!("\n  {n}: {why}"))
        .collect()
}
