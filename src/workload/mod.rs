//! Workloads (run, nccl-test, nccl-build, vllm, trtllm): each turns the user's options and
//! the derived per-node environment into a plan; `launch` is the one entry that turns any
//! launching request into its one plan; `render` shows any such plan as text (`--dry-run`).
//! Pure: no network, no Docker, no files.

pub mod endpoint;
pub mod job_ssh;
pub mod launch;
pub mod limits;
pub mod nccl_build;
pub mod nccl_lib;
pub mod nccl_test;
pub mod rdma;
pub mod readiness;
pub mod render;
pub mod run;
pub mod serve;
pub mod trtllm;
pub mod vllm;
