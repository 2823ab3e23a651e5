//! Carries out a plan on the nodes: fan-out over nodes, phases with one status line each,
//! timeouts and clean teardown. It decides nothing; the plan says what to do.
//!
//! - `fanout`: the only place that fans out over nodes (`for_each_node`).
//! - `phase`: the `Phase` trait and the runner (status lines, reverse clean-up, `--keep`).
//! - `executor`: a `JobPlan` → phases → run ([`execute`]); the API workloads call.
//! - `images`: image push and EnsureImage (compare by content, stream teed to every node).

pub mod executor;
pub mod fanout;
pub mod images;
pub mod phase;

pub use executor::{
    Applied, ApplyContext, ApplyError, ApplyErrorKind, ApplyOptions, Capture, Captures, execute,
};
pub use fanout::{NodeFailures, all_ok, for_each_node};
pub use images::{NodePush, PushPolicy, PushReport, ensure_image, push_image};
pub use phase::{Phase, PhaseError, PhaseFailure, Runner};
