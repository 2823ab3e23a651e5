//! One node's multiplexed OpenSSH connection: a master started with `ControlMaster=yes` and
//! `ControlPersist` (so it lives in the background and dies on its own if we crash), then
//! every command, copy and forward goes through its ControlPath socket with no new handshake.
//! Talks to sshd; decides nothing.
//!
//! Two limits of sshd are kept here. `MaxStartups` (default `10:30:100`) drops new connections
//! while too many are still unauthenticated: a master whose connection was dropped before the
//! handshake is tried again, [`CONNECT_ATTEMPTS`] times with pauses doubling from 250 ms,
//! then the error names the setting. `MaxSessions` (default 10) refuses more sessions on one
//! connection: a command takes a [`Slot`] first, at most [`SESSIONS_PER_MASTER`] per master;
//! when all are taken another master is opened (up to [`MAX_MASTERS`]), else the command
//! waits for a slot to free.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::Command;

use crate::node::NodeName;

use super::askpass::Askpass;
use super::error::{ConnectFailure, Dest, SshError, stderr_tail};
use super::exec::{Output, RunOptions, run_child};
use super::options::SshOptions;
use crate::quote;

/// Sessions one master carries at once: sshd's default `MaxSessions` is 10, two stay spare
/// (for another tool sharing the connection, a session still closing).
pub const SESSIONS_PER_MASTER: usize = 8;
/// Masters per node at most: beyond `SESSIONS_PER_MASTER * MAX_MASTERS` sessions at once, a
/// command waits for one to end.
pub const MAX_MASTERS: usize = 4;
/// Tries of a master whose connection sshd dropped before the handshake (`MaxStartups`).
pub const CONNECT_ATTEMPTS: u32 = 6;
/// The first pause between those tries; it doubles, up to [`CONNECT_BACKOFF_MAX`].
const CONNECT_BACKOFF: Duration = Duration::from_millis(250);
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(4);

/// One master connection and how many sessions run through it now.
#[derive(Debug)]
struct Master {
    control: PathBuf,
    /// The arguments every client of this master gets (its ControlPath among them).
    common: Vec<String>,
    busy: usize,
}

/// The masters of a session, shared with the slots taken from them.
#[derive(Debug)]
struct Masters {
    list: Mutex<Vec<Master>>,
    /// Told when a slot is given back or a master added.
    freed: tokio::sync::Notify,
}

impl Masters {
    /// A free slot of a live master, the first master first.
    fn take(self: &Arc<Self>) -> Option<Slot> {
        let mut list = self.list.lock().ok()?;
        let (index, m) = list.iter_mut().enumerate().find(|(i, m)| {
            // An extra master that idled past ControlPersist is gone with its socket.
            m.busy < SESSIONS_PER_MASTER && (*i == 0 || m.control.exists())
        })?;
        m.busy += 1;
        Some(Slot {
            masters: self.clone(),
            index,
            args: client_args(&m.common),
        })
    }
}

/// The right to run one session through a master: held while the client runs, given back
/// when dropped.
#[derive(Debug)]
pub struct Slot {
    masters: Arc<Masters>,
    index: usize,
    args: Vec<String>,
}

impl Slot {
    /// The arguments of a client through this slot's master (before `--` and the destination).
    pub fn client_args(&self) -> &[String] {
        &self.args
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut list) = self.masters.list.lock()
            && let Some(m) = list.get_mut(self.index)
        {
            m.busy = m.busy.saturating_sub(1);
        }
        self.masters.freed.notify_waiters();
    }
}

fn client_args(common: &[String]) -> Vec<String> {
    let mut a: Vec<String> = ["-o", "ControlMaster=no", "-o", "BatchMode=yes"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(common.iter().cloned());
    a.push("-T".into());
    a
}

/// A live, multiplexed connection to one node (one master, more when many sessions run at
/// once).
#[derive(Debug)]
pub struct Session {
    node: NodeName,
    dest: Dest,
    program: PathBuf,
    opts: SshOptions,
    masters: Arc<Masters>,
    /// Held while another master is opened; true once opening one failed (then commands wait).
    growing: tokio::sync::Mutex<bool>,
    closed: AtomicBool,
    /// The forwards asked of the first master (`local`, `remote`), asked again by
    /// [`Session::reconnect`].
    forwards: Mutex<Vec<(PathBuf, String)>>,
    /// True from a new master until every forward was asked of it again.
    forwards_pending: AtomicBool,
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
            match start_master(node, &dest, opts, &control, askpass).await {
                Ok(common) => {
                    tracing::debug!("{node}: connected to {dest}");
                    return Ok(Session {
                        node: node.clone(),
                        dest,
                        program: opts.program.clone(),
                        opts: opts.clone(),
                        masters: Arc::new(Masters {
                            list: Mutex::new(vec![Master {
                                control,
                                common,
                                busy: 0,
                            }]),
                            freed: tokio::sync::Notify::new(),
                        }),
                        growing: tokio::sync::Mutex::new(false),
                        closed: AtomicBool::new(false),
                        forwards: Mutex::new(Vec::new()),
                        forwards_pending: AtomicBool::new(false),
                    });
                }
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

    /// A slot for one session: the first master with room, a new master when all are full
    /// (and fewer than [`MAX_MASTERS`] run), else the first one freed.
    pub async fn slot(&self) -> Slot {
        loop {
            let freed = self.masters.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.masters.take() {
                return slot;
            }
            if let Some(slot) = self.grow().await {
                return slot;
            }
            freed.await;
        }
    }

    /// Opens one more master (keys only, `BatchMode`) unless another task is opening one, the
    /// most run already, or opening one failed before.
    async fn grow(&self) -> Option<Slot> {
        let Ok(mut failed) = self.growing.try_lock() else {
            return None;
        };
        let (live, base) = {
            let list = self.masters.list.lock().ok()?;
            let live = list
                .iter()
                .enumerate()
                .filter(|(i, m)| *i == 0 || m.control.exists())
                .count();
            (live, list.len())
        };
        if *failed || live >= MAX_MASTERS {
            return None;
        }
        let first = self.masters.list.lock().ok()?.first()?.control.clone();
        let control = PathBuf::from(format!("{}-{base}", first.display()));
        match start_master(&self.node, &self.dest, &self.opts, &control, None).await {
            Ok(common) => {
                tracing::debug!(
                    "{}: opened connection {} to {}",
                    self.node,
                    base + 1,
                    self.dest
                );
                self.masters.list.lock().ok()?.push(Master {
                    control,
                    common,
                    busy: 0,
                });
                self.masters.freed.notify_waiters();
                self.masters.take()
            }
            Err(e) => {
                tracing::debug!(
                    "{}: no further connection ({e}); commands wait for a free session",
                    self.node
                );
                *failed = true;
                None
            }
        }
    }

    /// Every master's `common` arguments, the first master first.
    fn all_common(&self) -> Vec<Vec<String>> {
        self.masters
            .list
            .lock()
            .map(|l| l.iter().map(|m| m.common.clone()).collect())
            .unwrap_or_default()
    }

    /// The first master's `common` arguments (forwards live on it).
    fn first_common(&self) -> Vec<String> {
        self.all_common().into_iter().next().unwrap_or_default()
    }

    pub fn node(&self) -> &NodeName {
        &self.node
    }

    /// Where this session is connected (the address that answered).
    pub fn dest(&self) -> &Dest {
        &self.dest
    }

    /// The ssh program this session runs.
    pub fn program_path(&self) -> &Path {
        &self.program
    }

    /// An `ssh` client of the first master, for `-O` requests (not sessions).
    fn control_client(&self, common: &[String]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(client_args(common));
        cmd
    }

    /// Runs `argv` on the node (quoted for its shell) and returns whatever exit status it had.
    /// Errors only when the command could not be run (connection lost, timeout).
    pub async fn output(&self, argv: &[&str], opts: &RunOptions) -> Result<Output, SshError> {
        let line = quote::join(argv).map_err(|e| SshError::Invalid {
            node: self.node.clone(),
            message: format!("{}: {e}", quote::display(argv)),
        })?;
        let slot = self.slot().await;
        let mut cmd = Command::new(&self.program);
        cmd.args(slot.client_args())
            .args(["--", &self.dest.host, &line]);
        let out = run_child(&self.node, cmd, &line, opts).await?;
        drop(slot);
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
        let mut cmd = self.control_client(&self.first_common());
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
            if let Ok(mut f) = self.forwards.lock()
                && !f.iter().any(|(l, r)| l == local && r == remote)
            {
                f.push((local.to_path_buf(), remote.to_string()));
            }
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

    /// Whether the first master still answers (`ssh -O check`).
    async fn master_alive(&self) -> bool {
        let mut cmd = self.control_client(&self.first_common());
        cmd.args(["-O", "check", "--", &self.dest.host]);
        run_child(
            &self.node,
            cmd,
            "ssh -O check",
            &RunOptions::timeout(Duration::from_secs(10)),
        )
        .await
        .is_ok_and(|o| o.success())
    }

    /// After the connection dropped (sshd restarted, a network outage): a new first master on
    /// the same ControlPath (keys only, as every master after the first), the other masters
    /// forgotten, and every forward asked again at its own local path, so that whoever holds
    /// those paths (a Docker client) goes on through them. `Ok(false)` when the master still
    /// answers (nothing done); an error while the node does not take the connection yet.
    pub async fn reconnect(&self) -> Result<bool, SshError> {
        if self.closed.load(Ordering::SeqCst) {
            return Ok(false);
        }
        if self.master_alive().await {
            // A master opened by an earlier call whose forwards did not all come back.
            if self.forwards_pending.load(Ordering::SeqCst) {
                self.forward_again().await?;
                return Ok(true);
            }
            return Ok(false);
        }
        // Hold off other masters being opened meanwhile; a failure to open one before is
        // forgotten with the old connection.
        let mut failed = self.growing.lock().await;
        let (control, extra) = {
            let list = self.masters.list.lock().map_err(|_| SshError::Invalid {
                node: self.node.clone(),
                message: "the connection's state is lost".into(),
            })?;
            let control = list.first().map(|m| m.control.clone());
            let extra: Vec<PathBuf> = list.iter().skip(1).map(|m| m.control.clone()).collect();
            (control, extra)
        };
        let Some(control) = control else {
            return Ok(false);
        };
        // A master that died may leave its socket behind; a new one cannot bind over it.
        for c in extra.iter().chain([&control]) {
            let _ = std::fs::remove_file(c);
        }
        let common = start_master(&self.node, &self.dest, &self.opts, &control, None).await?;
        if let Ok(mut list) = self.masters.list.lock() {
            list.truncate(1);
            if let Some(m) = list.first_mut() {
                m.common = common;
            }
        }
        *failed = false;
        drop(failed);
        self.masters.freed.notify_waiters();
        self.forwards_pending.store(true, Ordering::SeqCst);
        self.forward_again().await?;
        tracing::debug!("{}: connected again to {}", self.node, self.dest);
        Ok(true)
    }

    /// Every recorded forward asked of the (new) first master again, at its own local path: the
    /// socket the old master left there is ours (our runtime folder) and goes first.
    async fn forward_again(&self) -> Result<(), SshError> {
        let forwards = self.forwards.lock().map(|f| f.clone()).unwrap_or_default();
        for (local, remote) in forwards {
            let _ = std::fs::remove_file(&local);
            self.forward(&local, &remote).await?;
        }
        self.forwards_pending.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// The blocking form of cancelling a forward (used from `Drop`).
    pub(crate) fn cancel_forward_blocking(&self, local: &Path, remote: &str) {
        if let Ok(mut f) = self.forwards.lock() {
            f.retain(|(l, r)| !(l == local && r == remote));
        }
        let spec = format!("{}:{remote}", local.display());
        let _ = std::process::Command::new(&self.program)
            .args(["-o", "ControlMaster=no", "-o", "BatchMode=yes"])
            .args(self.first_common())
            .args(["-O", "cancel", "-L", &spec, "--", &self.dest.host])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Closes every master connection (and with them every forward).
    pub async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for common in self.all_common() {
            let mut cmd = self.control_client(&common);
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
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for common in self.all_common() {
            let _ = std::process::Command::new(&self.program)
                .args(["-o", "ControlMaster=no"])
                .args(&common)
                .args(["-O", "exit", "--", &self.dest.host])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Starts a master for `dest` on `control` and returns the arguments of its clients; a
/// connection sshd dropped before the handshake (its `MaxStartups` at work) is tried again,
/// up to [`CONNECT_ATTEMPTS`] times with growing pauses, and the last error says so.
async fn start_master(
    node: &NodeName,
    dest: &Dest,
    opts: &SshOptions,
    control: &Path,
    askpass: Option<&Askpass>,
) -> Result<Vec<String>, SshError> {
    let started = std::time::Instant::now();
    let mut pause = CONNECT_BACKOFF;
    let mut attempt = 1;
    loop {
        match try_master(node, dest, opts, control, askpass).await {
            Err(SshError::Connect {
                node,
                dest,
                failure: ConnectFailure::Dropped,
                detail,
            }) => {
                if attempt >= CONNECT_ATTEMPTS {
                    return Err(SshError::Connect {
                        node,
                        dest,
                        failure: ConnectFailure::Dropped,
                        detail: format!(
                            "{attempt} tries over {:.1}s; ssh said: {detail}",
                            started.elapsed().as_secs_f64()
                        ),
                    });
                }
                tracing::debug!(
                    "{node}: {dest} dropped the connection ({detail}); again in {pause:?}"
                );
                tokio::time::sleep(jittered(pause)).await;
                pause = (pause * 2).min(CONNECT_BACKOFF_MAX);
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// `pause` stretched by up to a half, so that many clients turned away together do not all
/// come back together.
fn jittered(pause: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    pause + pause.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// One try of [`start_master`].
async fn try_master(
    node: &NodeName,
    dest: &Dest,
    opts: &SshOptions,
    control: &Path,
    askpass: Option<&Askpass>,
) -> Result<Vec<String>, SshError> {
    let control_s = control.display().to_string();
    let common = opts.common_args(node, dest, &control_s);
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
    let deadline = opts
        .connect_timeout
        .saturating_mul(3)
        .saturating_add(Duration::from_secs(10));
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
        return Ok(common);
    }
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let failure = if out.code == 255 || !out.success() {
        ConnectFailure::classify(&text)
    } else {
        ConnectFailure::Other
    };
    Err(SshError::Connect {
        node: node.clone(),
        dest: dest.clone(),
        failure,
        detail: stderr_tail(&out.stderr, 3),
    })
}
