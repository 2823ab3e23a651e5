//! WaitRay: Ray's node table, seen from the head's container, lists every intended member at its
//! intended address with its GPUs.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, Ended, first_errors, look_at_job};
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{StepPayload, WaitRay};
use crate::runtime::RuntimeError;
use crate::runtime::wait::{self, Probe};
use crate::workload::engines::ray::{QUERY_PY, RayState, ray_state};

/// How often Ray's node table is read.
const POLL: Duration = Duration::from_secs(3);
/// How long one read may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

impl<'a> Phase<ApplyContext<'a>> for WaitRay {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let name = ctx.plan.job.container_name(&self.node);
            let query = vec![
                "python3".to_string(),
                "-c".to_string(),
                QUERY_PY.to_string(),
            ];
            let shown = Mutex::new(String::new());
            let what = format!("Ray on {} to list every node", self.node);
            let timeout = Duration::from_secs(self.timeout_s);
            let waited = wait::until(&what, timeout, POLL, &ctx.cancel, || async {
                let look = look_at_job(ctx).await;
                if !look.ended.is_empty() {
                    return Probe::Abort(RuntimeError::Other(Ended::list(&look.ended)));
                }
                let seen = handle
                    .exec(
                        ctx.plan.runtime,
                        &name,
                        &query,
                        &Default::default(),
                        QUERY_TIMEOUT,
                        &ctx.cancel,
                    )
                    .await;
                let text = match &seen {
                    Ok(out) if out.exit_code == 0 => match ray_state(&self.expect, &out.stdout) {
                        Ok(RayState::Complete) => return Probe::Ready(()),
                        Ok(s) => s.describe(),
                        Err(e) => format!("Ray's answer is unreadable: {e}"),
                    },
                    Ok(_) => "Ray is not answering yet".to_string(),
                    // A dropped round trip is retried: only an observed exit ends the wait.
                    Err(e) => format!("cannot ask Ray on {}: {e}", self.node),
                };
                let text = match look.unknown_text() {
                    Some(u) => format!("{text} ({u})"),
                    None => text,
                };
                if let Ok(mut last) = shown.lock()
                    && *last != text
                {
                    ctx.reporter.node_line(&self.node, &format!("ray: {text}"));
                    *last = text.clone();
                }
                Probe::NotYet(text)
            })
            .await;
            match waited {
                Ok(()) => Ok(Some(format!(
                    "{} nodes, each with its GPU at its address",
                    self.expect.len()
                ))),
                Err(RuntimeError::Cancelled { .. }) => Err(PhaseError::Cancelled),
                Err(RuntimeError::Other(ended)) => {
                    let errors = first_errors(ctx).await;
                    Err(PhaseError::Other(format!(
                        "{ended} before Ray had every node:\n  {}",
                        errors.join("\n  ")
                    )))
                }
                Err(e) => Err(PhaseError::node(&self.node, e)),
            }
        })
    }
}
