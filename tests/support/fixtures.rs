//! Snapshot fixtures (`tests/fixtures/`) copied into a temporary folder and changed, for tests
//! of snapshots the bundled ones do not cover (an older capture, a node without RDMA devices).

use std::path::Path;
use std::process::Command;

/// The fixture's snapshots copied into a temporary folder, each changed by `edit` (node
/// folder), and the `--snapshot` arguments for them.
pub fn edited(name: &str, edit: impl Fn(&Path)) -> (tempfile::TempDir, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(&root)
        .arg(tmp.path().join("c"))
        .status()
        .unwrap();
    assert!(status.success());
    let nodes = std::fs::read_to_string(root.join("nodes")).unwrap();
    let mut args = Vec::new();
    for n in nodes.lines().filter(|l| !l.is_empty()) {
        let dir = tmp.path().join("c").join(n);
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
