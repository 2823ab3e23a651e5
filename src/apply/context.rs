//! What every phase of one apply shares: the plan, the nodes, the options, the reporter and
//! the Ctrl-C token ([`ApplyContext`]), the one fan-out over the plan's nodes
//! ([`ApplyContext::each_node`], with `--concurrency`), what Exec/WaitExit steps captured, and
//! the few helpers several phases use (a node's shell, which containers stopped, the first
//! error line of every node's log, stopping the job). Effects only through the runtime;
//! decides nothing.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::apply::phase::PhaseError;
use crate::images::PushPolicy;
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

/// When the stages of a start-up were seen (the Start phase and the serving wait note them; the
/// launch turns them into `workload::startup::Startup`).
#[derive(Clone, Debug, Default)]
pub struct Marks {
    /// The last Start phase ended: every container of the job started.
    pub containers_started: Option<std::time::Instant>,
    pub port_open: Option<std::time::Instant>,
    pub http_ready: Option<std::time::Instant>,
    pub first_token: Option<std::time::Instant>,
    /// The token probe's own time to its first token (the head's clock).
    pub token_after_ms: Option<u64>,
}

/// What every phase of one apply shares.
pub struct ApplyContext<'a> {
    pub plan: &'a JobPlan,
    pub cluster: &'a Cluster,
    pub options: &'a ApplyOptions,
    pub reporter: Arc<dyn Reporter>,
    pub cancel: CancellationToken,
    captures: Mutex<Captures>,
    marks: Mutex<Marks>,
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
            marks: Mutex::new(Marks::default()),
        }
    }

    /// The stages of the start-up seen so far.
    pub fn marks(&self) -> Marks {
        self.marks.lock().map(|m| m.clone()).unwrap_or_default()
    }

    pub(crate) fn mark(&self, f: impl FnOnce(&mut Marks)) {
        if let Ok(mut m) = self.marks.lock() {
            f(&mut m);
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

    /// The one fan-out of the executor (the only one it has): runs `f` with each node's runtime on
    /// every one of `nodes`, at most `--concurrency` at once, waits for all of them and returns
    /// every node's result in the order given; one node's failure stops no other. A node the
    /// cluster lacks is that node's error. Phases that judge the results themselves use this;
    /// the others [`on_every_node`](Self::on_every_node).
    pub async fn each_node<T, F, Fut>(
        &self,
        nodes: impl IntoIterator<Item = NodeName>,
        f: F,
    ) -> Vec<(NodeName, Result<T, RuntimeError>)>
    where
        F: Fn(NodeName, &'a NodeRuntime) -> Fut,
        Fut: Future<Output = Result<T, RuntimeError>>,
    {
        let cluster = self.cluster;
        for_each_node(nodes, self.options.concurrency, |node| {
            let work = cluster.node(&node).map(|handle| f(node, handle));
            async move { work?.await }
        })
        .await
    }

    /// [`each_node`](Self::each_node) as a phase's outcome: every node's value, or one error
    /// listing every node that failed (`Cancelled` when Ctrl-C is all that went wrong).
    pub async fn on_every_node<T, F, Fut>(
        &self,
        nodes: impl IntoIterator<Item = NodeName>,
        f: F,
    ) -> Result<Vec<(NodeName, T)>, PhaseError>
    where
        F: Fn(NodeName, &'a NodeRuntime) -> Fut,
        Fut: Future<Output = Result<T, RuntimeError>>,
    {
        failures(self.each_node(nodes, f).await)
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

/// Stops and removes the job on every node of the plan; every node that failed is reported.
pub async fn stop_job(ctx: &ApplyContext<'_>, grace: Duration) -> Result<(), PhaseError> {
    let job = &ctx.plan.job;
    let runtime = Some(ctx.plan.runtime);
    let results = ctx
        .each_node(ctx.plan.node_names(), |_, handle| {
            handle.stop_job(job, runtime, grace)
        })
        .await;
    all_ok(results).map(|_| ()).map_err(PhaseError::Nodes)
}

/// A node's shell from its runtime handle (this machine, or its SSH connection).
pub fn shell_for(handle: &NodeRuntime) -> Result<Arc<dyn NodeShell>, PhaseError> {
    handle
        .target
        .shell()
        .map_err(|source| PhaseError::NoShell { source })
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
    let results = ctx
        .each_node(ctx.plan.node_names(), |node, handle| async move {
            let name = ctx.plan.job.container_name(&node);
            let entries = handle
                .jobs(Some(&ctx.plan.job), Some(ctx.plan.runtime))
                .await?;
            Ok(match entries.iter().find(|e| e.name == name) {
                Some(e) if e.state != "running" => {
                    Some((e.state.clone(), e.exit_code.unwrap_or(-1)))
                }
                Some(_) => None,
                None => Some(("gone".to_string(), -1)),
            })
        })
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

/// The first error line of every node's log, for a failure report (a node the cluster lacks
/// is left out; one whose log cannot be read has no error line).
pub async fn first_errors(ctx: &ApplyContext<'_>) -> Vec<String> {
    let logs = ctx
        .each_node(ctx.plan.node_names(), |node, handle| async move {
            let name = ctx.plan.job.container_name(&node);
            let mut text = Vec::new();
            if let Ok(mut s) = handle.logs(ctx.plan.runtime, &name, false, false).await {
                while let Some(Ok(chunk)) = s.next().await {
                    text.extend_from_slice(&chunk);
                }
            }
            Ok(String::from_utf8_lossy(&text).into_owned())
        })
        .await;
    logs.into_iter()
        .filter_map(|(node, log)| {
            let log = log.ok()?;
            Some(match first_error(&log) {
                Some(line) => format!("{node}: {line}"),
                None => format!("{node}: (no error line in its log)"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::node::Role;
    use crate::plan::{JobName, RuntimeKind};
    use crate::progress::RecordingReporter;
    use crate::runtime::NodeTarget;

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    /// An empty host-runtime plan over nodes a, b and c (this machine under three names;
    /// nothing here touches them).
    fn parts() -> (JobPlan, Cluster) {
        let plan = JobPlan {
            job: JobName::new("fan").unwrap(),
            workload: "run".into(),
            runtime: RuntimeKind::Host,
            nodes: Vec::new(),
            steps: Vec::new(),
        };
        let cluster = Cluster::new(
            ["a", "b", "c"]
                .iter()
                .map(|x| NodeTarget::local(n(x), Role::Worker))
                .collect(),
        );
        (plan, cluster)
    }

    #[tokio::test]
    async fn every_node_runs_and_every_failed_node_is_reported_together() {
        let (plan, cluster) = parts();
        let options = ApplyOptions {
            concurrency: 1,
            ..ApplyOptions::default()
        };
        let ctx = ApplyContext::new(
            &plan,
            &cluster,
            &options,
            RecordingReporter::new(),
            CancellationToken::new(),
        );
        let ran = AtomicUsize::new(0);
        let err = ctx
            .on_every_node([n("a"), n("b"), n("ghost"), n("c")], |node, _| {
                ran.fetch_add(1, Ordering::SeqCst);
                async move {
                    if node.as_str() == "b" {
                        Err(RuntimeError::Other("broke".into()))
                    } else {
                        Ok(node)
                    }
                }
            })
            .await
            .unwrap_err();
        assert_eq!(
            ran.load(Ordering::SeqCst),
            3,
            "a, b and c ran; ghost is no node"
        );
        let text = err.to_string();
        assert!(text.starts_with("failed on 2 of 4 nodes:"), "{text}");
        assert!(text.contains("\n  b: broke"), "{text}");
        assert!(text.contains("\n  ghost: no node named ghost"), "{text}");
    }

    #[tokio::test]
    async fn ctrl_c_alone_is_an_interrupt_not_a_list_of_failed_nodes() {
        let (plan, cluster) = parts();
        let options = ApplyOptions::default();
        let ctx = ApplyContext::new(
            &plan,
            &cluster,
            &options,
            RecordingReporter::new(),
            CancellationToken::new(),
        );
        let got = ctx
            .on_every_node(cluster.names(), |_, _| async {
                Err::<(), _>(RuntimeError::Cancelled {
                    what: "start".into(),
                })
            })
            .await;
        assert!(matches!(got, Err(PhaseError::Cancelled)), "{got:?}");
        let each = ctx
            .each_node(cluster.names(), |node, _| async move { Ok(node) })
            .await;
        let order: Vec<String> = each
            .into_iter()
            .map(|(_, r)| r.unwrap().to_string())
            .collect();
        assert_eq!(
            order,
            vec!["a", "b", "c"],
            "results come back in the order given"
        );
    }
}
