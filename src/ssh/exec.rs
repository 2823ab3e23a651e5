//! What running a command on a node gives back (`Output`), the per-command options
//! (`RunOptions`), and the one helper that runs a child process with stdin, a deadline and
//! captured output. Shared by local and remote nodes so both behave the same.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::node::NodeName;

use super::error::SshError;

/// A finished command: its exit status and what it printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The exit status; a command killed by a signal reports 128 + the signal number.
    pub code: i32,
    /// The signal that killed the command (here; a remote command killed by a signal shows as
    /// its shell's exit status instead).
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == 0
    }

    /// stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Per-command options.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Bytes written to the command's stdin (then closed). `None`: stdin is empty.
    pub stdin: Option<Vec<u8>>,
    /// Give up (and kill the command) after this long. `None`: wait as long as it runs.
    pub timeout: Option<Duration>,
}

impl RunOptions {
    pub fn stdin(bytes: impl Into<Vec<u8>>) -> Self {
        RunOptions {
            stdin: Some(bytes.into()),
            timeout: None,
        }
    }

    pub fn timeout(after: Duration) -> Self {
        RunOptions {
            stdin: None,
            timeout: Some(after),
        }
    }
}

/// Runs `cmd` to completion with `opts`; `shown` is the command as the user should read it.
pub(crate) async fn run_child(
    node: &NodeName,
    mut cmd: Command,
    shown: &str,
    opts: &RunOptions,
) -> Result<Output, SshError> {
    cmd.stdin(if opts.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    // Its own process group: a terminal's Ctrl-C reaches spark-launch, which then cleans up
    // through these very connections, and not ssh itself.
    .process_group(0)
    .kill_on_drop(true);
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|source| SshError::Spawn {
        node: node.clone(),
        program,
        source,
    })?;
    if let (Some(bytes), Some(mut stdin)) = (opts.stdin.clone(), child.stdin.take()) {
        // Feed stdin concurrently so a command that prints before reading cannot deadlock.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        });
    }
    let wait = child.wait_with_output();
    let out = match opts.timeout {
        Some(after) => match tokio::time::timeout(after, wait).await {
            Ok(r) => r,
            Err(_) => {
                return Err(SshError::Timeout {
                    node: node.clone(),
                    command: shown.to_string(),
                    after,
                });
            }
        },
        None => wait.await,
    }
    .map_err(|source| SshError::Io {
        node: node.clone(),
        what: format!("wait for `{shown}`"),
        source,
    })?;
    Ok(Output {
        code: exit_code(&out.status),
        signal: {
            use std::os::unix::process::ExitStatusExt;
            out.status.signal()
        },
        stdout: out.stdout,
        stderr: out.stderr,
    })
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
