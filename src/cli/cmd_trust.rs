//! `spark-launch trust`: SSH trust between every pair of nodes, public keys only (issue 3).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _ctx: &Context) -> CmdResult {
    not_yet("trust")
}
