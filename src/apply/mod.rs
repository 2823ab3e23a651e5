//! The executor: runs a `JobPlan` on its nodes and decides nothing (the plan says what to do).
//! Each step of the plan becomes a named phase, one file each under `phases/` (connect, check
//! the name is free, ensure the image, stage the model and the NCCL, start, wait), run in the
//! plan's order with one status line each, every node of a phase in parallel through
//! `ApplyContext::each_node` (`--concurrency`), a deadline on every wait, and clean-up in
//! reverse order after a failure or Ctrl-C unless `--keep` ([`execute`]).
//!
//! - `executor`, `phase`, `context`, `phases/`: the run itself, the `Phase` trait, what the
//!   phases share (nodes, options, captures, the start-up marks), one file per phase.
//! - `nccl`: the NCCL a job's containers load, read on the nodes once per image digest (the
//!   CheckNccl and StageNccl phases; the launch's lookups, `doctor` and `status` read it too).
//!
//! What runs on top of it lives elsewhere, so the executor reaches only what its phases need
//! (the runtime, the plan, images and model staging): the launch pipeline is `crate::launch`,
//! the supervisor's restart is `crate::supervise::run`; each other command's effects are the
//! module of that command (`images`, `pull`, `jobs`, `trust`, `fabric_apply`,
//! `doctor::gather`). A test checks the executor never imports the launch or the supervisor.
//!
//! ```ignore
//! let applied = apply::execute(&plan, &cluster, &ApplyOptions::default(), reporter, cancel).await?;
//! ```

pub mod context;
pub mod executor;
pub mod nccl;
pub mod phase;
pub mod phases;

pub use context::{ApplyContext, ApplyOptions, Capture, Captures};
pub use executor::{Applied, ApplyError, ApplyErrorKind, execute};
pub use phase::{Phase, PhaseError, PhaseFailure, Runner};
