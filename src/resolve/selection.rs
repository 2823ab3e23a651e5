//! What the user typed about which nodes a command works on, as library types: parsed from
//! the command line (each type is `FromStr`) with no I/O, checked for contradictions before the
//! resolve stage reads or connects to anything.

use std::path::PathBuf;

use super::ResolveError;
use crate::inventory::HostSpec;
use crate::node::NodeName;
use crate::runtime::EngineEndpoint;

/// `NAME=DIR`: a probe snapshot standing in for a live node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRef {
    pub name: NodeName,
    pub dir: PathBuf,
}

impl std::str::FromStr for SnapshotRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, dir) = s.split_once('=').ok_or_else(|| {
            format!("expected NAME=DIR (e.g. spark-a=./snapshots/spark-a), got {s:?}")
        })?;
        if dir.is_empty() {
            return Err(format!("no folder after '=' in {s:?}"));
        }
        let name = NodeName::new(name).map_err(|e| e.to_string())?;
        Ok(SnapshotRef {
            name,
            dir: PathBuf::from(dir),
        })
    }
}

/// `NAME=unix:///path/to/docker.sock`, or `NAME=local` for this machine's engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineRef {
    pub name: NodeName,
    /// `None`: this machine (its engine and its processes).
    pub endpoint: Option<EngineEndpoint>,
}

impl std::str::FromStr for EngineRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, ep) = s.split_once('=').ok_or_else(|| {
            format!("expected NAME=unix:///path/docker.sock or NAME=local, got {s:?}")
        })?;
        let name = NodeName::new(name).map_err(|e| e.to_string())?;
        let endpoint = if ep == "local" {
            None
        } else {
            Some(EngineEndpoint::parse(ep)?)
        };
        Ok(EngineRef { name, endpoint })
    }
}

/// Which nodes a command works on, as typed. Empty: the cluster file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `--snapshot NAME=DIR`, head first.
    pub snapshots: Vec<SnapshotRef>,
    /// `--hosts`, head first.
    pub hosts: Vec<HostSpec>,
    /// `--nodes`: a subset of the cluster file.
    pub nodes: Vec<NodeName>,
    /// `--engine NAME=SOCKET`, head first.
    pub engines: Vec<EngineRef>,
    /// `--local`: this machine alone.
    pub local: bool,
    /// `--root DIR`: one snapshot folder, the node named by the hostname it recorded.
    pub root: Option<PathBuf>,
    /// The cluster file (`--cluster`, or the default one).
    pub cluster_file: PathBuf,
}

impl Selection {
    /// Contradictions and names given twice, all at once.
    pub fn check(&self) -> Result<(), ResolveError> {
        let mut problems = Vec::new();
        let given = [
            ("--snapshot", !self.snapshots.is_empty()),
            ("--hosts", !self.hosts.is_empty()),
            ("--nodes", !self.nodes.is_empty()),
            ("--engine", !self.engines.is_empty()),
            ("--local", self.local),
            ("--root", self.root.is_some()),
        ];
        let used: Vec<&str> = given
            .iter()
            .filter(|(_, on)| *on)
            .map(|(f, _)| *f)
            .collect();
        if used.len() > 1 {
            problems.push(format!(
                "{} cannot be combined: each names the nodes in its own way",
                used.join(" and ")
            ));
        }
        // Each as its flag's users know it.
        let mut twice = |names: Vec<NodeName>, say: &dyn Fn(&NodeName) -> String| {
            let mut seen = std::collections::BTreeSet::new();
            for n in names {
                if !seen.insert(n.clone()) {
                    problems.push(say(&n));
                }
            }
        };
        twice(
            self.snapshots.iter().map(|s| s.name.clone()).collect(),
            &|n| format!("--snapshot: node name {n} is given twice"),
        );
        twice(
            self.hosts.iter().map(|h| h.to_node().name).collect(),
            &|n| {
                format!(
                    "--hosts names node {n} twice (give one entry per node, or name them: NAME=host)"
                )
            },
        );
        twice(
            self.engines.iter().map(|e| e.name.clone()).collect(),
            &|n| format!("node {n} is given twice with --engine"),
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ResolveError::Conflict(problems.join("; ")))
        }
    }

    /// This machine alone (`--local`).
    pub fn is_local(&self) -> bool {
        self.local
    }

    /// How many nodes this selection names before any is reached: the snapshots, hosts,
    /// engines or nodes given, one for `--local` or `--root`, else the cluster file's; `None`
    /// when that file cannot be read or names none (resolving says why).
    pub fn named_count(&self) -> Option<usize> {
        let given = [
            self.snapshots.len(),
            self.hosts.len(),
            self.engines.len(),
            self.nodes.len(),
        ];
        if let Some(n) = given.into_iter().find(|n| *n > 0) {
            return Some(n);
        }
        if self.local || self.root.is_some() {
            return Some(1);
        }
        super::cluster_file_nodes(&self.cluster_file)
            .ok()
            .map(|n| n.len())
            .filter(|n| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_argument_is_name_equals_dir() {
        let s: SnapshotRef = "spark-a=/tmp/x=y".parse().unwrap();
        assert_eq!(s.name.as_str(), "spark-a");
        assert_eq!(s.dir, PathBuf::from("/tmp/x=y"));
        assert!(
            "nodir"
                .parse::<SnapshotRef>()
                .unwrap_err()
                .contains("NAME=DIR")
        );
        assert!("bad name=/x".parse::<SnapshotRef>().is_err());
    }

    #[test]
    fn an_engine_argument_is_a_node_name_and_a_unix_socket_or_local() {
        let e: EngineRef = "n2=unix:///tmp/n2/docker.sock".parse().unwrap();
        assert_eq!(e.name.as_str(), "n2");
        assert_eq!(
            e.endpoint,
            Some(EngineEndpoint::unix("/tmp/n2/docker.sock"))
        );
        let e: EngineRef = "me=local".parse().unwrap();
        assert_eq!(e.endpoint, None);
        assert!("n2".parse::<EngineRef>().is_err());
        assert!("n2=tcp://1.2.3.4:2375".parse::<EngineRef>().is_err());
    }

    #[test]
    fn the_nodes_a_selection_names_are_counted_before_any_is_reached() {
        let snap = |n: &str| format!("{n}=/tmp/{n}").parse::<SnapshotRef>().unwrap();
        let two = Selection {
            snapshots: vec![snap("a"), snap("b")],
            ..Selection::default()
        };
        assert_eq!(two.named_count(), Some(2));
        let one = Selection {
            hosts: vec!["10.0.0.1".parse().unwrap()],
            ..Selection::default()
        };
        assert_eq!(one.named_count(), Some(1));
        let none = Selection {
            cluster_file: PathBuf::from("/nonexistent/cluster.yaml"),
            ..Selection::default()
        };
        assert_eq!(none.named_count(), None, "no cluster file: not known here");
    }

    #[test]
    fn every_contradiction_of_a_selection_is_named_at_once() {
        let sel = Selection {
            hosts: vec!["a".parse().unwrap(), "a".parse().unwrap()],
            engines: vec!["e=local".parse().unwrap()],
            ..Selection::default()
        };
        let err = sel.check().unwrap_err().to_string();
        assert!(
            err.contains("--hosts and --engine cannot be combined"),
            "{err}"
        );
        assert!(err.contains("--hosts names node a twice"), "{err}");
    }
}
