//! Probe: turn a machine into plain data (`NodeFacts`).
//!
//! A snapshot is a folder that mirrors the live paths (`sys/class/net/...`,
//! `sys/class/infiniband/...`, `ip-addr.json`, ...). The live machine is probed by running the
//! emitter script (`emit::SCRIPT`) and parsing its stream; a remote node runs the same script
//! over SSH. Either way the same reader (`read::read_facts`) turns the tree into facts, so a
//! snapshot a user attaches to a bug report is read exactly as their machine was.

pub mod emit;
pub mod facts;
pub mod link_emit;
pub mod links;
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
    #[error(
        "{0} is not a folder: a snapshot is the folder `spark-launch probe --capture DIR` writes"
    )]
    NotAFolder(String),
    #[error("snapshot {path}: refusing to read {}", .refused.join("; "))]
    Refused { path: String, refused: Vec<String> },
    #[error("snapshot {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: ReadError,
    },
    #[error(transparent)]
    Live(#[from] live::LiveError),
}

/// Reads the facts of a snapshot folder. A file the folder holds that is not safe to read (a
/// FIFO, a device, a huge file, a symlink out of the folder) refuses the whole snapshot,
/// naming the file: its facts would otherwise be reported as if they were not there.
pub fn read_snapshot_dir(dir: &Path) -> Result<NodeFacts, ProbeError> {
    let shown = crate::text::printable(&dir.display().to_string()).into_owned();
    if !dir.exists() {
        return Err(ProbeError::NoSuchSnapshot(shown));
    }
    if !dir.is_dir() {
        return Err(ProbeError::NotAFolder(shown));
    }
    let tree = DirTree::new(dir);
    let facts = read_facts(&tree);
    let refused = tree.refusals();
    if !refused.is_empty() {
        return Err(ProbeError::Refused {
            path: shown,
            refused,
        });
    }
    facts.map_err(|source| ProbeError::Read {
        path: shown,
        source,
    })
}
