//! CheckNccl: the last look before anything starts. On every node the NCCL the job's container
//! will load is read as the container will see it — its image, the plan's loader variables
//! and NCCL mounts, in a container that is created and never started — and judged by the
//! plan's rule (`libnccl::check`): different releases, an old one on a ring, a `--nccl-from`
//! that would not come first refuse the start (exit 2). The pre-plan lookup may not have seen
//! the images yet (pulled at launch); this sees them after EnsureImage.

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::libnccl::{Loads, MOUNT_DIR, NodeNccl, judge};
use crate::node::NodeName;
use crate::plan::{CheckNccl, Launch, StepPayload};
use crate::runtime::libnccl::LoaderProbe;

/// What the probe container of `node`'s part is made of.
fn probe_of(ctx: &ApplyContext<'_>, node: &NodeName) -> Option<LoaderProbe> {
    let Launch::Container(c) = &ctx.plan.node(node)?.launch else {
        return None;
    };
    Some(LoaderProbe {
        image: c.image.clone(),
        ld_library_path: c.env.get("LD_LIBRARY_PATH").cloned(),
        ld_preload: c.env.get("LD_PRELOAD").cloned(),
        mounts: c
            .mounts
            .iter()
            .filter(|m| m.target == MOUNT_DIR)
            .cloned()
            .collect(),
    })
}

impl<'a> Phase<ApplyContext<'a>> for CheckNccl {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let results = ctx
                .each_node(self.nodes.clone(), |node, _| async move {
                    let Some(probe) = probe_of(ctx, &node) else {
                        return Ok(None);
                    };
                    let loads = crate::apply::nccl::loads_on(ctx.cluster, &node, &probe).await;
                    Ok(Some(NodeNccl {
                        node,
                        image: probe.image,
                        loads,
                    }))
                })
                .await;
            if ctx.cancel.is_cancelled() {
                return Err(PhaseError::Cancelled);
            }
            let nodes: Vec<NodeNccl> = results
                .into_iter()
                .filter_map(|(_, r)| match r {
                    Ok(Some(x)) => Some(x),
                    _ => None,
                })
                .collect();
            let verdict = judge(&nodes, &self.rule);
            for w in verdict.warnings.iter().chain(&verdict.notes) {
                ctx.reporter.warn(w);
            }
            if !verdict.problems.is_empty() {
                let text: Vec<String> = verdict
                    .problems
                    .iter()
                    .map(|p| format!("{}\n    fix: {}", p.problem.what, p.problem.fix))
                    .collect();
                return Err(PhaseError::Refused(format!(
                    "refusing to start: {}",
                    text.join("\n  ")
                )));
            }
            Ok(Some(summary(&nodes)))
        })
    }
}

/// `NCCL 2.30.7+cuda13.3 on a, b` (one line per distinct library).
fn summary(nodes: &[NodeNccl]) -> String {
    let mut by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for x in nodes {
        let n = &x.node;
        let what = match &x.loads {
            Loads::Known { lib, .. } => match &lib.version {
                Some(v) => format!("NCCL {v}"),
                None => format!("{} (no NCCL version string)", lib.path),
            },
            Loads::Missing { .. } => "no libnccl.so.2".to_string(),
            Loads::NotYetKnown { .. } => "not read".to_string(),
        };
        by.entry(what).or_default().push(n.as_str());
    }
    by.into_iter()
        .map(|(w, ns)| format!("{w} on {}", ns.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}
