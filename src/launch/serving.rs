//! After a serving job answers: stay attached to it (the head's log on stderr until Ctrl-C or a
//! container of the job ends), then stop it on every node. The CLI only says when to call it
//! (`-d` returns instead). Effects only; decides nothing.

use std::collections::BTreeSet;
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
    Supervise(#[from] crate::supervise::run::SuperviseError),
    #[error("stopping {job}: {failures}")]
    Stop {
        job: JobName,
        failures: NodeFailures<RuntimeError>,
    },
}

/// Follows the head's log on stderr until `cancel` (Ctrl-C: `Ok`, the CLI exits 130) or a container of the job
/// ends (an error naming it); then stops the job on every node. A failed look at a node is a
/// hiccup, never taken for an ended container: the node's SSH connection is opened again at
/// every check until it answers (said once when lost, once when back), so that the stop still
/// reaches every node.
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
        let runtime = cluster.node(&node)?;
        let grace = Duration::from_secs(10);
        match runtime
            .stop_job(job, Some(RuntimeKind::Docker), grace)
            .await
        {
            Ok(removed) => Ok(removed),
            // The connection dropped while attached and was not back yet: once more, through a
            // new one.
            Err(first) => match runtime.reconnect().await {
                Ok(true) => {
                    runtime
                        .stop_job(job, Some(RuntimeKind::Docker), grace)
                        .await
                }
                Ok(false) => Err(first),
                Err(again) => Err(RuntimeError::Other(format!(
                    "the connection to the node is lost ({again}); its part of {job} may still run: `spark-launch stop {job}` once it answers"
                ))),
            },
        }
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
    let mut log_open = true;
    reporter.warn(
        "attached to the head's log; Ctrl-C stops the job on every node (-d returns instead)",
    );
    let mut check = tokio::time::interval(CHECK);
    let mut lost = BTreeSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            chunk = logs.next(), if log_open => match chunk {
                Some(Ok(bytes)) => {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(&bytes);
                }
                // The log ended (the head's connection dropped, or its container): the checks
                // say which.
                _ => log_open = false,
            },
            _ = check.tick() => {
                // A look that hangs on a dead connection still gives way to Ctrl-C.
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(()),
                    looked = look(cluster, job, nodes, &mut lost, reporter) => looked?,
                }
            }
        }
    }
}

/// One look at every node's container: an error when one ended. A node that does not answer
/// goes into `lost` (said once) and its connection is opened again; it leaves `lost` (said once)
/// when it answers again.
async fn look(
    cluster: &Cluster,
    job: &JobName,
    nodes: &[NodeName],
    lost: &mut BTreeSet<NodeName>,
    reporter: &dyn Reporter,
) -> Result<(), AttachError> {
    for node in nodes {
        let cname = job.container_name(node);
        let runtime = cluster.node(node)?;
        let entries = match runtime.jobs(Some(job), Some(RuntimeKind::Docker)).await {
            Ok(e) => e,
            Err(e) => {
                // The engine client's own words (a hyper error) only at -v.
                tracing::debug!("{node}: no answer ({e})");
                if lost.insert(node.clone()) {
                    reporter.warn(&format!(
                        "{node}: cannot look at {cname}: no answer through the SSH connection; connecting to {node} again until it answers (Ctrl-C still stops the job on every node)"
                    ));
                }
                match runtime.reconnect().await {
                    Ok(true) => tracing::debug!("{node}: the SSH connection is open again"),
                    Ok(false) => {}
                    Err(e) => tracing::debug!("{node}: cannot connect again yet ({e})"),
                }
                continue;
            }
        };
        if lost.remove(node) {
            reporter.warn(&format!("{node}: connected again; watching {cname}"));
        }
        match entries.iter().find(|e| e.name == cname) {
            Some(e) if e.state != "running" => {
                return Err(AttachError::Ended {
                    node: node.clone(),
                    name: cname,
                    state: e.state.clone(),
                    code: e
                        .exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "?".into()),
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
    Ok(())
}
