//! Carries out a plan on the nodes: fan-out over nodes, phases with one status line each,
//! timeouts and clean teardown. It decides nothing; the plan says what to do.
//!
//! - `fanout`: the only place that fans out over nodes (`for_each_node`).
//! - `phase`: the `Phase` trait and the runner (status lines, reverse clean-up, `--keep`).
//! - `executor`: a `JobPlan` → phases → run ([`execute`]); the API workloads call.
//! - `images`: image push and EnsureImage (compare by content, stream teed to every node).
//! - `serving`: the phases of serving plans (ports, reachability, staging, Ray, readiness).
//! - `shell`, `hub_curl`, `stage`: scripts on a node's shell (streamed), the Hub over curl on
//!   the head, and model staging (download once, copy over the fast link).
//!
//! # Running a workload's plan (nccl-test, vllm, trtllm, up)
//!
//! ```ignore
//! // In cli/cmd_<workload>.rs, with `launch: cli::launch::LaunchArgs` flattened into the args:
//! let cluster = cli::args::resolve(&args.target, ctx).await?;        // facts (+ SSH pool)
//! let mut plan = workload::plan(&options, &cluster.nodes)?;          // pure: a JobPlan
//! args.launch.adjust(&mut plan);                                     // --gpus, --ulimit
//! if args.launch.dry_run { return cli::launch::print_plan(&plan, ctx).map(|_| Outcome::Success); }
//! let targets = cli::launch::node_targets(cluster.pool.as_ref().unwrap());
//! let applied = cli::launch::run_plan(&plan, targets, &args.launch.apply_options(), ctx).await?;
//! let log = &applied.captures["nccl"];                               // an Exec step's capture
//! ```
//!
//! `run_plan` wires Ctrl-C to the executor and maps its error to the exit code (2 refused, 130
//! interrupted, 1 failed). `cli::launch::execute_plan` does the same but returns the executor's
//! `ApplyError`, which still carries the captures (`ApplyError::captures`), so a failed run's
//! log can be parsed for its first cause; `cli::launch::apply_failed` then gives the exit code.

pub mod executor;
pub mod fanout;
pub mod hub_curl;
pub mod images;
pub mod phase;
pub mod serving;
pub mod shell;
pub mod stage;

pub use executor::{
    Applied, ApplyContext, ApplyError, ApplyErrorKind, ApplyOptions, Capture, Captures, execute,
};
pub use fanout::{NodeFailures, all_ok, for_each_node};
pub use images::{NodePush, PushPlan, PushPolicy, PushReport, ensure_image, plan_push, push_image};
pub use phase::{Phase, PhaseError, PhaseFailure, Runner};
