//! `spark-launch sim`: a simulated cluster on this machine, to see a launch, `bench`,
//! `supervise`, `status --watch` and `export systemd` work without Sparks, as kind makes a
//! Kubernetes cluster of containers. Each node is a set of Linux namespaces with its own SSH
//! server and Docker Engine and a fake RDMA sysfs showing a Spark's twin ports (the harness
//! the integration tests use, `tests/harness/simnet`, carried in the binary); this machine
//! joins the nodes' management network as a laptop joins an office LAN, and reaches them
//! over SSH with a key of the sim's own, as it would reach Sparks. What a launch needs is
//! there: the stand-in engine image (`tests/standin`: it answers as vLLM and SGLang, checks
//! what spark-launch gave it, and serves tokens at a known rate) under the image names the
//! launches look for, loaded into every node's engine, and a stand-in Hugging Face Hub on the
//! management network serving the smoke test's model (its `config.json`; no weights), since
//! no Hub is reachable from the nodes: `HF_ENDPOINT` points launches at it, and a launch
//! resolves, downloads and copies the model as it would from huggingface.co.
//!
//! - `plan` (pure): names, addresses, folders, images, refusals; the cluster file's text.
//! - `host`: what this machine has (root, programs, sims, routes, limits); read-only.
//! - `assets`: the embedded scripts and sources, written to a private folder per command.
//! - `make`: the steps of `sim up` and the removal of `sim down` (effects).
//! - this module: the three entries ([`up`], [`down`], [`status`]) and their results.

pub mod assets;
pub mod host;
pub mod make;
pub mod plan;
mod render;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

pub use plan::{DownPlan, SimName, SimPlan, SimRecord, UpRequest};

use crate::problem::Problem;
use crate::progress::Reporter;

/// Why a sim could not be made or removed. [`SimError::exit_code`] maps it.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{}", Refusals(.0))]
    Refused(Vec<Problem>),
    #[error("{step}: {cause}")]
    Step { step: String, cause: String },
    #[error("interrupted; what was made of the sim is removed")]
    Interrupted,
}

impl SimError {
    /// 2 for a refusal, 130 for Ctrl-C, 1 for a step that failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            SimError::Refused(_) => 2,
            SimError::Interrupted => 130,
            SimError::Step { .. } => 1,
        }
    }
}

struct Refusals<'a>(&'a [Problem]);

impl fmt::Display for Refusals<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cannot make a simulated cluster here:")?;
        for r in self.0 {
            write!(f, "\n  - {r}")?;
        }
        Ok(())
    }
}

/// A failed step, with what it said.
pub(crate) fn step_error(step: &str, cause: impl fmt::Display) -> SimError {
    SimError::Step {
        step: step.to_string(),
        cause: cause.to_string(),
    }
}

/// What `sim up` made (or, `--dry-run`, would make).
#[derive(Clone, Debug, Serialize)]
pub struct SimUp {
    pub plan: SimPlan,
    pub dry_run: bool,
    /// What to run next, one command a line.
    pub next: Vec<String>,
}

/// `sim up`: plans from what this machine has, then makes it (nothing with `dry_run`).
pub async fn up(
    req: &UpRequest,
    dry_run: bool,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<SimUp, SimError> {
    let plan = plan::plan_up(req, &host::read()).map_err(SimError::Refused)?;
    if dry_run {
        let next = plan.next_steps();
        return Ok(SimUp {
            plan,
            dry_run,
            next,
        });
    }
    let started = Instant::now();
    let assets =
        assets::Assets::write().map_err(|e| step_error("write the harness to a folder", e))?;
    // Planned again under the lock, and claimed before it is released.
    let lock = host::lock()
        .await
        .map_err(|e| step_error("lock the sims' folder", e))?;
    let plan = plan::plan_up(req, &host::read()).map_err(SimError::Refused)?;
    make::claim(&plan)?;
    drop(lock);
    let next = plan.next_steps();
    make::make(&plan, &assets, reporter, cancel).await?;
    reporter.info(&format!(
        "Finished in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    Ok(SimUp {
        plan,
        dry_run,
        next,
    })
}

/// What `sim down` removed (or would remove).
#[derive(Clone, Debug, Serialize)]
pub struct SimDown {
    pub plan: DownPlan,
    pub dry_run: bool,
}

/// `sim down NAME`: removes whatever of the sim exists, and checks that nothing is left.
pub async fn down(
    name: &SimName,
    dry_run: bool,
    reporter: &Arc<dyn Reporter>,
) -> Result<SimDown, SimError> {
    let facts = host::read();
    let plan = plan::plan_down(name, &facts);
    if dry_run || !plan.found {
        return Ok(SimDown { plan, dry_run });
    }
    if !facts.root {
        return Err(SimError::Refused(vec![Problem::new(
            format!("removing the simulated cluster {name} needs root, as making it did"),
            format!("run it in a root shell: sudo spark-launch sim down --name {name}"),
        )]));
    }
    let step = reporter.step(&format!("Remove the simulated cluster {name}"));
    let assets =
        assets::Assets::write().map_err(|e| step_error("write the harness to a folder", e))?;
    make::remove(&plan, &assets).await?;
    make::tidy_roots().await?;
    let left = plan::plan_down(name, &host::read());
    if left.found {
        return Err(step_error(
            &format!("remove {name}"),
            format!("still there: {}", render::leftovers(&left)),
        ));
    }
    step.ok();
    Ok(SimDown { plan, dry_run })
}

/// One sim as `sim status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SimState {
    pub name: SimName,
    /// `up` (every namespace there), `partly up` or `down` (only files left: `sim down`).
    pub state: String,
    pub record: Option<SimRecord>,
}

/// What `sim status` found.
#[derive(Clone, Debug, Serialize)]
pub struct SimList {
    pub sims: Vec<SimState>,
}

/// `sim status`: every sim recorded or left over on this machine.
pub fn status() -> SimList {
    let facts = host::read();
    let mut names: Vec<SimName> = facts
        .folders
        .iter()
        .filter_map(|f| {
            f.strip_prefix("nodes/")
                .map(|p| p.trim_end_matches('-'))
                .or(Some(f.as_str()))
                .and_then(|n| SimName::new(n).ok())
        })
        .collect();
    names.sort();
    names.dedup();
    let sims = names
        .into_iter()
        .map(|name| {
            let record = facts.sims.iter().find(|s| s.plan.name == name).cloned();
            let found = plan::plan_down(&name, &facts);
            let wanted = record
                .as_ref()
                .map(|r| r.plan.namespaces.len())
                .unwrap_or(usize::MAX);
            let state = if found.namespaces.len() == wanted {
                "up"
            } else if found.namespaces.is_empty() {
                "down"
            } else {
                "partly up"
            };
            SimState {
                name,
                state: state.to_string(),
                record,
            }
        })
        .collect();
    SimList { sims }
}
