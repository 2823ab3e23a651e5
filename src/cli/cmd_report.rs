//! `spark-launch report nccl FILE...`: the nccl-tests parser and verdict on saved logs (issue 5).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _ctx: &Context) -> CmdResult {
    not_yet("report")
}
