//! `spark-launch up` and `profiles`: launch profiles (issue 7).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct UpArgs {}

#[derive(Debug, clap::Args)]
pub struct ListArgs {}

pub async fn up(_args: UpArgs, _ctx: &Context) -> CmdResult {
    not_yet("up")
}

pub async fn list(_args: ListArgs, _ctx: &Context) -> CmdResult {
    not_yet("profiles")
}
