//! `spark-launch image push` as one call: [`push`] resolves the nodes, works out where the
//! image comes from and where it goes (`plan::image::push_route`), then plans (on snapshots,
//! or read-only on live nodes with `dry_run`) or pushes, and returns an [`ImagePushReport`]
//! (shown by `render`). The connections close on every exit path (`ResolvedCluster::scope`).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{PushError, PushPlan, PushReport, plan_push, push_image};
use crate::node::NodeName;
use crate::plan::image::{SnapshotPush, push_route, snapshot_push};
use crate::progress::Reporter;
use crate::resolve::{self, Needs, Purpose, ResolveError, ResolvedCluster, Selection};

/// `image push`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct ImagePushRequest {
    pub selection: Selection,
    /// The image, as the source's engine names it.
    pub image: String,
    /// Only these nodes (empty: every node but the source).
    pub to: Vec<NodeName>,
    /// The source node (default: this machine, else the head).
    pub from: Option<NodeName>,
    /// Nodes pushed to at once (0 = all, one export shared by all).
    pub concurrency: usize,
    /// Compare (read-only) and move nothing.
    pub dry_run: bool,
}

/// What `image push` did, or would do.
#[derive(Debug)]
pub enum ImagePushReport {
    /// `--dry-run` on live nodes: per node, what a push would do.
    Planned(PushPlan),
    /// `--dry-run --snapshot`: what a live push compares and where it would stream from.
    OnSnapshots(SnapshotPush),
    /// The push, per node; `interrupted` when Ctrl-C cut it short.
    Pushed {
        report: PushReport,
        interrupted: bool,
    },
}

/// Why `image push` could not do its job. [`ImagePushError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum ImagePushError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// `--from` or `--to` names no node.
    #[error("{0}")]
    Route(String),
    #[error(transparent)]
    Push(#[from] PushError),
}

impl ImagePushError {
    /// 2 for the user's input (an unknown node, an image missing where it must be), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            ImagePushError::Resolve(e) if e.is_invalid_input() => 2,
            ImagePushError::Route(_) => 2,
            ImagePushError::Push(e) if e.is_missing_image() => 2,
            _ => 1,
        }
    }
}

/// Runs `image push` (see the module docs).
pub async fn push(
    req: &ImagePushRequest,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<ImagePushReport, ImagePushError> {
    let purpose = if req.dry_run {
        Purpose::Plan
    } else {
        Purpose::Act
    };
    let needs = if req.selection.snapshots.is_empty() {
        Needs::links(purpose)
    } else {
        Needs::facts(purpose)
    };
    let resolved = resolve::resolve(&req.selection, needs, reporter).await?;
    resolved
        .scope(async |resolved| {
            if resolved.snapshots {
                on_snapshots(req, resolved)
            } else {
                push_live(req, resolved, reporter, cancel).await
            }
        })
        .await
}

async fn push_live(
    req: &ImagePushRequest,
    resolved: &ResolvedCluster,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<ImagePushReport, ImagePushError> {
    let cluster = resolved.runtime()?;
    let local = cluster
        .nodes()
        .iter()
        .find(|n| n.target.is_local())
        .map(|n| n.name().clone());
    let (source, to) = route(req, &cluster.names(), local.as_ref())?;
    if req.dry_run {
        let plan = plan_push(&cluster, &source, &req.image, &to).await?;
        return Ok(ImagePushReport::Planned(plan));
    }
    let step = reporter.step(&format!(
        "Push {} from {source} to {}",
        req.image,
        to.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
    ));
    let pushed = push_image(
        &cluster,
        &source,
        &req.image,
        &to,
        req.concurrency,
        reporter,
        cancel,
    )
    .await;
    let report = match pushed {
        Ok(r) => r,
        Err(e) => {
            step.fail(if e.is_missing_image() {
                "not found"
            } else {
                "failed"
            });
            return Err(e.into());
        }
    };
    if report.ok() {
        step.ok_with(&report.summary());
    } else {
        step.fail(&report.summary());
    }
    Ok(ImagePushReport::Pushed {
        report,
        interrupted: cancel.is_cancelled(),
    })
}

/// `--dry-run --snapshot …`: what a live push compares and where it would stream from, with
/// each node's CPU where the snapshot knows it.
fn on_snapshots(
    req: &ImagePushRequest,
    resolved: &ResolvedCluster,
) -> Result<ImagePushReport, ImagePushError> {
    let nodes = resolved.inputs();
    let names: Vec<NodeName> = nodes.iter().map(|n| n.name.clone()).collect();
    let (source, to) = route(req, &names, None)?;
    let arch = |name: &NodeName| {
        nodes
            .iter()
            .find(|n| n.name == *name)
            .and_then(|n| n.facts.arch.clone())
    };
    Ok(ImagePushReport::OnSnapshots(snapshot_push(
        &req.image, &source, &to, &arch,
    )))
}

/// The source and targets among `names`, or the user's mistake.
fn route(
    req: &ImagePushRequest,
    names: &[NodeName],
    local: Option<&NodeName>,
) -> Result<(NodeName, Vec<NodeName>), ImagePushError> {
    push_route(req.from.as_ref(), &req.to, names, local).map_err(ImagePushError::Route)
}
