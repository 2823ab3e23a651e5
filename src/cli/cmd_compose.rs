//! `spark-launch compose`: one compose file per node for a profile (issue 7).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _ctx: &Context) -> CmdResult {
    not_yet("compose")
}
