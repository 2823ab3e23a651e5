//! The repository's stand-in scripts (`tests/standin/`) as tests call them: the real NCCL
//! libraries fetched once from PyPI, and the image builders.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `.whl/nccl`, fetched (or found cached) by `tests/standin/fetch-nccl-wheels`: one folder per
/// wheel (`nvidia-nccl-cu12-2.28.9/libnccl.so.2`, …). Fails when it cannot be had.
pub fn nccl_wheels() -> PathBuf {
    let out = Command::new(repo().join("tests/standin/fetch-nccl-wheels"))
        .output()
        .expect("run tests/standin/fetch-nccl-wheels");
    assert!(
        out.status.success(),
        "the real NCCL libraries are needed (PyPI, or the .whl/nccl cache): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs a bash script of the repository (`tests/standin/build-image`, …); fails the test with
/// its output when it fails.
pub fn run_script(script: &str, args: &[&str]) {
    let out = Command::new("bash")
        .arg(repo().join(script))
        .args(args)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{script} {args:?}: {}",
        super::describe(&out)
    );
}
