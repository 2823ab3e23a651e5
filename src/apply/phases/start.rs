//! Start: the job's container or process on the nodes, all at once; its clean-up stops and removes
//! the job on every node of the plan, found by its labels.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, stop_job};
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{Start, StepPayload};
use crate::runtime::RuntimeError;

/// Start the job's container (or process) on the nodes, all at once. Clean-up stops and
/// removes the job on every node of the plan, found by its labels, so a half-finished start
/// (or one cut short by Ctrl-C) leaves nothing.
impl<'a> Phase<ApplyContext<'a>> for Start {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            ctx.on_every_node(self.nodes.clone(), |node, handle| async move {
                let part = ctx
                    .plan
                    .node(&node)
                    .ok_or_else(|| RuntimeError::Other("no part in the plan".to_string()))?;
                handle.start(part, &ctx.cancel).await
            })
            .await?;
            ctx.mark(|m| m.containers_started = Some(std::time::Instant::now()));
            Ok(None)
        })
    }
    fn cleanup<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> Option<BoxFuture<'b, Result<(), PhaseError>>> {
        Some(Box::pin(stop_job(ctx, Duration::from_secs(2))))
    }
}
