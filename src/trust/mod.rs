//! `spark-launch trust` as one call ([`run`]): the nodes' SSH targets (`resolve`), first
//! contact (keys, else a password given on stdin or asked on the terminal:
//! `ssh::trust::connect`), then `ssh::trust::establish` — read, plan, write only what is
//! missing, verify every pair — and a [`TrustOutcome`] that `render` shows. The pool closes
//! on every exit path (`Pool::scope`).

mod render;

use std::sync::Arc;

use crate::node::NodeName;
use crate::progress::Reporter;
use crate::resolve::{self, ResolveError, Selection};
use crate::ssh::prompt::{self, PasswordInput, PromptError};
use crate::ssh::trust::connect::{Passwords, connect};
use crate::ssh::trust::{TrustReport, establish};
use crate::ssh::{Pool, SshError, SshOptions};

/// `trust`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct TrustRequest {
    pub selection: Selection,
    /// How first-contact passwords are given.
    pub passwords: PasswordInput,
    /// Show what would change and write nothing.
    pub dry_run: bool,
}

/// What `trust` did (or would do), and the nodes it could not reach.
#[derive(Debug)]
pub struct TrustOutcome {
    /// Every node asked for, head first.
    pub nodes: Vec<NodeName>,
    pub report: TrustReport,
    /// Nodes that could not be reached, with why.
    pub unreachable: Vec<(NodeName, String)>,
    pub dry_run: bool,
    /// Fewer than two nodes were reached: nothing was tried anywhere.
    pub too_few: bool,
}

/// Why `trust` could not begin. [`TrustError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(
        "trust needs at least two nodes (found {0}): add them with `spark-launch discover --save` or `--hosts a,b`"
    )]
    TooFewNodes(usize),
    #[error(transparent)]
    Password(#[from] PromptError),
    #[error(transparent)]
    Ssh(#[from] SshError),
}

impl TrustError {
    /// 2 for the user's input, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            TrustError::Resolve(e) if e.is_invalid_input() => 2,
            TrustError::TooFewNodes(_) => 2,
            TrustError::Password(e) => e.exit_code(),
            _ => 1,
        }
    }
}

/// Runs `trust` (see the module docs).
pub async fn run(
    req: &TrustRequest,
    reporter: &Arc<dyn Reporter>,
) -> Result<TrustOutcome, TrustError> {
    let targets = resolve::ssh_targets(&req.selection, "trust").await?;
    if targets.len() < 2 {
        return Err(TrustError::TooFewNodes(targets.len()));
    }
    let passwords = match req.passwords.read_stdin()? {
        Some(pw) => Passwords::Given(pw),
        None if prompt::terminal() => Passwords::Ask {
            ask: Arc::new(|text| prompt::ask(&text).ok()),
            same_for_all: req.passwords.same_for_all,
        },
        None => Passwords::None,
    };
    let pool = Pool::new(SshOptions {
        learn_hosts_privately: true,
        ..SshOptions::default()
    })?;
    let (unreachable, report) = pool
        .scope(async |pool| {
            let unreachable = connect(pool, &targets, passwords, reporter).await;
            if pool.handles().len() < 2 {
                return (unreachable, None);
            }
            let report = establish(pool, &targets, reporter, req.dry_run).await;
            (unreachable, Some(report))
        })
        .await;
    Ok(TrustOutcome {
        nodes: targets.iter().map(|t| t.name.clone()).collect(),
        too_few: report.is_none(),
        report: report.unwrap_or_default(),
        unreachable,
        dry_run: req.dry_run,
    })
}
