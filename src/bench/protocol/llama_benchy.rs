//! llama-benchy's protocol (its 0.4 release): the grid (every depth × pp × tg × concurrency,
//! in that nesting), each cell run `runs` times after one warm-up run, every request a
//! streamed chat completion of `[system: previous conversation, user: prompt]`; with
//! `--enable-prefix-caching` and a depth, each run first loads the conversation alone (a
//! context phase, reported as `ctx_pp`/`ctx_tg`) and then asks the prompt after it.
//!
//! Its metrics, per request: `ttfr` (time to the first chunk), `e2e_ttft` (to the first
//! generated token), `est_ppt = ttfr − latency` (the server's prefill alone, the round trip
//! of an idle request taken off), pp t/s `= prompt tokens / est_ppt`, tg t/s `= (tokens − 1)
//! / (t_last − t_first)`. Per run of a cell at concurrency > 1: pp t/s `= all prompt tokens /
//! (last first token − first start)` and tg t/s `= all tokens after each first / (last token −
//! first first token)`. Each figure is the mean and (population) standard deviation over the
//! runs, in the JSON file llama-benchy's `--save-result FILE --format json` writes.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The release whose definitions this follows.
pub const PROTOCOL_VERSION: &str = "0.4.0";

/// The user turn of a context-load request (llama-benchy sends "." since a server may refuse
/// an empty one).
pub const CONTEXT_LOAD_USER_MESSAGE: &str = ".";

/// The warm-up text whose server-side count gives the chat template's overhead.
pub const WARMUP_TEXT: &str =
    "Warmup Warmup Warmup Warmup Warmup Warmup Warmup Warmup Warmup Warmup ";

/// How the idle round trip (taken off `ttfr` for `est_ppt`) is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LatencyMode {
    /// `GET /models`, three times.
    Api,
    /// A one-token generation, three times (time to its first chunk).
    Generation,
    /// Taken as 0.
    None,
}

impl LatencyMode {
    pub fn name(self) -> &'static str {
        match self {
            LatencyMode::Api => "api",
            LatencyMode::Generation => "generation",
            LatencyMode::None => "none",
        }
    }
}

/// llama-benchy's options, with its defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchyOptions {
    pub pp: Vec<u32>,
    pub tg: Vec<u32>,
    pub depth: Vec<u32>,
    pub concurrency: Vec<u32>,
    pub runs: u32,
    pub no_cache: bool,
    pub enable_prefix_caching: bool,
    pub no_warmup: bool,
    pub adapt_prompt: bool,
    pub latency_mode: LatencyMode,
}

impl Default for BenchyOptions {
    fn default() -> BenchyOptions {
        BenchyOptions {
            pp: vec![2048],
            tg: vec![32],
            depth: vec![0],
            concurrency: vec![1],
            runs: 3,
            no_cache: false,
            enable_prefix_caching: false,
            no_warmup: false,
            adapt_prompt: true,
            latency_mode: LatencyMode::Api,
        }
    }
}

impl BenchyOptions {
    /// What cannot be run, every problem at once.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (name, v) in [
            ("--pp", &self.pp),
            ("--tg", &self.tg),
            ("--depth", &self.depth),
            ("--concurrency", &self.concurrency),
        ] {
            if v.is_empty() {
                p.push(format!("{name} needs at least one value"));
            }
        }
        if self.pp.contains(&0) {
            p.push("--pp 0 sends no prompt: give at least 1".into());
        }
        if self.tg.contains(&0) {
            p.push("--tg 0 generates nothing: give at least 1".into());
        }
        if self.concurrency.contains(&0) {
            p.push("--concurrency 0 sends nothing: give at least 1".into());
        }
        if self.runs == 0 {
            p.push("--runs 0 measures nothing: give at least 1".into());
        }
        p
    }
}

/// One cell of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    pub pp: u32,
    pub tg: u32,
    pub depth: u32,
    pub concurrency: u32,
}

/// The cells in llama-benchy's order: depth, then pp, then tg, then concurrency.
pub fn cells(o: &BenchyOptions) -> Vec<Cell> {
    let mut out = Vec::new();
    for &depth in &o.depth {
        for &pp in &o.pp {
            for &tg in &o.tg {
                for &concurrency in &o.concurrency {
                    out.push(Cell {
                        pp,
                        tg,
                        depth,
                        concurrency,
                    });
                }
            }
        }
    }
    out
}

/// The prompt and depth a run asks for once the template's overhead (`delta_user` tokens
/// around a user turn, `delta_context` around a system turn) is taken off, as llama-benchy's
/// `--adapt-prompt` does: off the prompt at depth 0, off the depth otherwise.
pub fn adapted(cell: Cell, adapt: bool, delta_user: i64, delta_context: i64) -> (u32, u32) {
    if !adapt {
        return (cell.pp, cell.depth);
    }
    if cell.depth == 0 {
        ((cell.pp as i64 - delta_user).max(1) as u32, 0)
    } else {
        (cell.pp, (cell.depth as i64 - delta_context).max(1) as u32)
    }
}

/// The body of one benchmark request.
pub fn body(model: &str, context: &str, prompt: &str, max_tokens: u32, no_cache: bool) -> Value {
    let mut messages = Vec::new();
    if !context.is_empty() {
        messages.push(json!({"role": "system", "content": context}));
    }
    let user = if prompt.trim().is_empty() {
        CONTEXT_LOAD_USER_MESSAGE
    } else {
        prompt
    };
    messages.push(json!({"role": "user", "content": user}));
    let mut b = json!({
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": true,
        "return_token_ids": true,
        "stream_options": {"include_usage": true},
    });
    if no_cache {
        b["cache_prompt"] = json!(false);
    }
    b
}

/// One chunk of generated text (content or reasoning) as it arrived.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamPiece {
    pub at: f64,
    /// How many token ids the chunk carried (`return_token_ids`), if it carried them.
    pub token_ids: Option<u32>,
}

/// One request as observed, times in seconds from one epoch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedStream {
    pub start: f64,
    pub first_response: Option<f64>,
    pub first_token: Option<f64>,
    /// When each generated token arrived (after [`token_times`]).
    pub tokens: Vec<f64>,
    /// The server's count of the prompt (0: not reported).
    pub prompt_tokens: u32,
    pub error: Option<String>,
}

/// Each generated token's time and the number of tokens, from the chunks, as llama-benchy
/// counts them: the token ids of every chunk when every chunk has them (several in one chunk
/// spread evenly since the one before); else the server's completion count spread evenly
/// from the first chunk to the last; else one token per chunk.
pub fn token_times(pieces: &[StreamPiece], usage_completion: Option<u32>) -> Vec<f64> {
    if pieces.is_empty() {
        return Vec::new();
    }
    if pieces.iter().all(|p| p.token_ids.is_some()) {
        let mut out: Vec<f64> = Vec::new();
        let first = pieces[0].at;
        for p in pieces {
            let n = p.token_ids.unwrap_or(0);
            if n == 1 {
                out.push(p.at);
            } else if n > 1 {
                let last = out.last().copied().unwrap_or(first);
                let span = p.at - last;
                out.extend((1..=n).map(|i| last + span * i as f64 / n as f64));
            }
        }
        return out;
    }
    let times: Vec<f64> = pieces.iter().map(|p| p.at).collect();
    match usage_completion {
        Some(n) => spread(&times, n),
        None => times,
    }
}

fn spread(times: &[f64], n: u32) -> Vec<f64> {
    if n == 0 || times.is_empty() {
        return Vec::new();
    }
    let (first, last) = (times[0], times[times.len() - 1]);
    if n == 1 || times.len() == 1 || last <= first {
        return vec![first; n as usize];
    }
    let step = (last - first) / (n - 1) as f64;
    (0..n).map(|i| first + step * i as f64).collect()
}

/// A figure over the runs: llama-benchy's `{mean, std, values}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub mean: f64,
    pub std: f64,
    pub values: Vec<f64>,
}

impl Metric {
    /// `None` when nothing was measured. `std` is the population's, as numpy's default.
    pub fn of(values: &[f64], scale: f64) -> Option<Metric> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Some(Metric {
            mean: mean * scale,
            std: var.sqrt() * scale,
            values: values.iter().map(|v| v * scale).collect(),
        })
    }
}

/// One cell's figures, with llama-benchy's field names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkRun {
    pub concurrency: u32,
    pub context_size: u32,
    pub prompt_size: u32,
    pub response_size: u32,
    pub is_context_prefill_phase: bool,
    pub pp_throughput: Option<Metric>,
    pub pp_req_throughput: Option<Metric>,
    pub tg_throughput: Option<Metric>,
    pub tg_req_throughput: Option<Metric>,
    pub peak_throughput: Option<Metric>,
    pub peak_req_throughput: Option<Metric>,
    pub ttfr: Option<Metric>,
    pub est_ppt: Option<Metric>,
    pub e2e_ttft: Option<Metric>,
    pub throughput_over_time: Option<Vec<Vec<[f64; 2]>>>,
    pub requests_throughput_over_time: Option<Vec<Vec<Vec<[f64; 2]>>>>,
}

/// The whole file: llama-benchy's metadata, flattened, and its runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchyReport {
    pub version: String,
    pub timestamp: String,
    pub latency_mode: String,
    pub latency_ms: f64,
    pub model: String,
    pub prefix_caching_enabled: bool,
    pub max_concurrency: u32,
    pub benchmarks: Vec<BenchmarkRun>,
}

/// The tokens after the first one's time (the decode part).
fn after_first(times: &[f64]) -> usize {
    match times.first() {
        Some(&f) if times.len() >= 2 => times.iter().filter(|&&t| t > f).count(),
        _ => 0,
    }
}

/// The most tokens in any one second (over the whole span when it is shorter than a second).
pub fn peak(times: &[f64]) -> f64 {
    if times.is_empty() {
        return 0.0;
    }
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    let span = t[t.len() - 1] - t[0];
    if span > 0.0 && span < 1.0 {
        return t.len() as f64 / span;
    }
    let mut most = 0;
    let mut from = 0;
    for (end, &at) in t.iter().enumerate() {
        while from < end && t[from] <= at - 1.0 {
            from += 1;
        }
        most = most.max(end - from + 1);
    }
    most as f64
}

/// A cell's figures from its measured runs (each a batch of `concurrency` requests).
/// `expected_prompt`: the tokens each request's prompt was built to hold (the server's count is
/// taken instead when within 20% of it); `latency_s`: the idle round trip.
pub fn aggregate(
    cell: Cell,
    batches: &[Vec<ObservedStream>],
    latency_s: f64,
    expected_prompt: u32,
    context_phase: bool,
) -> BenchmarkRun {
    let mut pp_speeds = Vec::new();
    let mut tg_speeds = Vec::new();
    let mut ttfr = Vec::new();
    let mut est = Vec::new();
    let mut e2e = Vec::new();
    let mut batch_pp = Vec::new();
    let mut batch_tg = Vec::new();
    let mut peaks = Vec::new();
    let mut req_peaks = Vec::new();
    for batch in batches {
        let ok: Vec<&ObservedStream> = batch.iter().filter(|r| r.error.is_none()).collect();
        if ok.is_empty() {
            continue;
        }
        let mut prompt_sum = 0.0;
        let mut firsts = Vec::new();
        let mut lasts = Vec::new();
        let mut all = Vec::new();
        for r in &ok {
            all.extend_from_slice(&r.tokens);
            if !r.tokens.is_empty() {
                req_peaks.push(peak(&r.tokens));
                lasts.push(r.tokens[r.tokens.len() - 1]);
            }
            let expected = expected_prompt as f64;
            let prompt = if r.prompt_tokens > 0
                && ((r.prompt_tokens as f64) - expected).abs() < expected * 0.2
            {
                r.prompt_tokens as f64
            } else {
                expected
            };
            prompt_sum += prompt;
            let mut est_ppt = 0.0;
            if let Some(fr) = r.first_response {
                ttfr.push(fr - r.start);
            }
            if let Some(ft) = r.first_token {
                firsts.push(ft);
                e2e.push(ft - r.start);
                est_ppt = (r.first_response.map_or(0.0, |fr| fr - r.start) - latency_s).max(0.0);
                est.push(est_ppt);
            }
            if est_ppt > 0.0 {
                pp_speeds.push(prompt / est_ppt);
            }
            if r.tokens.len() > 1 {
                let decode = r.tokens[r.tokens.len() - 1] - r.tokens[0];
                let n = after_first(&r.tokens);
                if decode > 0.0 && n > 0 {
                    tg_speeds.push(n as f64 / decode);
                }
            }
        }
        if !firsts.is_empty() {
            let start = ok.iter().map(|r| r.start).fold(f64::INFINITY, f64::min);
            let last_first = firsts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let first_first = firsts.iter().copied().fold(f64::INFINITY, f64::min);
            if last_first - start > 0.0 {
                batch_pp.push(prompt_sum / (last_first - start));
            }
            if let Some(last) = lasts.iter().copied().reduce(f64::max) {
                let span = last - first_first;
                let n: usize = ok.iter().map(|r| after_first(&r.tokens)).sum();
                if span > 0.0 && n > 0 {
                    batch_tg.push(n as f64 / span);
                }
            }
        }
        if !all.is_empty() {
            peaks.push(peak(&all));
        }
    }
    let single = cell.concurrency == 1;
    let pp = Metric::of(if single { &pp_speeds } else { &batch_pp }, 1.0);
    let tg = Metric::of(if single { &tg_speeds } else { &batch_tg }, 1.0);
    BenchmarkRun {
        concurrency: cell.concurrency,
        context_size: cell.depth,
        prompt_size: cell.pp,
        response_size: cell.tg,
        is_context_prefill_phase: context_phase,
        pp_req_throughput: if single {
            pp.clone()
        } else {
            Metric::of(&pp_speeds, 1.0)
        },
        pp_throughput: pp,
        tg_req_throughput: if single {
            tg.clone()
        } else {
            Metric::of(&tg_speeds, 1.0)
        },
        tg_throughput: tg,
        peak_throughput: Metric::of(&peaks, 1.0),
        peak_req_throughput: Metric::of(&req_peaks, 1.0),
        ttfr: Metric::of(&ttfr, 1000.0),
        est_ppt: Metric::of(&est, 1000.0),
        e2e_ttft: Metric::of(&e2e, 1000.0),
        throughput_over_time: None,
        requests_throughput_over_time: None,
    }
}

/// One row of llama-benchy's table.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchyRow<'a> {
    pub test: String,
    pub t_s: Option<&'a Metric>,
    pub t_s_req: Option<&'a Metric>,
    pub peak: Option<&'a Metric>,
    pub ttfr: Option<&'a Metric>,
    pub est_ppt: Option<&'a Metric>,
    pub e2e_ttft: Option<&'a Metric>,
}

/// The table's rows, named as llama-benchy names them (`pp2048 @ d4096 (c2)`, `tg32`,
/// `ctx_pp @ d4096`, …).
pub fn rows(report: &BenchyReport) -> Vec<BenchyRow<'_>> {
    let mut out = Vec::new();
    for run in &report.benchmarks {
        let c = if report.max_concurrency > 1 {
            format!(" (c{})", run.concurrency)
        } else {
            String::new()
        };
        let (pp_name, tg_name) = if run.is_context_prefill_phase {
            (
                format!("ctx_pp @ d{}{c}", run.context_size),
                format!("ctx_tg @ d{}{c}", run.context_size),
            )
        } else {
            let d = if run.context_size > 0 {
                format!(" @ d{}", run.context_size)
            } else {
                String::new()
            };
            (
                format!("pp{}{d}{c}", run.prompt_size),
                format!("tg{}{d}{c}", run.response_size),
            )
        };
        if run.pp_throughput.is_some() {
            out.push(BenchyRow {
                test: pp_name,
                t_s: run.pp_throughput.as_ref(),
                t_s_req: run.pp_req_throughput.as_ref(),
                peak: None,
                ttfr: run.ttfr.as_ref(),
                est_ppt: run.est_ppt.as_ref(),
                e2e_ttft: run.e2e_ttft.as_ref(),
            });
        }
        if run.tg_throughput.is_some() || run.peak_throughput.is_some() {
            out.push(BenchyRow {
                test: tg_name,
                t_s: run.tg_throughput.as_ref(),
                t_s_req: run.tg_req_throughput.as_ref(),
                peak: run.peak_throughput.as_ref(),
                ttfr: None,
                est_ppt: None,
                e2e_ttft: None,
            });
        }
    }
    out
}

/// llama-benchy's markdown table (its `--format md`).
pub fn markdown(report: &BenchyReport) -> String {
    let f =
        |m: Option<&Metric>| m.map_or(String::new(), |m| format!("{:.2} ± {:.2}", m.mean, m.std));
    let many = report.max_concurrency > 1;
    let mut out = if many {
        "| model | test | t/s (total) | t/s (req) | peak t/s | ttfr (ms) | est_ppt (ms) | e2e_ttft (ms) |\n|:--|--:|--:|--:|--:|--:|--:|--:|\n".to_string()
    } else {
        "| model | test | t/s | peak t/s | ttfr (ms) | est_ppt (ms) | e2e_ttft (ms) |\n|:--|--:|--:|--:|--:|--:|--:|\n".to_string()
    };
    for r in rows(report) {
        let mut cols = vec![report.model.clone(), r.test.clone(), f(r.t_s)];
        if many {
            cols.push(f(r.t_s_req));
        }
        cols.extend([f(r.peak), f(r.ttfr), f(r.est_ppt), f(r.e2e_ttft)]);
        out.push_str(&format!("| {} |\n", cols.join(" | ")));
    }
    if report.benchmarks.is_empty() {
        out.push_str("No results collected. Check if the model is generating tokens.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn the_grid_nests_depth_then_pp_then_tg_then_concurrency() {
        let o = BenchyOptions {
            pp: vec![512, 1024],
            tg: vec![32],
            depth: vec![0, 4096],
            concurrency: vec![1, 2],
            ..BenchyOptions::default()
        };
        let c = cells(&o);
        assert_eq!(c.len(), 8);
        assert_eq!((c[0].depth, c[0].pp, c[0].concurrency), (0, 512, 1));
        assert_eq!((c[1].depth, c[1].pp, c[1].concurrency), (0, 512, 2));
        assert_eq!((c[2].depth, c[2].pp, c[2].concurrency), (0, 1024, 1));
        assert_eq!((c[4].depth, c[4].pp, c[4].concurrency), (4096, 512, 1));
        assert!(BenchyOptions::default().problems().is_empty());
        let bad = BenchyOptions {
            runs: 0,
            pp: vec![],
            concurrency: vec![0],
            ..BenchyOptions::default()
        };
        assert_eq!(bad.problems().len(), 3, "{:?}", bad.problems());
    }

    #[test]
    fn the_templates_overhead_comes_off_the_prompt_at_depth_0_else_off_the_depth() {
        let c = Cell {
            pp: 100,
            tg: 8,
            depth: 0,
            concurrency: 1,
        };
        assert_eq!(adapted(c, true, 7, 12), (93, 0));
        let d = Cell { depth: 1000, ..c };
        assert_eq!(adapted(d, true, 7, 12), (100, 988));
        assert_eq!(adapted(d, false, 7, 12), (100, 1000));
        assert_eq!(adapted(Cell { pp: 3, ..c }, true, 7, 0), (1, 0));
    }

    #[test]
    fn a_request_body_is_the_conversation_then_the_prompt_streamed_with_usage() {
        let b = body("m", "earlier", "now", 32, true);
        assert_eq!(b["messages"][0]["role"], "system");
        assert_eq!(b["messages"][1]["content"], "now");
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["cache_prompt"], false);
        let b = body("m", "", "", 1, false);
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
        assert_eq!(b["messages"][0]["content"], ".");
        assert!(b.get("cache_prompt").is_none());
    }

    #[test]
    fn tokens_are_counted_by_token_ids_else_by_usage_spread_evenly_else_one_per_chunk() {
        let p = |at, ids| StreamPiece { at, token_ids: ids };
        let ids = [p(1.0, Some(1)), p(2.0, Some(2)), p(3.0, Some(1))];
        assert_eq!(token_times(&ids, None), vec![1.0, 1.5, 2.0, 3.0]);
        let plain = [p(1.0, None), p(2.0, None), p(3.0, None)];
        assert_eq!(token_times(&plain, Some(5)), vec![1.0, 1.5, 2.0, 2.5, 3.0]);
        assert_eq!(token_times(&plain, None), vec![1.0, 2.0, 3.0]);
        assert!(token_times(&[], Some(3)).is_empty());
    }

    fn request(start: f64, first: f64, itl: f64, n: usize, prompt: u32) -> ObservedStream {
        ObservedStream {
            start,
            first_response: Some(first),
            first_token: Some(first),
            tokens: (0..n).map(|i| first + itl * i as f64).collect(),
            prompt_tokens: prompt,
            error: None,
        }
    }

    #[test]
    fn at_concurrency_one_the_figures_are_each_requests_own() {
        let cell = Cell {
            pp: 1000,
            tg: 11,
            depth: 0,
            concurrency: 1,
        };
        // Two runs: prefill 0.5 s then 1.0 s after a 0.1 s round trip; 10 tokens/s decode.
        let runs = vec![
            vec![request(0.0, 0.6, 0.1, 11, 1000)],
            vec![request(10.0, 11.1, 0.1, 11, 1000)],
        ];
        let r = aggregate(cell, &runs, 0.1, 1000, false);
        let pp = r.pp_throughput.unwrap();
        assert!(
            close(pp.values[0], 2000.0) && close(pp.values[1], 1000.0),
            "{pp:?}"
        );
        assert!(close(pp.mean, 1500.0) && close(pp.std, 500.0));
        let tg = r.tg_throughput.unwrap();
        assert!(close(tg.mean, 10.0), "{tg:?}");
        let ttfr = r.ttfr.unwrap();
        assert!(close(ttfr.values[0], 600.0) && close(ttfr.values[1], 1100.0));
        assert!(close(r.est_ppt.unwrap().values[0], 500.0));
        assert_eq!(r.pp_req_throughput, Some(pp));
        // The server's count is taken when it is near what was built, else what was built.
        let far = vec![vec![request(0.0, 0.6, 0.1, 2, 100)]];
        let r = aggregate(cell, &far, 0.1, 1000, false);
        assert!(close(r.pp_throughput.unwrap().mean, 2000.0));
    }

    #[test]
    fn above_concurrency_one_the_figures_span_the_whole_batch() {
        let cell = Cell {
            pp: 100,
            tg: 5,
            depth: 0,
            concurrency: 2,
        };
        // Both start at 0; first tokens at 1 and 2; each then 4 more tokens 0.5 s apart.
        let batch = vec![
            request(0.0, 1.0, 0.5, 5, 100),
            request(0.0, 2.0, 0.5, 5, 100),
        ];
        let r = aggregate(cell, &[batch], 0.0, 100, false);
        // 200 prompt tokens by the last first token (2 s).
        assert!(close(r.pp_throughput.as_ref().unwrap().mean, 100.0));
        // 8 tokens after the firsts, from the first first token (1 s) to the last token (4 s).
        assert!(close(r.tg_throughput.as_ref().unwrap().mean, 8.0 / 3.0));
        // Per request: 4 tokens in 2 s.
        assert!(close(r.tg_req_throughput.as_ref().unwrap().mean, 2.0));
        // A failed request counts in nothing.
        let mut failed = request(0.0, 0.1, 0.01, 5, 100);
        failed.error = Some("HTTP 500".into());
        let batch = vec![request(0.0, 1.0, 0.5, 5, 100), failed];
        let r = aggregate(cell, &[batch], 0.0, 100, false);
        assert!(close(r.pp_throughput.unwrap().mean, 100.0));
    }

    #[test]
    fn the_peak_is_the_most_tokens_in_one_second() {
        assert_eq!(peak(&[]), 0.0);
        let t: Vec<f64> = (0..30).map(|i| i as f64 * 0.1).collect();
        assert_eq!(peak(&t), 10.0);
        assert!(close(peak(&[0.0, 0.25, 0.5]), 6.0));
    }

    #[test]
    fn the_table_names_each_test_as_llama_benchy_does() {
        let m = Metric::of(&[1.0], 1.0);
        let run = |depth, ctx| BenchmarkRun {
            concurrency: 2,
            context_size: depth,
            prompt_size: 2048,
            response_size: 32,
            is_context_prefill_phase: ctx,
            pp_throughput: m.clone(),
            pp_req_throughput: m.clone(),
            tg_throughput: m.clone(),
            tg_req_throughput: m.clone(),
            peak_throughput: m.clone(),
            peak_req_throughput: m.clone(),
            ttfr: m.clone(),
            est_ppt: m.clone(),
            e2e_ttft: m.clone(),
            throughput_over_time: None,
            requests_throughput_over_time: None,
        };
        let report = BenchyReport {
            version: "x".into(),
            timestamp: "t".into(),
            latency_mode: "api".into(),
            latency_ms: 1.0,
            model: "m".into(),
            prefix_caching_enabled: true,
            max_concurrency: 2,
            benchmarks: vec![run(0, false), run(4096, true), run(4096, false)],
        };
        let names: Vec<String> = rows(&report).into_iter().map(|r| r.test).collect();
        assert_eq!(
            names,
            [
                "pp2048 (c2)",
                "tg32 (c2)",
                "ctx_pp @ d4096 (c2)",
                "ctx_tg @ d4096 (c2)",
                "pp2048 @ d4096 (c2)",
                "tg32 @ d4096 (c2)"
            ]
        );
        assert!(markdown(&report).contains("| m | pp2048 (c2) | 1.00 ± 0.00 |"));
    }
}
