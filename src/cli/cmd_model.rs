//! `spark-launch model pull MODEL`: the weights on every node. The head downloads once from
//! the Hub (or already has the folder); every other node copies from the head over the fast
//! link, in parallel streams, resumable, keeping the Hugging Face cache layout.

use std::sync::Arc;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::{TargetArgs, resolve};
use super::cmd_serve::{hub_error, node_paths};
use super::{CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::apply::serving::head_hop;
use crate::apply::shell::{NodeShell, SshShell};
use crate::apply::stage::{
    self, StageNode, StageOptions, StageSpec, hf_endpoint, hf_token, human_bytes,
};
use crate::derive::derive;
use crate::model::ModelSource;
use crate::model::hub::resolve_base;
use crate::workload::serve::NodePaths;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Put a model's weights on every node: download once on the head, copy to the others
    /// over the fast link (parallel, resumable, skipping what is already there).
    Pull(PullArgs),
}

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// ORG/NAME[@REVISION] on the Hugging Face Hub, or an absolute folder on the head.
    pub model: String,

    /// A branch, tag or commit [default: main].
    #[arg(long)]
    pub revision: Option<String>,

    /// The Hugging Face cache on every node [default: ~/.cache/huggingface of the SSH user].
    #[arg(long, value_name = "DIR")]
    pub hf_home: Option<String>,

    /// Parallel streams per node.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub streams: usize,

    /// Bytes per range in MiB: the unit of progress, retry and resume.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub range_mib: u64,

    /// Say what would be staged where, and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub target: TargetArgs,
}

pub async fn run(args: Args, ctx: &Context) -> CmdResult {
    match args.command {
        ModelCommand::Pull(a) => pull(a, ctx).await,
    }
}

async fn pull(args: PullArgs, ctx: &Context) -> CmdResult {
    let model = ModelSource::parse(&args.model, args.revision.as_deref()).invalid()?;
    if args.target.uses_snapshots() && !args.dry_run {
        return Err(anyhow::anyhow!(
            "--snapshot stands in for nodes only with --dry-run"
        ))
        .invalid();
    }
    let cluster = resolve(&args.target, ctx).await?;
    let names: Vec<_> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    // The head's fabric address, where the workers copy from.
    let head_addr = derive(&cluster.nodes)
        .ok()
        .map(|env| env.nodes[0].control.addr.to_string());
    if args.dry_run {
        let endpoint = hf_endpoint();
        let dirs: Vec<serde_json::Value> = names
            .iter()
            .map(|n| {
                let home = args
                    .hf_home
                    .clone()
                    .unwrap_or_else(|| NodePaths::default().hf_home);
                serde_json::json!({ "node": n, "dir": model.node_dir(&home) })
            })
            .collect();
        let source = match &model {
            ModelSource::Hub {
                repo,
                revision,
                commit,
            } => resolve_base(
                &endpoint,
                repo,
                commit.as_deref().unwrap_or(revision.as_str()),
            ),
            ModelSource::Local { path } => format!("{path} on {}", names[0]),
        };
        let plan = serde_json::json!({
            "model": model,
            "head": names[0],
            "download_from": source,
            "copy_from": head_addr.as_ref().map(|a| format!("{}:{} over ssh", names[0], a)),
            "nodes": dirs,
            "streams": args.streams,
        });
        if let Some(pool) = cluster.pool {
            pool.close().await;
        }
        if ctx.json {
            print_json(&plan)?;
        } else {
            let mut out = format!("stage {model} on {}\n", names.len());
            out.push_str(&format!("  1. {}: download from {source}\n", names[0]));
            for d in &dirs[1..] {
                out.push_str(&format!(
                    "  2. {}: copy from {} ({} streams)\n",
                    d["node"].as_str().unwrap_or("?"),
                    head_addr.as_deref().unwrap_or(names[0].as_str()),
                    args.streams
                ));
            }
            for d in &dirs {
                out.push_str(&format!(
                    "     {} keeps it in {}\n",
                    d["node"].as_str().unwrap_or("?"),
                    d["dir"].as_str().unwrap_or("?")
                ));
            }
            print_out(&out);
        }
        return Ok(Outcome::Success);
    }
    let Some(pool) = &cluster.pool else {
        return Err(anyhow::anyhow!("no live nodes").into());
    };
    let shells: Vec<Arc<dyn NodeShell>> = names
        .iter()
        .map(|n| {
            pool.get(n)
                .map(|h| Arc::new(SshShell::new(h.clone())) as Arc<dyn NodeShell>)
        })
        .collect::<Result<_, _>>()?;
    let paths = node_paths(&shells, args.hf_home.as_deref()).await?;
    let token = hf_token();
    let endpoint = hf_endpoint();
    let step = ctx.reporter.step(&format!("resolve {model}"));
    let resolved =
        match stage::resolve_on_head(shells[0].clone(), &endpoint, &model, token.clone()).await {
            Ok(r) => r,
            Err(e) => {
                step.fail("");
                pool.close().await;
                return hub_error(e);
            }
        };
    match &resolved {
        Some(r) => step.ok_with(&format!(
            "commit {}, {} files, {}",
            &r.commit[..12],
            r.files.len(),
            human_bytes(r.total_bytes())
        )),
        None => step.ok(),
    }
    let head_addr = head_addr.unwrap_or_else(|| {
        pool.get(&names[0])
            .ok()
            .and_then(|h| h.dest().map(|d| d.host.clone()))
            .unwrap_or_else(|| names[0].to_string())
    });
    let node = |i: usize| StageNode {
        shell: shells[i].clone(),
        hf_home: paths
            .get(shells[i].node())
            .map(|p| p.hf_home.clone())
            .unwrap_or_default(),
    };
    let spec = StageSpec {
        model: resolved
            .as_ref()
            .map(|r| r.source())
            .unwrap_or(model.clone()),
        resolved,
        endpoint,
        token,
        head: node(0),
        workers: (1..shells.len())
            .map(|i| (node(i), head_hop(&names[0], &head_addr)))
            .collect(),
        options: StageOptions {
            streams: args.streams,
            range_size: args.range_mib.max(1) * 1024 * 1024,
            ..StageOptions::default()
        },
    };
    let step = ctx
        .reporter
        .step(&format!("stage {model} on {} nodes", names.len()));
    let result = stage::stage(&spec, ctx.reporter.clone()).await;
    pool.close().await;
    let reports = match result {
        Ok(r) => {
            step.ok();
            r
        }
        Err(e) => {
            step.fail("");
            return Err(anyhow::anyhow!(e).into());
        }
    };
    if ctx.json {
        print_json(&serde_json::json!({ "model": spec.model, "nodes": reports }))?;
        return Ok(Outcome::Success);
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "node",
        "fetched",
        "resumed",
        "already there",
        "time",
        "rate",
    ]);
    for r in &reports {
        let secs = (r.millis as f64 / 1000.0).max(0.001);
        t.add_row(vec![
            r.node.to_string(),
            format!(
                "{} ({} files)",
                human_bytes(r.fetched_bytes),
                r.fetched_files
            ),
            human_bytes(r.resumed_bytes),
            format!(
                "{} ({} files)",
                human_bytes(r.present_bytes),
                r.present_files
            ),
            format!("{secs:.1}s"),
            if r.fetched_bytes > 0 {
                format!("{}/s", human_bytes((r.fetched_bytes as f64 / secs) as u64))
            } else {
                "-".into()
            },
        ]);
    }
    print_out(&t.to_string());
    Ok(Outcome::Success)
}
