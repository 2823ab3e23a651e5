//! `spark-launch vllm`, `trtllm`, `sglang`, `llamacpp` and `atlas`: serving across nodes, one
//! subcommand per engine of the seam (`workload::engines`). Flags only: they become a partial
//! request laid over the engine's defaults by the one merge (`workload::partial::layer`, as
//! profiles and recipes are) and go through the one launch (`cli::launch::run`): resolve, look
//! up, plan, print (`--dry-run`) or run and wait until it serves.

use super::args::{ContainerFlags, LaunchFlags, NodeFlags, RuntimeFlag};
use super::{CmdResult, Context, Invalid};
use crate::launch::LaunchCommand;
use crate::model::ModelSource;
use crate::plan::JobName;
use crate::plan::spec::EnvVar;
use crate::workload::endpoint::{ApiKeyAsk, Bind};
use crate::workload::engines::{
    EngineKind, EngineOptions, Launcher, atlas, llamacpp, ray, sglang, trtllm, vllm,
};
use crate::workload::launch::LaunchRequest;
use crate::workload::limits;
use crate::workload::nccl_lib::NcclFrom;
use crate::workload::partial::{self, Given, PartialServe, Switches};

/// Flags every serving launch takes (each engine's command and `up`).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeFlags {
    /// Return once the API answers and leave it running; without it, stay attached to the
    /// head's log and stop everything on Ctrl-C.
    #[arg(short = 'd', long)]
    pub detach: bool,

    /// Once it serves, stay attached as its supervisor (as `spark-launch supervise JOB`):
    /// restart the whole group when a rank wedges or stops. Ctrl-C stops supervising, not the
    /// job (exit 130, as every interrupted launch).
    #[arg(long, conflicts_with = "detach")]
    pub supervise: bool,

    /// The weights are already on every node: skip staging.
    #[arg(long)]
    pub no_stage: bool,

    /// The Hugging Face cache on every node [default: ~/.cache/huggingface of the SSH user].
    #[arg(long, value_name = "DIR")]
    pub hf_home: Option<String>,

    /// Count the job ready at its first token, without asking it the questions of
    /// `spark-launch check` (arithmetic it must get right, answers that stop, prose that is
    /// words); the start then says the answers were not checked.
    #[arg(long)]
    pub no_check: bool,

    /// Seconds to wait for the API to answer (loading and compiling take long on first start)
    /// [default: the profile's, else 1200].
    #[arg(long, value_name = "SECONDS", value_parser = limits::parse_seconds)]
    pub timeout: Option<u64>,

    /// The job's name [default: derived from the engine and the model, or the profile's name].
    #[arg(long)]
    pub job: Option<JobName>,

    /// Set in every container, over the derived environment (repeat).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<EnvVar>,

    /// GPUs per node [default: as the nodes' NVIDIA driver lists them, else 1 (a DGX Spark)].
    #[arg(long, value_name = "N", value_parser = limits::parse_gpus_per_node)]
    pub gpus_per_node: Option<u32>,

    /// Run NCCL on TCP sockets instead of refusing when a node's RDMA devices are not usable
    /// from containers (no /dev/infiniband or no uverbs): the plan and the report say so.
    #[arg(long)]
    pub allow_tcp: bool,

    /// The API key the engine enforces: KEY, `auto` (generated once, kept 0600 in
    /// $XDG_CONFIG_HOME/spark-launch/api-key and reused) or @FILE (its first line). vLLM gets
    /// it as VLLM_API_KEY, SGLang through SL_SGLANG_API_KEY (never on a command line); plans
    /// show `<set>`. TensorRT-LLM cannot enforce one: refused there.
    #[arg(long, value_name = "KEY|auto|@FILE")]
    pub api_key: Option<ApiKeyAsk>,

    /// Where the API listens on the head: `all` interfaces, the head's `fabric` address, or
    /// one ADDR the head has [default: all, with a warning when there is no --api-key].
    #[arg(long, value_name = "ADDR|fabric|all")]
    pub bind: Option<Bind>,

    /// Bring a newer NCCL without rebuilding the image: the libnccl.so.2 of IMAGE (as its own
    /// loader finds it: an `nccl-build` image) or of the folder PATH on every node, mounted
    /// read-only at /opt/spark-launch/nccl and first on every container's LD_LIBRARY_PATH.
    #[arg(long, value_name = "IMAGE|PATH")]
    pub nccl_from: Option<NcclFrom>,

    /// Start a switchless ring even when its containers load an NCCL older than 2.30.7 (no
    /// subnet-aware routing: expect `ibv_modify_qp … Connection timed out`).
    #[arg(long)]
    pub allow_old_nccl: bool,

    /// The cap on every serving container (Docker's memory and swap limits, equal): 110G,
    /// 512M, or a number of GiB [default: the node's MemTotal less 6 GiB for the host; a
    /// profile's memory_limit].
    #[arg(long, value_name = "SIZE", value_parser = crate::workload::memory::parse_memory_size)]
    pub memory_limit: Option<u64>,

    /// Start a launch whose memory plan does not fit anyway (on unified memory the host may
    /// lock up instead of failing with out-of-memory).
    #[arg(long)]
    pub allow_overcommit: bool,

    #[command(flatten)]
    pub container: ContainerFlags,

    #[command(flatten)]
    pub launch: LaunchFlags,

    #[command(flatten)]
    pub target: NodeFlags,
}

impl ServeFlags {
    /// What these flags ask for, over a launch file or the engine's defaults.
    pub fn ask(&self) -> PartialServe {
        PartialServe {
            job: Given::flag_opt(self.job.clone(), "--job"),
            env: self
                .env
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect(),
            ulimits: self.container.ulimits.clone(),
            gpus: self.container.gpus,
            gpus_per_node: Given::flag_opt(self.gpus_per_node, "--gpus-per-node"),
            ready_timeout_s: Given::flag_opt(self.timeout, "--timeout"),
            hf_home: Given::flag_opt(self.hf_home.clone(), "--hf-home"),
            nccl_from: Given::flag_opt(self.nccl_from.clone(), "--nccl-from"),
            api_key: Given::flag_opt(self.api_key.clone(), "--api-key"),
            bind: Given::flag_opt(self.bind, "--bind"),
            memory_limit: Given::flag_opt(self.memory_limit, "--memory-limit"),
            ..PartialServe::default()
        }
        .with_switches(Switches {
            no_stage: self.no_stage,
            no_check: self.no_check,
            allow_tcp: self.allow_tcp,
            allow_old_nccl: self.allow_old_nccl,
            allow_overcommit: self.allow_overcommit,
            keep_recipe_env: false,
        })
    }

    /// The launch of `request` with these flags.
    pub fn launch(&self, request: LaunchRequest, ctx: &Context) -> LaunchCommand {
        LaunchCommand {
            request,
            selection: self.target.selection(ctx),
            dry_run: self.launch.dry_run,
            options: self.launch.apply_options(),
            detach: self.detach,
            supervise: self.supervise.then(Default::default),
        }
    }
}

/// The model and shape, shared by every engine's command.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The model: ORG/NAME[@REVISION] on the Hugging Face Hub, or an absolute folder on the
    /// head.
    pub model: String,

    /// A branch, tag or commit of the Hub repo [default: main].
    #[arg(long)]
    pub revision: Option<String>,

    /// Tensor-parallel size (GPUs each layer is split over).
    #[arg(long, default_value_t = 1, value_parser = limits::parse_tp)]
    pub tp: u32,

    /// Pipeline-parallel size (stages).
    #[arg(long, default_value_t = 1, value_parser = limits::parse_pp)]
    pub pp: u32,

    /// The container image [default: a pinned NGC image of the engine].
    #[arg(long)]
    pub image: Option<String>,

    /// The API port on the head [default: 8000 for vLLM, 8355 for TensorRT-LLM, 30000 for
    /// SGLang, 8888 for Atlas].
    #[arg(long, value_parser = limits::parse_port)]
    pub port: Option<u16>,
}

/// `--ray`, for `vllm` and for `up`.
#[derive(Debug, clap::Args)]
pub struct RayFlag {
    /// Use Ray (a Ray head on the head node, the others join) instead of vLLM's native
    /// multi-node mode; with `up`, also keep the Ray executor of an eugr (v1) recipe, which
    /// eugr's runner drops unless given --ray.
    #[arg(long)]
    pub ray: bool,
}

#[derive(Debug, clap::Args)]
pub struct VllmArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    #[command(flatten)]
    pub ray: RayFlag,

    /// The rendezvous port of the native mode (on the head).
    #[arg(long, default_value_t = vllm::DEFAULT_MASTER_PORT, value_name = "PORT", value_parser = limits::parse_port)]
    pub master_port: u16,

    /// The Ray head's port.
    #[arg(long, default_value_t = ray::DEFAULT_PORT, value_name = "PORT", value_parser = limits::parse_port)]
    pub ray_port: u16,

    #[command(flatten)]
    pub serve: ServeFlags,

    /// Extra arguments for `vllm serve`, passed verbatim (after `--`).
    #[arg(last = true, value_name = "VLLM ARGS")]
    pub extra: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct TrtllmArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The port of the sshd in every container (MPI between nodes).
    #[arg(long, default_value_t = trtllm::DEFAULT_SSH_PORT, value_name = "PORT", value_parser = limits::parse_port)]
    pub ssh_port: u16,

    /// Share of free GPU memory for the KV cache (`kv_cache_config.free_gpu_memory_fraction`).
    #[arg(long, value_name = "FRACTION")]
    pub kv_cache_fraction: Option<f64>,

    /// Turn off CUDA graph padding (`cuda_graph_config.enable_padding`).
    #[arg(long)]
    pub no_cuda_graph_padding: bool,

    /// `--max_batch_size` of trtllm-serve.
    #[arg(long, value_name = "N")]
    pub max_batch_size: Option<u32>,

    /// `--max_num_tokens` of trtllm-serve.
    #[arg(long, value_name = "N")]
    pub max_num_tokens: Option<u32>,

    #[command(flatten)]
    pub serve: ServeFlags,

    /// Extra arguments for `trtllm-serve`, passed verbatim (after `--`).
    #[arg(last = true, value_name = "TRTLLM ARGS")]
    pub extra: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct SglangArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The `--dist-init-addr` port on the head (SGLang's torch.distributed store).
    #[arg(long, default_value_t = sglang::DEFAULT_DIST_PORT, value_name = "PORT", value_parser = limits::parse_port)]
    pub dist_port: u16,

    /// How every node starts SGLang: `module` (python3 -m sglang.launch_server) or `serve`
    /// (sglang serve, SGLang 0.5.5 and later).
    #[arg(long, default_value_t = Launcher::Module, value_name = "SPELLING")]
    pub launcher: Launcher,

    #[command(flatten)]
    pub serve: ServeFlags,

    /// Extra arguments for SGLang's server, passed verbatim (after `--`).
    #[arg(last = true, value_name = "SGLANG ARGS")]
    pub extra: Vec<String>,
}

/// `spark-launch llamacpp`: llama.cpp with RPC servers on the other nodes.
#[derive(Debug, clap::Args)]
pub struct LlamacppArgs {
    /// The model: an absolute path to a GGUF file, or to a folder holding one (the first
    /// `.gguf` in name order: the first part of a split model), or a Hub repository
    /// ORG/NAME[:QUANT][@REVISION] as llama.cpp's -hf takes it (the quant's file(s) and its
    /// projector, staged on the head only; without a quant Q4_K_M, else Q8_0, else the first).
    pub model: String,

    /// RPC servers on this many more nodes (the head's server spreads the layers over its own
    /// GPUs and theirs) [default: 0, one node].
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub workers: usize,

    /// The port of every worker's RPC server, bound to its fabric address only.
    #[arg(long, default_value_t = llamacpp::DEFAULT_RPC_PORT, value_name = "PORT", value_parser = limits::parse_port)]
    pub rpc_port: u16,

    /// On one node: these GPUs (comma-separated indices) each get an RPC server on 127.0.0.1
    /// (ports from --rpc-port on) and llama-server runs on the others, reaching them over
    /// RPC: the RPC path tried on one machine.
    #[arg(long, value_delimiter = ',', value_name = "GPUS")]
    pub rpc_gpus: Vec<u32>,

    /// The folder llama-server and ggml-rpc-server are run from [default: /app in the
    /// default image; PATH for host processes].
    #[arg(long, value_name = "DIR")]
    pub programs: Option<String>,

    /// The container image [default: llama.cpp's own CUDA image with every tool].
    #[arg(long)]
    pub image: Option<String>,

    /// The API port on the head [default: 8080, llama-server's].
    #[arg(long, value_parser = limits::parse_port)]
    pub port: Option<u16>,

    /// Containers, or plain processes (a llama.cpp build on every node's PATH or --programs).
    #[arg(long, value_enum, default_value_t = RuntimeFlag::Docker)]
    pub runtime: RuntimeFlag,

    /// Run on this machine only: one node, no SSH.
    #[arg(long, conflicts_with_all = ["snapshots", "hosts", "nodes"])]
    pub local: bool,

    #[command(flatten)]
    pub serve: ServeFlags,

    /// Extra arguments for `llama-server`, passed verbatim (after `--`).
    #[arg(last = true, value_name = "LLAMA-SERVER ARGS")]
    pub extra: Vec<String>,
}

/// The launch of `llamacpp`: the shared serving options, the node count and runtime, the RPC
/// options, through the one merge.
async fn llamacpp(a: &LlamacppArgs, ctx: &Context) -> CmdResult {
    let model = ModelSource::parse(&a.model, None).invalid()?;
    let ask = PartialServe {
        engine: Some(Given::flag(EngineKind::Llamacpp, "the command")),
        model: Some(Given::flag(model, "MODEL")),
        image: Given::flag_opt(a.image.clone(), "--image"),
        port: Given::flag_opt(a.port, "--port"),
        engine_args: Some(Given::flag(a.extra.clone(), "--")),
        runtime: Some(Given::flag(a.runtime.into(), "--runtime")),
        nodes: Some(Given::flag(a.workers + 1, "--workers")),
        tuning: EngineOptions {
            rpc_port: Some(a.rpc_port),
            rpc_gpus: a.rpc_gpus.clone(),
            programs: a.programs.clone(),
            ..EngineOptions::default()
        },
        ..a.serve.ask()
    };
    let request = partial::layer(PartialServe::default(), ask).invalid()?;
    let mut cmd = a.serve.launch(LaunchRequest::Serve(Box::new(request)), ctx);
    cmd.selection.local = a.local;
    super::launch::run(cmd, Default::default(), ctx).await
}

/// The launch of `engine` as its command's arguments ask for it, over the engine's defaults.
fn request(
    engine: EngineKind,
    m: &ModelArgs,
    flags: &ServeFlags,
    extra: &[String],
    tuning: EngineOptions,
) -> Result<LaunchRequest, super::CmdError> {
    let model = ModelSource::parse(&m.model, m.revision.as_deref()).invalid()?;
    let ask = PartialServe {
        engine: Some(Given::flag(engine, "the command")),
        model: Some(Given::flag(model, "MODEL")),
        image: Given::flag_opt(m.image.clone(), "--image"),
        port: Given::flag_opt(m.port, "--port"),
        tp: Some(Given::flag(m.tp, "--tp")),
        pp: Some(Given::flag(m.pp, "--pp")),
        engine_args: Some(Given::flag(extra.to_vec(), "--")),
        tuning,
        ..flags.ask()
    };
    let request = partial::layer(PartialServe::default(), ask).invalid()?;
    Ok(LaunchRequest::Serve(Box::new(request)))
}

/// The serving subcommands, one per engine.
#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// Tensor-parallel vLLM across nodes; waits until it serves.
    Vllm(VllmArgs),
    /// Tensor-parallel TensorRT-LLM across nodes (mpirun inside containers).
    Trtllm(TrtllmArgs),
    /// Tensor-parallel SGLang across nodes (every node runs SGLang with its rank); waits until
    /// it serves.
    Sglang(SglangArgs),
    /// llama.cpp: llama-server on the head, RPC servers lending the other nodes' GPUs (GGUF
    /// models); waits until it serves.
    Llamacpp(LlamacppArgs),
    /// Atlas across nodes (every node runs `spark serve` with its rank; expert parallelism with
    /// --ep); waits until it serves.
    Atlas(AtlasArgs),
}

pub async fn run(command: ServeCommand, ctx: &Context) -> CmdResult {
    let (req, flags) = match &command {
        ServeCommand::Llamacpp(a) => return llamacpp(a, ctx).await,
        ServeCommand::Vllm(a) => (
            request(
                EngineKind::Vllm,
                &a.model,
                &a.serve,
                &a.extra,
                EngineOptions {
                    ray: a.ray.ray,
                    rendezvous_port: Some(a.master_port),
                    ray_port: Some(a.ray_port),
                    ..EngineOptions::default()
                },
            )?,
            &a.serve,
        ),
        ServeCommand::Trtllm(a) => (
            request(
                EngineKind::Trtllm,
                &a.model,
                &a.serve,
                &a.extra,
                EngineOptions {
                    ssh_port: Some(a.ssh_port),
                    memory_fraction: a.kv_cache_fraction,
                    cuda_graph_padding: a.no_cuda_graph_padding.then_some(false),
                    max_batch_size: a.max_batch_size,
                    max_num_tokens: a.max_num_tokens,
                    ..EngineOptions::default()
                },
            )?,
            &a.serve,
        ),
        ServeCommand::Sglang(a) => (
            request(
                EngineKind::Sglang,
                &a.model,
                &a.serve,
                &a.extra,
                EngineOptions {
                    rendezvous_port: Some(a.dist_port),
                    launcher: Some(a.launcher),
                    ..EngineOptions::default()
                },
            )?,
            &a.serve,
        ),
        ServeCommand::Atlas(a) => (atlas_request(a)?, &a.serve),
    };
    super::launch::run(flags.launch(req, ctx), Default::default(), ctx).await
}

/// `spark-launch atlas`: Atlas's own shape flags beside the shared ones.
#[derive(Debug, clap::Args)]
pub struct AtlasArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Expert-parallel size: the ranks the experts are split over. With --tp 1 the group is
    /// --ep nodes; with --tp equal to --ep both share the same ranks; otherwise tp × ep.
    #[arg(long, default_value_t = 1, value_parser = limits::parse_tp)]
    pub ep: u32,

    /// The NCCL bootstrap port on the head (Atlas's --master-port).
    #[arg(long, default_value_t = atlas::DEFAULT_MASTER_PORT, value_name = "PORT", value_parser = limits::parse_port)]
    pub master_port: u16,

    #[command(flatten)]
    pub serve: ServeFlags,

    /// Extra arguments for `spark serve`, passed verbatim (after `--`).
    #[arg(last = true, value_name = "ATLAS ARGS")]
    pub extra: Vec<String>,
}

fn atlas_request(a: &AtlasArgs) -> Result<LaunchRequest, super::CmdError> {
    request(
        EngineKind::Atlas,
        &a.model,
        &a.serve,
        &a.extra,
        EngineOptions {
            expert_parallel: Some(a.ep),
            rendezvous_port: Some(a.master_port),
            ..EngineOptions::default()
        },
    )
}
