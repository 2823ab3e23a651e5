//! The one entry of every launching command (`run`, `nccl-test`, `nccl-build`, `vllm`,
//! `trtllm`, `up`): resolve the nodes, look up what the plan needs from live nodes, plan once,
//! then either hand the plan back (`--dry-run`) or carry out that very plan — the executor for
//! jobs, the engines for image builds — and what follows it (an nccl-test's verdict, staying
//! attached to a serving job).
//!
//! ```text
//! resolve ─► lookups (live: $HOME, the Hub, each image's NCCL; the API key; the job's SSH keys)
//!             ─► workload::launch::plan ─► dry run: the plan
//!                                        └► execute(plan) ─► verdict / attach
//! ```
//!
//! Ctrl-C (the `cancel` token) is looked at between the stages and by every phase; whatever
//! started is cleaned up by the executor (unless `--keep`).
//!
//! - [`lookup`]: the pre-plan lookups (each node's `$HOME`, the Hub from the head, each image's
//!   NCCL), read-only, so a dry run on live nodes prints the plan a run executes.
//! - [`job_ssh`]: the job's own SSH keys, for a job that runs `mpirun` between containers.
//! - [`serving`]: staying attached to a serving job until Ctrl-C.
//! - Once a serving job answers, what its engine's logs say about how its nodes talk
//!   (`crate::jobs::links`: llama.cpp's RPC transport) goes into its summary.
//! - The executor (`crate::apply`) runs the plan; a serving job's plan, hosts and start-up
//!   timings are kept through `crate::records`; `--supervise` hands over to `crate::supervise::run`.

pub mod job_ssh;
pub mod lookup;
pub mod serving;

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use self::lookup::{LookupError, lookups, nccl};
use self::serving::{AttachError, attach_then_stop};
use crate::apply::context::ApplyOptions;
use crate::apply::context::Marks;
use crate::apply::executor::{ApplyError, execute};
use crate::derive::NodeInput;
use crate::images::build::{BuildPlanFailure, BuiltImage, build_all};
use crate::plan::JobPlan;
use crate::progress::Reporter;
use crate::records;
use crate::resolve::{self, Needs, Purpose, ResolveError, ResolvedCluster, Selection};
use crate::runtime::Cluster;
use crate::workload::engines::LinkVerdict;
use crate::workload::job_ssh::JobSshKeys;
use crate::workload::launch::{LaunchPlan, LaunchRefusal, LaunchRequest, Lookups, Planned, plan};
use crate::workload::nccl_build::BuildPlan;
use crate::workload::nccl_test::{CAPTURE, NcclTestPlan, NcclVerdict};
use crate::workload::serve::ServePlan;
use crate::workload::startup::{Startup, tenths};

/// A launching command, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct LaunchCommand {
    pub request: LaunchRequest,
    pub selection: Selection,
    /// Print the plan, touch nothing.
    pub dry_run: bool,
    pub options: ApplyOptions,
    /// Serving: return once the API answers instead of staying attached.
    pub detach: bool,
    /// Serving (`--supervise`): stay attached as the job's supervisor, with this policy,
    /// instead of following its log (Ctrl-C then stops supervising, not the job).
    pub supervise: Option<crate::supervise::Policy>,
}

/// What a launch did.
pub enum Launched {
    /// `--dry-run`: the plan, exactly as a run would execute it.
    Planned(Planned),
    /// `run`: the job started on every node.
    Started(JobPlan),
    /// `nccl-test`: what the driver printed, its exit status and the verdict. `failure` is a
    /// failure after the tests ran (say, of the stop), shown as a warning.
    Tested {
        plan: Box<NcclTestPlan>,
        log: String,
        exit_code: Option<i32>,
        verdict: NcclVerdict,
    },
    /// `nccl-build`: the images built and where they were pushed.
    Built {
        plan: BuildPlan,
        images: Vec<BuiltImage>,
    },
    /// A serving job that answered (a token came back), how long each stage of its start took,
    /// and how the attached session ended (`attached`: `None` with `-d`).
    Served {
        plan: Box<ServePlan>,
        startup: Startup,
        /// What the engine's logs said about how its nodes talk, once it served (llama.cpp's
        /// RPC transport; `None`: its engine says nothing of it).
        link: Option<LinkVerdict>,
        attached: Option<Result<(), AttachError>>,
    },
}

/// Why a launch did not happen or did not finish. [`LaunchError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Refused(#[from] LaunchRefusal),
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Build(#[from] BuildPlanFailure),
    #[error(transparent)]
    JobSsh(#[from] job_ssh::JobSshError),
    #[error("the job ran but its driver left no output (capture {CAPTURE} missing)")]
    NoCapture,
    #[error("interrupted while {0}; nothing was started")]
    Interrupted(&'static str),
}

impl LaunchError {
    /// 2 for refused input or configuration, 130 after Ctrl-C, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Resolve(e) if e.is_invalid_input() => 2,
            LaunchError::Refused(_) => 2,
            LaunchError::Lookup(e) if e.is_refusal() => 2,
            LaunchError::Apply(e) => e.exit_code(),
            LaunchError::Interrupted(_) => 130,
            _ => 1,
        }
    }
}

/// Called once a serving job answers, before staying attached (the CLI prints the endpoint,
/// the start-up timings, and what the engine's logs say about how its nodes talk).
pub type OnReady<'a> = &'a (dyn Fn(&ServePlan, &Startup, Option<&LinkVerdict>) + Send + Sync);

/// When a launch began, for the start-up timings.
#[derive(Clone, Debug)]
struct Began {
    at: Instant,
    /// The same moment, RFC 3339.
    stamp: String,
}

impl Began {
    /// The timings of `job`'s launch from the stages its phases marked, in seconds since it
    /// began (tenths).
    fn startup(&self, job: &str, marks: &Marks) -> Startup {
        let s = |t: Option<Instant>| {
            t.map(|t| tenths(t.saturating_duration_since(self.at).as_millis()))
        };
        Startup {
            job: job.to_string(),
            launched_at: self.stamp.clone(),
            containers_started_s: s(marks.containers_started),
            port_open_s: s(marks.port_open),
            http_ready_s: s(marks.http_ready),
            first_token_s: s(marks.first_token),
            token_after_ms: marks.token_after_ms,
        }
    }
}

/// Runs one launching command (see the module docs).
pub async fn launch(
    l: &LaunchCommand,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
    on_ready: OnReady<'_>,
) -> Result<Launched, LaunchError> {
    let began = Began {
        at: Instant::now(),
        stamp: crate::clock::utc_stamp(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
        ),
    };
    l.request.refuse_before_nodes()?;
    let purpose = if l.dry_run {
        Purpose::Plan
    } else {
        Purpose::Act
    };
    let needs = match &l.request {
        LaunchRequest::Run(_) => Needs::links(purpose),
        _ => Needs::facts(purpose),
    };
    let cluster = match resolve::resolve(&l.selection, needs, reporter).await {
        Ok(c) => c,
        // A failure while Ctrl-C was on its way is the interrupt's doing: nothing started.
        Err(_) if cancel.is_cancelled() => {
            return Err(LaunchError::Interrupted("resolving the nodes"));
        }
        Err(e) => return Err(e.into()),
    };
    for w in &cluster.warnings {
        reporter.warn(w);
    }
    cluster
        .scope(async |cluster| launch_on(l, cluster, reporter, cancel, on_ready, &began).await)
        .await
}

/// What the plan needs from live nodes and from here before planning: each node's `$HOME` and
/// the Hub's answer (or, on snapshots, the model's shape from here), each image's NCCL, the
/// API key, the job's own SSH identity.
async fn look_up(
    l: &LaunchCommand,
    cluster: &ResolvedCluster,
    live: Option<&Cluster>,
    facts: &[NodeInput],
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<Lookups, LaunchError> {
    let mut looked_up = if l.request.needs_lookups() && !cluster.snapshots {
        let shells = cluster
            .nodes
            .iter()
            .filter_map(|n| n.target.as_ref().map(|t| t.shell()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LaunchRefusal::Input(e.to_string()))?;
        tokio::select! {
            r = lookups(&shells, l.request.model(), reporter) => r?,
            _ = cancel.cancelled() => return Err(LaunchError::Interrupted("looking up the model")),
        }
    } else {
        let mut none = Lookups::default();
        // A dry run on snapshots still checks tp/pp and memory against the model where it
        // can: a local folder that is here too, this machine's cache, or the Hub from here.
        if let Some(model) = l.request.model().filter(|_| l.request.needs_lookups()) {
            (none.shape, none.footprint) = tokio::select! {
                s = crate::staging::shape::model_from_here(model) => s,
                _ = cancel.cancelled() => return Err(LaunchError::Interrupted("reading the model's config.json")),
            };
        }
        none
    };
    if let Some(runtime) = live {
        let (asks, from) = l.request.nccl_asks(facts);
        if !asks.is_empty() {
            looked_up.nccl = Some(tokio::select! {
                r = nccl(runtime, &asks, from, l.options.concurrency, reporter) => r,
                _ = cancel.cancelled() => return Err(LaunchError::Interrupted("reading the images' NCCL")),
            });
        }
    }
    if let LaunchRequest::Serve(s) = &l.request
        && let Some(ask) = &s.api_key
    {
        looked_up.api_key = Some(
            crate::api_key::resolve(ask, !l.dry_run)
                .map_err(|e| LaunchRefusal::Input(e.to_string()))?,
        );
    }
    // The job's own SSH identity, made here once for this launch (a dry run plans with
    // placeholders: its plan prints `<set>` for every half either way).
    if let Some(job) = l.request.mpi_in_containers() {
        looked_up.job_ssh = Some(if l.dry_run {
            JobSshKeys::placeholder()
        } else {
            job_ssh::generate(job.as_str()).await?
        });
    }
    Ok(looked_up)
}

async fn launch_on(
    l: &LaunchCommand,
    cluster: &ResolvedCluster,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
    on_ready: OnReady<'_>,
    began: &Began,
) -> Result<Launched, LaunchError> {
    if cancel.is_cancelled() {
        return Err(LaunchError::Interrupted("resolving the nodes"));
    }
    let live = if cluster.snapshots {
        None
    } else {
        Some(cluster.runtime()?)
    };
    // The facts shape planning reads (one conversion, `ResolvedCluster::inputs`).
    let names = cluster.names();
    let facts = cluster.inputs();
    let looked_up = look_up(l, cluster, live.as_ref(), &facts, reporter, cancel).await?;
    let mut planned = plan(&l.request, &names, &facts, &looked_up)?;
    planned.mark_secrets(&l.options.secret_env);
    if l.dry_run {
        return Ok(Launched::Planned(planned));
    }
    for w in &planned.warnings {
        reporter.warn(w);
    }
    if cancel.is_cancelled() {
        return Err(LaunchError::Interrupted("planning"));
    }
    let runtime = match live {
        Some(r) => r,
        None => cluster.runtime()?,
    };
    match planned.plan {
        LaunchPlan::Run(job) => {
            // Timings kept for a serving job of the same name are not this job's.
            records::forget_startup(&crate::state::state_dir(), &job.job);
            execute(&job, &runtime, &l.options, reporter.clone(), cancel.clone()).await?;
            Ok(Launched::Started(job))
        }
        LaunchPlan::NcclBuild(build) => {
            let images = build_all(&build, &runtime, reporter, cancel).await?;
            Ok(Launched::Built {
                plan: build,
                images,
            })
        }
        LaunchPlan::NcclTest(test) => {
            let ran = execute(
                &test.plan,
                &runtime,
                &l.options,
                reporter.clone(),
                cancel.clone(),
            )
            .await;
            let captures = match ran {
                Ok(applied) => applied.captures,
                // A driver that ran and then the job failed (say, the stop): report what it
                // measured, and the failure as a warning.
                Err(e) if e.captures.contains_key(CAPTURE) => {
                    reporter.warn(&e.to_string());
                    e.captures
                }
                Err(e) => return Err(e.into()),
            };
            let capture = captures.get(CAPTURE).ok_or(LaunchError::NoCapture)?;
            let log = format!("{}{}", capture.stdout, capture.stderr);
            let exit_code = i32::try_from(capture.exit_code).ok();
            let verdict = test.verdict(&log, exit_code);
            Ok(Launched::Tested {
                plan: test,
                log,
                exit_code,
                verdict,
            })
        }
        LaunchPlan::Serve(serve) => {
            let state = crate::state::state_dir();
            let job = serve.job.job.to_string();
            records::forget_startup(&state, &serve.job.job);
            let applied = execute(
                &serve.job,
                &runtime,
                &l.options,
                reporter.clone(),
                cancel.clone(),
            )
            .await?;
            let startup = began.startup(&job, &applied.marks);
            if let Err(e) = records::save_startup(&state, &serve.job.job, &startup) {
                reporter.warn(&format!("cannot keep the start-up timings: {e}"));
            }
            // Kept for `supervise JOB` (and a supervisor started at boot): secrets as `<set>`.
            if let Err(e) = crate::records::save_plan(&state, &serve).and_then(|_| {
                crate::records::save_hosts(&state, &serve.job.job, &l.selection.hosts)
            }) {
                reporter.warn(&format!(
                    "the plan could not be kept for `spark-launch supervise {job}`: {e}"
                ));
            }
            // What the engine's logs say about how its nodes talk (llama.cpp's RPC transport),
            // read once it serves: its connections are made by then.
            let found = crate::jobs::find(&runtime, Some(&serve.job.job)).await;
            let (links, unread) = crate::jobs::links(&runtime, &found.entries).await;
            for (job, e) in unread {
                reporter.warn(&format!("the logs of {job} could not be read: {e}"));
            }
            let link = links.into_iter().next().map(|l| l.link);
            on_ready(&serve, &startup, link.as_ref());
            let attached = if let Some(policy) = &l.supervise {
                let key = serve.api_key.as_ref().map(|k| k.key.clone());
                // Ended by Ctrl-C or a stop: the job was not stopped by us, as with `-d`.
                crate::supervise::run::watch(
                    &runtime, &serve, key, policy, &state, reporter, cancel,
                )
                .await
                .err()
                .map(|e| Err(AttachError::from(e)))
            } else if l.detach {
                None
            } else {
                Some(
                    attach_then_stop(
                        &runtime,
                        &serve.job.job,
                        &serve.nodes,
                        cancel,
                        reporter.as_ref(),
                    )
                    .await,
                )
            };
            Ok(Launched::Served {
                plan: serve,
                startup,
                link,
                attached,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn start_up_timings_are_the_marked_stages_in_tenths_of_a_second_since_the_launch_began() {
        let began = Began {
            at: Instant::now(),
            stamp: "2026-11-26T17:00:00Z".into(),
        };
        let marks = Marks {
            containers_started: Some(began.at + Duration::from_millis(4_140)),
            port_open: Some(began.at + Duration::from_millis(9_800)),
            http_ready: Some(began.at + Duration::from_millis(12_000)),
            first_token: None,
            token_after_ms: None,
        };
        let s = began.startup("j", &marks);
        assert_eq!(s.launched_at, "2026-11-26T17:00:00Z");
        assert_eq!(s.containers_started_s, Some(4.1));
        assert_eq!(s.http_ready_s, Some(12.0));
        assert_eq!(s.first_token_s, None);
    }
}
