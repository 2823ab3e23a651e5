//! `spark-launch check` (and `bench`'s gate before it measures) over bench's HTTP client: the
//! endpoint found as bench finds it (a `--url`, or a job's head by its labels), the model the
//! server lists, then the check's questions asked one at a time and judged by `crate::check`.
//! Decides nothing itself: the questions and verdicts are the check's.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::client::{BearerKey, Client};
use super::request::BaseUrl;
use super::{BenchError, Target, locate};
use crate::check::{self, AnswerOptions, AnswerReport};
use crate::progress::Reporter;

/// A check, resolved from the command line.
pub struct AnswerRequest {
    pub target: Target,
    /// The model to ask for; `None`: the one the server lists.
    pub model: Option<String>,
    pub api_key: Option<BearerKey>,
    /// The most one question may take.
    pub timeout: Duration,
    pub max_tokens: u32,
    pub context: Option<u32>,
    /// The questions' seed; `None`: from the clock.
    pub seed: Option<u64>,
}

/// The base URL of a target, and the job's name when it is one.
pub async fn endpoint(
    target: Target,
    reporter: &dyn Reporter,
) -> Result<(BaseUrl, Option<String>), BenchError> {
    match target {
        Target::Url(u) => Ok((u, None)),
        Target::Job {
            cluster,
            job,
            addresses,
        } => {
            let step = reporter.step(&format!("find job {job}"));
            let url = locate::job_url(&cluster, &job, &addresses).await?;
            step.ok_with(&url.to_string());
            Ok((url, Some(job.to_string())))
        }
    }
}

/// The model to ask for: the one given, else the only one the server lists.
pub async fn served_model(client: &Client, given: Option<String>) -> Result<String, BenchError> {
    let server = |message: String| BenchError::Server {
        url: client.base.to_string(),
        message,
    };
    if let Some(m) = given {
        return Ok(m);
    }
    let models = client.models().await.map_err(server)?;
    match models.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(server("the server lists no model at /models".into())),
        many => Err(server(format!(
            "the server lists {} models ({}): choose one with --model",
            many.len(),
            many.join(", ")
        ))),
    }
}

/// A seed from the clock: new numbers every run, so no model has learnt the answers.
pub fn clock_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}

/// Asks the check's questions of `model` through `client`, one at a time, and judges them.
pub async fn ask(
    client: &Client,
    opts: &AnswerOptions,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<AnswerReport, BenchError> {
    let asked = check::questions(opts);
    let step = reporter.step(&format!(
        "ask {} {} questions (temperature 0)",
        client.base,
        asked.len()
    ));
    let mut answered = Vec::with_capacity(asked.len());
    for q in &asked {
        let body = q.body(opts).to_string().into_bytes();
        let got = tokio::select! {
            r = client.post_json(check::PATH, body) => r,
            _ = cancel.cancelled() => return Err(BenchError::Interrupted),
        };
        answered.push(got.and_then(|(status, text)| check::reply::parse(status, &text)));
    }
    let report = check::judge(&client.base.to_string(), opts, &asked, &answered);
    if report.passed() {
        step.ok_with(&report.summary());
    } else {
        step.fail(&report.summary());
    }
    Ok(report)
}

/// `spark-launch check`: finds the endpoint and the model, asks, judges.
pub async fn run(
    req: AnswerRequest,
    reporter: Arc<dyn Reporter>,
    cancel: CancellationToken,
) -> Result<AnswerReport, BenchError> {
    if req.max_tokens == 0 {
        return Err(BenchError::Invalid(
            "--max-tokens must be at least 1".into(),
        ));
    }
    if req.context == Some(0) {
        return Err(BenchError::Invalid(
            "--context 0 hides nothing: give the number of words of context (e.g. 8000)".into(),
        ));
    }
    if req.timeout.is_zero() {
        return Err(BenchError::Invalid(
            "--timeout must be at least 1 second".into(),
        ));
    }
    let (base, _) = endpoint(req.target, reporter.as_ref()).await?;
    let client = Client {
        base,
        api_key: req.api_key,
        timeout: req.timeout,
    };
    let model = served_model(&client, req.model).await?;
    let opts = AnswerOptions {
        model,
        seed: req.seed.unwrap_or_else(clock_seed),
        max_tokens: req.max_tokens,
        context: req.context,
    };
    ask(&client, &opts, reporter.as_ref(), &cancel).await
}

/// The gate before any measurement: asks the questions and refuses to measure a model that
/// answers wrong (`skip`: `--skip-check`, said and recorded). What the result file records.
pub async fn gate(
    client: &Client,
    model: &str,
    skip: bool,
    reporter: &dyn Reporter,
    cancel: &CancellationToken,
) -> Result<String, BenchError> {
    if skip {
        reporter.info("not checking the answers first (--skip-check): the result file says so");
        return Ok("skipped (--skip-check)".to_string());
    }
    let opts = crate::check::AnswerOptions {
        model: model.to_string(),
        seed: clock_seed(),
        max_tokens: crate::check::DEFAULT_MAX_TOKENS,
        context: None,
    };
    let checked = ask(client, &opts, reporter, cancel).await?;
    if !checked.passed() {
        return Err(BenchError::AnswersWrong {
            url: client.base.to_string(),
            failures: checked.failures(),
        });
    }
    Ok(format!("answers right: {}", checked.summary()))
}
