//! Argument groups shared by many commands: which nodes to work on (`--snapshot`, `--hosts`,
//! `--nodes`) and how to launch (`--dry-run`, `--concurrency`, ...). Parsing only: resolving
//! them to facts happens in the command, through the library.

use std::path::PathBuf;

use clap::Args;

use crate::derive::NodeInput;
use crate::node::NodeName;
use crate::probe::{self, ProbeError};

/// `NAME=DIR`: a probe snapshot standing in for a live node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotArg {
    pub name: NodeName,
    pub dir: PathBuf,
}

impl std::str::FromStr for SnapshotArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, dir) = s.split_once('=').ok_or_else(|| {
            format!("expected NAME=DIR (e.g. spark-a=./snapshots/spark-a), got {s:?}")
        })?;
        if dir.is_empty() {
            return Err(format!("no folder after '=' in {s:?}"));
        }
        let name = NodeName::new(name).map_err(|e| e.to_string())?;
        Ok(SnapshotArg {
            name,
            dir: PathBuf::from(dir),
        })
    }
}

/// Which nodes a cluster command works on. Without any of these: the cluster file.
#[derive(Clone, Debug, Default, Args)]
pub struct TargetArgs {
    /// Use a probe snapshot instead of a live node (repeat; the first is the head).
    #[arg(long = "snapshot", value_name = "NAME=DIR")]
    pub snapshots: Vec<SnapshotArg>,
}

impl TargetArgs {
    pub fn uses_snapshots(&self) -> bool {
        !self.snapshots.is_empty()
    }
}

/// Reads every snapshot, reporting every unreadable one, in the order given (head first).
pub fn read_snapshots(snapshots: &[SnapshotArg]) -> Result<Vec<NodeInput>, SnapshotErrors> {
    let mut nodes = Vec::new();
    let mut errors = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for s in snapshots {
        if !seen.insert(s.name.clone()) {
            errors.push(format!("node name {} is given twice", s.name));
            continue;
        }
        match probe::read_snapshot_dir(&s.dir) {
            Ok(facts) => nodes.push(NodeInput {
                name: s.name.clone(),
                facts,
            }),
            Err(e) => errors.push(format!("{}: {}", s.name, describe(&e))),
        }
    }
    if errors.is_empty() {
        Ok(nodes)
    } else {
        Err(SnapshotErrors(errors))
    }
}

fn describe(e: &ProbeError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One or more snapshots could not be read; each line names the node.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the snapshots:\n  {}", .0.join("\n  "))]
pub struct SnapshotErrors(pub Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_argument_is_name_equals_dir() {
        let s: SnapshotArg = "spark-a=/tmp/x=y".parse().unwrap();
        assert_eq!(s.name.as_str(), "spark-a");
        assert_eq!(s.dir, PathBuf::from("/tmp/x=y"));
        assert!(
            "nodir"
                .parse::<SnapshotArg>()
                .unwrap_err()
                .contains("NAME=DIR")
        );
        assert!("bad name=/x".parse::<SnapshotArg>().is_err());
    }
}
