//! The concurrency sweep: for each level, that many clients at once, each sending its next
//! request as soon as its last one finished (a closed loop, as vLLM's and SGLang's benchmarks
//! do), until the level's requests are done; then the level's figures. One status line per
//! level. Effects: the clients' requests; the figures come from `bench::measure`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::client::Client;
use super::measure::{LevelResult, Sample, requests_for, summarize};
use super::request::{Api, body, prompt};
use crate::progress::Reporter;

/// What every request of the sweep looks like, and the levels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepOptions {
    pub model: String,
    pub api: Api,
    /// Concurrent requests per level, in the order run.
    pub levels: Vec<u32>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// Requests per level; `None`: four rounds of the level's concurrency (at least 8).
    pub requests: Option<u32>,
    /// One request before the first level, not counted (a fresh server compiles and warms up).
    pub warmup: bool,
    /// Mixed into every prompt, so one run's prompts share no prefix with another's.
    pub seed: u64,
}

/// Runs every level; stops early only when interrupted or when the warm-up request fails.
pub async fn sweep(
    client: &Client,
    opts: &SweepOptions,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<Vec<LevelResult>, BenchError> {
    let opts = Arc::new(opts.clone());
    if opts.warmup {
        warm_up(
            client,
            opts.api,
            request_body(&opts, u64::MAX),
            reporter,
            cancel,
        )
        .await?;
    }
    let mut out = Vec::new();
    for (li, &level) in opts.levels.iter().enumerate() {
        let n = requests_for(level, opts.requests);
        let step = reporter.step(&format!(
            "concurrency {level}: {n} requests of {} prompt + {} output tokens",
            opts.prompt_tokens, opts.output_tokens
        ));
        let samples = run_level(client, &opts, li as u64, level, n, cancel).await;
        if cancel.is_cancelled() {
            return Err(BenchError::Interrupted);
        }
        let r = summarize(level, &samples);
        let figures = format!(
            "{:.1} output tok/s, {:.2} req/s{}",
            r.output_tokens_per_s,
            r.requests_per_s,
            r.ttft_ms
                .map(|t| format!(", TTFT p50 {:.0} ms", t.p50))
                .unwrap_or_default()
        );
        if r.failed == 0 {
            step.ok_with(&figures);
        } else {
            step.fail(&format!(
                "{} of {n} failed ({}); {figures}",
                r.failed,
                r.first_error.as_deref().unwrap_or("?")
            ));
        }
        out.push(r);
    }
    Ok(out)
}

/// One request before the measuring starts, not counted (a fresh server compiles and warms
/// up); its failure stops the benchmark with the server's answer.
pub async fn warm_up(
    client: &Client,
    api: Api,
    body: Vec<u8>,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<(), BenchError> {
    let step = reporter.step("warm up: 1 request, not counted");
    let mut conn = None;
    let s = client
        .stream(&mut conn, api, body, Instant::now(), cancel)
        .await;
    if cancel.is_cancelled() {
        return Err(BenchError::Interrupted);
    }
    if let Some(e) = s.error {
        step.fail(&e);
        return Err(BenchError::Server {
            url: client.base.to_string(),
            message: format!("the warm-up request failed: {e}"),
        });
    }
    step.ok();
    Ok(())
}

fn request_body(opts: &SweepOptions, index: u64) -> Vec<u8> {
    let p = prompt(opts.seed ^ index, opts.prompt_tokens);
    serde_json::to_vec(&body(opts.api, &opts.model, &p, opts.output_tokens)).unwrap_or_default()
}

/// `level` clients at once, `n` requests in all; every request's sample.
async fn run_level(
    client: &Client,
    opts: &Arc<SweepOptions>,
    level_index: u64,
    level: u32,
    n: u32,
    cancel: &CancellationToken,
) -> Vec<Sample> {
    let next = Arc::new(AtomicU32::new(0));
    let epoch = Instant::now();
    let mut clients = JoinSet::new();
    for _ in 0..level.min(n) {
        let (client, opts, next, cancel) =
            (client.clone(), opts.clone(), next.clone(), cancel.clone());
        clients.spawn(async move {
            let mut conn = None;
            let mut samples = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || cancel.is_cancelled() {
                    break;
                }
                let b = request_body(&opts, (level_index << 32) | u64::from(i));
                samples.push(client.stream(&mut conn, opts.api, b, epoch, &cancel).await);
            }
            samples
        });
    }
    let mut samples = Vec::with_capacity(n as usize);
    while let Some(r) = clients.join_next().await {
        if let Ok(mut s) = r {
            samples.append(&mut s);
        }
    }
    samples
}
