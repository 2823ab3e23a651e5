//! Carrying out `nccl-build` and `nccl-test` plans: the glue between the plans of
//! `workload::nccl_*` and the executor / image build. Decides nothing.

use super::{CmdError, CmdResult, Context};
use crate::workload::nccl_build::BuildPlan;
use crate::workload::nccl_test::NcclTestPlan;

/// What the driver printed (every test's log) and its exit status.
pub struct Captured {
    pub log: String,
    pub exit_code: Option<i32>,
}

pub async fn build(_plan: &BuildPlan, _ctx: &Context) -> CmdResult {
    Err(CmdError {
        code: 1,
        error: anyhow::anyhow!("building images needs the Docker runtime (issue 4); use --dry-run"),
    })
}

pub async fn run_test(
    _plan: &NcclTestPlan,
    _keep: bool,
    _ctx: &Context,
) -> Result<Captured, CmdError> {
    Err(CmdError {
        code: 1,
        error: anyhow::anyhow!("running jobs needs the executor (issue 4); use --dry-run"),
    })
}
