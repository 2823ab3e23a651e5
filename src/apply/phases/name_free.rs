//! NameFree: refuse to start a job whose name is taken on any node, and never touch an unlabelled
//! container of that name; checked before any effect.

use futures::future::BoxFuture;

use crate::apply::context::ApplyContext;
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::RuntimeKind;

/// Refuse to start a job whose name is taken on any node (checked before any effect).
pub struct NameFree;

impl<'a> Phase<ApplyContext<'a>> for NameFree {
    fn title(&self) -> String {
        "Check that the job name is free".to_string()
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let job = &ctx.plan.job;
            let found = ctx
                .on_every_node(ctx.cluster.names(), |node, handle| async move {
                let mut taken: Vec<String> = Vec::new();
                // The plan's runtime: a container and a process never share a name.
                let runtime = Some(ctx.plan.runtime);
                for e in handle.jobs(Some(job), runtime).await? {
                    taken.push(format!("{} ({})", e.name, e.state));
                }
                if ctx.plan.runtime == RuntimeKind::Docker {
                    let name = job.container_name(&node);
                    let seen = taken.iter().any(|t| t.starts_with(&format!("{name} ")));
                    let found = if seen {
                        None
                    } else {
                        handle.engine().await?.inspect(&name).await?
                    };
                    if let Some(c) = found {
                        let ours = c
                            .config
                            .and_then(|c| c.labels)
                            .is_some_and(|l| l.contains_key(crate::plan::spec::LABEL_JOB));
                        if !ours {
                            taken.push(format!(
                                "{name} ({UNLABELLED}: choose another job name, or remove it yourself with `docker rm -f {name}`)"
                            ));
                        }
                    }
                }
                Ok(taken)
            })
            .await?;
            let taken: Vec<String> = found
                .into_iter()
                .filter(|(_, t)| !t.is_empty())
                .map(|(n, t)| format!("{n}: {}", t.join(", ")))
                .collect();
            if taken.is_empty() {
                Ok(None)
            } else {
                // `stop` never touches a container spark-launch did not label: do not offer it
                // for one.
                let fix = if taken.iter().any(|t| t.contains(UNLABELLED)) {
                    "pick another job name, or remove what spark-launch did not start yourself (the `docker rm -f` above)".to_string()
                } else {
                    format!(
                        "stop it first with `spark-launch stop {job}`, or pick another job name"
                    )
                };
                Err(PhaseError::Refused(format!(
                    "job {job} already exists:\n  {}\nfix: {fix}",
                    taken.join("\n  ")
                )))
            }
        })
    }
}

/// How the name-clash refusal marks a container spark-launch did not start.
const UNLABELLED: &str = "a container spark-launch did not start";
