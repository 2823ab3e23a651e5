//! Getting an image onto nodes: `image push` and every launching command's EnsureImage step.
//!
//! Each target node is compared by content (`runtime::image`) and skipped when it already has
//! the image; a node of another CPU architecture is refused with what to do
//! (`plan::image::push_actions`). The rest get it streamed from the source engine: ONE read
//! of the layers some target lacks (straight from the engine's layer store on this machine
//! where it can be read, `runtime::layer_store`; else the engine's export), cut per target to
//! the layers it lacks and teed chunk by chunk into one bounded channel per target, each
//! feeding that target's `docker load` over its (local or SSH-forwarded) engine socket, all at
//! once. Memory stays constant (a few MiB per target), nothing is written to disk, and a slow
//! node only slows the push (backpressure), never grows a buffer.
//!
//! `command`: `image push` as one call ([`push`]: request in, [`ImagePushReport`] out);
//! `render`: how its report is shown.

pub mod build;
mod command;
mod render;

pub use command::{ImagePushError, ImagePushReport, ImagePushRequest, push};

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::node::NodeName;
use crate::node::fanout::{NodeFailures, for_each_node};
use crate::plan::image::{ImageFacts, PushAction, TargetFacts, push_actions};
use crate::plan::layers::{LayerFilter, Piece};
use crate::progress::{Reporter, Transfer};
use crate::runtime::image::{export, image_facts, import, layer_chains};
use crate::runtime::layer_store::LayerStore;
use crate::runtime::{Cluster, Engine, RuntimeError};

/// Chunks sent to the targets are coalesced to about this size.
const CHUNK: usize = 1 << 20;
/// Chunks buffered per target (so at most CHUNK × DEPTH bytes in flight per node).
const DEPTH: usize = 8;
/// A target that receives nothing for this long fails (a stalled link or engine).
const STALL: Duration = Duration::from_secs(120);

/// What happened on one node.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum NodePush {
    /// Already had the same content.
    Skipped,
    /// Has its own build for its own architecture.
    SkippedOwnArch {
        id: String,
    },
    Pushed {
        bytes: u64,
        seconds: f64,
        /// Layers sent (the others the node already held) of the image's layers.
        layers_sent: usize,
        layers: usize,
        read_from: ReadFrom,
    },
    /// Refused (wrong architecture); the reason says what to do.
    Refused {
        reason: String,
    },
    Failed {
        error: String,
    },
}

/// Where the source's bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadFrom {
    /// The engine's layer store on this machine, only the layers some target lacked.
    LayerStore,
    /// The engine's export of the whole image (`docker save`).
    Export,
}

/// The outcome of a push to several nodes.
#[derive(Clone, Debug, Serialize)]
pub struct PushReport {
    pub image: ImageFacts,
    pub source: NodeName,
    pub nodes: Vec<(NodeName, NodePush)>,
    /// The CPU architectures of a mixed cluster (source and targets), when there is more than
    /// one: every architecture then needs its own build of the image.
    pub mixed_arches: Option<Vec<String>>,
}

impl PushReport {
    pub fn refused(&self) -> Vec<(&NodeName, &str)> {
        self.nodes
            .iter()
            .filter_map(|(n, p)| match p {
                NodePush::Refused { reason } => Some((n, reason.as_str())),
                _ => None,
            })
            .collect()
    }

    pub fn failed(&self) -> Vec<(&NodeName, &str)> {
        self.nodes
            .iter()
            .filter_map(|(n, p)| match p {
                NodePush::Failed { error } => Some((n, error.as_str())),
                _ => None,
            })
            .collect()
    }

    pub fn ok(&self) -> bool {
        self.refused().is_empty() && self.failed().is_empty()
    }

    /// `pushed to 2 nodes, 1 already had it`.
    pub fn summary(&self) -> String {
        let pushed = self
            .nodes
            .iter()
            .filter(|(_, p)| matches!(p, NodePush::Pushed { .. }))
            .count();
        let skipped = self
            .nodes
            .iter()
            .filter(|(_, p)| matches!(p, NodePush::Skipped | NodePush::SkippedOwnArch { .. }))
            .count();
        let mut parts = Vec::new();
        if pushed > 0 {
            parts.push(format!("pushed to {pushed} node{}", plural(pushed)));
        }
        if skipped > 0 {
            parts.push(format!("{skipped} node{} already had it", plural(skipped)));
        }
        let bad = self.refused().len() + self.failed().len();
        if bad > 0 {
            parts.push(format!("{bad} failed"));
        }
        if parts.is_empty() {
            format!("already on {}", self.source)
        } else {
            parts.join(", ")
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Why a push could not even begin.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{node}: {error}")]
    Source { node: NodeName, error: RuntimeError },
    #[error(
        "image {image} is not on {node}; fix: `docker pull {image}` or build it there, then push it"
    )]
    NotOnSource { image: String, node: NodeName },
    #[error(
        "image {image} is on none of the nodes ({nodes}); fix: `docker pull {image}` (or build it) on this machine first"
    )]
    Nowhere { image: String, nodes: String },
    #[error("cannot look at the target nodes: {0}")]
    Targets(NodeFailures<RuntimeError>),
}

impl PushError {
    /// The image is not where it must be: the user's to fix.
    pub fn is_missing_image(&self) -> bool {
        matches!(
            self,
            PushError::NotOnSource { .. } | PushError::Nowhere { .. }
        )
    }
}

/// Pushes `reference` from the engine of `source` to `targets` (skipping nodes that already
/// have it), with a progress bar per node. Transfers run `concurrency` nodes at a time (0 = all
/// at once), one export per batch.
pub async fn push_image(
    cluster: &Cluster,
    source: &NodeName,
    reference: &str,
    targets: &[NodeName],
    concurrency: usize,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<PushReport, PushError> {
    let (src_engine, image) = source_image(cluster, source, reference).await?;
    let targets: Vec<NodeName> = targets.iter().filter(|t| *t != source).cloned().collect();
    let facts = gather_targets(cluster, reference, &targets).await?;
    push_with_facts(
        cluster,
        source,
        src_engine,
        image,
        facts,
        concurrency,
        reporter,
        cancel,
    )
    .await
}

/// What a push would do, decided exactly as [`push_image`] decides, without moving a byte:
/// the image on the source, and per target node skip / push / keep its own build / refuse.
#[derive(Clone, Debug, Serialize)]
pub struct PushPlan {
    pub image: ImageFacts,
    pub source: NodeName,
    pub nodes: Vec<(NodeName, PushAction)>,
    /// As in [`PushReport::mixed_arches`].
    pub mixed_arches: Option<Vec<String>>,
}

/// Reads the source's image and every target's (in parallel) and returns what
/// [`push_image`] would do on each node. Read-only.
pub async fn plan_push(
    cluster: &Cluster,
    source: &NodeName,
    reference: &str,
    targets: &[NodeName],
) -> Result<PushPlan, PushError> {
    let (src_engine, image) = source_image(cluster, source, reference).await?;
    let targets: Vec<NodeName> = targets.iter().filter(|t| *t != source).cloned().collect();
    let facts = gather_targets(cluster, reference, &targets).await?;
    let mut arches: Vec<(NodeName, String)> =
        vec![(source.clone(), src_engine.features().arch.to_string())];
    arches.extend(facts.iter().map(|f| (f.node.clone(), f.arch.clone())));
    Ok(PushPlan {
        nodes: push_actions(&image, &facts),
        mixed_arches: crate::plan::image::mixed_arches(&arches),
        image,
        source: source.clone(),
    })
}

/// The source node's engine and what it holds under `reference` (which must be there).
async fn source_image<'a>(
    cluster: &'a Cluster,
    source: &NodeName,
    reference: &str,
) -> Result<(&'a Engine, ImageFacts), PushError> {
    let failed = |error| PushError::Source {
        node: source.clone(),
        error,
    };
    let engine = cluster
        .node(source)
        .map_err(failed)?
        .engine()
        .await
        .map_err(failed)?;
    let image = image_facts(engine, reference)
        .await
        .map_err(failed)?
        .ok_or_else(|| PushError::NotOnSource {
            image: reference.to_string(),
            node: source.clone(),
        })?;
    Ok((engine, image))
}

async fn gather_targets(
    cluster: &Cluster,
    reference: &str,
    targets: &[NodeName],
) -> Result<Vec<TargetFacts>, PushError> {
    let results = for_each_node(targets.to_vec(), 0, |node| async move {
        let engine = cluster.node(&node)?.engine().await?;
        let present = image_facts(engine, reference).await?;
        let chains = layer_chains(engine).await?;
        Ok::<_, RuntimeError>(TargetFacts {
            node: node.clone(),
            arch: engine.features().arch.to_string(),
            present,
            chains,
        })
    })
    .await;
    crate::node::all_ok(results)
        .map(|ok| ok.into_iter().map(|(_, f)| f).collect())
        .map_err(PushError::Targets)
}

#[allow(clippy::too_many_arguments)]
async fn push_with_facts(
    cluster: &Cluster,
    source: &NodeName,
    src_engine: &Engine,
    image: ImageFacts,
    facts: Vec<TargetFacts>,
    concurrency: usize,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<PushReport, PushError> {
    let mut arches: Vec<(NodeName, String)> =
        vec![(source.clone(), src_engine.features().arch.to_string())];
    arches.extend(facts.iter().map(|f| (f.node.clone(), f.arch.clone())));
    let mixed = crate::plan::image::mixed_arches(&arches);
    let actions = push_actions(&image, &facts);
    let mut outcome: HashMap<NodeName, NodePush> = HashMap::new();
    let mut to_push: Vec<(NodeName, Vec<usize>)> = Vec::new();
    for (node, action) in &actions {
        match action {
            PushAction::Skip => {
                outcome.insert(node.clone(), NodePush::Skipped);
            }
            PushAction::SkipOwnArch { id } => {
                outcome.insert(node.clone(), NodePush::SkippedOwnArch { id: id.clone() });
            }
            PushAction::Refuse { reason } => {
                outcome.insert(
                    node.clone(),
                    NodePush::Refused {
                        reason: reason.clone(),
                    },
                );
            }
            PushAction::Push { missing, .. } => to_push.push((node.clone(), missing.clone())),
        }
    }
    let batch = if concurrency == 0 {
        to_push.len().max(1)
    } else {
        concurrency
    };
    for group in to_push.chunks(batch) {
        let (read_from, results) =
            tee_push(cluster, src_engine, &image, group, reporter, cancel).await;
        for (node, r) in results {
            let layers_sent = group
                .iter()
                .find(|(n, _)| *n == node)
                .map(|(_, m)| m.len())
                .unwrap_or(0);
            outcome.insert(
                node,
                match r {
                    Ok((bytes, seconds)) => NodePush::Pushed {
                        bytes,
                        seconds,
                        layers_sent,
                        layers: image.layers.len(),
                        read_from,
                    },
                    Err(e) => NodePush::Failed {
                        error: e.to_string(),
                    },
                },
            );
        }
    }
    let nodes = actions
        .into_iter()
        .map(|(node, _)| {
            let p = outcome.remove(&node).unwrap_or(NodePush::Failed {
                error: "not attempted".to_string(),
            });
            (node, p)
        })
        .collect();
    Ok(PushReport {
        image,
        source: source.clone(),
        nodes,
        mixed_arches: mixed,
    })
}

type Chunk = Result<Bytes, std::io::Error>;
type Source = Pin<Box<dyn Stream<Item = Result<Bytes, RuntimeError>> + Send>>;

/// The image as a `docker load` stream holding at least the layers `wanted`: from the layer
/// store when it can be read here (checked before the first byte), else the engine's export.
async fn read_source(
    src_engine: &Engine,
    image: &ImageFacts,
    wanted: BTreeSet<usize>,
) -> (ReadFrom, Source) {
    let reference = image.reference.clone();
    let checked = match LayerStore::of(src_engine.features()) {
        Ok(store) => {
            let image = image.clone();
            tokio::task::spawn_blocking(move || store.archive(&image, &wanted))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        }
        Err(e) => Err(e.to_string()),
    };
    match checked {
        Ok(archive) => {
            tracing::debug!(
                "{reference}: reading {} bytes from the layer store",
                archive.bytes()
            );
            (ReadFrom::LayerStore, Box::pin(archive.stream()))
        }
        Err(why) => {
            tracing::info!("{reference}: read through the engine's export ({why})");
            (ReadFrom::Export, Box::pin(export(src_engine, &reference)))
        }
    }
}

/// One read of the source, cut per node to the layers that node lacks
/// (`plan::layers::LayerFilter`) and streamed into one import per node in `group`, all
/// running at once.
async fn tee_push(
    cluster: &Cluster,
    src_engine: &Engine,
    image: &ImageFacts,
    group: &[(NodeName, Vec<usize>)],
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> (ReadFrom, Vec<(NodeName, Result<(u64, f64), RuntimeError>)>) {
    let wanted: BTreeSet<usize> = group.iter().flat_map(|(_, m)| m.iter().copied()).collect();
    let (read_from, mut out) = read_source(src_engine, image, wanted).await;
    let mut senders: Vec<Option<mpsc::Sender<Chunk>>> = Vec::new();
    let receivers: Mutex<HashMap<NodeName, mpsc::Receiver<Chunk>>> = Mutex::new(HashMap::new());
    for (node, _) in group {
        let (tx, rx) = mpsc::channel(DEPTH);
        senders.push(Some(tx));
        if let Ok(mut r) = receivers.lock() {
            r.insert(node.clone(), rx);
        }
    }
    let mut filter = LayerFilter::new(
        image.layers.clone(),
        group
            .iter()
            .map(|(_, m)| m.iter().copied().collect())
            .collect(),
    );
    let reference = image.reference.clone();
    let total_layers = image.layers.len();
    // Why the read of the source failed, when it did: each import then fails with it, and
    // says so rather than the engine client's words about a body that broke off.
    let source_failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let failed_at_source = source_failed.clone();
    let source_node = src_engine.node().clone();
    // The pump owns the senders: when it ends, every import sees the end of its input.
    let pump = async move {
        let mut senders = senders;
        let mut buf = BytesMut::with_capacity(CHUNK);
        loop {
            let item = tokio::select! {
                _ = cancel.cancelled() => {
                    send_all(&mut senders, Err(std::io::Error::other("interrupted"))).await;
                    return;
                }
                item = out.next() => item,
            };
            match item {
                Some(Ok(bytes)) => {
                    buf.extend_from_slice(&bytes);
                    if buf.len() >= CHUNK {
                        let chunk = buf.split().freeze();
                        send_pieces(&mut senders, filter.push(chunk)).await;
                        if senders.iter().all(Option::is_none) {
                            return;
                        }
                    }
                }
                Some(Err(e)) => {
                    if let Ok(mut f) = failed_at_source.lock() {
                        *f = Some(e.to_string());
                    }
                    send_all(&mut senders, Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
                None => {
                    if !buf.is_empty() {
                        send_pieces(&mut senders, filter.push(buf.split().freeze())).await;
                    }
                    tracing::debug!(
                        "{reference}: {} of {} layers recognised in the stream",
                        filter.recognised.len(),
                        total_layers
                    );
                    return;
                }
            }
        }
    };
    let names: Vec<NodeName> = group.iter().map(|(n, _)| n.clone()).collect();
    let imports = for_each_node(names, 0, |node| {
        let rx = receivers.lock().ok().and_then(|mut r| r.remove(&node));
        let missing = group
            .iter()
            .find(|(n, _)| *n == node)
            .map(|(_, m)| m.len())
            .unwrap_or(0);
        // Layer sizes are not known before the export: a full push has the image's size.
        let estimate = (missing == image.layers.len()).then_some(image.size);
        let label = if missing == image.layers.len() {
            format!("push {}", image.reference)
        } else {
            format!(
                "push {} ({missing} of {} layers)",
                image.reference,
                image.layers.len()
            )
        };
        let transfer: Arc<dyn Transfer> = Arc::from(reporter.transfer(&node, &label, estimate));
        let expected = image.content.clone();
        let reference = image.reference.clone();
        let source_failed = source_failed.clone();
        let source_node = source_node.clone();
        async move {
            let Some(rx) = rx else {
                return Err(RuntimeError::Other("internal: no channel".to_string()));
            };
            let engine = cluster.node(&node)?.engine().await?;
            let started = Instant::now();
            let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let stream = counted(rx, transfer.clone(), sent.clone());
            let result = import(engine, stream).await;
            let bytes = sent.load(std::sync::atomic::Ordering::Relaxed);
            let seconds = started.elapsed().as_secs_f64();
            if let Err(e) = result {
                transfer.finish("failed");
                let at_source = source_failed.lock().ok().and_then(|f| f.clone());
                return Err(push_failure(
                    &reference,
                    &source_node,
                    read_from,
                    at_source.as_deref(),
                    e,
                ));
            }
            // Trust, but verify: the node must now hold exactly the content we sent.
            match image_facts(engine, &reference).await? {
                Some(f) if f.content == expected => {
                    transfer.finish("pushed");
                    Ok((bytes, seconds))
                }
                other => {
                    transfer.finish("failed");
                    Err(RuntimeError::Other(format!(
                        "after the load, {reference} on this node has other content ({})",
                        other.map(|f| f.id).unwrap_or_else(|| "missing".to_string())
                    )))
                }
            }
        }
    });
    let ((), results) = tokio::join!(pump, imports);
    (read_from, results)
}

/// Why a node's push failed: when reading the image on the source failed, that (the source,
/// how it was read, its error), never the load's error about an input that broke off; else
/// the load's own error.
fn push_failure(
    reference: &str,
    source: &NodeName,
    read_from: ReadFrom,
    at_source: Option<&str>,
    load: RuntimeError,
) -> RuntimeError {
    match at_source {
        Some(why) => {
            let how = match read_from {
                ReadFrom::LayerStore => "reading its layers from the engine's store",
                ReadFrom::Export => "the engine's export (docker save)",
            };
            tracing::debug!("the load broke off with the source: {load}");
            RuntimeError::Other(format!(
                "reading {reference} on {source} ({how}) failed, so nothing more could be sent here: {why}"
            ))
        }
        None => load,
    }
}

/// Sends an error (or the end) to every live target.
async fn send_all(senders: &mut [Option<mpsc::Sender<Chunk>>], chunk: Chunk) {
    for slot in senders.iter_mut() {
        if let Some(tx) = slot {
            let item = match &chunk {
                Ok(b) => Ok(b.clone()),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            if tx.send(item).await.is_err() {
                *slot = None;
            }
        }
    }
}

/// Sends each piece to the targets it is for; drops targets whose import has ended.
async fn send_pieces(senders: &mut [Option<mpsc::Sender<Chunk>>], pieces: Vec<Piece>) {
    for piece in pieces {
        for (slot, to) in senders.iter_mut().zip(piece.to.iter()) {
            if !*to {
                continue;
            }
            if let Some(tx) = slot
                && tx.send(Ok(piece.bytes.clone())).await.is_err()
            {
                *slot = None;
            }
        }
    }
}

/// The receiver as a byte stream that counts what passes and fails after [`STALL`] without
/// data.
fn counted(
    rx: mpsc::Receiver<Chunk>,
    transfer: Arc<dyn Transfer>,
    sent: Arc<std::sync::atomic::AtomicU64>,
) -> impl futures::Stream<Item = Chunk> + Send + 'static {
    futures::stream::unfold(Some(rx), move |rx| {
        let transfer = transfer.clone();
        let sent = sent.clone();
        async move {
            let mut rx = rx?;
            match tokio::time::timeout(STALL, rx.recv()).await {
                Err(_) => Some((
                    Err(std::io::Error::other(format!(
                        "no data for {}s: the source stalled",
                        STALL.as_secs()
                    ))),
                    None,
                )),
                Ok(None) => None,
                Ok(Some(Ok(bytes))) => {
                    let n = bytes.len() as u64;
                    sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    transfer.advance(n);
                    Some((Ok(bytes), Some(rx)))
                }
                Ok(Some(Err(e))) => Some((Err(e), None)),
            }
        }
    })
}

/// What a launching command does when a node lacks the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PushPolicy {
    /// Push it (and say so).
    #[default]
    Push,
    /// Refuse to start, naming the nodes and the push command.
    Refuse,
}

/// Makes sure every node in `nodes` has `reference` with the same content: the source is
/// this machine when it is one of the cluster's nodes and has the image, else the first node
/// (head first) that has it. Nodes that lack it get it pushed, or, with
/// [`PushPolicy::Refuse`], the start is refused with the command that would fix it.
pub async fn ensure_image(
    cluster: &Cluster,
    reference: &str,
    nodes: &[NodeName],
    policy: PushPolicy,
    concurrency: usize,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<PushReport, EnsureError> {
    // Look at every node of the cluster that could be a source, and every target.
    let mut candidates: Vec<NodeName> = cluster
        .nodes()
        .iter()
        .filter(|n| n.target.is_local())
        .map(|n| n.name().clone())
        .collect();
    for n in nodes {
        if !candidates.contains(n) {
            candidates.push(n.clone());
        }
    }
    let facts = gather_targets(cluster, reference, &candidates)
        .await
        .map_err(EnsureError::Push)?;
    let source = facts
        .iter()
        .find(|f| f.present.is_some())
        .map(|f| f.node.clone())
        .ok_or_else(|| {
            EnsureError::Push(PushError::Nowhere {
                image: reference.to_string(),
                nodes: candidates
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        })?;
    let Some(image) = facts
        .iter()
        .find(|f| f.node == source)
        .and_then(|f| f.present.clone())
    else {
        return Err(EnsureError::Push(PushError::NotOnSource {
            image: reference.to_string(),
            node: source,
        }));
    };
    let targets: Vec<TargetFacts> = facts
        .into_iter()
        .filter(|f| f.node != source && nodes.contains(&f.node))
        .collect();
    if policy == PushPolicy::Refuse {
        let missing: Vec<String> = push_actions(&image, &targets)
            .into_iter()
            .filter(|(_, a)| !matches!(a, PushAction::Skip | PushAction::SkipOwnArch { .. }))
            .map(|(n, _)| n.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(EnsureError::Missing {
                image: reference.to_string(),
                nodes: missing,
            });
        }
    }
    let src_engine = cluster
        .node(&source)
        .map_err(|error| {
            EnsureError::Push(PushError::Source {
                node: source.clone(),
                error,
            })
        })?
        .engine()
        .await
        .map_err(|error| {
            EnsureError::Push(PushError::Source {
                node: source.clone(),
                error,
            })
        })?;
    let report = push_with_facts(
        cluster,
        &source,
        src_engine,
        image,
        targets,
        concurrency,
        reporter,
        cancel,
    )
    .await
    .map_err(EnsureError::Push)?;
    if !report.refused().is_empty() {
        return Err(EnsureError::Refused(report));
    }
    if !report.failed().is_empty() {
        return Err(EnsureError::Failed(report));
    }
    Ok(report)
}

/// Why EnsureImage failed.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    #[error("{0}")]
    Push(PushError),
    #[error(
        "image {image} is missing or different on {}; fix: `spark-launch image push {image} --to {}`",
        .nodes.join(", "),
        .nodes.join(",")
    )]
    Missing { image: String, nodes: Vec<String> },
    #[error("{}", refused_text(.0))]
    Refused(PushReport),
    #[error("{}", failed_text(.0))]
    Failed(PushReport),
}

fn refused_text(r: &PushReport) -> String {
    let mut s = format!("image {} cannot run on every node:", r.image.reference);
    if let Some(arches) = &r.mixed_arches {
        s.push_str(&format!(
            " this is a mixed cluster ({}), each architecture needs its own build of the image",
            arches.join(" + ")
        ));
    }
    for (n, reason) in r.refused() {
        s.push_str(&format!("\n  {n}: {reason}"));
    }
    s
}

fn failed_text(r: &PushReport) -> String {
    let failed = r.failed();
    let mut s = format!(
        "push {} failed on {} of {} nodes:",
        r.image.reference,
        failed.len(),
        r.nodes.len()
    );
    for (n, e) in failed {
        s.push_str(&format!("\n  {n}: {e}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    #[test]
    fn a_push_whose_source_failed_names_the_source_and_its_error_not_the_loads() {
        // What the target's load says when its input breaks off (the engine client's words).
        let load = || {
            RuntimeError::Other(
            "load the image: error in the hyper legacy client: error reading a body from connection".into(),
        )
        };
        let e = push_failure(
            "vllm:26.04",
            &n("spark-1"),
            ReadFrom::Export,
            Some("export image vllm:26.04: No such image: vllm:26.04 (HTTP 404)"),
            load(),
        )
        .to_string();
        assert_eq!(
            e,
            "reading vllm:26.04 on spark-1 (the engine's export (docker save)) failed, so nothing more could be sent here: export image vllm:26.04: No such image: vllm:26.04 (HTTP 404)"
        );
        assert!(!e.contains("hyper") && !e.contains("load the image"), "{e}");
        // The source read to its end: the load's own error is the cause.
        let e = push_failure(
            "vllm:26.04",
            &n("spark-1"),
            ReadFrom::LayerStore,
            None,
            load(),
        );
        assert!(e.to_string().starts_with("load the image:"), "{e}");
    }

    fn report(nodes: Vec<(NodeName, NodePush)>, mixed: Option<Vec<String>>) -> PushReport {
        PushReport {
            image: ImageFacts {
                reference: "nccl:1".into(),
                id: "sha256:1".into(),
                content: "sha256:c".into(),
                arch: "arm64".into(),
                os: "linux".into(),
                size: 10,
                layers: vec![],
            },
            source: n("spark-a"),
            nodes,
            mixed_arches: mixed,
        }
    }

    #[test]
    fn a_refusal_in_a_mixed_cluster_says_each_architecture_needs_its_build() {
        let r = report(
            vec![
                (n("spark-b"), NodePush::Skipped),
                (
                    n("ws"),
                    NodePush::Refused {
                        reason: "built for linux/arm64 but ws is linux/amd64".into(),
                    },
                ),
            ],
            Some(vec!["amd64".into(), "arm64".into()]),
        );
        let text = EnsureError::Refused(r).to_string();
        assert_eq!(
            text,
            "image nccl:1 cannot run on every node: this is a mixed cluster (amd64 + arm64), each architecture needs its own build of the image\n  ws: built for linux/arm64 but ws is linux/amd64"
        );
    }

    #[test]
    fn the_summary_counts_pushed_skipped_and_failed_nodes() {
        let r = report(
            vec![
                (
                    n("b"),
                    NodePush::Pushed {
                        bytes: 1,
                        seconds: 1.0,
                        layers_sent: 1,
                        layers: 1,
                        read_from: ReadFrom::Export,
                    },
                ),
                (n("c"), NodePush::Skipped),
                (n("d"), NodePush::Failed { error: "x".into() }),
            ],
            None,
        );
        assert_eq!(
            r.summary(),
            "pushed to 1 node, 1 node already had it, 1 failed"
        );
        assert!(!r.ok());
        assert_eq!(report(vec![], None).summary(), "already on spark-a");
    }
}
