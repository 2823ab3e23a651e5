//! How `status` and `stop` are shown: the jobs table (or that there are none), what was
//! removed or would be, as text or JSON, and how each ends (a node that could not be asked is
//! exit 1). Pure.

use std::time::Duration;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::Serialize;

use super::command::{StatusReport, StopReport};
use crate::node::{NodeName, join};
use crate::plan::RuntimeKind;
use crate::plan::spec::LABEL_JOB;
use crate::progress::human_duration;
use crate::report::shown::{Ending, Shown};

/// A node that could not be asked, for `--json`.
#[derive(Debug, Serialize)]
struct Unreachable {
    node: NodeName,
    error: String,
}

fn unreachable(failed: &[(NodeName, impl std::fmt::Display)]) -> Vec<Unreachable> {
    failed
        .iter()
        .map(|(node, e)| Unreachable {
            node: node.clone(),
            error: e.to_string(),
        })
        .collect()
}

impl Shown for StatusReport {
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&serde_json::json!({
            "jobs": self.rows,
            "unreachable": unreachable(&self.failed),
            "startup": self.startup,
            "events": self.events,
            "links": self.links,
            "runtime_caches": self.runtime_caches,
        }))
    }

    fn text(&self) -> String {
        if self.rows.is_empty() {
            return match &self.job {
                Some(j) => format!("no job named {j} on {}", join(&self.nodes)),
                None => format!("no spark-launch jobs on {}", join(&self.nodes)),
            };
        }
        let mut table = Table::new();
        table.load_style(UTF8_BORDERS_ONLY);
        table.set_header(vec![
            "JOB",
            "NODE",
            "RUNTIME",
            "STATE",
            "IMAGE",
            "UPTIME",
            "PORTS",
            "MEMORY CAP",
        ]);
        for r in &self.rows {
            let e = &r.entry;
            let state = match (e.state.as_str(), e.exit_code) {
                ("running", _) => "running".to_string(),
                (s, Some(c)) if e.oom_killed => format!("{s} ({c}, killed for memory)"),
                (s, Some(c)) => format!("{s} ({c})"),
                (s, None) => s.to_string(),
            };
            table.add_row(vec![
                e.job.clone(),
                e.node.to_string(),
                e.runtime.to_string(),
                state,
                e.image.clone(),
                r.uptime_s
                    .map(|s| human_duration(Duration::from_secs(s.unsigned_abs())))
                    .unwrap_or_else(|| "-".to_string()),
                join(&e.ports),
                e.memory_limit
                    .map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64))
                    .unwrap_or_else(|| "-".to_string()),
            ]);
        }
        let mut out = table.to_string();
        let nccl: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| Some(format!("  {}  {}", r.entry.name, r.nccl.as_ref()?)))
            .collect();
        if !nccl.is_empty() {
            out.push_str(&format!("\nNCCL the containers load:\n{}", nccl.join("\n")));
        }
        let mapped: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| Some(format!("  {}  {}", r.entry.name, r.nccl_mapped.as_ref()?)))
            .collect();
        if !mapped.is_empty() {
            out.push_str(&format!(
                "\nNCCL the host processes have mapped:\n{}",
                mapped.join("\n")
            ));
        }
        for l in &self.links {
            out.push_str(&format!("\n{}: {}", l.job, l.link));
        }
        if !self.runtime_caches.is_empty() {
            out.push_str(
                "\nruntime caches (what the engines compiled; kept across restarts and stops):",
            );
            for c in &self.runtime_caches {
                out.push_str(&format!("\n  {}  {}  {}", c.node, c.size, c.folder));
            }
        }
        if let Some(s) = &self.startup {
            out.push_str(&format!("\n{}, launched {}", s.text(), s.launched_at));
        }
        if !self.events.is_empty() {
            out.push_str(&format!(
                "\nthe supervisor's last events (all: spark-launch logs {} --events):\n{}",
                self.job.as_ref().map(|j| j.as_str()).unwrap_or_default(),
                crate::records::render_events(&self.events)
            ));
        }
        out
    }

    fn ending(&self) -> Ending {
        if self.failed.is_empty() {
            Ending::Ok
        } else {
            Ending::Failed
        }
    }
}

impl Shown for StopReport {
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&match self {
            StopReport::Planned {
                label,
                grace_s,
                nodes,
                failed,
            } => serde_json::json!({
                "dry_run": true,
                "label": label,
                "grace_s": grace_s,
                "nodes": nodes,
                "unreachable": unreachable(failed),
            }),
            StopReport::Stopped {
                stopped, failed, ..
            } => serde_json::json!({
                "stopped": stopped,
                "failed": unreachable(failed),
                "label": LABEL_JOB,
            }),
        })
    }

    fn text(&self) -> String {
        match self {
            StopReport::Planned {
                label,
                grace_s,
                nodes,
                ..
            } => {
                let mut out = format!(
                    "stop (dry run): SIGTERM, then SIGKILL after {grace_s}s, then remove; only what carries {label}\n"
                );
                for w in nodes {
                    match &w.looks_for {
                        Some(l) => out.push_str(&format!("  {}: {l}\n", w.node)),
                        None if w.found.is_empty() => {
                            out.push_str(&format!("  {}: nothing to stop\n", w.node))
                        }
                        None => {
                            for e in &w.found {
                                let what = match e.runtime {
                                    RuntimeKind::Docker => "container",
                                    RuntimeKind::Host => "process",
                                };
                                out.push_str(&format!(
                                    "  {}: would stop and remove {what} {} ({})\n",
                                    w.node, e.name, e.state
                                ));
                            }
                        }
                    }
                }
                out.trim_end().to_string()
            }
            StopReport::Stopped {
                job,
                nodes,
                stopped,
                ..
            } => {
                let count: usize = stopped.iter().map(|s| s.removed.len()).sum();
                if count == 0 {
                    return match job {
                        Some(j) => format!("nothing to stop: no job named {j} on {}", join(nodes)),
                        None => format!("nothing to stop on {}", join(nodes)),
                    };
                }
                let mut lines = Vec::new();
                for s in stopped {
                    for name in &s.removed {
                        lines.push(format!("{}: removed {name}", s.node));
                    }
                }
                lines.join("\n")
            }
        }
    }

    fn ending(&self) -> Ending {
        match self {
            StopReport::Planned { failed, .. } if !failed.is_empty() => Ending::Failed,
            StopReport::Stopped { failed, .. } if !failed.is_empty() => Ending::Error {
                code: 1,
                message: format!(
                    "stop failed on {}: what could be stopped elsewhere was",
                    join(&failed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
                ),
            },
            _ => Ending::Ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{CacheSeen, CacheSize, JobLink, StatusRow};
    use crate::runtime::JobEntry;
    use crate::workload::engines::LinkVerdict;

    fn row(node: &str, role: &str) -> StatusRow {
        StatusRow {
            entry: JobEntry {
                job: "ll".into(),
                node: NodeName::new(node).unwrap(),
                role: Some(role.into()),
                name: format!("sl-ll-{node}"),
                runtime: RuntimeKind::Docker,
                state: "running".into(),
                exit_code: None,
                image: "ghcr.io/ggml-org/llama.cpp:full-cuda".into(),
                started_at: None,
                ports: vec![8080],
                bind: None,
                memory_limit: None,
                oom_killed: false,
                workload: Some("llamacpp".into()),
                runtime_cache: None,
            },
            uptime_s: Some(65),
            nccl: None,
            nccl_mapped: None,
        }
    }

    fn report(caches: Vec<CacheSeen>) -> StatusReport {
        let node = NodeName::new("spark").unwrap();
        StatusReport {
            job: None,
            nodes: vec![node.clone()],
            rows: vec![StatusRow {
                entry: JobEntry {
                    job: "demo".into(),
                    node: node.clone(),
                    role: Some("head".into()),
                    name: "sl-demo-spark".into(),
                    runtime: RuntimeKind::Docker,
                    state: "running".into(),
                    exit_code: None,
                    image: "img".into(),
                    started_at: None,
                    ports: vec![8000],
                    bind: None,
                    memory_limit: None,
                    oom_killed: false,
                    workload: None,
                    runtime_cache: caches.first().map(|c| c.folder.clone()),
                },
                uptime_s: None,
                nccl: None,
                nccl_mapped: None,
            }],
            failed: Vec::new(),
            startup: None,
            events: Vec::new(),
            links: Vec::new(),
            runtime_caches: caches,
        }
    }

    fn seen(node: &str, folder: &str, size: CacheSize) -> CacheSeen {
        CacheSeen {
            node: NodeName::new(node).unwrap(),
            folder: folder.into(),
            jobs: vec!["demo".into()],
            size,
        }
    }

    #[test]
    fn status_says_a_llama_cpp_job_s_rpc_transport_under_its_table() {
        let report = StatusReport {
            job: None,
            nodes: vec![NodeName::new("a").unwrap(), NodeName::new("b").unwrap()],
            rows: vec![row("a", "head"), row("b", "worker")],
            failed: Vec::new(),
            startup: None,
            events: Vec::new(),
            links: vec![JobLink {
                job: "ll".into(),
                link: LinkVerdict {
                    what: "RPC transport".into(),
                    verdict: "not recorded".into(),
                },
            }],
            runtime_caches: Vec::new(),
        };
        let text = report.text();
        assert!(
            text.ends_with("\nll: RPC transport: not recorded"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.json().unwrap()).unwrap();
        assert_eq!(
            json["links"],
            serde_json::json!([{"job": "ll", "what": "RPC transport", "verdict": "not recorded"}])
        );
        assert_eq!(json["jobs"][0]["workload"], "llamacpp");
    }

    #[test]
    fn status_shows_each_runtime_cache_with_its_size_absent_or_not_recorded() {
        let r = report(vec![
            seen(
                "spark",
                "/home/u/.cache/spark-launch/runtime/vllm/a--b/img-0123abcd",
                CacheSize::Present {
                    kib: 3 << 20,
                    partial: false,
                },
            ),
            seen("spark2", "/home/u/x", CacheSize::Absent),
            seen(
                "spark3",
                "/home/u/y",
                CacheSize::NotRecorded {
                    why: "du did not finish within 60 s".into(),
                },
            ),
        ]);
        let text = r.text();
        assert!(text.contains("runtime caches"), "{text}");
        assert!(
            text.contains(&format!(
                "spark  {}  /home/u/.cache/spark-launch/runtime/vllm/a--b/img-0123abcd",
                crate::progress::human_bytes(3 << 30)
            )),
            "{text}"
        );
        assert!(text.contains("spark2  absent  /home/u/x"), "{text}");
        assert!(
            text.contains("spark3  not recorded (du did not finish within 60 s)  /home/u/y"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&r.json().unwrap()).unwrap();
        let caches = json["runtime_caches"].as_array().unwrap();
        assert_eq!(caches[0]["state"], "present");
        assert_eq!(caches[0]["kib"], 3 << 20);
        assert_eq!(caches[1]["state"], "absent");
        assert_eq!(caches[2]["state"], "not-recorded");
        assert_eq!(
            json["jobs"][0]["runtime_cache"],
            "/home/u/.cache/spark-launch/runtime/vllm/a--b/img-0123abcd"
        );
    }

    #[test]
    fn status_of_work_without_a_runtime_cache_says_nothing_of_one() {
        let text = report(Vec::new()).text();
        assert!(!text.contains("runtime cache"), "{text}");
    }
}
