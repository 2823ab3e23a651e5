//! Probe: turn a machine into plain data (`NodeFacts`).
//!
//! A snapshot is a folder that mirrors the live paths (`sys/class/net/...`,
//! `sys/class/infiniband/...`, `ip-addr.json`, ...). The live machine is probed by running the
//! emitter script (`emit::SCRIPT`) and parsing its stream; a remote node runs the same script
//! over SSH. Either way the same reader (`read::read_facts`) turns the tree into facts, so a
//! snapshot a user attaches to a bug report is read exactly as their machine was.
//!
//! What the node's own processes load for NCCL (`--runtime host`) cannot be streamed by a
//! shell script: spark-launch reads it from the node's files after the emitter (`nccl`,
//! `host_nccl`) and adds it to the stream as `host-nccl.json`.

pub mod emit;
pub mod facts;
pub mod host_nccl;
pub mod link_emit;
pub mod links;
pub mod live;
pub mod nccl;
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
    /// Said once: the reader's reason is part of this text, not a cause printed again.
    #[error("snapshot {path}: {problem}")]
    Read { path: String, problem: ReadError },
    #[error(
        "{path} is a folder of snapshots, not one: it holds {}; give each as its own --snapshot NAME=DIR ({})",
        .nodes.join(", "),
        .nodes.iter().map(|n| format!("--snapshot {n}={path}/{n}")).collect::<Vec<_>>().join(" ")
    )]
    FolderOfSnapshots { path: String, nodes: Vec<String> },
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
    if !dir.join("hostname").exists() {
        let nodes = snapshots_inside(dir);
        if !nodes.is_empty() {
            return Err(ProbeError::FolderOfSnapshots { path: shown, nodes });
        }
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
    facts.map_err(|problem| ProbeError::Read {
        path: shown,
        problem,
    })
}

/// The folders directly inside `dir` that are snapshots (they hold a `hostname` file), sorted:
/// what a user who named the folder of a whole cluster's snapshots meant.
fn snapshots_inside(dir: &Path) -> Vec<String> {
    let mut nodes: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("hostname").is_file())
                .map(|e| crate::text::printable(&e.file_name().to_string_lossy()).into_owned())
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    nodes
}
