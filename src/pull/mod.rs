//! `model pull` as one call ([`run`]): the nodes resolved, the plan (`model::pull`), then
//! either the plan handed back (`--dry-run`) or the pull carried out — each node's `$HOME`
//! looked up, the model resolved on the Hub from the head, then `stage::stage`: the head
//! downloads once, every worker copies from it over its route (directly, or relayed through
//! the node between them in a ring). The connections close on every exit path
//! (`ResolvedCluster::scope`). `render`: how the result is shown.

mod render;

use std::sync::Arc;

use serde::Serialize;

use crate::launch::lookup::{LookupError, lookups};
use crate::model::ModelSource;
use crate::model::pull::{PullPlan, PullRequest, plan};
use crate::model::route::CopyRoute;
use crate::node::NodeName;
use crate::progress::Reporter;
use crate::resolve::{self, Needs, Purpose, ResolveError, ResolvedCluster, Selection};
use crate::staging::{self as stage, NodeStaged, StageError, StageNode, StageOptions, StageSpec};

/// `model pull`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct PullCommand {
    pub request: PullRequest,
    pub selection: Selection,
    /// Say what would be staged where, and touch nothing.
    pub dry_run: bool,
}

/// What `model pull` did, or would do.
#[derive(Debug)]
pub enum PullReport {
    /// `--dry-run`: where the weights come from and go.
    Planned(PullPlan),
    Pulled(Pulled),
}

/// Runs `model pull` (see the module docs).
pub async fn run(
    command: &PullCommand,
    reporter: &Arc<dyn Reporter>,
) -> Result<PullReport, PullError> {
    let purpose = if command.dry_run {
        Purpose::Plan
    } else {
        Purpose::Act
    };
    let cluster = resolve::resolve(&command.selection, Needs::facts(purpose), reporter).await?;
    cluster
        .scope(async |cluster| {
            let req = &command.request;
            let plan =
                plan(req, &cluster.inputs(), &stage::hf_endpoint()).ok_or(PullError::NoNodes)?;
            if command.dry_run {
                return Ok(PullReport::Planned(plan));
            }
            Ok(PullReport::Pulled(
                pull(req, &plan, cluster, reporter).await?,
            ))
        })
        .await
}

/// What a pull did.
#[derive(Debug, Serialize)]
pub struct Pulled {
    pub model: ModelSource,
    pub nodes: Vec<NodeStaged>,
    pub routes: Vec<(NodeName, CopyRoute)>,
}

/// Why a pull failed. [`PullError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("no nodes to pull to")]
    NoNodes,
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error("{0}")]
    Nodes(String),
}

impl PullError {
    /// 2 for the user's input (the nodes, a model the Hub refuses), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            PullError::Resolve(e) if e.is_invalid_input() => 2,
            PullError::NoNodes => 2,
            PullError::Lookup(l) if l.is_refusal() => 2,
            _ => 1,
        }
    }
}

/// Stages `plan`'s model on every node of `cluster`.
async fn pull(
    req: &PullRequest,
    plan: &PullPlan,
    cluster: &ResolvedCluster,
    reporter: &Arc<dyn Reporter>,
) -> Result<Pulled, PullError> {
    // The plan's nodes only (GGUF file(s) go to the head alone).
    let shells = cluster
        .nodes
        .iter()
        .filter(|n| plan.nodes.iter().any(|p| p.node == n.name))
        .filter_map(|n| n.target.as_ref().map(|t| t.shell()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PullError::Nodes(e.to_string()))?;
    let looked_up = lookups(&shells, Some(&req.model), reporter).await?;
    let head_addr = plan.head_addr().map(str::to_string).unwrap_or_else(|| {
        cluster.nodes[0]
            .config
            .as_ref()
            .and_then(|c| c.addresses.first().cloned())
            .unwrap_or_else(|| plan.head.to_string())
    });
    let node = |i: usize| StageNode {
        shell: shells[i].clone(),
        hf_home: req.hf_home.clone().unwrap_or_else(|| {
            looked_up
                .homes
                .get(shells[i].node())
                .map(|h| format!("{h}/.cache/huggingface"))
                .unwrap_or_default()
        }),
    };
    let model = looked_up
        .model
        .as_ref()
        .map(|r| r.source())
        .unwrap_or_else(|| req.model.clone());
    let spec = StageSpec {
        model: model.clone(),
        resolved: looked_up.model.clone(),
        endpoint: stage::hf_endpoint(),
        token: stage::hf_token(),
        head: node(0),
        workers: (1..shells.len())
            .map(|i| {
                let route = plan
                    .routes
                    .iter()
                    .find(|(n, _)| n == shells[i].node())
                    .map(|(_, r)| r.clone())
                    .unwrap_or(CopyRoute::Control);
                (node(i), stage::head_access(&plan.head, &route, &head_addr))
            })
            .collect(),
        options: StageOptions {
            streams: req.streams,
            range_size: req.range_size,
            ..StageOptions::default()
        },
    };
    let step = reporter.step(&format!("stage {model} on {} nodes", shells.len()));
    let nodes = stage::stage(&spec, reporter.clone()).await?;
    step.ok();
    Ok(Pulled {
        model,
        nodes,
        routes: plan.routes.clone(),
    })
}
