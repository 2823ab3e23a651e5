//! What `trust` will change on each node, decided from what it read there: which public keys
//! to append to `authorized_keys`, which `Host` blocks to add to `~/.ssh/config`, which host
//! keys spark-launch's known-hosts file must hold, and whether `~/.ssh` must be created or
//! have its mode fixed. Plain data, so an unchanged cluster is answered "nothing to change"
//! before anything is written. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::node::NodeName;

use super::config::{self, BrokenBlock, ConfigEdit, HostEntry};
use super::keys;

/// `~/.ssh` as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SshDir {
    Missing,
    /// Present, with these permission bits.
    Mode(u32),
}

/// What was read on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    pub name: NodeName,
    pub hostname: String,
    pub ssh_dir: SshDir,
    /// The node's own public key (`~/.ssh/id_ed25519.pub`).
    pub public_key: Option<String>,
    /// True when the private key exists (with or without its `.pub`).
    pub has_private_key: bool,
    /// File contents; `None` when the file does not exist.
    pub authorized_keys: Option<String>,
    pub config: Option<String>,
    pub known_hosts: Option<String>,
}

/// How `~/.ssh` must be fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SshDirFix {
    /// Create it with mode 0700.
    Create,
    /// It is writable by group or others, which sshd refuses (`StrictModes`): set 0700.
    Chmod { from: u32 },
}

/// The changes for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTrustPlan {
    pub name: NodeName,
    pub ssh_dir: Option<SshDirFix>,
    /// Key lines to append to `authorized_keys`, and the exact bytes to append.
    pub authorize: Vec<String>,
    pub authorized_append: String,
    /// The new `~/.ssh/config`, when it changes.
    pub config: Option<ConfigEdit>,
    /// When the change only adds bytes at the end: those bytes.
    pub config_append: Option<String>,
    /// The new known-hosts file (spark-launch's own), when it changes.
    pub known_hosts: Option<String>,
    /// How many nodes' host keys it holds after the change.
    pub known_nodes: usize,
}

impl NodeTrustPlan {
    pub fn is_noop(&self) -> bool {
        self.ssh_dir.is_none()
            && self.authorize.is_empty()
            && self.config.is_none()
            && self.known_hosts.is_none()
    }

    /// One short phrase per change (`authorized 2 keys`).
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.ssh_dir {
            Some(SshDirFix::Create) => out.push("created ~/.ssh (0700)".to_string()),
            Some(SshDirFix::Chmod { from }) => out.push(format!(
                "set ~/.ssh to 0700 (was {from:o}; sshd refuses it otherwise)"
            )),
            None => {}
        }
        if !self.authorize.is_empty() {
            out.push(format!(
                "authorized {} key{} in ~/.ssh/authorized_keys",
                self.authorize.len(),
                plural(self.authorize.len())
            ));
        }
        if let Some(c) = &self.config {
            if !c.added.is_empty() {
                out.push(format!("added Host {} to ~/.ssh/config", names(&c.added)));
            }
            if !c.updated.is_empty() {
                out.push(format!(
                    "updated Host {} in ~/.ssh/config",
                    names(&c.updated)
                ));
            }
        }
        if self.known_hosts.is_some() {
            out.push(format!(
                "recorded the host keys of {} node{} in ~/{}",
                self.known_nodes,
                plural(self.known_nodes),
                config::KNOWN_HOSTS
            ));
        }
        out
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

use crate::node::join as names;

/// Plans every node: each trusts every other node's key, has a `Host` block for every other
/// node, and knows every other node's host keys. `entries` and `host_keys` cover all nodes.
pub fn plan(
    states: &[NodeState],
    entries: &[HostEntry],
    host_keys: &BTreeMap<NodeName, Vec<String>>,
) -> Vec<(NodeName, Result<NodeTrustPlan, BrokenBlock>)> {
    states
        .iter()
        .map(|s| (s.name.clone(), plan_node(s, states, entries, host_keys)))
        .collect()
}

fn plan_node(
    s: &NodeState,
    all: &[NodeState],
    entries: &[HostEntry],
    host_keys: &BTreeMap<NodeName, Vec<String>>,
) -> Result<NodeTrustPlan, BrokenBlock> {
    let ssh_dir = match s.ssh_dir {
        SshDir::Missing => Some(SshDirFix::Create),
        SshDir::Mode(m) if m & 0o022 != 0 => Some(SshDirFix::Chmod { from: m }),
        SshDir::Mode(_) => None,
    };
    let others: Vec<&NodeState> = all.iter().filter(|o| o.name != s.name).collect();
    let wanted: Vec<String> = others.iter().filter_map(|o| o.public_key.clone()).collect();
    let existing_keys = s.authorized_keys.as_deref().unwrap_or("");
    let authorize = keys::missing_keys(existing_keys, &wanted);
    let authorized_append = if authorize.is_empty() {
        String::new()
    } else {
        keys::append_text(existing_keys, &authorize)
    };
    let other_entries: Vec<HostEntry> = entries
        .iter()
        .filter(|e| e.name != s.name && others.iter().any(|o| o.name == e.name))
        .cloned()
        .collect();
    let existing_config = s.config.as_deref().unwrap_or("");
    let edit = config::merge(existing_config, &other_entries)?;
    let config_append = (edit.append_only() && !edit.is_noop())
        .then(|| edit.text.strip_prefix(existing_config).map(str::to_string))
        .flatten();
    let known: BTreeMap<NodeName, Vec<String>> = host_keys
        .iter()
        .filter(|(n, k)| **n != s.name && !k.is_empty() && others.iter().any(|o| &o.name == *n))
        .map(|(n, k)| (n.clone(), k.clone()))
        .collect();
    let known_nodes = known.len();
    let known_hosts = keys::known_hosts(s.known_hosts.as_deref().unwrap_or(""), &known);
    Ok(NodeTrustPlan {
        name: s.name.clone(),
        ssh_dir,
        authorize,
        authorized_append,
        config: (!edit.is_noop()).then_some(edit),
        config_append,
        known_hosts,
        known_nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    fn state(name: &str) -> NodeState {
        NodeState {
            name: n(name),
            hostname: name.into(),
            ssh_dir: SshDir::Missing,
            public_key: Some(format!("ssh-ed25519 AAAAkey{name} spark-launch@{name}")),
            has_private_key: true,
            authorized_keys: None,
            config: None,
            known_hosts: None,
        }
    }

    fn entry(name: &str) -> HostEntry {
        HostEntry {
            name: n(name),
            addresses: vec![format!("10.0.0.{}", name.len())],
            user: None,
            port: 22,
        }
    }

    fn keys_of(names: &[&str]) -> BTreeMap<NodeName, Vec<String>> {
        names
            .iter()
            .map(|x| (n(x), vec![format!("ssh-ed25519 HOST{x}")]))
            .collect()
    }

    #[test]
    fn from_zero_every_node_gets_the_others_keys_blocks_and_host_keys() {
        let states = vec![state("a"), state("bb"), state("ccc")];
        let entries = vec![entry("a"), entry("bb"), entry("ccc")];
        let plans = plan(&states, &entries, &keys_of(&["a", "bb", "ccc"]));
        let a = plans[0].1.as_ref().unwrap();
        assert_eq!(a.ssh_dir, Some(SshDirFix::Create));
        assert_eq!(a.authorize.len(), 2);
        assert!(
            !a.authorized_append.contains("AAAAkeya "),
            "not its own key"
        );
        let cfg = a.config.as_ref().unwrap();
        assert_eq!(cfg.added, vec![n("bb"), n("ccc")]);
        let kh = a.known_hosts.as_ref().unwrap();
        assert_eq!(kh, "bb ssh-ed25519 HOSTbb\nccc ssh-ed25519 HOSTccc\n");
        assert_eq!(
            a.summary(),
            vec![
                "created ~/.ssh (0700)",
                "authorized 2 keys in ~/.ssh/authorized_keys",
                "added Host bb, ccc to ~/.ssh/config",
                "recorded the host keys of 2 nodes in ~/.ssh/spark-launch_known_hosts"
            ]
        );
    }

    #[test]
    fn once_applied_the_same_cluster_plans_nothing() {
        let states = vec![state("a"), state("bb")];
        let entries = vec![entry("a"), entry("bb")];
        let hk = keys_of(&["a", "bb"]);
        let first = plan(&states, &entries, &hk);
        let applied: Vec<NodeState> = states
            .iter()
            .zip(&first)
            .map(|(s, (_, p))| {
                let p = p.as_ref().unwrap();
                NodeState {
                    ssh_dir: SshDir::Mode(0o700),
                    authorized_keys: Some(p.authorized_append.clone()),
                    config: p.config.as_ref().map(|c| c.text.clone()),
                    known_hosts: p.known_hosts.clone(),
                    ..s.clone()
                }
            })
            .collect();
        for (_, p) in plan(&applied, &entries, &hk) {
            assert!(p.unwrap().is_noop());
        }
    }

    #[test]
    fn a_group_writable_ssh_folder_is_fixed_because_sshd_would_ignore_the_keys() {
        let mut s = state("a");
        s.ssh_dir = SshDir::Mode(0o775);
        let p = plan(
            &[s, state("bb")],
            &[entry("a"), entry("bb")],
            &keys_of(&["a", "bb"]),
        );
        assert_eq!(
            p[0].1.as_ref().unwrap().ssh_dir,
            Some(SshDirFix::Chmod { from: 0o775 })
        );
    }
}
