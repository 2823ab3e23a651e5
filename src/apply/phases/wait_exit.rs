//! WaitExit: the node's main process ends; its log and exit code are captured.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, Capture};
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{StepPayload, WaitExit};
use crate::runtime::RuntimeError;

impl<'a> Phase<ApplyContext<'a>> for WaitExit {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let name = ctx.name_on(&self.node);
            let code = handle
                .wait_exit(
                    ctx.plan.runtime,
                    &name,
                    Duration::from_secs(self.timeout_s),
                    &ctx.cancel,
                )
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            if let Some(cap) = &self.capture {
                use futures::StreamExt;
                let mut log = Vec::new();
                let mut stream = handle
                    .logs(ctx.plan.runtime, &name, false, false)
                    .await
                    .map_err(|e| PhaseError::node(&self.node, e))?;
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|e| PhaseError::node(&self.node, e))?;
                    log.extend_from_slice(&chunk);
                }
                ctx.capture(
                    cap,
                    Capture {
                        node: self.node.clone(),
                        exit_code: code,
                        stdout: String::from_utf8_lossy(&log).into_owned(),
                        stderr: String::new(),
                    },
                );
            }
            if code != 0 && !self.allow_failure {
                return Err(PhaseError::node(
                    &self.node,
                    RuntimeError::Other(format!(
                        "{name} exited with code {code}; see `spark-launch logs {} --node {}`",
                        ctx.plan.job, self.node
                    )),
                ));
            }
            Ok(Some(format!("exit code {code}")))
        })
    }
}
