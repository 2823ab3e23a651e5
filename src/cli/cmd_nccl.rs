//! `spark-launch nccl-build` and `nccl-test`: flags only. They become launch requests
//! (`workload::nccl_build::BuildOptions`, `workload::launch::NcclTestRequest`) and go through
//! the one launch (`cli::launch::run`); the verdict comes from `report::nccl`.

use std::collections::BTreeMap;

use super::args::{ContainerFlags, EngineFlags, LaunchFlags, NodeFlags, RuntimeFlag};
use super::{CmdResult, Context};
use crate::launch::LaunchCommand;
use crate::plan::spec::EnvVar;
use crate::plan::{JobName, RuntimeKind};
use crate::workload::launch::{LaunchRequest, NcclTestRequest};
use crate::workload::nccl_build::{self, BuildOptions, CudaArch};
use crate::workload::nccl_test::{NcclOp, NcclTestOptions, parse_bytes};

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// Build for this machine only (no inventory, no SSH).
    #[arg(long, conflicts_with = "snapshots")]
    pub local: bool,

    /// The NCCL tag (or branch) to build. The default is the first release with subnet-aware
    /// routing, which switchless rings need; an older release for a ring needs --mesh-plugin.
    #[arg(long, value_name = "REF", default_value = nccl_build::DEFAULT_NCCL_REF)]
    pub nccl_ref: String,

    /// GPU architectures to compile for (repeat or comma-separate: sm_121, sm_120, sm_90)
    /// [default: sm_121 on arm64 (GB10), sm_120 on amd64].
    #[arg(long = "cuda-arch", value_name = "SM", value_delimiter = ',')]
    pub cuda_arch: Vec<CudaArch>,

    /// Also build the mesh net plugin for direct-cabled meshes (one subnet per cable). NCCL
    /// 2.30.7 and later route rings natively (subnet-aware routing): leave it off there; a
    /// ring build of an older ref is refused without it.
    #[arg(long)]
    pub mesh_plugin: bool,

    /// The nccl-tests tag to build [default: the Dockerfile's, v2.19.6].
    #[arg(long, value_name = "REF")]
    pub nccl_tests_ref: Option<String>,

    /// The CUDA devel base image [default: the Dockerfile's].
    #[arg(long, value_name = "IMAGE")]
    pub cuda_devel_image: Option<String>,

    /// The CUDA runtime base image [default: the Dockerfile's].
    #[arg(long, value_name = "IMAGE")]
    pub cuda_runtime_image: Option<String>,

    /// Parallel compile jobs (0 = every core).
    #[arg(long, default_value_t = 0)]
    pub jobs: u32,

    /// Tag the image with this name instead of the default
    /// (`spark-launch/nccl-tests:nccl-<ref>-<sm>-<arch>`).
    #[arg(long, value_name = "IMAGE")]
    pub tag: Option<String>,

    #[command(flatten)]
    pub launch: LaunchFlags,

    #[command(flatten)]
    pub engines: EngineFlags,
}

#[derive(Debug, clap::Args)]
pub struct NcclTestArgs {
    #[command(flatten)]
    pub target: NodeFlags,

    /// Run on this machine only: one node, its GPUs, no SSH (a workstation, a GPU server).
    #[arg(long, conflicts_with = "snapshots")]
    pub local: bool,

    /// Operations to measure (repeat or comma-separate) [default: all_gather, all_reduce].
    #[arg(long = "op", value_delimiter = ',', value_name = "OP")]
    pub ops: Vec<NcclOp>,

    /// Smallest message size (nccl-tests' -b; K/M/G suffixes).
    #[arg(short = 'b', long = "min-bytes", default_value = "8", value_parser = parse_bytes)]
    pub min_bytes: u64,

    /// Largest message size (nccl-tests' -e). The default stays within a 128 GB
    /// unified-memory box.
    #[arg(short = 'e', long = "max-bytes", default_value = "4G", value_parser = parse_bytes)]
    pub max_bytes: u64,

    /// Size factor between steps (nccl-tests' -f).
    #[arg(short = 'f', long = "factor", default_value_t = 2)]
    pub factor: u64,

    /// Timed iterations per size (nccl-tests' -n).
    #[arg(short = 'n', long, default_value_t = 20)]
    pub iters: u32,

    /// Warm-up iterations per size (nccl-tests' -w) [default: nccl-tests' own].
    #[arg(short = 'w', long)]
    pub warmup: Option<u32>,

    /// GPUs per node, one rank each [default: the GPUs the probe found on each node, or 1].
    #[arg(long, value_name = "N", value_parser = crate::workload::limits::parse_gpus_per_node)]
    pub gpus_per_node: Option<u32>,

    /// The nccl-tests image [default: `nccl-build`'s tag for each node's architecture].
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// Where the *_perf binaries are [default: /opt/nccl-tests/build in the image; with
    /// --runtime host: the same path on every node].
    #[arg(long, value_name = "DIR")]
    pub tests_dir: Option<String>,

    /// The mpirun to use on the head.
    #[arg(long, default_value = "mpirun", value_name = "PATH")]
    pub mpirun: String,

    /// An extra variable for every rank (repeat), e.g. NCCL_ALGO=Ring.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<EnvVar>,

    /// The job's name (containers are sl-<job>-<node>).
    #[arg(long, default_value = "nccl-test")]
    pub job: JobName,

    /// Start on a switchless ring even when the image's NCCL is older than 2.30.7 (no
    /// subnet-aware routing: expect `ibv_modify_qp … Connection timed out`).
    #[arg(long)]
    pub allow_old_nccl: bool,

    /// Only check the launch path (containers, sshd, keys, hostfile): run `mpirun hostname`
    /// on every rank instead of the tests; every node must answer.
    #[arg(long)]
    pub launch_check: bool,

    /// Run NCCL on TCP sockets instead of refusing when a node's RDMA devices are not usable
    /// from containers (no /dev/infiniband or no uverbs); the report then flags the sockets.
    #[arg(long)]
    pub allow_tcp: bool,

    /// Also write the tests' raw output (what mpirun printed, NCCL_DEBUG lines included) to
    /// this file, e.g. for `spark-launch report nccl` later or a bug report.
    #[arg(long, value_name = "FILE")]
    pub save_log: Option<std::path::PathBuf>,

    /// Also draw bus bandwidth against message size (log2) as an SVG picture, the figure the
    /// fabric must reach as a dashed line.
    #[arg(long, value_name = "FILE.svg", value_parser = crate::report::plot::svg_path, conflicts_with = "launch_check")]
    pub plot: Option<std::path::PathBuf>,

    /// How long the whole test may run, in seconds.
    #[arg(long, default_value_t = 1800, value_name = "SECONDS", value_parser = crate::workload::limits::parse_seconds)]
    pub timeout: u64,

    /// How the test runs on each node: containers, or plain processes (no Docker needed).
    #[arg(long, value_enum, default_value_t = RuntimeFlag::Docker)]
    pub runtime: RuntimeFlag,

    #[command(flatten)]
    pub container: ContainerFlags,

    #[command(flatten)]
    pub launch: LaunchFlags,

    #[command(flatten)]
    pub engines: EngineFlags,
}

pub async fn build(args: BuildArgs, ctx: &Context) -> CmdResult {
    let mut selection = args.target.selection(ctx);
    selection.engines = args.engines.engines.clone();
    selection.local = args.local;
    let request = LaunchRequest::NcclBuild(BuildOptions {
        nccl_ref: Some(args.nccl_ref),
        cuda_archs: args.cuda_arch,
        mesh_plugin: args.mesh_plugin,
        nccl_tests_ref: args.nccl_tests_ref,
        cuda_devel_image: args.cuda_devel_image,
        cuda_runtime_image: args.cuda_runtime_image,
        jobs: args.jobs,
        tag: args.tag,
    });
    let launch = LaunchCommand {
        request,
        selection,
        dry_run: args.launch.dry_run,
        options: args.launch.apply_options(),
        detach: true,
        supervise: None,
    };
    super::launch::run(launch, Default::default(), ctx).await
}

pub async fn test(args: NcclTestArgs, ctx: &Context) -> CmdResult {
    let mut selection = args.target.selection(ctx);
    selection.engines = args.engines.engines.clone();
    selection.local = args.local;
    let (launch, extras) = test_launch(args, selection);
    super::launch::run(launch, extras, ctx).await
}

/// `nccl-test`'s flags as the launch they ask for.
fn test_launch(
    args: NcclTestArgs,
    selection: crate::resolve::Selection,
) -> (LaunchCommand, super::launch::Extras) {
    let runtime: RuntimeKind = args.runtime.into();
    let mut options = NcclTestOptions::new(args.job);
    if !args.ops.is_empty() {
        options.ops = args.ops;
    }
    options.min_bytes = args.min_bytes;
    options.max_bytes = args.max_bytes;
    options.factor = args.factor;
    options.iters = args.iters;
    options.warmup = args.warmup;
    options.runtime = runtime;
    options.image = args.image;
    if let Some(d) = args.tests_dir {
        options.tests_dir = d;
    }
    options.mpirun = args.mpirun;
    options.extra_env = args
        .env
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect::<BTreeMap<_, _>>();
    options.timeout_s = args.timeout;
    options.launch_check = args.launch_check;
    options.allow_tcp = args.allow_tcp;
    options.as_root = match runtime {
        RuntimeKind::Docker => true,
        // Open MPI refuses root unless told; only the local node's user is known here.
        RuntimeKind::Host => args.local && nix::unistd::geteuid().is_root(),
    };
    let request = LaunchRequest::NcclTest(NcclTestRequest {
        options,
        gpus_per_node: args.gpus_per_node,
        overrides: args.container.overrides(),
        allow_old_nccl: args.allow_old_nccl,
    });
    let launch = LaunchCommand {
        request,
        selection,
        dry_run: args.launch.dry_run,
        options: args.launch.apply_options(),
        detach: true,
        supervise: None,
    };
    let extras = super::launch::Extras {
        save_log: args.save_log,
        plot: args.plot,
    };
    (launch, extras)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::images::PushPolicy;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        args: NcclTestArgs,
    }

    #[test]
    fn no_push_and_concurrency_reach_the_executor_options() {
        let t = T::try_parse_from(["t", "--no-push", "--concurrency", "1", "--keep"]).unwrap();
        let (launch, _) = test_launch(t.args, Default::default());
        assert_eq!(launch.options.push, PushPolicy::Refuse);
        assert_eq!(launch.options.concurrency, 1);
        assert!(launch.options.keep);
    }
}
