//! spark-launch: one command turns a few GPU boxes joined by RoCE cables into one inference
//! cluster, and tells the truth about what happened.
//!
//! The modules follow the flow of data, one way:
//!
//! ```text
//! discover ─► inventory ─► resolve ─► probe ─► derive ─► workload::launch ─► apply ─► report
//!  (mDNS)    (cluster.yaml) (nodes)    (facts)  (env)    (the one plan)   (executor) (verdict)
//! ```
//!
//! `probe` turns a machine (or a saved snapshot of one) into plain data; `derive`, `plan`,
//! `workload`, `fabric`, `doctor`'s fact checks and `report`'s parsers are pure functions of
//! that data. `launch` is the pipeline of every launching command (resolve, look up, plan, run
//! through `apply`, the executor, then the verdict or staying attached). Each other command's
//! effects are a module of that command: `images` (push, ensure), `staging` and `pull` (model
//! weights), `jobs` (status, logs, stop), `trust`, `fabric_apply`, `doctor::gather`,
//! `supervise::run`. What spark-launch keeps on this machine is `records` (a job's
//! `records/JOB/`), under `state`'s folder, with `api_key` and `owned_files` beside them. Only
//! these, `discover`, `ssh`, `runtime`, `resolve`, `bench`'s client, sweep and result files,
//! and `sim` (a simulated cluster on this machine) touch the world. `cli` is flags and
//! rendering: it parses into library types, calls the library once and renders the result.

pub mod api_key;
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
pub mod fabric_apply;
pub mod images;
pub mod input;
pub mod inventory;
pub mod jobs;
pub mod k8s;
pub mod launch;
pub mod launch_file;
pub mod libnccl;
pub mod model;
pub mod node;
pub mod owned_files;
pub mod plan;
pub mod probe;
pub mod problem;
pub mod profile;
pub mod progress;
pub mod pull;
pub mod quote;
pub mod recipe;
pub mod records;
pub mod registries;
pub mod report;
pub mod resolve;
pub mod runtime;
pub mod sim;
pub mod ssh;
pub mod staging;
pub mod state;
pub mod supervise;
pub mod text;
pub mod trust;
pub mod workload;
pub mod yaml;
