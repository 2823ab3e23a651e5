//! The pre-plan step: what a plan needs from live nodes before it can be made, looked up once
//! (STYLE rule 5: everything checked before the first effect). Each node's `$HOME` (where its
//! Hugging Face cache is) and, for a Hub model, the Hub's answer from the head
//! (the commit of the revision and its files; a gated model without a token stops here, before
//! anything starts), and the NCCL each node's image loads (`apply::nccl`: once per image
//! digest, cached; with `--nccl-from`, its library too). Read-only (the NCCL is read in a
//! container that is created, never started, and removed): a dry run on live nodes does it too,
//! so the plan it prints is the plan a run executes.

use std::sync::Arc;

use crate::model::ModelSource;
use crate::model::hub::{HubError, HubTransport};
use crate::model::script::quote;
use crate::model::shape::{ModelShape, ShapeLookup};
use crate::node::{NodeFailures, all_ok, for_each_node};
use crate::progress::Reporter;
use crate::runtime::shell::NodeShell;
use crate::workload::launch::Lookups;
use crate::workload::nccl_lib::{ImageAsk, NcclFrom, NcclReads};

use super::stage;

/// Why the lookups failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("cannot read $HOME: {0}")]
    Homes(NodeFailures<String>),
    #[error(transparent)]
    Hub(#[from] HubError),
}

impl LookupError {
    /// The user's to fix (a gated or missing model, a revision that does not exist): exit 2.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            LookupError::Hub(
                HubError::GatedNoToken { .. }
                    | HubError::NoAccess { .. }
                    | HubError::NotFound { .. }
                    | HubError::NoRevision { .. }
            )
        )
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
            let shell = shell.ok_or_else(|| "no shell".to_string())?;
            let out = shell
                .run("printf '%s' \"$HOME\"", Vec::new(), None)
                .await
                .map_err(|e| e.to_string())?;
            let home = out.stdout.trim().to_string();
            if !out.success() || !home.starts_with('/') {
                return Err(format!("no absolute $HOME ({})", out.stderr_tail().trim()));
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
        found.shape = shape_of_local(head.as_ref(), path).await;
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
    if let (Some(r), ModelSource::Hub { repo, .. }) = (&resolved, model) {
        found.shape = shape_from_hub(head.clone(), repo, &r.commit).await;
    }
    found.model = resolved;
    Ok(found)
}

/// The most of a `config.json` read: real ones are a few KB.
const CONFIG_MAX: u64 = 4 << 20;

/// The shape from `config.json` of a Hub model at `rev` (a commit, or a revision's URL
/// segment), fetched with curl through `shell`: one small request. A failure is a warning.
async fn shape_from_hub(
    shell: Arc<dyn NodeShell>,
    repo: &crate::model::RepoId,
    rev: &str,
) -> ShapeLookup {
    let token = stage::hf_token();
    let auth = token.is_some();
    let url = crate::model::hub::resolve_url(&stage::hf_endpoint(), repo, rev, "config.json");
    let transport = super::hub_curl::CurlHub::new(shell, token);
    match transport.get(&url, auth).await {
        Ok(a) if a.status == 200 => shape_of(&a.body),
        Ok(a) => ShapeLookup::Unreadable(format!("{url} answered HTTP {}", a.status)),
        Err(e) => ShapeLookup::Unreadable(format!("cannot fetch {url}: {e}")),
    }
}

/// The shape from `PATH/config.json` on the node of `shell`.
async fn shape_of_local(shell: &dyn NodeShell, path: &str) -> ShapeLookup {
    let file = format!("{}/config.json", path.trim_end_matches('/'));
    let script = format!("head -c {CONFIG_MAX} -- {}", quote(&file));
    match shell.run(&script, Vec::new(), None).await {
        Ok(out) if out.success() => shape_of(&out.stdout),
        Ok(out) => ShapeLookup::Unreadable(format!(
            "cannot read {file} on {}: {}",
            shell.node(),
            out.stderr_tail().trim()
        )),
        Err(e) => ShapeLookup::Unreadable(format!("cannot read {file}: {e}")),
    }
}

fn shape_of(text: &str) -> ShapeLookup {
    match ModelShape::parse(text) {
        Ok(s) => ShapeLookup::Read(s),
        Err(e) => ShapeLookup::Unreadable(e.to_string()),
    }
}

/// The shape for a dry run on snapshots, from this machine: a local model's `config.json` when
/// the folder is here too, a Hub model's from the Hub unless `HF_HUB_OFFLINE=1` (one small
/// request at the revision asked; nothing else is resolved). A failure is a warning.
pub async fn shape_from_here(model: &ModelSource) -> ShapeLookup {
    match model {
        ModelSource::Local { path } => {
            let file = std::path::Path::new(path).join("config.json");
            match crate::input::read_text(
                &file,
                crate::input::InputLimit {
                    max: CONFIG_MAX,
                    hint: "a model's config.json is a few KiB",
                },
            ) {
                Ok(text) => shape_of(&text),
                Err(e) => ShapeLookup::Unreadable(format!(
                    "{} is not readable on this machine ({e}); a live run reads it on the head",
                    file.display()
                )),
            }
        }
        ModelSource::Hub { repo, revision, .. } => {
            if std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v.trim() == "1") {
                return ShapeLookup::Unreadable(
                    "HF_HUB_OFFLINE=1: the Hub was not asked for its config.json".into(),
                );
            }
            let here = match crate::node::NodeName::new("localhost") {
                Ok(n) => n,
                Err(e) => return ShapeLookup::Unreadable(e.to_string()),
            };
            let shell: Arc<dyn NodeShell> = Arc::new(crate::runtime::shell::LocalShell::new(here));
            shape_from_hub(shell, repo, &revision.url_segment()).await
        }
    }
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
    let reads = super::nccl::lookups(cluster, &probes, from, concurrency).await;
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
