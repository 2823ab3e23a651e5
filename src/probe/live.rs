//! Probing the machine this runs on: run the emitter script with `sh` and parse its stream.
//! The only part of `probe` that touches the world.

use std::process::Command;

use super::emit::SCRIPT;
use super::tree::{MemTree, StreamError};

/// Running the emitter locally failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("could not run `sh` to probe this machine: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("the probe script failed on this machine (exit {code}): {stderr}")]
    Failed { code: i32, stderr: String },
    #[error("the probe script printed something unexpected: {0}")]
    Stream(#[from] StreamError),
}

/// Runs the emitter on this machine and returns its snapshot stream, unparsed.
pub fn emit_local() -> Result<String, LiveError> {
    run_local(SCRIPT)
}

/// Probes this machine for a capture: the emitter followed by the link probe (which pings on
/// every fabric port with carrier; as root it also raises ports that are down and reads
/// `/etc/netplan`), so the snapshot records the link map this machine can see.
pub fn capture_local() -> Result<MemTree, LiveError> {
    let script = format!("{SCRIPT}\n{}", super::link_emit::SCRIPT);
    Ok(MemTree::parse(&run_local(&script)?)?)
}

fn run_local(script: &str) -> Result<String, LiveError> {
    use std::os::unix::process::CommandExt;
    // Its own process group: a terminal's Ctrl-C reaches spark-launch (which then stops
    // cleanly), not the probe half-way.
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env_remove("SL_ROOT")
        .process_group(0)
        .output()
        .map_err(LiveError::Spawn)?;
    if !out.status.success() {
        return Err(LiveError::Failed {
            code: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Probes this machine into an in-memory snapshot.
pub fn snapshot_local() -> Result<MemTree, LiveError> {
    Ok(MemTree::parse(&emit_local()?)?)
}
