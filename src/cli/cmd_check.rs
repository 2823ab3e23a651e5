//! `spark-launch check`: flags into a `bench::answers::AnswerRequest`, one call to
//! `bench::answers::run`, and the report rendered (a table, or `--json`). Exit 1 when a check
//! failed.

use std::time::Duration;

use super::args::{EngineFlags, NodeFlags};
use super::served::{ServerFlags, with_served};
use super::{CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::bench::answers;
use crate::bench::client::BearerKey;
use crate::plan::JobName;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The job to check: its head's API, found by labels as `status` finds jobs. Its API key:
    /// OPENAI_API_KEY, else the one `--api-key auto` keeps, if any.
    #[arg(required_unless_present = "url", conflicts_with = "url")]
    pub job: Option<JobName>,

    /// Any OpenAI-compatible API instead of a job: http://HOST:PORT[/v1].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,

    /// The model to ask [default: the one the server lists at /v1/models].
    #[arg(long)]
    pub model: Option<String>,

    /// Also hide a code word this many words deep in filler text and ask for it (a needle:
    /// does the model, and the context the server gives it, reach that far back?).
    #[arg(long, value_name = "N")]
    pub context: Option<u32>,

    /// The most tokens one answer may take, a reasoning model's think section included.
    #[arg(long, default_value_t = crate::check::DEFAULT_MAX_TOKENS, value_name = "N")]
    pub max_tokens: u32,

    /// The seed of the questions' numbers [default: from the clock].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Seconds one question may take.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub timeout: u64,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

const API_KEY_VAR: &str = "OPENAI_API_KEY";

/// `spark-launch check`.
pub async fn run(args: CheckArgs, ctx: &Context) -> CmdResult {
    if args.target.uses_snapshots() {
        return Err(anyhow::anyhow!(
            "`check` asks a running server, and a snapshot holds only a node's facts: name the job's nodes with the cluster file, --hosts or --engine, or give --url"
        ))
        .invalid();
    }
    // A job of this user's: OPENAI_API_KEY, else the key `--api-key auto` keeps. A --url may
    // be any server: only OPENAI_API_KEY goes there.
    let from_env = std::env::var(API_KEY_VAR).ok();
    let key = if args.url.is_some() {
        from_env.and_then(crate::plan::secret::Secret::new)
    } else {
        crate::api_key::key_for_job(from_env, &crate::api_key::auto_key_file()).invalid()?
    };
    let request = |target| answers::AnswerRequest {
        target,
        model: args.model.clone(),
        api_key: key.as_ref().and_then(|k| BearerKey::new(k.expose())),
        timeout: Duration::from_secs(args.timeout),
        max_tokens: args.max_tokens,
        context: args.context,
        seed: args.seed,
    };
    let (reporter, cancel) = (ctx.reporter.clone(), ctx.cancel.clone());
    let served = ServerFlags {
        url: args.url.as_deref(),
        job: args.job.as_ref(),
        target: &args.target,
        engines: &args.engines,
        command: "check",
    };
    let report = with_served(served, ctx, async |target| {
        answers::run(request(target), reporter, cancel).await
    })
    .await?;
    if ctx.json {
        print_json(&report)?;
    } else {
        print_out(&crate::check::render::text(&report));
    }
    Ok(if report.passed() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}
