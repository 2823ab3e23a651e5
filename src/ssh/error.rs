//! What can go wrong talking to a node over SSH, as typed errors whose text names the node, the
//! command (shell-quoted, ready to paste) and the fix. Classifies OpenSSH's stderr; runs nothing.

use std::fmt;
use std::time::Duration;

use crate::node::NodeName;

/// Why an SSH connection could not be made, read from the client's stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectFailure {
    /// `Permission denied (...)`: the key is not accepted yet, or the password was wrong.
    AuthFailed,
    /// The node shows a different host key than the one recorded under its name.
    HostKeyChanged,
    /// The host key is not known and this connection may not accept new ones.
    HostKeyUnknown,
    /// Nothing listens on the port (`Connection refused`).
    Refused,
    /// No answer within the connect timeout.
    Timeout,
    /// `No route to host` / `Network is unreachable`.
    NoRoute,
    /// The host name does not resolve.
    Unresolved,
    /// The password was needed but no way to ask for it was given.
    PasswordNeeded,
    /// sshd closed the connection before the handshake (`kex_exchange_identification`): it
    /// turns new connections away while too many are unauthenticated (`MaxStartups`).
    Dropped,
    /// sshd refused one more session on a connection (`MaxSessions`).
    SessionsRefused,
    /// Anything else; the detail says what ssh printed.
    Other,
}

impl ConnectFailure {
    /// Reads OpenSSH's stderr (exit status 255) into a failure kind.
    pub fn classify(stderr: &str) -> ConnectFailure {
        let s = stderr.to_ascii_lowercase();
        if s.contains("remote host identification has changed")
            || s.contains("host key for") && s.contains("has changed")
        {
            ConnectFailure::HostKeyChanged
        } else if s.contains("host key verification failed") {
            ConnectFailure::HostKeyUnknown
        } else if s.contains("permission denied") || s.contains("too many authentication failures")
        {
            ConnectFailure::AuthFailed
        } else if s.contains("session open refused by peer")
            || s.contains("administratively prohibited")
        {
            ConnectFailure::SessionsRefused
        } else if s.contains("exchange_identification") {
            // `kex_exchange_identification: read: Connection reset by peer` or `…: Connection
            // closed by remote host` (OpenSSH < 8.2: `ssh_exchange_identification`).
            ConnectFailure::Dropped
        } else if s.contains("connection refused") {
            ConnectFailure::Refused
        } else if s.contains("timed out") {
            ConnectFailure::Timeout
        } else if s.contains("no route to host") || s.contains("network is unreachable") {
            ConnectFailure::NoRoute
        } else if s.contains("could not resolve hostname")
            || s.contains("name or service not known")
        {
            ConnectFailure::Unresolved
        } else {
            ConnectFailure::Other
        }
    }

    /// True for failures that retrying another address of the same node cannot fix.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            ConnectFailure::AuthFailed
                | ConnectFailure::HostKeyChanged
                | ConnectFailure::HostKeyUnknown
                | ConnectFailure::PasswordNeeded
        )
    }
}

/// Where a connection went: `user@host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dest {
    pub host: String,
    pub user: Option<String>,
    pub port: u16,
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            write!(f, "{}", self.host)?;
        }
        if self.port != 22 {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// An SSH operation on one node failed.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error(
        "{node}: cannot run `{program}`: {source} (install the OpenSSH client: apt-get install openssh-client)"
    )]
    Spawn {
        node: NodeName,
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{node}: ssh {dest}: {}", connect_text(.failure, .node, .dest, .detail))]
    Connect {
        node: NodeName,
        dest: Dest,
        failure: ConnectFailure,
        /// The last lines ssh printed.
        detail: String,
    },
    #[error("{node}: `{command}` exited with {code}{}", tail_text(.stderr_tail))]
    Remote {
        node: NodeName,
        /// The command, shell-quoted.
        command: String,
        code: i32,
        stderr_tail: String,
    },
    #[error("{node}: `{command}` did not finish within {}s", .after.as_secs())]
    Timeout {
        node: NodeName,
        command: String,
        after: Duration,
    },
    #[error("{node}: {what}: {source}")]
    Io {
        node: NodeName,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{node}: {message}")]
    Invalid { node: NodeName, message: String },
    #[error("no node named {0} in this cluster")]
    UnknownNode(NodeName),
    #[error("cannot create a private runtime folder for ssh sockets: {0}")]
    RuntimeDir(#[source] std::io::Error),
}

impl SshError {
    /// The node this error is about, when it is about one.
    pub fn node(&self) -> Option<&NodeName> {
        match self {
            SshError::Spawn { node, .. }
            | SshError::Connect { node, .. }
            | SshError::Remote { node, .. }
            | SshError::Timeout { node, .. }
            | SshError::Io { node, .. }
            | SshError::Invalid { node, .. } => Some(node),
            SshError::UnknownNode(_) | SshError::RuntimeDir(_) => None,
        }
    }

    /// `user@host:port` of a connection error.
    pub fn connect_dest(&self) -> Option<String> {
        match self {
            SshError::Connect { dest, .. } => Some(dest.to_string()),
            _ => None,
        }
    }

    /// The connection failure kind, for connection errors.
    pub fn connect_failure(&self) -> Option<&ConnectFailure> {
        match self {
            SshError::Connect { failure, .. } => Some(failure),
            _ => None,
        }
    }

    /// The text after `node: `, for tables that already show the node.
    pub fn reason(&self) -> String {
        let full = self.to_string();
        match self.node() {
            Some(n) => full
                .strip_prefix(&format!("{n}: "))
                .map(str::to_string)
                .unwrap_or(full),
            None => full,
        }
    }
}

fn connect_text(failure: &ConnectFailure, node: &NodeName, dest: &Dest, detail: &str) -> String {
    let text = match failure {
        ConnectFailure::AuthFailed => {
            "permission denied: wrong password, or the node does not accept this user's key yet (run `spark-launch trust`)".to_string()
        }
        ConnectFailure::HostKeyChanged => format!(
            "the host key changed since it was recorded as {node}; refusing to connect (if the node was reinstalled, remove the old key with `ssh-keygen -R {node}` and run `spark-launch trust`)"
        ),
        ConnectFailure::HostKeyUnknown => format!(
            "host key verification failed: the key of {node} is not known (run `spark-launch trust` to record it)"
        ),
        ConnectFailure::Refused => format!(
            "connection refused: sshd is not running or not listening on port {} (start it: sudo systemctl start ssh)",
            dest.port
        ),
        ConnectFailure::Timeout => {
            "no answer: check the cable, the address and that the node is up".to_string()
        }
        ConnectFailure::NoRoute => {
            "no route to host: check the cable and that the address is on a local subnet".to_string()
        }
        ConnectFailure::Unresolved => {
            "cannot resolve the host name (use an address, or `spark-launch discover --save`)".to_string()
        }
        ConnectFailure::PasswordNeeded => {
            "the node asks for a password: run in a terminal, or pass --password-stdin".to_string()
        }
        ConnectFailure::Dropped => format!(
            "sshd closed the connection before the handshake: it turns new connections away while too many are still unauthenticated (its MaxStartups, 10:30:100 by default); fix: raise it on {node} (e.g. `MaxStartups 100:30:200` in /etc/ssh/sshd_config, then `sudo systemctl reload ssh`), or run fewer spark-launch commands at once"
        ),
        ConnectFailure::SessionsRefused => format!(
            "sshd refused another session on the connection: more at once than its MaxSessions (10 by default; spark-launch keeps to {} per connection); fix: raise MaxSessions on {node} (/etc/ssh/sshd_config, then `sudo systemctl reload ssh`), or lower --streams",
            super::session::SESSIONS_PER_MASTER
        ),
        ConnectFailure::Other => "connection failed".to_string(),
    };
    let detail = detail.trim();
    let shows_detail = matches!(
        failure,
        ConnectFailure::Other | ConnectFailure::Dropped | ConnectFailure::SessionsRefused
    );
    if detail.is_empty() || !shows_detail {
        text
    } else {
        format!("{text}: {detail}")
    }
}

fn tail_text(tail: &str) -> String {
    let t = tail.trim();
    if t.is_empty() {
        String::new()
    } else {
        format!(": {t}")
    }
}

/// The last `lines` non-empty lines of a process's stderr, joined with ` | `.
pub fn stderr_tail(stderr: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(stderr);
    let all: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssh_messages_are_classified_by_what_the_user_must_fix() {
        let c = ConnectFailure::classify;
        assert_eq!(
            c("sparkuser@169.254.100.2: Permission denied (publickey,password)."),
            ConnectFailure::AuthFailed
        );
        assert_eq!(
            c("ssh: connect to host 169.254.100.3 port 22: Connection refused"),
            ConnectFailure::Refused
        );
        assert_eq!(
            c(
                "@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed."
            ),
            ConnectFailure::HostKeyChanged
        );
        assert_eq!(
            c("Host key verification failed."),
            ConnectFailure::HostKeyUnknown
        );
        assert_eq!(
            c("ssh: connect to host 10.0.0.9 port 22: Connection timed out"),
            ConnectFailure::Timeout
        );
        assert_eq!(
            c("ssh: connect to host 10.0.0.9 port 22: No route to host"),
            ConnectFailure::NoRoute
        );
        assert_eq!(
            c("ssh: Could not resolve hostname nope: Name or service not known"),
            ConnectFailure::Unresolved
        );
        assert_eq!(
            c("kex_exchange_identification: read: Connection reset by peer"),
            ConnectFailure::Dropped
        );
        assert_eq!(
            c("kex_exchange_identification: Connection closed by remote host"),
            ConnectFailure::Dropped
        );
        assert_eq!(
            c("mux_client_request_session: session request failed: Session open refused by peer"),
            ConnectFailure::SessionsRefused
        );
        assert_eq!(c("something else"), ConnectFailure::Other);
    }

    #[test]
    fn a_refused_connection_names_the_node_the_port_and_the_fix() {
        let e = SshError::Connect {
            node: NodeName::new("spark-2").unwrap(),
            dest: Dest {
                host: "169.254.100.2".into(),
                user: Some("nvidia".into()),
                port: 22,
            },
            failure: ConnectFailure::Refused,
            detail: "ssh: connect to host 169.254.100.2 port 22: Connection refused".into(),
        };
        assert_eq!(
            e.to_string(),
            "spark-2: ssh nvidia@169.254.100.2: connection refused: sshd is not running or not listening on port 22 (start it: sudo systemctl start ssh)"
        );
        assert!(
            e.reason()
                .starts_with("ssh nvidia@169.254.100.2: connection refused")
        );
    }

    #[test]
    fn connections_sshd_turns_away_name_the_setting_to_raise_and_the_node() {
        let dest = Dest {
            host: "169.254.100.2".into(),
            user: None,
            port: 22,
        };
        let node = NodeName::new("spark-2").unwrap();
        let e = SshError::Connect {
            node: node.clone(),
            dest: dest.clone(),
            failure: ConnectFailure::Dropped,
            detail: "6 tries over 9.1s; ssh said: kex_exchange_identification: read: Connection reset by peer".into(),
        };
        let text = e.to_string();
        assert!(
            text.starts_with(
                "spark-2: ssh 169.254.100.2: sshd closed the connection before the handshake"
            ),
            "{text}"
        );
        assert!(text.contains("MaxStartups 100:30:200"), "{text}");
        assert!(text.contains("raise it on spark-2"), "{text}");
        assert!(text.ends_with(": 6 tries over 9.1s; ssh said: kex_exchange_identification: read: Connection reset by peer"), "{text}");
        let e = SshError::Connect {
            node,
            dest,
            failure: ConnectFailure::SessionsRefused,
            detail: String::new(),
        };
        assert!(e.to_string().contains("MaxSessions"), "{e}");
        assert!(!ConnectFailure::Dropped.is_final());
    }

    #[test]
    fn a_remote_failure_carries_the_quoted_command_and_the_stderr_tail() {
        let e = SshError::Remote {
            node: NodeName::new("spark-2").unwrap(),
            command: "docker ps -a --filter 'label=dev.spark-launch.job'".into(),
            code: 1,
            stderr_tail: stderr_tail(b"line1\n\nCannot connect to the Docker daemon\n", 1),
        };
        assert_eq!(
            e.to_string(),
            "spark-2: `docker ps -a --filter 'label=dev.spark-launch.job'` exited with 1: Cannot connect to the Docker daemon"
        );
    }
}
