//! The requests of a protocol's cells, sent and timed: the warm-up that measures the chat
//! template's overhead, the idle round trip, then each cell's runs (a warm-up run first
//! unless `no_warmup`), every run a batch of `concurrency` streams at once, each on its own
//! keep-alive connection. What the times mean is `llama_benchy`'s.

use std::time::Instant;

use futures::StreamExt as _;
use futures::stream::FuturesOrdered;
use tokio_util::sync::CancellationToken;

use super::Rng;
use super::corpus::Corpus;
use super::llama_benchy::{
    self, BenchmarkRun, BenchyOptions, CONTEXT_LOAD_USER_MESSAGE, Cell, LatencyMode,
    ObservedStream, StreamPiece, WARMUP_TEXT,
};
use crate::bench::BenchError;
use crate::bench::client::{Client, Connection};
use crate::bench::measure::Sample;
use crate::bench::request::Api;
use crate::progress::Reporter;

/// What a protocol run measured.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    /// One entry per cell (two with a context phase), in the order they ran.
    pub runs: Vec<BenchmarkRun>,
    pub latency_s: f64,
    /// The chat template's tokens around a user turn and around a system turn, as the server
    /// counted them against the tokenizer (0 without a warm-up).
    pub delta_user: i64,
    pub delta_context: i64,
    /// Requests that failed (they count in no figure).
    pub failed: u32,
    pub requests: u32,
}

fn observed(s: &Sample) -> ObservedStream {
    let pieces: Vec<StreamPiece> = s
        .pieces
        .iter()
        .map(|&(at, token_ids)| StreamPiece { at, token_ids })
        .collect();
    let completion = s.usage.as_ref().and_then(|u| u.completion_tokens);
    ObservedStream {
        start: s.sent,
        first_response: s.first_response,
        first_token: pieces.first().map(|p| p.at),
        tokens: llama_benchy::token_times(&pieces, completion),
        prompt_tokens: s.usage.as_ref().and_then(|u| u.prompt_tokens).unwrap_or(0),
        error: s.error.clone(),
    }
}

struct Run<'a> {
    client: &'a Client,
    model: &'a str,
    epoch: Instant,
    conns: Vec<Option<Connection>>,
    cancel: &'a CancellationToken,
    failed: u32,
    requests: u32,
}

impl Run<'_> {
    /// One batch at once: `(context, prompt)` per stream.
    async fn batch(
        &mut self,
        asks: &[(String, String)],
        max_tokens: u32,
        no_cache: bool,
    ) -> Vec<ObservedStream> {
        if self.conns.len() < asks.len() {
            self.conns.resize_with(asks.len(), || None);
        }
        let (client, model, epoch, cancel) = (self.client, self.model, self.epoch, self.cancel);
        let futs = self
            .conns
            .iter_mut()
            .zip(asks)
            .map(|(conn, (ctx, prompt))| {
                let body = llama_benchy::body(model, ctx, prompt, max_tokens, no_cache).to_string();
                client.stream_detailed(conn, Api::Chat, body.into_bytes(), epoch, cancel)
            });
        // Every stream of the batch at once, their samples in the order asked.
        let samples: Vec<_> = futs.collect::<FuturesOrdered<_>>().collect().await;
        self.requests += samples.len() as u32;
        self.failed += samples.iter().filter(|s| !s.ok()).count() as u32;
        samples.iter().map(observed).collect()
    }

    /// The server's count of a one-token request's prompt.
    async fn prompt_count(&mut self, context: &str, prompt: &str) -> Result<Option<u32>, String> {
        let (client, model, epoch, cancel) = (self.client, self.model, self.epoch, self.cancel);
        let body = llama_benchy::body(model, context, prompt, 1, false).to_string();
        let s = client
            .stream_detailed(
                &mut self.conns[0],
                Api::Chat,
                body.into_bytes(),
                epoch,
                cancel,
            )
            .await;
        match &s.error {
            Some(e) => Err(e.clone()),
            None => Ok(s.usage.and_then(|u| u.prompt_tokens)),
        }
    }
}

/// Runs `cells` as llama-benchy runs its grid.
#[allow(clippy::too_many_arguments)]
pub async fn llama_benchy(
    client: &Client,
    model: &str,
    corpus: &Corpus,
    opts: &BenchyOptions,
    cells: &[Cell],
    seed: u64,
    warm_first_cell_only: bool,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<Measured, BenchError> {
    let server = |message: String| BenchError::Server {
        url: client.base.to_string(),
        message,
    };
    let mut run = Run {
        client,
        model,
        epoch: Instant::now(),
        conns: vec![None],
        cancel,
        failed: 0,
        requests: 0,
    };
    let mut rng = Rng::new(seed);
    let count = |t: &str| {
        corpus
            .tok
            .count(t)
            .map(i64::from)
            .map_err(|e| BenchError::Invalid(e.to_string()))
    };
    let (mut delta_user, mut delta_context) = (0, 0);
    if !opts.no_warmup || opts.adapt_prompt {
        let step = reporter.step("warm up: the chat template's tokens");
        let user = run.prompt_count("", WARMUP_TEXT).await.map_err(server)?;
        if let Some(n) = user {
            delta_user = i64::from(n) - count(WARMUP_TEXT)?;
        }
        let ctx = run
            .prompt_count(WARMUP_TEXT, CONTEXT_LOAD_USER_MESSAGE)
            .await
            .map_err(server)?;
        delta_context = match ctx {
            Some(n) => i64::from(n) - count(WARMUP_TEXT)? - count(CONTEXT_LOAD_USER_MESSAGE)?,
            None => delta_user,
        };
        step.ok_with(&format!(
            "{delta_user} around a user turn, {delta_context} around a system turn"
        ));
    }
    let latency_s = latency(&mut run, opts.latency_mode).await.map_err(server)?;
    reporter.info(&format!(
        "latency ({}): {:.2} ms",
        opts.latency_mode.name(),
        latency_s * 1000.0
    ));
    let mut runs = Vec::new();
    for (n, &cell) in cells.iter().enumerate() {
        let warm_run = !opts.no_warmup && (n == 0 || !warm_first_cell_only);
        let step = reporter.step(&format!(
            "pp={} tg={} depth={} concurrency={}",
            cell.pp, cell.tg, cell.depth, cell.concurrency
        ));
        let (pp, depth) = llama_benchy::adapted(cell, opts.adapt_prompt, delta_user, delta_context);
        let total = opts.runs + u32::from(warm_run);
        let phased = opts.enable_prefix_caching && cell.depth > 0;
        let (mut std_batches, mut ctx_batches) = (Vec::new(), Vec::new());
        for i in 0..total {
            if cancel.is_cancelled() {
                return Err(BenchError::Interrupted);
            }
            let warmup = warm_run && i == 0;
            let mut asks = Vec::new();
            for _ in 0..cell.concurrency {
                let p = corpus
                    .prompt(&mut rng, pp, depth, opts.no_cache)
                    .map_err(|e| BenchError::Invalid(e.to_string()))?;
                asks.push((p.context, p.prompt));
            }
            if phased {
                let load: Vec<(String, String)> = asks
                    .iter()
                    .map(|(c, _)| (c.clone(), CONTEXT_LOAD_USER_MESSAGE.to_string()))
                    .collect();
                let got = run.batch(&load, cell.tg, opts.no_cache).await;
                if !warmup {
                    ctx_batches.push(got);
                }
            }
            let got = run.batch(&asks, cell.tg, opts.no_cache).await;
            if !warmup {
                std_batches.push(got);
            }
        }
        if phased {
            runs.push(llama_benchy::aggregate(
                cell,
                &ctx_batches,
                latency_s,
                depth,
                true,
            ));
            runs.push(llama_benchy::aggregate(
                cell,
                &std_batches,
                latency_s,
                pp,
                false,
            ));
        } else {
            runs.push(llama_benchy::aggregate(
                cell,
                &std_batches,
                latency_s,
                pp + depth,
                false,
            ));
        }
        step.ok();
    }
    Ok(Measured {
        runs,
        latency_s,
        delta_user,
        delta_context,
        failed: run.failed,
        requests: run.requests,
    })
}

/// The idle round trip, the mean of three, as `mode` measures it.
async fn latency(run: &mut Run<'_>, mode: LatencyMode) -> Result<f64, String> {
    let mut got = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        match mode {
            LatencyMode::None => return Ok(0.0),
            LatencyMode::Api => {
                run.client.models().await?;
                got.push(t.elapsed().as_secs_f64());
            }
            LatencyMode::Generation => {
                let body = llama_benchy::body(run.model, "", "hello", 1, false).to_string();
                let s = run
                    .client
                    .stream_detailed(
                        &mut run.conns[0],
                        Api::Chat,
                        body.into_bytes(),
                        run.epoch,
                        run.cancel,
                    )
                    .await;
                if let Some(fr) = s.first_response {
                    got.push(fr - s.sent);
                }
            }
        }
    }
    Ok(if got.is_empty() {
        0.0
    } else {
        got.iter().sum::<f64>() / got.len() as f64
    })
}

/// A whole protocol run: finds the endpoint and the model, reads the tokenizer and the book,
/// runs the cells, writes the tool's file and spark-launch's.
pub async fn session(
    req: super::ProtocolRequest,
    reporter: std::sync::Arc<dyn Reporter>,
    cancel: CancellationToken,
) -> Result<super::ProtocolOutcome, BenchError> {
    use crate::bench::{Target, locate, store};
    let mut problems = match &req.lil {
        Some(o) => o.problems(),
        None => req.options.problems(),
    };
    if req.timeout.is_zero() {
        problems.push("--timeout must be at least 1 second".into());
    }
    if !problems.is_empty() {
        return Err(BenchError::Invalid(problems.join("; ")));
    }
    let invalid = |e: super::corpus::CorpusError| BenchError::Invalid(e.to_string());
    let tok = super::corpus::Tok::load(&req.tokenizer).map_err(invalid)?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let text = super::corpus::book_text(&req.book, home.as_deref()).map_err(invalid)?;
    let corpus = Corpus::new(tok, &text).map_err(invalid)?;
    reporter.info(&format!(
        "{} tokens of text to cut prompts from",
        corpus.len()
    ));
    let (base, job) = match req.target {
        Target::Url(u) => (u, None),
        Target::Job {
            cluster,
            job,
            addresses,
        } => {
            let step = reporter.step(&format!("find job {job}"));
            let url = locate::job_url(&cluster, &job, &addresses).await?;
            step.ok_with(&url.to_string());
            (url, Some(job.to_string()))
        }
    };
    let client = Client {
        base: base.clone(),
        api_key: req.api_key,
        timeout: req.timeout,
    };
    let server = |message: String| BenchError::Server {
        url: base.to_string(),
        message,
    };
    let model = match req.model {
        Some(m) => m,
        None => match client.models().await.map_err(server)?.as_slice() {
            [one] => one.clone(),
            [] => return Err(server("the server lists no model at /models".into())),
            many => {
                return Err(server(format!(
                    "the server lists {} models ({}): choose one with --model",
                    many.len(),
                    many.join(", ")
                )));
            }
        },
    };
    // Numbers from a model that answers garbage mean nothing: it is asked first.
    let answer_check =
        crate::bench::answers::gate(&client, &model, req.skip_check, reporter.as_ref(), &cancel)
            .await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let started_at = crate::clock::utc_stamp(now.as_secs() as i64);
    if let Some(opts) = &req.lil {
        let m = lil(
            &client,
            &model,
            &corpus,
            opts,
            req.seed,
            reporter.as_ref(),
            &cancel,
        )
        .await?;
        let head = Head {
            protocol: req.protocol,
            seed: req.seed,
            options: req.options,
            save_to: req.save_to,
            url: base.to_string(),
            label: job.clone().unwrap_or_else(|| base.authority()),
            job,
            model,
            started_at,
            answer_check,
        };
        return lil_files(head, opts.clone(), m);
    }
    let m = llama_benchy(
        &client,
        &model,
        &corpus,
        &req.options,
        &req.cells,
        req.seed,
        req.warm_first_cell_only,
        reporter.as_ref(),
        &cancel,
    )
    .await?;
    let tool = llama_benchy::BenchyReport {
        version: format!(
            "spark-launch {} (llama-benchy {} protocol)",
            env!("CARGO_PKG_VERSION"),
            llama_benchy::PROTOCOL_VERSION
        ),
        timestamp: started_at.replace('T', " "),
        latency_mode: req.options.latency_mode.name().to_string(),
        latency_ms: m.latency_s * 1000.0,
        model: model.clone(),
        prefix_caching_enabled: req.options.enable_prefix_caching,
        max_concurrency: req.options.concurrency.iter().copied().max().unwrap_or(1),
        benchmarks: m.runs,
    };
    let report = super::ProtocolReport {
        version: 1,
        protocol: req.protocol,
        started_at,
        url: base.to_string(),
        job: job.clone(),
        model,
        seed: req.seed,
        options: req.options,
        order: req.cells,
        requests: m.requests,
        failed: m.failed,
        delta_user: m.delta_user,
        delta_context: m.delta_context,
        llama_benchy: tool,
        lil: None,
        answer_check,
    };
    let tool_file = match req.save_result {
        Some((path, format)) => {
            let io = |source| BenchError::Io {
                path: path.clone(),
                source,
            };
            let text = match format {
                super::ResultFormat::Json => serde_json::to_string_pretty(&report.llama_benchy)
                    .map_err(|e| io(std::io::Error::other(e.to_string())))?,
                super::ResultFormat::Md => llama_benchy::markdown(&report.llama_benchy),
            };
            std::fs::write(&path, text).map_err(io)?;
            Some(path)
        }
        None => None,
    };
    let saved = req.save_to.unwrap_or_else(|| {
        let label = job.unwrap_or_else(|| base.authority());
        store::default_path(
            &crate::state::state_dir(),
            &format!("{label}-{}", report.protocol.name()),
            &report.started_at,
        )
    });
    store::save(&report, &saved)?;
    Ok(super::ProtocolOutcome {
        report,
        saved,
        tool_file,
    })
}

/// What a lil run measured: each context's scout and each cell's figures.
pub struct LilMeasured {
    pub prefill: std::collections::BTreeMap<String, super::lil::LilPrefill>,
    pub results: Vec<super::lil::LilCellResult>,
    pub failed: u32,
    pub requests: u32,
}

/// Keeps `concurrency` streams busy for `duration_s` (a finished stream is replaced at once)
/// and gives back every stream with the window `[from, to]`. A stream still running at the
/// window's end is cut there: it is not a failure, its tokens inside the window count.
#[allow(clippy::too_many_arguments)]
async fn lil_window(
    client: &Client,
    model: &str,
    context: &str,
    concurrency: u32,
    max_tokens: u32,
    duration_s: f64,
    epoch: Instant,
    cancel: &CancellationToken,
) -> Result<(Vec<super::lil::LilStream>, f64, f64, f64), BenchError> {
    let cut = cancel.child_token();
    let started = Instant::now();
    let from = epoch.elapsed().as_secs_f64();
    let to = from + duration_s;
    let window = std::time::Duration::from_secs_f64(duration_s);
    let body = llama_benchy::body(
        model,
        context,
        super::lil::GENERATION_PROMPT,
        max_tokens,
        false,
    )
    .to_string();
    let worker = |cut: CancellationToken| {
        let body = body.clone();
        async move {
            let mut conn: Option<Connection> = None;
            let mut got = Vec::new();
            while !cut.is_cancelled() {
                let s = client
                    .stream_detailed(&mut conn, Api::Chat, body.clone().into_bytes(), epoch, &cut)
                    .await;
                let cut_short = cut.is_cancelled();
                let o = observed(&s);
                let failed = o.error.is_some() && !cut_short;
                got.push(super::lil::LilStream {
                    start: o.start,
                    tokens: o.tokens,
                    failed,
                });
                // One failed stream already makes the cell invalid: this slot sends no more
                // (a refusing server is not asked again and again until the window ends).
                if failed {
                    break;
                }
            }
            got
        }
    };
    let workers: FuturesOrdered<_> = (0..concurrency).map(|_| worker(cut.clone())).collect();
    let timer = {
        let cut = cut.clone();
        async move {
            tokio::time::sleep(window).await;
            cut.cancel();
        }
    };
    let (streams, ()) = tokio::join!(workers.collect::<Vec<Vec<_>>>(), timer);
    if cancel.is_cancelled() {
        return Err(BenchError::Interrupted);
    }
    let wall = started.elapsed().as_secs_f64();
    Ok((streams.into_iter().flatten().collect(), from, to, wall))
}

/// Runs llm-inference-bench's grid: the hidden warm-up, then context by context a scout
/// (one token, its prefill rate; it also fills the prefix cache) and each concurrency's
/// measured window.
pub async fn lil(
    client: &Client,
    model: &str,
    corpus: &Corpus,
    opts: &super::lil::LilOptions,
    seed: u64,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<LilMeasured, BenchError> {
    use super::lil;
    let server = |message: String| BenchError::Server {
        url: client.base.to_string(),
        message,
    };
    let invalid = |e: super::corpus::CorpusError| BenchError::Invalid(e.to_string());
    let epoch = Instant::now();
    let mut rng = Rng::new(seed);
    let mut contexts = Vec::new();
    for &ctx in &opts.contexts {
        let text = corpus
            .prompt(&mut rng, 0, ctx, false)
            .map_err(invalid)?
            .context;
        contexts.push((ctx, text));
    }
    let (mut requests, mut failed) = (0u32, 0u32);
    if opts.decode_warmup_s > 0.0 {
        let step = reporter.step("warm up: one stream at the largest context");
        // Its own place in the text: the warm-up must not fill the prefix cache the scouts'
        // prefill rate is measured against.
        let largest = opts.contexts.iter().copied().max().unwrap_or(0);
        let text = corpus
            .prompt(&mut rng, 0, largest, false)
            .map_err(invalid)?
            .context;
        let (streams, ..) = lil_window(
            client,
            model,
            &text,
            1,
            opts.max_tokens,
            opts.decode_warmup_s,
            epoch,
            cancel,
        )
        .await?;
        requests += streams.len() as u32;
        step.ok();
    }
    let mut prefill = std::collections::BTreeMap::new();
    let mut results = Vec::new();
    for (ctx, text) in &contexts {
        if *ctx > 0 {
            let step = reporter.step(&format!("scout at {}", lil::context_label(*ctx)));
            let body =
                llama_benchy::body(model, text, lil::GENERATION_PROMPT, 1, false).to_string();
            let mut conn = None;
            let s = client
                .stream_detailed(&mut conn, Api::Chat, body.into_bytes(), epoch, cancel)
                .await;
            requests += 1;
            if cancel.is_cancelled() {
                return Err(BenchError::Interrupted);
            }
            if let Some(e) = &s.error {
                return Err(server(e.clone()));
            }
            let o = observed(&s);
            // The server's count of the prompt when it gives one, else the cut's own length.
            let prompt_tokens = if o.prompt_tokens > 0 {
                o.prompt_tokens
            } else {
                *ctx
            };
            match o.first_token.or(o.first_response).map(|t| t - o.start) {
                Some(ttft) => {
                    let p = lil::LilPrefill::from_scout(prompt_tokens, ttft);
                    step.ok_with(&match p.tok_per_sec {
                        Some(t) => format!("{t:.0} tok/s prefill"),
                        None => "prefill not known".into(),
                    });
                    prefill.insert(ctx.to_string(), p);
                }
                None => step.ok_with("no token seen: prefill not known"),
            }
        }
        for &concurrency in &opts.concurrency {
            let cell = lil::LilCell {
                concurrency,
                context_tokens: *ctx,
            };
            let step = reporter.step(&format!(
                "context {} concurrency {concurrency}",
                lil::context_label(*ctx)
            ));
            let (streams, from, to, wall) = lil_window(
                client,
                model,
                text,
                concurrency,
                opts.max_tokens,
                opts.duration_s,
                epoch,
                cancel,
            )
            .await?;
            requests += streams.len() as u32;
            let r = lil::aggregate(cell, &streams, from, to, wall);
            failed += r.failed_streams;
            match r.aggregate_tps {
                Some(t) => step.ok_with(&format!("{t:.1} tok/s")),
                None => step.fail(r.error.as_deref().unwrap_or("invalid")),
            }
            results.push(r);
        }
    }
    Ok(LilMeasured {
        prefill,
        results,
        failed,
        requests,
    })
}

/// What every protocol's result file starts with.
struct Head {
    protocol: super::Protocol,
    seed: u64,
    options: llama_benchy::BenchyOptions,
    save_to: Option<std::path::PathBuf>,
    url: String,
    label: String,
    job: Option<String>,
    model: String,
    started_at: String,
    answer_check: String,
}

/// lil's files: spark-launch's own, and the tool's `benchmark_results.json` beside it (an
/// existing file of that name is not ours to overwrite: it is refused).
fn lil_files(
    h: Head,
    opts: super::lil::LilOptions,
    m: LilMeasured,
) -> Result<super::ProtocolOutcome, BenchError> {
    use super::lil;
    use crate::bench::store;
    let tool = lil::LilReport {
        metadata: lil::LilMetadata {
            version: lil::PROTOCOL_VERSION.to_string(),
            engine: "openai-compatible".into(),
            model: h.model.clone(),
            server: h.url.clone(),
            timestamp: h.started_at.clone(),
            decode_mode: "sustained".into(),
            primary_decode_layer: "sustained".into(),
            duration_per_test: opts.duration_s,
            request_count: m.requests,
            run_burst: false,
            prefill_mode: "client".into(),
            skip_prefill: false,
            decode_warmup_seconds: opts.decode_warmup_s,
            max_tokens: opts.max_tokens,
            concurrency_levels: opts.concurrency.clone(),
            context_lengths: opts.contexts.clone(),
            generator: format!(
                "spark-launch {} (llm-inference-bench {} protocol)",
                env!("CARGO_PKG_VERSION"),
                lil::PROTOCOL_VERSION
            ),
        },
        prefill: m.prefill,
        summary_table: lil::summary_table(&m.results),
        results: m.results,
        burst_results: Vec::new(),
        burst_summary_table: Default::default(),
    };
    let report = super::ProtocolReport {
        version: 1,
        protocol: h.protocol,
        started_at: h.started_at.clone(),
        url: h.url,
        job: h.job,
        model: h.model.clone(),
        seed: h.seed,
        options: h.options,
        order: Vec::new(),
        requests: m.requests,
        failed: m.failed,
        delta_user: 0,
        delta_context: 0,
        llama_benchy: llama_benchy::BenchyReport {
            version: format!("spark-launch {}", env!("CARGO_PKG_VERSION")),
            timestamp: h.started_at.replace('T', " "),
            latency_mode: "none".into(),
            latency_ms: 0.0,
            model: h.model,
            prefix_caching_enabled: false,
            max_concurrency: opts.concurrency.iter().copied().max().unwrap_or(1),
            benchmarks: Vec::new(),
        },
        lil: Some(tool),
        answer_check: h.answer_check,
    };
    let saved = h.save_to.unwrap_or_else(|| {
        store::default_path(
            &crate::state::state_dir(),
            &format!("{}-{}", h.label, report.protocol.name()),
            &report.started_at,
        )
    });
    store::save(&report, &saved)?;
    let dir = saved
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let path = dir.join("benchmark_results.json");
    let io = |source| BenchError::Io {
        path: path.clone(),
        source,
    };
    let text = serde_json::to_string_pretty(&report.lil)
        .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    // A benchmark_results.json already there is replaced only when spark-launch wrote it
    // (the tool's own, or a link, stays as it was and the run says so).
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        let limit = crate::input::InputLimit {
            max: 64 << 20,
            hint: "a benchmark_results.json is a few KiB",
        };
        let ours = meta.file_type().is_file()
            && crate::input::read_text(&path, limit)
                .map(|t| lil::written_by_us(&t))
                .unwrap_or(false);
        if !ours {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "a benchmark_results.json spark-launch did not write is there; spark-launch's own result is in {}: move that file, or give --out in another folder",
                    saved.display()
                ),
            )));
        }
    }
    std::fs::write(&path, text).map_err(io)?;
    Ok(super::ProtocolOutcome {
        report,
        saved,
        tool_file: Some(path),
    })
}
