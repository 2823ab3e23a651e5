//! What every launching command shares once its flags are parsed into a
//! `launch::LaunchCommand`: one call into the library, then the result rendered — the plan
//! (`--dry-run`), the started job, the nccl-test verdict, the images built, the serving
//! endpoint — and the outcome mapped to an exit code. Flags and rendering only.

use std::path::PathBuf;

use super::{CmdError, CmdResult, Context, Outcome, print_json, print_out, render};
use crate::launch::{LaunchCommand, LaunchError, Launched, launch};
use crate::plan::JobPlan;
use crate::workload::engines::LinkVerdict;
use crate::workload::launch::{LaunchRefusal, Planned};
use crate::workload::nccl_test::NcclVerdict;
use crate::workload::serve::ServePlan;
use crate::workload::startup::Startup;

/// What a command adds to the shared rendering.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// `nccl-test --save-log FILE`: the driver's raw output, also written there.
    pub save_log: Option<PathBuf>,
    /// `nccl-test --plot FILE.svg`: the bus bandwidth curves, drawn there.
    pub plot: Option<PathBuf>,
}

/// Runs one launching command and renders what it did.
pub async fn run(l: LaunchCommand, extras: Extras, ctx: &Context) -> CmdResult {
    if !l.dry_run {
        super::check_plot(extras.plot.as_deref())?;
    }
    let json = ctx.json;
    let on_ready = move |plan: &ServePlan, startup: &Startup, link: Option<&LinkVerdict>| {
        if json {
            let _ = print_json(&render::ready_json(plan, startup, link));
        } else {
            print_out(&render::ready(plan, startup, link));
        }
    };
    let launched = match launch(&l, &ctx.reporter, &ctx.cancel, &on_ready).await {
        Ok(l) => l,
        Err(e) => return Err(launch_error(e, ctx)),
    };
    match launched {
        Launched::Planned(p) => {
            print_planned(&p, ctx)?;
            Ok(Outcome::Success)
        }
        Launched::Started(job) => {
            print_started(&job, ctx)?;
            still_running(&job, ctx)
        }
        Launched::Tested { log, verdict, .. } => {
            if let Some(path) = &extras.save_log {
                std::fs::write(path, &log).map_err(|e| {
                    anyhow::anyhow!("cannot write the log to {}: {e}", path.display())
                })?;
            }
            if json {
                print_json(&verdict)?;
            } else {
                print_out(&match &verdict {
                    NcclVerdict::Measured(a) => crate::report::nccl::render::text(a),
                    NcclVerdict::LaunchCheck(c) => render::launch_check(c),
                });
            }
            if let (Some(path), NcclVerdict::Measured(a)) = (&extras.plot, &verdict) {
                let svg = crate::report::plot::nccl(std::slice::from_ref(a));
                super::write_plot(path, svg, ctx)?;
            }
            Ok(if verdict.failed() {
                Outcome::Failed
            } else {
                Outcome::Success
            })
        }
        Launched::Built { plan, images } => {
            if json {
                print_json(&serde_json::json!({ "images": images }))?;
            } else {
                let tags: Vec<String> = plan.builds.iter().map(|b| b.tag.clone()).collect();
                print_out(&tags.join("\n"));
            }
            Ok(Outcome::Success)
        }
        Launched::Served { attached, plan, .. } => match attached {
            None => still_running(&plan.job, ctx),
            // Ctrl-C ended it: stopped on every node, and said with the exit of an interrupt.
            Some(Ok(())) if ctx.cancel.is_cancelled() => Err(CmdError {
                code: 130,
                error: anyhow::Error::msg(render::stopped_after_ctrl_c(&plan.job)),
            }),
            Some(Ok(())) => Ok(Outcome::Success),
            Some(Err(e)) => Err(e.into()),
        },
    }
}

/// A detached job that was fully started when Ctrl-C came: say exactly what keeps running and
/// how to stop it (exit 130), rather than claim a clean-up that did not happen.
fn still_running(job: &JobPlan, ctx: &Context) -> CmdResult {
    if !ctx.cancel.is_cancelled() {
        return Ok(Outcome::Success);
    }
    Err(CmdError {
        code: 130,
        error: anyhow::Error::msg(render::still_running(job)),
    })
}

/// The plan of a dry run: JSON as is, or the text renderer; derive's warnings on stderr.
fn print_planned(p: &Planned, ctx: &Context) -> Result<(), CmdError> {
    for w in &p.warnings {
        ctx.reporter.warn(w);
    }
    if ctx.json {
        print_json(&p.plan)
    } else {
        print_out(&render::plan(&p.plan));
        Ok(())
    }
}

fn print_started(plan: &JobPlan, ctx: &Context) -> Result<(), CmdError> {
    if ctx.json {
        return print_json(&render::started_json(plan));
    }
    print_out(&render::started(plan));
    Ok(())
}

/// A failed launch as a command error with its exit code; a serving refusal is also printed as
/// JSON with `--json` (`{"refused": [problems]}`).
pub fn launch_error(e: LaunchError, ctx: &Context) -> CmdError {
    if ctx.json
        && let LaunchError::Refused(LaunchRefusal::Serve(r)) = &e
    {
        let _ = print_json(&serde_json::json!({ "refused": r.problems }));
    }
    CmdError {
        code: e.exit_code(),
        error: anyhow::Error::new(e),
    }
}
