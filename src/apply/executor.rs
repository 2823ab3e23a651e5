//! The executor: runs a `JobPlan` on its nodes as a named list of phases, built in one readable
//! function ([`phases_for`]): connect, check the job name is free, then one phase per plan
//! step (each step's payload is its phase, implemented in its own file under `phases/`,
//! sharing `context::ApplyContext`). Workloads (nccl-test, the serving engines, `run`) build the
//! plan; this only carries it out.
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

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::context::{ApplyContext, ApplyOptions, Captures, Marks};
use super::phase::{Phase, PhaseError, PhaseFailure, Runner};
use super::phases::{Connect, NameFree};
use crate::plan::{JobPlan, Step};
use crate::progress::Reporter;
use crate::runtime::Cluster;

/// A plan that ran to the end.
#[derive(Debug)]
pub struct Applied {
    /// Titles of the phases that ran, in order.
    pub phases: Vec<String>,
    pub captures: Captures,
    /// When the stages of a start-up were seen.
    pub marks: Marks,
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
    let ctx = ApplyContext::new(plan, cluster, options, reporter.clone(), cancel.clone());
    let phases = phases_for(plan);
    let runner = Runner {
        reporter,
        cancel,
        keep: options.keep,
        keep_hint: Some(format!("stop it with `spark-launch stop {}`", plan.job)),
    };
    let result = runner.run(&phases, &ctx).await;
    let captures = ctx.captures();
    match result {
        Ok(phases) => Ok(Applied {
            phases,
            captures,
            marks: ctx.marks(),
        }),
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
/// (when the plan starts anything), then one phase per step: each step's payload is its own
/// phase. One exhaustive match: a new step kind does not compile until it has its phase.
pub fn phases_for<'a>(plan: &JobPlan) -> Vec<Box<dyn Phase<ApplyContext<'a>> + 'a>> {
    let mut phases: Vec<Box<dyn Phase<ApplyContext<'a>> + 'a>> = vec![Box::new(Connect)];
    if plan.steps.iter().any(|s| matches!(s, Step::Start(_))) {
        phases.push(Box::new(NameFree));
    }
    for step in &plan.steps {
        phases.push(match step.clone() {
            Step::EnsureImage(s) => Box::new(s),
            Step::EnsureFolders(s) => Box::new(s),
            Step::Start(s) => Box::new(s),
            Step::WriteFile(s) => Box::new(s),
            Step::Exec(s) => Box::new(s),
            Step::WaitHttp(s) => Box::new(s),
            Step::WaitExit(s) => Box::new(s),
            Step::CheckPorts(s) => Box::new(s),
            Step::CheckReachable(s) => Box::new(s),
            Step::StageModel(s) => s,
            Step::WaitRay(s) => Box::new(s),
            Step::WaitServing(s) => Box::new(s),
            Step::StageNccl(s) => Box::new(s),
            Step::CheckNccl(s) => Box::new(s),
            Step::Stop(s) => Box::new(s),
        });
    }
    phases
}

#[cfg(test)]
mod tests {
    //! The executor on stand-in nodes: each "node" is this machine's shell with its own state
    //! folder, so host-runtime plans run for real with no Docker and no SSH.

    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use futures::future::BoxFuture;
    use futures::stream::BoxStream;
    use tokio::sync::mpsc::UnboundedSender;

    use super::*;
    use crate::node::{NodeName, Role};
    use crate::plan::{
        JobName, Launch, NodePlan, ProcessSpec, RuntimeKind, Start, Stop, WaitExit, WaitServing,
    };
    use crate::progress::RecordingReporter;
    use crate::runtime::shell::{LocalShell, NodeShell, ShellError, ShellOutput};
    use crate::runtime::{NodeTarget, Reach, RemoteNode};

    /// A node whose shell is a local one; starting a process takes a moment, and the most
    /// starts seen at once are counted.
    #[derive(Debug)]
    struct StandIn {
        shell: LocalShell,
        starting: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        /// Scripts containing `.0` fail to run (a dropped round trip) on their matches number
        /// `.1` up to `.2` (counted in `.3`).
        hiccup: Option<(&'static str, usize, usize, AtomicUsize)>,
    }

    impl NodeShell for StandIn {
        fn node(&self) -> &NodeName {
            self.shell.node()
        }
        fn via(&self) -> String {
            "a stand-in".into()
        }
        fn run<'a>(
            &'a self,
            script: &'a str,
            stdin: Vec<u8>,
            lines: Option<UnboundedSender<String>>,
        ) -> BoxFuture<'a, Result<ShellOutput, ShellError>> {
            Box::pin(async move {
                if let Some((needle, from, to, seen)) = &self.hiccup
                    && script.contains(needle)
                    && (*from..=*to).contains(&(seen.fetch_add(1, Ordering::SeqCst) + 1))
                {
                    return Err(ShellError {
                        node: self.node().clone(),
                        via: self.via(),
                        cause: "Connection reset by peer".into(),
                    });
                }
                let start = script.contains("setsid");
                if start {
                    let now = self.starting.fetch_add(1, Ordering::SeqCst) + 1;
                    self.most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
                let out = self.shell.run(script, stdin, lines).await;
                if start {
                    self.starting.fetch_sub(1, Ordering::SeqCst);
                }
                out
            })
        }
        fn stream(&self, script: &str) -> BoxStream<'static, Result<Bytes, ShellError>> {
            self.shell.stream(script)
        }
    }

    impl RemoteNode for StandIn {
        fn forward_socket<'a>(
            &'a self,
            _remote: &'a str,
        ) -> BoxFuture<'a, Result<PathBuf, String>> {
            Box::pin(async { Err("a stand-in node has no Docker".to_string()) })
        }
    }

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    /// Three stand-in nodes sharing one counter of starts in flight.
    fn nodes(dir: &std::path::Path) -> (Cluster, Arc<AtomicUsize>) {
        nodes_with(dir, None)
    }

    /// The same, the head's scripts containing `hiccup.0` failing on their matches number
    /// `hiccup.1` to `hiccup.2`.
    fn nodes_with(
        dir: &std::path::Path,
        hiccup: Option<(&'static str, usize, usize)>,
    ) -> (Cluster, Arc<AtomicUsize>) {
        let starting = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let targets = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, name)| NodeTarget {
                name: n(name),
                role: if i == 0 { Role::Head } else { Role::Worker },
                reach: Reach::Remote(Arc::new(StandIn {
                    shell: LocalShell::new(n(name)).with_env(
                        "SPARK_LAUNCH_STATE_DIR",
                        &dir.join(name).display().to_string(),
                    ),
                    starting: starting.clone(),
                    most: most.clone(),
                    hiccup: hiccup
                        .filter(|_| i == 0)
                        .map(|(s, from, to)| (s, from, to, AtomicUsize::new(0))),
                })),
                docker_socket: None,
            })
            .collect();
        (Cluster::new(targets), most)
    }

    /// Every node echoes its name; the head's output is captured; the job is stopped.
    fn plan() -> JobPlan {
        let job = JobName::new("t11").unwrap();
        let names = vec![n("a"), n("b"), n("c")];
        JobPlan {
            job: job.clone(),
            workload: "run".into(),
            runtime: RuntimeKind::Host,
            nodes: names
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    let role = if i == 0 { Role::Head } else { Role::Worker };
                    let mut p = ProcessSpec::new(
                        &job,
                        node,
                        role,
                        vec!["sh".into(), "-c".into(), "echo hello from $WHO".into()],
                    );
                    p.env = BTreeMap::from([("WHO".to_string(), node.to_string())]);
                    NodePlan {
                        node: node.clone(),
                        role,
                        launch: Launch::Process(p),
                    }
                })
                .collect(),
            steps: vec![
                Step::Start(Start {
                    nodes: names.clone(),
                }),
                Step::WaitExit(WaitExit {
                    node: n("a"),
                    capture: Some("out".into()),
                    timeout_s: 30,
                    allow_failure: false,
                }),
                Step::Stop(Stop),
            ],
        }
    }

    async fn run(concurrency: usize) -> (Applied, usize) {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, most) = nodes(dir.path());
        let options = ApplyOptions {
            concurrency,
            ..ApplyOptions::default()
        };
        let applied = execute(
            &plan(),
            &cluster,
            &options,
            RecordingReporter::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        (applied, most.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_host_plan_runs_on_stand_in_nodes_with_its_phases_in_order_and_its_capture() {
        let (applied, _) = run(0).await;
        assert_eq!(
            applied.phases,
            vec![
                "Connect to the nodes",
                "Check that the job name is free",
                "Start on a, b, c",
                "Wait for the job to finish on a",
                "Stop the job",
            ]
        );
        assert_eq!(applied.captures["out"].stdout.trim(), "hello from a");
    }

    #[tokio::test]
    async fn a_dropped_round_trip_while_waiting_is_asked_again_not_taken_for_an_end() {
        let dir = tempfile::tempdir().unwrap();
        // Every look at the head's process fails twice before one gets through.
        let (cluster, _) = nodes_with(dir.path(), Some(("echo gone", 1, 2)));
        let applied = execute(
            &plan(),
            &cluster,
            &ApplyOptions::default(),
            RecordingReporter::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(applied.captures["out"].stdout.trim(), "hello from a");
    }

    /// An OpenAI-like server that answers `/health`, lists model `m` and streams one token
    /// for a completion (readiness's token probe).
    async fn api() -> u16 {
        api_streaming("data: {\"choices\":[{\"index\":0,\"text\":\" hi\"}]}\n\ndata: [DONE]\n\n")
            .await
    }

    /// [`api`] whose completions stream `completion`.
    async fn api_streaming(completion: &'static str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let body = if buf[..n].starts_with(b"GET /v1/models") {
                    r#"{"data":[{"id":"m"}]}"#
                } else if buf[..n].starts_with(b"POST /v1/completions") {
                    completion
                } else {
                    ""
                };
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        port
    }

    #[tokio::test]
    async fn a_dropped_look_at_the_job_during_readiness_does_not_end_a_serving_job() {
        let dir = tempfile::tempdir().unwrap();
        // The head's first look at its process during readiness (after the connect and
        // the name check) fail, as a dropped SSH round trip would: the job must still be
        // waited for, not torn down as "gone".
        let (cluster, _) = nodes_with(dir.path(), Some(("@@", 3, 3)));
        let port = api().await;
        let mut p = plan();
        for part in &mut p.nodes {
            if let Launch::Process(proc) = &mut part.launch {
                proc.command = vec!["sleep".into(), "30".into()];
            }
        }
        p.steps = vec![
            Step::Start(Start {
                nodes: p.node_names(),
            }),
            Step::WaitServing(WaitServing {
                node: n("a"),
                url: format!("http://127.0.0.1:{port}"),
                model: "m".into(),
                engine: "vllm".into(),
                timeout_s: 30,
                api_key: None,
                // This API answers the token probe only: what is tested is readiness.
                no_check: true,
            }),
            Step::Stop(Stop),
        ];
        let applied = execute(
            &p,
            &cluster,
            &ApplyOptions::default(),
            RecordingReporter::new(),
            CancellationToken::new(),
        )
        .await;
        assert!(
            applied.is_ok(),
            "{:?}",
            applied.err().map(|e| e.to_string())
        );
    }

    /// A serving plan on the stand-in nodes: the head's process prints `log` and sleeps; the
    /// API on `port` is waited for.
    fn serving_plan(port: u16, log: &str) -> JobPlan {
        let mut p = plan();
        for part in &mut p.nodes {
            if let Launch::Process(proc) = &mut part.launch {
                proc.command = vec!["sh".into(), "-c".into(), format!("echo '{log}'; sleep 30")];
            }
        }
        p.steps = vec![
            Step::Start(Start {
                nodes: p.node_names(),
            }),
            Step::WaitServing(WaitServing {
                node: n("a"),
                url: format!("http://127.0.0.1:{port}"),
                model: "m".into(),
                engine: "vllm".into(),
                timeout_s: 30,
                api_key: None,
                // This API answers the token probe only: what is tested is readiness.
                no_check: true,
            }),
        ];
        p
    }

    #[tokio::test]
    async fn an_empty_first_generation_fails_the_start_with_each_nodes_first_error_line() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, _) = nodes_with(dir.path(), None);
        // The stream ends with no text, as an engine whose first generation is broken.
        let port = api_streaming(
            "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        )
        .await;
        let p = serving_plan(
            port,
            "ERROR 05-02 10:00:01 [core.py:1] no kernel image is available",
        );
        let e = execute(
            &p,
            &cluster,
            &ApplyOptions::default(),
            RecordingReporter::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("a first streamed completion gave an empty generation"),
            "{text}"
        );
        assert!(text.contains("no kernel image is available"), "{text}");
        assert!(e.cleaned_up, "{text}");
    }

    #[tokio::test]
    async fn a_served_token_marks_every_stage_of_the_start_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, _) = nodes_with(dir.path(), None);
        let port = api().await;
        let mut p = serving_plan(port, "INFO up");
        p.steps.push(Step::Stop(Stop));
        let applied = execute(
            &p,
            &cluster,
            &ApplyOptions::default(),
            RecordingReporter::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        let m = applied.marks;
        let (Some(c), Some(o), Some(h), Some(t)) = (
            m.containers_started,
            m.port_open,
            m.http_ready,
            m.first_token,
        ) else {
            panic!("a stage is not marked: {m:?}")
        };
        assert!(c <= o && o <= h && h <= t, "{m:?}");
        assert!(m.token_after_ms.is_some(), "{m:?}");
    }

    #[tokio::test]
    async fn concurrency_one_starts_the_nodes_one_at_a_time() {
        let (_, together) = run(0).await;
        assert_eq!(together, 3, "without a limit all three start at once");
        let (_, one) = run(1).await;
        assert_eq!(one, 1, "--concurrency 1 starts one node at a time");
    }
}
