//! The server a measuring command talks to (`bench`, its protocols, `check`): `--url`, or a
//! job found by its labels on its nodes, which stay connected while the command runs. One
//! place says which flags go together and how the library's errors exit.

use super::args::{EngineFlags, NodeFlags};
use super::{CmdError, Context, Invalid};
use crate::bench::request::BaseUrl;
use crate::bench::{BenchError, Target};
use crate::plan::JobName;
use crate::resolve::{self, Needs, Purpose};

/// What a measuring command was told about its server.
pub struct ServerFlags<'a> {
    pub url: Option<&'a str>,
    pub job: Option<&'a JobName>,
    pub target: &'a NodeFlags,
    pub engines: &'a EngineFlags,
    /// The command, as resolve names it in its messages.
    pub command: &'static str,
}

/// Runs `work` on the server `s` names; its error exits 2 for bad input, 130 when
/// interrupted, 1 otherwise.
pub async fn with_served<T>(
    s: ServerFlags<'_>,
    ctx: &Context,
    work: impl AsyncFnOnce(Target) -> Result<T, BenchError>,
) -> Result<T, CmdError> {
    let result = match (s.url, s.job) {
        (Some(url), _) => {
            if !s.target.hosts.is_empty()
                || !s.target.nodes.is_empty()
                || !s.engines.engines.is_empty()
            {
                return Err(anyhow::anyhow!(
                    "--url names the server itself: leave out --hosts, --nodes and --engine"
                ))
                .invalid();
            }
            let url = BaseUrl::parse(url).map_err(anyhow::Error::msg).invalid()?;
            work(Target::Url(url)).await
        }
        (None, Some(job)) => {
            let mut selection = s.target.selection(ctx);
            selection.engines = s.engines.engines.clone();
            let nodes = resolve::resolve(
                &selection,
                Needs::links(Purpose::Observe(s.command)),
                &ctx.reporter,
            )
            .await
            .map_err(super::resolve_error)?;
            // The job's nodes stay connected while it is measured, and close after.
            nodes
                .scope(async move |nodes| {
                    let addresses = nodes
                        .configured
                        .iter()
                        .filter_map(|n| Some((n.name.clone(), n.addresses.first()?.clone())))
                        .collect();
                    let cluster = nodes.runtime().map_err(super::resolve_error)?;
                    let target = Target::Job {
                        cluster,
                        job: job.clone(),
                        addresses,
                    };
                    Ok::<_, CmdError>(work(target).await)
                })
                .await?
        }
        (None, None) => return Err(anyhow::anyhow!("name a job, or give --url")).invalid(),
    };
    result.map_err(|e| match e {
        BenchError::Invalid(_) => CmdError {
            code: 2,
            error: e.into(),
        },
        BenchError::Interrupted => CmdError {
            code: 130,
            error: e.into(),
        },
        e => e.into(),
    })
}
