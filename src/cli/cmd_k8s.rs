//! `spark-launch export k8s JOB|PROFILE|RECIPE [--out DIR]`: the serving plan `up` would run
//! (from the same profile or recipe, planned as `up --dry-run` plans it), or the plan a job
//! started from this machine keeps, written as Kubernetes manifests (`k8s::export`) into a
//! folder of files spark-launch owns (`owned_files`, as `compose` writes). Flags and
//! glue.

use std::path::PathBuf;

use super::cmd_profiles::{UpArgs, default_profiles_dir};
use super::{CmdResult, Context, Invalid, Outcome, coded, print_json, print_out};
use crate::k8s::{self, K8sOptions};
use crate::launch::{Launched, launch};
use crate::owned_files::{self, OwnedFilesError};
use crate::plan::JobName;
use crate::profile::files::{FindError, find};
use crate::recipe::loader;
use crate::records::{self, RecordError};
use crate::workload::launch::LaunchPlan;
use crate::workload::serve::ServePlan;

#[derive(Debug, clap::Args)]
pub struct K8sArgs {
    /// The folder to write the manifests to (created when missing) [default: ./NAME-k8s].
    /// Files spark-launch wrote there before are replaced; any other file stops the write.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Replace files in the folder that spark-launch did not write (or that were changed
    /// since it wrote them).
    #[arg(long)]
    pub force: bool,

    /// The Kubernetes resource of the RDMA shared device plugin, for /dev/infiniband.
    #[arg(long, value_name = "NAME", default_value = k8s::DEFAULT_RDMA_RESOURCE)]
    pub rdma_resource: String,

    /// Mount this PersistentVolumeClaim (a Hugging Face cache) as the model's cache, instead
    /// of each node's folder (--hf-home).
    #[arg(long, value_name = "CLAIM")]
    pub pvc: Option<String>,

    /// A job started from this machine (its kept plan), a profile name or file, or a
    /// community recipe (with the flags `up` takes).
    #[command(flatten)]
    pub up: UpArgs,
}

/// Where the plan came from.
enum Source {
    Planned(Box<ServePlan>, Vec<String>, String),
    Kept(Box<ServePlan>, String),
}

/// What the name given is, when it is no recipe: a profile (`None`), a job started here with
/// its kept plan, or nothing known (the profile finder's refusal, with where no job was kept).
fn kept(args: &UpArgs) -> Result<Option<(JobName, PathBuf)>, String> {
    if !args.registry.is_empty()
        || args.profile.starts_with('@')
        || loader::is_recipe_file(&args.profile)
    {
        return Ok(None);
    }
    let dir = args
        .profiles_dir
        .clone()
        .unwrap_or_else(default_profiles_dir);
    let unknown = match find(&args.profile, &dir, &[]) {
        Err(e @ FindError::Unknown { .. }) => e.to_string(),
        _ => return Ok(None),
    };
    let state = crate::state::state_dir();
    match JobName::new(&args.profile) {
        Ok(job) if records::plan_path(&state, &job).is_file() => Ok(Some((job, state))),
        Ok(job) => Err(format!(
            "{unknown}; nor a job started from this machine (no {})",
            records::plan_path(&state, &job).display()
        )),
        Err(_) => Err(unknown),
    }
}

async fn plan(args: &UpArgs, ctx: &Context) -> Result<Source, super::CmdError> {
    if let Some((job, state)) = kept(args).map_err(anyhow::Error::msg).invalid()? {
        return match records::load_plan(&state, &job) {
            Ok(plan) => Ok(Source::Kept(
                Box::new(plan),
                format!(
                    "the plan kept for job {job} ({})",
                    records::plan_path(&state, &job).display()
                ),
            )),
            Err(e @ RecordError::Io { .. }) => Err(e.into()),
            Err(e) => Err(e).invalid(),
        };
    }
    let request = super::cmd_profiles::request(args, ctx)?;
    let mut l = args.serve.launch(request, ctx);
    l.dry_run = true;
    let planned = match launch(&l, &ctx.reporter, &ctx.cancel, &|_, _, _| {}).await {
        Ok(Launched::Planned(p)) => p,
        Ok(_) => {
            return Err(anyhow::anyhow!("export plans only; nothing should have run").into());
        }
        Err(e) => return Err(super::launch::launch_error(e, ctx)),
    };
    let LaunchPlan::Serve(plan) = planned.plan else {
        return Err(anyhow::anyhow!(
            "{} runs nccl-tests, not a serving group: nothing to export",
            args.profile
        ))
        .invalid();
    };
    Ok(Source::Planned(
        Box::new(*plan),
        planned.warnings,
        format!("{} (as `up --dry-run` plans it)", args.profile),
    ))
}

/// `spark-launch export k8s`.
pub async fn run(args: K8sArgs, ctx: &Context) -> CmdResult {
    let (plan, source) = match plan(&args.up, ctx).await? {
        Source::Planned(plan, warnings, source) => {
            // The same warnings as `up --dry-run`.
            for w in &warnings {
                ctx.reporter.warn(w);
            }
            (plan, source)
        }
        Source::Kept(plan, source) => (plan, source),
    };
    let opts = K8sOptions {
        rdma_resource: args.rdma_resource.clone(),
        pvc: args.pvc.clone(),
        source,
    };
    let export = match k8s::export(&plan, &opts) {
        Ok(e) => e,
        Err(e) => return Err(coded(2, e)),
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}-k8s", export.name)));
    if args.up.serve.launch.dry_run {
        if ctx.json {
            print_json(&export)?;
        } else {
            for f in &export.files {
                print_out(&format!(
                    "==> {} <==\n{}",
                    out.join(&f.name).display(),
                    f.text
                ));
            }
        }
        return Ok(Outcome::Success);
    }
    let files: Vec<(String, String)> = export
        .files
        .iter()
        .map(|f| (f.name.clone(), f.text.clone()))
        .collect();
    let done = match owned_files::write(&out, &files, "spark-launch export k8s", args.force) {
        Ok(done) => done,
        Err(e @ OwnedFilesError::Io { .. }) => return Err(e.into()),
        Err(e) => return Err(e).invalid(),
    };
    for p in &done.overwritten {
        ctx.reporter
            .warn(&format!("replaced {} (--force)", p.display()));
    }
    for p in &done.removed {
        ctx.reporter.warn(&format!(
            "removed {}: written by an earlier run into this folder, not part of this plan",
            p.display()
        ));
    }
    let written: Vec<String> = files
        .iter()
        .map(|(name, _)| out.join(name).display().to_string())
        .collect();
    if ctx.json {
        print_json(&serde_json::json!({
            "files": written,
            "name": export.name,
            "image": export.image,
            "image_pinned": export.image_pinned,
            "secret_keys": export.secret_keys,
            "notes": export.notes,
            "plan": plan,
        }))?;
    } else {
        let readme = out.join("README.md").display().to_string();
        print_out(k8s::summary(&export, &written, &readme).trim_end());
    }
    Ok(Outcome::Success)
}
