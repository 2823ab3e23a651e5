//! spark-launch: one command turns a few GPU boxes joined by RoCE cables into one inference
//! cluster, and tells the truth about what happened.
//!
//! The modules follow the flow of data, one way:
//!
//! ```text
//! discover ─► inventory ─► probe ─► derive ─► plan/workload ─► apply ─► report
//!  (mDNS)    (cluster.yaml) (facts)  (env)    (JobPlan)       (ssh, runtime)  (parse, verdict)
//! ```
//!
//! `probe` turns a machine (or a saved snapshot of one) into plain data; `derive`, `plan`,
//! `workload`, `doctor`'s fact checks and `report`'s parsers are pure functions of that data.
//! Only `discover`, `ssh`, `runtime` and `apply` touch the world. `cli` is flags and glue.

pub mod apply;
pub mod cli;
pub mod compose;
pub mod derive;
pub mod discover;
pub mod doctor;
pub mod inventory;
pub mod model;
pub mod node;
pub mod plan;
pub mod probe;
pub mod profile;
pub mod progress;
pub mod report;
pub mod runtime;
pub mod ssh;
pub mod workload;
