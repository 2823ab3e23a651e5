//! `spark-launch fabric plan|apply|rollback|test`: from a plugged cable to a verified RoCE
//! fabric. Flags and glue: the flags become one `fabric_apply::FabricRequest`, the library
//! does the rest (`fabric_apply::run`: reach the nodes, probe, plan, apply, verify, roll
//! back, measure) and its report is shown.

use clap::Subcommand;

use super::args::NodeFlags;
use super::{CmdResult, Context, coded, print_json, show};
use crate::fabric::{AddressPool, DEFAULT_MTU, PlanError, PlanOptions};
use crate::fabric_apply::{self, FabricAction, FabricError, FabricPlanInput, FabricRequest};
use crate::probe::links::LinkArg;
use crate::ssh::prompt::PasswordInput;

#[derive(Debug, clap::Args)]
pub struct FabricArgs {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Addresses and MTU for every cabled ConnectX port, as one netplan file per node
    /// (changes nothing; live nodes are probed as root, each password asked once).
    Plan(PlanArgs),
    /// Write the plan's file on every node, apply it with a self-rollback safety net, verify.
    Apply(ApplyArgs),
    /// Undo `fabric apply`: the backups back, spark-launch's file gone, the interfaces as
    /// they were.
    Rollback(RollbackArgs),
    /// RDMA bandwidth of every twin pair with perftest's ib_write_bw, both twins of a cable at
    /// once, with a verdict per twin pair.
    Test(FabricTestArgs),
}

/// What the plan is made of besides the nodes.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanFlags {
    /// One cable, NODE:IF=NODE:IF (repeat, one per cable): instead of what the link probe
    /// hears. Naming one twin pairs the other twins of the two ports too.
    #[arg(long = "link", value_name = "NODE:IF=NODE:IF")]
    pub links: Vec<LinkArg>,

    /// Where fabric subnets come from (one /24 per twin pair) [default: 192.168.0.0/16,
    /// from 192.168.100.0/24 on].
    #[arg(long, value_name = "CIDR")]
    pub pool: Option<AddressPool>,

    /// The MTU of every cabled fabric interface.
    #[arg(long, default_value_t = DEFAULT_MTU, value_parser = clap::value_parser!(u32).range(1280..=9216))]
    pub mtu: u32,

    /// `link-local: [ ipv4 ]` on one twin of the one cable (NVIDIA's first playbook) instead
    /// of a subnet per twin.
    #[arg(long)]
    pub link_local: bool,
}

impl PlanFlags {
    fn input(&self) -> FabricPlanInput {
        FabricPlanInput {
            links: self.links.clone(),
            options: PlanOptions {
                pool: self.pool.unwrap_or_default(),
                mtu: self.mtu,
                link_local: self.link_local,
            },
        }
    }
}

/// How a node's password is given (first SSH contact and sudo).
#[derive(Debug, Clone, clap::Args)]
pub struct AuthFlags {
    /// Read the password from stdin (one line), for every node that asks (SSH or sudo).
    #[arg(long)]
    pub password_stdin: bool,

    /// Ask for the password once on the terminal and use it for every node that asks.
    #[arg(long, conflicts_with = "password_stdin")]
    pub same_password: bool,
}

impl AuthFlags {
    pub fn input(&self) -> PasswordInput {
        PasswordInput {
            stdin: self.password_stdin,
            same_for_all: self.same_password,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub target: NodeFlags,
    #[command(flatten)]
    pub plan: PlanFlags,
    #[command(flatten)]
    pub auth: AuthFlags,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub target: NodeFlags,
    #[command(flatten)]
    pub plan: PlanFlags,
    #[command(flatten)]
    pub auth: AuthFlags,

    /// Move other netplan files that configure the same interfaces into a backup folder
    /// (`fabric rollback` restores them) instead of refusing.
    #[arg(long)]
    pub replace: bool,

    /// Print each node's file diff (and what --replace would move); change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Each node undoes the change by itself unless spark-launch confirms it within this many
    /// seconds after `netplan apply`.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u32).range(5..=3600))]
    pub rollback_after: u32,
}

#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub target: NodeFlags,
    #[command(flatten)]
    pub auth: AuthFlags,
}

#[derive(Debug, clap::Args)]
pub struct FabricTestArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// One cable, NODE:IF=NODE:IF (repeat), as for `fabric plan`.
    #[arg(long = "link", value_name = "NODE:IF=NODE:IF")]
    pub links: Vec<LinkArg>,

    /// Seconds each ib_write_bw measures.
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub duration: u32,

    /// Print the runs (which commands on which node, cable by cable); run nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(args: FabricArgs, ctx: &Context) -> CmdResult {
    let (target, auth, action) = match args.command {
        Sub::Plan(a) => (a.target, a.auth.input(), FabricAction::Plan(a.plan.input())),
        Sub::Apply(a) => (
            a.target,
            a.auth.input(),
            FabricAction::Apply {
                plan: a.plan.input(),
                replace: a.replace,
                dry_run: a.dry_run,
                rollback_after: a.rollback_after,
            },
        ),
        Sub::Rollback(a) => (a.target, a.auth.input(), FabricAction::Rollback),
        Sub::Test(a) => (
            a.target,
            PasswordInput::default(),
            FabricAction::Test {
                links: a.links,
                duration_s: a.duration,
                dry_run: a.dry_run,
            },
        ),
    };
    let request = FabricRequest {
        selection: target.selection(ctx),
        passwords: auth,
        action,
    };
    match fabric_apply::run(&request, &ctx.reporter).await {
        Ok(report) => show(&report, ctx),
        Err(e) => {
            if ctx.json
                && let FabricError::Plan(PlanError::Refused(r)) = &e
            {
                print_json(&serde_json::json!({ "refused": r.problems }))?;
            }
            Err(coded(e.exit_code(), e))
        }
    }
}
