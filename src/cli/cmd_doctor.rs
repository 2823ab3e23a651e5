//! `spark-launch doctor`: named checks on every node with the fix for each problem (issue 6).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _ctx: &Context) -> CmdResult {
    not_yet("doctor")
}
