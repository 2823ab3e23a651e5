//! `spark-launch bench --protocol llama-benchy|arena-v2`: the protocol's flags into a
//! `bench::protocol::ProtocolRequest`, one call to `bench::protocol::run::session`, and the
//! result rendered as the tool's own table, with where both files went and `--plot` drawn.
//! Exit 1 when a request failed.

use std::time::Duration;

use super::cmd_bench::{BenchArgs, FormatFlag, LatencyFlag, ProtocolFlag};
use super::served::{ServerFlags, with_served};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::bench::client::BearerKey;
use crate::bench::protocol::llama_benchy::{self, BenchyOptions, LatencyMode};
use crate::bench::protocol::{Protocol, ProtocolRequest, ResultFormat, arena_v2, corpus, lil, run};

/// The default sweep takes none of the protocols' options: each is refused, named.
pub fn refuse_protocol_flags(args: &BenchArgs) -> Result<(), CmdError> {
    let p = &args.protocol;
    let given = [
        ("--pp", !p.pp.is_empty()),
        ("--tg", !p.tg.is_empty()),
        ("--depth", !p.depth.is_empty()),
        ("--runs", p.runs.is_some()),
        ("--tokenizer", p.tokenizer.is_some()),
        ("--book-url", p.book_url.is_some()),
        ("--no-cache", p.no_cache),
        ("--enable-prefix-caching", p.enable_prefix_caching),
        ("--no-adapt-prompt", p.no_adapt_prompt),
        ("--save-result", p.save_result.is_some()),
        ("--seed", p.seed.is_some()),
        ("--contexts", !p.contexts.is_empty()),
        ("--duration", p.duration.is_some()),
        ("--max-tokens", p.max_tokens.is_some()),
        ("--decode-warmup-seconds", p.decode_warmup_seconds.is_some()),
    ];
    let named: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
    if named.is_empty() {
        return Ok(());
    }
    Err(anyhow::anyhow!(
        "{} belong to a protocol: add --protocol llama-benchy (or lil)",
        named.join(", ")
    ))
    .invalid()
}

/// What the sweep has and a protocol does not take.
fn refuse_sweep_flags(args: &BenchArgs) -> Result<(), CmdError> {
    let given = [
        ("--prompt-tokens", args.prompt_tokens.is_some()),
        ("--output-tokens", args.output_tokens.is_some()),
        ("--requests", args.requests.is_some()),
        ("--soak", args.soak.is_some()),
        ("--compare", args.compare.is_some()),
        ("--profile", args.profile.is_some()),
    ];
    let named: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
    if named.is_empty() {
        return Ok(());
    }
    Err(anyhow::anyhow!(
        "{} belong to spark-launch's own sweep, not to --protocol {}: leave them out",
        named.join(", "),
        protocol(args.protocol.protocol).name()
    ))
    .invalid()
}

fn protocol(p: ProtocolFlag) -> Protocol {
    match p {
        ProtocolFlag::Sweep => Protocol::Sweep,
        ProtocolFlag::LlamaBenchy => Protocol::LlamaBenchy,
        ProtocolFlag::ArenaV2 => Protocol::ArenaV2,
        ProtocolFlag::Lil => Protocol::Lil,
    }
}

/// The grid and options: llama-benchy's from the flags (its defaults otherwise); arena-v2's
/// own, which takes no grid flags.
fn grid(args: &BenchArgs) -> Result<(BenchyOptions, Vec<llama_benchy::Cell>, u64, bool), CmdError> {
    let p = &args.protocol;
    let latency_mode = match p.latency_mode {
        LatencyFlag::Api => LatencyMode::Api,
        LatencyFlag::Generation => LatencyMode::Generation,
        LatencyFlag::None => LatencyMode::None,
    };
    let lil_flags = [
        ("--contexts", !p.contexts.is_empty()),
        ("--duration", p.duration.is_some()),
        ("--max-tokens", p.max_tokens.is_some()),
        ("--decode-warmup-seconds", p.decode_warmup_seconds.is_some()),
    ];
    if p.protocol == ProtocolFlag::Lil {
        // lil has its own grid: llama-benchy's grid flags mean nothing to it.
        let theirs = [
            ("--pp", !p.pp.is_empty()),
            ("--tg", !p.tg.is_empty()),
            ("--depth", !p.depth.is_empty()),
            ("--runs", p.runs.is_some()),
            ("--no-cache", p.no_cache),
            ("--enable-prefix-caching", p.enable_prefix_caching),
            ("--no-adapt-prompt", p.no_adapt_prompt),
            ("--save-result", p.save_result.is_some()),
        ];
        let named: Vec<&str> = theirs.iter().filter(|g| g.1).map(|g| g.0).collect();
        if !named.is_empty() {
            return Err(anyhow::anyhow!(
                "{} belong to llama-benchy, not to --protocol lil (its grid is --concurrency, --contexts, --duration, --max-tokens): leave them out",
                named.join(", ")
            ))
            .invalid();
        }
        let seed = p.seed.unwrap_or(0);
        return Ok((BenchyOptions::default(), Vec::new(), seed, false));
    }
    let named: Vec<&str> = lil_flags.iter().filter(|g| g.1).map(|g| g.0).collect();
    if !named.is_empty() {
        return Err(anyhow::anyhow!(
            "{} belong to --protocol lil, not to --protocol {}: leave them out",
            named.join(", "),
            protocol(p.protocol).name()
        ))
        .invalid();
    }
    if p.protocol == ProtocolFlag::ArenaV2 {
        let fixed = [
            ("--pp", !p.pp.is_empty()),
            ("--tg", !p.tg.is_empty()),
            ("--depth", !p.depth.is_empty()),
            ("--concurrency", !args.concurrency.is_empty()),
            ("--runs", p.runs.is_some()),
            ("--no-cache", p.no_cache),
            ("--enable-prefix-caching", p.enable_prefix_caching),
        ];
        let named: Vec<&str> = fixed.iter().filter(|g| g.1).map(|g| g.0).collect();
        if !named.is_empty() {
            return Err(anyhow::anyhow!(
                "arena-v2's grid is fixed (pp 2048, tg 128, depths 0…100000, concurrency 1/2/5/10, 3 runs, prefix caching): leave out {}, or use --protocol llama-benchy",
                named.join(", ")
            ))
            .invalid();
        }
        let seed = p.seed.unwrap_or(arena_v2::DEFAULT_SEED);
        let mut o = arena_v2::options();
        o.latency_mode = latency_mode;
        o.adapt_prompt = !p.no_adapt_prompt;
        o.no_warmup = args.no_warmup;
        let cells = arena_v2::order(&o.depth, &o.concurrency, seed);
        return Ok((o, cells, seed, true));
    }
    let d = BenchyOptions::default();
    let pick = |v: &Vec<u32>, def: &Vec<u32>| if v.is_empty() { def.clone() } else { v.clone() };
    let o = BenchyOptions {
        pp: pick(&p.pp, &d.pp),
        tg: pick(&p.tg, &d.tg),
        depth: pick(&p.depth, &d.depth),
        concurrency: pick(&args.concurrency, &d.concurrency),
        runs: p.runs.unwrap_or(d.runs),
        no_cache: p.no_cache,
        enable_prefix_caching: p.enable_prefix_caching,
        no_warmup: args.no_warmup,
        adapt_prompt: !p.no_adapt_prompt,
        latency_mode,
    };
    let cells = llama_benchy::cells(&o);
    let seed = p.seed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
    });
    Ok((o, cells, seed, false))
}

/// lil's grid from its flags (the tool's defaults otherwise); `None` for other protocols.
fn lil_options(args: &BenchArgs) -> Option<lil::LilOptions> {
    let p = &args.protocol;
    if p.protocol != ProtocolFlag::Lil {
        return None;
    }
    let d = lil::LilOptions::default();
    Some(lil::LilOptions {
        concurrency: if args.concurrency.is_empty() {
            d.concurrency
        } else {
            args.concurrency.clone()
        },
        contexts: if p.contexts.is_empty() {
            d.contexts
        } else {
            p.contexts.clone()
        },
        max_tokens: p.max_tokens.unwrap_or(d.max_tokens),
        duration_s: p.duration.unwrap_or(d.duration_s),
        // --no-warmup means no warm-up here too.
        decode_warmup_s: if args.no_warmup {
            0.0
        } else {
            p.decode_warmup_seconds.unwrap_or(d.decode_warmup_s)
        },
    })
}

/// `spark-launch bench --protocol …`.
pub async fn run(args: &BenchArgs, ctx: &Context) -> CmdResult {
    refuse_sweep_flags(args)?;
    let Some(tokenizer) = args.protocol.tokenizer.clone() else {
        return Err(anyhow::anyhow!(
            "--protocol {} cuts prompts to exact token counts with the model's own tokenizer: give --tokenizer PATH (its tokenizer.json, or the model folder holding it)",
            protocol(args.protocol.protocol).name()
        ))
        .invalid();
    };
    let (options, cells, seed, warm_first_cell_only) = grid(args)?;
    // A --url may be any server: only OPENAI_API_KEY goes there; a job's key as the sweep finds it.
    let from_env = std::env::var("OPENAI_API_KEY").ok();
    let key = if args.url.is_some() {
        from_env.and_then(crate::plan::secret::Secret::new)
    } else {
        crate::api_key::key_for_job(from_env, &crate::api_key::auto_key_file()).invalid()?
    };
    let request = |target| ProtocolRequest {
        target,
        model: args.model.clone(),
        api_key: key.as_ref().and_then(|k| BearerKey::new(k.expose())),
        timeout: Duration::from_secs(args.timeout),
        protocol: protocol(args.protocol.protocol),
        options: options.clone(),
        cells: cells.clone(),
        warm_first_cell_only,
        seed,
        tokenizer: tokenizer.clone(),
        book: args
            .protocol
            .book_url
            .clone()
            .unwrap_or_else(|| corpus::DEFAULT_BOOK_URL.to_string()),
        save_result: args.protocol.save_result.clone().map(|p| {
            let f = match args.protocol.format {
                FormatFlag::Json => ResultFormat::Json,
                FormatFlag::Md => ResultFormat::Md,
            };
            (p, f)
        }),
        save_to: args.out.clone(),
        lil: lil_options(args),
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
        run::session(request(target), reporter, cancel).await
    })
    .await?;
    let r = &outcome.report;
    if ctx.json {
        print_json(&outcome)?;
    } else {
        let mut text = format!(
            "{} protocol, {} at {} (seed {}; {} requests, {} failed)\n\n{}",
            r.protocol.name(),
            r.model,
            r.url,
            r.seed,
            r.requests,
            r.failed,
            match &r.lil {
                Some(l) => lil::markdown(l),
                None => llama_benchy::markdown(&r.llama_benchy),
            }
        );
        if let Some(f) = &outcome.tool_file {
            let whose = match r.protocol {
                Protocol::Lil => "llm-inference-bench's",
                _ => "llama-benchy's",
            };
            text.push_str(&format!("\n{whose} file: {}", f.display()));
        }
        text.push_str(&format!("\nsaved {}", outcome.saved.display()));
        print_out(&text);
    }
    if let Some(path) = &args.plot {
        let svg = match &r.lil {
            Some(l) => crate::report::plot::lil(l),
            None => crate::report::plot::protocol(r),
        };
        super::write_plot(path, svg, ctx)?;
    }
    Ok(if r.failed > 0 {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}
