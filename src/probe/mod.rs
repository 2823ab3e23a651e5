//! Probe: turn a machine into plain data (`NodeFacts`).
//!
//! A snapshot is a folder that mirrors the live paths (`sys/class/net/...`,
//! `sys/class/infiniband/...`, `ip-addr.json`, ...). The live machine is probed by running the
//! emitter script (`emit::SCRIPT`) and parsing its stream; a remote node runs the same script
//! over SSH. Either way the same reader (`read::read_facts`) turns the tree into facts, so a
//! snapshot a user attaches to a bug report is read exactly as their machine was.

pub mod emit;
pub mod facts;
pub mod live;
pub mod read;
#[cfg(test)]
pub(crate) mod testkit;
pub mod tree;

pub use facts::NodeFacts;
pub use read::{ReadError, read_facts};
pub use tree::{DirTree, MemTree, Tree};

use std::path::Path;

/// Why a node could not be probed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("snapshot folder {0} does not exist")]
    NoSuchSnapshot(String),
    #[error("snapshot {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: ReadError,
    },
    #[error(transparent)]
    Live(#[from] live::LiveError),
}

/// Reads the facts of a snapshot folder.
pub fn read_snapshot_dir(dir: &Path) -> Result<NodeFacts, ProbeError> {
    if !dir.is_dir() {
        return Err(ProbeError::NoSuchSnapshot(dir.display().to_string()));
    }
    read_facts(&DirTree::new(dir)).map_err(|source| ProbeError::Read {
        path: dir.display().to_string(),
        source,
    })
}
