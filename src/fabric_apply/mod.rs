//! The effects of `spark-launch fabric`: root on every node (as root, or through sudo with the
//! password the user typed, fed on stdin and never on a command line), the link-layer probe
//! run privileged on every node at once, and the apply with its safety net, the verification
//! and the rollback. Runs the scripts `fabric::script` renders and reads their output with its
//! parsers; decides nothing (the plans do).
//!
//! The apply, on every node that has something to do, in parallel:
//!
//! 1. stage (the file and a record of every planned interface, nothing applied);
//! 2. launch (detached on the node: after a short common delay, install and `netplan apply`,
//!    then wait for confirmation, else undo by itself at the deadline);
//! 3. poll every node until it says `applied` (or failed), over the management connection;
//! 4. only when every node answered `applied`: confirm every node. Otherwise undo every node
//!    that answers, and for those that do not, wait out their deadline, reconnect and read that
//!    they undid the change by themselves;
//! 5. verify every link end (address up, route, don't-fragment ping at the MTU).
//!
//! `command`: each `fabric` command as one call ([`run`]: request in, [`FabricReport`] out);
//! `render`: how a report is shown; [`perftest`]: `fabric test`'s `ib_write_bw` runs.

mod command;
pub mod perftest;
mod render;

pub use command::{
    FabricAction, FabricDryRun, FabricError, FabricPlanInput, FabricReport, FabricRequest, run,
};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::derive::NodeInput;
use crate::fabric::script::{self, EndResult, LinkEndCheck, RollbackReport, TryState};
use crate::fabric::{FabricPlan, PlannedLink};
use crate::node::NodeName;
use crate::probe::{MemTree, read_facts};
use crate::progress::Reporter;
use crate::ssh::{NodeHandle, Password, Pool, RunOptions, SshOptions, SshTarget, stderr_tail};

use crate::node::for_each_node;

/// How a node's commands get root.
#[derive(Clone, Debug)]
pub enum Privilege {
    /// The login user is root.
    Root,
    /// `sudo -n` works (NOPASSWD, or a cached ticket).
    Sudo,
    /// `sudo -S` with the user's password on stdin.
    SudoPassword(Password),
}

/// What a node needs to get root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootAccess {
    Root,
    SudoNoPassword,
    SudoPassword,
    /// No sudo on the node and the user is not root.
    NoSudo,
}

const ACCESS: &str = r#"if [ "$(id -u)" = 0 ]; then echo root; exit 0; fi
command -v sudo >/dev/null 2>&1 || { echo nosudo; exit 0; }
if sudo -n true >/dev/null 2>&1; then echo nopass; else echo password; fi
"#;

const SHORT: Duration = Duration::from_secs(20);

/// How every node of `pool` gets root.
pub async fn root_access(pool: &Pool) -> Vec<(NodeName, Result<RootAccess, String>)> {
    for_each_node(pool.names(), pool.limit, |name| async move {
        let h = pool.get(&name).map_err(|e| e.to_string())?;
        let out = h
            .output(&["sh", "-c", ACCESS], &RunOptions::timeout(SHORT))
            .await
            .map_err(|e| e.to_string())?;
        match out.stdout_text().trim() {
            "root" => Ok(RootAccess::Root),
            "nopass" => Ok(RootAccess::SudoNoPassword),
            "password" => Ok(RootAccess::SudoPassword),
            "nosudo" => Ok(RootAccess::NoSudo),
            other => Err(format!(
                "could not tell how to get root there (printed {other:?}; {})",
                stderr_tail(&out.stderr, 2)
            )),
        }
    })
    .await
}

/// Checks a sudo password on one node (sudo's cached ticket ignored); `Err` says what sudo said.
pub async fn check_sudo_password(handle: &NodeHandle, password: &Password) -> Result<(), String> {
    let out = handle
        .output(
            &["sudo", "-S", "-p", "", "-k", "true"],
            &RunOptions {
                stdin: Some(format!("{}\n", password.expose()).into_bytes()),
                timeout: Some(SHORT),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    if out.success() {
        Ok(())
    } else {
        let said = stderr_tail(&out.stderr, 2);
        Err(if said.contains("not in the sudoers") {
            format!("the user may not use sudo there ({said})")
        } else {
            format!("sudo refused the password ({said})")
        })
    }
}

/// Runs `script` as root on `handle` (the password, if any, goes on stdin).
pub async fn run_as_root(
    handle: &NodeHandle,
    privilege: &Privilege,
    script: &str,
    timeout: Duration,
) -> Result<String, String> {
    let (argv, stdin): (Vec<&str>, Option<Vec<u8>>) = match privilege {
        Privilege::Root => (vec!["sh", "-c", script], None),
        Privilege::Sudo => (vec!["sudo", "-n", "--", "sh", "-c", script], None),
        Privilege::SudoPassword(p) => (
            vec!["sudo", "-S", "-p", "", "--", "sh", "-c", script],
            Some(format!("{}\n", p.expose()).into_bytes()),
        ),
    };
    let out = handle
        .output(
            &argv,
            &RunOptions {
                stdin,
                timeout: Some(timeout),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    if out.success() {
        Ok(out.stdout_text())
    } else {
        Err(format!(
            "exit {}: {}",
            out.code,
            stderr_tail(&out.stderr, 3)
        ))
    }
}

/// Root for every node, by name.
pub type Privileges = BTreeMap<NodeName, Privilege>;

/// Live nodes, connected, each with a way to get root.
#[derive(Debug)]
pub struct RootPool {
    pub pool: Pool,
    pub privileges: Privileges,
    /// The password each node was given (first SSH contact and sudo), for reconnecting.
    pub passwords: BTreeMap<NodeName, Password>,
    /// How each node was reached, and with which options (to reconnect to a node that
    /// stopped answering).
    pub targets: Vec<SshTarget>,
    pub ssh: SshOptions,
}

impl RootPool {
    /// Runs `work` on the nodes, then closes every connection whatever `work` returned (as
    /// `ResolvedCluster::scope` does).
    pub async fn scope<T>(self, work: impl AsyncFnOnce(&RootPool) -> T) -> T {
        let out = work(&self).await;
        self.pool.close().await;
        out
    }
}

/// Why the nodes could not all be reached as root; every node is named with its reason.
#[derive(Debug, thiserror::Error)]
pub enum RootPoolError {
    #[error(transparent)]
    Setup(#[from] crate::ssh::SshError),
    #[error("cannot reach every node:{}", lines(.0))]
    Unreachable(Vec<(NodeName, String)>),
    #[error("cannot get root on every node, so nothing was changed:{}", lines(.0))]
    NoRoot(Vec<(NodeName, String)>),
}

fn lines(failed: &[(NodeName, String)]) -> String {
    failed
        .iter()
        .map(|(n, w)| format!("\n  {n}: {w}"))
        .collect()
}

/// A node's password, asked for when needed (`ask` is called at most once per node).
pub type AskPassword<'a> = dyn FnMut(&SshTarget) -> Result<Password, String> + 'a;

/// Connects to every target (keys first; a node that refuses the key gets the password `ask`
/// gives for it) and settles root on every node: as root, `sudo -n`, or sudo with that same
/// password (asked now if SSH did not need it), checked before anything is done.
pub async fn connect_as_root(
    targets: &[SshTarget],
    ssh: SshOptions,
    ask: &mut AskPassword<'_>,
    reporter: &Arc<dyn Reporter>,
) -> Result<RootPool, RootPoolError> {
    let mut pool = Pool::new(ssh.clone())?;
    let step = reporter.step(&format!("connect to {} node(s)", targets.len()));
    let first = pool.connect_all(targets, None).await;
    let mut failed: Vec<(NodeName, String)> = Vec::new();
    let mut passwords: BTreeMap<NodeName, Password> = BTreeMap::new();
    for (name, e) in first {
        let auth = e.connect_failure() == Some(&crate::ssh::ConnectFailure::AuthFailed);
        let Some(t) = targets.iter().find(|t| t.name == name).filter(|_| auth) else {
            failed.push((name, e.reason()));
            continue;
        };
        match ask(t) {
            Ok(pw) => {
                for (n, e) in pool.connect_all(std::slice::from_ref(t), Some(&pw)).await {
                    failed.push((n, e.reason()));
                }
                passwords.insert(name, pw);
            }
            Err(why) => failed.push((name, why)),
        }
    }
    if !failed.is_empty() {
        step.fail(&format!("{} unreachable", failed.len()));
        pool.close().await;
        return Err(RootPoolError::Unreachable(failed));
    }
    step.ok();
    let step = reporter.step("get root on every node (sudo)");
    let mut privileges = Privileges::new();
    for (name, access) in root_access(&pool).await {
        let p = match access {
            Ok(RootAccess::Root) => Privilege::Root,
            Ok(RootAccess::SudoNoPassword) => Privilege::Sudo,
            Ok(RootAccess::NoSudo) => {
                failed.push((
                    name,
                    "not root and no sudo there: install sudo, or log in as root (--hosts NAME=root@HOST)".into(),
                ));
                continue;
            }
            Err(e) => {
                failed.push((name, e));
                continue;
            }
            Ok(RootAccess::SudoPassword) => {
                let pw = match passwords.get(&name) {
                    Some(p) => Ok(p.clone()),
                    None => match targets.iter().find(|t| t.name == name) {
                        Some(t) => ask(t),
                        None => Err("not a target".to_string()),
                    },
                };
                let checked = match (&pw, pool.get(&name)) {
                    (Ok(pw), Ok(h)) => check_sudo_password(h, pw).await,
                    (Err(why), _) => Err(why.clone()),
                    (_, Err(e)) => Err(e.to_string()),
                };
                match (checked, pw) {
                    (Ok(()), Ok(pw)) => {
                        passwords.insert(name.clone(), pw.clone());
                        Privilege::SudoPassword(pw)
                    }
                    (Err(why), _) | (_, Err(why)) => {
                        failed.push((name, why));
                        continue;
                    }
                }
            }
        };
        privileges.insert(name, p);
    }
    if !failed.is_empty() {
        step.fail(&format!("{} node(s) without root", failed.len()));
        pool.close().await;
        return Err(RootPoolError::NoRoot(failed));
    }
    step.ok();
    Ok(RootPool {
        pool,
        privileges,
        passwords,
        targets: targets.to_vec(),
        ssh,
    })
}

fn privilege<'a>(p: &'a Privileges, n: &NodeName) -> Result<&'a Privilege, String> {
    p.get(n)
        .ok_or_else(|| format!("{n}: no way to get root was settled"))
}

/// Runs a script as root on each of `nodes` at once (`script` gives each node its own) and
/// returns every node's output, or why there is none.
async fn as_root_on(
    pool: &Pool,
    privileges: &Privileges,
    nodes: Vec<NodeName>,
    script: impl Fn(&NodeName) -> Result<String, String>,
    timeout: Duration,
) -> Vec<(NodeName, Result<String, String>)> {
    let script = &script;
    for_each_node(nodes, 0, |name| async move {
        let h = pool.get(&name).map_err(|e| e.to_string())?;
        run_as_root(h, privilege(privileges, &name)?, &script(&name)?, timeout).await
    })
    .await
}

/// The state each node's script reported (its last `status` line).
fn reported(
    outputs: Vec<(NodeName, Result<String, String>)>,
) -> Vec<(NodeName, Result<TryState, String>)> {
    outputs
        .into_iter()
        .map(|(n, r)| (n, r.map(|out| script::parse_status(&out).0)))
        .collect()
}

/// Probes every node as root: its facts plus the link probe and its netplan files, with the
/// link probe running on every node at the same moment.
pub async fn probe_fabric(
    pool: &Pool,
    privileges: &Privileges,
) -> Vec<(NodeName, Result<NodeInput, String>)> {
    let script = format!(
        "exec </dev/null\n{}\n{}",
        crate::probe::emit::SCRIPT,
        crate::probe::link_emit::SCRIPT
    );
    let outputs = as_root_on(
        pool,
        privileges,
        pool.names(),
        |_| Ok(script.clone()),
        Duration::from_secs(120),
    )
    .await;
    outputs
        .into_iter()
        .map(|(name, r)| {
            let facts = r
                .map_err(|e| format!("the fabric probe failed: {e}"))
                .and_then(|out| {
                    let tree = MemTree::parse(&out).map_err(|e| e.to_string())?;
                    read_facts(&tree).map_err(|e| e.to_string())
                });
            (name.clone(), facts.map(|facts| NodeInput { name, facts }))
        })
        .collect()
}

/// How the apply runs.
#[derive(Clone, Debug)]
pub struct FabricApplyOptions {
    /// Conflicting files each node moves aside (`--replace`), by node.
    pub moves: BTreeMap<NodeName, Vec<String>>,
    /// Seconds between launch and `netplan apply` (so every node changes at about once).
    pub delay_s: u32,
    /// Seconds a node waits for confirmation after `netplan apply` before undoing it.
    pub deadline_s: u32,
}

/// What happened on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeApply {
    pub node: NodeName,
    pub state: TryState,
    /// netplan's complaint, the reason a node did not answer, ...
    pub detail: Vec<String>,
}

/// One verified link.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkCheck {
    pub link: String,
    pub subnet: String,
    pub a: EndResult,
    pub b: EndResult,
    /// Why it was not checked (link-local addresses are chosen at run time; a node failed).
    pub skipped: Option<String>,
}

impl LinkCheck {
    pub fn ok(&self) -> bool {
        self.skipped.is_none()
            && [&self.a, &self.b]
                .iter()
                .all(|e| e.addr == Some(true) && e.route_ok == Some(true) && e.ping == Some(true))
    }
}

/// What `apply` did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ApplyReport {
    pub nodes: Vec<NodeApply>,
    /// Every node kept the new configuration (or already had it).
    pub kept: bool,
    pub links: Vec<LinkCheck>,
}

impl ApplyReport {
    /// Applied (or unchanged) everywhere and every link verified.
    pub fn ok(&self) -> bool {
        self.kept && self.links.iter().all(|l| l.ok())
    }
}

/// Each node's state during an apply, by name.
type States = BTreeMap<NodeName, NodeApply>;

/// What each polled node last answered, or why it did not.
type Answers = BTreeMap<NodeName, Result<TryState, String>>;

/// Carries out `plan` on the nodes of `root` (see the module header). A node that stops
/// answering is reached afresh, as `root` first reached it (its target, options, password).
pub async fn apply(
    plan: &FabricPlan,
    root: &RootPool,
    opts: &FabricApplyOptions,
    reporter: &Arc<dyn Reporter>,
) -> ApplyReport {
    let mut states: States = plan
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                NodeApply {
                    node: n.name.clone(),
                    state: TryState::Unchanged,
                    detail: Vec::new(),
                },
            )
        })
        .collect();
    let changing: Vec<NodeName> = plan
        .nodes
        .iter()
        .filter(|n| n.has_changes())
        .map(|n| n.name.clone())
        .collect();

    // 1. Stage.
    let step = reporter.step(&format!(
        "stage the new files on {} node(s)",
        changing.len()
    ));
    let stage = |name: &NodeName| {
        let node = plan
            .node(name)
            .ok_or_else(|| format!("{name} is not in the plan"))?;
        let moves = opts.moves.get(name).cloned().unwrap_or_default();
        Ok(script::stage(node, &moves))
    };
    let staged =
        reported(as_root_on(&root.pool, &root.privileges, changing.clone(), stage, SHORT).await);
    let mut launch_these = Vec::new();
    let mut failed = false;
    for (name, r) in staged {
        let entry = states.get_mut(&name);
        let Some(e) = entry else { continue };
        match r {
            Ok(TryState::Staged) => {
                e.state = TryState::Staged;
                launch_these.push(name);
            }
            Ok(TryState::Unchanged) => e.state = TryState::Unchanged,
            Ok(other) => {
                e.state = other;
                failed = true;
            }
            Err(why) => {
                e.state = TryState::Failed(why);
                failed = true;
            }
        }
    }
    if failed {
        step.fail("nothing was applied anywhere");
        return ApplyReport {
            nodes: states.into_values().collect(),
            kept: false,
            links: Vec::new(),
        };
    }
    step.ok_with(&format!(
        "{} to apply, {} already as planned",
        launch_these.len(),
        plan.nodes.len() - launch_these.len()
    ));

    let mut kept = true;
    if !launch_these.is_empty() {
        kept = try_apply(&launch_these, root, opts, reporter, &mut states).await;
    }
    let links = if kept {
        verify(plan, &root.pool, reporter).await
    } else {
        Vec::new()
    };
    ApplyReport {
        nodes: plan
            .nodes
            .iter()
            .filter_map(|n| states.remove(&n.name))
            .collect(),
        kept,
        links,
    }
}

/// Steps 2 to 4: launch, poll, then confirm everywhere or undo everywhere. True when every
/// node kept the change.
async fn try_apply(
    nodes: &[NodeName],
    root: &RootPool,
    opts: &FabricApplyOptions,
    reporter: &Arc<dyn Reporter>,
    states: &mut States,
) -> bool {
    let step = reporter.step(&format!(
        "apply on {} node(s) (each undoes it by itself unless confirmed within {} s)",
        nodes.len(),
        opts.deadline_s
    ));
    let attempt = Attempt {
        root,
        opts,
        reporter,
        started: Instant::now(),
    };
    let polling = attempt.launch(nodes, states).await;
    tokio::time::sleep(Duration::from_secs(u64::from(opts.delay_s))).await;
    let answers = attempt.poll(&polling, states).await;
    let all_applied = polling
        .iter()
        .all(|n| matches!(answers.get(n), Some(Ok(TryState::Applied))));
    if all_applied {
        step.ok();
        return attempt.confirm(&polling, states).await;
    }
    step.fail("not every node answered after applying: undoing it everywhere");
    attempt.undo(&polling, &answers, states).await;
    false
}

/// One attempt at applying on the nodes of `root` (steps 2 to 4), each step a method that
/// records what every node said in the states.
struct Attempt<'a> {
    root: &'a RootPool,
    opts: &'a FabricApplyOptions,
    reporter: &'a Arc<dyn Reporter>,
    /// When the launch began: the nodes' deadlines count from here.
    started: Instant,
}

impl Attempt<'_> {
    /// Runs `script` as root on `nodes` at once; every node's last `status` line.
    async fn everywhere(
        &self,
        nodes: Vec<NodeName>,
        script: &str,
        timeout: Duration,
    ) -> Vec<(NodeName, Result<TryState, String>)> {
        reported(
            as_root_on(
                &self.root.pool,
                &self.root.privileges,
                nodes,
                |_| Ok(script.to_string()),
                timeout,
            )
            .await,
        )
    }

    /// Step 2: every node starts its detached attempt. Returns the nodes to poll: those that
    /// launched, and those whose launch got no answer (they may still apply).
    async fn launch(&self, nodes: &[NodeName], states: &mut States) -> Vec<NodeName> {
        let launch = script::launch(self.opts.delay_s, self.opts.deadline_s);
        let launched = self.everywhere(nodes.to_vec(), &launch, SHORT).await;
        let mut polling = Vec::new();
        for (name, r) in launched {
            let Some(e) = states.get_mut(&name) else {
                continue;
            };
            match r {
                Ok(TryState::Launched) => {
                    e.state = TryState::Launched;
                    polling.push(name);
                }
                Ok(other) => e.state = other,
                Err(why) => {
                    e.state = TryState::Failed(format!("launch: {why}"));
                    e.detail.push(
                        "the launch command got no answer: the node may still apply, and then undoes it by itself".into(),
                    );
                    polling.push(name);
                }
            }
        }
        polling
    }

    /// Step 3: polls until every node answered applied (or failed), or one stopped answering.
    async fn poll(&self, polling: &[NodeName], states: &mut States) -> Answers {
        let status = script::status();
        let poll_until = Instant::now() + Duration::from_secs(90);
        let mut answers = Answers::new();
        loop {
            let todo: Vec<NodeName> = polling
                .iter()
                .filter(|n| {
                    !matches!(
                        answers.get(*n),
                        Some(Ok(TryState::Applied
                            | TryState::ApplyFailed
                            | TryState::RolledBack
                            | TryState::RolledBackByItself
                            | TryState::Confirmed))
                    )
                })
                .cloned()
                .collect();
            if todo.is_empty() || Instant::now() >= poll_until {
                break;
            }
            let got = as_root_on(
                &self.root.pool,
                &self.root.privileges,
                todo,
                |_| Ok(status.clone()),
                Duration::from_secs(10),
            )
            .await;
            let mut unreachable = 0;
            for (name, r) in got {
                match r.map(|out| script::parse_status(&out)) {
                    Ok((state, log)) => {
                        if let Some(e) = states.get_mut(&name) {
                            e.detail.extend(log);
                        }
                        answers.insert(name, Ok(state));
                    }
                    Err(why) => {
                        unreachable += 1;
                        answers.insert(name, Err(why));
                    }
                }
            }
            // A node that cannot be reached twice in a row while the others answered has cut
            // itself off: stop waiting for it.
            if unreachable > 0
                && Instant::now()
                    >= crate::clock::later(
                        self.started,
                        Duration::from_secs(u64::from(self.opts.delay_s) + 15),
                    )
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        answers
    }

    /// Step 4 when every node applied: confirm everywhere. True when every node confirmed.
    async fn confirm(&self, polling: &[NodeName], states: &mut States) -> bool {
        let step = self
            .reporter
            .step(&format!("confirm on {} node(s)", polling.len()));
        let confirmed = self
            .everywhere(polling.to_vec(), &script::confirm(), SHORT)
            .await;
        let mut all = true;
        for (name, r) in confirmed {
            let state = r.unwrap_or_else(TryState::Failed);
            all &= state == TryState::Confirmed;
            if let Some(e) = states.get_mut(&name) {
                e.state = state;
            }
        }
        if all {
            step.ok();
            return true;
        }
        step.fail("a node undid the change before the confirmation reached it");
        false
    }

    /// Step 4 otherwise: undo now on the nodes that answer; the others undo it by themselves
    /// at their deadline, which is waited out and then read.
    async fn undo(&self, polling: &[NodeName], answers: &Answers, states: &mut States) {
        let step = self.reporter.step("undo the change on every node");
        let answering: Vec<NodeName> = polling
            .iter()
            .filter(|n| matches!(answers.get(*n), Some(Ok(_))))
            .cloned()
            .collect();
        let undone = self
            .everywhere(answering, &script::abort(), Duration::from_secs(120))
            .await;
        for (name, r) in undone {
            if let Some(e) = states.get_mut(&name) {
                e.state = match r {
                    Ok(TryState::None) => e.state.clone(),
                    Ok(s) => s,
                    Err(why) => TryState::Failed(format!("undo: {why}")),
                };
            }
        }
        let silent: Vec<NodeName> = polling
            .iter()
            .filter(|n| !matches!(answers.get(*n), Some(Ok(_))))
            .cloned()
            .collect();
        if !silent.is_empty() {
            self.await_silent(&silent, answers, states).await;
        }
        let all_undone = states.values().all(|e| {
            matches!(
                e.state,
                TryState::Unchanged
                    | TryState::RolledBack
                    | TryState::RolledBackByItself
                    | TryState::ApplyFailed
            )
        });
        if all_undone {
            step.ok();
        } else {
            step.fail("not every node could be seen undoing it");
        }
    }

    /// The nodes that stopped answering: waits until their deadline has passed, reconnects
    /// and reads that they undid the change by themselves.
    async fn await_silent(&self, silent: &[NodeName], answers: &Answers, states: &mut States) {
        let deadline_s = self.opts.deadline_s;
        for n in silent {
            if let (Some(e), Some(Err(why))) = (states.get_mut(n), answers.get(n)) {
                e.detail.push(format!(
                    "stopped answering after the change was applied ({why}); it undoes the change by itself within {deadline_s} s"
                ));
            }
        }
        // The moment after which a node that got no confirmation has undone the change.
        let undo_by = crate::clock::later(
            self.started,
            Duration::from_secs(u64::from(self.opts.delay_s) + u64::from(deadline_s) + 60),
        );
        let wait = undo_by
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(u64::from(deadline_s) + 30));
        self.reporter.info(&format!(
            "waiting {} s for {} node(s) to undo the change by themselves",
            wait.as_secs(),
            silent.len()
        ));
        tokio::time::sleep(wait).await;
        let again: Vec<SshTarget> = self
            .root
            .targets
            .iter()
            .filter(|t| silent.contains(&t.name))
            .cloned()
            .collect();
        let seen = reconnect_status(
            &again,
            &self.root.ssh,
            &self.root.passwords,
            &self.root.privileges,
        )
        .await;
        for (name, r) in seen {
            if let Some(e) = states.get_mut(&name) {
                match r {
                    Ok(s) => e.state = s,
                    Err(why) => {
                        e.state = TryState::Failed(format!(
                            "still unreachable after its deadline: {why}"
                        ));
                    }
                }
            }
        }
    }
}

/// Connects afresh to `targets` and reads each one's attempt state.
async fn reconnect_status(
    targets: &[SshTarget],
    ssh: &SshOptions,
    passwords: &BTreeMap<NodeName, Password>,
    privileges: &Privileges,
) -> Vec<(NodeName, Result<TryState, String>)> {
    let mut pool = match Pool::new(ssh.clone()) {
        Ok(p) => p,
        Err(e) => {
            return targets
                .iter()
                .map(|t| (t.name.clone(), Err(e.to_string())))
                .collect();
        }
    };
    let mut failed = BTreeMap::new();
    for t in targets {
        let pw = passwords.get(&t.name);
        for (n, e) in pool.connect_all(std::slice::from_ref(t), pw).await {
            failed.insert(n, e.to_string());
        }
    }
    let status = script::status();
    let names: Vec<NodeName> = targets.iter().map(|t| t.name.clone()).collect();
    let reached: Vec<NodeName> = names
        .iter()
        .filter(|n| !failed.contains_key(*n))
        .cloned()
        .collect();
    let mut seen: BTreeMap<NodeName, Result<TryState, String>> =
        reported(as_root_on(&pool, privileges, reached, |_| Ok(status.clone()), SHORT).await)
            .into_iter()
            .collect();
    let out = names
        .into_iter()
        .map(|n| {
            let r = match failed.remove(&n) {
                Some(why) => Err(why),
                None => seen
                    .remove(&n)
                    .unwrap_or_else(|| Err("no answer".to_string())),
            };
            (n, r)
        })
        .collect();
    pool.close().await;
    out
}

/// Step 5: every node checks its ends of every link at once.
pub async fn verify(
    plan: &FabricPlan,
    pool: &Pool,
    reporter: &Arc<dyn Reporter>,
) -> Vec<LinkCheck> {
    let step = reporter.step(&format!(
        "verify {} link(s): addresses, routes, ping at MTU {}",
        plan.links.len(),
        plan.mtu
    ));
    let names: Vec<NodeName> = plan.nodes.iter().map(|n| n.name.clone()).collect();
    let results = for_each_node(names, 0, |name| async move {
        let checks: Vec<LinkEndCheck> = script::checks_for(plan, &name);
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let h = pool.get(&name).map_err(|e| e.to_string())?;
        let out = h
            .output(
                &["sh", "-c", &script::verify(&checks)],
                &RunOptions::timeout(Duration::from_secs(60)),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(script::parse_verify(&out.stdout_text()))
    })
    .await;
    let mut per_node: Verified = results.into_iter().collect();
    let mut links = Vec::new();
    for (k, l) in plan.links.iter().enumerate() {
        links.push(link_check(k, l, &mut per_node));
    }
    let bad = links.iter().filter(|l| !l.ok()).count();
    if bad == 0 {
        step.ok();
    } else {
        step.fail(&format!("{bad} link(s) failed"));
    }
    links
}

/// What each node's verification printed, per link index (or why it printed nothing).
type Verified = BTreeMap<NodeName, Result<Vec<(usize, EndResult)>, String>>;

fn link_check(k: usize, l: &PlannedLink, per_node: &mut Verified) -> LinkCheck {
    let mut skipped = None;
    if l.a_addr.is_none() || l.b_addr.is_none() {
        skipped = Some(
            "link-local addresses are chosen on the node at run time: run `spark-launch doctor` to check this link".to_string(),
        );
    }
    let mut end = |node: &NodeName| -> EndResult {
        match per_node.get(node) {
            Some(Ok(v)) => v
                .iter()
                .find(|(i, _)| *i == k)
                .map(|(_, r)| r.clone())
                .unwrap_or_default(),
            Some(Err(why)) => {
                if skipped.is_none() {
                    skipped = Some(format!("{node} could not check: {why}"));
                }
                EndResult::default()
            }
            None => EndResult::default(),
        }
    };
    let a = end(&l.a.node);
    let b = end(&l.b.node);
    LinkCheck {
        link: format!("{} ↔ {}", l.a, l.b),
        subnet: l.subnet.to_string(),
        a,
        b,
        skipped,
    }
}

/// `fabric rollback` on every node at once.
pub async fn rollback(
    pool: &Pool,
    privileges: &Privileges,
    reporter: &Arc<dyn Reporter>,
) -> Vec<(NodeName, Result<RollbackReport, String>)> {
    let step = reporter.step(&format!(
        "restore the backups and interfaces on {} node(s)",
        pool.names().len()
    ));
    let rollback = script::rollback();
    let out: Vec<(NodeName, Result<RollbackReport, String>)> = as_root_on(
        pool,
        privileges,
        pool.names(),
        |_| Ok(rollback.clone()),
        Duration::from_secs(120),
    )
    .await
    .into_iter()
    .map(|(n, r)| (n, r.map(|out| script::parse_rollback(&out))))
    .collect();
    if out
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|x| x.left.is_empty() && !x.busy))
    {
        step.ok();
    } else {
        step.fail("");
    }
    out
}
