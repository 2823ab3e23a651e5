//! StageModel: the weights on every node before anything starts (the work is `staging`); with
//! `copy` false (`--no-stage`), only the check that they are there.

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, shell_for};
use crate::apply::phase::{Phase, PhaseError};
use crate::model::CONTAINER_HF_HOME;
use crate::node::NodeName;
use crate::plan::{Launch, StageModel, StepPayload};
use crate::staging::{self as stage, StageNode, StageOptions, StageSpec};

/// The node's Hugging Face cache: the source of the mount the plan puts at `HF_HOME`.
pub fn hf_home_of(ctx: &ApplyContext<'_>, node: &NodeName) -> Option<String> {
    let part = ctx.plan.node(node)?;
    match &part.launch {
        Launch::Container(c) => c
            .mounts
            .iter()
            .find(|m| m.target == CONTAINER_HF_HOME)
            .map(|m| m.source.clone()),
        Launch::Process(p) => p.env.get("HF_HOME").cloned(),
    }
}

/// The head's control-plane address, as derive chose it (in every serving container's env).
pub fn control_addr(ctx: &ApplyContext<'_>, node: &NodeName) -> Option<String> {
    let part = ctx.plan.node(node)?;
    let env = match &part.launch {
        Launch::Container(c) => &c.env,
        Launch::Process(p) => &p.env,
    };
    env.get("VLLM_HOST_IP").cloned()
}

impl<'a> Phase<ApplyContext<'a>> for StageModel {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let Some(head) = self.nodes.first() else {
                return Ok(None);
            };
            let nodes = stage_nodes(ctx, &self.nodes).await?;
            let spec = spec_of(self, ctx, head, nodes).await?;
            if !self.copy {
                return check_only(self, ctx, &spec).await;
            }
            let run = stage::stage(&spec, ctx.reporter.clone());
            let reports = tokio::select! {
                r = run => r?,
                _ = ctx.cancel.cancelled() => return Err(PhaseError::Cancelled),
            };
            let moved: u64 = reports.iter().map(|r| r.fetched_bytes).sum();
            Ok(Some(if moved == 0 {
                "already on every node".to_string()
            } else {
                format!("{} moved", crate::progress::human_bytes(moved))
            }))
        })
    }
}

/// Each node's shell and Hugging Face cache folder (a `~/` in the plan resolved on the node),
/// the folder created when missing ([`ensure_hf_home`]).
async fn stage_nodes(
    ctx: &ApplyContext<'_>,
    names: &[NodeName],
) -> Result<Vec<StageNode>, PhaseError> {
    let mut nodes = Vec::new();
    for n in names {
        let shell = shell_for(ctx.node(n)?)?;
        let hf_home = hf_home_of(ctx, n).ok_or_else(|| {
            PhaseError::Other(format!("{n}: the plan mounts no Hugging Face cache"))
        })?;
        let hf_home = ensure_hf_home(shell.as_ref(), n, &hf_home).await?;
        nodes.push(StageNode { shell, hf_home });
    }
    Ok(nodes)
}

/// The node's Hugging Face cache folder `dir` (`~/` resolved on the node), created with its
/// parents when missing, as the node's user: the containers bind-mount it, and Docker refuses
/// a bind mount whose source does not exist (a local model folder never fills the cache, so
/// on a fresh node nothing else creates it). Returns the resolved path.
pub async fn ensure_hf_home(
    shell: &dyn crate::runtime::shell::NodeShell,
    node: &NodeName,
    dir: &str,
) -> Result<String, PhaseError> {
    super::ensure_folders::ensure_folder(shell, dir)
        .await
        .map_err(|why| {
            PhaseError::Other(format!(
                "{node}: cannot create the Hugging Face cache folder {dir}: {why}"
            ))
        })
}

/// What to stage where: the model at the commit the plan's listing names (or as the Hub
/// answers the head now, when the plan has none), the head (`nodes[0]`) and how each worker
/// reaches it.
async fn spec_of(
    step: &StageModel,
    ctx: &ApplyContext<'_>,
    head: &NodeName,
    mut nodes: Vec<StageNode>,
) -> Result<StageSpec, PhaseError> {
    let token = stage::hf_token();
    let endpoint = stage::hf_endpoint();
    let looked_up = match &step.listing {
        Some(listing) => Ok(Some(listing.clone())),
        None => {
            stage::resolve_on_head(
                nodes[0].shell.clone(),
                &endpoint,
                &step.model,
                token.clone(),
            )
            .await
        }
    };
    let resolved = match looked_up {
        Ok(r) => r,
        Err(e) if e.is_refusal() => return Err(PhaseError::Refused(e.to_string())),
        Err(e) => return Err(PhaseError::Hub(e)),
    };
    let addr = control_addr(ctx, head).unwrap_or_else(|| head.to_string());
    let head_node = nodes.remove(0);
    Ok(StageSpec {
        model: resolved
            .as_ref()
            .map(|r| r.source())
            .unwrap_or_else(|| step.model.clone()),
        resolved,
        endpoint,
        token,
        head: head_node,
        workers: nodes
            .into_iter()
            .map(|n| {
                let route = step
                    .routes
                    .get(n.name())
                    .cloned()
                    .unwrap_or(crate::model::route::CopyRoute::Control);
                (n, stage::head_access(head, &route, &addr))
            })
            .collect(),
        options: StageOptions::default(),
    })
}

/// `--no-stage`: the model must already be complete on every node; refused if not.
async fn check_only(
    step: &StageModel,
    ctx: &ApplyContext<'_>,
    spec: &StageSpec,
) -> Result<Option<String>, PhaseError> {
    let lacks = tokio::select! {
        r = stage::verify(spec) => r?,
        _ = ctx.cancel.cancelled() => return Err(PhaseError::Cancelled),
    };
    let short: Vec<String> = lacks
        .iter()
        .filter(|l| !l.missing.is_empty())
        .map(|l| {
            format!(
                "{}: {} missing or different in {} (e.g. {})",
                l.node,
                l.missing.len(),
                l.dir,
                l.missing[0]
            )
        })
        .collect();
    if short.is_empty() {
        return Ok(Some("on every node".to_string()));
    }
    Err(PhaseError::Refused(format!(
        "--no-stage, but the model is not complete on every node:\n  {}\nfix: `spark-launch model pull {}`, or run without --no-stage",
        short.join("\n  "),
        step.model
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::shell::LocalShell;

    #[tokio::test]
    async fn a_missing_hugging_face_cache_folder_is_created_before_the_containers_mount_it() {
        // Seen once: with a local model folder nothing filled the cache, and Docker
        // refused to start a container whose bind-mount source did not exist.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("home/user/.cache/huggingface");
        let node = NodeName::new("local").unwrap();
        let shell = LocalShell::new(node.clone());
        let got = ensure_hf_home(&shell, &node, dir.to_str().unwrap())
            .await
            .unwrap();
        assert_eq!(got, dir.to_str().unwrap());
        assert!(dir.is_dir());
        // Already there: left as it is.
        std::fs::write(dir.join("keep"), b"x").unwrap();
        ensure_hf_home(&shell, &node, dir.to_str().unwrap())
            .await
            .unwrap();
        assert!(dir.join("keep").exists());
        // A file in the way is an error naming the node and the folder.
        let blocked = tmp.path().join("file");
        std::fs::write(&blocked, b"x").unwrap();
        let e = ensure_hf_home(&shell, &node, &format!("{}/hf", blocked.display()))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("local: cannot create the Hugging Face cache folder"),
            "{e}"
        );
    }
}
