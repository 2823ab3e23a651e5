//! `spark-launch sim up|down|status`: a simulated cluster on this machine, to try every
//! command without Sparks. Flags and glue: one `sim::up`, `sim::down` or `sim::status` call,
//! its result shown.

use super::{CmdResult, Context, coded, show};
use crate::sim::{self, SimName, UpRequest};

#[derive(Debug, clap::Args)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SimCommand {
    /// Build a simulated cluster on this machine (root and a Docker Engine needed): nodes as
    /// namespaces with their own sshd and Docker Engine, a stand-in engine image and a
    /// stand-in Hub; prints its cluster file and what to run next.
    Up(SimUpArgs),
    /// Remove a simulated cluster: its namespaces, daemons, folders, the images loaded into
    /// its nodes and the cluster file it wrote, and nothing else.
    Down(SimDownArgs),
    /// The simulated clusters on this machine.
    #[command(visible_alias = "list")]
    Status,
}

#[derive(Debug, clap::Args)]
pub struct SimUpArgs {
    /// How many nodes (1 to 16; the bundled profiles need 2).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,

    /// The sim's name: it prefixes its nodes' names (`sim-n1`).
    #[arg(long, default_value_t = SimName::default())]
    pub name: SimName,

    /// Show what would be made, and make nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct SimDownArgs {
    /// The sim to remove.
    #[arg(long, default_value_t = SimName::default())]
    pub name: SimName,

    /// Show what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(args: SimArgs, ctx: &Context) -> CmdResult {
    match args.command {
        SimCommand::Up(a) => {
            let req = UpRequest {
                name: a.name,
                nodes: a.nodes,
            };
            match sim::up(&req, a.dry_run, &ctx.reporter, &ctx.cancel).await {
                Ok(made) => show(&made, ctx),
                Err(e) => Err(coded(e.exit_code(), e)),
            }
        }
        SimCommand::Down(a) => match sim::down(&a.name, a.dry_run, &ctx.reporter).await {
            Ok(removed) => show(&removed, ctx),
            Err(e) => Err(coded(e.exit_code(), e)),
        },
        SimCommand::Status => show(&sim::status(), ctx),
    }
}
