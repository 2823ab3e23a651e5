//! The SSH layer (`crate::ssh`) as the runtime's [`RemoteNode`]: a remote node's Docker
//! socket forwarded over its multiplexed connection, and `sh -c` scripts run through it. Glue
//! only: how SSH works stays in `ssh`, what to run stays with the callers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use std::process::Stdio;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::target::{RemoteNode, ShellOutput};
use crate::ssh::{Forward, NodeHandle, RunOptions};

/// A remote node reached through its SSH session. Forwards stay open as long as this does.
#[derive(Debug)]
pub struct SshNode {
    handle: Arc<NodeHandle>,
    forwards: Mutex<HashMap<String, Forward>>,
}

impl SshNode {
    pub fn new(handle: Arc<NodeHandle>) -> Self {
        SshNode {
            handle,
            forwards: Mutex::new(HashMap::new()),
        }
    }
}

impl RemoteNode for SshNode {
    fn describe(&self) -> String {
        match self.handle.dest() {
            Some(d) => format!("{} (ssh {d})", self.handle.name()),
            None => self.handle.name().to_string(),
        }
    }

    fn forward_socket<'a>(&'a self, remote: &'a str) -> BoxFuture<'a, Result<PathBuf, String>> {
        Box::pin(async move {
            if let Some(f) = self
                .forwards
                .lock()
                .ok()
                .and_then(|m| m.get(remote).map(|f| f.local_path().to_path_buf()))
            {
                return Ok(f);
            }
            let fwd = self
                .handle
                .forward_unix_socket(remote)
                .await
                .map_err(|e| e.to_string())?;
            let path = fwd.local_path().to_path_buf();
            if let Ok(mut m) = self.forwards.lock() {
                m.insert(remote.to_string(), fwd);
            }
            Ok(path)
        })
    }

    fn run<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
    ) -> BoxFuture<'a, Result<ShellOutput, String>> {
        Box::pin(async move {
            let out = self
                .handle
                .output(&["sh", "-c", script], &RunOptions::stdin(stdin))
                .await
                .map_err(|e| e.to_string())?;
            Ok(ShellOutput {
                code: Some(out.code),
                stdout: out.stdout,
                stderr: out.stderr,
            })
        })
    }

    fn run_lines<'a>(
        &'a self,
        script: &'a str,
        stdin: Vec<u8>,
        lines: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> BoxFuture<'a, Result<ShellOutput, String>> {
        // Streamed through the session (model staging shows byte progress from these lines);
        // the script's process group dies with the future (Ctrl-C, a timeout).
        Box::pin(async move {
            use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
            let Some(session) = self.handle.session() else {
                return Err(format!("{}: no SSH session", self.handle.name()));
            };
            let remote =
                crate::ssh::quote::join(&["sh", "-c", script]).map_err(|e| e.to_string())?;
            let mut child = tokio::process::Command::new(session.program_path())
                .args(session.client_args())
                .arg("--")
                .arg(&session.dest().host)
                .arg(remote)
                .process_group(0)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("run ssh: {e}"))?;
            let mut input = child.stdin.take();
            let writer = async move {
                if let Some(w) = input.as_mut() {
                    let _ = w.write_all(&stdin).await;
                    let _ = w.shutdown().await;
                }
            };
            let out = child.stdout.take();
            let reader = async move {
                if let Some(out) = out {
                    let mut r = tokio::io::BufReader::new(out).lines();
                    while let Ok(Some(line)) = r.next_line().await {
                        let _ = lines.send(line);
                    }
                }
            };
            let err = child.stderr.take();
            let err_reader = async move {
                let mut buf = Vec::new();
                if let Some(mut e) = err {
                    let _ = e.read_to_end(&mut buf).await;
                }
                buf
            };
            let ((), (), stderr) = tokio::join!(writer, reader, err_reader);
            let status = child
                .wait()
                .await
                .map_err(|e| format!("wait for ssh: {e}"))?;
            Ok(ShellOutput {
                code: status.code(),
                stdout: Vec::new(),
                stderr,
            })
        })
    }

    fn stream(&self, script: &str) -> BoxStream<'static, Result<Bytes, String>> {
        let fail = |e: String| futures::stream::once(futures::future::ready(Err(e))).boxed();
        let Some(session) = self.handle.session() else {
            return fail(format!("{}: no SSH session", self.handle.name()));
        };
        let remote = match crate::ssh::quote::join(&["sh", "-c", script]) {
            Ok(r) => r,
            Err(e) => return fail(e.to_string()),
        };
        let spawned = tokio::process::Command::new(session.program_path())
            .args(session.client_args())
            .arg("--")
            .arg(&session.dest().host)
            .arg(remote)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return fail(format!("run ssh: {e}")),
        };
        let Some(stdout) = child.stdout.take() else {
            return fail("ssh gave no stdout".to_string());
        };
        let reader = tokio_util::io::ReaderStream::new(stdout).map_err(|e| e.to_string());
        // The child lives (and is killed on drop) as long as the stream.
        futures::stream::unfold((reader, child), |(mut reader, child)| async move {
            reader.next().await.map(|item| (item, (reader, child)))
        })
        .boxed()
    }
}
