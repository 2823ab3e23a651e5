//! Exec: a command inside the node's container (or on the node), its output kept under the plan's
//! capture name.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, Capture};
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{Exec, StepPayload};
use crate::runtime::RuntimeError;

impl<'a> Phase<ApplyContext<'a>> for Exec {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let out = handle
                .exec(
                    ctx.plan.runtime,
                    &ctx.name_on(&self.node),
                    &self.command,
                    &self.env,
                    Duration::from_secs(self.timeout_s),
                    &ctx.cancel,
                )
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            if let Some(name) = &self.capture {
                ctx.capture(
                    name,
                    Capture {
                        node: self.node.clone(),
                        exit_code: out.exit_code,
                        stdout: out.stdout.clone(),
                        stderr: out.stderr.clone(),
                    },
                );
            }
            if out.exit_code != 0 {
                return Err(PhaseError::node(
                    &self.node,
                    RuntimeError::Command {
                        command: crate::plan::job::shell_words(&self.command),
                        status: format!("exit status {}", out.exit_code),
                        stderr: if out.stderr.trim().is_empty() {
                            out.stdout
                        } else {
                            out.stderr
                        },
                    },
                ));
            }
            Ok(None)
        })
    }
}
