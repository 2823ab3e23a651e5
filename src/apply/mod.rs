//! Carries out what was decided, on the nodes: the launch of a plan, the executor's phases,
//! and the other effects the commands need. It decides nothing; the plans say what to do.
//!
//! Every command is one call here: a request the CLI built from its flags (no I/O) goes in, a
//! report comes out, and the CLI only shows it (`report::shown`). The nodes are resolved
//! inside the call and their connections close on every exit path (`ResolvedCluster::scope`).
//!
//! - `launch`: the one entry of every launching command — resolve the nodes, the pre-plan
//!   `lookup`s, the one plan (`workload::launch`), then the dry run or its execution, and what
//!   follows (an nccl-test's verdict, `serving`'s attach).
//! - `executor`, `phase`, `context`, `phases/`: a `JobPlan` → named phases (one per file) → run
//!   ([`execute`]), one status line each, reverse clean-up on failure or Ctrl-C, `--keep`.
//! - `images`: `image push` ([`images::push`]) and EnsureImage (compared by content, only the
//!   missing layers sent).
//! - `hub_curl`, `stage`, `pull`: the Hub over curl on the head, model staging (download once,
//!   copy over the fast link) and `model pull` ([`pull::run`]).
//! - `build`: `nccl-build`'s image builds and pushes.
//! - `supervise`: `supervise JOB` and `--supervise` ([`supervise::supervise`]): token probes,
//!   every rank's container watched, the whole group restarted as `crate::supervise::machine`
//!   decides, every event in the job's log.
//! - `jobs`: `status`, `logs`, `stop` by label ([`jobs::status`], [`jobs::logs`],
//!   [`jobs::stop`]). `doctor`: `doctor` ([`doctor::run`]) and its live gather.
//! - `trust`: `trust` ([`trust::run`]): first contact, then `ssh::trust::establish`.
//! - `nccl`: the NCCL a job's containers load, read on the nodes (pre-plan lookup, CheckNccl,
//!   StageNccl, doctor), once per image digest.
//! - `owned_files`: a folder of files spark-launch writes (`compose --out`), replacing only its
//!   own ([`owned_files::write`]).
//! - `fabric`, `perftest`: `spark-launch fabric` ([`fabric::run`]: plan, apply, rollback,
//!   test) and its effects (root through sudo, the privileged link probe, apply with its
//!   self-rollback, verify, rollback) and its `ib_write_bw` runs.
//!
//! ```ignore
//! // What a launching command in `cli` does, once its flags are parsed:
//! let launch = LaunchCommand { request, selection, dry_run, options, detach, supervise };
//! match apply::launch::launch(&launch, &reporter, &cancel, &on_ready).await? {
//!     Launched::Planned(p) => { /* print p.plan: exactly what a run would execute */ }
//!     Launched::Tested { verdict, .. } => { /* render the verdict */ }
//!     _ => {}
//! }
//! ```

pub mod context;
pub mod executor;
pub mod nccl;
pub mod phase;
pub mod phases;

pub use context::{ApplyContext, ApplyOptions, Capture, Captures};
pub use executor::{Applied, ApplyError, ApplyErrorKind, execute};
pub use phase::{Phase, PhaseError, PhaseFailure, Runner};
