//! `model pull` as a plan: where the weights come from (the Hub, or a folder on the head), the
//! route each worker's copy takes to the head over the fabric, and the cache folder on every
//! node. GGUF file(s) (a `REPO:QUANT` spec, or `--gguf`) go to the head alone: llama.cpp's
//! head loads them and sends its RPC servers their tensors over the network. Pure: `--dry-run`
//! prints it; `pull` carries it out.

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
            ..
        } => resolve_base(
            endpoint,
            repo,
            commit.as_deref().unwrap_or(revision.as_str()),
        ),
        ModelSource::Local { path } => format!("{path} on {head}"),
    };
    // GGUF file(s) are read by llama.cpp's head alone.
    let holders = if req.model.gguf().is_some() {
        &nodes[..1]
    } else {
        nodes
    };
    Some(PullPlan {
        model: req.model.clone(),
        copy_from: head_addr.map(|a| format!("{head}:{a} over ssh")),
        head,
        download_from,
        routes: copy_routes(holders),
        nodes: holders
            .iter()
            .map(|n| PullNode {
                node: n.name.clone(),
                dir: req.model.node_dir(&home),
            })
            .collect(),
        streams: req.streams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::read_snapshot_dir;

    fn two_sparks() -> Vec<NodeInput> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/seed-001-two-sparks-both-twins");
        ["spark", "spark2"]
            .iter()
            .map(|n| NodeInput {
                name: NodeName::new(*n).unwrap(),
                facts: read_snapshot_dir(&root.join(n)).unwrap(),
            })
            .collect()
    }

    fn planned(model: &str) -> PullPlan {
        let req = PullRequest {
            model: ModelSource::parse(model, None).unwrap(),
            hf_home: None,
            streams: 4,
            range_size: 1 << 20,
        };
        plan(&req, &two_sparks(), "http://hub").unwrap()
    }

    #[test]
    fn gguf_files_go_to_the_head_alone_and_a_repository_to_every_node() {
        let p = planned("unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M");
        let nodes: Vec<&str> = p.nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(nodes, ["spark"]);
        assert!(p.routes.is_empty(), "{:?}", p.routes);
        assert_eq!(
            p.download_from,
            "http://hub/unsloth/Qwen3-30B-A3B-GGUF/resolve/main"
        );
        let p = planned("Qwen/Qwen2.5-0.5B-Instruct");
        assert_eq!(p.nodes.len(), 2);
        assert_eq!(p.routes.len(), 1);
    }
}
