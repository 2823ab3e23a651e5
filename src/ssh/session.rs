//! One multiplexed OpenSSH connection to one node: a master started with `ControlMaster=yes`
//! and `ControlPersist` (so it lives in the background and dies on its own if we crash), then
//! every command, copy and forward goes through its ControlPath socket with no new handshake.
//! Talks to sshd; decides nothing.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::process::Command;

use crate::node::NodeName;

use super::askpass::Askpass;
use super::error::{ConnectFailure, Dest, SshError, stderr_tail};
use super::exec::{Output, RunOptions, run_child};
use super::options::SshOptions;
use crate::quote;

/// A live, multiplexed connection to one node.
#[derive(Debug)]
pub struct Session {
    node: NodeName,
    dest: Dest,
    control: PathBuf,
    program: PathBuf,
    common: Vec<String>,
    closed: AtomicBool,
}

impl Session {
    /// Connects to the first address of `addresses` that answers. Authentication failures and
    /// host-key problems stop at once (another address of the same node would fail the same
    /// way); refused or unreachable addresses move on to the next one.
    pub async fn open(
        node: &NodeName,
        addresses: &[String],
        user: Option<&str>,
        port: u16,
        opts: &SshOptions,
        control: PathBuf,
        askpass: Option<&Askpass>,
    ) -> Result<Session, SshError> {
        let mut last = None;
        for host in addresses {
            let dest = Dest {
                host: host.clone(),
                user: user.map(str::to_string),
                port,
            };
            match Self::open_one(node, dest, opts, control.clone(), askpass).await {
                Ok(s) => return Ok(s),
                Err(e) => {
                    let stop = e.connect_failure().is_none_or(ConnectFailure::is_final);
                    last = Some(e);
                    if stop {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| SshError::Invalid {
            node: node.clone(),
            message: "no address to connect to (add one with `spark-launch nodes add`)".into(),
        }))
    }

    async fn open_one(
        node: &NodeName,
        dest: Dest,
        opts: &SshOptions,
        control: PathBuf,
        askpass: Option<&Askpass>,
    ) -> Result<Session, SshError> {
        let control_s = control.display().to_string();
        let common = opts.common_args(node, &dest, &control_s);
        let mut cmd = Command::new(&opts.program);
        // The first value of an option wins in ssh, so these go before the common ones.
        match askpass {
            Some(a) => {
                cmd.args([
                    "-o",
                    "BatchMode=no",
                    "-o",
                    "PreferredAuthentications=publickey,password,keyboard-interactive",
                    "-o",
                    "NumberOfPasswordPrompts=1",
                ]);
                a.apply(&mut cmd);
            }
            None => {
                cmd.args(["-o", "BatchMode=yes"]);
            }
        }
        cmd.args([
            "-o",
            "ControlMaster=yes",
            "-o",
            &format!("ControlPersist={}", opts.persist.as_secs().max(1)),
        ])
        .args(&common)
        .args(["-T", "--", &dest.host, "true"]);
        // A master that cannot authenticate in this time never will.
        let deadline = opts.connect_timeout * 3 + Duration::from_secs(10);
        let shown = format!("ssh {dest} true");
        let out = run_child(node, cmd, &shown, &RunOptions::timeout(deadline))
            .await
            .map_err(|e| match e {
                SshError::Timeout { .. } => SshError::Connect {
                    node: node.clone(),
                    dest: dest.clone(),
                    failure: ConnectFailure::Timeout,
                    detail: String::new(),
                },
                other => other,
            })?;
        if out.success() && control.exists() {
            tracing::debug!("{node}: connected to {dest}");
            return Ok(Session {
                node: node.clone(),
                dest,
                control,
                program: opts.program.clone(),
                common,
                closed: AtomicBool::new(false),
            });
        }
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let failure = if out.code == 255 || !out.success() {
            ConnectFailure::classify(&text)
        } else {
            ConnectFailure::Other
        };
        Err(SshError::Connect {
            node: node.clone(),
            dest,
            failure,
            detail: stderr_tail(&out.stderr, 3),
        })
    }

    pub fn node(&self) -> &NodeName {
        &self.node
    }

    /// Where this session is connected (the address that answered).
    pub fn dest(&self) -> &Dest {
        &self.dest
    }

    /// The ControlPath socket of the master (for tools that take `ssh -S PATH`).
    pub fn control_path(&self) -> &Path {
        &self.control
    }

    /// The ssh program this session runs.
    pub fn program_path(&self) -> &Path {
        &self.program
    }

    /// The arguments of a client through the master (before `--` and the destination).
    pub fn client_args(&self) -> Vec<String> {
        let mut a: Vec<String> = ["-o", "ControlMaster=no", "-o", "BatchMode=yes"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(self.common.iter().cloned());
        a.push("-T".into());
        a
    }

    /// An `ssh` command through the master, ready for `-O` or a remote command.
    fn client(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(self.client_args());
        cmd
    }

    /// Runs `argv` on the node (quoted for its shell) and returns whatever exit status it had.
    /// Errors only when the command could not be run (connection lost, timeout).
    pub async fn output(&self, argv: &[&str], opts: &RunOptions) -> Result<Output, SshError> {
        let line = quote::join(argv).map_err(|e| SshError::Invalid {
            node: self.node.clone(),
            message: format!("{}: {e}", quote::display(argv)),
        })?;
        let mut cmd = self.client();
        cmd.args(["--", &self.dest.host, &line]);
        let out = run_child(&self.node, cmd, &line, opts).await?;
        if out.code == 255 {
            let failure = ConnectFailure::classify(&out.stderr_text());
            if failure != ConnectFailure::Other || out.stderr_text().contains("mux_client") {
                return Err(SshError::Connect {
                    node: self.node.clone(),
                    dest: self.dest.clone(),
                    failure,
                    detail: stderr_tail(&out.stderr, 3),
                });
            }
        }
        Ok(out)
    }

    /// Asks the master to listen on `local` (a unix socket) and forward to `remote`.
    pub(crate) async fn forward(&self, local: &Path, remote: &str) -> Result<(), SshError> {
        let spec = format!("{}:{remote}", local.display());
        let mut cmd = self.client();
        cmd.args([
            "-o",
            "StreamLocalBindUnlink=yes",
            "-O",
            "forward",
            "-L",
            &spec,
        ])
        .args(["--", &self.dest.host]);
        let shown = format!("ssh -O forward -L {spec} {}", self.dest);
        let out = run_child(
            &self.node,
            cmd,
            &shown,
            &RunOptions::timeout(Duration::from_secs(15)),
        )
        .await?;
        if out.success() {
            Ok(())
        } else {
            Err(SshError::Remote {
                node: self.node.clone(),
                command: shown,
                code: out.code,
                stderr_tail: stderr_tail(&out.stderr, 3),
            })
        }
    }

    /// The blocking form of cancelling a forward (used from `Drop`).
    pub(crate) fn cancel_forward_blocking(&self, local: &Path, remote: &str) {
        let spec = format!("{}:{remote}", local.display());
        let _ = std::process::Command::new(&self.program)
            .args(["-o", "ControlMaster=no", "-o", "BatchMode=yes"])
            .args(&self.common)
            .args(["-O", "cancel", "-L", &spec, "--", &self.dest.host])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Closes the master connection (and with it every forward).
    pub async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut cmd = self.client();
        cmd.args(["-O", "exit", "--", &self.dest.host]);
        let _ = run_child(
            &self.node,
            cmd,
            "ssh -O exit",
            &RunOptions::timeout(Duration::from_secs(10)),
        )
        .await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = std::process::Command::new(&self.program)
            .args(["-o", "ControlMaster=no"])
            .args(&self.common)
            .args(["-O", "exit", "--", &self.dest.host])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
