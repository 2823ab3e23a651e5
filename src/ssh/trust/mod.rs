//! `trust`: every node can SSH to every other node with public keys only. Each node keeps (or
//! gets) its own ed25519 key; its public key goes into every other node's `authorized_keys`;
//! each node gets a scoped `Host` block per other node in `~/.ssh/config` and the other nodes'
//! host keys in spark-launch's own known-hosts file; then `hostname` is run from every node to
//! every other node. No private key ever leaves its node.
//!
//! The caller connects the pool (first contact may use a password, see `trust`);
//! [`establish`] then reads every node, plans (`plan`, pure), writes only what is missing, and
//! verifies. A node that fails at any step is reported with its reason and left out of the
//! following steps; the others carry on.

pub mod config;
pub mod connect;
pub mod keys;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use tokio::process::Command;

use crate::node::NodeName;
use crate::node::for_each_node;
use crate::progress::Reporter;

use super::error::{ConnectFailure, SshError, stderr_tail};
use super::exec::{RunOptions, run_child};
use super::handle::NodeHandle;
use super::pool::{Pool, SshTarget};
use config::HostEntry;
use plan::{NodeState, NodeTrustPlan, SshDir, SshDirFix};

/// One cell of the verification matrix: `ssh TO hostname` run on FROM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustPairResult {
    pub from: NodeName,
    pub to: NodeName,
    /// The hostname printed, or why it failed.
    pub outcome: Result<String, String>,
}

/// What `establish` did.
#[derive(Clone, Debug, Default)]
pub struct TrustReport {
    /// The nodes that took part (reached and read), head first.
    pub nodes: Vec<NodeName>,
    /// Nodes that got a new key pair.
    pub generated: Vec<NodeName>,
    /// Per node, what changed (empty when nothing did).
    pub changes: Vec<(NodeName, Vec<String>)>,
    /// Nodes that failed during a step, with the reason.
    pub failed: Vec<(NodeName, String)>,
    pub matrix: Vec<TrustPairResult>,
}

impl TrustReport {
    /// True when no file was written on any node.
    pub fn unchanged(&self) -> bool {
        self.generated.is_empty() && self.changes.iter().all(|(_, c)| c.is_empty())
    }

    /// True when every step succeeded on every node and every pair can SSH.
    pub fn all_ok(&self) -> bool {
        self.failed.is_empty() && self.matrix.iter().all(|p| p.outcome.is_ok())
    }
}

/// Reads, plans, writes and verifies trust between every node of `pool` (all connected).
/// `targets` says how each node is reached (for the `Host` blocks and `ssh-keyscan`). With
/// `dry_run`, nothing is written: keys that would be created stand in as placeholders, the
/// report lists what would change, and the matrix shows the pairs that work today.
pub async fn establish(
    pool: &Pool,
    targets: &[SshTarget],
    reporter: &Arc<dyn Reporter>,
    dry_run: bool,
) -> TrustReport {
    let run = Establish {
        pool,
        targets,
        reporter,
        dry_run,
    };
    let mut report = TrustReport::default();
    let names: Vec<NodeName> = pool.names();
    let mut states = run.read(&names, &mut report).await;
    run.give_keys(&mut states, &mut report).await;
    let host_keys = run.scan_host_keys(&mut states, &mut report).await;
    let plans = run.plan_and_write(&states, &host_keys, &mut report).await;
    report.nodes = names
        .iter()
        .filter(|n| states.iter().any(|s| &s.name == *n))
        .cloned()
        .collect();
    run.verify(&plans, &mut report).await;
    report
}

/// One `establish` run: its steps, in order, each leaving out the nodes that failed before.
struct Establish<'a> {
    pool: &'a Pool,
    targets: &'a [SshTarget],
    reporter: &'a Arc<dyn Reporter>,
    dry_run: bool,
}

impl Establish<'_> {
    /// Step 1: read what is there.
    async fn read(&self, names: &[NodeName], report: &mut TrustReport) -> Vec<NodeState> {
        let pool = self.pool;
        let step = self.reporter.step(&format!(
            "read keys and ssh configs on {} nodes",
            names.len()
        ));
        let read = for_each_node(names.to_vec(), pool.limit, |n| async move {
            gather(pool.get(&n)?).await
        })
        .await;
        let mut states: Vec<NodeState> = Vec::new();
        for (n, r) in read {
            match r {
                Ok(s) => states.push(s),
                Err(e) => report.failed.push((n, e.reason())),
            }
        }
        end(step, &report.failed, states.len());
        states
    }

    /// Step 2: give every node that has none its own key (a dry run: a placeholder).
    async fn give_keys(&self, states: &mut Vec<NodeState>, report: &mut TrustReport) {
        let pool = self.pool;
        let missing: Vec<NodeName> = states
            .iter()
            .filter(|s| s.public_key.is_none())
            .map(|s| s.name.clone())
            .collect();
        if missing.is_empty() {
            return;
        }
        if self.dry_run {
            for s in states.iter_mut().filter(|s| s.public_key.is_none()) {
                s.public_key = Some(format!(
                    "ssh-ed25519 (the-new-key-of-{}) spark-launch@{}",
                    s.name, s.name
                ));
                report.generated.push(s.name.clone());
            }
            return;
        }
        let step = self.reporter.step(&format!(
            "create an ed25519 key on {}",
            missing
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let made = for_each_node(missing.clone(), pool.limit, |n| async move {
            generate_key(pool.get(&n).map_err(|e| e.reason())?).await
        })
        .await;
        let mut bad = Vec::new();
        for (n, r) in made {
            match r {
                Ok(public) => {
                    if let Some(s) = states.iter_mut().find(|s| s.name == n) {
                        s.public_key = Some(public);
                        s.ssh_dir = SshDir::Mode(0o700);
                    }
                    report.generated.push(n);
                }
                Err(e) => bad.push((n, e)),
            }
        }
        states.retain(|s| !bad.iter().any(|(n, _)| *n == s.name));
        end(step, &bad, states.len());
        report.failed.extend(bad);
    }

    /// Step 3: every node's host keys, as its sshd serves them (and as first contact accepted).
    async fn scan_host_keys(
        &self,
        states: &mut Vec<NodeState>,
        report: &mut TrustReport,
    ) -> BTreeMap<NodeName, Vec<String>> {
        let targets = self.targets;
        let step = self.reporter.step("read host keys (ssh-keyscan)");
        let scanned = for_each_node(
            states.iter().map(|s| s.name.clone()),
            self.pool.limit,
            |n| async move {
                let t = targets
                    .iter()
                    .find(|t| t.name == n)
                    .ok_or_else(|| format!("{n} is not a target"))?;
                keyscan(t).await
            },
        )
        .await;
        let mut host_keys: BTreeMap<NodeName, Vec<String>> = BTreeMap::new();
        let mut bad = Vec::new();
        let learned = self
            .pool
            .learned_hosts()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        for (n, r) in scanned {
            match r.and_then(|keys| check_learned(&n, &keys, &learned).map(|_| keys)) {
                Ok(keys) => {
                    host_keys.insert(n, keys);
                }
                Err(e) => bad.push((n, e)),
            }
        }
        states.retain(|s| !bad.iter().any(|(n, _)| *n == s.name));
        end(step, &bad, states.len());
        report.failed.extend(bad);
        host_keys
    }

    /// Step 4: plan (pure), then write only what is missing (nothing on a dry run); records
    /// what changed, or would, per node.
    async fn plan_and_write(
        &self,
        states: &[NodeState],
        host_keys: &BTreeMap<NodeName, Vec<String>>,
        report: &mut TrustReport,
    ) -> Vec<NodeTrustPlan> {
        let pool = self.pool;
        let entries: Vec<HostEntry> = self
            .targets
            .iter()
            .filter(|t| states.iter().any(|s| s.name == t.name))
            .map(|t| HostEntry {
                name: t.name.clone(),
                addresses: t.addresses.clone(),
                user: t.user.clone(),
                port: t.port,
            })
            .collect();
        let mut plans: Vec<NodeTrustPlan> = Vec::new();
        for (n, p) in plan::plan(states, &entries, host_keys) {
            match p {
                Ok(p) => plans.push(p),
                Err(e) => report.failed.push((n, e.to_string())),
            }
        }
        let todo: Vec<&NodeTrustPlan> = plans.iter().filter(|p| !p.is_noop()).collect();
        if !todo.is_empty() && !self.dry_run {
            let step = self.reporter.step(&format!(
                "write keys, Host entries and host keys on {} node{}",
                todo.len(),
                if todo.len() == 1 { "" } else { "s" }
            ));
            let plans_ref = &plans;
            let applied = for_each_node(
                todo.iter().map(|p| p.name.clone()),
                pool.limit,
                |n| async move {
                    let p = plans_ref
                        .iter()
                        .find(|p| p.name == n)
                        .ok_or_else(|| format!("no plan for {n}"))?;
                    apply(pool.get(&n).map_err(|e| e.reason())?, p).await
                },
            )
            .await;
            let mut bad = Vec::new();
            for (n, r) in applied {
                if let Err(e) = r {
                    bad.push((n, e));
                }
            }
            end(step, &bad, todo.len() - bad.len());
            report.failed.extend(bad);
        }
        for p in &plans {
            let mut c = Vec::new();
            if report.generated.contains(&p.name) {
                c.push(if self.dry_run {
                    "would create its key ~/.ssh/id_ed25519".to_string()
                } else {
                    "created its key ~/.ssh/id_ed25519".to_string()
                });
            }
            c.extend(p.summary());
            report.changes.push((p.name.clone(), c));
        }
        plans
    }

    /// Step 5: verify, `hostname` from every node to every other node, through the new entries.
    async fn verify(&self, plans: &[NodeTrustPlan], report: &mut TrustReport) {
        let pool = self.pool;
        let ok_nodes: Vec<NodeName> = plans
            .iter()
            .map(|p| p.name.clone())
            .filter(|n| !report.failed.iter().any(|(f, _)| f == n))
            .collect();
        let step = self.reporter.step(&format!(
            "verify ssh between every pair of {} nodes",
            ok_nodes.len()
        ));
        let ok_ref = &ok_nodes;
        let rows = for_each_node(ok_nodes.clone(), pool.limit, |from| async move {
            let h = pool.get(&from).map_err(|e| e.reason())?;
            let mut row = Vec::new();
            for to in ok_ref.iter().filter(|t| **t != from) {
                row.push(TrustPairResult {
                    from: from.clone(),
                    to: to.clone(),
                    outcome: ssh_hostname(h, to).await,
                });
            }
            Ok::<_, String>(row)
        })
        .await;
        for (n, r) in rows {
            match r {
                Ok(row) => report.matrix.extend(row),
                Err(e) => report.failed.push((n, e)),
            }
        }
        let bad_pairs = report.matrix.iter().filter(|p| p.outcome.is_err()).count();
        if bad_pairs == 0 {
            step.ok_with(&format!("{} pairs", report.matrix.len()));
        } else {
            step.fail(&format!(
                "{bad_pairs} of {} pairs failed",
                report.matrix.len()
            ));
        }
    }
}

fn end(step: crate::progress::ProgressStep, bad: &[(NodeName, String)], ok: usize) {
    if bad.is_empty() {
        step.ok();
    } else {
        step.fail(&format!("{} failed, {ok} ok", bad.len()));
    }
}

/// Reads `~/.ssh` of one node (one round trip, file contents base64-encoded so every byte
/// comes back exactly).
async fn gather(h: &NodeHandle) -> Result<NodeState, SshError> {
    const SCRIPT: &str = r#"
cd "$HOME" || exit 3
emit() { if [ -f "$2" ]; then printf '%s=' "$1"; base64 < "$2" | tr -d '\n'; printf '\n'; else printf '%s=-\n' "$1"; fi; }
printf 'hostname=%s\n' "$(cat /proc/sys/kernel/hostname)"
if [ -d .ssh ]; then printf 'sshdir=%s\n' "$(stat -c %a .ssh)"; else echo 'sshdir=-'; fi
emit pub .ssh/id_ed25519.pub
if [ -f .ssh/id_ed25519 ]; then echo 'private=1'; else echo 'private=0'; fi
emit authorized_keys .ssh/authorized_keys
emit config .ssh/config
emit known_hosts .ssh/spark-launch_known_hosts
"#;
    let out = h
        .run_with(
            &["sh", "-c", SCRIPT],
            &RunOptions::timeout(Duration::from_secs(30)),
        )
        .await?;
    parse_gather(h.name(), &out.stdout_text())
}

fn parse_gather(node: &NodeName, text: &str) -> Result<NodeState, SshError> {
    let fields: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let invalid = |what: &str| SshError::Invalid {
        node: node.clone(),
        message: format!("reading ~/.ssh gave no {what} (is `base64` installed there?)"),
    };
    let file = |k: &str| -> Result<Option<String>, SshError> {
        match fields.get(k) {
            None => Err(invalid(k)),
            Some(&"-") => Ok(None),
            Some(v) => base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .map(|b| Some(String::from_utf8_lossy(&b).into_owned()))
                .map_err(|_| invalid(k)),
        }
    };
    let ssh_dir = match fields.get("sshdir") {
        Some(&"-") => SshDir::Missing,
        Some(m) => SshDir::Mode(u32::from_str_radix(m.trim(), 8).map_err(|_| invalid("sshdir"))?),
        None => return Err(invalid("sshdir")),
    };
    Ok(NodeState {
        name: node.clone(),
        hostname: fields.get("hostname").unwrap_or(&"").trim().to_string(),
        ssh_dir,
        public_key: file("pub")?
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty()),
        has_private_key: fields.get("private") == Some(&"1"),
        authorized_keys: file("authorized_keys")?,
        config: file("config")?,
        known_hosts: file("known_hosts")?,
    })
}

/// Creates `~/.ssh/id_ed25519` (no passphrase: the cluster's launches run unattended) or,
/// when only the private key exists, its `.pub`; returns the public key.
async fn generate_key(h: &NodeHandle) -> Result<String, String> {
    let script = format!(
        r#"set -e
umask 077
mkdir -p "$HOME/.ssh"
chmod 700 "$HOME/.ssh"
if [ ! -f "$HOME/.ssh/id_ed25519" ]; then
  ssh-keygen -q -t ed25519 -N '' -C 'spark-launch@{node}' -f "$HOME/.ssh/id_ed25519" </dev/null >/dev/null
elif [ ! -f "$HOME/.ssh/id_ed25519.pub" ]; then
  ssh-keygen -y -f "$HOME/.ssh/id_ed25519" </dev/null >"$HOME/.ssh/id_ed25519.pub.tmp"
  mv "$HOME/.ssh/id_ed25519.pub.tmp" "$HOME/.ssh/id_ed25519.pub"
fi
cat "$HOME/.ssh/id_ed25519.pub"
"#,
        node = h.name()
    );
    let out = h
        .run_with(
            &["sh", "-c", &script],
            &RunOptions::timeout(Duration::from_secs(30)),
        )
        .await
        .map_err(|e| {
            format!(
                "cannot create ~/.ssh/id_ed25519 (a key with a passphrase needs its .pub next to it): {}",
                e.reason()
            )
        })?;
    let key = out.stdout_text().trim().to_string();
    if keys::key_id(&key).is_none() {
        return Err(format!(
            "~/.ssh/id_ed25519.pub is not a public key: {key:?}"
        ));
    }
    Ok(key)
}

/// The host keys a node's sshd serves, from this machine.
async fn keyscan(t: &SshTarget) -> Result<Vec<String>, String> {
    let addr = t
        .addresses
        .first()
        .ok_or_else(|| "no address to scan".to_string())?;
    let mut cmd = Command::new("ssh-keyscan");
    cmd.args([
        "-T",
        "5",
        "-t",
        "ed25519,ecdsa,rsa",
        "-p",
        &t.port.to_string(),
        "--",
        addr,
    ]);
    let shown = format!("ssh-keyscan -p {} {addr}", t.port);
    let out = run_child(
        &t.name,
        cmd,
        &shown,
        &RunOptions::timeout(Duration::from_secs(20)),
    )
    .await
    .map_err(|e| e.reason())?;
    let keys = keys::parse_keyscan(&out.stdout_text());
    if keys.is_empty() {
        return Err(format!(
            "`{shown}` returned no host key: {}",
            stderr_tail(&out.stderr, 2)
        ));
    }
    Ok(keys)
}

/// The key ssh accepted at first contact (recorded under the node's name in the private
/// learned-hosts file) must be one that `ssh-keyscan` saw too.
fn check_learned(node: &NodeName, scanned: &[String], learned: &str) -> Result<(), String> {
    for line in learned.lines() {
        let mut w = line.split_whitespace();
        let (Some(host), Some(t), Some(k)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        if host.split(',').any(|h| h == node.as_str()) && !scanned.contains(&format!("{t} {k}")) {
            return Err(format!(
                "the host key ssh accepted ({t}) is not among those ssh-keyscan reports: someone may be in between; not trusting this node"
            ));
        }
    }
    Ok(())
}

/// Writes one node's plan: appends to `authorized_keys` and `~/.ssh/config` (or replaces our
/// own blocks in place), rewrites spark-launch's known-hosts file. User lines are never touched.
async fn apply(h: &NodeHandle, p: &NodeTrustPlan) -> Result<(), String> {
    let run = |script: &'static str, stdin: Option<String>| async move {
        let opts = RunOptions {
            stdin: stdin.map(String::into_bytes),
            timeout: Some(Duration::from_secs(30)),
        };
        h.run_with(&["sh", "-c", script], &opts)
            .await
            .map(|_| ())
            .map_err(|e| e.reason())
    };
    match p.ssh_dir {
        Some(SshDirFix::Create) => {
            run(
                r#"umask 077 && mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh""#,
                None,
            )
            .await?
        }
        Some(SshDirFix::Chmod { .. }) => run(r#"chmod 700 "$HOME/.ssh""#, None).await?,
        None => {}
    }
    if !p.authorized_append.is_empty() {
        run(
            r#"umask 077 && cat >> "$HOME/.ssh/authorized_keys""#,
            Some(p.authorized_append.clone()),
        )
        .await?;
    }
    if let Some(c) = &p.config {
        match &p.config_append {
            // Only the new bytes: the file (or the file a symlink points to) keeps its own.
            Some(tail) => {
                run(
                    r#"umask 077 && cat >> "$HOME/.ssh/config""#,
                    Some(tail.clone()),
                )
                .await?
            }
            // Our own block changed in place: write the whole text back into the same file
            // (truncate and write, so a symlinked config and its mode stay as they are).
            None => {
                run(
                    r#"umask 077 && cat > "$HOME/.ssh/config""#,
                    Some(c.text.clone()),
                )
                .await?
            }
        }
    }
    if let Some(k) = &p.known_hosts {
        run(
            r#"umask 077 && cat > "$HOME/.ssh/spark-launch_known_hosts""#,
            Some(k.clone()),
        )
        .await?;
    }
    Ok(())
}

/// `ssh TO cat /proc/sys/kernel/hostname` run on `h`, through its `~/.ssh/config`.
async fn ssh_hostname(h: &NodeHandle, to: &NodeName) -> Result<String, String> {
    let argv = [
        "ssh",
        "-n",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "LogLevel=ERROR",
        "--",
        to.as_str(),
        "cat",
        "/proc/sys/kernel/hostname",
    ];
    match h
        .output(&argv, &RunOptions::timeout(Duration::from_secs(20)))
        .await
    {
        Ok(out) if out.success() => Ok(out.stdout_text().trim().to_string()),
        Ok(out) => {
            let text = out.stderr_text();
            let why = match ConnectFailure::classify(&text) {
                ConnectFailure::AuthFailed => "permission denied (the key is not accepted)",
                ConnectFailure::HostKeyChanged => "host key changed",
                ConnectFailure::HostKeyUnknown => "host key unknown",
                ConnectFailure::Refused => "connection refused",
                ConnectFailure::Timeout => "timed out",
                ConnectFailure::NoRoute => "no route to host",
                ConnectFailure::Unresolved => "name does not resolve (no Host entry?)",
                _ => "",
            };
            let tail = stderr_tail(&out.stderr, 1);
            Err(if why.is_empty() {
                format!("exit {}: {tail}", out.code)
            } else {
                format!("{why}: {tail}")
            })
        }
        Err(e) => Err(e.reason()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_read_on_a_node_comes_back_byte_for_byte() {
        let enc = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let text = format!(
            "hostname=spark-b\nsshdir=700\npub={}\nprivate=1\nauthorized_keys={}\nconfig=-\nknown_hosts=\n",
            enc("ssh-ed25519 AAAA x\n"),
            enc("line without newline")
        );
        let s = parse_gather(&NodeName::new("b").unwrap(), &text).unwrap();
        assert_eq!(s.hostname, "spark-b");
        assert_eq!(s.ssh_dir, SshDir::Mode(0o700));
        assert_eq!(s.public_key.as_deref(), Some("ssh-ed25519 AAAA x"));
        assert_eq!(s.authorized_keys.as_deref(), Some("line without newline"));
        assert_eq!(s.config, None);
        assert_eq!(s.known_hosts.as_deref(), Some(""));
        assert!(parse_gather(&NodeName::new("b").unwrap(), "oops").is_err());
    }

    #[test]
    fn a_host_key_that_keyscan_does_not_confirm_is_refused() {
        let n = NodeName::new("b").unwrap();
        let scanned = vec!["ssh-ed25519 GOOD".to_string()];
        assert!(check_learned(&n, &scanned, "b ssh-ed25519 GOOD\nc ssh-rsa X\n").is_ok());
        assert!(check_learned(&n, &scanned, "b ssh-ed25519 EVIL\n").is_err());
    }
}
