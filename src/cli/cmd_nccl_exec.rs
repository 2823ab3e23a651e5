//! Carrying out `nccl-build` and `nccl-test` plans: the glue between the plans of
//! `workload::nccl_*`, the executor (`apply::execute`) and the image build
//! (`runtime::build`). Decides nothing.

use std::sync::Arc;

use super::launch::cancel_on_signals;
use super::{CmdError, Context};
use crate::apply::{ApplyError, ApplyOptions, execute};
use crate::progress::{NullReporter, Reporter};
use crate::runtime::{Cluster, NodeTarget};
use crate::workload::nccl_test::{CAPTURE, NcclTestPlan};

/// What the driver printed (every test's log) and its exit status.
pub struct Captured {
    pub log: String,
    pub exit_code: Option<i32>,
}

/// Runs the plan; returns the driver's output even when the job failed part-way (then the
/// executor has already cleaned up and the error says what failed).
pub async fn run_test(
    plan: &NcclTestPlan,
    targets: Vec<NodeTarget>,
    keep: bool,
    ctx: &Context,
) -> Result<Captured, CmdError> {
    let reporter: Arc<dyn Reporter> = if ctx.json {
        Arc::new(NullReporter)
    } else {
        ctx.reporter.clone()
    };
    let options = ApplyOptions {
        keep,
        ..ApplyOptions::default()
    };
    let cluster = Cluster::new(targets);
    let cancel = cancel_on_signals(ctx.reporter.clone());
    let captured = |caps: &crate::apply::Captures| {
        caps.get(CAPTURE).map(|c| Captured {
            log: format!("{}{}", c.stdout, c.stderr),
            exit_code: i32::try_from(c.exit_code).ok(),
        })
    };
    match execute(&plan.plan, &cluster, &options, reporter, cancel).await {
        Ok(applied) => captured(&applied.captures).ok_or_else(|| CmdError {
            code: 1,
            error: anyhow::anyhow!(
                "the job ran but its driver left no output (capture {CAPTURE} missing)"
            ),
        }),
        Err(e) => {
            // A driver that ran and then the job failed (say, the stop): report what it
            // measured, and the failure as a warning.
            if let Some(c) = captured(&e.captures) {
                ctx.reporter.warn(&e.to_string());
                return Ok(c);
            }
            Err(apply_error(e))
        }
    }
}

fn apply_error(e: ApplyError) -> CmdError {
    CmdError {
        code: e.exit_code(),
        error: anyhow::Error::new(e),
    }
}

/// Builds every image of the plan on its node's engine, streaming the build output as node
/// lines, then pushes it to the other nodes of that architecture (`image push`). Prints the
/// tags built (or JSON with `--json`).
pub async fn build(
    plan: &crate::workload::nccl_build::BuildPlan,
    targets: Vec<NodeTarget>,
    ctx: &Context,
) -> super::CmdResult {
    use crate::runtime::build::{BuildRequest, build_image};
    let reporter: Arc<dyn Reporter> = if ctx.json {
        Arc::new(NullReporter)
    } else {
        ctx.reporter.clone()
    };
    let cluster = Cluster::new(targets);
    let cancel = cancel_on_signals(ctx.reporter.clone());
    let mut done = Vec::new();
    for b in &plan.builds {
        let step = reporter.step(&format!("build {} on {}", b.tag, b.build_on));
        let engine = cluster
            .node(&b.build_on)
            .map_err(anyhow::Error::new)?
            .engine()
            .await
            .map_err(anyhow::Error::new)?;
        let labels = std::collections::BTreeMap::from([(
            "dev.spark-launch.built-by".to_string(),
            format!("spark-launch {}", env!("CARGO_PKG_VERSION")),
        )]);
        let req = BuildRequest {
            tag: &b.tag,
            platform: Some(&b.platform),
            build_args: &b.build_args,
            files: crate::workload::nccl_build::CONTEXT,
            labels,
        };
        let node = b.build_on.clone();
        let r = reporter.clone();
        let mut on_line = move |line: &str| r.node_line(&node, line);
        let built = build_image(engine, &req, &mut on_line, &cancel)
            .await
            .map_err(anyhow::Error::new)?;
        step.ok_with(built.image_id.as_deref().unwrap_or(&b.tag));
        if !b.push_to.is_empty() {
            crate::apply::push_image(
                &cluster,
                &b.build_on,
                &b.tag,
                &b.push_to,
                0,
                &reporter,
                &cancel,
            )
            .await
            .map_err(anyhow::Error::new)?;
        }
        done.push(serde_json::json!({
            "tag": b.tag,
            "arch": b.arch,
            "built_on": b.build_on,
            "image_id": built.image_id,
            "pushed_to": b.push_to,
        }));
    }
    if ctx.json {
        super::print_json(&serde_json::json!({ "images": done }))?;
    } else {
        let tags: Vec<String> = plan.builds.iter().map(|b| b.tag.clone()).collect();
        super::print_out(&tags.join("\n"));
    }
    Ok(super::Outcome::Success)
}
