//! The figures of a benchmark run, from what each request saw: per concurrency level the
//! output tokens per second, requests per second, time to first token (TTFT) and inter-token
//! latency (ITL) at p50 and p95, and the run as a whole (`BenchReport`, what `--json` prints
//! and the result file holds).
//!
//! Definitions (those of vLLM's `benchmark_serving`): TTFT is from sending a request to its
//! first chunk of generated text; ITL is every gap between two successive text chunks of one
//! request; a level's duration runs from its first request sent to its last one finished, and
//! its rates are what finished in that time. Output tokens are the server's own count (the
//! stream's `usage`) when every request reported it, else the text chunks counted.
//!
//! Pure: samples in, figures out. Timing the requests is `bench::client`'s job.

use serde::{Deserialize, Serialize};

use super::request::{Api, Usage};

/// One request as the client saw it; times in seconds since its level started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub sent: f64,
    /// When each chunk of generated text arrived.
    pub tokens: Vec<f64>,
    pub done: f64,
    pub usage: Option<Usage>,
    /// Why the request failed (it then counts as failed, whatever it received).
    pub error: Option<String>,
    /// It failed before the server took it: no connection, the request could not be sent, or
    /// the answer was 502/503 (a server restarting or not ready). Safe to send again.
    pub refused: bool,
    /// Only for a detailed stream (`Client::stream_detailed`): when the first chunk with a
    /// choice arrived, even one without text (a chat stream's role).
    pub first_response: Option<f64>,
    /// Only for a detailed stream: each chunk of generated content or reasoning, with the
    /// number of token ids it carried when the server sent them.
    pub pieces: Vec<(f64, Option<u32>)>,
}

impl Sample {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The 50th and 95th percentiles of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
}

/// Where a level's output token count comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenCount {
    /// The server's `usage.completion_tokens`, reported for every request.
    Usage,
    /// Text chunks counted (a server that reports no usage; one chunk is usually one token).
    Chunks,
}

/// One concurrency level's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelResult {
    /// Requests in flight at once.
    pub concurrency: u32,
    /// Requests that finished well.
    pub requests: u32,
    pub failed: u32,
    pub duration_s: f64,
    pub output_tokens: u64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    /// `None` when no request produced a token (nothing observed).
    pub ttft_ms: Option<Percentiles>,
    /// `None` when no request produced two tokens.
    pub itl_ms: Option<Percentiles>,
    /// What the server counted in the prompts; `None` when it did not say.
    pub mean_prompt_tokens: Option<f64>,
    pub mean_output_tokens: f64,
    pub tokens_counted_by: TokenCount,
    /// The first failure's reason, when some failed.
    pub first_error: Option<String>,
}

/// A whole run: what was asked of which server, and every level's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The result file's format (this is 1).
    pub version: u32,
    /// When the run started, UTC (`2026-11-23T20:41:58Z`).
    pub started_at: String,
    /// The API's base URL.
    pub url: String,
    /// The job benchmarked, when it was found by name.
    pub job: Option<String>,
    pub model: String,
    pub api: Api,
    /// Words (≈ tokens) per generated prompt.
    pub prompt_tokens: u32,
    /// Tokens asked for per request.
    pub output_tokens: u32,
    /// A sweep's levels (none for a soak).
    pub levels: Vec<LevelResult>,
    /// A soak run (`--soak`): its windows and stalls. Absent for a sweep (and in files of
    /// runs before soaks existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<super::soak::SoakReport>,
    /// Whether the model answered right before it was measured (`spark-launch check`'s
    /// questions), or `skipped (--skip-check)`. Absent in files of runs before the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_check: Option<String>,
}

impl BenchReport {
    pub const VERSION: u32 = 1;

    pub fn level(&self, concurrency: u32) -> Option<&LevelResult> {
        self.levels.iter().find(|l| l.concurrency == concurrency)
    }

    /// Requests that failed, over all levels (or the soak).
    pub fn failed(&self) -> u32 {
        self.levels.iter().map(|l| l.failed).sum::<u32>()
            + self.soak.as_ref().map_or(0, |s| s.failed)
    }
}

/// Requests sent at one level: `requests` when given, else four rounds of the level's
/// concurrency (at least 8), so every level runs long enough to be steady.
pub fn requests_for(concurrency: u32, requests: Option<u32>) -> u32 {
    requests.unwrap_or_else(|| (concurrency.saturating_mul(4)).max(8))
}

/// The `q`-quantile (0..=1) of ascending `sorted` values, interpolated linearly between the
/// two nearest ranks (numpy's default). `None` for no values.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * (n - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

fn percentiles_ms(mut values: Vec<f64>) -> Option<Percentiles> {
    values.sort_by(f64::total_cmp);
    Some(Percentiles {
        p50: percentile(&values, 0.50)? * 1000.0,
        p95: percentile(&values, 0.95)? * 1000.0,
    })
}

/// A level's figures from its requests.
pub fn summarize(concurrency: u32, samples: &[Sample]) -> LevelResult {
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok()).collect();
    let start = samples.iter().map(|s| s.sent).fold(f64::INFINITY, f64::min);
    let end = samples
        .iter()
        .map(|s| s.done)
        .fold(f64::NEG_INFINITY, f64::max);
    let duration_s = if samples.is_empty() {
        0.0
    } else {
        (end - start).max(0.0)
    };
    let by_usage = !ok.is_empty()
        && ok
            .iter()
            .all(|s| s.usage.and_then(|u| u.completion_tokens).is_some());
    let output_of = |s: &Sample| -> u64 {
        if by_usage {
            s.usage
                .and_then(|u| u.completion_tokens)
                .map(u64::from)
                .unwrap_or(0)
        } else {
            s.tokens.len() as u64
        }
    };
    let output_tokens: u64 = ok.iter().map(|s| output_of(s)).sum();
    let per_s = |n: f64| {
        if duration_s > 0.0 {
            n / duration_s
        } else {
            0.0
        }
    };
    let ttft = ok
        .iter()
        .filter_map(|s| s.tokens.first().map(|t| t - s.sent))
        .collect();
    let itl = ok
        .iter()
        .flat_map(|s| s.tokens.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let prompts: Vec<f64> = ok
        .iter()
        .filter_map(|s| s.usage.and_then(|u| u.prompt_tokens).map(f64::from))
        .collect();
    LevelResult {
        concurrency,
        requests: ok.len() as u32,
        failed: (samples.len() - ok.len()) as u32,
        duration_s,
        output_tokens,
        output_tokens_per_s: per_s(output_tokens as f64),
        requests_per_s: per_s(ok.len() as f64),
        ttft_ms: percentiles_ms(ttft),
        itl_ms: percentiles_ms(itl),
        mean_prompt_tokens: (!prompts.is_empty() && prompts.len() == ok.len())
            .then(|| prompts.iter().sum::<f64>() / prompts.len() as f64),
        mean_output_tokens: if ok.is_empty() {
            0.0
        } else {
            output_tokens as f64 / ok.len() as f64
        },
        tokens_counted_by: if by_usage {
            TokenCount::Usage
        } else {
            TokenCount::Chunks
        },
        first_error: samples.iter().find_map(|s| s.error.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request sent at `sent` whose `n` tokens arrive `ttft` later and then every `itl`.
    fn steady(sent: f64, ttft: f64, itl: f64, n: usize) -> Sample {
        let tokens: Vec<f64> = (0..n).map(|i| sent + ttft + itl * i as f64).collect();
        Sample {
            sent,
            done: *tokens.last().unwrap_or(&sent),
            tokens,
            usage: Some(Usage {
                prompt_tokens: Some(64),
                completion_tokens: Some(n as u32),
            }),
            error: None,
            refused: false,
            ..Sample::default()
        }
    }

    #[test]
    fn percentiles_interpolate_between_ranks_like_numpy() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(5.5));
        assert!((percentile(&v, 0.95).unwrap() - 9.55).abs() < 1e-9);
        assert_eq!(percentile(&[3.0], 0.95), Some(3.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn a_steady_stream_gives_back_its_own_rate_ttft_and_itl() {
        // Two requests at once, each 100 ms to the first token then one every 20 ms: 10
        // tokens in 0.28 s each, back to back twice per client.
        let samples: Vec<Sample> = [0.0, 0.0, 0.28, 0.28]
            .iter()
            .map(|&t| steady(t, 0.1, 0.02, 10))
            .collect();
        let l = summarize(2, &samples);
        assert_eq!((l.requests, l.failed, l.output_tokens), (4, 0, 40));
        assert!((l.duration_s - 0.56).abs() < 1e-9);
        assert!((l.output_tokens_per_s - 40.0 / 0.56).abs() < 1e-6);
        assert!((l.requests_per_s - 4.0 / 0.56).abs() < 1e-6);
        let ttft = l.ttft_ms.unwrap();
        assert!((ttft.p50 - 100.0).abs() < 1e-6 && (ttft.p95 - 100.0).abs() < 1e-6);
        let itl = l.itl_ms.unwrap();
        assert!((itl.p50 - 20.0).abs() < 1e-6, "{itl:?}");
        assert_eq!(l.mean_prompt_tokens, Some(64.0));
        assert_eq!(l.tokens_counted_by, TokenCount::Usage);
    }

    #[test]
    fn failed_requests_are_counted_apart_and_their_first_reason_kept() {
        let mut bad = steady(0.0, 0.1, 0.02, 3);
        bad.error = Some("HTTP 503: overloaded".into());
        let l = summarize(2, &[steady(0.0, 0.1, 0.02, 5), bad]);
        assert_eq!((l.requests, l.failed, l.output_tokens), (1, 1, 5));
        assert_eq!(l.first_error.as_deref(), Some("HTTP 503: overloaded"));
    }

    #[test]
    fn without_usage_tokens_are_counted_as_chunks_and_prompt_length_is_not_recorded() {
        let mut s = steady(0.0, 0.1, 0.02, 7);
        s.usage = None;
        let l = summarize(1, &[s]);
        assert_eq!(l.output_tokens, 7);
        assert_eq!(l.tokens_counted_by, TokenCount::Chunks);
        assert_eq!(l.mean_prompt_tokens, None);
    }

    #[test]
    fn a_level_where_nothing_came_back_has_no_latencies() {
        let s = Sample {
            sent: 0.0,
            done: 1.0,
            error: Some("connection refused".into()),
            ..Sample::default()
        };
        let l = summarize(4, &[s]);
        assert_eq!((l.requests, l.failed, l.output_tokens), (0, 1, 0));
        assert_eq!((l.ttft_ms, l.itl_ms), (None, None));
        assert_eq!(l.output_tokens_per_s, 0.0);
    }

    #[test]
    fn each_level_sends_four_rounds_of_its_concurrency_unless_told() {
        assert_eq!(requests_for(1, None), 8);
        assert_eq!(requests_for(32, None), 128);
        assert_eq!(requests_for(32, Some(10)), 10);
    }
}
