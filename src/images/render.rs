//! How `image push`'s result is shown: per node what was pushed (bytes, time, rate, where the
//! bytes were read) or what a push would do, as text or JSON, and how it ends the command (a
//! node of another CPU is exit 2, a failed node exit 1, Ctrl-C 130). Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use indicatif::HumanBytes;

use super::command::ImagePushReport;
use super::{NodePush, PushPlan, PushReport, ReadFrom};
use crate::plan::image::{PushAction, SnapshotPush};
use crate::report::shown::{Ending, Shown};

impl Shown for ImagePushReport {
    fn text(&self) -> String {
        match self {
            ImagePushReport::Planned(plan) => planned_text(plan),
            ImagePushReport::OnSnapshots(plan) => snapshot_text(plan),
            ImagePushReport::Pushed { report, .. } => pushed_text(report),
        }
    }

    fn json(&self) -> serde_json::Result<String> {
        match self {
            ImagePushReport::Planned(plan) => {
                serde_json::to_string_pretty(&serde_json::json!({ "dry_run": true, "plan": plan }))
            }
            ImagePushReport::OnSnapshots(plan) => serde_json::to_string_pretty(plan),
            ImagePushReport::Pushed { report, .. } => serde_json::to_string_pretty(report),
        }
    }

    fn ending(&self) -> Ending {
        let ImagePushReport::Pushed {
            report,
            interrupted,
        } = self
        else {
            return Ending::Ok;
        };
        if *interrupted {
            return Ending::Error {
                code: 130,
                message: "interrupted".into(),
            };
        }
        if !report.refused().is_empty() {
            let mixed = report
                .mixed_arches
                .as_ref()
                .map(|a| {
                    format!(
                        " (a mixed {} cluster: build the image once per architecture)",
                        a.join(" + ")
                    )
                })
                .unwrap_or_default();
            return Ending::Error {
                code: 2,
                message: format!(
                    "refused on {}: the image is built for another CPU{mixed} (see above)",
                    report
                        .refused()
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
        }
        if report.failed().is_empty() {
            Ending::Ok
        } else {
            Ending::Failed
        }
    }
}

fn pushed_text(report: &PushReport) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["NODE", "RESULT", "BYTES", "TIME", "RATE"]);
    let none = || vec!["-".to_string(), "-".into(), "-".into()];
    for (node, p) in &report.nodes {
        let mut cells = vec![node.to_string()];
        match p {
            NodePush::Skipped => {
                cells.push("already there (same content)".into());
                cells.extend(none());
            }
            NodePush::SkippedOwnArch { id } => {
                cells.push(format!("kept its own {} build ({id})", "arch"));
                cells.extend(none());
            }
            NodePush::Pushed {
                bytes,
                seconds,
                layers_sent,
                layers,
                read_from,
            } => cells.extend([
                format!(
                    "{}; {}",
                    if layers_sent < layers {
                        format!("pushed {layers_sent} of {layers} layers (held the rest)")
                    } else {
                        "pushed".into()
                    },
                    match read_from {
                        ReadFrom::LayerStore => "read from the layer store",
                        ReadFrom::Export => "exported by the engine",
                    }
                ),
                HumanBytes(*bytes).to_string(),
                format!("{seconds:.1}s"),
                format!(
                    "{}/s",
                    HumanBytes((*bytes as f64 / seconds.max(1e-3)) as u64)
                ),
            ]),
            NodePush::Refused { reason } => {
                cells.push(format!("refused: {reason}"));
                cells.extend(none());
            }
            NodePush::Failed { error } => {
                cells.push(format!("failed: {error}"));
                cells.extend(none());
            }
        }
        t.add_row(cells);
    }
    format!(
        "{} ({}, {}/{}) from {}\n{}",
        report.image.reference,
        report.image.id,
        report.image.os,
        report.image.arch,
        report.source,
        t
    )
}

fn planned_text(plan: &PushPlan) -> String {
    let source = &plan.source;
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["NODE", "WOULD"]);
    for (node, action) in &plan.nodes {
        let would = match action {
            PushAction::Skip => "skip: already there (same content)".to_string(),
            PushAction::SkipOwnArch { id } => format!("skip: keeps its own build ({id})"),
            PushAction::Push { missing, layers } if missing.len() < *layers => format!(
                "push {} of {layers} layers from {source} (it holds the others)",
                missing.len()
            ),
            PushAction::Push { .. } => format!("push from {source}"),
            PushAction::Refuse { reason } => format!("refuse: {reason}"),
        };
        t.add_row(vec![node.to_string(), would]);
    }
    format!(
        "{} ({}, {}/{}) on {source} (dry run: nothing moved)\n{t}",
        plan.image.reference, plan.image.id, plan.image.os, plan.image.arch
    )
}

fn snapshot_text(plan: &SnapshotPush) -> String {
    let mut out = format!("push {} (dry run on snapshots)\n", plan.image);
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!("  {}. {s}\n", i + 1));
    }
    for n in std::iter::once(&plan.source).chain(&plan.targets) {
        out.push_str(&format!(
            "     {}: {}\n",
            n.node,
            n.arch.as_deref().unwrap_or("CPU not in the snapshot")
        ));
    }
    if let Some(m) = &plan.mixed_arches {
        out.push_str(&format!(
            "  a mixed {} cluster: each CPU needs its own build of the image\n",
            m.join(" + ")
        ));
    }
    out.trim_end().to_string()
}
