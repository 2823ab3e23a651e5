//! Workloads (run, nccl-test, nccl-build, serving): each turns the user's options and the
//! derived per-node environment into a plan; `launch` is the one entry that turns any
//! launching request into its one plan, and `render` shows it as text (`--dry-run`). Serving
//! engines sit behind one seam (`engines`, one file each); `skeleton` makes every serving plan
//! in one pass; `partial` is the one input layer every source of a serving launch (flags,
//! profiles, recipes) goes through; a community recipe adds its part to it (`recipe_part`). Pure: no network, no
//! Docker, no files.

pub mod endpoint;
pub mod engines;
pub mod job_ssh;
pub mod launch;
pub mod limits;
pub mod memory;
pub mod nccl_build;
pub mod nccl_lib;
pub mod nccl_test;
pub mod partial;
pub mod rdma;
pub mod readiness;
pub mod recipe_env;
pub mod recipe_part;
pub mod render;
pub mod run;
pub mod runtime_cache;
pub mod serve;
pub mod skeleton;
pub mod startup;
pub mod steps;
pub mod token_probe;
