//! The live view of `status --watch [JOB]`: one [`LiveSample`] of the cluster built from captured
//! text — each node's `nvidia-smi` CSV and `/proc/meminfo`, the engine's Prometheus `/metrics`
//! page read twice a second apart (tokens/s is the generation counter's delta), the job's
//! parts as found by their labels, and the last lines of the job's event log — and shown as
//! plain text ([`LiveSample::text`]). What a node does not report is `None` (shown as `not
//! recorded`), never a guess.
//!
//! Metric names: vLLM's (v1 engine: `vllm:num_requests_running`, `vllm:num_requests_waiting`,
//! `vllm:kv_cache_usage_perc` or the older `vllm:gpu_cache_usage_perc`, a fraction despite the
//! name, `vllm:generation_tokens_total`, `vllm:spec_decode_num_accepted_tokens_total` over
//! `vllm:spec_decode_num_draft_tokens_total`) and SGLang's (`sglang:num_running_reqs`,
//! `sglang:num_queue_reqs`, `sglang:token_usage`, `sglang:generation_tokens_total`,
//! `sglang:spec_accept_rate`).
//!
//! Pure: text in, a sample out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One GPU as `nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
/// --format=csv,noheader,nounits` lists it; a field it does not support (`[N/A]`, `Not
/// Supported`: the GB10's unified memory) is `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub index: u32,
    pub name: String,
    pub util_pct: Option<f64>,
    pub mem_used_mib: Option<f64>,
    pub mem_total_mib: Option<f64>,
}

/// The node's memory from `/proc/meminfo` (on a Spark: the unified memory the GPU shares).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryReading {
    pub total_bytes: u64,
    pub available_bytes: u64,
}

impl MemoryReading {
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.available_bytes)
    }
}

/// One node of the sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReading {
    pub node: String,
    /// `None`: not recorded (`gpu_note` says why).
    pub gpus: Option<Vec<GpuReading>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_note: Option<String>,
    pub memory: Option<MemoryReading>,
}

/// What the engine's `/metrics` says; a field its page lacks is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineReading {
    pub url: String,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// KV-cache use, 0–1.
    pub kv_cache: Option<f64>,
    /// The generation counter's delta over the time between the two reads.
    pub generation_tokens_per_s: Option<f64>,
    pub generation_tokens_total: Option<f64>,
    /// Accepted over proposed draft tokens, 0–1, when speculative decoding runs.
    pub spec_acceptance: Option<f64>,
}

/// A part of the job (a container or process on a node) and its state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartState {
    pub node: String,
    pub name: String,
    pub state: String,
    pub exit_code: Option<i64>,
}

/// One line of the job's event log (`records/JOB/events.jsonl`); unknown fields are kept out,
/// missing ones empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    #[serde(default)]
    pub at: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default, deserialize_with = "any_text")]
    pub detail: String,
}

/// A detail that is text, or anything else shown as its JSON.
fn any_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(match v {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => String::new(),
        v => v.to_string(),
    })
}

/// One sample of the live view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveSample {
    /// When it was taken (RFC 3339, UTC).
    pub at: String,
    pub job: Option<String>,
    pub nodes: Vec<NodeReading>,
    pub parts: Vec<PartState>,
    /// `None`: no engine was asked (`engine_note` says why).
    pub engine: Option<EngineReading>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_note: Option<String>,
    pub events: Vec<EventLine>,
    /// Nodes that could not be asked, with why.
    pub unreachable: Vec<(String, String)>,
}

/// The marker lines of the node script's sections (`@@ NAME [TIME]`).
pub const SECTION: &str = "@@ ";

/// The script run on every node: `@@ nvidia-smi` (its CSV, or `absent`), `@@ meminfo`, and on
/// the head, with `metrics_url`, `@@ metrics T` twice, a second apart (T: the node's clock).
pub fn node_script(metrics_url: Option<&str>) -> String {
    let mut s = String::from(
        r#"echo '@@ nvidia-smi'
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits 2>&1 | head -n 64; else echo absent; fi
echo '@@ meminfo'
grep -E '^(MemTotal|MemAvailable):' /proc/meminfo 2>/dev/null
"#,
    );
    if let Some(url) = metrics_url {
        let url = crate::model::script::quote(url);
        s.push_str(&format!(
            r#"if [ -n "${{EPOCHREALTIME:-}}" ]; then now() {{ t=${{EPOCHREALTIME/,/.}}; }}; else now() {{ t=$(date +%s.%N); }}; fi
for i in 1 2; do
  [ "$i" = 2 ] && sleep 1
  now; echo "@@ metrics $t"
  curl -s --max-time 3 {url} 2>/dev/null
  echo
done
"#
        ));
    }
    s
}

/// [`node_script`]'s output, by section: `(name, argument, text)`.
fn sections(out: &str) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = Vec::new();
    for line in out.lines() {
        if let Some(head) = line.strip_prefix(SECTION) {
            let (name, arg) = head.split_once(' ').unwrap_or((head, ""));
            v.push((name.to_string(), arg.trim().to_string(), String::new()));
        } else if let Some(last) = v.last_mut() {
            last.2.push_str(line);
            last.2.push('\n');
        }
    }
    v
}

/// A node's sample from [`node_script`]'s output; with the metrics sections, the engine's too.
pub fn node_sample(
    node: &str,
    out: &str,
    metrics_url: Option<&str>,
) -> (NodeReading, Option<EngineReading>) {
    let mut n = NodeReading {
        node: node.to_string(),
        gpus: None,
        gpu_note: Some("not recorded".into()),
        memory: None,
    };
    let mut pages: Vec<(Option<f64>, String)> = Vec::new();
    for (name, arg, text) in sections(out) {
        match name.as_str() {
            "nvidia-smi" => match gpus(&text) {
                Ok(g) => {
                    n.gpus = Some(g);
                    n.gpu_note = None;
                }
                Err(why) => n.gpu_note = Some(why),
            },
            "meminfo" => n.memory = meminfo(&text),
            "metrics" => pages.push((arg.parse().ok(), text)),
            _ => {}
        }
    }
    let engine = metrics_url.map(|url| {
        let mut e = engine(&pages.first().map(|p| p.1.clone()).unwrap_or_default());
        e.url = url.to_string();
        if let [(Some(t1), a), (Some(t2), b)] = pages.as_slice() {
            let (c1, c2) = (
                engine(a).generation_tokens_total,
                engine(b).generation_tokens_total,
            );
            if let (Some(c1), Some(c2)) = (c1, c2)
                && *t2 > *t1
                && c2 >= c1
            {
                e.generation_tokens_per_s = Some((c2 - c1) / (t2 - t1));
            }
            e.generation_tokens_total = c2.or(c1);
        }
        e
    });
    (n, engine)
}

/// The GPUs of an `nvidia-smi` CSV, or why there are none (`absent`: not installed).
pub fn gpus(csv: &str) -> Result<Vec<GpuReading>, String> {
    let text = csv.trim();
    if text == "absent" {
        return Err("nvidia-smi is not installed".into());
    }
    if text.is_empty() {
        return Err("nvidia-smi printed nothing".into());
    }
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let Some(index) = f.first().and_then(|i| i.parse().ok()) else {
            // `NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver`.
            return Err(format!("nvidia-smi: {}", line.trim()));
        };
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        out.push(GpuReading {
            index,
            name: f.get(1).map(|s| s.to_string()).unwrap_or_default(),
            util_pct: num(2),
            mem_used_mib: num(3),
            mem_total_mib: num(4),
        });
    }
    Ok(out)
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo` (kB).
pub fn meminfo(text: &str) -> Option<MemoryReading> {
    let kb = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
            .map(|v| v * 1024)
    };
    Some(MemoryReading {
        total_bytes: kb("MemTotal:")?,
        available_bytes: kb("MemAvailable:")?,
    })
}

/// Every series of a Prometheus text page, by metric name: `(sum, max)` over its label sets.
pub fn metrics(page: &str) -> BTreeMap<String, (f64, f64)> {
    let mut m: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in page.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => (&line[..i], &line[i..]),
            None => continue,
        };
        let rest = match rest.strip_prefix('{') {
            Some(r) => match r.rfind('}') {
                Some(i) => &r[i + 1..],
                None => continue,
            },
            None => rest,
        };
        let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        if !v.is_finite() {
            continue;
        }
        let e = m.entry(name.to_string()).or_insert((0.0, f64::MIN));
        e.0 += v;
        e.1 = e.1.max(v);
    }
    m
}

/// What a `/metrics` page says of the engine (vLLM's, SGLang's or Atlas's names; Atlas's page
/// has no queue or KV-cache figure).
pub fn engine(page: &str) -> EngineReading {
    let m = metrics(page);
    let sum = |names: &[&str]| names.iter().find_map(|n| m.get(*n).map(|v| v.0));
    let max = |names: &[&str]| names.iter().find_map(|n| m.get(*n).map(|v| v.1));
    let spec = match (
        sum(&["vllm:spec_decode_num_accepted_tokens_total"]),
        sum(&["vllm:spec_decode_num_draft_tokens_total"]),
    ) {
        (Some(a), Some(d)) if d > 0.0 => Some(a / d),
        _ => max(&["sglang:spec_accept_rate"]),
    };
    EngineReading {
        url: String::new(),
        running: sum(&[
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "atlas_requests_active",
        ]),
        waiting: sum(&["vllm:num_requests_waiting", "sglang:num_queue_reqs"]),
        kv_cache: max(&[
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
        ]),
        generation_tokens_per_s: None,
        generation_tokens_total: sum(&[
            "vllm:generation_tokens_total",
            "sglang:generation_tokens_total",
            "atlas_generation_tokens_total",
        ]),
        spec_acceptance: spec,
    }
}

/// The last `n` events of an `events.jsonl`; lines that are not JSON objects are skipped.
pub fn last_events(text: &str, n: usize) -> Vec<EventLine> {
    let all: Vec<EventLine> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<EventLine>(l).ok())
        .collect();
    all[all.len().saturating_sub(n)..].to_vec()
}

fn gib(bytes: f64) -> String {
    format!("{:.1}", bytes / (1024.0 * 1024.0 * 1024.0))
}

fn or_nr(v: Option<String>) -> String {
    v.unwrap_or_else(|| "not recorded".into())
}

impl NodeReading {
    /// `spark1: GPU 0 NVIDIA GB10 87% · memory 64.2 / 119.7 GiB used (/proc/meminfo)`.
    pub fn line(&self) -> String {
        let gpus = match &self.gpus {
            Some(g) if g.is_empty() => "no GPU listed by nvidia-smi".to_string(),
            Some(g) => g
                .iter()
                .map(|g| {
                    let mem = match (g.mem_used_mib, g.mem_total_mib) {
                        (Some(u), Some(t)) => {
                            format!(", {} / {} GiB", gib(u * 1048576.0), gib(t * 1048576.0))
                        }
                        _ => String::new(),
                    };
                    format!(
                        "GPU {} {} {}{mem}",
                        g.index,
                        g.name,
                        or_nr(g.util_pct.map(|u| format!("{u:.0}%")))
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            None => format!("GPU {}", self.gpu_note.as_deref().unwrap_or("not recorded")),
        };
        let memory = match self.memory {
            Some(m) => format!(
                "memory {} / {} GiB used",
                gib(m.used_bytes() as f64),
                gib(m.total_bytes as f64)
            ),
            None => "memory not recorded".into(),
        };
        format!("{}: {gpus} · {memory}", self.node)
    }
}

impl EngineReading {
    /// `running 3 · waiting 0 · KV cache 12.5% · 151.3 tokens/s · speculative acceptance 70.0%`.
    pub fn line(&self) -> String {
        let n = |v: Option<f64>| or_nr(v.map(|v| format!("{v:.0}")));
        let pct = |v: Option<f64>| or_nr(v.map(|v| format!("{:.1}%", v * 100.0)));
        let mut s = format!(
            "requests running {} · waiting {} · KV cache {} · generation {}",
            n(self.running),
            n(self.waiting),
            pct(self.kv_cache),
            or_nr(
                self.generation_tokens_per_s
                    .map(|v| format!("{v:.1} tokens/s"))
            )
        );
        if let Some(a) = self.spec_acceptance {
            s.push_str(&format!(" · speculative acceptance {:.1}%", a * 100.0));
        }
        s
    }
}

impl LiveSample {
    /// The sample as plain text (what a pipe gets, one sample after another).
    pub fn text(&self) -> String {
        let mut out = format!(
            "{} · {}\n",
            self.job
                .as_ref()
                .map(|j| format!("job {j}"))
                .unwrap_or_else(|| "every job".into()),
            self.at
        );
        out.push_str("nodes\n");
        for n in &self.nodes {
            out.push_str(&format!("  {}\n", n.line()));
        }
        for (node, why) in &self.unreachable {
            out.push_str(&format!("  {node}: could not be asked: {why}\n"));
        }
        match (&self.engine, &self.engine_note) {
            (Some(e), _) => out.push_str(&format!("engine ({})\n  {}\n", e.url, e.line())),
            (None, Some(why)) => out.push_str(&format!("engine\n  {why}\n")),
            (None, None) => {}
        }
        out.push_str("job\n");
        if self.parts.is_empty() {
            out.push_str("  nothing running\n");
        }
        for p in &self.parts {
            let code = p.exit_code.map(|c| format!(" ({c})")).unwrap_or_default();
            out.push_str(&format!("  {}: {} {}{code}\n", p.node, p.name, p.state));
        }
        if self.job.is_some() {
            out.push_str("events\n");
            if self.events.is_empty() {
                out.push_str("  none recorded\n");
            }
            for e in &self.events {
                out.push_str(&format!("  {} {} {}\n", e.at, e.kind, e.detail));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serving stand-in's /metrics page (tests/standin/vllm `Decoder.metrics`, vLLM's names
    /// and labels), captured from it with 3 speculative tokens after two 4-token completions,
    /// idle (nothing running).
    const STANDIN_METRICS: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="spark-test/tiny"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="spark-test/tiny"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="spark-test/tiny"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="spark-test/tiny"} 0.0
# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="spark-test/tiny"} 10.0
# HELP vllm:generation_tokens Number of generation tokens processed.
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="spark-test/tiny"} 8.0
# HELP vllm:request_success Count of successfully processed requests.
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",model_name="spark-test/tiny",finished_reason="length"} 2.0
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="spark-test/tiny"} 8.0
# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="spark-test/tiny"} 24.0
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="spark-test/tiny"} 7.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="spark-test/tiny",position="0"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="spark-test/tiny",position="1"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="spark-test/tiny",position="2"} 0.0
"#;

    #[test]
    fn vllms_metric_names_give_requests_kv_cache_and_spec_acceptance() {
        let e = engine(STANDIN_METRICS);
        assert_eq!(e.running, Some(0.0));
        assert_eq!(e.waiting, Some(0.0));
        assert_eq!(e.kv_cache, Some(0.0));
        assert_eq!(e.generation_tokens_total, Some(8.0));
        // Accepted over proposed draft tokens, not the per-position counter.
        assert_eq!(e.spec_acceptance, Some(7.0 / 24.0));
        assert_eq!(e.generation_tokens_per_s, None);
        // A page without speculative decoding says nothing of it.
        let e = engine("vllm:num_requests_running{engine=\"0\"} 0\n");
        assert_eq!(e.spec_acceptance, None);
        assert_eq!(e.kv_cache, None);
        assert_eq!(
            e.line(),
            "requests running 0 · waiting not recorded · KV cache not recorded · generation not recorded"
        );
    }

    #[test]
    fn sglangs_metric_names_are_read_too() {
        // tests/standin/vllm `sglang_metrics`: SGLang's names and labels.
        let page = r#"sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 2.0
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 0.0
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 0.25
sglang:spec_accept_rate{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"} 0.6
sglang:generation_tokens_total{model_name="m",engine_type="unified",is_streaming="true"} 50.0
"#;
        let e = engine(page);
        assert_eq!(
            (e.running, e.waiting, e.kv_cache, e.spec_acceptance),
            (Some(2.0), Some(0.0), Some(0.25), Some(0.6))
        );
        assert_eq!(e.generation_tokens_total, Some(50.0));
    }

    #[test]
    fn tokens_per_second_is_the_counters_delta_between_two_reads() {
        let second = STANDIN_METRICS.replace(
            "model_name=\"spark-test/tiny\"} 8.0",
            "model_name=\"spark-test/tiny\"} 158.0",
        );
        let out = format!(
            "@@ nvidia-smi\nabsent\n@@ meminfo\nMemTotal:       125000000 kB\nMemAvailable:    25000000 kB\n@@ metrics 100.0\n{STANDIN_METRICS}\n@@ metrics 101.5\n{second}\n"
        );
        let (n, e) = node_sample("spark1", &out, Some("http://127.0.0.1:8000/metrics"));
        let e = e.unwrap();
        assert_eq!(e.generation_tokens_per_s, Some(100.0));
        assert_eq!(e.generation_tokens_total, Some(158.0));
        assert_eq!(e.url, "http://127.0.0.1:8000/metrics");
        assert_eq!(n.gpus, None);
        assert_eq!(n.gpu_note.as_deref(), Some("nvidia-smi is not installed"));
        assert_eq!(
            n.line(),
            "spark1: GPU nvidia-smi is not installed · memory 95.4 / 119.2 GiB used"
        );
        // A page that could not be read (the API is down): counts not recorded, not zero.
        let (_, e) = node_sample("spark1", "@@ metrics 1.0\n\n@@ metrics 2.0\n\n", Some("u"));
        let e = e.unwrap();
        assert_eq!((e.running, e.generation_tokens_per_s), (None, None));
    }

    #[test]
    fn nvidia_smi_csv_with_unified_memory_leaves_memory_to_meminfo() {
        // The GB10 reports no dedicated memory: `[N/A]` for memory.used and memory.total.
        let g = gpus("0, NVIDIA GB10, 87, [N/A], [N/A]\n").unwrap();
        assert_eq!(
            g,
            vec![GpuReading {
                index: 0,
                name: "NVIDIA GB10".into(),
                util_pct: Some(87.0),
                mem_used_mib: None,
                mem_total_mib: None,
            }]
        );
        let g = gpus("0, NVIDIA H100 80GB HBM3, 12, 40960, 81559\n").unwrap();
        assert_eq!(g[0].mem_total_mib, Some(81559.0));
        assert!(
            gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
                .unwrap_err()
                .starts_with("nvidia-smi: NVIDIA-SMI has failed")
        );
        assert_eq!(meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn events_are_the_last_lines_and_odd_lines_are_tolerated() {
        let text = r#"{"at":"2026-11-26T18:00:00Z","kind":"probe-failed","detail":"no token within 20s"}
not json
{"at":"2026-11-26T18:00:05Z","kind":"wedge","detail":{"after_s":25},"extra":1}
{"kind":"restart"}
"#;
        let e = last_events(text, 2);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].kind, "wedge");
        assert_eq!(e[0].detail, r#"{"after_s":25}"#);
        assert_eq!(e[1].at, "");
        assert_eq!(last_events("", 5), vec![]);
    }

    #[test]
    fn a_sample_reads_as_plain_text_and_says_what_was_not_recorded() {
        let s = LiveSample {
            at: "2026-11-26T18:00:00Z".into(),
            job: Some("demo".into()),
            nodes: vec![NodeReading {
                node: "spark1".into(),
                gpus: Some(gpus("0, NVIDIA GB10, 87, [N/A], [N/A]").unwrap()),
                gpu_note: None,
                memory: None,
            }],
            parts: vec![PartState {
                node: "spark1".into(),
                name: "sl-demo-spark1".into(),
                state: "running".into(),
                exit_code: None,
            }],
            engine: Some(EngineReading {
                url: "http://127.0.0.1:8000/metrics".into(),
                ..engine(STANDIN_METRICS)
            }),
            engine_note: None,
            events: vec![],
            unreachable: vec![("spark2".into(), "ssh: timed out".into())],
        };
        assert_eq!(
            s.text(),
            "job demo · 2026-11-26T18:00:00Z
nodes
  spark1: GPU 0 NVIDIA GB10 87% · memory not recorded
  spark2: could not be asked: ssh: timed out
engine (http://127.0.0.1:8000/metrics)
  requests running 0 · waiting 0 · KV cache 0.0% · generation not recorded · speculative acceptance 29.2%
job
  spark1: sl-demo-spark1 running
events
  none recorded
"
        );
    }
}
