//! spark-launch: one command turns a few GPU boxes joined by RoCE cables into one inference
//! cluster, and tells the truth about what happened.
//!
//! The modules follow the flow of data, one way:
//!
//! ```text
//! discover ─► inventory ─► resolve ─► probe ─► derive ─► workload::launch ─► apply ─► report
//!  (mDNS)    (cluster.yaml) (nodes)    (facts)  (env)    (the one plan)     (effects) (verdict)
//! ```
//!
//! `probe` turns a machine (or a saved snapshot of one) into plain data; `derive`, `plan`,
//! `workload`, `fabric`, `doctor`'s fact checks and `report`'s parsers are pure functions of
//! that data. Only `discover`, `ssh`, `runtime`, `resolve` and `apply` touch the world, and
//! `bench`'s client, sweep, job lookup and result files, and `sim`, which makes a simulated
//! cluster on this machine. `cli` is flags and rendering: it
//! parses into library types, calls the library once and renders the result.

pub mod apply;
pub mod bench;
pub mod check;
pub mod cli;
pub mod clock;
pub mod compose;
pub mod derive;
pub mod digest;
pub mod discover;
pub mod doctor;
pub mod fabric;
pub mod input;
pub mod inventory;
pub mod k8s;
pub mod launch_file;
pub mod libnccl;
pub mod model;
pub mod node;
pub mod plan;
pub mod probe;
pub mod profile;
pub mod progress;
pub mod quote;
pub mod recipe;
pub mod report;
pub mod resolve;
pub mod runtime;
pub mod sim;
pub mod ssh;
pub mod supervise;
pub mod text;
pub mod workload;
pub mod yaml;
