//! spark-launch's state folder on this machine: `$SPARK_LAUNCH_STATE_DIR`, else
//! `$XDG_STATE_HOME/spark-launch`, else `~/.local/state/spark-launch` (where the host runtime
//! keeps its jobs too). Benchmark results go to `bench/` inside it and a job's records to
//! `records/<JOB>/` (`crate::records`). A leaf: it names the folder, and writes nothing.

use std::path::PathBuf;

/// spark-launch's state folder.
pub fn state_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("SPARK_LAUNCH_STATE_DIR")
        .or_else(|| env("XDG_STATE_HOME").map(|d| d.join("spark-launch")))
        .or_else(|| env("HOME").map(|h| h.join(".local/state/spark-launch")))
        .unwrap_or_else(|| PathBuf::from(".spark-launch-state"))
}
