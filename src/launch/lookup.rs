//! The pre-plan step: what a plan needs from live nodes before it can be made, looked up once
//! (everything is checked before the first effect). Each node's `$HOME` (where its
//! Hugging Face cache is) and, for a Hub model, the Hub's answer from the head
//! (the commit of the revision and its files; a gated model without a token stops here, before
//! anything starts), and the NCCL each node's image loads (`apply::nccl`: once per image
//! digest, cached; with `--nccl-from`, its library too). Read-only (the NCCL is read in a
//! container that is created, never started, and removed): a dry run on live nodes does it too,
//! so the plan it prints is the plan a run executes. The model's shape and footprint are read
//! where its files are by `staging::shape`.

use std::sync::Arc;

use crate::model::ModelSource;
use crate::model::footprint::{Footprint, GGUF_LAYOUT, Known, WeightsSize};
use crate::model::hub::HubError;
use crate::node::{NodeFailures, all_ok, for_each_node};
use crate::progress::Reporter;
use crate::runtime::shell::{NodeShell, ShellError};
use crate::workload::launch::Lookups;
use crate::workload::nccl_lib::{ImageAsk, NcclFrom, NcclReads};

use crate::staging as stage;
use crate::staging::shape::{config_from_hub, model_on_head, understood};

/// Why the lookups failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("cannot read $HOME: {0}")]
    Homes(NodeFailures<HomeError>),
    #[error(transparent)]
    Hub(#[from] HubError),
}

/// Why one node's `$HOME` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("no shell")]
    NoShell,
    #[error(transparent)]
    Shell(#[from] ShellError),
    #[error("no absolute $HOME ({stderr})")]
    NotAbsolute { stderr: String },
}

impl LookupError {
    /// The user's to fix (a gated or missing model, a revision that does not exist): exit 2.
    pub fn is_refusal(&self) -> bool {
        matches!(self, LookupError::Hub(h) if h.is_refusal())
    }
}

/// Looks up every node's `$HOME` and, for a Hub model, the Hub's answer through the head
/// (`shells[0]`).
pub async fn lookups(
    shells: &[Arc<dyn NodeShell>],
    model: Option<&ModelSource>,
    reporter: &Arc<dyn Reporter>,
) -> Result<Lookups, LookupError> {
    let results = for_each_node(shells.iter().map(|s| s.node().clone()), 0, |name| {
        let shell = shells.iter().find(|s| *s.node() == name).cloned();
        async move {
            let shell = shell.ok_or(HomeError::NoShell)?;
            let out = shell.run("printf '%s' \"$HOME\"", Vec::new(), None).await?;
            let home = out.stdout.trim().to_string();
            if !out.success() || !home.starts_with('/') {
                return Err(HomeError::NotAbsolute {
                    stderr: out.stderr_tail().trim().to_string(),
                });
            }
            Ok(home)
        }
    })
    .await;
    let homes = all_ok(results).map_err(LookupError::Homes)?;
    let mut found = Lookups {
        homes: homes.into_iter().collect(),
        ..Lookups::default()
    };
    let (Some(model), Some(head)) = (model, shells.first()) else {
        return Ok(found);
    };
    if let ModelSource::Local { path } = model {
        let (shape, footprint) = model_on_head(head.as_ref(), path).await;
        found.shape = shape;
        found.footprint = footprint;
        return Ok(found);
    }
    let step = reporter.step(&format!("Resolve {model}"));
    let resolved = stage::resolve_on_head(
        head.clone(),
        &stage::hf_endpoint(),
        model,
        stage::hf_token(),
    )
    .await?;
    if let Some(r) = &resolved {
        step.ok_with(&format!(
            "commit {}, {}",
            r.commit.chars().take(12).collect::<String>(),
            crate::progress::human_bytes(r.total_bytes())
        ));
    } else {
        step.ok();
    }
    if let Some(picked) = resolved
        .as_ref()
        .and_then(|r| r.gguf.as_ref()?.picked.as_ref())
    {
        // A GGUF model's shape is in its header; its size in the Hub's listing.
        let files = resolved.iter().flat_map(|r| &r.files);
        found.footprint = Footprint {
            kv: Known::NotKnown(GGUF_LAYOUT.to_string()),
            weights: WeightsSize::of_gguf(
                &picked.parts,
                files.map(|f| (f.path.as_str(), f.size)),
                "the Hub's listing",
            )
            .into(),
        };
    } else if let (Some(r), ModelSource::Hub { repo, .. }) = (&resolved, model) {
        let config = config_from_hub(head.clone(), repo, &r.commit).await;
        let weights = WeightsSize::from_files(
            r.files.iter().map(|f| (f.path.as_str(), f.size)),
            "the Hub's listing",
        );
        (found.shape, found.footprint) = understood(config, weights.into());
    }
    found.model = resolved;
    Ok(found)
}

/// Reads the NCCL of every node's image (and `--nccl-from`'s library) for the plan, with one
/// progress line. Failures are part of the answer (the plan says "not yet known" and why);
/// nothing here stops a launch.
pub async fn nccl(
    cluster: &crate::runtime::Cluster,
    asks: &std::collections::BTreeMap<crate::node::NodeName, ImageAsk>,
    from: Option<&NcclFrom>,
    concurrency: usize,
    reporter: &Arc<dyn Reporter>,
) -> NcclReads {
    let mut images: Vec<&str> = asks.values().map(|a| a.image.as_str()).collect();
    images.sort();
    images.dedup();
    let step = reporter.step(&format!(
        "Read the NCCL of {} on {} node{}",
        images.join(", "),
        asks.len(),
        if asks.len() == 1 { "" } else { "s" }
    ));
    let probes = asks
        .iter()
        .map(|(n, a)| {
            (
                n.clone(),
                crate::runtime::libnccl::LoaderProbe {
                    image: a.image.clone(),
                    ld_library_path: a.ld_library_path.clone(),
                    ld_preload: a.ld_preload.clone(),
                    mounts: Vec::new(),
                },
            )
        })
        .collect();
    let reads = crate::apply::nccl::lookups(cluster, &probes, from, concurrency).await;
    step.ok_with(&summary(&reads));
    reads
}

fn summary(reads: &NcclReads) -> String {
    use crate::libnccl::ImageRead;
    let mut seen: Vec<String> = Vec::new();
    for (_, r) in reads.images.values() {
        let s = match r {
            ImageRead::Read { resolution, .. } => match &resolution.loads {
                Some(f) => match &f.version {
                    Some(v) => format!("NCCL {v}"),
                    None => format!("{} (no NCCL version string)", f.path),
                },
                None => "no libnccl.so.2".to_string(),
            },
            ImageRead::NotOnNode => "not on the node yet".to_string(),
            ImageRead::Failed { .. } => "unreadable".to_string(),
        };
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    seen.join("; ")
}
