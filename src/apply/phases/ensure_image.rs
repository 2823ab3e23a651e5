//! EnsureImage: every node of the step holds the image, compared by content; a missing one gets it
//! pushed (or the plan is refused with `--no-push`); an image no node has refuses the start
//! (exit 2, `--image` as the other fix). The work is `images`.

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::images::{EnsureError, PushError, ensure_image};
use crate::node::fanout::NodeFailures;
use crate::plan::{EnsureImage, RuntimeKind, StepPayload};
use crate::runtime::RuntimeError;

impl<'a> Phase<ApplyContext<'a>> for EnsureImage {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn should_run(&self, ctx: &ApplyContext<'a>) -> bool {
        ctx.plan.runtime == RuntimeKind::Docker
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            match ensure_image(
                ctx.cluster,
                &self.image,
                &self.nodes,
                ctx.options.push,
                ctx.options.concurrency,
                &ctx.reporter,
                &ctx.cancel,
            )
            .await
            {
                Ok(report) => Ok(Some(report.summary())),
                Err(_) if ctx.cancel.is_cancelled() => Err(PhaseError::Cancelled),
                Err(e @ (EnsureError::Refused(_) | EnsureError::Missing { .. })) => {
                    Err(PhaseError::Refused(e.to_string()))
                }
                // An image no node has (a recipe's local build name, a typo) is the user's to
                // fix before anything starts, as `image push` says it (exit 2).
                Err(EnsureError::Push(p)) if p.is_missing_image() => Err(PhaseError::Refused(
                    format!("{p}, or launch with --image IMAGE naming an image a node has"),
                )),
                Err(EnsureError::Push(PushError::Targets(f))) => Err(PhaseError::Nodes(f)),
                Err(EnsureError::Failed(report)) => Err(PhaseError::Nodes(NodeFailures {
                    total: report.nodes.len(),
                    failed: report
                        .failed()
                        .into_iter()
                        .map(|(n, e)| (n.clone(), RuntimeError::Other(e.to_string())))
                        .collect(),
                })),
                Err(e) => Err(PhaseError::Image(Box::new(e))),
            }
        })
    }
}
