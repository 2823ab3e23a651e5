//! The runtime's errors. Each one says what was being done and what to do about it; the node is
//! added by whoever fans out (`NodeFailures` prints `node: error`), so messages here start with
//! the operation: `start container sl-job-n2: ...`.

use std::time::Duration;

use super::features::{ApiVersion, MIN_API, NoGpuSupport};
use crate::problem::Problem;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "Docker is not reachable: no socket at {socket}; fix: install Docker Engine and start it (`sudo systemctl start docker`), or point spark-launch at the right socket with `--engine NODE=unix:///path`"
    )]
    DockerMissing { socket: String },

    #[error(
        "permission denied on {socket}; fix: add your user to the docker group (`sudo usermod -aG docker $USER`, then log out and in again)"
    )]
    SocketPermission { socket: String },

    #[error(
        "{socket} refuses connections: dockerd is not running; fix: `sudo systemctl start docker`"
    )]
    DockerNotRunning { socket: String },

    #[error("cannot reach the Docker Engine at {socket}: {cause}")]
    Unreachable { socket: String, cause: String },

    #[error(
        "Docker Engine {server} speaks API {found}, spark-launch needs {MIN_API} or newer (Docker 19.03+); fix: upgrade Docker Engine"
    )]
    ApiTooOld { found: ApiVersion, server: String },

    #[error("{0}")]
    NoGpu(#[from] NoGpuSupport),

    #[error(
        "image {image} is not on this node; fix: `spark-launch image push {image} --to {node}`"
    )]
    ImageMissing { image: String, node: String },

    /// The problem names the limits asked for and the engine's words; the fix is for the limit
    /// the engine named ([`ulimit_fix`]).
    #[error("start container {container}: {}; fix: {}", problem.what, problem.fix)]
    UlimitRefused { container: String, problem: Problem },

    #[error("{op}: {cause}")]
    Api { op: String, cause: String },

    #[error("{what}: no answer within {}s (last seen: {last})", .after.as_secs())]
    Timeout {
        what: String,
        after: Duration,
        last: String,
    },

    #[error("{what}: interrupted")]
    Cancelled { what: String },

    /// A command on the node failed: the shell-quoted command, its exit status and the tail of
    /// its stderr.
    #[error("`{command}` exited with {status}{}", tail(.stderr))]
    Command {
        command: String,
        status: String,
        stderr: String,
    },

    #[error("{0}")]
    Quote(#[from] crate::quote::NulByte),

    #[error("{0}")]
    Other(String),
}

fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    if lines.is_empty() {
        return String::new();
    }
    let start = lines.len().saturating_sub(5);
    format!(": {}", lines[start..].join(" | "))
}

impl RuntimeError {
    /// Wraps an engine API error with the operation it failed in.
    pub fn api(op: impl Into<String>, e: bollard::errors::Error) -> Self {
        RuntimeError::Api {
            op: op.into(),
            cause: describe_bollard(&e),
        }
    }
}

/// The engine's own message when it sent one (`No such image: x`), otherwise the transport
/// error.
pub fn describe_bollard(e: &bollard::errors::Error) -> String {
    use bollard::errors::Error as B;
    match e {
        B::DockerResponseServerError {
            status_code,
            message,
        } => format!("{} (HTTP {status_code})", message.trim()),
        B::DockerStreamError { error } => error.trim().to_string(),
        B::RequestTimeoutError => "the engine did not answer in time".to_string(),
        other => other.to_string(),
    }
}

/// The HTTP status of an engine error, when the engine answered.
pub fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_shows_the_command_its_status_and_the_end_of_stderr() {
        let e = RuntimeError::Command {
            command: "kill -TERM -- -42".into(),
            status: "exit status 1".into(),
            stderr: "a\nb\nc\nd\ne\nf\nkill: (42) - No such process\n".into(),
        };
        insta::assert_snapshot!(e.to_string(), @"`kill -TERM -- -42` exited with exit status 1: c | d | e | f | kill: (42) - No such process");
    }

    #[test]
    fn reaching_errors_say_what_to_do() {
        let e = RuntimeError::SocketPermission {
            socket: "/var/run/docker.sock".into(),
        };
        assert!(e.to_string().contains("usermod -aG docker"));
        let e = RuntimeError::ApiTooOld {
            found: ApiVersion {
                major: 1,
                minor: 39,
            },
            server: "18.09".into(),
        };
        assert!(e.to_string().contains("needs 1.40 or newer"), "{e}");
    }
}

/// The fix for a refused ulimit, for the limit runc names (`error setting rlimit type 7`):
/// `nofile` is lowered with `--ulimit nofile=...`, never by touching `memlock`; `memlock` keeps
/// its warning that RDMA needs it unlimited.
pub fn ulimit_fix(cause: &str) -> String {
    // Linux's RLIMIT_* numbers as runc prints them.
    let which = cause
        .split("rlimit type ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u32>().ok());
    const CAP: &str =
        "run dockerd with CAP_SYS_RESOURCE (not inside a restricted container or LXC)";
    match which {
        Some(7) => format!(
            "{CAP}, or lower the open-files limit to what dockerd itself may grant with `--ulimit nofile=SOFT:HARD` (see `grep 'open files' /proc/$(pidof dockerd)/limits`), or raise dockerd's LimitNOFILE"
        ),
        Some(8) => format!(
            "{CAP}, or lower it with `--ulimit memlock=BYTES` (NCCL over RDMA may then fail to register memory and fall back to TCP)"
        ),
        Some(3) => format!("{CAP}, or lower the stack size with `--ulimit stack=BYTES`"),
        _ => format!(
            "{CAP}, or lower the limit the engine refused with `--ulimit NAME=SOFT:HARD` (memlock must stay unlimited for RDMA)"
        ),
    }
}

#[cfg(test)]
mod ulimit_tests {
    use super::*;

    #[test]
    fn a_nofile_ulimit_failure_suggests_lowering_nofile_not_memlock() {
        // Seen once: a refused nofile suggested lowering memlock.
        let fix = ulimit_fix(
            "failed to create task: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted",
        );
        assert!(fix.contains("--ulimit nofile="), "{fix}");
        assert!(!fix.contains("memlock"), "{fix}");
        let fix = ulimit_fix("error setting rlimit type 8: operation not permitted");
        assert!(fix.contains("--ulimit memlock=BYTES"), "{fix}");
    }
}
