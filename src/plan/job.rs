//! `JobPlan`: what a launching command will do, on which node, in which order. Plain data:
//! `--dry-run --json` prints it, the executor (`apply`) runs exactly it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::spec::{ContainerSpec, JobName};
use crate::node::{NodeName, Role};

/// How a job's work runs on each node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Containers through the node's Docker Engine.
    #[default]
    Docker,
    /// Plain processes (bare-metal installs, GPU machines without Docker).
    Host,
}

/// A plain process on a node, for the host runtime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// `sl-<job>-<node>`, as for containers.
    pub name: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// Same labels as containers (job, node, role), kept next to the process's pid file.
    pub labels: BTreeMap<String, String>,
}

/// What runs on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launch {
    Container(ContainerSpec),
    Process(ProcessSpec),
}

/// One node's part of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    pub node: NodeName,
    pub role: Role,
    pub launch: Launch,
}

/// One step of a job, in order. Steps that name nodes run on those nodes in parallel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// Every listed node has the image with the same content; missing ones get it pushed.
    EnsureImage { image: String, nodes: Vec<NodeName> },
    /// Start the job's container or process on these nodes.
    Start { nodes: Vec<NodeName> },
    /// Write a file inside the node's container (or on the node for the host runtime).
    WriteFile {
        node: NodeName,
        path: String,
        content: String,
        mode: u32,
    },
    /// Run a command inside the node's container (or on the node); keep its output under
    /// `capture` for the report.
    Exec {
        node: NodeName,
        command: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        capture: Option<String>,
        timeout_s: u64,
    },
    /// Wait until an HTTP endpoint on the node answers with success.
    WaitHttp {
        node: NodeName,
        url: String,
        timeout_s: u64,
    },
    /// Stop and remove the job's containers or processes on every node.
    Stop,
}

/// A whole job: who runs what, and the steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    pub job: JobName,
    /// `nccl-test`, `vllm`, ...
    pub workload: String,
    pub runtime: RuntimeKind,
    pub nodes: Vec<NodePlan>,
    pub steps: Vec<Step>,
}

impl JobPlan {
    /// Nothing to run (`--dry-run` says "nothing to do").
    pub fn is_noop(&self) -> bool {
        self.nodes.is_empty() && self.steps.is_empty()
    }

    pub fn node(&self, name: &NodeName) -> Option<&NodePlan> {
        self.nodes.iter().find(|n| &n.node == name)
    }
}
