//! Node identity shared by every layer: the name a node goes by in this cluster and its role,
//! and the one fan-out over nodes (`fanout`), which the SSH layer and the executor both use.
//!
//! A node's name is what the user calls it (`--snapshot NAME=DIR`, `cluster.yaml`, mDNS); it is
//! not necessarily the machine's hostname. The first node of a cluster is its head.

pub mod fanout;

pub use fanout::{NodeFailures, all_ok, for_each_node};

/// `a, b, c`: names (or anything printable) as one line, for messages and plans.
pub fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
use std::fmt;

use serde::{Deserialize, Serialize};

/// The name of one node of the cluster, as the user knows it (`spark-1d84`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeName(String);

impl NodeName {
    /// `local`: the name of this machine when it has no usable hostname.
    pub fn local() -> Self {
        NodeName("local".to_string())
    }

    /// A node name must be usable in container names, labels and file names: ASCII letters,
    /// digits, `-`, `_` and `.`, not empty, at most 63 characters, starting with a letter or a
    /// digit (so never `.`, `..` or an option such as `-oProxyCommand`).
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidNodeName> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if ok {
            Ok(NodeName(name))
        } else {
            Err(InvalidNodeName(name))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for NodeName {
    type Err = InvalidNodeName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeName::new(s)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid node name {0:?}: use 1-63 ASCII letters, digits, '-', '_' or '.', starting with a letter or a digit (it becomes part of container and file names)"
)]
pub struct InvalidNodeName(pub String);

/// What a node does in a job: the head runs the API server, rank 0, the MPI launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Head,
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Head => "head",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_name_accepts_hostnames_and_rejects_shell_characters() {
        assert!(NodeName::new("spark-1d84").is_ok());
        assert!(NodeName::new("ws.lab_2").is_ok());
        assert!(NodeName::new("").is_err());
        assert!(NodeName::new("a b").is_err());
        assert!(NodeName::new("x;rm").is_err());
        assert!(NodeName::new("a".repeat(64)).is_err());
    }

    #[test]
    fn node_names_dot_and_dot_dot_are_refused() {
        // Seen once: `.` and `..` were accepted (and name files and folders).
        for bad in [".", "..", ".hidden", "-oProxyCommand=x", "_x"] {
            let e = NodeName::new(bad).unwrap_err();
            assert!(
                e.to_string().contains("starting with a letter or a digit"),
                "{e}"
            );
        }
        assert!(NodeName::new("1node").is_ok());
    }
}
