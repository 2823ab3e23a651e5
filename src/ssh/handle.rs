//! `NodeHandle`: the live link to one node, whether it is this machine (commands run here) or a
//! remote one (commands run through its SSH session). Callers say "run X on node N" and never
//! learn which; a forwarded Docker socket on the local node is simply the socket itself.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::process::Command;

use crate::node::NodeName;

use super::error::{Dest, SshError, stderr_tail};
use super::exec::{Output, RunOptions, run_child};
use super::runtime_dir::RuntimeDir;
use super::session::Session;
use crate::quote;

static FORWARDS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
enum Link {
    Local,
    Remote(Box<Session>),
}

/// The live link to one node (a live handle is never serialised and never part of a plan).
#[derive(Debug)]
pub struct NodeHandle {
    name: NodeName,
    link: Link,
    dir: RuntimeDir,
}

impl NodeHandle {
    /// This machine, under the name the cluster knows it by.
    pub fn local(name: NodeName, dir: RuntimeDir) -> NodeHandle {
        NodeHandle {
            name,
            link: Link::Local,
            dir,
        }
    }

    /// A remote node reached through `session`.
    pub fn remote(session: Session, dir: RuntimeDir) -> NodeHandle {
        NodeHandle {
            name: session.node().clone(),
            link: Link::Remote(Box::new(session)),
            dir,
        }
    }

    pub fn name(&self) -> &NodeName {
        &self.name
    }

    pub fn is_local(&self) -> bool {
        matches!(self.link, Link::Local)
    }

    /// Where the SSH session went (`None` for the local node).
    pub fn dest(&self) -> Option<&Dest> {
        match &self.link {
            Link::Local => None,
            Link::Remote(s) => Some(s.dest()),
        }
    }

    /// The SSH session, for callers that need ssh itself (`None` for the local node).
    pub fn session(&self) -> Option<&Session> {
        match &self.link {
            Link::Local => None,
            Link::Remote(s) => Some(s),
        }
    }

    /// Runs `argv` and returns its output whatever its exit status.
    pub async fn output(&self, argv: &[&str], opts: &RunOptions) -> Result<Output, SshError> {
        if argv.is_empty() {
            return Err(SshError::Invalid {
                node: self.name.clone(),
                message: "empty command".into(),
            });
        }
        match &self.link {
            Link::Remote(s) => s.output(argv, opts).await,
            Link::Local => {
                let mut cmd = Command::new(argv[0]);
                cmd.args(&argv[1..]).env_remove(super::askpass::ASKPASS_ENV);
                run_child(&self.name, cmd, &quote::display(argv), opts).await
            }
        }
    }

    /// Runs `argv`; a non-zero exit status is an error carrying the quoted command and the
    /// tail of its stderr.
    pub async fn run(&self, argv: &[&str]) -> Result<Output, SshError> {
        self.run_with(argv, &RunOptions::default()).await
    }

    /// [`NodeHandle::run`] with stdin and/or a timeout.
    pub async fn run_with(&self, argv: &[&str], opts: &RunOptions) -> Result<Output, SshError> {
        let out = self.output(argv, opts).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(SshError::Remote {
                node: self.name.clone(),
                command: quote::display(argv),
                code: out.code,
                stderr_tail: stderr_tail(&out.stderr, 3),
            })
        }
    }

    /// Runs a POSIX shell script (`sh -c SCRIPT`), checked like [`NodeHandle::run`].
    pub async fn sh(&self, script: &str) -> Result<Output, SshError> {
        self.run(&["sh", "-c", script]).await
    }

    /// Copies a local file or folder into `remote_dir` on the node (created if missing), as one
    /// tar stream through the multiplexed connection (AES-GCM preferred).
    pub async fn copy_to(&self, local: &Path, remote_dir: &str) -> Result<(), SshError> {
        let io = |what: String| {
            let node = self.name.clone();
            move |source| SshError::Io { node, what, source }
        };
        let parent = local
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = local.file_name().ok_or_else(|| SshError::Invalid {
            node: self.name.clone(),
            message: format!("cannot copy {}: no file name", local.display()),
        })?;
        let mut tar = Command::new("tar");
        tar.arg("-C")
            .arg(parent)
            .arg("-cf")
            .arg("-")
            .arg("--")
            .arg(name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut tar = tar
            .spawn()
            .map_err(io(format!("run tar for {}", local.display())))?;
        let pipe: Stdio = tar
            .stdout
            .take()
            .ok_or_else(|| SshError::Invalid {
                node: self.name.clone(),
                message: "tar gave no stdout".into(),
            })?
            .try_into()
            .map_err(io("pipe tar into ssh".into()))?;
        let unpack = format!(
            "mkdir -p {d} && tar -C {d} -xf -",
            d = quote::quote(remote_dir, quote::Style::Minimal).map_err(|e| SshError::Invalid {
                node: self.name.clone(),
                message: e.to_string(),
            })?
        );
        let (mut recv, _slot) = match &self.link {
            Link::Local => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(&unpack);
                (c, None)
            }
            Link::Remote(s) => {
                let slot = s.slot().await;
                let mut c = Command::new(s.program_path());
                c.args(slot.client_args()).args([
                    "--",
                    &s.dest().host,
                    &quote::join(&["sh", "-c", &unpack]).unwrap_or_default(),
                ]);
                (c, Some(slot))
            }
        };
        recv.stdin(pipe)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let recv = recv.spawn().map_err(io("run ssh for the copy".into()))?;
        let (sent, got) = tokio::join!(tar.wait_with_output(), recv.wait_with_output());
        let sent = sent.map_err(io("wait for tar".into()))?;
        let got = got.map_err(io("wait for the copy".into()))?;
        let shown = format!("copy {} to {}:{remote_dir}", local.display(), self.name);
        if !sent.status.success() {
            return Err(SshError::Remote {
                node: self.name.clone(),
                command: format!("{shown} (local tar)"),
                code: sent.status.code().unwrap_or(-1),
                stderr_tail: stderr_tail(&sent.stderr, 3),
            });
        }
        if !got.status.success() {
            return Err(SshError::Remote {
                node: self.name.clone(),
                command: shown,
                code: got.status.code().unwrap_or(-1),
                stderr_tail: stderr_tail(&got.stderr, 3),
            });
        }
        Ok(())
    }

    /// Makes the node's unix socket `remote_path` (e.g. `/var/run/docker.sock`) reachable here:
    /// returns a local socket path that forwards to it through the SSH master, until the
    /// returned [`Forward`] is closed or dropped. On the local node it is `remote_path` itself.
    pub async fn forward_unix_socket(
        self: &Arc<Self>,
        remote_path: &str,
    ) -> Result<Forward, SshError> {
        match &self.link {
            Link::Local => Ok(Forward {
                local: PathBuf::from(remote_path),
                remote: remote_path.to_string(),
                handle: None,
            }),
            Link::Remote(s) => {
                let local = self.dir.join(&format!(
                    "fw{}.sock",
                    FORWARDS.fetch_add(1, Ordering::SeqCst)
                ));
                s.forward(&local, remote_path).await?;
                Ok(Forward {
                    local,
                    remote: remote_path.to_string(),
                    handle: Some(self.clone()),
                })
            }
        }
    }

    /// Opens the SSH connection again after it dropped, with its forwards at the same local
    /// paths (`Session::reconnect`); `Ok(false)` when it still stood (or on the local node).
    pub async fn reconnect(&self) -> Result<bool, SshError> {
        match &self.link {
            Link::Local => Ok(false),
            Link::Remote(s) => s.reconnect().await,
        }
    }

    /// Closes the SSH master (no-op on the local node).
    pub async fn close(&self) {
        if let Link::Remote(s) = &self.link {
            s.close().await;
        }
    }
}

/// A unix socket forwarded from a node; the forward ends when this is closed or dropped.
#[derive(Debug)]
pub struct Forward {
    local: PathBuf,
    remote: String,
    handle: Option<Arc<NodeHandle>>,
}

impl Forward {
    /// The socket to connect to on this machine.
    pub fn local_path(&self) -> &Path {
        &self.local
    }

    /// The socket on the node it leads to.
    pub fn remote_path(&self) -> &str {
        &self.remote
    }

    /// Ends the forward now.
    pub fn close(mut self) {
        self.cancel();
    }

    fn cancel(&mut self) {
        if let Some(h) = self.handle.take() {
            if let Link::Remote(s) = &h.link {
                s.cancel_forward_blocking(&self.local, &self.remote);
            }
            let _ = std::fs::remove_file(&self.local);
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.cancel();
    }
}
