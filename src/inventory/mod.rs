//! The cluster file (`cluster.yaml`): the nodes the user configured or discovery saved, with
//! name, addresses, SSH user and port, role, and a cached copy of their fabric facts. This is
//! what the user wrote (`NodeConfig`), never live connections; probed facts only as a cache.
//!
//! - `file`: load (validated, errors with `file:line`), save (atomic), the YAML shape.
//! - `edit`: a change to the nodes as a change to those nodes' lines only (comments kept).
//! - `hosts`: `--hosts a,b,c` entries (`[NAME=][user@]host[:port]`) as node configs.
//! - `table`: the nodes as `spark-launch nodes` lists them.
//! - this module: the `Inventory` operations (add, remove, merge discovered nodes, select a
//!   subset, head first). Pure: the only I/O is in `file`.

pub mod edit;
pub mod file;
pub mod hosts;
pub mod table;

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::node::{NodeName, Role};
use crate::probe::facts::{IbDevice, Ipv4Iface, NetIf, NodeFacts};

pub use file::{InventoryError, LineError, load, load_or_empty, save, save_edited};
pub use hosts::{HostSpec, HostSpecError};

/// The default SSH port.
pub const SSH_PORT: u16 = 22;

/// One node as the user (or `discover --save`) wrote it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The name this cluster knows the node by (also its SSH host-key alias).
    #[serde(deserialize_with = "file::de_node_name")]
    pub name: NodeName,
    /// Addresses or host names, tried in this order.
    #[serde(deserialize_with = "file::de_addresses")]
    pub addresses: Vec<String>,
    /// The SSH login user; absent: the local user name.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "file::de_user"
    )]
    pub user: Option<String>,
    /// The SSH port.
    #[serde(
        default = "default_port",
        skip_serializing_if = "is_default_port",
        deserialize_with = "file::de_port"
    )]
    pub port: u16,
    /// `head` or `worker`; absent: the first node is the head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// What the last probe saw on this node's fabric (a cache; never used to decide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricCache>,
}

fn default_port() -> u16 {
    SSH_PORT
}

fn is_default_port(p: &u16) -> bool {
    *p == SSH_PORT
}

impl NodeConfig {
    /// A node with one address and every default.
    pub fn new(name: NodeName, address: impl Into<String>) -> NodeConfig {
        NodeConfig {
            name,
            addresses: vec![address.into()],
            user: None,
            port: SSH_PORT,
            role: None,
            fabric: None,
        }
    }
}

/// A compact record of a node's fabric as last probed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricCache {
    /// The node's hostname at the time.
    pub hostname: String,
    /// Seconds since the Unix epoch when it was probed.
    pub probed_at: u64,
    /// Every RDMA netdev: its device, whether its port is ACTIVE, its IPv4 addresses.
    pub interfaces: Vec<FabricInterface>,
}

/// One fabric interface in [`FabricCache`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricInterface {
    pub name: NetIf,
    pub rdma_device: IbDevice,
    pub active: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipv4: Vec<Ipv4Iface>,
}

impl FabricCache {
    /// The cache entry for a probed node.
    pub fn from_facts(facts: &NodeFacts, probed_at: u64) -> FabricCache {
        let mut interfaces = Vec::new();
        for d in &facts.rdma_devices {
            for nd in &d.netdevs {
                interfaces.push(FabricInterface {
                    name: nd.clone(),
                    rdma_device: d.name.clone(),
                    active: d.is_active(),
                    ipv4: facts
                        .interface(nd)
                        .map(|i| i.ipv4.clone())
                        .unwrap_or_default(),
                });
            }
        }
        interfaces.sort_by(|a, b| a.name.cmp(&b.name));
        FabricCache {
            hostname: facts.hostname.clone(),
            probed_at,
            interfaces,
        }
    }
}

/// How spark-launch's own SSH client reaches the cluster's nodes, where not as the user's
/// defaults (a cluster of its own key, such as the one `sim up` builds). Both paths are
/// absolute; they reach `ssh -o` quoted, so a `"` or a control character is refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshSettings {
    /// A private key to offer besides the user's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<std::path::PathBuf>,
    /// The known-hosts file that pins the nodes' host keys, used instead of
    /// `~/.ssh/spark-launch_known_hosts` and `~/.ssh/known_hosts`; a key not in it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<std::path::PathBuf>,
}

impl SshSettings {
    pub fn is_empty(&self) -> bool {
        self.identity.is_none() && self.known_hosts.is_none()
    }

    /// What is wrong with the paths, one line each (`ssh.identity: ...`).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (field, path) in [
            ("identity", &self.identity),
            ("known_hosts", &self.known_hosts),
        ] {
            let Some(p) = path else { continue };
            let text = p.to_string_lossy();
            if !p.is_absolute() {
                out.push(format!("ssh.{field}: {text:?} is not an absolute path"));
            } else if text.chars().any(|c| c == '"' || c.is_control()) {
                out.push(format!(
                    "ssh.{field}: {text:?} holds a quote or a control character"
                ));
            }
        }
        out
    }
}

/// The whole cluster file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// How to reach the nodes over SSH, where not as the user's defaults.
    #[serde(default, skip_serializing_if = "SshSettings::is_empty")]
    pub ssh: SshSettings,
    #[serde(default)]
    pub nodes: Vec<NodeConfig>,
}

/// What `add` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Added {
    /// A new node.
    New,
    /// The node existed; these addresses were added to it.
    Merged(Vec<String>),
    /// The node existed with everything given.
    Unchanged,
}

impl Inventory {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn get(&self, name: &NodeName) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| &n.name == name)
    }

    /// The head: the node marked `role: head`, else the first.
    pub fn head(&self) -> Option<&NodeConfig> {
        self.nodes
            .iter()
            .find(|n| n.role == Some(Role::Head))
            .or_else(|| self.nodes.first())
    }

    /// Every node, head first, the others in file order.
    pub fn ordered(&self) -> Vec<&NodeConfig> {
        let Some(head) = self.head() else {
            return Vec::new();
        };
        let mut out = vec![head];
        out.extend(self.nodes.iter().filter(|n| n.name != head.name));
        out
    }

    /// The named nodes (head first among them, then file order); fails naming every unknown
    /// name and the names that exist.
    pub fn select(&self, names: &[NodeName]) -> Result<Vec<&NodeConfig>, UnknownNodes> {
        let unknown: Vec<NodeName> = names
            .iter()
            .filter(|n| self.get(n).is_none())
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(UnknownNodes {
                unknown,
                known: self.nodes.iter().map(|n| n.name.clone()).collect(),
            });
        }
        Ok(self
            .ordered()
            .into_iter()
            .filter(|n| names.contains(&n.name))
            .collect())
    }

    /// Adds a node, or merges new addresses (and a user/port/role given explicitly) into the
    /// node of the same name.
    pub fn add(&mut self, node: NodeConfig) -> Added {
        if let Some(existing) = self.nodes.iter_mut().find(|n| n.name == node.name) {
            let mut new_addrs = Vec::new();
            for a in &node.addresses {
                if !existing.addresses.contains(a) {
                    existing.addresses.push(a.clone());
                    new_addrs.push(a.clone());
                }
            }
            let mut changed = !new_addrs.is_empty();
            if node.user.is_some() && node.user != existing.user {
                existing.user = node.user.clone();
                changed = true;
            }
            if node.port != SSH_PORT && node.port != existing.port {
                existing.port = node.port;
                changed = true;
            }
            if node.role.is_some() && node.role != existing.role {
                existing.role = node.role;
                changed = true;
            }
            if node.fabric.is_some() && node.fabric != existing.fabric {
                existing.fabric = node.fabric.clone();
                changed = true;
            }
            if changed {
                Added::Merged(new_addrs)
            } else {
                Added::Unchanged
            }
        } else {
            self.nodes.push(node);
            Added::New
        }
    }

    /// Merges a node found by discovery: the node of that name (or, failing that, the node that
    /// already has one of these addresses, keeping the user's name for it) gets the discovered
    /// addresses first, followed by its other addresses; an unknown node is appended.
    pub fn merge_discovered(&mut self, name: NodeName, addresses: Vec<String>) -> Added {
        let pos = self.nodes.iter().position(|n| n.name == name).or_else(|| {
            self.nodes
                .iter()
                .position(|n| n.addresses.iter().any(|a| addresses.contains(a)))
        });
        let Some(i) = pos else {
            self.nodes.push(NodeConfig {
                name,
                addresses,
                user: None,
                port: SSH_PORT,
                role: None,
                fabric: None,
            });
            return Added::New;
        };
        let node = &mut self.nodes[i];
        let new: Vec<String> = addresses
            .iter()
            .filter(|a| !node.addresses.contains(a))
            .cloned()
            .collect();
        let mut merged = addresses.clone();
        merged.extend(
            node.addresses
                .iter()
                .filter(|a| !addresses.contains(a))
                .cloned(),
        );
        if merged == node.addresses {
            Added::Unchanged
        } else {
            node.addresses = merged;
            Added::Merged(new)
        }
    }

    /// Removes a node by name.
    /// Caches each probed node's fabric facts in its entry (`nodes probe`).
    pub fn cache_facts(&mut self, probed: &[crate::derive::NodeInput], now: u64) {
        for n in probed {
            if let Some(cfg) = self.nodes.iter_mut().find(|c| c.name == n.name) {
                cfg.fabric = Some(FabricCache::from_facts(&n.facts, now));
            }
        }
    }

    pub fn remove(&mut self, name: &NodeName) -> Option<NodeConfig> {
        let pos = self.nodes.iter().position(|n| &n.name == name)?;
        Some(self.nodes.remove(pos))
    }

    /// The node that has `address` among its addresses.
    pub fn by_address(&self, address: &str) -> Option<&NodeConfig> {
        self.nodes
            .iter()
            .find(|n| n.addresses.iter().any(|a| a == address))
    }

    /// Cross-node problems: duplicate names, more than one head, an address used by two nodes.
    /// Each with the index of the node it is about.
    pub fn problems(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(j) = self.nodes[..i].iter().position(|m| m.name == n.name) {
                out.push((
                    i,
                    format!(
                        "node name {} is used twice (also node {}): names must be unique",
                        n.name,
                        j + 1
                    ),
                ));
            }
            for a in &n.addresses {
                if let Some(m) = self.nodes[..i]
                    .iter()
                    .find(|m| m.name != n.name && m.addresses.contains(a))
                {
                    out.push((
                        i,
                        format!(
                            "address {a} of {} is also an address of {}: one address, one node",
                            n.name, m.name
                        ),
                    ));
                }
            }
        }
        let heads: Vec<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Some(Role::Head))
            .map(|(i, _)| i)
            .collect();
        if heads.len() > 1 {
            for &i in &heads[1..] {
                out.push((
                    i,
                    format!(
                        "{} is marked `role: head` but so is {}: a cluster has one head",
                        self.nodes[i].name, self.nodes[heads[0]].name
                    ),
                ));
            }
        }
        out
    }
}

/// `--nodes` named nodes that the cluster file does not have.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("no node named {} in the cluster file (it has: {})", list(.unknown), if .known.is_empty() { "no nodes".to_string() } else { list(.known) })]
pub struct UnknownNodes {
    pub unknown: Vec<NodeName>,
    pub known: Vec<NodeName>,
}

fn list(names: &[NodeName]) -> String {
    names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// True when `a` is a literal IPv4 address.
pub fn is_ipv4(a: &str) -> bool {
    a.parse::<Ipv4Addr>().is_ok()
}

/// True when `node` is the machine whose facts are `local`: one of its addresses is an address
/// of this machine (or loopback), or it is named like this machine's hostname.
pub fn is_this_machine(node: &NodeConfig, local: &NodeFacts) -> bool {
    let host = local.hostname.as_str();
    let named_here = |a: &str| {
        let a = a.trim_end_matches('.');
        a == host || a.strip_suffix(".local") == Some(host) || a == "localhost"
    };
    if node.name.as_str() == host || node.addresses.iter().any(|a| named_here(a)) {
        return true;
    }
    node.addresses
        .iter()
        .any(|a| match a.parse::<std::net::IpAddr>() {
            Ok(ip) if ip.is_loopback() => true,
            Ok(std::net::IpAddr::V4(v4)) => local
                .interfaces
                .iter()
                .any(|i| i.ipv4.iter().any(|x| x.addr == v4)),
            Ok(std::net::IpAddr::V6(v6)) => local
                .interfaces
                .iter()
                .any(|i| i.ipv6.iter().any(|x| x.addr == v6)),
            Err(_) => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(name: &str, addr: &str) -> NodeConfig {
        NodeConfig::new(NodeName::new(name).unwrap(), addr)
    }

    #[test]
    fn this_machine_is_recognised_by_an_address_or_its_hostname() {
        let local: NodeFacts = serde_json::from_value(serde_json::json!({
            "hostname": "spark-1d84", "arch": null, "routes": [], "rdma_devices": [],
            "interfaces": [{"name": "enp1s0f1np1", "operstate": "up", "mtu": 9000,
                "speed_mbps": null, "carrier": true, "mac": null,
                "ipv4": [{"addr": "169.254.12.7", "prefix": 16}], "ipv6": []}]
        }))
        .unwrap();
        assert!(is_this_machine(&n("x", "169.254.12.7"), &local));
        assert!(is_this_machine(&n("x", "spark-1d84.local"), &local));
        assert!(is_this_machine(&n("spark-1d84", "10.0.0.1"), &local));
        assert!(is_this_machine(&n("x", "127.0.0.1"), &local));
        assert!(!is_this_machine(&n("spark-2", "169.254.12.8"), &local));
        assert!(!is_this_machine(&n("spark-2", "spark-2.local"), &local));
    }

    #[test]
    fn the_head_is_the_node_marked_head_else_the_first_and_comes_first() {
        let mut inv = Inventory {
            ssh: SshSettings::default(),
            nodes: vec![n("a", "1.1.1.1"), n("b", "1.1.1.2"), n("c", "1.1.1.3")],
        };
        assert_eq!(inv.head().unwrap().name.as_str(), "a");
        inv.nodes[2].role = Some(Role::Head);
        let order: Vec<&str> = inv.ordered().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(order, vec!["c", "a", "b"]);
        let sel: Vec<&str> = inv
            .select(&[NodeName::new("b").unwrap(), NodeName::new("c").unwrap()])
            .unwrap()
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(sel, vec!["c", "b"]);
    }

    #[test]
    fn selecting_an_unknown_node_names_it_and_the_known_ones() {
        let inv = Inventory {
            ssh: SshSettings::default(),
            nodes: vec![n("a", "x"), n("b", "y")],
        };
        let err = inv
            .select(&[NodeName::new("zz").unwrap(), NodeName::new("a").unwrap()])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no node named zz in the cluster file (it has: a, b)"
        );
    }

    #[test]
    fn adding_a_known_node_merges_new_addresses_and_says_when_nothing_changed() {
        let mut inv = Inventory::default();
        assert_eq!(inv.add(n("a", "169.254.1.1")), Added::New);
        assert_eq!(inv.add(n("a", "169.254.1.1")), Added::Unchanged);
        assert_eq!(
            inv.add(n("a", "169.254.9.9")),
            Added::Merged(vec!["169.254.9.9".into()])
        );
        assert_eq!(inv.nodes[0].addresses, vec!["169.254.1.1", "169.254.9.9"]);
        assert!(inv.remove(&NodeName::new("a").unwrap()).is_some());
        assert!(inv.is_empty());
    }

    #[test]
    fn a_discovered_node_gets_its_fresh_addresses_first_and_keeps_a_name_the_user_gave() {
        let mut inv = Inventory {
            ssh: SshSettings::default(),
            nodes: vec![n("spark-b", "169.254.9.9"), n("mine", "169.254.4.4")],
        };
        inv.nodes[0].addresses.push("spark-b.lan".into());
        let name = |s: &str| NodeName::new(s).unwrap();
        assert_eq!(
            inv.merge_discovered(name("spark-b"), vec!["169.254.7.7".into()]),
            Added::Merged(vec!["169.254.7.7".into()])
        );
        assert_eq!(
            inv.nodes[0].addresses,
            vec!["169.254.7.7", "169.254.9.9", "spark-b.lan"]
        );
        assert_eq!(
            inv.merge_discovered(name("spark-c"), vec!["169.254.4.4".into()]),
            Added::Unchanged
        );
        assert_eq!(inv.nodes[1].name.as_str(), "mine");
        assert_eq!(
            inv.merge_discovered(name("spark-d"), vec!["169.254.5.5".into()]),
            Added::New
        );
        assert_eq!(inv.nodes.len(), 3);
    }

    #[test]
    fn duplicate_names_shared_addresses_and_two_heads_are_all_reported() {
        let mut inv = Inventory {
            ssh: SshSettings::default(),
            nodes: vec![n("a", "x"), n("b", "x"), n("a", "z"), n("c", "w")],
        };
        inv.nodes[0].role = Some(Role::Head);
        inv.nodes[3].role = Some(Role::Head);
        let p = inv.problems();
        assert_eq!(p.len(), 3, "{p:#?}");
        assert_eq!(p[0].0, 1);
        assert!(p[0].1.contains("address x of b is also an address of a"));
        assert_eq!(p[1].0, 2);
        assert!(p[1].1.contains("node name a is used twice"));
        assert_eq!(p[2].0, 3);
        assert!(p[2].1.contains("a cluster has one head"));
    }
}
