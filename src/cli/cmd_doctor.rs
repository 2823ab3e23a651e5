//! `spark-launch doctor`: every known way a multi-node setup silently goes wrong, checked on
//! every node, each problem with its fix.
//!
//! Flags and glue: one `doctor::gather::run` call (the nodes, the live observations, the
//! judgement of `doctor::run`; `--log FILE` adds the last-run analysers, and with only
//! `--log` no machine is touched), its report rendered by `doctor::render`.

use std::path::PathBuf;

use super::args::NodeFlags;
use super::{CmdResult, Context, Outcome, coded, print_json, print_out};
use crate::doctor::gather::{self as check, DoctorRequest};
use crate::doctor::{self, CheckSelection, ModelRef, Options, PortScope, PortUse};

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// Print only the fixes, grouped by node (commands ready to paste).
    #[arg(long)]
    pub fix_hints_only: bool,

    /// Analyse the log of a last run (nccl-tests, vLLM, Ray); repeatable. Alone, no machine
    /// is touched.
    #[arg(long = "log", value_name = "FILE")]
    pub logs: Vec<PathBuf>,

    /// The image the cluster will run: same digest and right architecture on every node,
    /// memlock inside a test container, disk for twice its size.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// A model whose weights must be on every node: `org/name[@revision]` (Hugging Face
    /// cache) or an absolute path.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<ModelRef>,

    /// Run only these checks: ids or categories (`fabric`, `host.cma`); repeatable.
    #[arg(long = "check", value_name = "ID")]
    pub only: Vec<String>,

    /// Leave these checks out: ids or categories; repeatable.
    #[arg(long = "skip", value_name = "ID")]
    pub skip: Vec<String>,

    /// Another TCP port that must be free on the head (beyond the ports the serving engines
    /// bind with their defaults: vLLM 8000, 29501 and Ray's 6379; TensorRT-LLM 8355 on the
    /// head and 2233 on every node; SGLang 30000 and 20000; llama.cpp 8080 on the head and its
    /// RPC servers' 50052; Atlas 8888 and 29500); repeatable.
    #[arg(long = "port", value_name = "PORT", value_parser = crate::workload::limits::parse_port)]
    pub ports: Vec<u16>,
}

pub async fn run(args: DoctorArgs, ctx: &Context) -> CmdResult {
    let mut options = Options {
        image: args.image.clone(),
        model: args.model.clone(),
        ..Options::default()
    };
    for p in &args.ports {
        options.ports.push(PortUse::new(
            *p,
            "a port given with --port",
            PortScope::Head,
        ));
    }
    let request = DoctorRequest {
        selection: args.target.selection(ctx),
        options,
        checks: CheckSelection {
            only: args.only,
            skip: args.skip,
        },
        logs: args.logs,
    };
    let report = check::run(&request, &ctx.reporter)
        .await
        .map_err(|e| coded(e.exit_code(), e))?;
    if ctx.json {
        print_json(&report)?;
    } else if args.fix_hints_only {
        print_out(&doctor::render::fix_hints(&report));
    } else {
        print_out(&doctor::render::text(&report));
    }
    Ok(if report.failed() {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}
