//! `spark-launch vllm` and `trtllm`: tensor-parallel serving across nodes (issue 7).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct VllmArgs {}

#[derive(Debug, clap::Args)]
pub struct TrtllmArgs {}

pub async fn vllm(_args: VllmArgs, _ctx: &Context) -> CmdResult {
    not_yet("vllm")
}

pub async fn trtllm(_args: TrtllmArgs, _ctx: &Context) -> CmdResult {
    not_yet("trtllm")
}
