//! The restart of a whole group, from the job's serving plan: stop every rank's container (kept,
//! with its configuration), wait for memory to come back on every node (the machine decides),
//! then walk the plan from its first start step on — each start step
//! starts its nodes' containers again, in the plan's order, and the steps between and after
//! them (the waits: Ray's members, the API ready with a token) run through the executor as
//! they did at launch. The steps before the first start (ports, image, model, NCCL staging)
//! are not run again: what they put on the nodes is still there.
//!
//! Never a single rank, never a container without the job's label (each is checked before it
//! is stopped or started). Effects only; the decision to restart is `machine`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::reach::{Unanswered, asked};
use crate::apply::context::ApplyOptions;
use crate::apply::executor::execute;
use crate::node::{NodeName, all_ok, for_each_node};
use crate::plan::secret::Secret;
use crate::plan::spec::LABEL_JOB;
use crate::plan::{JobPlan, Launch, RuntimeKind, Step};
use crate::progress::Reporter;
use crate::runtime::{Cluster, RuntimeError};
use crate::supervise::machine::{Gate, HostMemory};
use crate::workload::serve::ServePlan;

/// How long a rank gets between SIGTERM and SIGKILL when its group restarts: a wedged rank
/// does not end by itself.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The API as the head reaches it and the served model, from the plan's wait-serving step
/// (else its endpoint).
pub fn api_of(plan: &ServePlan) -> (String, String) {
    plan.job
        .steps
        .iter()
        .find_map(|s| match s {
            Step::WaitServing(w) => Some((w.url.clone(), w.model.clone())),
            _ => None,
        })
        .unwrap_or_else(|| {
            (
                plan.endpoint.url.trim_end_matches("/v1").to_string(),
                plan.served_name.clone(),
            )
        })
}

/// One stage of a restart, in order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "stage", rename_all = "kebab-case")]
pub enum Stage {
    /// Stop these containers (every rank at once).
    Stop { containers: Vec<String> },
    /// Start these nodes' containers again, all at once.
    Start { nodes: Vec<NodeName> },
    /// A step of the plan, run as at launch (its `--dry-run` line).
    Run { step: String },
}

/// The stages of a restart of `plan`'s group (what `supervise --dry-run` prints).
pub fn stages(plan: &ServePlan) -> Vec<Stage> {
    let job = &plan.job;
    let mut out = vec![Stage::Stop {
        containers: plan
            .nodes
            .iter()
            .map(|n| job.job.container_name(n))
            .collect(),
    }];
    for step in restart_steps(job) {
        out.push(match step {
            Step::Start(s) => Stage::Start {
                nodes: s.nodes.clone(),
            },
            other => Stage::Run {
                step: other.describe(),
            },
        });
    }
    out
}

/// The plan's steps from its first start step on (a plan's closing `stop` step excluded).
fn restart_steps(job: &JobPlan) -> impl Iterator<Item = &Step> {
    job.steps
        .iter()
        .skip_while(|s| !matches!(s, Step::Start(_)))
        .filter(|s| !matches!(s, Step::Stop(_)))
}

/// Why a restart did not bring the group back.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    /// Stopping or starting the ranks failed (every failed node named); `lost`: those of them
    /// that did not answer through their SSH connection (and why), for the machine.
    #[error("{text}")]
    Nodes {
        text: String,
        lost: Vec<(NodeName, String)>,
    },
    #[error("{0}")]
    Step(String),
    /// Memory did not come back after every rank stopped: the ranks were not started again.
    #[error("{0}")]
    Memory(String),
    #[error("interrupted")]
    Interrupted,
}

impl RestartError {
    /// The nodes that did not answer through their SSH connection, with why.
    pub fn lost(&self) -> &[(NodeName, String)] {
        match self {
            RestartError::Nodes { lost, .. } => lost,
            _ => &[],
        }
    }
}

/// Restarts the whole group of `plan` (see the module docs). `key` is the API key the
/// wait-serving step asks with. Between the stop and the start, every node's memory is read
/// and `gate` (the machine's `memory_back`) says whether it came back: start, read again
/// after a while, or leave the job stopped (a leak). Ctrl-C (`cancel`) once the ranks are
/// stopped still starts every rank again (supervising stops, the job does not); only the waits
/// are cut short.
pub async fn restart(
    cluster: &Cluster,
    plan: &ServePlan,
    key: Option<&Secret>,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
    gate: &mut dyn FnMut(&[HostMemory]) -> Gate,
) -> Result<(), RestartError> {
    let job = &plan.job;
    let stop = reporter.step(&format!("Stop every rank of {}", job.job));
    match on_nodes(plan.nodes.clone(), cluster, job, Act::Stop, Every::OrNone).await {
        Ok(()) => stop.ok(),
        Err(e) => {
            stop.fail(&e.to_string());
            return Err(e);
        }
    }
    let back = reporter.step("Wait for memory to come back on every node");
    loop {
        match gate(&super::watch::memory(cluster, &plan.nodes).await) {
            Gate::Start => {
                back.ok();
                break;
            }
            Gate::Wait(d) => tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = cancel.cancelled() => {
                    back.ok();
                    break;
                }
            },
            Gate::Leak(reason) => {
                back.fail("it did not come back: the job is left stopped");
                return Err(RestartError::Memory(reason));
            }
        }
    }
    let mut pending: Vec<Step> = Vec::new();
    for step in restart_steps(job) {
        match step {
            Step::Start(s) => {
                let waited = run_steps(
                    std::mem::take(&mut pending),
                    cluster,
                    plan,
                    key,
                    reporter,
                    cancel,
                )
                .await;
                // Ctrl-C cuts a wait short, never the start: the job is not left stopped.
                if !matches!(waited, Err(RestartError::Interrupted)) {
                    waited?;
                }
                let started =
                    reporter.step(&format!("Start {} again", crate::node::join(&s.nodes)));
                match on_nodes(s.nodes.clone(), cluster, job, Act::Start, Every::OrNone).await {
                    Ok(()) => started.ok(),
                    Err(e) => {
                        started.fail(&e.to_string());
                        return Err(e);
                    }
                }
            }
            other => pending.push(other.clone()),
        }
    }
    run_steps(pending, cluster, plan, key, reporter, cancel).await
}

/// What a restart does to a rank's container.
#[derive(Clone, Copy)]
enum Act {
    Stop,
    Start,
}

/// Stops every rank's container of `plan` (kept, with its configuration): the memory floor's
/// stop, on every node that answers even when one does not (memory is running out: what can
/// be freed is). Every node's failure is named.
pub async fn stop_ranks(cluster: &Cluster, plan: &ServePlan) -> Result<(), RestartError> {
    on_nodes(
        plan.nodes.clone(),
        cluster,
        &plan.job,
        Act::Stop,
        Every::AsCan,
    )
    .await
}

/// Whether an act needs every node to answer first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Every {
    /// Every node is checked first; when one cannot be, nothing is done on any (a restart).
    OrNone,
    /// Done on every node that could be checked (the memory floor's stop).
    AsCan,
}

/// Does `act` to the job's container on every node of `nodes` at once, after checking on
/// every one of them that the container carries the job's label. With [`Every::OrNone`], when
/// a node cannot be checked (its SSH connection is gone and cannot be opened again,
/// `reach::asked`; its container is not the job's), nothing is done on any node, so a restart
/// never leaves part of the group stopped for want of a link; with [`Every::AsCan`], it is
/// done on the others. Every node's failure is named.
async fn on_nodes(
    nodes: Vec<NodeName>,
    cluster: &Cluster,
    job: &JobPlan,
    act: Act,
    every: Every,
) -> Result<(), RestartError> {
    if job.runtime == RuntimeKind::Host {
        return on_processes(nodes, cluster, job, act, every).await;
    }
    let checked = for_each_node(nodes.clone(), 0, |node| async move {
        let name = job.job.container_name(&node);
        let runtime = cluster.node(&node)?;
        let name = name.as_str();
        let labelled = asked(runtime, || async move {
            runtime.engine().await?.inspect(name).await
        })
        .await?
        .and_then(|c| c.config)
        .and_then(|c| c.labels)
        .and_then(|l| l.get(LABEL_JOB).cloned());
        if labelled.as_deref() != Some(job.job.as_str()) {
            return Err(Unanswered::Runtime(RuntimeError::Other(format!(
                "{name} is missing or carries no label of job {}: left alone; start the job again",
                job.job
            ))));
        }
        Ok(())
    })
    .await;
    let ready: Vec<NodeName> = checked
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| n.clone())
        .collect();
    let unchecked: Vec<(NodeName, Result<(), Unanswered>)> =
        checked.into_iter().filter(|(_, r)| r.is_err()).collect();
    if every == Every::OrNone && !unchecked.is_empty() {
        return failures(unchecked);
    }
    let mut results = for_each_node(ready, 0, |node| async move {
        let name = job.job.container_name(&node);
        let runtime = cluster.node(&node)?;
        let name = name.as_str();
        match act {
            Act::Stop => {
                asked(runtime, || async move {
                    runtime.engine().await?.stop(name, STOP_GRACE).await
                })
                .await?;
                Ok(())
            }
            Act::Start => {
                let spec = job
                    .nodes
                    .iter()
                    .find_map(|p| match &p.launch {
                        Launch::Container(c) if c.name == name => Some(c),
                        _ => None,
                    })
                    .ok_or_else(|| {
                        RuntimeError::Other(format!("{name} has no part in the plan"))
                    })?;
                asked(runtime, || async move {
                    runtime.engine().await?.start(spec).await
                })
                .await
            }
        }
    })
    .await;
    results.extend(unchecked);
    failures(results)
}

/// [`on_nodes`] for host processes: each node's process of the job is found by its label
/// (`spark-launch`'s state folder) before anything is done; a stop ends its whole process
/// group and removes its folder, a start runs the plan's process again.
async fn on_processes(
    nodes: Vec<NodeName>,
    cluster: &Cluster,
    job: &JobPlan,
    act: Act,
    every: Every,
) -> Result<(), RestartError> {
    let checked = for_each_node(nodes.clone(), 0, |node| async move {
        let runtime = cluster.node(&node)?;
        if matches!(act, Act::Start) {
            return Ok(());
        }
        let name = job.job.container_name(&node);
        let found = asked(runtime, || async move {
            runtime.jobs(Some(&job.job), Some(RuntimeKind::Host)).await
        })
        .await?;
        if !found.iter().any(|e| e.name == name) {
            return Err(Unanswered::Runtime(RuntimeError::Other(format!(
                "{name} is missing or carries no label of job {}: left alone; start the job again",
                job.job
            ))));
        }
        Ok(())
    })
    .await;
    let ready: Vec<NodeName> = checked
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| n.clone())
        .collect();
    let unchecked: Vec<(NodeName, Result<(), Unanswered>)> =
        checked.into_iter().filter(|(_, r)| r.is_err()).collect();
    if every == Every::OrNone && !unchecked.is_empty() {
        return failures(unchecked);
    }
    let mut results = for_each_node(ready, 0, |node| async move {
        let runtime = cluster.node(&node)?;
        match act {
            Act::Stop => {
                asked(runtime, || async move {
                    runtime
                        .stop_job(&job.job, Some(RuntimeKind::Host), STOP_GRACE)
                        .await
                })
                .await?;
                Ok(())
            }
            Act::Start => {
                let part = job.node(&node).ok_or_else(|| {
                    RuntimeError::Other(format!("{node} has no part in the plan"))
                })?;
                let cancel = CancellationToken::new();
                let cancel = &cancel;
                asked(runtime, || async move { runtime.start(part, cancel).await }).await
            }
        }
    })
    .await;
    results.extend(unchecked);
    failures(results)
}

/// Every node's failure as one error, naming the nodes that did not answer at all.
fn failures(results: Vec<(NodeName, Result<(), Unanswered>)>) -> Result<(), RestartError> {
    let lost: Vec<(NodeName, String)> = results
        .iter()
        .filter_map(|(n, r)| match r {
            Err(e @ Unanswered::Lost { .. }) => Some((n.clone(), e.to_string())),
            _ => None,
        })
        .collect();
    all_ok(results)
        .map(|_| ())
        .map_err(|f| RestartError::Nodes {
            text: f.to_string(),
            lost,
        })
}

/// Runs plan steps through the executor (nothing is removed if one fails: `keep`), the
/// wait-serving step with the real API key.
async fn run_steps(
    steps: Vec<Step>,
    cluster: &Cluster,
    plan: &ServePlan,
    key: Option<&Secret>,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<(), RestartError> {
    if steps.is_empty() {
        return Ok(());
    }
    if cancel.is_cancelled() {
        return Err(RestartError::Interrupted);
    }
    let steps = steps
        .into_iter()
        .map(|s| match s {
            Step::WaitServing(mut w) => {
                w.api_key = key.cloned();
                Step::WaitServing(w)
            }
            other => other,
        })
        .collect();
    let sub = JobPlan {
        steps,
        ..plan.job.clone()
    };
    let options = ApplyOptions {
        keep: true,
        ..ApplyOptions::default()
    };
    match execute(&sub, cluster, &options, reporter.clone(), cancel.clone()).await {
        Ok(_) => Ok(()),
        Err(_) if cancel.is_cancelled() => Err(RestartError::Interrupted),
        Err(e) => Err(RestartError::Step(e.kind.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::NodeInput;
    use crate::model::ModelSource;
    use crate::plan::JobName;
    use crate::workload::engines::{EngineKind, EngineOptions};
    use crate::workload::job_ssh::JobSshKeys;
    use crate::workload::runtime_cache::CONTAINER_DIR;
    use crate::workload::serve::ServeOptions;
    use crate::workload::skeleton::{LaunchPart, ServeInput, plan};

    /// A two-Spark vLLM job's plan (tests/fixtures/seed-001-two-sparks-both-twins), the
    /// nodes' homes resolved as a live launch resolves them.
    fn two_sparks() -> ServePlan {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/seed-001-two-sparks-both-twins");
        let nodes: Vec<NodeInput> = ["spark", "spark2"]
            .iter()
            .map(|n| NodeInput {
                name: NodeName::new(*n).unwrap(),
                facts: crate::probe::read_snapshot_dir(&root.join(n)).unwrap(),
            })
            .collect();
        let model = ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", None).unwrap();
        let mut opts = ServeOptions::new(EngineKind::Vllm, JobName::new("j").unwrap(), model);
        opts.tp = 2;
        for n in &nodes {
            let p = crate::workload::serve::NodePaths {
                runtime_cache: crate::workload::runtime_cache::root_under("/home/sparkuser"),
                ..Default::default()
            };
            opts.paths.insert(n.name.clone(), p);
        }
        let input = ServeInput {
            engine: EngineKind::Vllm,
            opts: &opts,
            tuning: &EngineOptions::default(),
            nodes: &nodes,
            keys: &JobSshKeys::placeholder(),
            launch: Some(LaunchPart::default()),
            recipe: None,
        };
        plan(&input)
            .map(|s| s.plan)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_restart_starts_the_ranks_own_containers_so_each_finds_its_runtime_cache_again() {
        let plan = two_sparks();
        let cache = plan.runtime_cache.clone().unwrap();
        // The folder is made once, before the launch's first start; a restart walks the plan
        // from that start on, so it neither makes nor empties it.
        assert!(
            plan.job
                .steps
                .iter()
                .take_while(|s| !matches!(s, Step::Start(_)))
                .any(|s| matches!(s, Step::EnsureFolders(_)))
        );
        assert!(restart_steps(&plan.job).all(|s| !matches!(s, Step::EnsureFolders(_))));
        // What a restart starts again is each node's container of the plan (`on_nodes`:
        // found by its name, started as it was created): the same mount of the same folder.
        let started: Vec<NodeName> = stages(&plan)
            .into_iter()
            .filter_map(|s| match s {
                Stage::Start { nodes } => Some(nodes),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(started, plan.nodes);
        for n in &plan.job.nodes {
            let Launch::Container(c) = &n.launch else {
                panic!("not a container")
            };
            assert_eq!(c.name, plan.job.job.container_name(&n.node));
            let m = c.mounts.iter().find(|m| m.target == CONTAINER_DIR).unwrap();
            assert_eq!(m.source, cache.folders[&n.node]);
            assert!(
                m.source
                    .starts_with("/home/sparkuser/.cache/spark-launch/runtime/vllm/")
            );
        }
        // The same launch planned again (the same plan) names the same folders.
        assert_eq!(two_sparks().runtime_cache.unwrap(), cache);
    }
}
