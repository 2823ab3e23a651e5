//! `--hosts a,b,c`: nodes named on the command line instead of the cluster file, for clusters
//! without mDNS. Each entry is `[NAME=][user@]host[:port]`; without `NAME=` the node is named
//! after the host (`spark-1d84.local` → `spark-1d84`, `169.254.3.7` stays as it is).

use std::str::FromStr;

use crate::node::NodeName;

use super::file::{check_host, check_user};
use super::{NodeConfig, SSH_PORT};

/// One `--hosts` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    pub name: Option<NodeName>,
    pub user: Option<String>,
    pub host: String,
    pub port: u16,
}

/// A `--hosts` entry that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "bad host {given:?}: {reason} (use [NAME=][user@]host[:port], e.g. spark-a=nvidia@169.254.3.7)"
)]
pub struct HostSpecError {
    pub given: String,
    pub reason: String,
}

impl FromStr for HostSpec {
    type Err = HostSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| HostSpecError {
            given: s.to_string(),
            reason,
        };
        let (name, rest) = match s.split_once('=') {
            Some((n, r)) => (Some(NodeName::new(n).map_err(|e| err(e.to_string()))?), r),
            None => (None, s),
        };
        let (user, rest) = match rest.rsplit_once('@') {
            Some((u, r)) => {
                check_user(u).map_err(err)?;
                (Some(u.to_string()), r)
            }
            None => (None, rest),
        };
        let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
            let (h, after) = inner
                .split_once(']')
                .ok_or_else(|| err("unclosed '['".into()))?;
            let port = match after.strip_prefix(':') {
                Some(p) => parse_port(p).map_err(err)?,
                None if after.is_empty() => SSH_PORT,
                None => return Err(err(format!("unexpected {after:?} after ']'"))),
            };
            (h.to_string(), port)
        } else if rest.matches(':').count() == 1 {
            let (h, p) = rest.split_once(':').unwrap_or((rest, ""));
            (h.to_string(), parse_port(p).map_err(err)?)
        } else {
            (rest.to_string(), SSH_PORT)
        };
        if host.is_empty() {
            return Err(err("no host".into()));
        }
        check_host(&host).map_err(err)?;
        Ok(HostSpec {
            name,
            user,
            host,
            port,
        })
    }
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("{p:?} is not a port number")),
        Ok(n) => Ok(n),
    }
}

/// The entry as `--hosts` takes it back, its node named: `NAME=[user@]host[:port]` (an IPv6
/// host in brackets, the port only when it is not 22).
impl std::fmt::Display for HostSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=", self.node_name())?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if self.port != SSH_PORT {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

impl HostSpec {
    /// The node's name: the one given, else derived from the host.
    pub fn node_name(&self) -> NodeName {
        if let Some(n) = &self.name {
            return n.clone();
        }
        let h = self.host.trim_end_matches('.');
        let h = h.strip_suffix(".local").unwrap_or(h);
        let candidate: String = h
            .chars()
            .map(|c| if c == ':' || c == '%' { '-' } else { c })
            .collect();
        NodeName::new(candidate).unwrap_or_else(|_| {
            // check_host allows only name characters, so this is unreachable in practice.
            NodeName::new("node").unwrap_or_else(|e| panic!("constant name: {e}"))
        })
    }

    /// The node config this entry stands for.
    pub fn to_node(&self) -> NodeConfig {
        NodeConfig {
            name: self.node_name(),
            addresses: vec![self.host.clone()],
            user: self.user.clone(),
            port: self.port,
            role: None,
            fabric: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostSpec {
        s.parse().unwrap()
    }

    #[test]
    fn an_entry_is_written_back_as_hosts_takes_it_with_its_node_named() {
        for (given, written) in [
            ("169.254.3.7", "169.254.3.7=169.254.3.7"),
            (
                "spark-a=nvidia@169.254.3.7:2222",
                "spark-a=nvidia@169.254.3.7:2222",
            ),
            ("spark-1d84.local", "spark-1d84=spark-1d84.local"),
            ("[fe80::1]:23", "fe80--1=[fe80::1]:23"),
            ("ws@host:22", "host=ws@host"),
        ] {
            let h = p(given);
            assert_eq!(h.to_string(), written);
            let back = p(written);
            assert_eq!(back.node_name(), h.node_name());
            assert_eq!((back.user, back.host, back.port), (h.user, h.host, h.port));
        }
    }

    #[test]
    fn host_entries_take_an_optional_name_user_and_port() {
        let h = p("169.254.3.7");
        assert_eq!(h.node_name().as_str(), "169.254.3.7");
        assert_eq!((h.user.as_deref(), h.port), (None, 22));
        let h = p("spark-a=nvidia@169.254.3.7:2222");
        assert_eq!(h.node_name().as_str(), "spark-a");
        assert_eq!(h.user.as_deref(), Some("nvidia"));
        assert_eq!(h.port, 2222);
        assert_eq!(h.host, "169.254.3.7");
        assert_eq!(p("spark-1d84.local").node_name().as_str(), "spark-1d84");
        let h = p("[fe80::1]:23");
        assert_eq!((h.host.as_str(), h.port), ("fe80::1", 23));
        assert_eq!(h.node_name().as_str(), "fe80--1");
        let n = p("ws@host").to_node();
        assert_eq!(n.addresses, vec!["host"]);
    }

    #[test]
    fn hostile_or_malformed_entries_are_refused_with_the_form_to_use() {
        for bad in [
            "",
            "a b",
            "x;y",
            "h:0",
            "h:x",
            "-oProxyCommand@h",
            "u@-oProxyCommand",
            "bad name=h",
            "[::1",
        ] {
            let e = bad.parse::<HostSpec>().unwrap_err();
            assert!(
                e.to_string().contains("[NAME=][user@]host[:port]"),
                "{bad}: {e}"
            );
        }
    }
}
