//! The remote probe: run the snapshot emitter (`probe::emit::SCRIPT`) on a node through its
//! link and read the stream with the same reader as `probe --root`, so a live node, a remote
//! node and a saved snapshot give facts the same way. The local node runs the emitter here.

use crate::node::NodeName;
use crate::node::for_each_node;
use crate::probe::emit::SCRIPT;
use crate::probe::live::LiveError;
use crate::probe::tree::StreamError;
use crate::probe::{MemTree, NodeFacts, ReadError, read_facts};

use super::error::SshError;
use super::handle::NodeHandle;
use super::pool::Pool;

/// Probing one node failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeNodeError {
    #[error(transparent)]
    Ssh(#[from] SshError),
    #[error(
        "{node}: the probe printed something unexpected (is `sh` a POSIX shell there?): {source}"
    )]
    Stream {
        node: NodeName,
        #[source]
        source: StreamError,
    },
    #[error("{node}: {source}")]
    Read {
        node: NodeName,
        #[source]
        source: ReadError,
    },
    #[error("{node}: {source}")]
    Local {
        node: NodeName,
        #[source]
        source: LiveError,
    },
}

/// The snapshot stream of one node, parsed.
pub async fn snapshot(handle: &NodeHandle) -> Result<MemTree, ProbeNodeError> {
    let node = handle.name().clone();
    if handle.is_local() {
        let r = tokio::task::spawn_blocking(crate::probe::live::snapshot_local).await;
        return match r {
            Ok(Ok(tree)) => Ok(tree),
            Ok(Err(source)) => Err(ProbeNodeError::Local { node, source }),
            Err(join) => Err(ProbeNodeError::Local {
                node,
                source: LiveError::Spawn(std::io::Error::other(join.to_string())),
            }),
        };
    }
    let out = handle.run(&["sh", "-c", SCRIPT]).await?;
    MemTree::parse(&out.stdout_text()).map_err(|source| ProbeNodeError::Stream { node, source })
}

/// Probes one node into facts.
pub async fn probe(handle: &NodeHandle) -> Result<NodeFacts, ProbeNodeError> {
    let tree = snapshot(handle).await?;
    read_facts(&tree).map_err(|source| ProbeNodeError::Read {
        node: handle.name().clone(),
        source,
    })
}

/// Probes every node of the pool in parallel; results in pool order (head first).
pub async fn probe_all(pool: &Pool) -> Vec<(NodeName, Result<NodeFacts, ProbeNodeError>)> {
    for_each_node(pool.names(), pool.limit, |name| async move {
        let handle = pool.get(&name)?;
        probe(handle).await
    })
    .await
}
