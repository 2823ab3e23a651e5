//! Carrying out an `nccl-build` plan: each image built on its node's engine (the build output
//! streamed as that node's lines), then pushed to the other nodes of its CPU architecture
//! (`images::push_image`). Effects only; the plan (`workload::nccl_build`) decides.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{PushError, push_image};
use crate::node::NodeName;
use crate::progress::Reporter;
use crate::runtime::build::{BuildError, BuildRequest, build_image};
use crate::runtime::{Cluster, RuntimeError};
use crate::workload::nccl_build::{self, BuildPlan, CpuArch};

/// One image built (and pushed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuiltImage {
    pub tag: String,
    pub arch: CpuArch,
    pub built_on: NodeName,
    pub image_id: Option<String>,
    pub pushed_to: Vec<NodeName>,
}

/// Why a build did not finish.
#[derive(Debug, thiserror::Error)]
pub enum BuildPlanFailure {
    #[error("{0}: {1}")]
    Node(NodeName, RuntimeError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Push(#[from] PushError),
}

/// Builds every image of `plan`, each then pushed where the plan says.
pub async fn build_all(
    plan: &BuildPlan,
    cluster: &Cluster,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<Vec<BuiltImage>, BuildPlanFailure> {
    let mut done = Vec::new();
    for b in &plan.builds {
        let step = reporter.step(&format!("build {} on {}", b.tag, b.build_on));
        let node = cluster
            .node(&b.build_on)
            .map_err(|e| BuildPlanFailure::Node(b.build_on.clone(), e))?;
        let engine = node
            .engine()
            .await
            .map_err(|e| BuildPlanFailure::Node(b.build_on.clone(), e))?;
        let labels = BTreeMap::from([(
            "dev.spark-launch.built-by".to_string(),
            format!("spark-launch {}", env!("CARGO_PKG_VERSION")),
        )]);
        let req = BuildRequest {
            tag: &b.tag,
            platform: Some(&b.platform),
            build_args: &b.build_args,
            files: nccl_build::CONTEXT,
            labels,
        };
        let on = b.build_on.clone();
        let r = reporter.clone();
        let mut on_line = move |line: &str| r.node_line(&on, line);
        let built = build_image(engine, &req, &mut on_line, cancel).await?;
        step.ok_with(built.image_id.as_deref().unwrap_or(&b.tag));
        if !b.push_to.is_empty() {
            push_image(
                cluster,
                &b.build_on,
                &b.tag,
                &b.push_to,
                0,
                reporter,
                cancel,
            )
            .await?;
        }
        done.push(BuiltImage {
            tag: b.tag.clone(),
            arch: b.arch,
            built_on: b.build_on.clone(),
            image_id: built.image_id,
            pushed_to: b.push_to.clone(),
        });
    }
    Ok(done)
}
