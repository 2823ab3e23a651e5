//! WriteFile: a file inside the node's container (or on the node for the host runtime).

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{StepPayload, WriteFile};

impl<'a> Phase<ApplyContext<'a>> for WriteFile {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            handle
                .write_file(
                    ctx.plan.runtime,
                    &ctx.name_on(&self.node),
                    &self.path,
                    self.content.as_bytes(),
                    self.mode,
                )
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            Ok(None)
        })
    }
}
