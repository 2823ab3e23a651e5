//! `spark-launch trust`: SSH between every pair of nodes, public keys only. First contact may
//! need a node's password (asked once per node on the terminal, once for all with
//! `--same-password`, or read from stdin with `--password-stdin`); after that everything runs
//! in BatchMode. Prints what changed (or that nothing did) and the verified all-pairs matrix.

use std::io::{IsTerminal, Read};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::{TargetArgs, configured_nodes, local_facts, ssh_targets};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::node::NodeName;
use crate::ssh::trust::{self, TrustReport};
use crate::ssh::{ConnectFailure, Password, Pool, SshError, SshOptions, SshTarget};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: TargetArgs,

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

pub async fn run(args: Args, ctx: &Context) -> CmdResult {
    if args.target.uses_snapshots() {
        return Err(anyhow::anyhow!(
            "trust works on live nodes: use the cluster file, --nodes or --hosts, not --snapshot"
        ))
        .invalid();
    }
    let nodes = configured_nodes(&args.target, &ctx.cluster_file)?;
    if nodes.len() < 2 {
        return Err(anyhow::anyhow!(
            "trust needs at least two nodes (found {}): add them with `spark-launch discover --save` or `--hosts a,b`",
            nodes.len()
        ))
        .invalid();
    }
    let stdin_password = if args.password_stdin {
        Some(read_stdin_password()?)
    } else {
        None
    };
    let local = local_facts().await?;
    let targets = ssh_targets(&nodes, &local);

    let mut pool = Pool::new(SshOptions {
        learn_hosts_privately: true,
        ..SshOptions::default()
    })?;
    let unreachable = connect(&mut pool, &targets, stdin_password, args.same_password, ctx).await;
    if pool.handles().len() < 2 {
        pool.close().await;
        let report = TrustReport::default();
        print_report(
            ctx,
            &nodes_of(&targets),
            &report,
            &unreachable,
            args.dry_run,
        )?;
        return Err(anyhow::anyhow!(
            "fewer than two nodes could be reached, so nothing was changed anywhere:{}",
            failure_lines(&unreachable)
        )
        .into());
    }
    let report = trust::establish(&pool, &targets, &ctx.reporter, args.dry_run).await;
    pool.close().await;
    print_report(
        ctx,
        &nodes_of(&targets),
        &report,
        &unreachable,
        args.dry_run,
    )?;
    if args.dry_run && report.failed.is_empty() && unreachable.is_empty() {
        return Ok(Outcome::Success);
    }
    if report.all_ok() && unreachable.is_empty() {
        Ok(Outcome::Success)
    } else {
        let mut failed = unreachable.clone();
        failed.extend(report.failed.iter().cloned());
        let pairs = report.matrix.iter().filter(|p| p.outcome.is_err()).count();
        Err(anyhow::anyhow!(
            "trust is incomplete:{}{}",
            failure_lines(&failed),
            if pairs > 0 {
                format!("\n  {pairs} pair(s) cannot ssh (see the matrix)")
            } else {
                String::new()
            }
        )
        .into())
    }
}

fn nodes_of(targets: &[SshTarget]) -> Vec<NodeName> {
    targets.iter().map(|t| t.name.clone()).collect()
}

fn failure_lines(failed: &[(NodeName, String)]) -> String {
    failed
        .iter()
        .map(|(n, why)| format!("\n  {n}: {why}"))
        .collect()
}

fn read_stdin_password() -> Result<Password, CmdError> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| anyhow::anyhow!("--password-stdin: cannot read stdin: {e}"))?;
    let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if line.is_empty() {
        return Err(anyhow::anyhow!("--password-stdin: stdin is empty")).invalid();
    }
    Ok(Password::new(line))
}

/// Connects every node: keys first (BatchMode); the nodes that refuse the key are tried once
/// with a password. Returns the nodes that could not be reached, each with its reason.
async fn connect(
    pool: &mut Pool,
    targets: &[SshTarget],
    stdin_password: Option<Password>,
    same_password: bool,
    ctx: &Context,
) -> Vec<(NodeName, String)> {
    let remote = targets.iter().filter(|t| !t.local).count();
    let step = ctx.reporter.step(&format!(
        "connect to {remote} node{} with keys",
        if remote == 1 { "" } else { "s" }
    ));
    let first = pool.connect_all(targets, None).await;
    let (need_password, mut failed): (Vec<_>, Vec<_>) = first
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
        failed.drain(..).map(|(n, e)| (n, e.reason())).collect();
    if need_password.is_empty() {
        return unreachable;
    }
    let asking: Vec<SshTarget> = targets
        .iter()
        .filter(|t| need_password.iter().any(|(n, _)| *n == t.name))
        .cloned()
        .collect();
    let tty = std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok();
    let mut results: Vec<(NodeName, SshError)> = Vec::new();
    match stdin_password {
        Some(pw) => {
            let step = ctx.reporter.step(&format!(
                "first contact with {} node(s) by password",
                asking.len()
            ));
            results = pool.connect_all(&asking, Some(&pw)).await;
            finish(step, &results);
        }
        None if tty => {
            let mut shared: Option<Password> = None;
            for t in &asking {
                let pw = match (&shared, same_password) {
                    (Some(p), true) => p.clone(),
                    _ => {
                        let prompt = if same_password {
                            "password for every node that asks: ".to_string()
                        } else {
                            format!("{} ({}) password: ", t.name, dest_text(t))
                        };
                        match tokio::task::spawn_blocking(move || {
                            rpassword::prompt_password(prompt)
                        })
                        .await
                        {
                            Ok(Ok(p)) => Password::new(p),
                            _ => {
                                results.push((t.name.clone(), password_needed(t)));
                                continue;
                            }
                        }
                    }
                };
                if same_password {
                    shared = Some(pw.clone());
                }
                results.extend(pool.connect_all(std::slice::from_ref(t), Some(&pw)).await);
            }
        }
        None => {
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

fn finish(step: crate::progress::Step, results: &[(NodeName, SshError)]) {
    if results.is_empty() {
        step.ok();
    } else {
        step.fail(&format!("{} node(s) refused", results.len()));
    }
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
        dest: crate::ssh::Dest {
            host: t.addresses.first().cloned().unwrap_or_default(),
            user: t.user.clone(),
            port: t.port,
        },
        failure: ConnectFailure::PasswordNeeded,
        detail: String::new(),
    }
}

fn print_report(
    ctx: &Context,
    all: &[NodeName],
    report: &TrustReport,
    unreachable: &[(NodeName, String)],
    dry_run: bool,
) -> Result<(), CmdError> {
    let mut failed: Vec<(NodeName, String)> = unreachable.to_vec();
    failed.extend(report.failed.iter().cloned());
    if ctx.json {
        let changes: serde_json::Map<String, serde_json::Value> = report
            .changes
            .iter()
            .map(|(n, c)| (n.to_string(), serde_json::json!(c)))
            .collect();
        let failures: serde_json::Map<String, serde_json::Value> = failed
            .iter()
            .map(|(n, c)| (n.to_string(), serde_json::json!(c)))
            .collect();
        let matrix: Vec<serde_json::Value> = report
            .matrix
            .iter()
            .map(|p| match &p.outcome {
                Ok(h) => serde_json::json!({"from": p.from, "to": p.to, "ok": true, "hostname": h}),
                Err(e) => serde_json::json!({"from": p.from, "to": p.to, "ok": false, "error": e}),
            })
            .collect();
        print_json(&serde_json::json!({
            "nodes": all,
            "dry_run": dry_run,
            "changed": !report.unchanged() && !dry_run,
            "would_change": !report.unchanged() && dry_run,
            "changes": changes,
            "failed": failures,
            "matrix": matrix,
            "ok": failed.is_empty() && report.all_ok(),
        }))?;
        return Ok(());
    }
    let mut out = String::new();
    if !report.nodes.is_empty() {
        if report.unchanged() {
            out.push_str("nothing to change: every node already trusts every other node\n");
        } else {
            out.push_str(if dry_run {
                "would change (dry run, nothing written):\n"
            } else {
                "changed:\n"
            });
            for (n, c) in &report.changes {
                if c.is_empty() {
                    out.push_str(&format!("  {n}: nothing\n"));
                } else {
                    out.push_str(&format!("  {n}: {}\n", c.join("; ")));
                }
            }
        }
        out.push('\n');
    }
    out.push_str(if dry_run {
        "ssh from (row) to (column), as it works today:\n"
    } else {
        "ssh from (row) to (column):\n"
    });
    out.push_str(&matrix_table(all, report, &failed));
    out.push('\n');
    let bad: Vec<String> = report
        .matrix
        .iter()
        .filter_map(|p| {
            p.outcome
                .as_ref()
                .err()
                .map(|e| format!("  {} → {}: {e}", p.from, p.to))
        })
        .collect();
    if !bad.is_empty() {
        out.push_str("failed pairs:\n");
        out.push_str(&bad.join("\n"));
        out.push('\n');
    }
    if !failed.is_empty() {
        out.push_str("failed nodes:");
        out.push_str(&failure_lines(&failed));
        out.push('\n');
    }
    print_out(&out);
    Ok(())
}

fn matrix_table(all: &[NodeName], report: &TrustReport, failed: &[(NodeName, String)]) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    let mut header = vec![String::new()];
    header.extend(all.iter().map(|n| n.to_string()));
    t.set_header(header);
    for from in all {
        let mut row = vec![from.to_string()];
        for to in all {
            let cell = if from == to {
                "-".to_string()
            } else if failed.iter().any(|(n, _)| n == from || n == to) {
                "✗ (node failed)".to_string()
            } else {
                match report
                    .matrix
                    .iter()
                    .find(|p| &p.from == from && &p.to == to)
                {
                    Some(p) if p.outcome.is_ok() => "✓".to_string(),
                    Some(_) => "✗".to_string(),
                    None => "?".to_string(),
                }
            };
            row.push(cell);
        }
        t.add_row(row);
    }
    t.to_string()
}
