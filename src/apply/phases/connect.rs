//! Connect: reach every node of the plan, its engine (Docker) or its shell (host runtime), before
//! anything else runs.

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::RuntimeKind;

/// Reach every node of the plan: its engine (Docker) or its shell (host runtime).
pub struct Connect;

impl<'a> Phase<ApplyContext<'a>> for Connect {
    fn title(&self) -> String {
        "Connect to the nodes".to_string()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let nodes = ctx.plan.node_names();
            ctx.on_every_node(nodes.clone(), |_, handle| async move {
                match ctx.plan.runtime {
                    RuntimeKind::Docker => handle.engine().await.map(|e| {
                        format!(
                            "Docker {} ({})",
                            e.features().server_version,
                            e.features().arch
                        )
                    }),
                    RuntimeKind::Host => handle
                        .jobs(None, Some(RuntimeKind::Host))
                        .await
                        .map(|_| "shell".to_string()),
                }
            })
            .await?;
            Ok(Some(format!(
                "{} node{}",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" }
            )))
        })
    }
}
