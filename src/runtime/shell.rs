//! The one way to run a script on a node: the [`NodeShell`] trait (`bash -c SCRIPT` with some
//! stdin; stdout kept or streamed line by line; the exit status and stderr) and its one output
//! type, [`ShellOutput`]. This machine runs scripts through [`LocalShell`]; a remote node
//! through the SSH layer (`runtime::remote::SshNode`); a test may stand in a shell of its own.
//! Model staging, readiness polls, preflight checks, doctor's gather script and the host-process
//! runtime all go through it, so the same code runs on local and remote nodes.
//!
//! Effects only; what to run is decided by the caller. A script that is dropped mid-way (Ctrl-C,
//! a timeout) is killed with its whole process group, so no `curl`, `dd` or `ssh` of it is left
//! running.

use std::fmt;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::UnboundedSender;

use super::error::RuntimeError;
use crate::node::NodeName;

/// How a script ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellOutput {
    /// The exit status; -1 when killed by a signal.
    pub status: i32,
    /// Stdout, unless its lines were streamed to a channel.
    pub stdout: String,
    /// Everything the script wrote on stderr.
    pub stderr: String,
}

/// Lines of stderr a failure message quotes.
pub const STDERR_TAIL_LINES: usize = 20;

impl ShellOutput {
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// The last lines of stderr, for messages.
    pub fn stderr_tail(&self) -> String {
        tail_lines(&self.stderr, STDERR_TAIL_LINES)
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

impl From<ShellError> for RuntimeError {
    fn from(e: ShellError) -> Self {
        RuntimeError::Other(e.to_string())
    }
}

/// Runs scripts on one node.
pub trait NodeShell: Send + Sync + fmt::Debug {
    fn node(&self) -> &NodeName;

    /// How this shell reaches the node, for messages (`the local shell`, `ssh user@host`).
    fn via(&self) -> String;

    /// Runs `bash -c SCRIPT` on the node with `stdin`. When `lines` is given, every stdout line
    /// is sent there as it arrives (and not kept in [`ShellOutput::stdout`]). A script that
    /// exits non-zero is `Ok` (look at `status`); failing to run it at all is an error.
    fn run<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
        lines: Option<UnboundedSender<String>>,
    ) -> BoxFuture<'a, Result<ShellOutput, ShellError>>;

    /// Runs `bash -c SCRIPT` and streams its stdout until it exits (`logs -f`).
    fn stream(&self, script: &str) -> BoxStream<'static, Result<Bytes, ShellError>>;
}

/// Runs `script` on `shell` within `timeout`: a script that overruns is a timeout error naming
/// its first line.
pub async fn run_within(
    shell: &dyn NodeShell,
    script: &str,
    stdin: Vec<u8>,
    timeout: Duration,
) -> Result<ShellOutput, RuntimeError> {
    match tokio::time::timeout(timeout, shell.run(script, stdin, None)).await {
        Ok(r) => r.map_err(RuntimeError::from),
        Err(_) => Err(RuntimeError::Timeout {
            what: format!("`{}` on {}", first_line(script), shell.node()),
            after: timeout,
            last: "no exit".to_string(),
        }),
    }
}

fn first_line(script: &str) -> String {
    let line = script.trim().lines().next().unwrap_or("");
    line.chars().take(60).collect()
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
    /// `XDG_CACHE_HOME` or state folder).
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    fn command(&self, script: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(script)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd
    }
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
        // The same refusal as a remote node's (its `bash -c SCRIPT` is quoted for ssh): a
        // script holding a NUL byte is named, never cut short by the C string it becomes.
        if script.contains('\0')
            && let Err(e) = crate::quote::quote(script, crate::quote::Style::Minimal)
        {
            let cause = e.to_string();
            return Box::pin(async move {
                Err(ShellError {
                    node: self.node.clone(),
                    via: self.via(),
                    cause,
                })
            });
        }
        let cmd = self.command(script);
        Box::pin(run_command(&self.node, self.via(), cmd, stdin, lines))
    }

    fn stream(&self, script: &str) -> BoxStream<'static, Result<Bytes, ShellError>> {
        stream_command(self.node.clone(), self.via(), self.command(script))
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

/// The last `n` lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// Runs `cmd` (a local `bash`, or the `ssh` client of a remote node) in its own process group
/// with `stdin`, streaming stdout lines to `lines` when given; the group is killed if the
/// future is dropped before the command ends. Its own process group also means a Ctrl-C in the
/// terminal reaches spark-launch, which then cleans up, and not the half-done scripts it runs.
pub async fn run_command(
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
        let mut buf = Vec::new();
        if let Some(mut e) = err_pipe {
            let _ = e.read_to_end(&mut buf).await;
        }
        String::from_utf8_lossy(&buf).into_owned()
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
        stderr,
    })
}

/// Runs `cmd` with no stdin and streams its stdout until it exits; the child lives (and is
/// killed on drop, with its group) as long as the stream.
pub fn stream_command(
    node: NodeName,
    via: String,
    mut cmd: tokio::process::Command,
) -> BoxStream<'static, Result<Bytes, ShellError>> {
    let err = move |cause: String| ShellError {
        node: node.clone(),
        via: via.clone(),
        cause,
    };
    let spawned = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return futures::stream::once(futures::future::ready(Err(err(format!(
                "start {:?}: {e}",
                cmd.as_std().get_program()
            )))))
            .boxed();
        }
    };
    let Some(stdout) = child.stdout.take() else {
        return futures::stream::empty().boxed();
    };
    let guard = GroupGuard {
        pgid: child.id().map(|p| p as i32),
    };
    let reader = tokio_util::io::ReaderStream::new(stdout)
        .map_err(move |e| err(format!("read output: {e}")));
    futures::stream::unfold(
        (reader, child, guard),
        |(mut reader, child, guard)| async move {
            reader
                .next()
                .await
                .map(|item| (item, (reader, child, guard)))
        },
    )
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell() -> LocalShell {
        LocalShell::new(NodeName::new("local").unwrap())
    }

    #[tokio::test]
    async fn a_script_holding_a_nul_byte_is_refused_naming_it_as_a_remote_node_would() {
        let model = crate::model::script::quote("weights\0.bin");
        let e = shell()
            .run(&format!("echo {model}"), Vec::new(), None)
            .await
            .unwrap_err();
        assert!(e.cause.contains("NUL byte"), "{e}");
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
        assert_eq!(out.stderr, "oops\n");
        assert_eq!(out.stderr_tail(), "oops");
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
    async fn a_script_that_overruns_is_a_timeout_error() {
        let err = run_within(&shell(), "sleep 5", Vec::new(), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_stream_yields_what_the_script_prints() {
        let chunks: Vec<Bytes> = shell()
            .stream("printf 'one\\ntwo\\n'")
            .map(|c| c.unwrap())
            .collect()
            .await;
        assert_eq!(chunks.concat(), b"one\ntwo\n");
    }

    #[tokio::test]
    async fn a_dropped_script_takes_its_children_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let sh = shell();
        let run = sh.run(&script, Vec::new(), None);
        let _ = tokio::time::timeout(Duration::from_millis(500), run).await;
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "the background sleep {pid} survived");
    }
}
