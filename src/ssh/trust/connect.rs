//! First contact for `trust`: every node is tried with keys (BatchMode); the nodes that refuse
//! the key are tried once with a password — read from stdin once for all, asked on the terminal
//! once per node (or once for all), or, with neither, reported with how to give one. Passwords
//! go to ssh through the askpass helper, never on a command line.

use std::sync::Arc;

use crate::node::NodeName;
use crate::progress::Reporter;
use crate::ssh::{ConnectFailure, Dest, Password, Pool, SshError, SshTarget};

/// Asks the user for a password with a prompt; `None` when they could not answer.
pub type Ask = Arc<dyn Fn(String) -> Option<Password> + Send + Sync>;

/// Where first-contact passwords come from.
#[derive(Clone)]
pub enum Passwords {
    /// `--password-stdin`: one password for every node that asks.
    Given(Password),
    /// A terminal: ask per node, or once for all with `same_for_all`.
    Ask { ask: Ask, same_for_all: bool },
    /// No way to ask: nodes that want a password are reported with how to give one.
    None,
}

/// Connects every node it can into `pool`; returns the nodes that could not be reached, each
/// with its reason.
pub async fn connect(
    pool: &mut Pool,
    targets: &[SshTarget],
    passwords: Passwords,
    reporter: &Arc<dyn Reporter>,
) -> Vec<(NodeName, String)> {
    let remote = targets.iter().filter(|t| !t.local).count();
    let step = reporter.step(&format!(
        "connect to {remote} node{} with keys",
        if remote == 1 { "" } else { "s" }
    ));
    let first = pool.connect_all(targets, None).await;
    let (need_password, failed): (Vec<_>, Vec<_>) = first
        .into_iter()
        .partition(|(_, e)| e.connect_failure() == Some(&ConnectFailure::AuthFailed));
    if failed.is_empty() && need_password.is_empty() {
        step.ok();
    } else if failed.is_empty() {
        step.ok_with(&format!(
            "{} node(s) ask for a password",
            need_password.len()
        ));
    } else {
        step.fail(&format!("{} node(s) not reached", failed.len()));
    }
    let mut unreachable: Vec<(NodeName, String)> =
        failed.into_iter().map(|(n, e)| (n, e.reason())).collect();
    if need_password.is_empty() {
        return unreachable;
    }
    let asking: Vec<SshTarget> = targets
        .iter()
        .filter(|t| need_password.iter().any(|(n, _)| *n == t.name))
        .cloned()
        .collect();
    let mut results: Vec<(NodeName, SshError)> = Vec::new();
    match passwords {
        Passwords::Given(pw) => {
            let step = reporter.step(&format!(
                "first contact with {} node(s) by password",
                asking.len()
            ));
            results = pool.connect_all(&asking, Some(&pw)).await;
            if results.is_empty() {
                step.ok();
            } else {
                step.fail(&format!("{} node(s) refused", results.len()));
            }
        }
        Passwords::Ask { ask, same_for_all } => {
            let mut shared: Option<Password> = None;
            for t in &asking {
                let pw = match (&shared, same_for_all) {
                    (Some(p), true) => p.clone(),
                    _ => {
                        let prompt = if same_for_all {
                            "password for every node that asks: ".to_string()
                        } else {
                            format!("{} ({}) password: ", t.name, dest_text(t))
                        };
                        let ask = ask.clone();
                        match tokio::task::spawn_blocking(move || ask(prompt)).await {
                            Ok(Some(p)) => p,
                            _ => {
                                results.push((t.name.clone(), password_needed(t)));
                                continue;
                            }
                        }
                    }
                };
                if same_for_all {
                    shared = Some(pw.clone());
                }
                results.extend(pool.connect_all(std::slice::from_ref(t), Some(&pw)).await);
            }
        }
        Passwords::None => {
            for t in &asking {
                results.push((t.name.clone(), password_needed(t)));
            }
        }
    }
    for (n, e) in results {
        let why = match e.connect_failure() {
            Some(ConnectFailure::AuthFailed) => format!(
                "ssh {}: wrong password (or the node refuses password logins: PasswordAuthentication no); nothing was written there",
                e.connect_dest().unwrap_or_default()
            ),
            _ => e.reason(),
        };
        unreachable.push((n, why));
    }
    unreachable
}

fn dest_text(t: &SshTarget) -> String {
    let user = t
        .user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_default();
    format!(
        "{user}@{}",
        t.addresses.first().map(String::as_str).unwrap_or("?")
    )
}

fn password_needed(t: &SshTarget) -> SshError {
    SshError::Connect {
        node: t.name.clone(),
        dest: Dest {
            host: t.addresses.first().cloned().unwrap_or_default(),
            user: t.user.clone(),
            port: t.port,
        },
        failure: ConnectFailure::PasswordNeeded,
        detail: String::new(),
    }
}
