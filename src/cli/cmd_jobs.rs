//! `spark-launch run`, `status`, `logs` and `stop`: flags and glue. `run` is a launching
//! command (`launch`); the others are one `jobs` call each, which finds any
//! job's work by its labels on the nodes, never touching containers spark-launch did not label.

use std::collections::BTreeMap;
use std::time::Duration;

use super::args::{ContainerFlags, EngineFlags, LaunchFlags, NodeFlags, RuntimeFlag};
use super::{CmdResult, Context, Outcome, coded, print_json, print_raw, show};
use crate::jobs::{self, LogsRequest, StatusRequest, StopRequest};
use crate::launch::LaunchCommand;
use crate::node::NodeName;
use crate::plan::JobName;
use crate::plan::spec::{EnvVar, Mount};
use crate::resolve::Selection;
use crate::workload::launch::LaunchRequest;
use crate::workload::run::RunRequest;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job's name; its containers are named sl-JOB-NODE.
    #[arg(long = "job", value_name = "NAME")]
    pub job: JobName,

    /// The image to run (not needed with --runtime host).
    #[arg(long)]
    pub image: Option<String>,

    /// An environment variable for the job (repeat).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<EnvVar>,

    /// A bind mount from the node (repeat): SRC:DST or SRC:DST:ro.
    #[arg(long = "mount", value_name = "SRC:DST[:ro]")]
    pub mounts: Vec<Mount>,

    /// A device node passed into the container (repeat), e.g. /dev/infiniband.
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<String>,

    /// A TCP port the job serves on the node, shown by `status` (repeat).
    #[arg(long = "port", value_name = "PORT", value_parser = crate::workload::limits::parse_port)]
    pub ports: Vec<u16>,

    /// How the job runs on each node: containers, or plain processes (no Docker needed).
    #[arg(long, value_enum, default_value_t = RuntimeFlag::Docker)]
    pub runtime: RuntimeFlag,

    #[command(flatten)]
    pub container: ContainerFlags,

    #[command(flatten)]
    pub launch: LaunchFlags,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,

    /// The command to run on every node (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this job.
    pub job: Option<JobName>,

    /// A live view: per node GPU and memory, the job's engine metrics, state and last events
    /// (refreshing screen; plain text samples when not a terminal; one sample with --json).
    #[arg(long)]
    pub watch: bool,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The job whose logs to show.
    pub job: JobName,

    /// Only this node's log (no prefixes).
    #[arg(long, value_name = "NAME")]
    pub node: Option<NodeName>,

    /// Keep printing what the job writes until it ends (or Ctrl-C).
    #[arg(short, long)]
    pub follow: bool,

    /// The supervisor's event log of the job instead (wedges, restarts, ready again).
    #[arg(long, conflicts_with_all = ["follow", "node"])]
    pub events: bool,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["job", "all"]))]
pub struct StopArgs {
    /// The job to stop and remove on every node.
    pub job: Option<JobName>,

    /// Every job spark-launch started (only containers and processes carrying its labels).
    #[arg(long)]
    pub all: bool,

    /// Seconds between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 10, value_name = "SECONDS", value_parser = crate::workload::limits::parse_seconds)]
    pub grace: u64,

    /// Say what would be stopped and removed on each node, and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub engines: EngineFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

/// `spark-launch run`: start the same command on every node as one job.
pub async fn run(args: RunArgs, ctx: &Context) -> CmdResult {
    let selection = selection(&args.target, args.engines, ctx);
    let request = LaunchRequest::Run(RunRequest {
        job: args.job,
        runtime: args.runtime.into(),
        image: args.image,
        env: args
            .env
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect::<BTreeMap<_, _>>(),
        mounts: args.mounts,
        devices: args.devices,
        ports: args.ports,
        command: args.command,
        overrides: args.container.overrides(),
    });
    let launch = LaunchCommand {
        request,
        selection,
        dry_run: args.launch.dry_run,
        options: args.launch.apply_options(),
        detach: true,
        supervise: None,
    };
    super::launch::run(launch, Default::default(), ctx).await
}

/// The nodes of a job command: `--engine`, `--hosts`, the cluster file, else this machine.
fn selection(target: &NodeFlags, engines: EngineFlags, ctx: &Context) -> Selection {
    let mut selection = target.selection(ctx);
    selection.engines = engines.engines;
    selection
}

/// `spark-launch status`.
pub async fn status(args: StatusArgs, ctx: &Context) -> CmdResult {
    let request = StatusRequest {
        selection: selection(&args.target, args.engines, ctx),
        job: args.job,
    };
    if args.watch {
        use std::io::IsTerminal;
        let show = match (ctx.json, std::io::stdout().is_terminal()) {
            (true, _) => jobs::WatchShow::Once,
            (false, true) => jobs::WatchShow::Screen,
            (false, false) => jobs::WatchShow::Lines(&super::write_out),
        };
        return match jobs::watch(&request, &ctx.reporter, &ctx.cancel, show).await {
            Ok(s) if ctx.json => print_json(&s).map(|_| Outcome::Success),
            Ok(_) => Ok(Outcome::Success),
            Err(e) => Err(coded(e.exit_code(), e)),
        };
    }
    match jobs::status(&request, &ctx.reporter).await {
        Ok(report) => show(&report, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}

/// `spark-launch logs JOB [--node N] [-f]`: the job's own output, printed as it is.
pub async fn logs(args: LogsArgs, ctx: &Context) -> CmdResult {
    if args.events {
        let state = crate::state::state_dir();
        return show(&crate::records::EventsReport::read(&state, &args.job)?, ctx);
    }
    let request = LogsRequest {
        selection: selection(&args.target, args.engines, ctx),
        job: args.job,
        node: args.node,
        follow: args.follow,
    };
    match jobs::logs(&request, &ctx.reporter, &ctx.cancel, &print_raw).await {
        Ok(r) if r.failed.is_empty() => Ok(Outcome::Success),
        Ok(_) => Ok(Outcome::Failed),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}

/// `spark-launch stop JOB|--all`.
pub async fn stop(args: StopArgs, ctx: &Context) -> CmdResult {
    let request = StopRequest {
        selection: selection(&args.target, args.engines, ctx),
        job: args.job,
        grace: Duration::from_secs(args.grace),
        dry_run: args.dry_run,
    };
    match jobs::stop(&request, &ctx.reporter).await {
        Ok(report) => show(&report, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}
