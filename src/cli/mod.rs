//! The command line: clap definitions and, per command, a short function that parses its flags
//! into library types, calls the library once and renders the result: flags
//! and glue. Every decision lives in the library: which nodes (`resolve`), what to do on them
//! (`workload`), doing it (`apply`). No command loops over nodes or re-parses arguments.
//!
//! Exit codes: 0 ok; 1 a verdict, check or operation failed; 2 invalid input or a refused
//! configuration. Errors print as `error: ...` followed by their cause chain.

mod args;
mod cmd_bench;
mod cmd_bench_protocol;
mod cmd_check;
mod cmd_completions;
mod cmd_compose;
mod cmd_discover;
mod cmd_doctor;
mod cmd_env;
mod cmd_fabric;
mod cmd_image;
mod cmd_jobs;
mod cmd_k8s;
mod cmd_model;
mod cmd_nccl;
mod cmd_nodes;
mod cmd_probe;
mod cmd_profiles;
mod cmd_registry;
mod cmd_report;
mod cmd_serve;
mod cmd_sim;
mod cmd_supervise;
mod cmd_trust;
pub mod launch;
mod plot_file;
mod served;
pub mod ui;

/// The plan renderer, where the launching commands (and the plan tests) have always found it.
pub use crate::workload::render;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::progress::Reporter;
use crate::report::shown::{Ending, Shown};

/// The heading of the flags every command takes, apart from each command's own in `--help`.
const GLOBAL: &str = "Global options";

/// Turn a few GPU boxes joined by RoCE cables into one inference cluster, with one command.
#[derive(Debug, Parser)]
#[command(name = "spark-launch", version, about, long_about = None)]
pub struct Cli {
    /// Print results as JSON on stdout (progress still goes to stderr, unless silenced).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,

    /// More detail in logs (-v info, -vv debug, -vvv trace). Progress bars are hidden.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet", help_heading = GLOBAL)]
    pub verbose: u8,

    /// Only results and warnings; no progress.
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,

    /// No progress bars or status lines (also: SPARK_LAUNCH_NO_PROGRESS=1).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_progress: bool,

    /// The cluster file [default: $XDG_CONFIG_HOME/spark-launch/cluster.yaml].
    #[arg(long, global = true, value_name = "FILE", env = "SPARK_LAUNCH_CLUSTER", help_heading = GLOBAL)]
    pub cluster: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Find the other boxes on the fast link (mDNS, fabric interfaces only).
    Discover(cmd_discover::DiscoverArgs),
    /// List, add or remove the nodes of the cluster file.
    Nodes(cmd_nodes::NodesArgs),
    /// SSH keys between every pair of nodes, public keys only.
    Trust(cmd_trust::TrustArgs),
    /// From a plugged cable to a verified RoCE fabric: plan, apply, rollback, test.
    Fabric(cmd_fabric::FabricArgs),
    /// Print this machine's RDMA/NIC facts, or capture them as a snapshot folder.
    Probe(cmd_probe::ProbeArgs),
    /// The NCCL/UCX/OMPI/Gloo/Ray variables derived for each node.
    Env(cmd_env::EnvArgs),
    /// Is this cluster ready? What exactly is wrong, and how to fix it.
    Doctor(cmd_doctor::DoctorArgs),
    /// Build the NCCL + nccl-tests image and distribute it to every node.
    NcclBuild(cmd_nccl::BuildArgs),
    /// Containers on every node, nccl-tests across them, a verdict.
    NcclTest(cmd_nccl::NcclTestArgs),
    /// One subcommand per serving engine (`vllm`, `trtllm`, `sglang`).
    #[command(flatten)]
    Serve(cmd_serve::ServeCommand),
    /// Run a whole demo from a launch profile.
    Up(cmd_profiles::UpArgs),
    /// List launch profiles and whether this cluster can run them.
    Profiles(cmd_profiles::ListArgs),
    /// The recipe registries kept for `up NAME` and `profiles --recipes`.
    #[command(subcommand)]
    Registry(cmd_registry::RegistryCommand),
    /// Write one compose file per node for a profile.
    Compose(cmd_compose::ComposeArgs),
    /// Model weights on every node.
    Model(cmd_model::ModelCmdArgs),
    /// Images on every node.
    Image(cmd_image::ImageArgs),
    /// Start the same command on every node as one job (containers or host processes).
    Run(cmd_jobs::RunArgs),
    /// What runs where.
    Status(cmd_jobs::StatusArgs),
    /// The logs of a job, from every node.
    Logs(cmd_jobs::LogsArgs),
    /// Stop a job on every node (only containers spark-launch labelled).
    Stop(cmd_jobs::StopArgs),
    /// Keep a serving job up: probe it, restart its whole group when a rank wedges or stops.
    Supervise(cmd_supervise::SuperviseArgs),
    /// Write what runs a job elsewhere: its supervisor at boot (systemd), or on Kubernetes.
    Export(cmd_supervise::ExportArgs),
    /// Measure a served model: tokens/s, TTFT and inter-token latency at a few concurrencies.
    Bench(cmd_bench::BenchArgs),
    /// Is the served model answering right: arithmetic it must get right, answers that stop,
    /// prose that is words, a code word found deep in its context.
    Check(cmd_check::CheckArgs),
    /// Parse saved tool output (nccl-tests logs) into results and a verdict.
    Report(cmd_report::ReportArgs),
    /// A simulated cluster on this machine, to try every command without Sparks.
    Sim(cmd_sim::SimArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd_completions::CompletionsArgs),
    /// Write the man pages (spark-launch.1 and one per command) into a folder.
    Man(cmd_completions::ManArgs),
}

/// What every command gets besides its own arguments.
pub struct Context {
    pub json: bool,
    pub verbose: u8,
    pub quiet: bool,
    pub cluster_file: PathBuf,
    /// Progress and warnings (stderr). `--json` silences progress like `-q` does.
    pub reporter: Arc<dyn Reporter>,
    /// Fired by Ctrl-C, SIGTERM or SIGHUP; a second one quits at once.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// How a command ended, when it did not fail outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: the command ran and reported a failed verdict or check (already printed).
    Failed,
}

/// A command that could not do its job.
#[derive(Debug)]
pub struct CmdError {
    /// 1 for operational failures, 2 for invalid input or a refused configuration.
    pub code: u8,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for CmdError {
    fn from(e: E) -> Self {
        CmdError {
            code: 1,
            error: e.into(),
        }
    }
}

/// Marks an error as invalid input / refused configuration (exit 2).
pub trait Invalid<T> {
    fn invalid(self) -> Result<T, CmdError>;
}

impl<T, E: Into<anyhow::Error>> Invalid<T> for Result<T, E> {
    fn invalid(self) -> Result<T, CmdError> {
        self.map_err(|e| CmdError {
            code: 2,
            error: e.into(),
        })
    }
}

pub type CmdResult = Result<Outcome, CmdError>;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // Started by ssh as the askpass helper of `trust`'s first contact: answer and leave.
    if let Some(code) = crate::ssh::askpass::serve_if_asked() {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    ui::init_logging(cli.verbose, cli.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli));
    // Flush stdout; a closed pipe (`| head`) is not an error.
    let _ = std::io::stdout().flush();
    if matches!(&result, Err(e) if e.code == 130) {
        // Interrupted: a blocking task still running (a local probe waiting on a slow `ip`)
        // must not hold the exit, as dropping the runtime would until it ends.
        runtime.shutdown_background();
    }
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Err(e) => {
            print_error(&e.error);
            ExitCode::from(e.code)
        }
    }
}

fn print_error(e: &anyhow::Error) {
    let mut stderr = std::io::stderr().lock();
    for line in error_lines(e) {
        let _ = writeln!(stderr, "{line}");
    }
}

/// An error as printed: `error: …`, then each cause the lines above do not already say
/// (`cannot read run.log: No such file…` is not followed by `caused by: No such file…`).
/// Errors quote what nodes, files and daemons said: printable, never raw control characters.
fn error_lines(e: &anyhow::Error) -> Vec<String> {
    let mut said = e.to_string();
    let mut lines = vec![format!("error: {}", crate::text::printable_lines(&said))];
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if said.contains(&text) {
            continue;
        }
        lines.push(format!(
            "  caused by: {}",
            crate::text::printable_lines(&text)
        ));
        said.push('\n');
        said.push_str(&text);
    }
    lines
}

async fn run(cli: Cli) -> CmdResult {
    let reporter =
        crate::progress::term::for_stderr(cli.quiet || cli.json, cli.no_progress, cli.verbose);
    // Commands that clean up after Ctrl-C watch the token themselves; those that only read
    // end at once; the others stop where they next wait.
    let on_signal = match cli.command {
        Command::Run(_)
        | Command::NcclTest(_)
        | Command::NcclBuild(_)
        | Command::Serve(_)
        | Command::Up(_) => ui::OnSignal::CleanUp { starts_jobs: true },
        Command::Logs(_)
        | Command::Image(_)
        | Command::Bench(_)
        | Command::Check(_)
        | Command::Supervise(_) => ui::OnSignal::CleanUp { starts_jobs: false },
        // `sim up` removes a half-made sim; `sim down` finishes what it started.
        Command::Sim(ref a) if !matches!(a.command, cmd_sim::SimCommand::Status) => {
            ui::OnSignal::CleanUp { starts_jobs: false }
        }
        // The live view puts the terminal back itself.
        Command::Status(ref a) if a.watch => ui::OnSignal::CleanUp { starts_jobs: false },
        Command::Probe(_)
        | Command::Env(_)
        | Command::Profiles(_)
        | Command::Status(_)
        | Command::Report(_)
        | Command::Sim(_)
        | Command::Completions(_) => ui::OnSignal::Exit,
        _ => ui::OnSignal::Stop,
    };
    let cleans_up = matches!(on_signal, ui::OnSignal::CleanUp { .. });
    let cancel = ui::cancel_on_signals(reporter.clone(), on_signal);
    let ctx = Context {
        json: cli.json,
        verbose: cli.verbose,
        quiet: cli.quiet,
        cluster_file: cli.cluster.clone().unwrap_or_else(default_cluster_file),
        reporter,
        cancel: cancel.clone(),
    };
    if cleans_up {
        return dispatch(cli.command, &ctx).await;
    }
    tokio::select! {
        r = dispatch(cli.command, &ctx) => r,
        _ = cancel.cancelled() => Err(CmdError {
            code: 130,
            error: anyhow::anyhow!("interrupted"),
        }),
    }
}

async fn dispatch(command: Command, ctx: &Context) -> CmdResult {
    match command {
        Command::Discover(a) => cmd_discover::run(a, ctx).await,
        Command::Nodes(a) => cmd_nodes::run(a, ctx).await,
        Command::Trust(a) => cmd_trust::run(a, ctx).await,
        Command::Fabric(a) => cmd_fabric::run(a, ctx).await,
        Command::Probe(a) => cmd_probe::run(a, ctx).await,
        Command::Env(a) => cmd_env::run(a, ctx).await,
        Command::Doctor(a) => cmd_doctor::run(a, ctx).await,
        Command::NcclBuild(a) => cmd_nccl::build(a, ctx).await,
        Command::NcclTest(a) => cmd_nccl::test(a, ctx).await,
        Command::Serve(c) => cmd_serve::run(c, ctx).await,
        Command::Up(a) => cmd_profiles::up(a, ctx).await,
        Command::Profiles(a) => cmd_profiles::list(a, ctx).await,
        Command::Registry(c) => cmd_registry::run(c, ctx).await,
        Command::Compose(a) => cmd_compose::run(a, ctx).await,
        Command::Model(a) => cmd_model::run(a, ctx).await,
        Command::Image(a) => cmd_image::run(a, ctx).await,
        Command::Run(a) => cmd_jobs::run(a, ctx).await,
        Command::Status(a) => cmd_jobs::status(a, ctx).await,
        Command::Logs(a) => cmd_jobs::logs(a, ctx).await,
        Command::Stop(a) => cmd_jobs::stop(a, ctx).await,
        Command::Supervise(a) => cmd_supervise::run(a, ctx).await,
        Command::Export(a) => match a.what {
            cmd_supervise::ExportWhat::K8s(k) => cmd_k8s::run(*k, ctx).await,
            what => cmd_supervise::export(cmd_supervise::ExportArgs { what }, ctx),
        },
        Command::Bench(a) => cmd_bench::run(a, ctx).await,
        Command::Check(a) => cmd_check::run(a, ctx).await,
        Command::Report(a) => cmd_report::run(a, ctx).await,
        Command::Sim(a) => cmd_sim::run(a, ctx).await,
        Command::Completions(a) => cmd_completions::completions(a),
        Command::Man(a) => cmd_completions::man(a),
    }
}

/// `$XDG_CONFIG_HOME/spark-launch/cluster.yaml`, or `~/.config/spark-launch/cluster.yaml`.
pub fn default_cluster_file() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from(".config"));
    base.join("spark-launch").join("cluster.yaml")
}

/// A failed resolve stage as a command error: the user's input (exit 2) or unreachable nodes
/// (exit 1).
pub(crate) fn resolve_error(e: crate::resolve::ResolveError) -> CmdError {
    CmdError {
        code: if e.is_invalid_input() { 2 } else { 1 },
        error: e.into(),
    }
}

/// Loads the cluster file for commands that edit it; a missing file is an empty cluster, an
/// invalid one is the user's to fix (exit 2).
pub(crate) fn load_inventory(
    path: &std::path::Path,
) -> Result<crate::inventory::Inventory, CmdError> {
    match crate::inventory::load_or_empty(path) {
        Ok(inv) => Ok(inv),
        Err(e @ crate::inventory::InventoryError::Invalid { .. }) => Err(e).invalid(),
        Err(e) => Err(e.into()),
    }
}

/// Checks, before the run that draws it, that a `--plot` picture can be written where asked
/// (refused: exit 2, nothing run).
pub(crate) fn check_plot(path: Option<&std::path::Path>) -> Result<(), CmdError> {
    match path {
        Some(p) => plot_file::check(p).invalid(),
        None => Ok(()),
    }
}

/// Writes a picture `report::plot` drew, once the results are shown (a failed write never
/// hides them), and says so: `wrote plot FILE` after the results on stdout (on stderr with
/// `--json`, whose stdout is the JSON only). Results with nothing to draw (a run that failed
/// before measuring) are a warning: the verdict still follows, and decides the exit.
pub(crate) fn write_plot(
    path: &std::path::Path,
    svg: Result<String, crate::report::plot::PlotError>,
    ctx: &Context,
) -> anyhow::Result<()> {
    match svg {
        Ok(svg) => {
            plot_file::write(path, &svg)?;
            let said = format!("wrote plot {}", path.display());
            if ctx.json {
                ctx.reporter.info(&said);
            } else {
                print_out(&said);
            }
            Ok(())
        }
        Err(e @ crate::report::plot::PlotError::Empty(_)) => {
            let shown = format!("no picture written to {}: {e}", path.display());
            ctx.reporter.warn(&shown);
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn coded(code: u8, e: impl Into<anyhow::Error>) -> CmdError {
    CmdError {
        code,
        error: e.into(),
    }
}

/// Shows a library result (`--json`: its JSON; else its text) and ends as the result says.
pub(crate) fn show(result: &dyn Shown, ctx: &Context) -> CmdResult {
    if ctx.json {
        print_raw(&result.json()?);
    } else {
        print_out(&result.text());
    }
    match result.ending() {
        Ending::Ok => Ok(Outcome::Success),
        Ending::Failed => Ok(Outcome::Failed),
        Ending::Error { code, message } => Err(coded(code, anyhow::Error::msg(message))),
    }
}

/// Prints a value as pretty JSON on stdout, followed by a newline.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CmdError> {
    print_raw(&serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints text on stdout, ignoring a closed pipe. Results quote foreign text (names and values
/// from nodes, snapshots, logs): control characters are shown escaped, never sent raw.
pub(crate) fn print_out(text: &str) {
    print_raw(&crate::text::printable_lines(text));
}

/// Writes text on stdout as `print_out` does, and says whether it could: a command that goes
/// on printing (`status --watch`) stops when its reader has gone (a broken pipe).
pub(crate) fn write_out(text: &str) -> std::io::Result<()> {
    let text = crate::text::printable_lines(text);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Prints text on stdout as it is (a job's own output for `logs`), ignoring a closed pipe.
pub(crate) fn print_raw(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_error_already_quotes_is_printed_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e: anyhow::Error = crate::input::read_text(
            std::path::Path::new("/nonexistent/run.log"),
            crate::input::LOG,
        )
        .map_err(anyhow::Error::from)
        .unwrap_err();
        let lines = error_lines(&e);
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(lines[0].starts_with("error: "), "{lines:#?}");
        // A cause not said yet still shows, each once.
        let e = anyhow::Error::from(io).context("reading the plan");
        let lines = error_lines(&e);
        assert_eq!(
            lines,
            vec![
                "error: reading the plan".to_string(),
                "  caused by: entity not found".to_string()
            ]
        );
    }
}
