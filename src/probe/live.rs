//! Probing the machine this runs on: run the emitter script with `sh` and parse its stream,
//! then add what this machine's own processes load for NCCL (`host-nccl.json`, read by
//! `probe::host_nccl` from its files). The only part of `probe` that touches the world.

use std::process::Command;

use super::emit::SCRIPT;
use super::tree::{MemTree, StreamError, Tree};

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
    Ok(with_host_nccl(MemTree::parse(&run_local(&script)?)?))
}

/// `tree` with what this machine's own processes load for NCCL (`host-nccl.json`), read with
/// this process's variables: what a host process started here gets.
fn with_host_nccl(mut tree: MemTree) -> MemTree {
    let arch = tree.read("arch").line();
    let read = super::host_nccl::read_this_machine(arch.as_deref());
    add_host_nccl(&mut tree, &read);
    tree
}

/// Adds a read of the node's own NCCL to its snapshot stream.
pub fn add_host_nccl(tree: &mut MemTree, read: &crate::libnccl::host::HostNccl) {
    if let Ok(json) = serde_json::to_string_pretty(read) {
        tree.insert_file(crate::libnccl::host::SNAPSHOT_FILE, json);
    }
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
    Ok(with_host_nccl(MemTree::parse(&emit_local()?)?))
}
