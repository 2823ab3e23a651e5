//! llm-inference-bench 0.6.2 ("lil", `llm_decode_bench.py`): its sustained-decode grid, its
//! metric definitions and its result file (`benchmark_results.json`), read from the tool's
//! own source and README at its 0.6.x release (the 0.6.2 changelog says results and defaults
//! are unchanged from 0.6.0).
//!
//! The grid is concurrency × context: by default concurrency 1, 2, 4, … 128 and contexts 0,
//! 16K, 32K, 64K and 128K tokens. Each cell keeps `concurrency` streams busy for `duration`
//! seconds (a finished stream is replaced at once) after the cell's own warm-up, and counts
//! the tokens generated inside that window. Its figures:
//! - aggregate decode tok/s = tokens generated inside the measured window / the window;
//! - TTFT = first streamed token − request start; ITL = (last token − first token) /
//!   (tokens − 1), only with two tokens or more; per-user tok/s = 1 / ITL;
//! - prefill tok/s = prompt tokens / TTFT, from the one scout request each non-zero context
//!   sends before its cells (it also fills the prefix cache the cells then reuse).
//!
//! A cell in which any stream failed is invalid: its throughput is `null`, never a number
//! made of the streams that happened to finish.
//!
//! Pure: the grid, the window arithmetic and the file's shape. The requests are `run`'s.

use std::collections::BTreeMap;

/// The tool's version this protocol follows.
pub const PROTOCOL_VERSION: &str = "0.6.2";
pub const CONCURRENCY: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
pub const CONTEXTS: [u32; 5] = [0, 16384, 32768, 65536, 131072];
pub const MAX_TOKENS: u32 = 2048;
pub const DURATION_S: f64 = 30.0;
/// The hidden warm-up before the grid: one stream at the largest context, this long.
pub const DECODE_WARMUP_S: f64 = 3.0;

/// The tool's generation request: asks for a long answer, so a stream runs for the window.
pub const GENERATION_PROMPT: &str = "Write an extremely detailed, comprehensive encyclopedia \
article about the complete history of mathematics from ancient Mesopotamia to 2025. Cover \
every civilization, every major mathematician, every theorem, proof, and breakthrough. \
Include detailed biographical information, historical context, and mathematical \
explanations. Do not summarize - provide maximum detail on every topic.";

/// One cell of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LilCell {
    pub concurrency: u32,
    pub context_tokens: u32,
}

/// The grid and its settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LilOptions {
    pub concurrency: Vec<u32>,
    pub contexts: Vec<u32>,
    pub max_tokens: u32,
    /// Seconds each cell is measured.
    pub duration_s: f64,
    /// Seconds of the hidden warm-up (0: none).
    pub decode_warmup_s: f64,
}

impl Default for LilOptions {
    fn default() -> Self {
        LilOptions {
            concurrency: CONCURRENCY.to_vec(),
            contexts: CONTEXTS.to_vec(),
            max_tokens: MAX_TOKENS,
            duration_s: DURATION_S,
            decode_warmup_s: DECODE_WARMUP_S,
        }
    }
}

impl LilOptions {
    /// What makes the options unusable, each said once.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            out.push("--concurrency takes numbers of 1 or more".into());
        }
        if self.contexts.is_empty() {
            out.push("--contexts needs at least one context length".into());
        }
        if self.max_tokens == 0 {
            out.push("--max-tokens must be at least 1".into());
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            out.push("--duration must be more than 0 seconds".into());
        }
        if !(self.decode_warmup_s.is_finite() && self.decode_warmup_s >= 0.0) {
            out.push("--decode-warmup-seconds must be 0 or more".into());
        }
        out
    }
}

/// The cells in the order the tool runs them: context by context, each over every
/// concurrency, so one scout per context fills the prefix cache its cells share.
pub fn cells(o: &LilOptions) -> Vec<LilCell> {
    o.contexts
        .iter()
        .flat_map(|&context_tokens| {
            o.concurrency.iter().map(move |&concurrency| LilCell {
                concurrency,
                context_tokens,
            })
        })
        .collect()
}

/// One stream of a cell: when it started and when each of its tokens arrived (seconds from
/// one epoch), and whether it failed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LilStream {
    pub start: f64,
    pub tokens: Vec<f64>,
    pub failed: bool,
}

/// TTFT of one stream, when it saw a token.
pub fn ttft(s: &LilStream) -> Option<f64> {
    s.tokens.first().map(|t| t - s.start)
}

/// ITL of one stream: (last − first) / (n − 1); not known below two tokens.
pub fn itl(s: &LilStream) -> Option<f64> {
    match (s.tokens.first(), s.tokens.last()) {
        (Some(f), Some(l)) if s.tokens.len() >= 2 => Some((l - f) / (s.tokens.len() - 1) as f64),
        _ => None,
    }
}

/// LilPrefill rate of a scout: prompt tokens / TTFT (not known without both).
pub fn prefill_tps(prompt_tokens: u32, ttft_s: f64) -> Option<f64> {
    (prompt_tokens > 0 && ttft_s > 0.0).then(|| f64::from(prompt_tokens) / ttft_s)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// One cell as the tool's file holds it (`results[]`): the tool's own field names.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LilCellResult {
    pub concurrency: u32,
    pub context_tokens: u32,
    /// Tokens per second across all streams in the window; `null` when the cell is invalid.
    pub aggregate_tps: Option<f64>,
    pub measurement_seconds: f64,
    pub measurement_wall_seconds: f64,
    /// Always false here: spark-launch does not run the tool's repetition guard.
    pub loop_detected: bool,
    /// spark-launch's additions (the tool's loader keeps only the fields it knows).
    pub completion_tokens_in_window: u64,
    pub streams: u32,
    pub failed_streams: u32,
    pub ttft_mean_s: Option<f64>,
    pub itl_mean_s: Option<f64>,
    pub per_user_tps: Option<f64>,
    pub error: Option<String>,
}

/// A cell's figures from its streams and its measured window `[from, to]`: only tokens
/// that arrived inside the window count; any failed stream makes the cell invalid.
pub fn aggregate(
    cell: LilCell,
    streams: &[LilStream],
    from: f64,
    to: f64,
    wall_s: f64,
) -> LilCellResult {
    let window = (to - from).max(0.0);
    let in_window: u64 = streams
        .iter()
        .map(|s| s.tokens.iter().filter(|&&t| t >= from && t <= to).count() as u64)
        .sum();
    let failed = streams.iter().filter(|s| s.failed).count() as u32;
    let ok: Vec<&LilStream> = streams.iter().filter(|s| !s.failed).collect();
    let ttfts: Vec<f64> = ok.iter().filter_map(|s| ttft(s)).collect();
    let itls: Vec<f64> = ok.iter().filter_map(|s| itl(s)).collect();
    let itl_mean = mean(&itls);
    let error = if failed > 0 {
        Some(format!("{failed} of {} streams failed", streams.len()))
    } else if window <= 0.0 {
        Some("the measured window is empty".into())
    } else {
        None
    };
    LilCellResult {
        concurrency: cell.concurrency,
        context_tokens: cell.context_tokens,
        aggregate_tps: error.is_none().then(|| in_window as f64 / window),
        measurement_seconds: window,
        measurement_wall_seconds: wall_s,
        loop_detected: false,
        completion_tokens_in_window: in_window,
        streams: streams.len() as u32,
        failed_streams: failed,
        ttft_mean_s: mean(&ttfts),
        itl_mean_s: itl_mean,
        per_user_tps: itl_mean.filter(|&i| i > 0.0).map(|i| 1.0 / i),
        error,
    }
}

/// A context's scout, as the tool's file holds it (`prefill{}`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LilPrefill {
    pub ttft_seconds: f64,
    pub prefill_seconds: f64,
    pub tok_per_sec: Option<f64>,
    pub client_ttft_seconds: f64,
    pub client_tok_per_sec: Option<f64>,
    pub prompt_tokens: u32,
    pub samples: u32,
    pub method: String,
}

impl LilPrefill {
    pub fn from_scout(prompt_tokens: u32, ttft_s: f64) -> LilPrefill {
        let tps = prefill_tps(prompt_tokens, ttft_s);
        LilPrefill {
            ttft_seconds: ttft_s,
            prefill_seconds: ttft_s,
            tok_per_sec: tps,
            client_ttft_seconds: ttft_s,
            client_tok_per_sec: tps,
            prompt_tokens,
            samples: 1,
            method: "client".into(),
        }
    }
}

/// The file's `metadata`: the fields spark-launch knows the value of.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LilMetadata {
    pub version: String,
    pub engine: String,
    pub model: String,
    pub server: String,
    pub timestamp: String,
    pub decode_mode: String,
    pub primary_decode_layer: String,
    pub duration_per_test: f64,
    pub request_count: u32,
    pub run_burst: bool,
    pub prefill_mode: String,
    pub skip_prefill: bool,
    pub decode_warmup_seconds: f64,
    pub max_tokens: u32,
    pub concurrency_levels: Vec<u32>,
    pub context_lengths: Vec<u32>,
    /// Who wrote the file: spark-launch, following the tool's protocol.
    pub generator: String,
}

/// The tool's `benchmark_results.json`, as far as spark-launch measures it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LilReport {
    pub metadata: LilMetadata,
    /// Context (as a string) → its scout.
    pub prefill: BTreeMap<String, LilPrefill>,
    pub results: Vec<LilCellResult>,
    /// Context → concurrency → aggregate tok/s (`null`: invalid cell), both keys strings.
    pub summary_table: BTreeMap<String, BTreeMap<String, Option<f64>>>,
    pub burst_results: Vec<LilCellResult>,
    pub burst_summary_table: BTreeMap<String, BTreeMap<String, Option<f64>>>,
}

/// The summary table of `results`, keyed as the tool keys it.
pub fn summary_table(results: &[LilCellResult]) -> BTreeMap<String, BTreeMap<String, Option<f64>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Option<f64>>> = BTreeMap::new();
    for r in results {
        out.entry(r.context_tokens.to_string())
            .or_default()
            .insert(r.concurrency.to_string(), r.aggregate_tps);
    }
    out
}

/// The tool's final matrix, as Markdown: contexts down, concurrency across, aggregate tok/s.
pub fn markdown(r: &LilReport) -> String {
    let conc = &r.metadata.concurrency_levels;
    let mut out = String::from("| ctx \\ conc |");
    for c in conc {
        out.push_str(&format!(" {c} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(conc.len()));
    out.push('\n');
    for ctx in &r.metadata.context_lengths {
        out.push_str(&format!("| {} |", context_label(*ctx)));
        for c in conc {
            let cell = r
                .results
                .iter()
                .find(|x| x.context_tokens == *ctx && x.concurrency == *c);
            let text = match cell {
                Some(x) => match (x.aggregate_tps, &x.error) {
                    (Some(t), _) => format!("{t:.1}"),
                    (None, _) => "ERROR".into(),
                },
                None => "skip".into(),
            };
            out.push_str(&format!(" {text} |"));
        }
        out.push('\n');
    }
    out
}

/// Whether a `benchmark_results.json` is one spark-launch wrote (its `metadata.generator`
/// names spark-launch): only such a file may be replaced by a new run.
pub fn written_by_us(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| {
            v.get("metadata")?
                .get("generator")?
                .as_str()
                .map(|g| g.starts_with("spark-launch "))
        })
        .unwrap_or(false)
}

/// `0`, `16K`, `128K`: the tool's context labels.
pub fn context_label(tokens: u32) -> String {
    if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}K", tokens / 1024)
    } else {
        tokens.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_file_naming_spark_launch_as_its_generator_is_ours_to_replace() {
        assert!(written_by_us(
            r#"{"metadata":{"generator":"spark-launch 0.1.0 (llm-inference-bench 0.6.2 protocol)"}}"#
        ));
        // The tool's own file has no generator field.
        assert!(!written_by_us(
            r#"{"metadata":{"version":"0.6.2"},"results":[]}"#
        ));
        assert!(!written_by_us("not json"));
    }

    #[test]
    fn the_default_grid_is_eight_concurrencies_over_five_contexts_to_128k() {
        let o = LilOptions::default();
        assert!(o.problems().is_empty());
        let c = cells(&o);
        assert_eq!(c.len(), 40);
        assert_eq!(
            c[0],
            LilCell {
                concurrency: 1,
                context_tokens: 0
            }
        );
        assert_eq!(
            c[39],
            LilCell {
                concurrency: 128,
                context_tokens: 131072
            }
        );
        // Context by context: one scout per context serves its cells.
        assert!(c[..8].iter().all(|x| x.context_tokens == 0));
        assert_eq!(context_label(131072), "128K");
        assert_eq!(context_label(0), "0");
    }

    #[test]
    fn only_tokens_inside_the_window_count_toward_aggregate_throughput() {
        // Two streams; the window is [10, 12]. LilStream a: 3 tokens inside, 2 outside.
        let a = LilStream {
            start: 9.0,
            tokens: vec![9.5, 10.0, 11.0, 12.0, 12.5],
            failed: false,
        };
        let b = LilStream {
            start: 10.5,
            tokens: vec![11.0, 11.5],
            failed: false,
        };
        let cell = LilCell {
            concurrency: 2,
            context_tokens: 0,
        };
        let r = aggregate(cell, &[a, b], 10.0, 12.0, 2.1);
        assert_eq!(r.completion_tokens_in_window, 5);
        assert_eq!(r.aggregate_tps, Some(2.5));
        assert_eq!(r.measurement_seconds, 2.0);
        // TTFT means 0.5 and 0.5; ITL (12.5-9.5)/4 = 0.75 and 0.5.
        assert_eq!(r.ttft_mean_s, Some(0.5));
        assert_eq!(r.itl_mean_s, Some(0.625));
        assert_eq!(r.per_user_tps, Some(1.6));
        assert!(r.error.is_none());
    }

    #[test]
    fn a_failed_stream_leaves_the_cells_throughput_null() {
        let ok = LilStream {
            start: 0.0,
            tokens: vec![0.1, 0.2],
            failed: false,
        };
        let bad = LilStream {
            start: 0.0,
            tokens: vec![],
            failed: true,
        };
        let r = aggregate(
            LilCell {
                concurrency: 2,
                context_tokens: 0,
            },
            &[ok, bad],
            0.0,
            1.0,
            1.0,
        );
        assert_eq!(r.aggregate_tps, None);
        assert_eq!(r.failed_streams, 1);
        let t = summary_table(&[r]);
        assert_eq!(t["0"]["2"], None);
    }

    #[test]
    fn itl_and_prefill_are_not_known_without_their_inputs() {
        let one = LilStream {
            start: 0.0,
            tokens: vec![0.3],
            failed: false,
        };
        assert_eq!(itl(&one), None);
        assert_eq!(ttft(&one), Some(0.3));
        assert_eq!(prefill_tps(16384, 2.0), Some(8192.0));
        assert_eq!(prefill_tps(0, 2.0), None);
        assert_eq!(prefill_tps(100, 0.0), None);
    }

    #[test]
    fn bad_options_are_each_named() {
        let o = LilOptions {
            concurrency: vec![0],
            contexts: vec![],
            max_tokens: 0,
            duration_s: 0.0,
            decode_warmup_s: -1.0,
        };
        assert_eq!(o.problems().len(), 5);
    }

    #[test]
    fn the_file_has_the_tools_top_level_keys_and_string_keyed_summary() {
        // Keys as llm_decode_bench.py 0.6.x's save_results writes them.
        let r = aggregate(
            LilCell {
                concurrency: 4,
                context_tokens: 16384,
            },
            &[LilStream {
                start: 0.0,
                tokens: vec![0.5, 1.0],
                failed: false,
            }],
            0.0,
            1.0,
            1.0,
        );
        let report = LilReport {
            metadata: LilMetadata {
                version: PROTOCOL_VERSION.into(),
                engine: String::new(),
                model: "m".into(),
                server: "http://127.0.0.1:8000".into(),
                timestamp: "2026-01-01T00:00:00".into(),
                decode_mode: "duration".into(),
                primary_decode_layer: "sustained_decode".into(),
                duration_per_test: 30.0,
                request_count: 0,
                run_burst: false,
                prefill_mode: "integrated_decode_scout".into(),
                skip_prefill: false,
                decode_warmup_seconds: 3.0,
                max_tokens: 2048,
                concurrency_levels: vec![4],
                context_lengths: vec![16384],
                generator: "spark-launch".into(),
            },
            prefill: [("16384".to_string(), LilPrefill::from_scout(16384, 2.0))].into(),
            summary_table: summary_table(std::slice::from_ref(&r)),
            results: vec![r],
            burst_results: vec![],
            burst_summary_table: BTreeMap::new(),
        };
        let v = serde_json::to_value(&report).unwrap();
        for k in [
            "metadata",
            "prefill",
            "results",
            "summary_table",
            "burst_results",
            "burst_summary_table",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["summary_table"]["16384"]["4"], 2.0);
        assert_eq!(v["prefill"]["16384"]["tok_per_sec"], 8192.0);
        assert_eq!(v["results"][0]["aggregate_tps"], 2.0);
        assert!(markdown(&report).contains("| 16K | 2.0 |"));
    }
}
