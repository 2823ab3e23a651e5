//! The supervisor's effects (its decisions are `supervise::machine`'s, its records `crate::records`'):
//! `spark-launch supervise JOB` as one call ([`supervise`]), and the loop every supervised job
//! runs ([`watch`], also behind `--supervise` on the launching commands): ask the machine what
//! to do, look (`watch`), restart the whole group (`restart`), record every event in the job's
//! log and show it on stderr, until Ctrl-C (the job keeps running) or the machine gives up
//! (after stopping the job when a node's memory fell below the floor).

mod reach;
mod restart;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use self::restart::Stage;
use self::watch::Watched;
use crate::node::NodeName;
use crate::plan::JobName;
use crate::plan::secret::Secret;
use crate::progress::Reporter;
use crate::records::{self, JobEvent, RecordError};
use crate::report::shown::{Ending, Shown};
use crate::resolve::{self, Needs, Purpose, ResolveError, Selection};
use crate::runtime::{Cluster, RuntimeError};
use crate::supervise::machine::{Happened, Move, Policy, Seen, Supervisor};
use crate::workload::endpoint::{ApiKeyAsk, CLIENT_KEY_VAR};
use crate::workload::serve::ServePlan;

/// `supervise JOB`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct SuperviseRequest {
    pub selection: Selection,
    pub job: JobName,
    pub policy: Policy,
    /// Say what would be watched and how the group would restart; touch nothing.
    pub dry_run: bool,
    /// Where the job's records are (`bench::crate::state::state_dir()`).
    pub state_dir: PathBuf,
}

/// Why supervising ended with an error. [`SuperviseError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("the job's API key: {0}")]
    Key(String),
    #[error(
        "{node} runs a rank of {job} but is not among the nodes given (--hosts, the cluster file){hint}"
    )]
    MissingNode {
        job: JobName,
        node: NodeName,
        /// How the job was launched, when its `--hosts` were kept.
        hint: String,
    },
    #[error("{job}: {reason}; the job is left as it is (see `spark-launch logs {job} --events`)")]
    GaveUp { job: JobName, reason: String },
    #[error("{job}: the event log: {source}")]
    Events { job: JobName, source: RecordError },
}

impl SuperviseError {
    /// 2 for the user's input (no such job kept, unknown nodes), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            SuperviseError::Record(RecordError::NoPlan { .. }) => 2,
            SuperviseError::Record(RecordError::Supervised { .. }) => 2,
            SuperviseError::Record(RecordError::BadPlan { .. } | RecordError::Input(_)) => 2,
            SuperviseError::Resolve(e) if e.is_invalid_input() => 2,
            SuperviseError::MissingNode { .. } => 2,
            _ => 1,
        }
    }
}

/// What `supervise --dry-run` says: what would be watched, how, and the restart's stages.
#[derive(Debug, Serialize)]
pub struct SupervisePlan {
    pub job: JobName,
    pub engine: String,
    /// The ranks whose containers are watched, head first.
    pub ranks: Vec<Rank>,
    /// The API the token probe asks, as the head reaches it.
    pub probe_url: String,
    pub model: String,
    pub policy: Policy,
    /// A restart of the whole group, stage by stage.
    pub restart: Vec<Stage>,
    pub events: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct Rank {
    pub node: NodeName,
    pub container: String,
}

/// How supervising ended without an error.
#[derive(Debug)]
pub enum Supervised {
    Planned(Box<SupervisePlan>),
    /// Ctrl-C: the supervisor stopped; the job runs on.
    Stopped {
        job: JobName,
    },
    /// The job's containers were removed (stopped): nothing left to supervise.
    Gone {
        job: JobName,
        reason: String,
    },
}

impl Shown for Supervised {
    fn json(&self) -> Result<String, serde_json::Error> {
        match self {
            Supervised::Planned(p) => serde_json::to_string_pretty(p),
            Supervised::Stopped { job } => serde_json::to_string_pretty(
                &serde_json::json!({ "job": job, "supervising": "stopped", "job_left_running": true }),
            ),
            Supervised::Gone { job, reason } => serde_json::to_string_pretty(
                &serde_json::json!({ "job": job, "supervising": "ended", "reason": reason }),
            ),
        }
    }
    fn text(&self) -> String {
        match self {
            Supervised::Planned(p) => render_plan(p),
            Supervised::Stopped { job } => format!(
                "stopped supervising {job}; the job keeps running (stop it with `spark-launch stop {job}`)"
            ),
            Supervised::Gone { job, reason } => format!("{job}: {reason}; supervising ended"),
        }
    }
    fn ending(&self) -> Ending {
        Ending::Ok
    }
}

fn render_plan(p: &SupervisePlan) -> String {
    let mut out = format!(
        "supervise {} ({}): every {} s a token probe to {} for {} (≤ {} s); a wedge after {} probes in a row without a token\nranks watched:\n",
        p.job,
        p.engine,
        p.policy.interval.as_secs_f64(),
        p.probe_url,
        p.model,
        p.policy.probe_timeout.as_secs_f64(),
        p.policy.failures,
    );
    for r in &p.ranks {
        out.push_str(&format!("  {}: {}\n", r.node, r.container));
    }
    out.push_str("a restart, of the whole group:\n");
    for (i, s) in p.restart.iter().enumerate() {
        let line = match s {
            Stage::Stop { containers } => format!("stop {}", containers.join(", ")),
            Stage::Start { nodes } => format!("start again on {}", crate::node::join(nodes)),
            Stage::Run { step } => step.clone(),
        };
        out.push_str(&format!("  {}. {line}\n", i + 1));
    }
    out.push_str(&format!(
        "backoff {} s doubling up to {} s; give up after {} restarts in a row\nmemory: stop the job when a node's MemAvailable falls below {:.1} GiB; before a restart, wait up to {} s for it to come back\nevents: {}",
        p.policy.backoff.as_secs_f64(),
        p.policy.backoff_max.as_secs_f64(),
        p.policy.max_restarts,
        p.policy.memory_floor as f64 / (1u64 << 30) as f64,
        p.policy.settle.as_secs_f64(),
        p.events.display()
    ));
    out
}

/// What each node's share of `plan` needs (its memory plan), in bytes, for the check that
/// memory came back before a restart; a node whose need is not known needs only the floor.
fn needs_of(plan: &ServePlan) -> std::collections::BTreeMap<NodeName, u64> {
    plan.memory
        .nodes
        .iter()
        .filter_map(|(n, m)| Some((n.clone(), (m.need_gib? * (1u64 << 30) as f64) as u64)))
        .collect()
}

/// What would be watched for `plan` (`--dry-run`).
pub fn plan_of(plan: &ServePlan, policy: &Policy, state_dir: &std::path::Path) -> SupervisePlan {
    let (probe_url, model) = restart::api_of(plan);
    SupervisePlan {
        job: plan.job.job.clone(),
        engine: plan.engine.engine().name().to_string(),
        ranks: plan
            .nodes
            .iter()
            .map(|n| Rank {
                node: n.clone(),
                container: plan.job.job.container_name(n),
            })
            .collect(),
        probe_url,
        model,
        policy: policy.clone(),
        restart: restart::stages(plan),
        events: records::events_path(state_dir, &plan.job.job),
    }
}

/// The API key of a kept plan: read again from its file, else `$SPARK_LAUNCH_API_KEY` (a key
/// given on the command line is kept nowhere).
pub fn key_of(plan: &ServePlan) -> Result<Option<Secret>, SuperviseError> {
    let Some(k) = &plan.api_key else {
        return Ok(None);
    };
    if let Some(file) = &k.file {
        return crate::api_key::resolve(&ApiKeyAsk::File(file.clone()), false)
            .map(|k| Some(k.key))
            .map_err(|e| SuperviseError::Key(e.to_string()));
    }
    std::env::var(CLIENT_KEY_VAR)
        .ok()
        .and_then(Secret::new)
        .map(Some)
        .ok_or_else(|| {
            SuperviseError::Key(format!(
                "it was given on the command line and is kept nowhere: set {CLIENT_KEY_VAR} for the supervisor"
            ))
        })
}

/// `spark-launch supervise JOB` (see the module docs).
pub async fn supervise(
    req: &SuperviseRequest,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<Supervised, SuperviseError> {
    let plan = records::load_plan(&req.state_dir, &req.job)?;
    if req.dry_run {
        return Ok(Supervised::Planned(Box::new(plan_of(
            &plan,
            &req.policy,
            &req.state_dir,
        ))));
    }
    let key = key_of(&plan)?;
    let resolved = resolve::resolve(&req.selection, Needs::links(Purpose::Act), reporter).await?;
    resolved
        .scope(async |resolved| {
            let cluster = resolved.runtime()?;
            if let Some(node) = plan.nodes.iter().find(|n| cluster.node(n).is_err()) {
                let hint = match records::load_hosts(&req.state_dir, &req.job) {
                    Ok(Some(hosts)) => format!(
                        "; it was launched with --hosts: give them again (--hosts {})",
                        hosts
                            .iter()
                            .map(|h| h.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    _ => String::new(),
                };
                return Err(SuperviseError::MissingNode {
                    job: req.job.clone(),
                    node: node.clone(),
                    hint,
                });
            }
            watch(
                &cluster,
                &plan,
                key,
                &req.policy,
                &req.state_dir,
                reporter,
                cancel,
            )
            .await
        })
        .await
}

/// Supervises the job of `plan` on `cluster` until Ctrl-C (`Ok`: the job keeps running) or
/// the machine gives up (an error). Every event goes to the job's log and to stderr.
pub async fn watch(
    cluster: &Cluster,
    plan: &ServePlan,
    key: Option<Secret>,
    policy: &Policy,
    state_dir: &std::path::Path,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<Supervised, SuperviseError> {
    let job = plan.job.job.clone();
    let _one = records::lock(state_dir, &job)?;
    let target = Watched::of(cluster, plan, key.clone());
    let started = Instant::now();
    let t = || started.elapsed().as_millis() as u64;
    let mut m = Supervisor::new(policy.clone(), t()).with_needs(needs_of(plan));
    let record = |happened: Vec<Happened>| -> Result<(), SuperviseError> {
        let events: Vec<JobEvent> = happened
            .into_iter()
            .map(|h| h.stamped(records::now_ms()))
            .collect();
        for e in &events {
            reporter.warn(&records::said(&job, e));
        }
        records::append(state_dir, &job, &events).map_err(|source| SuperviseError::Events {
            job: job.clone(),
            source,
        })
    };
    record(vec![Happened::watching(&job, plan.nodes.len(), policy)])?;
    let mut errors = watch::follow_errors(&target).await;
    loop {
        record(m.drain())?;
        if cancel.is_cancelled() {
            record(vec![Happened::stopped()])?;
            return Ok(Supervised::Stopped { job });
        }
        match m.next_move(t()) {
            Move::Look => {
                for e in errors.drain() {
                    m.saw(t(), e);
                }
                let lost: Vec<NodeName> = plan
                    .nodes
                    .iter()
                    .filter(|n| m.is_lost(n))
                    .cloned()
                    .collect();
                let answering: Vec<NodeName> = plan
                    .nodes
                    .iter()
                    .filter(|n| !lost.contains(n))
                    .cloned()
                    .collect();
                m.saw(t(), Seen::Memory(watch::memory(cluster, &answering).await));
                if m.stopping() {
                    continue;
                }
                // Every node's container; a node whose connection dropped is connected to
                // again first.
                let seen = tokio::select! {
                    s = watch::ranks(&target) => s,
                    _ = cancel.cancelled() => continue,
                };
                for s in seen {
                    m.saw(t(), s);
                }
                // A node that answers again: its log is followed again from now (the old
                // stream ended with its connection).
                if lost.iter().any(|n| !m.is_lost(n)) {
                    errors = watch::follow_errors(&target).await;
                }
                // A probe while the head does not answer would only find the link down.
                let head_lost = plan.nodes.first().is_some_and(|h| m.is_lost(h));
                if m.watching() && !head_lost {
                    tokio::select! {
                        p = watch::probe(&target, policy.probe_timeout) => m.saw(t(), Seen::Probe(p)),
                        _ = cancel.cancelled() => {}
                    }
                }
            }
            Move::Wait(d) => {
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = cancel.cancelled() => {}
                }
            }
            Move::Restart { .. } => {
                record(m.drain())?;
                drop(errors);
                let done =
                    restart::restart(cluster, plan, key.as_ref(), reporter, cancel, &mut |r| {
                        m.memory_back(t(), r)
                    })
                    .await;
                if !cancel.is_cancelled() {
                    if let Err(e) = &done {
                        for (node, detail) in e.lost() {
                            m.saw(
                                t(),
                                Seen::Unreachable {
                                    node: node.clone(),
                                    detail: detail.clone(),
                                },
                            );
                        }
                    }
                    m.saw(t(), Seen::Restarted(done.map_err(|e| e.to_string())));
                }
                errors = watch::follow_errors(&target).await;
            }
            Move::Gone { reason } => {
                record(m.drain())?;
                return Ok(Supervised::Gone { job, reason });
            }
            Move::GiveUp { reason } => {
                record(m.drain())?;
                return Err(SuperviseError::GaveUp { job, reason });
            }
            Move::StopJob { reason } => {
                record(m.drain())?;
                drop(errors);
                let stop =
                    reporter.step(&format!("Stop every rank of {job}: memory below the floor"));
                match restart::stop_ranks(cluster, plan).await {
                    Ok(()) => stop.ok(),
                    Err(e) => stop.fail(&e.to_string()),
                }
                return Err(SuperviseError::GaveUp { job, reason });
            }
        }
    }
}
