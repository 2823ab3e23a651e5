//! WriteFile: a file inside the node's container (or on the node for the host runtime).

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::node::NodeName;

pub struct WriteFile {
    pub node: NodeName,
    pub path: String,
    pub content: String,
    pub mode: u32,
}

impl<'a> Phase<ApplyContext<'a>> for WriteFile {
    fn title(&self) -> String {
        format!("Write {} on {}", self.path, self.node)
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
