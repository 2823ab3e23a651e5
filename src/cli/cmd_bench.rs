//! `spark-launch bench`: flags into a `bench::BenchRequest`, one call to `bench::run`, and the
//! result rendered — a table per run (or a soak's windows and stalls), the change against
//! `--compare FILE`, how the run stands against a launch profile's expected figures, and
//! `--plot FILE.svg` written (its place checked before the run, the picture written after the
//! results are shown). Exit 1 when a request failed, a soak stalled or got no token, or an
//! expected figure was missed by more than 10%.

use std::path::PathBuf;
use std::time::Duration;

use super::args::{EngineFlags, NodeFlags};
use super::cmd_profiles::{default_profiles_dir, load};
use super::served::{ServerFlags, with_served};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::bench::client::BearerKey;
use crate::bench::compare::Expectations;
use crate::bench::request::Api;
use crate::bench::soak::{SoakSettings, clock};
use crate::bench::{self, BenchRequest, DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, SoakSpec};
use crate::plan::JobName;
use crate::profile;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The job to measure: its head's API, found by labels as `status` finds jobs. Its API key:
    /// OPENAI_API_KEY, else the one `--api-key auto` keeps, if any.
    #[arg(required_unless_present = "url", conflicts_with = "url")]
    pub job: Option<JobName>,

    /// Any OpenAI-compatible API instead of a job: http://HOST:PORT[/v1].
    #[arg(long, value_name = "URL", alias = "base-url")]
    pub url: Option<String>,

    /// The model to ask for [default: the one the server lists at /v1/models].
    #[arg(long)]
    pub model: Option<String>,

    /// Requests in flight at once, per level (comma-separated) [default: 1,4,16,32 and the
    /// profile's levels].
    /// (With --protocol llama-benchy, as its --concurrency: `--concurrency 1 2 4` too.)
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N,...")]
    pub concurrency: Vec<u32>,

    /// Words (≈ tokens) in each generated prompt [default: 512, or the profile's].
    #[arg(long, value_name = "N")]
    pub prompt_tokens: Option<u32>,

    /// Tokens generated per request [default: 128, or the profile's].
    #[arg(long, value_name = "N")]
    pub output_tokens: Option<u32>,

    /// Requests per level [default: four rounds of its concurrency, at least 8].
    #[arg(long, value_name = "N")]
    pub requests: Option<u32>,

    /// The endpoint: /v1/completions (the prompt as generated) or /v1/chat/completions.
    #[arg(long, value_enum, default_value_t = ApiFlag::Completions)]
    pub api: ApiFlag,

    /// Seconds one request may take.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub timeout: u64,

    /// Send no warm-up request before the first level.
    #[arg(long)]
    pub no_warmup: bool,

    /// Measure without first asking whether the model answers right (`spark-launch check`'s
    /// questions); the result file records that the check was skipped.
    #[arg(long)]
    pub skip_check: bool,

    /// A soak instead of a sweep: keep --concurrency N streams (one number; default 8) busy
    /// for this long (90s, 30m, 2h, 1h30m) and report output tokens/s per window, errors and
    /// every stall. Exit 1 on a stall.
    #[arg(long, value_name = "DURATION", value_parser = bench::soak::parse_duration, conflicts_with = "requests")]
    pub soak: Option<Duration>,

    /// With --soak: no token for this many seconds while requests are in flight is a stall
    /// [default: 20].
    #[arg(long, value_name = "SECONDS", requires = "soak")]
    pub stall_after: Option<u64>,

    /// With --soak: seconds per window of the tokens/s series [default: 10].
    #[arg(long, value_name = "SECONDS", requires = "soak")]
    pub window: Option<u64>,

    /// Also draw the run as an SVG picture: tokens/s and TTFT by concurrency (a soak: tokens/s
    /// over time, stalls shaded); with --compare both runs.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::report::plot::svg_path)]
    pub plot: Option<PathBuf>,

    /// Save the result here [default: $XDG_STATE_HOME/spark-launch/bench/NAME-TIME.json].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Show the change against an earlier result file.
    #[arg(long, value_name = "FILE")]
    pub compare: Option<PathBuf>,

    /// Judge the run against this profile's `expect:` figures [default: the profile named
    /// like the job, when it has some].
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,

    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    #[command(flatten)]
    pub protocol: ProtocolFlags,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

/// `--protocol` and the options of the community's tools, with their names and meaning.
#[derive(Debug, clap::Args)]
pub struct ProtocolFlags {
    /// Measure as a community benchmark does, so the numbers compare with theirs:
    /// llama-benchy (its options below) or arena-v2 (Spark Arena's profile v2: a fixed
    /// llama-benchy grid in a seeded heat-aware order), or lil (llm-inference-bench's
    /// sustained decode over contexts). Needs --tokenizer. sweep:
    /// spark-launch's own levels.
    #[arg(long, value_enum, default_value_t = ProtocolFlag::Sweep)]
    pub protocol: ProtocolFlag,

    /// llama-benchy: prompt tokens per request (several: `--pp 512 2048`) [default: 2048].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N")]
    pub pp: Vec<u32>,

    /// llama-benchy: tokens generated per request [default: 32].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N")]
    pub tg: Vec<u32>,

    /// llama-benchy: tokens of previous conversation before the prompt [default: 0].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N")]
    pub depth: Vec<u32>,

    /// llama-benchy: measured runs per cell, after one warm-up run [default: 3].
    #[arg(long, value_name = "N")]
    pub runs: Option<u32>,

    /// The model's tokenizer.json, or the model folder holding it: prompts are cut to exact
    /// token counts with it.
    #[arg(long, value_name = "FILE|DIR")]
    pub tokenizer: Option<PathBuf>,

    /// The text prompts are cut from: a file, or a URL llama-benchy has already downloaded
    /// (its cache is read; nothing is downloaded) [default: llama-benchy's book].
    #[arg(long, value_name = "FILE|URL")]
    pub book_url: Option<String>,

    /// llama-benchy: make every prompt unique (no prefix cache can answer it) and ask the
    /// server not to cache.
    #[arg(long)]
    pub no_cache: bool,

    /// llama-benchy: load each depth's conversation first (reported as ctx_pp/ctx_tg), then
    /// ask the prompt after it, as a prefix cache serves a chat.
    #[arg(long)]
    pub enable_prefix_caching: bool,

    /// llama-benchy: leave the prompt its full size (the chat template's tokens not taken off).
    #[arg(long)]
    pub no_adapt_prompt: bool,

    /// llama-benchy: how the idle round trip taken off TTFR is measured.
    #[arg(long, value_enum, default_value_t = LatencyFlag::Api)]
    pub latency_mode: LatencyFlag,

    /// Also write the result in the tool's own file (llama-benchy's JSON, or --format md).
    #[arg(long, value_name = "FILE")]
    pub save_result: Option<PathBuf>,

    /// The format of --save-result.
    #[arg(long, value_enum, default_value_t = FormatFlag::Json)]
    pub format: FormatFlag,

    /// lil: the context lengths in tokens, each a row of cells [default: 0 16384 32768 65536
    /// 131072].
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N")]
    pub contexts: Vec<u32>,

    /// lil: seconds each cell is measured [default: 30].
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// lil: the most tokens one request may generate [default: 2048].
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,

    /// lil: seconds of the hidden warm-up, one stream at the largest context (0: none)
    /// [default: 3].
    #[arg(long, value_name = "SECONDS")]
    pub decode_warmup_seconds: Option<f64>,

    /// The seed of the prompts' places in the text (and arena-v2's order) [default: random,
    /// recorded in the result; arena-v2: 42].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolFlag {
    Sweep,
    LlamaBenchy,
    ArenaV2,
    Lil,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LatencyFlag {
    Api,
    Generation,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatFlag {
    Json,
    Md,
}

/// The API key, from the environment only (never a flag: argv is visible to every user).
/// Which OpenAI endpoint the requests go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiFlag {
    /// `/v1/completions`: the prompt exactly as generated (no chat template around it).
    Completions,
    /// `/v1/chat/completions`: one user message (the server's chat template adds tokens).
    Chat,
}

impl From<ApiFlag> for Api {
    fn from(a: ApiFlag) -> Self {
        match a {
            ApiFlag::Completions => Api::Completions,
            ApiFlag::Chat => Api::Chat,
        }
    }
}

const API_KEY_VAR: &str = "OPENAI_API_KEY";

/// `spark-launch bench`.
pub async fn run(args: BenchArgs, ctx: &Context) -> CmdResult {
    if args.target.uses_snapshots() {
        return Err(anyhow::anyhow!(
            "`bench` measures a running server, and a snapshot holds only a node's facts: name the job's nodes with the cluster file, --hosts or --engine, or give --url"
        ))
        .invalid();
    }
    // A picture that could not be written is found now, not after a 30-minute soak.
    super::check_plot(args.plot.as_deref())?;
    if args.protocol.protocol != ProtocolFlag::Sweep {
        return super::cmd_bench_protocol::run(&args, ctx).await;
    }
    super::cmd_bench_protocol::refuse_protocol_flags(&args)?;
    let dir = args
        .profiles_dir
        .clone()
        .unwrap_or_else(default_profiles_dir);
    let expect = expectations(&args, &dir, ctx)?;
    let soak = soak_spec(&args);
    let expected = expect.as_ref().map(|(_, e)| e);
    // A job of this user's: OPENAI_API_KEY, else the key `--api-key auto` keeps. A --url may
    // be any server: only OPENAI_API_KEY goes there.
    let from_env = std::env::var(API_KEY_VAR).ok();
    let key = if args.url.is_some() {
        from_env.and_then(crate::plan::secret::Secret::new)
    } else {
        crate::api_key::key_for_job(from_env, &crate::api_key::auto_key_file()).invalid()?
    };
    let request = |target| BenchRequest {
        target,
        model: args.model.clone(),
        api: args.api.into(),
        levels: if soak.is_some() && args.concurrency.is_empty() {
            vec![bench::DEFAULT_SOAK_CONCURRENCY]
        } else {
            bench::sweep_levels(&args.concurrency, expected)
        },
        prompt_tokens: args
            .prompt_tokens
            .or(expected.and_then(|e| e.prompt_tokens))
            .unwrap_or(DEFAULT_PROMPT_TOKENS),
        output_tokens: args
            .output_tokens
            .or(expected.and_then(|e| e.output_tokens))
            .unwrap_or(DEFAULT_OUTPUT_TOKENS),
        requests: args.requests,
        timeout: Duration::from_secs(args.timeout),
        warmup: !args.no_warmup,
        api_key: key.as_ref().and_then(|k| BearerKey::new(k.expose())),
        save_to: args.out.clone(),
        compare: args.compare.clone(),
        expect: expect.clone(),
        soak,
        skip_check: args.skip_check,
    };
    let (reporter, cancel) = (ctx.reporter.clone(), ctx.cancel.clone());
    let served = ServerFlags {
        url: args.url.as_deref(),
        job: args.job.as_ref(),
        target: &args.target,
        engines: &args.engines,
        command: "bench",
    };
    let outcome = with_served(served, ctx, async |target| {
        bench::run(request(target), reporter, cancel).await
    })
    .await?;
    if ctx.json {
        print_json(&outcome)?;
    } else {
        print_out(&bench::render::text(&outcome, args.compare.as_deref()));
    }
    // After the results: a picture that still cannot be written never hides them.
    if let Some(path) = &args.plot {
        let svg = crate::report::plot::bench(&outcome.report, outcome.earlier.as_ref());
        super::write_plot(path, svg, ctx)?;
    }
    if let Some(s) = outcome.report.soak.as_ref()
        && ctx.cancel.is_cancelled()
    {
        return Err(CmdError {
            code: 130,
            error: anyhow::anyhow!(
                "interrupted: the soak ran {} of {}; what it measured is saved in {}",
                clock(s.elapsed_s),
                clock(s.duration_s),
                outcome.saved.display()
            ),
        });
    }
    let failed = outcome.report.failed() > 0
        || outcome.report.soak.as_ref().is_some_and(|s| s.failed())
        || outcome.expectations.as_ref().is_some_and(|e| !e.passed());
    Ok(if failed {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

/// `--soak DURATION` with its `--window` and `--stall-after`.
fn soak_spec(args: &BenchArgs) -> Option<SoakSpec> {
    args.soak.map(|duration| SoakSpec {
        duration,
        settings: SoakSettings {
            window_s: args.window.unwrap_or(bench::DEFAULT_SOAK_WINDOW_S) as f64,
            stall_after_s: args.stall_after.unwrap_or(bench::DEFAULT_STALL_AFTER_S) as f64,
        },
    })
}

/// The expected figures: `--profile`'s (which must have some), else those of the profile
/// named like the job, if any.
fn expectations(
    args: &BenchArgs,
    dir: &std::path::Path,
    ctx: &Context,
) -> Result<Option<(String, Expectations)>, CmdError> {
    if let Some(name) = &args.profile {
        let loaded = load(name, Some(&dir.to_path_buf()), &[])?;
        let Some(e) = loaded.profile.expect.clone() else {
            return Err(anyhow::anyhow!(
                "profile {} ({}) has no `expect:` figures to compare with; add them (launch-profiles/README.md) or leave out --profile",
                loaded.profile.name,
                loaded.file
            ))
            .invalid();
        };
        return Ok(Some((loaded.profile.name, e)));
    }
    let Some(job) = &args.job else {
        return Ok(None);
    };
    if args.soak.is_some() {
        // A profile's figures are per level of a sweep: a soak is not judged against them.
        return Ok(None);
    }
    let found = profile::catalogue(profile::files::user_profiles(dir).0)
        .into_iter()
        .find(|l| l.profile.name == job.as_str());
    Ok(found.and_then(|l| {
        let e = l.profile.expect?;
        ctx.reporter.info(&format!(
            "expected figures from profile {} ({}), named like the job",
            l.profile.name, l.file
        ));
        Some((l.profile.name, e))
    }))
}
