//! `spark-launch discover`: find peers over mDNS on the fabric interfaces (issue 3).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _ctx: &Context) -> CmdResult {
    not_yet("discover")
}
