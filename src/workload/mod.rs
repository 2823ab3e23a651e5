//! Workloads (nccl-test, nccl-build, vllm, trtllm): each turns the user's options and the
//! derived per-node environment into a `JobPlan`. Pure: no network, no Docker, no files.

pub mod nccl_build;
pub mod nccl_test;
pub mod readiness;
pub mod serve;
pub mod trtllm;
pub mod vllm;
