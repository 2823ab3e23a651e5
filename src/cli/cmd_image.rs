//! `spark-launch image push`: images on every node, compared by content (issue 4).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _ctx: &Context) -> CmdResult {
    not_yet("image")
}
