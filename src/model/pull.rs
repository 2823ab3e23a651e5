//! `model pull` as a plan: where the weights come from (the Hub, or a folder on the head), the
//! route each worker's copy takes to the head over the fabric, and the cache folder on every
//! node. Pure: `--dry-run` prints it; `pull` carries it out.

use serde::Serialize;

use super::ModelSource;
use super::hub::resolve_base;
use super::route::{CopyRoute, copy_routes};
use crate::derive::{NodeInput, derive};
use crate::node::NodeName;

/// The default cache of the user spark-launch connects as, before `$HOME` is known.
pub const DEFAULT_HF_HOME: &str = "~/.cache/huggingface";

/// What `model pull` was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    pub model: ModelSource,
    /// `--hf-home`: the cache on every node [default: `~/.cache/huggingface`].
    pub hf_home: Option<String>,
    /// Long-lived copy streams per node.
    pub streams: usize,
    /// Bytes per range (the unit of progress, retry and resume).
    pub range_size: u64,
}

/// One node's folder for the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PullNode {
    pub node: NodeName,
    pub dir: String,
}

/// Where the weights come from and go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PullPlan {
    pub model: ModelSource,
    pub head: NodeName,
    /// The Hub URL (or the folder on the head) the head reads.
    pub download_from: String,
    /// `HEAD:ADDR over ssh`: the head's control-plane address, when derive found one.
    pub copy_from: Option<String>,
    /// Each worker's path to the head over the fabric.
    pub routes: Vec<(NodeName, CopyRoute)>,
    pub nodes: Vec<PullNode>,
    pub streams: usize,
}

impl PullPlan {
    /// The head's control-plane address (workers fall back to it without a fabric route).
    pub fn head_addr(&self) -> Option<&str> {
        self.copy_from
            .as_deref()
            .and_then(|c| c.split_once(':'))
            .and_then(|(_, rest)| rest.split(' ').next())
    }
}

/// Plans `req` on `nodes` (head first; at least one). `endpoint` is the Hub's base URL.
pub fn plan(req: &PullRequest, nodes: &[NodeInput], endpoint: &str) -> Option<PullPlan> {
    let head = nodes.first()?.name.clone();
    let head_addr = derive(nodes)
        .ok()
        .map(|env| env.nodes[0].control.addr.to_string());
    let home = req
        .hf_home
        .clone()
        .unwrap_or_else(|| DEFAULT_HF_HOME.to_string());
    let download_from = match &req.model {
        ModelSource::Hub {
            repo,
            revision,
            commit,
        } => resolve_base(
            endpoint,
            repo,
            commit.as_deref().unwrap_or(revision.as_str()),
        ),
        ModelSource::Local { path } => format!("{path} on {head}"),
    };
    Some(PullPlan {
        model: req.model.clone(),
        copy_from: head_addr.map(|a| format!("{head}:{a} over ssh")),
        head,
        download_from,
        routes: copy_routes(nodes),
        nodes: nodes
            .iter()
            .map(|n| PullNode {
                node: n.name.clone(),
                dir: req.model.node_dir(&home),
            })
            .collect(),
        streams: req.streams,
    })
}
