//! StageNccl: `--nccl-from IMAGE`'s library in the named volume the serving containers mount,
//! on every node of the step (the work is `apply::nccl::stage_on`). Kept afterwards, like an
//! image: the next job with the same image finds it filled.

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{StageNccl, StepPayload};

impl<'a> Phase<ApplyContext<'a>> for StageNccl {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let done = ctx
                .on_every_node(self.nodes.clone(), |node, _| async move {
                    let (image, volume) = (&self.image, &self.volume);
                    crate::apply::nccl::stage_on(ctx.cluster, &node, image, volume, &ctx.cancel)
                        .await
                })
                .await?;
            let filled: Vec<&str> = done
                .iter()
                .filter(|(_, f)| *f)
                .map(|(n, _)| n.as_str())
                .collect();
            Ok(Some(if filled.is_empty() {
                format!("{} already holds it", self.volume)
            } else {
                format!("copied into {} on {}", self.volume, filled.join(", "))
            }))
        })
    }
}
