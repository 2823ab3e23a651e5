//! `spark-launch trust`: SSH between every pair of nodes, public keys only. First contact may
//! need a node's password (asked once per node on the terminal, once for all with
//! `--same-password`, or read from stdin with `--password-stdin`); after that everything runs
//! in BatchMode. Prints what changed (or that nothing did) and the verified all-pairs matrix.
//! Flags and glue: one `trust::run` call, its outcome shown.

use super::args::NodeFlags;
use super::{CmdResult, Context, coded, show};
use crate::ssh::prompt::PasswordInput;
use crate::trust::{self, TrustRequest};

#[derive(Debug, clap::Args)]
pub struct TrustArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// Read the password for first contact from stdin (one line), for every node that asks.
    #[arg(long)]
    pub password_stdin: bool,

    /// Ask for the password once on the terminal and use it for every node that asks.
    #[arg(long, conflicts_with = "password_stdin")]
    pub same_password: bool,

    /// Show what would change on every node and write nothing (the matrix shows the pairs
    /// that can ssh today).
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(args: TrustArgs, ctx: &Context) -> CmdResult {
    let request = TrustRequest {
        selection: args.target.selection(ctx),
        passwords: PasswordInput {
            stdin: args.password_stdin,
            same_for_all: args.same_password,
        },
        dry_run: args.dry_run,
    };
    match trust::run(&request, &ctx.reporter).await {
        Ok(outcome) => show(&outcome, ctx),
        Err(e) => Err(coded(e.exit_code(), e)),
    }
}
