//! The bundled fixtures (`tests/fixtures/`): where one is, a cluster fixture's nodes (head
//! first, from its `nodes` file) as `--snapshot NODE=DIR` arguments or as the library reads
//! them, and copies changed for the snapshots the bundled ones do not cover (an older capture,
//! a node without RDMA devices).

use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::derive::NodeInput;
use spark_launch::node::NodeName;
use spark_launch::probe::read_snapshot_dir;

/// `tests/fixtures/NAME`: a cluster's snapshots, or a file or folder of logs
/// (`nccl-tests/...`, `bench/...`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The node names of the cluster fixture `name`, head first.
pub fn node_names(name: &str) -> Vec<String> {
    std::fs::read_to_string(fixture(name).join("nodes"))
        .expect("fixture has a nodes file")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// `--snapshot NODE=DIR` for every node of the cluster fixture `name`, head first.
pub fn snapshot_args(name: &str) -> Vec<String> {
    let root = fixture(name);
    node_names(name)
        .into_iter()
        .flat_map(|n| {
            let dir = root.join(&n);
            ["--snapshot".to_string(), format!("{n}={}", dir.display())]
        })
        .collect()
}

/// The nodes of the cluster fixture `name`, head first, through the real snapshot reader.
pub fn fixture_nodes(name: &str) -> Vec<NodeInput> {
    let root = fixture(name);
    node_names(name)
        .into_iter()
        .map(|n| NodeInput {
            facts: read_snapshot_dir(&root.join(&n)).expect("readable snapshot"),
            name: NodeName::new(n).expect("valid node name"),
        })
        .collect()
}

/// The fixture's snapshots copied into a temporary folder, each changed by `edit` (node
/// folder), and the `--snapshot` arguments for them.
pub fn edited(name: &str, edit: impl Fn(&Path)) -> (tempfile::TempDir, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(fixture(name))
        .arg(tmp.path().join("c"))
        .status()
        .unwrap();
    assert!(status.success());
    let mut args = Vec::new();
    for n in node_names(name) {
        let dir = tmp.path().join("c").join(&n);
        edit(&dir);
        args.push("--snapshot".to_string());
        args.push(format!("{n}={}", dir.display()));
    }
    (tmp, args)
}

/// What a capture of an older version (or a hand-made snapshot) lacks: `dev/`, the driver's
/// module folder, and the list of what was looked at.
pub fn older_capture(node: &Path) {
    let _ = std::fs::remove_dir_all(node.join("dev"));
    let _ = std::fs::remove_dir_all(node.join("sys/module/nvidia"));
    let _ = std::fs::remove_file(node.join("recorded"));
}
