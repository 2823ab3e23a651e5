//! After a serving job answers: stay attached to it (the head's log on stderr until Ctrl-C or a
//! container of the job ends), then stop it on every node. The CLI only says when to call it
//! (`-d` returns instead). Effects only; decides nothing.

use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::node::{NodeFailures, NodeName, all_ok, for_each_node};
use crate::plan::{JobName, RuntimeKind};
use crate::progress::Reporter;
use crate::runtime::{Cluster, RuntimeError};

/// How often the job's containers are looked at while attached.
const CHECK: Duration = Duration::from_secs(5);

/// How an attached job ended.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// A container of the job stopped by itself (observed, not guessed from a failed query).
    #[error("{node}: {name} is {state} (exit code {code}); stopping the job")]
    Ended {
        node: NodeName,
        name: String,
        state: String,
        code: String,
    },
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
    /// `--supervise`: the supervisor gave up (the job is left as it is).
    #[error(transparent)]
    Supervise(#[from] super::supervise::SuperviseError),
    #[error("stopping {job}: {failures}")]
    Stop {
        job: JobName,
        failures: NodeFailures<RuntimeError>,
    },
}

/// Follows the head's log on stderr until `cancel` (Ctrl-C: success) or a container of the job
/// ends (an error naming it); then stops the job on every node. A failed look at a node is a
/// hiccup: it is retried at the next check and never taken for an ended container.
pub async fn attach_then_stop(
    cluster: &Cluster,
    job: &JobName,
    nodes: &[NodeName],
    cancel: &CancellationToken,
    reporter: &dyn Reporter,
) -> Result<(), AttachError> {
    let followed = follow(cluster, job, nodes, cancel, reporter).await;
    let step = reporter.step(&format!("Stop {job}"));
    let results = for_each_node(nodes.to_vec(), 0, |node| async move {
        cluster
            .node(&node)?
            .stop_job(job, Some(RuntimeKind::Docker), Duration::from_secs(10))
            .await
    })
    .await;
    match all_ok(results) {
        Ok(_) => step.ok(),
        Err(failures) => {
            step.fail("");
            return Err(AttachError::Stop {
                job: job.clone(),
                failures,
            });
        }
    }
    followed
}

async fn follow(
    cluster: &Cluster,
    job: &JobName,
    nodes: &[NodeName],
    cancel: &CancellationToken,
    reporter: &dyn Reporter,
) -> Result<(), AttachError> {
    let Some(head) = nodes.first() else {
        return Ok(());
    };
    let name = job.container_name(head);
    let mut logs = cluster
        .node(head)?
        .logs(RuntimeKind::Docker, &name, true, false)
        .await?;
    reporter.warn(
        "attached to the head's log; Ctrl-C stops the job on every node (-d returns instead)",
    );
    let mut check = tokio::time::interval(CHECK);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            chunk = logs.next() => match chunk {
                Some(Ok(bytes)) => {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(&bytes);
                }
                _ => tokio::time::sleep(Duration::from_secs(1)).await,
            },
            _ = check.tick() => {
                for node in nodes {
                    let cname = job.container_name(node);
                    let entries = match cluster.node(node)?.jobs(Some(job), Some(RuntimeKind::Docker)).await {
                        Ok(e) => e,
                        Err(e) => {
                            reporter.node_line(node, &format!("cannot look at {cname} ({e}); trying again"));
                            continue;
                        }
                    };
                    match entries.iter().find(|e| e.name == cname) {
                        Some(e) if e.state != "running" => {
                            return Err(AttachError::Ended {
                                node: node.clone(),
                                name: cname,
                                state: e.state.clone(),
                                code: e.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
                            });
                        }
                        Some(_) => {}
                        None => {
                            return Err(AttachError::Ended {
                                node: node.clone(),
                                name: cname,
                                state: "gone".into(),
                                code: "?".into(),
                            });
                        }
                    }
                }
            }
        }
    }
}
