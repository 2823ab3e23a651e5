//! Carries out a plan on the nodes: fan-out over nodes, phases with one status line each,
//! timeouts and clean teardown. It decides nothing; the plan says what to do.

pub mod fanout;

pub use fanout::{NodeFailures, all_ok, for_each_node};
