//! What every phase of one apply shares: the plan, the nodes, the options, the reporter and
//! the Ctrl-C token ([`ApplyContext`]), what Exec/WaitExit steps captured, and the few helpers
//! several phases use (a node's shell, which containers stopped, the first error line of every
//! node's log, stopping the job). Effects only through the runtime; decides nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::images::PushPolicy;
use crate::apply::phase::PhaseError;
use crate::node::NodeName;
use crate::node::fanout::{all_ok, for_each_node};
use crate::plan::JobPlan;
use crate::progress::Reporter;
use crate::runtime::Cluster;
use crate::runtime::shell::{NodeShell, ShellError};
use crate::runtime::{NodeRuntime, RuntimeError};
use crate::workload::readiness::first_error;
use serde::Serialize;
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// How to carry out a plan.
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// `--keep`: leave what started in place after a failure or Ctrl-C.
    pub keep: bool,
    /// `--concurrency`: nodes worked on at once (0 = all).
    pub concurrency: usize,
    /// What to do when a node lacks the image.
    pub push: PushPolicy,
    /// SIGTERM → SIGKILL grace when stopping the job (Stop step and clean-up).
    pub stop_grace: Duration,
    /// `--secret-env NAME`: variables to treat as secrets besides those named like one.
    pub secret_env: Vec<String>,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            keep: false,
            concurrency: 0,
            push: PushPolicy::Push,
            stop_grace: Duration::from_secs(10),
            secret_env: Vec::new(),
        }
    }
}

/// What an Exec or WaitExit step captured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Capture {
    pub node: NodeName,
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
}

/// Captures by the name the plan gave them.
pub type Captures = BTreeMap<String, Capture>;

/// What every phase of one apply shares.
pub struct ApplyContext<'a> {
    pub plan: &'a JobPlan,
    pub cluster: &'a Cluster,
    pub options: &'a ApplyOptions,
    pub reporter: Arc<dyn Reporter>,
    pub cancel: CancellationToken,
    captures: Mutex<Captures>,
}

impl<'a> ApplyContext<'a> {
    pub fn new(
        plan: &'a JobPlan,
        cluster: &'a Cluster,
        options: &'a ApplyOptions,
        reporter: Arc<dyn Reporter>,
        cancel: CancellationToken,
    ) -> Self {
        ApplyContext {
            plan,
            cluster,
            options,
            reporter,
            cancel,
            captures: Mutex::new(Captures::new()),
        }
    }

    /// What the Exec and WaitExit steps captured so far.
    pub fn captures(&self) -> Captures {
        self.captures.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub(crate) fn capture(&self, name: &str, c: Capture) {
        if let Ok(mut m) = self.captures.lock() {
            m.insert(name.to_string(), c);
        }
    }

    pub(crate) fn name_on(&self, node: &NodeName) -> String {
        self.plan.job.container_name(node)
    }

    /// The runtime of `node`, or a phase error naming it.
    pub(crate) fn node(&self, node: &NodeName) -> Result<&NodeRuntime, PhaseError> {
        self.cluster
            .node(node)
            .map_err(|e| PhaseError::node(node, e))
    }
}

/// Every node's failure of a phase, or `Cancelled` when Ctrl-C is all that went wrong.
pub fn failures<T>(
    results: Vec<(NodeName, Result<T, RuntimeError>)>,
) -> Result<Vec<(NodeName, T)>, PhaseError> {
    all_ok(results).map_err(|f| {
        if f.failed
            .iter()
            .all(|(_, e)| matches!(e, RuntimeError::Cancelled { .. }))
        {
            PhaseError::Cancelled
        } else {
            PhaseError::Nodes(f)
        }
    })
}

pub async fn stop_job(ctx: &ApplyContext<'_>, grace: Duration) -> Result<(), PhaseError> {
    let job = &ctx.plan.job;
    let runtime = Some(ctx.plan.runtime);
    let results = for_each_node(
        ctx.plan.node_names(),
        ctx.options.concurrency,
        |node| async move { ctx.cluster.node(&node)?.stop_job(job, runtime, grace).await },
    )
    .await;
    all_ok(results).map(|_| ()).map_err(PhaseError::Nodes)
}

/// A node's shell from its runtime handle (this machine, or its SSH connection).
pub fn shell_for(handle: &NodeRuntime) -> Result<Arc<dyn NodeShell>, PhaseError> {
    handle
        .target
        .shell()
        .map_err(|e| PhaseError::Other(format!("{e}; serving needs a shell on every node")))
}

pub fn shell_error(e: ShellError) -> RuntimeError {
    RuntimeError::from(e)
}

/// A container (or process) of the job that is not running any more, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub node: NodeName,
    /// `exited`, `dead`, ..., or `gone` when it was removed.
    pub state: String,
    pub exit_code: i64,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the container on {} is {} (exit code {})",
            self.node, self.state, self.exit_code
        )
    }
}

impl Ended {
    /// `the container on a is exited (exit code 1), the container on b is gone (exit code -1)`.
    pub fn list(ended: &[Ended]) -> String {
        ended
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One look at every node's part of the job: what was seen to end, and the nodes that could
/// not be asked. Only an observed exit or removal is a verdict; a failed query is a hiccup
/// to retry within the wait's deadline, never "the container is gone".
#[derive(Debug, Default)]
pub struct JobLook {
    pub ended: Vec<Ended>,
    pub unknown: Vec<(NodeName, String)>,
}

impl JobLook {
    /// What the nodes that could not be asked said, for a "not yet" line.
    pub fn unknown_text(&self) -> Option<String> {
        (!self.unknown.is_empty()).then(|| {
            self.unknown
                .iter()
                .map(|(n, e)| format!("{n}: cannot ask ({e})"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// Looks at the job on every node of the plan at once.
pub async fn look_at_job(ctx: &ApplyContext<'_>) -> JobLook {
    let results = for_each_node(
        ctx.plan.node_names(),
        ctx.options.concurrency,
        |node| async move {
            let handle = ctx.cluster.node(&node)?;
            let name = ctx.plan.job.container_name(&node);
            let entries = handle
                .jobs(Some(&ctx.plan.job), Some(ctx.plan.runtime))
                .await?;
            Ok::<_, RuntimeError>(match entries.iter().find(|e| e.name == name) {
                Some(e) if e.state != "running" => {
                    Some((e.state.clone(), e.exit_code.unwrap_or(-1)))
                }
                Some(_) => None,
                None => Some(("gone".to_string(), -1)),
            })
        },
    )
    .await;
    let mut look = JobLook::default();
    for (node, r) in results {
        match r {
            Ok(Some((state, exit_code))) => look.ended.push(Ended {
                node,
                state,
                exit_code,
            }),
            Ok(None) => {}
            Err(e) => look.unknown.push((node, e.to_string())),
        }
    }
    look
}

/// The first error line of every node's log, for a failure report.
pub async fn first_errors(ctx: &ApplyContext<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for node in ctx.plan.node_names() {
        let Ok(handle) = ctx.cluster.node(&node) else {
            continue;
        };
        let name = ctx.plan.job.container_name(&node);
        let mut text = Vec::new();
        if let Ok(mut s) = handle.logs(ctx.plan.runtime, &name, false, false).await {
            while let Some(Ok(chunk)) = s.next().await {
                text.extend_from_slice(&chunk);
            }
        }
        let log = String::from_utf8_lossy(&text);
        out.push(match first_error(&log) {
            Some(line) => format!("{node}: {line}"),
            None => format!("{node}: (no error line in its log)"),
        });
    }
    out
}
