//! Stop: the job's containers or processes stopped and removed on every node of the plan.

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, stop_job};
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{StepPayload, Stop};

impl<'a> Phase<ApplyContext<'a>> for Stop {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            stop_job(ctx, ctx.options.stop_grace).await?;
            Ok(None)
        })
    }
}
