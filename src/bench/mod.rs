//! `spark-launch bench`: how fast a served model answers, measured the way people compare
//! clusters — a sweep of concurrency levels (1, 4, 16, 32 by default) of streaming requests
//! with fixed prompt and output lengths, each level's output tokens/s, requests/s, time to
//! first token and inter-token latency (p50/p95) — saved as a result file, compared with an
//! earlier run and with the figures a launch profile expects.
//!
//! A soak (`--soak DURATION`) instead keeps N streams busy for a long time and reports the
//! tokens/s per window of time, the errors, and every stall (requests in flight, no token for
//! `--stall-after` seconds: a wedged group).
//!
//! Pure: [`request`] (URLs, prompts, request bodies, the stream's events), [`measure`] (the
//! statistics and the report), [`soak`] (windows and stalls from a soak's events),
//! [`compare`] (against an earlier run or a profile), [`render`] (the result as text).
//! Effects: [`client`] (HTTP), [`sweep`] (the levels, their clients at once), [`soak_load`]
//! (the soak's streams and clock), [`locate`] (a job's endpoint, by labels), [`store`] (result
//! files). [`run`] ties them together for the CLI.

pub mod answers;
pub mod client;
pub mod compare;
pub mod locate;
pub mod measure;
pub mod protocol;
pub mod render;
pub mod request;
pub mod soak;
pub mod soak_load;
pub mod store;
pub mod sweep;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::node::NodeName;
use crate::plan::JobName;
use crate::progress::Reporter;
use client::{BearerKey, Client};
use compare::{Comparison, ExpectReport, Expectations};
use measure::BenchReport;
use request::{Api, BaseUrl};
use sweep::SweepOptions;

/// Why a benchmark could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad options or an unreadable `--compare` file: nothing was sent (exit 2).
    #[error("{0}")]
    Invalid(String),
    /// The job could not be found or does not serve.
    #[error("{0}")]
    Job(String),
    /// The server did not answer as an OpenAI-compatible API does.
    #[error("{url}: {message}")]
    Server { url: String, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("interrupted")]
    Interrupted,
    /// The model answered wrong before it was measured: no numbers were taken or saved.
    #[error(
        "{url}: the model does not answer right, so bench measures nothing and saves nothing (`spark-launch check` shows every answer; --skip-check measures anyway):\n  {}",
        failures.join("\n  ")
    )]
    AnswersWrong { url: String, failures: Vec<String> },
}

/// What to benchmark.
pub enum Target {
    /// Any OpenAI-compatible server.
    Url(BaseUrl),
    /// A running job, found by its labels on these nodes; `addresses` are how this machine
    /// reaches each node (the cluster file's or `--hosts`').
    Job {
        cluster: crate::runtime::Cluster,
        job: JobName,
        addresses: BTreeMap<NodeName, String>,
    },
}

/// A benchmark, resolved from the command line.
pub struct BenchRequest {
    pub target: Target,
    /// The model to ask for; `None`: the one the server lists.
    pub model: Option<String>,
    pub api: Api,
    pub levels: Vec<u32>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub requests: Option<u32>,
    /// The most one request may take.
    pub timeout: Duration,
    pub warmup: bool,
    pub api_key: Option<BearerKey>,
    /// Where to save the result; `None`: a new file under the state folder.
    pub save_to: Option<PathBuf>,
    /// An earlier result file to compare with.
    pub compare: Option<PathBuf>,
    /// A profile's name and its expected figures.
    pub expect: Option<(String, Expectations)>,
    /// A soak instead of a sweep: `levels` then holds its one concurrency.
    pub soak: Option<SoakSpec>,
    /// `--skip-check`: measure without asking first whether the model answers right (the
    /// result file says so).
    pub skip_check: bool,
}

/// How long a soak runs and how it is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoakSpec {
    pub duration: Duration,
    pub settings: soak::SoakSettings,
}

/// The default `--stall-after`: no token for this long with requests in flight is a stall.
pub const DEFAULT_STALL_AFTER_S: u64 = 20;
/// The default `--window` of a soak's tokens/s series.
pub const DEFAULT_SOAK_WINDOW_S: u64 = 10;
/// Streams a soak keeps busy when `--concurrency` is not given.
pub const DEFAULT_SOAK_CONCURRENCY: u32 = 8;

/// What a benchmark found.
#[derive(Debug, serde::Serialize)]
pub struct BenchOutcome {
    pub report: BenchReport,
    /// Where the result file was written.
    pub saved: PathBuf,
    pub comparison: Option<Comparison>,
    pub expectations: Option<ExpectReport>,
    /// The run compared with (`--compare`), for a picture of both.
    #[serde(skip)]
    pub earlier: Option<BenchReport>,
}

/// The concurrency levels run by default.
pub const DEFAULT_LEVELS: [u32; 4] = [1, 4, 16, 32];
pub const DEFAULT_PROMPT_TOKENS: u32 = 512;
pub const DEFAULT_OUTPUT_TOKENS: u32 = 128;

/// The levels to run: those given, else the defaults together with every level the profile
/// has figures for, ascending.
pub fn sweep_levels(given: &[u32], expect: Option<&Expectations>) -> Vec<u32> {
    if !given.is_empty() {
        let mut seen = std::collections::BTreeSet::new();
        return given.iter().copied().filter(|l| seen.insert(*l)).collect();
    }
    let mut levels: std::collections::BTreeSet<u32> = DEFAULT_LEVELS.into_iter().collect();
    if let Some(e) = expect {
        levels.extend(e.concurrencies());
    }
    levels.into_iter().collect()
}

/// Checks what needs no network; every problem at once.
fn validate(req: &BenchRequest) -> Result<(), BenchError> {
    let mut problems = Vec::new();
    if req.levels.is_empty() {
        problems.push("no concurrency levels (give --concurrency 1,4,16,32)".to_string());
    }
    if req.levels.contains(&0) {
        problems.push("a concurrency of 0 sends nothing: levels start at 1".to_string());
    }
    if req.prompt_tokens == 0 || req.output_tokens == 0 {
        problems.push("--prompt-tokens and --output-tokens must be at least 1".to_string());
    }
    if req.requests == Some(0) {
        problems.push("--requests 0 measures nothing: give at least 1".to_string());
    }
    if req.timeout.is_zero() {
        problems.push("--timeout must be at least 1 second".to_string());
    }
    if let Some(soak) = &req.soak {
        if req.levels.len() > 1 {
            problems.push(format!(
                "a soak keeps one number of streams busy: give one --concurrency N, not {}",
                req.levels
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        if soak.duration.is_zero() {
            problems.push("--soak needs a duration of at least 1 second (e.g. 30m)".to_string());
        }
        if soak.duration > soak::MAX_SOAK {
            problems.push("--soak runs at most 7 days (168h)".to_string());
        }
        if soak.settings.stall_after_s.is_nan() || soak.settings.stall_after_s < 1.0 {
            problems.push("--stall-after must be at least 1 second".to_string());
        }
        if soak.settings.window_s.is_nan() || soak.settings.window_s < 1.0 {
            problems.push("--window must be at least 1 second".to_string());
        }
        if req.requests.is_some() {
            problems.push(
                "--requests counts a sweep's requests; a soak runs for its duration: leave out one of them"
                    .to_string(),
            );
        }
        if req.expect.is_some() {
            problems.push(
                "a profile's expect: figures are per level of a sweep; a soak is not judged against them: leave out --profile"
                    .to_string(),
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Invalid(problems.join("; ")))
    }
}

/// Runs a benchmark: finds the endpoint, picks the model, sweeps the levels, saves the result
/// and compares it. A bad `--compare` file or option is refused before anything is sent.
pub async fn run(
    req: BenchRequest,
    reporter: Arc<dyn Reporter>,
    cancel: CancellationToken,
) -> Result<BenchOutcome, BenchError> {
    validate(&req)?;
    let earlier = match &req.compare {
        Some(p) => Some(store::load(p)?),
        None => None,
    };
    let (base, job) = answers::endpoint(req.target, reporter.as_ref()).await?;
    let client = Client {
        base: base.clone(),
        api_key: req.api_key,
        timeout: req.timeout,
    };
    let model = answers::served_model(&client, req.model).await?;
    // Numbers from a model that answers garbage mean nothing: it is asked first.
    let answer_check =
        answers::gate(&client, &model, req.skip_check, reporter.as_ref(), &cancel).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let started_at = crate::clock::utc_stamp(now.as_secs() as i64);
    let opts = SweepOptions {
        model: model.clone(),
        api: req.api,
        levels: req.levels,
        prompt_tokens: req.prompt_tokens,
        output_tokens: req.output_tokens,
        requests: req.requests,
        warmup: req.warmup,
        seed: (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32),
    };
    let (levels, soak) = match req.soak {
        None => (
            sweep::sweep(&client, &opts, reporter.as_ref(), &cancel).await?,
            None,
        ),
        Some(spec) => {
            let soak_opts = soak_load::SoakOptions {
                model: opts.model.clone(),
                api: opts.api,
                concurrency: opts
                    .levels
                    .first()
                    .copied()
                    .unwrap_or(DEFAULT_SOAK_CONCURRENCY),
                prompt_tokens: opts.prompt_tokens,
                output_tokens: opts.output_tokens,
                duration: spec.duration,
                settings: spec.settings,
                warmup: opts.warmup,
                seed: opts.seed,
            };
            let r = soak_load::soak(&client, &soak_opts, reporter.as_ref(), &cancel).await?;
            (Vec::new(), Some(r))
        }
    };
    let report = BenchReport {
        version: BenchReport::VERSION,
        started_at,
        url: base.to_string(),
        job: job.clone(),
        model,
        api: opts.api,
        prompt_tokens: opts.prompt_tokens,
        output_tokens: opts.output_tokens,
        levels,
        soak,
        answer_check: Some(answer_check),
    };
    let saved = req.save_to.unwrap_or_else(|| {
        let label = job.unwrap_or_else(|| base.authority());
        store::default_path(&crate::state::state_dir(), &label, &report.started_at)
    });
    store::save(&report, &saved)?;
    let comparison = earlier.as_ref().map(|e| compare::compare(e, &report));
    let expectations = req
        .expect
        .map(|(profile, e)| compare::check(&profile, &e, &report));
    Ok(BenchOutcome {
        report,
        saved,
        comparison,
        expectations,
        earlier,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soak_request(levels: Vec<u32>) -> BenchRequest {
        BenchRequest {
            target: Target::Url(BaseUrl::of("127.0.0.1", 8000)),
            model: None,
            api: Api::Completions,
            levels,
            prompt_tokens: 8,
            output_tokens: 8,
            requests: None,
            timeout: Duration::from_secs(30),
            warmup: true,
            api_key: None,
            save_to: None,
            compare: None,
            expect: None,
            soak: Some(SoakSpec {
                duration: Duration::from_secs(60),
                settings: soak::SoakSettings {
                    window_s: 10.0,
                    stall_after_s: 20.0,
                },
            }),
            skip_check: false,
        }
    }

    #[test]
    fn a_soak_keeps_one_number_of_streams_busy_and_refuses_what_belongs_to_a_sweep() {
        assert!(validate(&soak_request(vec![8])).is_ok());
        let mut r = soak_request(vec![1, 4]);
        r.requests = Some(10);
        if let Some(s) = r.soak.as_mut() {
            s.duration = Duration::ZERO;
            s.settings.stall_after_s = 0.0;
        }
        let e = validate(&r).unwrap_err().to_string();
        for want in [
            "give one --concurrency N, not 1,4",
            "--soak needs a duration",
            "--stall-after must be at least 1 second",
            "leave out one of them",
        ] {
            assert!(e.contains(want), "no {want:?} in {e}");
        }
    }

    #[test]
    fn the_sweep_runs_the_default_levels_and_every_level_a_profile_expects() {
        assert_eq!(sweep_levels(&[], None), vec![1, 4, 16, 32]);
        let e: Expectations = yaml_serde::from_str(
            "levels:\n- {concurrency: 8, output_tokens_per_s: 100}\n- {concurrency: 32, ttft_p95_ms: 900}\n",
        )
        .unwrap();
        assert_eq!(sweep_levels(&[], Some(&e)), vec![1, 4, 8, 16, 32]);
        assert_eq!(sweep_levels(&[2, 2, 1], Some(&e)), vec![2, 1]);
    }
}
