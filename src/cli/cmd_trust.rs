//! `spark-launch trust`: SSH between every pair of nodes, public keys only. First contact may
//! need a node's password (asked once per node on the terminal, once for all with
//! `--same-password`, or read from stdin with `--password-stdin`); after that everything runs
//! in BatchMode. Prints what changed (or that nothing did) and the verified all-pairs matrix.

use std::io::{IsTerminal, Read};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::NodeFlags;
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::node::NodeName;
use crate::ssh::trust::connect::{Passwords, connect};
use crate::ssh::trust::{self, TrustReport};
use crate::ssh::{Password, Pool, SshOptions, SshTarget};

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
    let targets = crate::resolve::ssh_targets(&args.target.selection(ctx), "trust")
        .await
        .map_err(super::resolve_error)?;
    if targets.len() < 2 {
        return Err(anyhow::anyhow!(
            "trust needs at least two nodes (found {}): add them with `spark-launch discover --save` or `--hosts a,b`",
            targets.len()
        ))
        .invalid();
    }
    let tty = std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok();
    let passwords = if args.password_stdin {
        Passwords::Given(read_stdin_password()?)
    } else if tty {
        Passwords::Ask {
            ask: std::sync::Arc::new(|prompt| {
                rpassword::prompt_password(prompt).ok().map(Password::new)
            }),
            same_for_all: args.same_password,
        }
    } else {
        Passwords::None
    };

    let mut pool = Pool::new(SshOptions {
        learn_hosts_privately: true,
        ..SshOptions::default()
    })?;
    let unreachable = connect(&mut pool, &targets, passwords, &ctx.reporter).await;
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
