//! `spark-launch supervise JOB` and `export systemd JOB`: flags and glue, one library call each
//! (`supervise::supervise`, `supervise::export::export_systemd`).

use std::path::PathBuf;

use super::args::NodeFlags;
use super::{CmdResult, Context, coded, show};
use crate::plan::JobName;
use crate::supervise::PolicyAsk;
use crate::supervise::export::{ExportRequest, RunAs, export_systemd};
use crate::supervise::run::{SuperviseRequest, supervise};
use crate::workload::limits::parse_seconds;

/// How the supervisor probes and restarts.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PolicyFlags {
    /// Seconds between token probes of a healthy job [default: 5].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub probe_every: Option<u64>,
    /// Seconds a probe waits for its token [default: 10].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub probe_timeout: Option<u64>,
    /// Probes in a row without a token that name a wedge [default: 2].
    #[arg(long, value_name = "N")]
    pub failures: Option<u32>,
    /// Seconds before the second restart in a row, doubled for each further one [default: 10].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub backoff: Option<u64>,
    /// Restarts in a row before giving up (exit 1) [default: 5].
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<u32>,
    /// MemAvailable below this on any node stops the job (exit 1) before the host stops
    /// answering: 3G, 512M, or a number of GiB [default: 3G].
    #[arg(long, value_name = "SIZE", value_parser = crate::workload::memory::parse_memory_size)]
    pub memory_floor: Option<u64>,
}

impl PolicyFlags {
    fn ask(&self) -> PolicyAsk {
        PolicyAsk {
            probe_every_s: self.probe_every,
            probe_timeout_s: self.probe_timeout,
            failures: self.failures,
            backoff_s: self.backoff,
            max_restarts: self.max_restarts,
            memory_floor: self.memory_floor,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct SuperviseArgs {
    /// The job to keep up (started from this machine: its plan is kept here).
    pub job: JobName,
    /// Say what would be watched and how the group would restart; touch nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub policy: PolicyFlags,
    #[command(flatten)]
    pub target: NodeFlags,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub what: ExportWhat,
}

#[derive(Debug, clap::Subcommand)]
pub enum ExportWhat {
    /// A systemd unit that runs `spark-launch supervise JOB`, so the job comes back after a reboot.
    Systemd(SystemdArgs),
    /// Kubernetes manifests (a LeaderWorkerSet) of a job, profile or recipe.
    ///
    /// PROFILE may also name a job started from this machine: when no profile or recipe has
    /// that name, the plan the job keeps is exported. The folder's README.md says what the
    /// cluster needs and how to apply the files.
    K8s(Box<super::cmd_k8s::K8sArgs>),
}

#[derive(Debug, clap::Args)]
pub struct SystemdArgs {
    pub job: JobName,
    /// A user unit (~/.config/systemd/user; at boot with `loginctl enable-linger`) [default].
    #[arg(long, conflicts_with = "system")]
    pub user: bool,
    /// A system unit (/etc/systemd/system), run as you ($SUDO_USER under sudo, else $USER).
    #[arg(long)]
    pub system: bool,
    /// The user a system unit runs the supervisor as (whose SSH keys and state folder the job
    /// uses) [default: $SUDO_USER, else $USER].
    #[arg(long, value_name = "NAME", requires = "system")]
    pub run_as: Option<String>,
    /// Write it here instead (`-`: print it).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace a file spark-launch did not write (never through a link).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub policy: PolicyFlags,
}

/// `spark-launch supervise JOB`.
pub async fn run(args: SuperviseArgs, ctx: &Context) -> CmdResult {
    let req = SuperviseRequest {
        selection: args.target.selection(ctx),
        job: args.job,
        policy: args.policy.ask().policy(),
        dry_run: args.dry_run,
        state_dir: crate::state::state_dir(),
    };
    match supervise(&req, &ctx.reporter, &ctx.cancel).await {
        Ok(done) => show(&done, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}

/// `spark-launch export systemd JOB`.
pub fn export(args: ExportArgs, ctx: &Context) -> CmdResult {
    let ExportWhat::Systemd(a) = args.what else {
        return Err(anyhow::anyhow!("export k8s is not a systemd export").into());
    };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let run_as = || match a.run_as.clone() {
        Some(name) => RunAs::Given(name),
        None => ["SUDO_USER", "USER"]
            .into_iter()
            .find_map(|var| env(var).map(|name| RunAs::FromEnv { var, name }))
            .unwrap_or(RunAs::Unknown),
    };
    let req = ExportRequest {
        job: a.job.clone(),
        system_user: a.system.then(run_as),
        output: a.output.clone(),
        force: a.force,
        binary: std::env::current_exe()?,
        cluster_file: ctx.cluster_file.clone(),
        state_dir: crate::state::state_dir(),
        home: env("HOME").map(PathBuf::from).unwrap_or_default(),
        supervise_args: a.policy.ask().args(),
    };
    match export_systemd(&req) {
        Ok(done) => show(&done, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}
