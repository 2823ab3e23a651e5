//! How `model pull`'s result is shown: the plan of a dry run (who downloads, who copies from
//! whom, where each node keeps the weights), or per node what was fetched, resumed and
//! already there, with the time and rate. Pure.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::{PullReport, Pulled};
use crate::model::pull::PullPlan;
use crate::progress::human_bytes;
use crate::report::shown::Shown;

impl Shown for PullReport {
    fn text(&self) -> String {
        match self {
            PullReport::Planned(plan) => plan_text(plan),
            PullReport::Pulled(pulled) => pulled_text(pulled),
        }
    }

    fn json(&self) -> serde_json::Result<String> {
        match self {
            PullReport::Planned(plan) => serde_json::to_string_pretty(plan),
            PullReport::Pulled(pulled) => serde_json::to_string_pretty(pulled),
        }
    }
}

fn pulled_text(pulled: &Pulled) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "node",
        "fetched",
        "resumed",
        "already there",
        "time",
        "rate",
    ]);
    for r in &pulled.nodes {
        let secs = (r.millis as f64 / 1000.0).max(0.001);
        t.add_row(vec![
            r.node.to_string(),
            format!(
                "{} ({} files)",
                human_bytes(r.fetched_bytes),
                r.fetched_files
            ),
            human_bytes(r.resumed_bytes),
            format!(
                "{} ({} files)",
                human_bytes(r.present_bytes),
                r.present_files
            ),
            format!("{secs:.1}s"),
            if r.fetched_bytes > 0 {
                format!("{}/s", human_bytes((r.fetched_bytes as f64 / secs) as u64))
            } else {
                "-".into()
            },
        ]);
    }
    t.to_string()
}

fn plan_text(p: &PullPlan) -> String {
    let mut out = format!("stage {} on {}\n", p.model, p.nodes.len());
    out.push_str(&format!(
        "  1. {}: download from {}\n",
        p.head, p.download_from
    ));
    for n in &p.nodes[1..] {
        out.push_str(&format!(
            "  2. {}: copy from {} ({} streams)\n",
            n.node,
            p.head_addr().unwrap_or(p.head.as_str()),
            p.streams
        ));
    }
    for n in &p.nodes {
        out.push_str(&format!("     {} keeps it in {}\n", n.node, n.dir));
    }
    if let Some(g) = p.model.gguf() {
        out.push_str(&format!(
            "  only the GGUF file(s) of {} (picked from the Hub's listing as llama.cpp's -hf picks them), on the head alone: llama.cpp's RPC servers get their tensors from it\n",
            g.quant_text()
        ));
    }
    out
}
