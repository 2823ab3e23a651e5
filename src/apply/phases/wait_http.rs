//! WaitHttp: an HTTP endpoint on the node answers with success, through `runtime::wait::until`; a
//! job that died stops the wait at once.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{StepPayload, WaitHttp};
use crate::runtime::RuntimeError;
use crate::runtime::http::{HttpAnswer, HttpUrl, get};
use crate::runtime::wait::{self, Probe};

impl<'a> Phase<ApplyContext<'a>> for WaitHttp {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let url = HttpUrl::parse(&self.url)
                .map_err(|e| PhaseError::node(&self.node, RuntimeError::Other(e)))?;
            let handle = ctx.node(&self.node)?;
            let name = ctx.name_on(&self.node);
            let runtime = ctx.plan.runtime;
            let timeout = Duration::from_secs(self.timeout_s);
            wait::until(&self.url, timeout, Duration::from_secs(2), &ctx.cancel, || async {
                // A job that died will never answer: stop waiting at once.
                let entries = handle
                    .jobs(Some(&ctx.plan.job), Some(runtime))
                    .await
                    .unwrap_or_default();
                if let Some(e) = entries
                    .iter()
                    .find(|e| e.name == name && e.state != "running")
                {
                    return Probe::Abort(RuntimeError::Other(format!(
                        "{name} is {} (exit code {}) and will not answer; see `spark-launch logs {} --node {}`",
                        e.state,
                        e.exit_code
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| "?".into()),
                        ctx.plan.job,
                        self.node
                    )));
                }
                match get(&url, Duration::from_secs(5)).await {
                    HttpAnswer::Status(s) if (200..300).contains(&s) => Probe::Ready(()),
                    HttpAnswer::Status(s) => Probe::NotYet(format!("HTTP {s}")),
                    HttpAnswer::NoAnswer(e) => Probe::NotYet(e),
                }
            })
            .await
            .map_err(|e| PhaseError::node(&self.node, e))?;
            Ok(None)
        })
    }
}
