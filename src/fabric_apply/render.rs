//! How a `fabric` command's result is shown: the plan (`fabric::render`), each node's diff of
//! a dry run, the apply's node and link tables, the rollback table, the perftest runs and
//! their verdicts, as text or JSON, and how each ends the command. Pure: text from reports.

use std::collections::BTreeMap;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::command::{FabricDryRun, FabricReport};
use super::{ApplyReport, EndResult};
use crate::fabric::script::RollbackReport;
use crate::fabric::{self, FabricPlan, diff, perftest};
use crate::node::NodeName;
use crate::report::perftest::{PerfVerdict, TestReport};
use crate::report::shown::{Ending, Shown};

impl Shown for FabricReport {
    fn text(&self) -> String {
        match self {
            FabricReport::Planned(plan) => fabric::render::text(plan),
            FabricReport::DryRun(d) => dry_run_text(d),
            FabricReport::Applied { plan, report } => apply_text(plan, report),
            FabricReport::RolledBack(results) => rollback_text(results),
            FabricReport::TestPlanned(plan) => {
                let mut out = String::from("dry run: these runs, one cable after another\n");
                for r in &plan.rounds {
                    out.push_str(&format!("\n{}:\n", r.cable));
                    out.push_str(&format!(
                        "  on {}:\n{}",
                        r.server_node,
                        indent(&perftest::server_script(r, plan.duration_s))
                    ));
                    out.push_str(&format!(
                        "  on {}:\n{}",
                        r.client_node,
                        indent(&perftest::client_script(r, plan.duration_s))
                    ));
                }
                out
            }
            FabricReport::Tested(report) => test_text(report),
        }
    }

    fn json(&self) -> serde_json::Result<String> {
        match self {
            FabricReport::Planned(plan) => serde_json::to_string_pretty(plan),
            FabricReport::DryRun(d) => serde_json::to_string_pretty(&serde_json::json!({
                "dry_run": true,
                "plan": d.plan,
                "diff": diffs(&d.plan),
                "moves": d.moves,
                "nothing_to_do": d.plan.nothing_to_do(),
            })),
            FabricReport::Applied { plan, report } => {
                serde_json::to_string_pretty(&serde_json::json!({
                    "plan": plan,
                    "nothing_to_do": plan.nothing_to_do(),
                    "nodes": report.nodes,
                    "kept": report.kept,
                    "links": report.links,
                    "ok": report.ok(),
                }))
            }
            FabricReport::RolledBack(results) => {
                let nodes: serde_json::Map<String, serde_json::Value> = results
                    .iter()
                    .map(|(n, r)| {
                        (
                            n.to_string(),
                            match r {
                                Ok(x) => serde_json::json!(x),
                                Err(e) => serde_json::json!({ "error": e }),
                            },
                        )
                    })
                    .collect();
                serde_json::to_string_pretty(
                    &serde_json::json!({ "nodes": nodes, "ok": rolled_back(results) }),
                )
            }
            FabricReport::TestPlanned(plan) => serde_json::to_string_pretty(plan),
            FabricReport::Tested(report) => serde_json::to_string_pretty(report),
        }
    }

    fn ending(&self) -> Ending {
        match self {
            // The diffs are shown either way; a conflict the apply would refuse is exit 2.
            FabricReport::DryRun(FabricDryRun {
                refused: Some(r), ..
            }) => Ending::Error {
                code: 2,
                message: r.to_string(),
            },
            FabricReport::Applied { report, .. } if !report.ok() => Ending::Error {
                code: 1,
                message: apply_failure(report),
            },
            FabricReport::RolledBack(results) if !rolled_back(results) => Ending::Failed,
            FabricReport::Tested(r) if r.verdict == PerfVerdict::Fail => Ending::Failed,
            _ => Ending::Ok,
        }
    }
}

/// Why an apply that ran did not end well.
fn apply_failure(report: &ApplyReport) -> String {
    let failing: Vec<String> = report
        .links
        .iter()
        .filter(|l| !l.ok())
        .map(|l| l.link.clone())
        .collect();
    if report.kept && !failing.is_empty() {
        format!(
            "the fabric is applied but {} link(s) failed verification:\n  {}",
            failing.len(),
            failing.join("\n  ")
        )
    } else {
        "the new fabric configuration was not kept: every node is back as it was (see the table above)".to_string()
    }
}

/// Every node rolled back, with no planned address left up and no apply running there.
fn rolled_back(results: &[(NodeName, Result<RollbackReport, String>)]) -> bool {
    results
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|x| x.left.is_empty() && !x.busy))
}

/// Each node's unified diff of the netplan file (`None`: nothing to do there).
fn diffs(plan: &FabricPlan) -> BTreeMap<String, Option<String>> {
    plan.nodes
        .iter()
        .map(|n| {
            (
                n.name.to_string(),
                n.netplan
                    .as_deref()
                    .map(|new| diff::unified(fabric::FILE, n.current.as_deref(), new)),
            )
        })
        .collect()
}

fn dry_run_text(d: &FabricDryRun) -> String {
    let (plan, moves) = (&d.plan, &d.moves);
    let diffs = diffs(plan);
    let mut out = String::from("dry run: nothing is changed\n");
    for n in &plan.nodes {
        out.push('\n');
        match diffs.get(n.name.as_str()).cloned().flatten() {
            Some(d) => {
                out.push_str(&format!("{}:\n", n.name));
                for m in moves.get(&n.name).into_iter().flatten() {
                    out.push_str(&format!(
                        "  would move {m} into {}/backup/\n",
                        fabric::script::STATE_DIR
                    ));
                }
                for line in d.lines() {
                    out.push_str(&format!("  {line}\n"));
                }
            }
            None => out.push_str(&format!("{}: nothing to do\n", n.name)),
        }
    }
    if !plan.warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for w in &plan.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    out
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "ok",
        Some(false) => "FAIL",
        None => "-",
    }
}

fn apply_text(plan: &FabricPlan, report: &ApplyReport) -> String {
    let mut out = String::new();
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["node", "result", "detail"]);
    for n in &report.nodes {
        t.add_row(vec![
            n.node.to_string(),
            n.state.to_string(),
            n.detail.join("; "),
        ]);
    }
    out.push_str(&t.to_string());
    out.push('\n');
    if !report.links.is_empty() {
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "link",
            "subnet",
            "address a/b",
            "route a→b / b→a",
            &format!("ping -M do {} a→b / b→a", plan.mtu),
            "verdict",
        ]);
        for l in &report.links {
            t.add_row(vec![
                l.link.clone(),
                l.subnet.clone(),
                format!("{} / {}", yes_no(l.a.addr), yes_no(l.b.addr)),
                format!("{} / {}", route_text(&l.a), route_text(&l.b)),
                format!("{} / {}", yes_no(l.a.ping), yes_no(l.b.ping)),
                match &l.skipped {
                    Some(why) => format!("skip: {why}"),
                    None if l.ok() => "ok".into(),
                    None => "FAIL".into(),
                },
            ]);
        }
        out.push('\n');
        out.push_str(&t.to_string());
        out.push('\n');
    }
    out
}

fn route_text(end: &EndResult) -> String {
    match (end.route_ok, &end.route) {
        (Some(true), _) => "ok".into(),
        (Some(false), Some(r)) => format!("via {r}"),
        _ => "-".into(),
    }
}

fn rollback_text(results: &[(NodeName, Result<RollbackReport, String>)]) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["node", "restored", "removed", "interfaces", "result"]);
    for (n, r) in results {
        match r {
            Ok(x) if x.nothing => t.add_row(vec![
                n.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "nothing to roll back".into(),
            ]),
            Ok(x) => t.add_row(vec![
                n.to_string(),
                x.restored.join("\n"),
                x.removed.join("\n"),
                x.interfaces.join(", "),
                if x.busy {
                    "busy: a fabric apply runs there".into()
                } else if x.left.is_empty() {
                    let mut s = "ok: the planned addresses are gone".to_string();
                    for k in x.kept.iter().chain(&x.warnings) {
                        s.push_str(&format!("\n{k}"));
                    }
                    s
                } else {
                    format!("FAIL: still up: {}", x.left.join(", "))
                },
            ]),
            Err(e) => t.add_row(vec![
                n.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("FAIL: {e}"),
            ]),
        };
    }
    t.to_string()
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

fn test_text(r: &TestReport) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["twin pair", "Gb/s", "rate allows", "verdict", "notes"]);
    for p in &r.pairs {
        t.add_row(vec![
            p.link.clone(),
            p.gbps
                .map(|g| format!("{g:.1}"))
                .unwrap_or_else(|| "-".into()),
            p.allowed_gbps
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "unknown".into()),
            p.verdict.label().to_string(),
            p.notes.join("\n"),
        ]);
    }
    let mut out = t.to_string();
    out.push('\n');
    for c in &r.cables {
        out.push_str(&format!(
            "cable {}: {:.1} Gb/s over {} twin pair(s)\n",
            c.cable, c.gbps, c.twin_pairs
        ));
    }
    for s in &r.skipped {
        out.push_str(&format!("not measured: {s}\n"));
    }
    out.push_str(&format!("verdict: {}\n", r.verdict.label()));
    out
}
