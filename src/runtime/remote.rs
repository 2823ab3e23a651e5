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
use crate::ssh::{ConnectFailure, Forward, NodeHandle};

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

    /// `ssh -S master … -- HOST 'bash -c SCRIPT'` through the node's session; `None` for a
    /// handle without a session (this machine).
    fn command(&self, script: &str) -> Result<tokio::process::Command, ShellError> {
        let no_session = || ShellError {
            node: self.handle.name().clone(),
            via: self.via(),
            cause: "no SSH session".to_string(),
        };
        let session = self.handle.session().ok_or_else(no_session)?;
        let line = crate::quote::join(&["bash", "-c", script]).map_err(|e| ShellError {
            node: self.handle.name().clone(),
            via: self.via(),
            cause: format!("the script cannot be quoted: {e}"),
        })?;
        let mut cmd = tokio::process::Command::new(session.program_path());
        cmd.args(session.client_args())
            .args(["--", &session.dest().host, &line]);
        Ok(cmd)
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
            let cmd = self.command(script)?;
            let out = run_command(self.handle.name(), self.via(), cmd, stdin, lines).await?;
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
        match self.command(script) {
            Ok(cmd) => stream_command(self.handle.name().clone(), self.via(), cmd),
            Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
        }
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
}
