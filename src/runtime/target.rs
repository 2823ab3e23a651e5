//! Where a node's work runs and how we reach it: this machine, a remote node over its
//! multiplexed SSH connection, or only a Docker socket we were pointed at. A `NodeTarget` is a
//! live handle description (not serde: a live handle is never serialised); the SSH layer plugs in through the small
//! [`RemoteNode`] trait (a [`NodeShell`] that can also forward a socket), so this module never
//! learns how SSH works.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::error::RuntimeError;
use super::shell::{LocalShell, NodeShell};

use crate::node::{NodeName, Role};

/// The socket dockerd listens on by default, on every node.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// A Docker Engine endpoint: a unix socket on this machine (possibly one forwarded from a
/// remote node over SSH).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineEndpoint {
    pub socket: PathBuf,
}

impl EngineEndpoint {
    pub fn unix(path: impl Into<PathBuf>) -> Self {
        EngineEndpoint {
            socket: path.into(),
        }
    }

    /// `unix:///path` or `/path`. Only unix sockets: a TCP engine would be an unauthenticated
    /// root shell on the network.
    pub fn parse(s: &str) -> Result<Self, String> {
        let path = s.strip_prefix("unix://").unwrap_or(s);
        if !path.starts_with('/') {
            return Err(format!(
                "expected unix:///path/to/docker.sock (or an absolute path), got {s:?}"
            ));
        }
        Ok(EngineEndpoint::unix(path))
    }

    /// This machine's engine: `DOCKER_HOST` when it names a unix socket, else
    /// `/var/run/docker.sock`.
    pub fn local_default() -> Self {
        std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| EngineEndpoint::parse(&h).ok())
            .unwrap_or_else(|| EngineEndpoint::unix(DEFAULT_DOCKER_SOCKET))
    }
}

impl fmt::Display for EngineEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unix://{}", self.socket.display())
    }
}

/// A remote node reached over SSH; the SSH layer implements it. Scripts run through its
/// [`NodeShell`] side; the Docker socket is forwarded over the same connection.
pub trait RemoteNode: NodeShell {
    /// Forwards the unix socket `remote` on the node to a local unix socket over the node's
    /// multiplexed connection and returns the local path. Calling it twice for the same
    /// socket returns the same path.
    fn forward_socket<'a>(&'a self, remote: &'a str) -> BoxFuture<'a, Result<PathBuf, String>>;

    /// Connects again after the node's connection dropped, its forwarded sockets at the same
    /// local paths; `Ok(false)` when the connection still stood (or cannot drop).
    fn reconnect(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }
}

/// How a node is reached.
#[derive(Clone, Debug)]
pub enum Reach {
    /// This machine: engine on the local socket, processes started here.
    Local,
    /// Over SSH: engine through a forwarded socket, processes through the SSH connection.
    Remote(Arc<dyn RemoteNode>),
    /// Only a Docker socket given with `--engine NAME=unix:///...`; no shell (the host runtime
    /// refuses such nodes).
    EngineOnly(EngineEndpoint),
}

/// One node of a job, with how to reach it.
#[derive(Clone, Debug)]
pub struct NodeTarget {
    pub name: NodeName,
    pub role: Role,
    pub reach: Reach,
    /// A non-default engine socket for a local or remote node (rootless Docker, say).
    pub docker_socket: Option<String>,
}

impl NodeTarget {
    pub fn local(name: NodeName, role: Role) -> Self {
        NodeTarget {
            name,
            role,
            reach: Reach::Local,
            docker_socket: None,
        }
    }

    pub fn engine_only(name: NodeName, role: Role, endpoint: EngineEndpoint) -> Self {
        NodeTarget {
            name,
            role,
            reach: Reach::EngineOnly(endpoint),
            docker_socket: None,
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self.reach, Reach::Local)
    }

    /// The node's shell: this machine's, or its SSH connection's. A node given only as a
    /// Docker socket has none.
    pub fn shell(&self) -> Result<Arc<dyn NodeShell>, RuntimeError> {
        match &self.reach {
            Reach::Local => Ok(Arc::new(LocalShell::new(self.name.clone()))),
            Reach::Remote(remote) => Ok(remote.clone()),
            Reach::EngineOnly(ep) => Err(RuntimeError::Other(format!(
                "{} is reached only through the Docker socket {ep} (given with --engine); this needs a shell on the node: this machine, or an SSH connection to it",
                self.name
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_endpoints_are_unix_sockets_only() {
        assert_eq!(
            EngineEndpoint::parse("unix:///run/user/1000/docker.sock").unwrap(),
            EngineEndpoint::unix("/run/user/1000/docker.sock")
        );
        assert_eq!(
            EngineEndpoint::parse("/tmp/d.sock").unwrap().to_string(),
            "unix:///tmp/d.sock"
        );
        assert!(EngineEndpoint::parse("tcp://10.0.0.1:2375").is_err());
    }
}
