//! `spark-launch nccl-build` and `nccl-test` (issue 5).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct BuildArgs {}

#[derive(Debug, clap::Args)]
pub struct TestArgs {}

pub async fn build(_args: BuildArgs, _ctx: &Context) -> CmdResult {
    not_yet("nccl-build")
}

pub async fn test(_args: TestArgs, _ctx: &Context) -> CmdResult {
    not_yet("nccl-test")
}
