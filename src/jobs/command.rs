//! `spark-launch status`, `logs` and `stop`, each one call: resolve the live nodes (`--engine`,
//! `--hosts`, the cluster file, else this machine), find the job's work by its labels, act,
//! and return a report (`render` shows it). Every node that could not be asked is named beside
//! the others' results. The connections close on every exit path (`ResolvedCluster::scope`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{LogLine, Stopped, find, follow, read_logs, stop_jobs};
use crate::node::{NodeName, join};
use crate::plan::JobName;
use crate::plan::spec::LABEL_JOB;
use crate::progress::Reporter;
use crate::resolve::{self, Needs, Purpose, ResolveError, ResolvedCluster, Selection};
use crate::runtime::{JobEntry, RuntimeError};

/// `status [JOB]`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct StatusRequest {
    pub selection: Selection,
    /// Only this job.
    pub job: Option<JobName>,
}

/// `logs JOB [--node N] [-f]`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct LogsRequest {
    pub selection: Selection,
    pub job: JobName,
    /// Only this node's log (no prefixes).
    pub node: Option<NodeName>,
    /// Keep printing what the job writes until it ends (or Ctrl-C).
    pub follow: bool,
}

/// `stop JOB|--all`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct StopRequest {
    pub selection: Selection,
    /// The job to stop (`None`: every job spark-launch started).
    pub job: Option<JobName>,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Say what would be stopped, and touch nothing.
    pub dry_run: bool,
}

/// One job piece found, with how long it has run.
#[derive(Debug, Serialize)]
pub struct StatusRow {
    #[serde(flatten)]
    pub entry: JobEntry,
    pub uptime_s: Option<i64>,
    /// The NCCL the container loads (`apply::nccl::in_containers`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::libnccl::Loads>,
    /// The NCCL a running host process's job has mapped (`process_nccl`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_mapped: Option<crate::libnccl::host::ProcessNccl>,
}

/// What runs where.
#[derive(Debug)]
pub struct StatusReport {
    pub job: Option<JobName>,
    /// Every node asked, head first.
    pub nodes: Vec<NodeName>,
    pub rows: Vec<StatusRow>,
    /// The nodes that could not be asked.
    pub failed: Vec<(NodeName, RuntimeError)>,
    /// `status JOB` of a serving job: the start-up timings of its last launch from here.
    pub startup: Option<crate::workload::startup::Startup>,
    /// `status JOB`: the supervisor's last events for the job (`records`).
    pub events: Vec<crate::records::JobEvent>,
    /// What each job's engine says in its logs about how its nodes talk (llama.cpp's RPC
    /// transport), for the jobs whose engine reads it.
    pub links: Vec<super::JobLink>,
    /// Each runtime cache folder the work found names, with its size on its node.
    pub runtime_caches: Vec<super::CacheSeen>,
}

/// What `logs` printed: whether every node could be asked.
#[derive(Debug)]
pub struct LogsReport {
    /// The nodes that could not be asked.
    pub failed: Vec<NodeName>,
}

/// What `stop` would remove on one node: the containers and processes found there (live), or,
/// on a snapshot, what it would look for.
#[derive(Debug, Serialize)]
pub struct WouldStop {
    pub node: NodeName,
    /// Found on the live node (name, runtime, state). Empty on a snapshot.
    pub found: Vec<JobEntry>,
    /// On a snapshot: what a live stop removes there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub looks_for: Option<String>,
}

/// What `stop` did, or would do.
#[derive(Debug)]
pub enum StopReport {
    /// `--dry-run`: per node what would be stopped, and the nodes that could not be asked.
    Planned {
        /// The label a stop looks for (`dev.spark-launch.job[=JOB]`).
        label: String,
        grace_s: u64,
        nodes: Vec<WouldStop>,
        failed: Vec<(NodeName, RuntimeError)>,
    },
    /// What was removed per node, and the nodes that failed.
    Stopped {
        job: Option<JobName>,
        nodes: Vec<NodeName>,
        stopped: Vec<Stopped>,
        failed: Vec<(NodeName, RuntimeError)>,
    },
}

/// Why `status`, `logs` or `stop` could not do its job. [`JobsError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// `--node` names no node of the cluster.
    #[error(transparent)]
    UnknownNode(RuntimeError),
    #[error("no job named {job} on {on}; see `spark-launch status`")]
    NoSuchJob { job: JobName, on: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// What was shown could not be written (stdout), other than its reader going away.
    #[error("could not write the output: {0}")]
    Output(std::io::Error),
}

impl JobsError {
    /// 2 for the user's input (the nodes, an unknown node or job), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            JobsError::Resolve(e) if e.is_invalid_input() => 2,
            JobsError::UnknownNode(_) | JobsError::NoSuchJob { .. } => 2,
            _ => 1,
        }
    }
}

/// Where `logs` puts what the job wrote, as it comes (the CLI prints it as it is).
pub type LogSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// The live nodes of a job command.
async fn live(
    selection: &Selection,
    purpose: Purpose,
    reporter: &Arc<dyn Reporter>,
) -> Result<ResolvedCluster, JobsError> {
    Ok(resolve::resolve(selection, Needs::links(purpose), reporter).await?)
}

fn warn_failed(failed: &[(NodeName, RuntimeError)], reporter: &Arc<dyn Reporter>) {
    for (node, e) in failed {
        reporter.warn(&format!("{node}: {e}"));
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// How many of the supervisor's events `status JOB` shows.
const LAST_EVENTS: usize = 5;

/// `spark-launch status`.
pub async fn status(
    req: &StatusRequest,
    reporter: &Arc<dyn Reporter>,
) -> Result<StatusReport, JobsError> {
    let resolved = live(&req.selection, Purpose::Observe("status"), reporter).await?;
    let (nodes, found, nccl, (links, unread), runtime_caches) = resolved
        .scope(async |resolved| {
            let cluster = resolved.runtime()?;
            let found = find(&cluster, req.job.as_ref()).await;
            let nccl = crate::apply::nccl::in_containers(&cluster, &found.entries, 0).await;
            let mapped = super::process_nccl::in_processes(&cluster, &found.entries, 0).await;
            let links = super::links(&cluster, &found.entries).await;
            let caches = super::cache_size::measure(&cluster, &found.entries, 0).await;
            Ok::<_, JobsError>((
                cluster.names(),
                found,
                nccl.into_iter().zip(mapped),
                links,
                caches,
            ))
        })
        .await?;
    for (job, e) in &unread {
        reporter.warn(&format!("the logs of {job} could not be read: {e}"));
    }
    let rows: Vec<StatusRow> = found
        .entries
        .into_iter()
        .zip(nccl)
        .map(|(entry, (nccl, nccl_mapped))| {
            let uptime_s = match (entry.state.as_str(), entry.started_at) {
                ("running", Some(t)) => Some((now() - t).max(0)),
                _ => None,
            };
            StatusRow {
                entry,
                uptime_s,
                nccl,
                nccl_mapped,
            }
        })
        .collect();
    warn_failed(&found.failed, reporter);
    let startup = match &req.job {
        Some(j) if !rows.is_empty() => crate::records::load_startup(&crate::state::state_dir(), j),
        _ => None,
    };
    let events = match &req.job {
        Some(job) => {
            crate::records::read_events(&crate::state::state_dir(), job, Some(LAST_EVENTS))
                .unwrap_or_else(|e| {
                    reporter.warn(&format!("the supervisor's events of {job}: {e}"));
                    Vec::new()
                })
        }
        None => Vec::new(),
    };
    Ok(StatusReport {
        job: req.job.clone(),
        nodes,
        rows,
        failed: found.failed,
        startup,
        events,
        links,
        runtime_caches,
    })
}

/// `spark-launch logs`: every node's log, each line prefixed with its node (unless there is
/// one node, or `--node`), into `sink`; without `follow`, container logs merged in time order.
pub async fn logs(
    req: &LogsRequest,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
    sink: LogSink<'_>,
) -> Result<LogsReport, JobsError> {
    let resolved = live(&req.selection, Purpose::Observe("logs"), reporter).await?;
    resolved
        .scope(async |resolved| {
            let cluster = resolved.runtime()?;
            if let Some(n) = &req.node {
                cluster.node(n).map_err(JobsError::UnknownNode)?;
            }
            let mut found = find(&cluster, Some(&req.job)).await;
            warn_failed(&found.failed, reporter);
            if let Some(n) = &req.node {
                found.entries.retain(|e| &e.node == n);
            }
            if found.entries.is_empty() {
                return Err(JobsError::NoSuchJob {
                    job: req.job.clone(),
                    on: req
                        .node
                        .as_ref()
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| join(&cluster.names())),
                });
            }
            // Prefixes tell nodes apart; one node (or `--node`) needs none.
            let prefix = req.node.is_none() && cluster.names().len() > 1;
            let width = found
                .entries
                .iter()
                .map(|e| e.node.as_str().len())
                .max()
                .unwrap_or(0);
            let line = |l: &LogLine| {
                if prefix {
                    format!("{:width$} | {}", l.node.as_str(), l.text)
                } else {
                    l.text.clone()
                }
            };
            if req.follow {
                let mut merged = follow(&cluster, &found.entries).await?;
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        next = merged.next() => match next {
                            Some(Ok(l)) => sink(&line(&l)),
                            Some(Err(e)) => reporter.warn(&e.to_string()),
                            None => break,
                        },
                    }
                }
            } else {
                let all = read_logs(&cluster, &found.entries).await?;
                let text: String = all.iter().map(|l| line(l) + "\n").collect();
                if !text.is_empty() {
                    sink(&text);
                }
            }
            Ok(LogsReport {
                failed: found.failed.into_iter().map(|(n, _)| n).collect(),
            })
        })
        .await
}

/// `spark-launch stop JOB|--all` (with `dry_run`: what it would remove, read-only).
pub async fn stop(
    req: &StopRequest,
    reporter: &Arc<dyn Reporter>,
) -> Result<StopReport, JobsError> {
    if req.dry_run {
        return stop_plan(req, reporter).await;
    }
    let resolved = live(&req.selection, Purpose::Act, reporter).await?;
    let (nodes, stopped, failed) = resolved
        .scope(async |resolved| {
            let cluster = resolved.runtime()?;
            let names = join(&cluster.names());
            let step = reporter.step(&match &req.job {
                Some(j) => format!("Stop job {j} on {names}"),
                None => format!("Stop every spark-launch job on {names}"),
            });
            let (stopped, failed) = stop_jobs(&cluster, req.job.as_ref(), req.grace).await;
            let count: usize = stopped.iter().map(|s| s.removed.len()).sum();
            if failed.is_empty() {
                step.ok_with(&format!("removed {count}"));
            } else {
                step.fail(&format!("{} node(s) failed", failed.len()));
            }
            Ok::<_, JobsError>((cluster.names(), stopped, failed))
        })
        .await?;
    warn_failed(&failed, reporter);
    Ok(StopReport::Stopped {
        job: req.job.clone(),
        nodes,
        stopped,
        failed,
    })
}

/// `stop --dry-run`: what a stop would remove, read-only. On snapshots (no engine to ask) it
/// names, per node, the containers and processes a live stop looks for.
async fn stop_plan(
    req: &StopRequest,
    reporter: &Arc<dyn Reporter>,
) -> Result<StopReport, JobsError> {
    let label = match &req.job {
        Some(j) => format!("{LABEL_JOB}={j}"),
        None => LABEL_JOB.to_string(),
    };
    let resolved = live(&req.selection, Purpose::Plan, reporter).await?;
    let (nodes, failed) = resolved
        .scope(async |resolved| {
            if resolved.snapshots {
                let nodes = resolved
                    .names()
                    .into_iter()
                    .map(|node| WouldStop {
                        looks_for: Some(match &req.job {
                            Some(j) => format!(
                                "container {} and host processes labelled {label}",
                                j.container_name(&node)
                            ),
                            None => format!("every container and host process labelled {label}"),
                        }),
                        node,
                        found: Vec::new(),
                    })
                    .collect();
                return Ok::<_, JobsError>((nodes, Vec::new()));
            }
            let cluster = resolved.runtime()?;
            let found = find(&cluster, req.job.as_ref()).await;
            let nodes = cluster
                .names()
                .into_iter()
                .map(|node| WouldStop {
                    found: found
                        .entries
                        .iter()
                        .filter(|e| e.node == node)
                        .cloned()
                        .collect(),
                    node,
                    looks_for: None,
                })
                .collect();
            Ok((nodes, found.failed))
        })
        .await?;
    warn_failed(&failed, reporter);
    Ok(StopReport::Planned {
        label,
        grace_s: req.grace.as_secs(),
        nodes,
        failed,
    })
}
