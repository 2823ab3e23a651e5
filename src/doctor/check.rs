//! The shape every doctor check shares: a stable id, a category, what it needs (facts, live
//! observations or logs), and what it returns — per-node findings, each with what is wrong, why
//! it matters and the fix.
//!
//! Pure data and small helpers; no check logic lives here and nothing here touches the world.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::node::NodeName;
use crate::problem::Problem;

/// The group a check belongs to (the first part of its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    Fabric,
    Reachability,
    Host,
    Cluster,
    LastRun,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Fabric => "fabric",
            Category::Reachability => "reach",
            Category::Host => "host",
            Category::Cluster => "cluster",
            Category::LastRun => "lastrun",
        }
    }
}

/// What a check needs to give an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckNeeds {
    /// Only the probe facts of every node: runs on `--snapshot` folders too.
    Facts,
    /// Observations made on the live nodes (pings, SSH, ports, Docker).
    Live,
}

/// A check's verdict for one node (or one log file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CheckStatus {
    Ok,
    /// The check could not run here (no live node, no `--image`, node unreachable...).
    Skipped,
    Warn,
    Fail,
}

impl CheckStatus {
    /// As the table prints it: `ok`, `skip`, `warn`, `FAIL`.
    pub fn label(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Skipped => "skip",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "FAIL",
        }
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for CheckStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Skipped => "skipped",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
        })
    }
}

/// The severity of a problem (a finding is never "ok").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warn,
    Fail,
}

impl From<Severity> for CheckStatus {
    fn from(s: Severity) -> CheckStatus {
        match s {
            Severity::Warn => CheckStatus::Warn,
            Severity::Fail => CheckStatus::Fail,
        }
    }
}

/// The fix for one problem: a plain sentence and, when there is one, the exact commands to run
/// on the node (in order). A file edit is described in `text` with the file named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fix {
    pub text: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
}

impl Fix {
    pub fn text(text: impl Into<String>) -> Fix {
        Fix {
            text: text.into(),
            commands: Vec::new(),
        }
    }

    /// A fix written as prose with its commands in backticks (derive's and `report::nccl`'s):
    /// the `sudo ...` commands become the commands to run, the prose stays the text.
    pub fn from_prose(text: &str) -> Fix {
        let commands = text
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|c| c.starts_with("sudo "))
            .map(str::to_string)
            .collect::<Vec<_>>();
        Fix::run(text, commands)
    }

    pub fn run(text: impl Into<String>, commands: impl IntoIterator<Item = String>) -> Fix {
        Fix {
            text: text.into(),
            commands: commands.into_iter().collect(),
        }
    }
}

/// One problem on one node: what is wrong, why it matters, how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub node: NodeName,
    pub severity: Severity,
    #[serde(flatten)]
    pub problem: Problem<Fix>,
}

impl Finding {
    pub fn fail(node: &NodeName, problem: impl Into<String>, why: &str, fix: Fix) -> Finding {
        Finding {
            node: node.clone(),
            severity: Severity::Fail,
            problem: Problem::with_fix(problem, fix).because(why),
        }
    }

    pub fn warn(node: &NodeName, problem: impl Into<String>, why: &str, fix: Fix) -> Finding {
        Finding {
            severity: Severity::Warn,
            ..Finding::fail(node, problem, why, fix)
        }
    }
}

/// Something worth showing that is not a problem (interface names, `/etc/nccl.conf` content).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    pub node: NodeName,
    pub text: String,
}

/// What one check found across the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evaluation {
    pub findings: Vec<Finding>,
    pub notes: Vec<Note>,
    /// Nodes this check could not judge, with the reason (unreachable, nothing to check...).
    pub skipped: Vec<(NodeName, String)>,
}

impl Evaluation {
    pub fn push(&mut self, f: Finding) {
        self.findings.push(f);
    }

    pub fn note(&mut self, node: &NodeName, text: impl Into<String>) {
        self.notes.push(Note {
            node: node.clone(),
            text: text.into(),
        });
    }

    pub fn skip(&mut self, node: &NodeName, why: impl Into<String>) {
        self.skipped.push((node.clone(), why.into()));
    }

    /// The verdict for one node: the worst finding, else skipped, else ok.
    pub fn status_of(&self, node: &NodeName) -> CheckStatus {
        let worst = self
            .findings
            .iter()
            .filter(|f| &f.node == node)
            .map(|f| CheckStatus::from(f.severity))
            .max();
        match worst {
            Some(s) => s,
            None if self.skipped.iter().any(|(n, _)| n == node) => CheckStatus::Skipped,
            None => CheckStatus::Ok,
        }
    }
}

/// The identity of a check: stable id (`fabric.twins-same-subnet`), category, what it needs and
/// a one-line title for the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CheckInfo {
    pub id: &'static str,
    pub category: Category,
    pub needs: CheckNeeds,
    pub title: &'static str,
}
