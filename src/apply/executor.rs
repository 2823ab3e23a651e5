//! The executor: runs a `JobPlan` on its nodes as a named list of phases, built in one readable
//! function ([`phases_for`]): connect, check the job name is free, then one phase per plan
//! step. Workloads (nccl-test, vllm, trtllm, `run`) build the plan; this only carries it out.
//!
//! ```ignore
//! let cluster = Cluster::new(targets);                 // runtime::NodeTarget per node
//! let applied = apply::execute(&plan, &cluster, &ApplyOptions::default(), reporter, cancel).await?;
//! let log = &applied.captures["nccl"].stdout;          // an Exec step's `capture`
//! ```
//!
//! On failure or Ctrl-C (the `cancel` token), the phases that ran are cleaned up in reverse
//! order (a started job is stopped and removed on every node of the plan) unless
//! `ApplyOptions::keep`. Captures are returned in both cases.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::fanout::{NodeFailures, all_ok, for_each_node};
use super::images::{EnsureError, PushPolicy, ensure_image};
use super::phase::{Phase, PhaseError, PhaseFailure, Runner};
use crate::node::NodeName;
use crate::plan::{JobPlan, RuntimeKind, Step};
use crate::progress::Reporter;
use crate::runtime::http::{HttpAnswer, HttpUrl, get};
use crate::runtime::wait::{self, Probe};
use crate::runtime::{Cluster, NodeRuntime, RuntimeError};

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
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            keep: false,
            concurrency: 0,
            push: PushPolicy::Push,
            stop_grace: Duration::from_secs(10),
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

/// A plan that ran to the end.
#[derive(Debug)]
pub struct Applied {
    /// Titles of the phases that ran, in order.
    pub phases: Vec<String>,
    pub captures: Captures,
}

/// Why a plan did not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum ApplyErrorKind {
    #[error("the plan cannot run:\n  {}", .0.join("\n  "))]
    InvalidPlan(Vec<String>),
    /// Refused configuration (taken job name, wrong-arch image): exit 2.
    #[error("{reason}")]
    Refused { phase: String, reason: String },
    #[error("{phase}: {error}")]
    Failed { phase: String, error: PhaseError },
    #[error("interrupted during \"{phase}\"")]
    Interrupted { phase: String },
}

/// A failed or interrupted apply, with what was captured before it ended.
#[derive(Debug)]
pub struct ApplyError {
    pub kind: ApplyErrorKind,
    pub captures: Captures,
    /// Whether the clean-up ran (false with `keep`).
    pub cleaned_up: bool,
    pub job: String,
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)?;
        match &self.kind {
            ApplyErrorKind::Interrupted { .. } | ApplyErrorKind::Failed { .. } => {
                if self.cleaned_up {
                    write!(f, "\n(what had started was stopped and removed)")
                } else {
                    write!(
                        f,
                        "\n(--keep: what had started is still there; stop it with `spark-launch stop {}`)",
                        self.job
                    )
                }
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ApplyError {}

impl ApplyError {
    /// 2 for a refused plan or configuration, 130 after Ctrl-C, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            ApplyErrorKind::InvalidPlan(_) | ApplyErrorKind::Refused { .. } => 2,
            ApplyErrorKind::Interrupted { .. } => 130,
            ApplyErrorKind::Failed { .. } => 1,
        }
    }
}

/// What every phase of one apply shares.
pub struct ApplyContext<'a> {
    pub plan: &'a JobPlan,
    pub cluster: &'a Cluster,
    pub options: &'a ApplyOptions,
    pub reporter: Arc<dyn Reporter>,
    pub cancel: CancellationToken,
    captures: Mutex<Captures>,
}

impl ApplyContext<'_> {
    fn capture(&self, name: &str, c: Capture) {
        if let Ok(mut m) = self.captures.lock() {
            m.insert(name.to_string(), c);
        }
    }

    fn name_on(&self, node: &NodeName) -> String {
        self.plan.job.container_name(node)
    }

    /// The runtime of `node`, or a phase error naming it.
    pub(crate) fn node(&self, node: &NodeName) -> Result<&NodeRuntime, PhaseError> {
        self.cluster
            .node(node)
            .map_err(|e| PhaseError::node(node, e))
    }
}

/// Runs `plan` on `cluster`. Everything in the plan is checked first; then the phases run;
/// on failure or `cancel`, clean-up as described in the module docs.
pub async fn execute(
    plan: &JobPlan,
    cluster: &Cluster,
    options: &ApplyOptions,
    reporter: Arc<dyn Reporter>,
    cancel: CancellationToken,
) -> Result<Applied, ApplyError> {
    let mut problems = plan.problems();
    for n in plan.node_names() {
        if cluster.node(&n).is_err() {
            problems.push(format!(
                "node {n} has a part in the plan but is not among the nodes given"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(ApplyError {
            kind: ApplyErrorKind::InvalidPlan(problems),
            captures: Captures::new(),
            cleaned_up: true,
            job: plan.job.to_string(),
        });
    }
    let ctx = ApplyContext {
        plan,
        cluster,
        options,
        reporter: reporter.clone(),
        cancel: cancel.clone(),
        captures: Mutex::new(Captures::new()),
    };
    let phases = phases_for(plan);
    let runner = Runner {
        reporter,
        cancel,
        keep: options.keep,
        keep_hint: Some(format!("stop it with `spark-launch stop {}`", plan.job)),
    };
    let result = runner.run(&phases, &ctx).await;
    let captures = ctx.captures.lock().map(|c| c.clone()).unwrap_or_default();
    match result {
        Ok(phases) => Ok(Applied { phases, captures }),
        Err(PhaseFailure {
            phase,
            error,
            interrupted,
            cleaned_up,
        }) => {
            let kind = if interrupted {
                ApplyErrorKind::Interrupted { phase }
            } else if let PhaseError::Refused(reason) = error {
                ApplyErrorKind::Refused { phase, reason }
            } else {
                ApplyErrorKind::Failed { phase, error }
            };
            Err(ApplyError {
                kind,
                captures,
                cleaned_up,
                job: plan.job.to_string(),
            })
        }
    }
}

/// The phases for `plan`, in order: connect to its nodes, make sure the job name is free
/// (when the plan starts anything), then one phase per step.
pub fn phases_for<'a>(plan: &JobPlan) -> Vec<Box<dyn Phase<ApplyContext<'a>> + 'a>> {
    let mut phases: Vec<Box<dyn Phase<ApplyContext<'a>> + 'a>> = vec![Box::new(Connect)];
    if plan.steps.iter().any(|s| matches!(s, Step::Start { .. })) {
        phases.push(Box::new(NameFree));
    }
    for step in &plan.steps {
        if let Some(p) = super::serving::phase_for(step) {
            phases.push(p);
            continue;
        }
        phases.push(match step.clone() {
            Step::EnsureImage { image, nodes } => Box::new(EnsureImage { image, nodes }),
            Step::Start { nodes } => Box::new(Start { nodes }),
            Step::WriteFile {
                node,
                path,
                content,
                mode,
            } => Box::new(WriteFile {
                node,
                path,
                content,
                mode,
            }),
            Step::Exec {
                node,
                command,
                env,
                capture,
                timeout_s,
            } => Box::new(Exec {
                node,
                command,
                env,
                capture,
                timeout: Duration::from_secs(timeout_s),
            }),
            Step::WaitHttp {
                node,
                url,
                timeout_s,
            } => Box::new(WaitHttp {
                node,
                url,
                timeout: Duration::from_secs(timeout_s),
            }),
            Step::WaitExit {
                node,
                capture,
                timeout_s,
                allow_failure,
            } => Box::new(WaitExit {
                node,
                capture,
                timeout: Duration::from_secs(timeout_s),
                allow_failure,
            }),
            Step::Stop => Box::new(Stop),
            Step::CheckPorts { .. }
            | Step::CheckReachable { .. }
            | Step::StageModel { .. }
            | Step::WaitRay { .. }
            | Step::WaitServing { .. } => continue,
        });
    }
    phases
}

fn failures<T>(
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

/// Reach every node of the plan: its engine (Docker) or its shell (host runtime).
struct Connect;

impl<'a> Phase<ApplyContext<'a>> for Connect {
    fn title(&self) -> String {
        "Connect to the nodes".to_string()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let nodes = ctx.plan.node_names();
            let results =
                for_each_node(nodes.clone(), ctx.options.concurrency, |node| async move {
                    let handle = ctx.cluster.node(&node)?;
                    match ctx.plan.runtime {
                        RuntimeKind::Docker => handle.engine().await.map(|e| {
                            format!(
                                "Docker {} ({})",
                                e.features().server_version,
                                e.features().arch
                            )
                        }),
                        RuntimeKind::Host => handle
                            .jobs(None, Some(RuntimeKind::Host))
                            .await
                            .map(|_| "shell".to_string()),
                    }
                })
                .await;
            failures(results)?;
            Ok(Some(format!(
                "{} node{}",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" }
            )))
        })
    }
}

/// Refuse to start a job whose name is taken on any node (STYLE: validate before effects).
struct NameFree;

impl<'a> Phase<ApplyContext<'a>> for NameFree {
    fn title(&self) -> String {
        "Check that the job name is free".to_string()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let job = &ctx.plan.job;
            let nodes: Vec<NodeName> = ctx.cluster.names();
            let results = for_each_node(nodes, ctx.options.concurrency, |node| async move {
                let handle = ctx.cluster.node(&node)?;
                let mut taken: Vec<String> = Vec::new();
                // The plan's runtime: a container and a process never share a name.
                let runtime = Some(ctx.plan.runtime);
                for e in handle.jobs(Some(job), runtime).await? {
                    taken.push(format!("{} ({})", e.name, e.state));
                }
                if ctx.plan.runtime == RuntimeKind::Docker {
                    let name = job.container_name(&node);
                    let seen = taken.iter().any(|t| t.starts_with(&format!("{name} ")));
                    let found = if seen {
                        None
                    } else {
                        handle.engine().await?.inspect(&name).await?
                    };
                    if let Some(c) = found {
                        let ours = c
                            .config
                            .and_then(|c| c.labels)
                            .is_some_and(|l| l.contains_key(crate::plan::spec::LABEL_JOB));
                        if !ours {
                            taken.push(format!(
                                "{name} (a container spark-launch did not start: choose another job name, or remove it yourself with `docker rm -f {name}`)"
                            ));
                        }
                    }
                }
                Ok::<_, RuntimeError>(taken)
            })
            .await;
            let found = failures(results)?;
            let taken: Vec<String> = found
                .into_iter()
                .filter(|(_, t)| !t.is_empty())
                .map(|(n, t)| format!("{n}: {}", t.join(", ")))
                .collect();
            if taken.is_empty() {
                Ok(None)
            } else {
                Err(PhaseError::Refused(format!(
                    "job {job} already exists:\n  {}\nfix: stop it first with `spark-launch stop {job}`, or pick another job name",
                    taken.join("\n  ")
                )))
            }
        })
    }
}

struct EnsureImage {
    image: String,
    nodes: Vec<NodeName>,
}

impl<'a> Phase<ApplyContext<'a>> for EnsureImage {
    fn title(&self) -> String {
        Step::EnsureImage {
            image: self.image.clone(),
            nodes: self.nodes.clone(),
        }
        .title()
    }
    fn should_run(&self, ctx: &ApplyContext<'a>) -> bool {
        ctx.plan.runtime == RuntimeKind::Docker
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            match ensure_image(
                ctx.cluster,
                &self.image,
                &self.nodes,
                ctx.options.push,
                ctx.options.concurrency,
                &ctx.reporter,
                &ctx.cancel,
            )
            .await
            {
                Ok(report) => Ok(Some(report.summary())),
                Err(_) if ctx.cancel.is_cancelled() => Err(PhaseError::Cancelled),
                Err(e @ (EnsureError::Refused(_) | EnsureError::Missing { .. })) => {
                    Err(PhaseError::Refused(e.to_string()))
                }
                Err(EnsureError::Push(super::images::PushError::Targets(f))) => {
                    Err(PhaseError::Nodes(f))
                }
                Err(EnsureError::Failed(report)) => Err(PhaseError::Nodes(NodeFailures {
                    total: report.nodes.len(),
                    failed: report
                        .failed()
                        .into_iter()
                        .map(|(n, e)| (n.clone(), RuntimeError::Other(e.to_string())))
                        .collect(),
                })),
                Err(e) => Err(PhaseError::Other(e.to_string())),
            }
        })
    }
}

/// Start the job's container (or process) on the nodes, all at once. Clean-up stops and
/// removes the job on every node of the plan, found by its labels, so a half-finished start
/// (or one cut short by Ctrl-C) leaves nothing.
struct Start {
    nodes: Vec<NodeName>,
}

impl<'a> Phase<ApplyContext<'a>> for Start {
    fn title(&self) -> String {
        Step::Start {
            nodes: self.nodes.clone(),
        }
        .title()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let results = for_each_node(
                self.nodes.clone(),
                ctx.options.concurrency,
                |node| async move {
                    let part = ctx
                        .plan
                        .node(&node)
                        .ok_or_else(|| RuntimeError::Other("no part in the plan".to_string()))?;
                    ctx.cluster.node(&node)?.start(part, &ctx.cancel).await
                },
            )
            .await;
            failures(results)?;
            Ok(None)
        })
    }
    fn cleanup<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> Option<BoxFuture<'b, Result<(), PhaseError>>> {
        Some(Box::pin(stop_job(ctx, Duration::from_secs(2))))
    }
}

async fn stop_job(ctx: &ApplyContext<'_>, grace: Duration) -> Result<(), PhaseError> {
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

struct WriteFile {
    node: NodeName,
    path: String,
    content: String,
    mode: u32,
}

impl<'a> Phase<ApplyContext<'a>> for WriteFile {
    fn title(&self) -> String {
        format!("Write {} on {}", self.path, self.node)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            handle
                .write_file(
                    ctx.plan.runtime,
                    &ctx.name_on(&self.node),
                    &self.path,
                    self.content.as_bytes(),
                    self.mode,
                )
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            Ok(None)
        })
    }
}

struct Exec {
    node: NodeName,
    command: Vec<String>,
    env: BTreeMap<String, String>,
    capture: Option<String>,
    timeout: Duration,
}

impl<'a> Phase<ApplyContext<'a>> for Exec {
    fn title(&self) -> String {
        Step::Exec {
            node: self.node.clone(),
            command: self.command.clone(),
            env: BTreeMap::new(),
            capture: None,
            timeout_s: 0,
        }
        .title()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let out = handle
                .exec(
                    ctx.plan.runtime,
                    &ctx.name_on(&self.node),
                    &self.command,
                    &self.env,
                    self.timeout,
                    &ctx.cancel,
                )
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            if let Some(name) = &self.capture {
                ctx.capture(
                    name,
                    Capture {
                        node: self.node.clone(),
                        exit_code: out.exit_code,
                        stdout: out.stdout.clone(),
                        stderr: out.stderr.clone(),
                    },
                );
            }
            if out.exit_code != 0 {
                return Err(PhaseError::node(
                    &self.node,
                    RuntimeError::Command {
                        command: crate::plan::job::shell_words(&self.command),
                        status: format!("exit status {}", out.exit_code),
                        stderr: if out.stderr.trim().is_empty() {
                            out.stdout
                        } else {
                            out.stderr
                        },
                    },
                ));
            }
            Ok(None)
        })
    }
}

struct WaitHttp {
    node: NodeName,
    url: String,
    timeout: Duration,
}

impl<'a> Phase<ApplyContext<'a>> for WaitHttp {
    fn title(&self) -> String {
        format!("Wait for {} on {}", self.url, self.node)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let url = HttpUrl::parse(&self.url)
                .map_err(|e| PhaseError::node(&self.node, RuntimeError::Other(e)))?;
            let handle = ctx.node(&self.node)?;
            let name = ctx.name_on(&self.node);
            let runtime = ctx.plan.runtime;
            wait::until(&self.url, self.timeout, Duration::from_secs(2), &ctx.cancel, || async {
                // A job that died will never answer: stop waiting at once.
                let entries = handle
                    .jobs(Some(&ctx.plan.job), Some(runtime))
                    .await
                    .unwrap_or_default();
                if let Some(e) = entries
                    .iter()
                    .find(|e| e.name == name && e.state != "running")
                {
                    return Probe::Abort(RuntimeError::Other(format!(
                        "{name} is {} (exit code {}) and will not answer; see `spark-launch logs {} --node {}`",
                        e.state,
                        e.exit_code
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| "?".into()),
                        ctx.plan.job,
                        self.node
                    )));
                }
                match get(&url, Duration::from_secs(5)).await {
                    HttpAnswer::Status(s) if (200..300).contains(&s) => Probe::Ready(()),
                    HttpAnswer::Status(s) => Probe::NotYet(format!("HTTP {s}")),
                    HttpAnswer::NoAnswer(e) => Probe::NotYet(e),
                }
            })
            .await
            .map_err(|e| PhaseError::node(&self.node, e))?;
            Ok(None)
        })
    }
}

struct WaitExit {
    node: NodeName,
    capture: Option<String>,
    timeout: Duration,
    allow_failure: bool,
}

impl<'a> Phase<ApplyContext<'a>> for WaitExit {
    fn title(&self) -> String {
        format!("Wait for the job to finish on {}", self.node)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let name = ctx.name_on(&self.node);
            let code = handle
                .wait_exit(ctx.plan.runtime, &name, self.timeout, &ctx.cancel)
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            if let Some(cap) = &self.capture {
                use futures::StreamExt;
                let mut log = Vec::new();
                let mut stream = handle
                    .logs(ctx.plan.runtime, &name, false, false)
                    .await
                    .map_err(|e| PhaseError::node(&self.node, e))?;
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|e| PhaseError::node(&self.node, e))?;
                    log.extend_from_slice(&chunk);
                }
                ctx.capture(
                    cap,
                    Capture {
                        node: self.node.clone(),
                        exit_code: code,
                        stdout: String::from_utf8_lossy(&log).into_owned(),
                        stderr: String::new(),
                    },
                );
            }
            if code != 0 && !self.allow_failure {
                return Err(PhaseError::node(
                    &self.node,
                    RuntimeError::Other(format!(
                        "{name} exited with code {code}; see `spark-launch logs {} --node {}`",
                        ctx.plan.job, self.node
                    )),
                ));
            }
            Ok(Some(format!("exit code {code}")))
        })
    }
}

struct Stop;

impl<'a> Phase<ApplyContext<'a>> for Stop {
    fn title(&self) -> String {
        "Stop the job".to_string()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            stop_job(ctx, ctx.options.stop_grace).await?;
            Ok(None)
        })
    }
}
