//! The SSH layer (`crate::ssh`) as the runtime's [`RemoteNode`]: scripts run through the node's
//! multiplexed connection (`ssh -S master … bash -c SCRIPT`, stdout streamed), and its Docker
//! socket forwarded over the same connection. Glue only: how SSH works stays in `ssh`, what to
//! run stays with the callers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::mpsc::UnboundedSender;

use super::shell::{NodeShell, ShellError, ShellOutput, run_command, stream_command};
use super::target::RemoteNode;
use crate::node::NodeName;
use crate::ssh::{ConnectFailure, Forward, NodeHandle, Slot};

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

    /// `ssh -S master … -- HOST 'bash -c SCRIPT'` through one of the node's masters, with the
    /// session slot it holds (`ssh::Slot`: keep it until the command ends); an error for a
    /// handle without a session (this machine).
    fn command(
        handle: &Arc<NodeHandle>,
        via: String,
        script: &str,
    ) -> impl std::future::Future<Output = Result<(tokio::process::Command, Slot), ShellError>> + use<>
    {
        let handle = handle.clone();
        let script = script.to_string();
        async move {
            let fail = |cause: String| ShellError {
                node: handle.name().clone(),
                via: via.clone(),
                cause,
            };
            let session = handle
                .session()
                .ok_or_else(|| fail("no SSH session".to_string()))?;
            let line = crate::quote::join(&["bash", "-c", &script])
                .map_err(|e| fail(format!("the script cannot be quoted: {e}")))?;
            let slot = session.slot().await;
            let mut cmd = tokio::process::Command::new(session.program_path());
            cmd.args(slot.client_args())
                .args(["--", &session.dest().host, &line]);
            Ok((cmd, slot))
        }
    }
}

impl NodeShell for SshNode {
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
        Box::pin(async move {
            let (cmd, slot) = Self::command(&self.handle, self.via(), script).await?;
            let out = run_command(self.handle.name(), self.via(), cmd, stdin, lines).await;
            drop(slot);
            let out = out?;
            // 255 is ssh's own failure; a script may exit 255 too, so only a failure ssh
            // itself describes counts as one.
            if out.status == 255 {
                let failure = ConnectFailure::classify(&out.stderr);
                if failure != ConnectFailure::Other {
                    return Err(ShellError {
                        node: self.handle.name().clone(),
                        via: self.via(),
                        cause: format!("ssh failed ({failure:?}): {}", out.stderr_tail().trim()),
                    });
                }
            }
            Ok(out)
        })
    }

    fn stream(&self, script: &str) -> BoxStream<'static, Result<Bytes, ShellError>> {
        let node = self.handle.name().clone();
        let via = self.via();
        futures::stream::once(Self::command(&self.handle, via.clone(), script))
            .flat_map(move |made| match made {
                // The slot lives as long as the stream does.
                Ok((cmd, slot)) => stream_command(node.clone(), via.clone(), cmd)
                    .inspect(move |_| {
                        let _ = &slot;
                    })
                    .boxed(),
                Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
            })
            .boxed()
    }
}

impl RemoteNode for SshNode {
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

    fn reconnect(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move { self.handle.reconnect().await.map_err(|e| e.to_string()) })
    }
}
