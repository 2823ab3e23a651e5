//! Runs `fabric test`'s plan: round by round (one cable at a time), the servers of a round on
//! one node and its clients on the other at once, through the nodes' links; returns what each
//! `ib_write_bw` printed. Decides nothing: `fabric::perftest` planned the runs,
//! `report::perftest` reads and judges the output.

use std::sync::Arc;
use std::time::Duration;

use crate::fabric::perftest::{self, Round, TestPlan};
use crate::progress::Reporter;
use crate::report::perftest::{RoundOutput, RunOutput};
use crate::ssh::{Pool, RunOptions, stderr_tail};

async fn side(
    pool: &Pool,
    node: &crate::node::NodeName,
    script: String,
    limit: Duration,
) -> Result<Vec<(u16, String)>, String> {
    let h = pool.get(node).map_err(|e| e.to_string())?;
    let out = h
        .output(&["sh", "-c", &script], &RunOptions::timeout(limit))
        .await
        .map_err(|e| e.to_string())?;
    if out.code == 3 {
        return Err(format!("{node}: {}", out.stdout_text().trim()));
    }
    if !out.success() && out.stdout.is_empty() {
        return Err(format!(
            "{node}: the perftest script failed (exit {}): {}",
            out.code,
            stderr_tail(&out.stderr, 3)
        ));
    }
    Ok(perftest::split_outputs(&out.stdout_text()))
}

async fn round(pool: &Pool, r: &Round, duration: u32) -> RoundOutput {
    let limit = Duration::from_secs(u64::from(duration) + 90);
    let (server, client) = tokio::join!(
        side(
            pool,
            &r.server_node,
            perftest::server_script(r, duration),
            limit
        ),
        side(
            pool,
            &r.client_node,
            perftest::client_script(r, duration),
            limit
        ),
    );
    let pick = |all: &Result<Vec<(u16, String)>, String>, port: u16| match all {
        Ok(v) => v
            .iter()
            .find(|(p, _)| *p == port)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| "printed nothing".to_string()),
        Err(e) => Err(e.clone()),
    };
    RoundOutput {
        cable: r.cable.clone(),
        runs: r
            .runs
            .iter()
            .map(|run| RunOutput {
                port: run.port,
                client: pick(&client, run.port),
                server: pick(&server, run.port),
            })
            .collect(),
    }
}

/// Runs every round of `plan`, one after another.
pub async fn run(plan: &TestPlan, pool: &Pool, reporter: &Arc<dyn Reporter>) -> Vec<RoundOutput> {
    let mut out = Vec::new();
    for r in &plan.rounds {
        let step = reporter.step(&format!(
            "ib_write_bw on {} ({} twin pair(s) at once, {} s)",
            r.cable,
            r.runs.len(),
            plan.duration_s
        ));
        let o = round(pool, r, plan.duration_s).await;
        if o.runs.iter().all(|x| x.client.is_ok()) {
            step.ok();
        } else {
            step.fail("");
        }
        out.push(o);
    }
    out
}
