//! What the processes of running `--runtime host` jobs have loaded for NCCL, for `status`:
//! observed in the processes themselves (`runtime::host::mapped_nccl`: the `libnccl` files in
//! the `/proc/PID/maps` of every process of the job's session), each file's build string read
//! on its node (`runtime::libnccl::read_host_lib`). A container's is read by `apply::nccl`.
//! Effects only; the text is `libnccl::host::ProcessNccl`'s.

use std::collections::BTreeMap;

use crate::libnccl::host::{Mapped, ProcessNccl};
use crate::node::{NodeName, for_each_node};
use crate::plan::RuntimeKind;
use crate::runtime::{Cluster, JobEntry, RuntimeError, host, libnccl};

/// The answer for each of `entries`: `None` for containers and for host processes that are
/// not running.
pub async fn in_processes(
    cluster: &Cluster,
    entries: &[JobEntry],
    concurrency: usize,
) -> Vec<Option<ProcessNccl>> {
    let running = |e: &&JobEntry| e.runtime == RuntimeKind::Host && e.state == "running";
    let mut nodes: Vec<NodeName> = entries
        .iter()
        .filter(running)
        .map(|e| e.node.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    let read = for_each_node(nodes, concurrency, |node| async move {
        let shell = cluster.node(&node)?.target.shell()?;
        let mut out = BTreeMap::new();
        for e in entries.iter().filter(running).filter(|e| e.node == node) {
            let found = match host::mapped_nccl(shell.as_ref(), &e.name).await {
                Ok(None) => continue,
                Ok(Some(libs)) if libs.is_empty() => ProcessNccl::NoneMapped,
                Ok(Some(libs)) => {
                    let mut read = Vec::new();
                    for (pid, path) in libs {
                        let (version, error) =
                            match libnccl::read_host_lib(shell.as_ref(), &path).await {
                                Ok((_, v)) => (v, None),
                                Err(err) => (None, Some(err.to_string())),
                            };
                        read.push(Mapped {
                            pid,
                            path,
                            version,
                            error,
                        });
                    }
                    ProcessNccl::Mapped { libs: read }
                }
                Err(err) => ProcessNccl::Failed {
                    error: err.to_string(),
                },
            };
            out.insert(e.name.clone(), found);
        }
        Ok::<_, RuntimeError>(out)
    })
    .await;
    let mut by_name: BTreeMap<(NodeName, String), ProcessNccl> = BTreeMap::new();
    for (node, r) in read {
        if let Ok(m) = r {
            for (name, p) in m {
                by_name.insert((node.clone(), name), p);
            }
        }
    }
    entries
        .iter()
        .map(|e| by_name.remove(&(e.node.clone(), e.name.clone())))
        .collect()
}
