//! A node's shell: run a bash script on a node with some stdin, stream its stdout lines, get
//! its exit status and the tail of its stderr. Model staging, readiness polling and preflight
//! checks talk to nodes only through [`NodeShell`], so the same code runs on the local node
//! ([`LocalShell`]) and on remote ones (the SSH layer's multiplexed connection).
//!
//! Effects only; what to run is decided by the caller. A script that is dropped mid-way (Ctrl-C,
//! a timeout) is killed with its whole process group, so no `curl`, `dd` or `ssh` of it is left
//! running.

use std::process::Stdio;

use futures::future::BoxFuture;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::UnboundedSender;

use crate::node::NodeName;

/// How a script ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellOutput {
    /// The exit status; -1 when killed by a signal.
    pub status: i32,
    /// Stdout, unless its lines were streamed to a channel.
    pub stdout: String,
    /// The last lines of stderr.
    pub stderr_tail: String,
}

impl ShellOutput {
    pub fn success(&self) -> bool {
        self.status == 0
    }
}

/// The script could not be run at all (no bash, SSH connection lost, ...).
#[derive(Debug, thiserror::Error)]
#[error("{node}: cannot run a script through {via}: {cause}")]
pub struct ShellError {
    pub node: NodeName,
    pub via: String,
    pub cause: String,
}

/// Runs scripts on one node.
pub trait NodeShell: Send + Sync {
    fn node(&self) -> &NodeName;

    /// How this shell reaches the node, for messages (`local`, `ssh spark-b`).
    fn via(&self) -> String;

    /// Runs `bash -c SCRIPT` with `stdin`. When `lines` is given, every stdout line is sent
    /// there as it arrives (and not kept in [`ShellOutput::stdout`]).
    fn run<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
        lines: Option<UnboundedSender<String>>,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>>;
}

/// The machine spark-launch runs on.
#[derive(Clone, Debug)]
pub struct LocalShell {
    node: NodeName,
    env: Vec<(String, String)>,
}

impl LocalShell {
    pub fn new(node: NodeName) -> Self {
        LocalShell {
            node,
            env: Vec::new(),
        }
    }

    /// Sets a variable for every script (tests give each simulated node its own
    /// `XDG_CACHE_HOME`).
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
}

/// Kills the process group of a child when dropped before it was reaped.
struct GroupGuard {
    pgid: Option<i32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

const STDERR_TAIL_LINES: usize = 20;

/// The last `n` lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

impl NodeShell for LocalShell {
    fn node(&self) -> &NodeName {
        &self.node
    }

    fn via(&self) -> String {
        "the local shell".to_string()
    }

    fn run<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
        lines: Option<UnboundedSender<String>>,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>> {
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(script)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Box::pin(run_streaming(&self.node, self.via(), cmd, stdin, lines))
    }
}

/// A node reached through the SSH layer's handle: the local node runs here, a remote one
/// through its multiplexed connection (`ssh -S master … bash -c SCRIPT`), stdout streamed.
#[derive(Clone, Debug)]
pub struct SshShell {
    handle: std::sync::Arc<crate::ssh::NodeHandle>,
}

impl SshShell {
    pub fn new(handle: std::sync::Arc<crate::ssh::NodeHandle>) -> Self {
        SshShell { handle }
    }
}

impl NodeShell for SshShell {
    fn node(&self) -> &NodeName {
        self.handle.name()
    }

    fn via(&self) -> String {
        match self.handle.dest() {
            Some(d) => format!("ssh {d}"),
            None => "the local shell".to_string(),
        }
    }

    fn run<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
        lines: Option<UnboundedSender<String>>,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>> {
        let node = self.handle.name().clone();
        let via = self.via();
        let cmd = match self.handle.session() {
            None => {
                let mut cmd = tokio::process::Command::new("bash");
                cmd.arg("-c").arg(script);
                Ok(cmd)
            }
            Some(session) => match crate::ssh::quote::join(&["bash", "-c", script]) {
                Ok(line) => {
                    let mut cmd = tokio::process::Command::new(session.program_path());
                    cmd.args(session.client_args())
                        .args(["--", &session.dest().host, &line]);
                    Ok(cmd)
                }
                Err(e) => Err(ShellError {
                    node: node.clone(),
                    via: via.clone(),
                    cause: format!("the script cannot be quoted: {e}"),
                }),
            },
        };
        Box::pin(async move {
            let cmd = cmd?;
            let out = run_streaming(&node, via.clone(), cmd, stdin, lines).await?;
            if out.status == 255 && self.handle.session().is_some() {
                let failure = crate::ssh::ConnectFailure::classify(&out.stderr_tail);
                if failure != crate::ssh::ConnectFailure::Other {
                    return Err(ShellError {
                        node,
                        via,
                        cause: format!("ssh failed ({failure:?}): {}", out.stderr_tail.trim()),
                    });
                }
            }
            Ok(out)
        })
    }
}

/// Runs `cmd` in its own process group with `stdin`, streaming stdout lines to `lines` when
/// given; the group is killed if the future is dropped before the command ends.
async fn run_streaming(
    node: &NodeName,
    via: String,
    mut cmd: tokio::process::Command,
    stdin: Vec<u8>,
    lines: Option<UnboundedSender<String>>,
) -> Result<ShellOutput, ShellError> {
    let err = |cause: String| ShellError {
        node: node.clone(),
        via: via.clone(),
        cause,
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| err(format!("start {:?}: {e}", cmd.as_std().get_program())))?;
    let mut guard = GroupGuard {
        pgid: child.id().map(|p| p as i32),
    };
    let mut child_in = child.stdin.take();
    let writer = async move {
        if let Some(w) = child_in.as_mut() {
            // A script that does not read its stdin closes it early: not an error.
            let _ = w.write_all(&stdin).await;
            let _ = w.shutdown().await;
        }
        drop(child_in);
    };
    let out = child.stdout.take();
    let reader = async move {
        let mut kept = String::new();
        if let Some(out) = out {
            let mut r = BufReader::new(out).lines();
            while let Ok(Some(line)) = r.next_line().await {
                match &lines {
                    Some(tx) => {
                        let _ = tx.send(line);
                    }
                    None => {
                        kept.push_str(&line);
                        kept.push('\n');
                    }
                }
            }
        }
        kept
    };
    let err_pipe = child.stderr.take();
    let err_reader = async move {
        let mut text = String::new();
        if let Some(mut e) = err_pipe {
            let mut buf = Vec::new();
            let _ = e.read_to_end(&mut buf).await;
            text = String::from_utf8_lossy(&buf).into_owned();
        }
        text
    };
    let ((), stdout, stderr) = tokio::join!(writer, reader, err_reader);
    let status = child
        .wait()
        .await
        .map_err(|e| err(format!("wait for the command: {e}")))?;
    guard.pgid = None;
    Ok(ShellOutput {
        status: status.code().unwrap_or(-1),
        stdout,
        stderr_tail: tail_lines(&stderr, STDERR_TAIL_LINES),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell() -> LocalShell {
        LocalShell::new(NodeName::new("local").unwrap())
    }

    #[tokio::test]
    async fn a_script_gets_its_stdin_and_reports_status_and_stderr() {
        let out = shell()
            .run(
                "read x; echo \"got $x\"; echo oops >&2; exit 3",
                b"hi\n".to_vec(),
                None,
            )
            .await
            .unwrap();
        assert_eq!(out.status, 3);
        assert_eq!(out.stdout, "got hi\n");
        assert_eq!(out.stderr_tail, "oops");
    }

    #[tokio::test]
    async fn stdout_lines_stream_to_a_channel_as_they_come() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let out = shell()
            .run("echo a; echo b", Vec::new(), Some(tx))
            .await
            .unwrap();
        assert!(out.stdout.is_empty());
        assert_eq!(rx.recv().await.as_deref(), Some("a"));
        assert_eq!(rx.recv().await.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn a_dropped_script_takes_its_children_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let sh = shell();
        let run = sh.run(&script, Vec::new(), None);
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), run).await;
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "the background sleep {pid} survived");
    }
}
