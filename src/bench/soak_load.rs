//! The load of a soak (`bench --soak DURATION`): N clients, each sending its next streaming
//! request as soon as its last one ended (a closed loop, as the sweep's levels), until the time
//! is up; then the requests still in flight are cut. Every request's events (sent, each token,
//! ended) go to one collector that feeds `bench::soak::SoakMeter` and, twice a second, asks
//! it whether a stall has begun (a warning at once, not only at the end) and which windows
//! closed (a progress line each). Effects: the clients' requests and the clock; the figures
//! and the stalls are `bench::soak`'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::client::Client;
use super::request::{Api, body, prompt};
use super::soak::{Finish, SoakMeter, SoakReport, SoakSettings, clock};
use super::sweep::warm_up;
use crate::progress::Reporter;

/// What a soak sends and for how long.
#[derive(Clone, Debug, PartialEq)]
pub struct SoakOptions {
    pub model: String,
    pub api: Api,
    /// Streams kept busy.
    pub concurrency: u32,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub duration: Duration,
    pub settings: SoakSettings,
    /// One request before the soak, not counted.
    pub warmup: bool,
    /// Mixed into every prompt, so no two share a prefix.
    pub seed: u64,
}

/// What a stream tells the collector.
enum Event {
    Sent(f64),
    Token(f64),
    /// The server refused it before taking it (a restart, no connection, 502/503): it is sent
    /// again, still the same request in flight.
    Refused,
    Done(f64, Finish),
}

/// After a failed request a stream waits this long before its next (a server that refuses
/// at once is not hammered).
const AFTER_FAILURE: Duration = Duration::from_secs(1);
/// A refused request is sent again after this, doubling up to [`REFUSED_MAX`], until the
/// server takes it or the request's own timeout (from its first sending) passes: what a client
/// with retries (the OpenAI SDKs retry connection errors) sees across a server's restart.
const REFUSED_FIRST: Duration = Duration::from_millis(500);
const REFUSED_MAX: Duration = Duration::from_secs(4);

/// Runs the soak. Ctrl-C ends it early: the report then covers the time it ran.
pub async fn soak(
    client: &Client,
    opts: &SoakOptions,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<SoakReport, BenchError> {
    if opts.warmup {
        warm_up(
            client,
            opts.api,
            request_body(opts, u64::MAX),
            reporter,
            cancel,
        )
        .await?;
    }
    let step = reporter.step(&format!(
        "soak: {} streams for {} ({} prompt + {} output tokens each; a stall is {}s with requests in flight and no token)",
        opts.concurrency,
        clock(opts.duration.as_secs_f64()),
        opts.prompt_tokens,
        opts.output_tokens,
        opts.settings.stall_after_s
    ));
    let stop = cancel.child_token();
    let epoch = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut streams = JoinSet::new();
    let shared = Arc::new(opts.clone());
    for k in 0..u64::from(opts.concurrency) {
        streams.spawn(keep_busy(
            client.clone(),
            shared.clone(),
            k,
            epoch,
            stop.clone(),
            tx.clone(),
        ));
    }
    drop(tx);
    let mut meter = SoakMeter::new(opts.settings);
    let mut shown = 0usize;
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    let deadline = tokio::time::Instant::from_std(crate::clock::later(epoch, opts.duration));
    // When the soak ended (the time was up, or Ctrl-C): later events are clipped to it.
    let mut end: Option<f64> = None;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => feed(&mut meter, ev, end),
                None => break,
            },
            _ = ticks.tick(), if end.is_none() => {
                let now = epoch.elapsed().as_secs_f64();
                if let Some(n) = meter.tick(now) {
                    reporter.warn(&format!(
                        "stall: no token since {} into the soak ({}s) with {} request{} in flight",
                        clock(n.since_s),
                        opts.settings.stall_after_s,
                        n.in_flight,
                        if n.in_flight == 1 { "" } else { "s" }
                    ));
                }
                for w in meter.closed_windows(shown, now) {
                    shown += 1;
                    reporter.info(&format!(
                        "  {}–{}  {:.1} output tok/s, {} done, {} failed, up to {} in flight",
                        clock(w.start_s),
                        clock(w.end_s),
                        w.tokens_per_s,
                        w.requests,
                        w.failed,
                        w.in_flight_max
                    ));
                }
            }
            _ = tokio::time::sleep_until(deadline), if end.is_none() => {
                end = Some(opts.duration.as_secs_f64());
                stop.cancel();
            }
            _ = cancel.cancelled(), if end.is_none() => {
                end = Some(epoch.elapsed().as_secs_f64());
                stop.cancel();
            }
        }
    }
    while streams.join_next().await.is_some() {}
    let end = end.unwrap_or_else(|| epoch.elapsed().as_secs_f64());
    let report = meter.finish(end, opts.concurrency, opts.duration.as_secs_f64());
    let summary = format!(
        "{:.1} output tok/s over {}, {} requests, {} failed",
        report.output_tokens_per_s,
        clock(report.elapsed_s),
        report.requests,
        report.failed
    );
    match report.stalls.len() {
        _ if report.no_token() => step.fail(&format!("no token came at all; {summary}")),
        0 if report.failed == 0 => step.ok_with(&summary),
        0 => step.fail(&summary),
        n => step.fail(&format!(
            "{n} stall{}; {summary}",
            if n == 1 { "" } else { "s" }
        )),
    }
    Ok(report)
}

/// The body of stream `k`'s request `i` (`u64::MAX`: the warm-up): no two prompts alike.
fn request_body(opts: &SoakOptions, seed: u64) -> Vec<u8> {
    let p = prompt(opts.seed ^ seed, opts.prompt_tokens);
    serde_json::to_vec(&body(opts.api, &opts.model, &p, opts.output_tokens)).unwrap_or_default()
}

/// One stream: its next request as soon as the last ended, until `stop`; every event to `tx`.
async fn keep_busy(
    client: Client,
    opts: Arc<SoakOptions>,
    k: u64,
    epoch: Instant,
    stop: CancellationToken,
    tx: mpsc::UnboundedSender<Event>,
) {
    let mut conn = None;
    let mut i = 0u64;
    while !stop.is_cancelled() {
        let b = request_body(&opts, (k << 40) | i);
        i += 1;
        let _ = tx.send(Event::Sent(epoch.elapsed().as_secs_f64()));
        let s = send_until_taken(&client, &opts, b, epoch, &stop, &tx, &mut conn).await;
        let how = match s.error {
            None => Finish::Ok {
                ttft_s: s.tokens.first().map(|t| t - s.sent),
            },
            Some(_) if stop.is_cancelled() => Finish::Cut,
            Some(e) => Finish::Failed(e),
        };
        let failed = matches!(how, Finish::Failed(_));
        let _ = tx.send(Event::Done(s.done, how));
        if failed {
            tokio::select! {
                _ = tokio::time::sleep(AFTER_FAILURE) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
}

/// One request, sent again while the server refuses it before taking it (see
/// [`REFUSED_FIRST`]), each refusal told to the collector; the last try's sample.
async fn send_until_taken(
    client: &Client,
    opts: &SoakOptions,
    body: Vec<u8>,
    epoch: Instant,
    stop: &CancellationToken,
    tx: &mpsc::UnboundedSender<Event>,
    conn: &mut Option<crate::bench::client::Connection>,
) -> crate::bench::measure::Sample {
    let first = Instant::now();
    let mut pause = REFUSED_FIRST;
    loop {
        let tokens = tx.clone();
        let s = client
            .stream_observed(conn, opts.api, body.clone(), epoch, stop, &mut |t| {
                let _ = tokens.send(Event::Token(t));
            })
            .await;
        let again = s.error.is_some()
            && s.refused
            && !stop.is_cancelled()
            && first.elapsed() + pause < client.timeout;
        if !again {
            return s;
        }
        let _ = tx.send(Event::Refused);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return s,
        }
        pause = (pause * 2).min(REFUSED_MAX);
    }
}

/// One event into the meter. Once the soak has ended, requests cut by the end stay in flight
/// (the meter counts them as unfinished and keeps a stall they were in as ongoing) and later
/// times are clipped to the end.
fn feed(meter: &mut SoakMeter, ev: Event, end: Option<f64>) {
    let clip = |t: f64| end.map_or(t, |e| t.min(e));
    match ev {
        Event::Sent(t) => meter.sent(clip(t)),
        Event::Token(t) => {
            if end.is_none_or(|e| t <= e) {
                meter.token(t);
            }
        }
        Event::Refused => meter.refused(),
        Event::Done(_, Finish::Cut) => {}
        Event::Done(t, how) => meter.finished(clip(t), how),
    }
}
