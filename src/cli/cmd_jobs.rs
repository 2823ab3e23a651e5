//! `spark-launch status`, `logs` and `stop`: jobs found by their labels on the nodes (issue 4).

use super::{CmdResult, Context, not_yet};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {}

#[derive(Debug, clap::Args)]
pub struct StopArgs {}

pub async fn status(_args: StatusArgs, _ctx: &Context) -> CmdResult {
    not_yet("status")
}

pub async fn logs(_args: LogsArgs, _ctx: &Context) -> CmdResult {
    not_yet("logs")
}

pub async fn stop(_args: StopArgs, _ctx: &Context) -> CmdResult {
    not_yet("stop")
}
