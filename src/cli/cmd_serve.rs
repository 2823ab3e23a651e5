//! `spark-launch vllm` and `trtllm`: tensor-parallel serving across nodes, and the launch flow
//! they share with `up`: resolve the nodes, plan (pure), print the plan (`--dry-run`), or
//! resolve the model on the Hub, stage it on every node, start, and wait until it serves.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::args::{Cluster, TargetArgs, resolve};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use std::time::Duration;

use crate::apply::shell::{NodeShell, SshShell};
use crate::apply::stage;
use crate::apply::{ApplyOptions, execute};
use crate::derive::NodeInput;
use crate::model::ModelSource;
use crate::model::hub::HubError;
use crate::node::NodeName;
use crate::plan::{JobName, Launch, Step, Ulimit};
use crate::workload::serve::{
    DEFAULT_READY_TIMEOUT_S, NodePaths, ServeOptions, ServePlan, ServeRefusal, TRTLLM_IMAGE,
    VLLM_IMAGE,
};
use crate::workload::trtllm::{self, LlmApiOptions, TrtllmOptions};
use crate::workload::vllm::{self, VllmMode, VllmOptions};

/// `KEY=VALUE` for `--env`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvArg {
    pub key: String,
    pub value: String,
}

impl std::str::FromStr for EnvArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("expected KEY=VALUE (e.g. NCCL_DEBUG=INFO), got {s:?}"))?;
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!("{k:?} is not a variable name"));
        }
        Ok(EnvArg {
            key: k.to_string(),
            value: v.to_string(),
        })
    }
}

/// Flags every serving launch takes (`vllm`, `trtllm`, `up`).
#[derive(Debug, Clone, clap::Args)]
pub struct LaunchFlags {
    /// Print the per-node plan (containers, commands, step order) and touch nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Return once the API answers and leave it running; without it, stay attached to the
    /// head's log and stop everything on Ctrl-C.
    #[arg(short = 'd', long)]
    pub detach: bool,

    /// After a failure, leave the containers in place for a look (stop with `spark-launch
    /// stop JOB`).
    #[arg(long)]
    pub keep_on_failure: bool,

    /// The weights are already on every node: skip staging.
    #[arg(long)]
    pub no_stage: bool,

    /// Parallel streams per node when staging the model.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub streams: usize,

    /// The Hugging Face cache on every node [default: ~/.cache/huggingface of the SSH user].
    #[arg(long, value_name = "DIR")]
    pub hf_home: Option<String>,

    /// Seconds to wait for the API to answer (loading and compiling take long on first start).
    #[arg(long, default_value_t = DEFAULT_READY_TIMEOUT_S, value_name = "SECONDS")]
    pub timeout: u64,

    /// The job's name [default: derived from the engine and the model].
    #[arg(long)]
    pub job: Option<JobName>,

    /// Set in every container, over the derived environment (repeat).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<EnvArg>,

    /// Replace a container limit by name (repeat), e.g. memlock=8388608 where limits cannot
    /// be raised.
    #[arg(long = "ulimit", value_name = "NAME=SOFT[:HARD]")]
    pub ulimits: Vec<Ulimit>,

    /// GPUs per node [default: as the nodes' NVIDIA driver lists them, else 1 (a DGX Spark)].
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,

    /// GPUs given to each container: all (default), none, or a count.
    #[arg(long, value_name = "none|all|N")]
    pub gpus: Option<crate::plan::Gpus>,

    #[command(flatten)]
    pub target: TargetArgs,

    /// TensorRT-LLM: where the nodes' sshd keeps its host keys, if not /etc/ssh: DIR for every
    /// node, or NAME=DIR for one (repeat). Mounted read-only so the containers' sshd presents
    /// the host keys `spark-launch trust` pinned.
    #[arg(long = "host-keys", value_name = "[NAME=]DIR")]
    pub host_keys: Vec<String>,
}

/// The model and shape, shared by `vllm` and `trtllm`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The model: ORG/NAME[@REVISION] on the Hugging Face Hub, or an absolute folder on the
    /// head.
    pub model: String,

    /// A branch, tag or commit of the Hub repo [default: main].
    #[arg(long)]
    pub revision: Option<String>,

    /// Tensor-parallel size (GPUs each layer is split over).
    #[arg(long, default_value_t = 1)]
    pub tp: u32,

    /// Pipeline-parallel size (stages).
    #[arg(long, default_value_t = 1)]
    pub pp: u32,

    /// The container image [default: a pinned NGC image of the engine].
    #[arg(long)]
    pub image: Option<String>,

    /// The API port on the head [default: 8000 for vLLM, 8355 for TensorRT-LLM].
    #[arg(long)]
    pub port: Option<u16>,
}

#[derive(Debug, clap::Args)]
pub struct VllmArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Use Ray (a Ray head on the head node, the others join) instead of vLLM's native
    /// multi-node mode.
    #[arg(long)]
    pub ray: bool,

    /// The rendezvous port of the native mode (on the head).
    #[arg(long, default_value_t = vllm::DEFAULT_MASTER_PORT, value_name = "PORT")]
    pub master_port: u16,

    /// The Ray head's port.
    #[arg(long, default_value_t = vllm::DEFAULT_RAY_PORT, value_name = "PORT")]
    pub ray_port: u16,

    #[command(flatten)]
    pub launch: LaunchFlags,

    /// Extra arguments for `vllm serve`, passed verbatim (after `--`).
    #[arg(last = true, value_name = "VLLM ARGS")]
    pub extra: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct TrtllmArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The port of the sshd in every container (MPI between nodes).
    #[arg(long, default_value_t = trtllm::DEFAULT_SSH_PORT, value_name = "PORT")]
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
    pub launch: LaunchFlags,

    /// Extra arguments for `trtllm-serve`, passed verbatim (after `--`).
    #[arg(last = true, value_name = "TRTLLM ARGS")]
    pub extra: Vec<String>,
}

/// A serving job to plan.
#[derive(Clone, Debug, PartialEq)]
pub enum ServeRequest {
    Vllm(VllmOptions),
    Trtllm(TrtllmOptions),
}

impl ServeRequest {
    pub fn serve(&self) -> &ServeOptions {
        match self {
            ServeRequest::Vllm(o) => &o.serve,
            ServeRequest::Trtllm(o) => &o.serve,
        }
    }

    pub fn serve_mut(&mut self) -> &mut ServeOptions {
        match self {
            ServeRequest::Vllm(o) => &mut o.serve,
            ServeRequest::Trtllm(o) => &mut o.serve,
        }
    }

    pub fn plan(&self, nodes: &[NodeInput]) -> Result<ServePlan, ServeRefusal> {
        match self {
            ServeRequest::Vllm(o) => vllm::plan(o, nodes),
            ServeRequest::Trtllm(o) => trtllm::plan(o, nodes),
        }
    }
}

/// `vllm-qwen2-5-0-5b-instruct`: a job name from the engine and the model.
pub fn default_job(engine: &str, model: &ModelSource) -> JobName {
    let name = model.served_name();
    let base = name
        .rsplit('/')
        .next()
        .unwrap_or(&name)
        .to_ascii_lowercase();
    let mut slug = String::new();
    for c in base.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let mut job = format!("{engine}-{}", slug.trim_matches('-'));
    job.truncate(40);
    let job = job.trim_end_matches('-').to_string();
    JobName::new(job).unwrap_or_else(|_| JobName::new(engine).unwrap_or_else(|_| unreachable_job()))
}

fn unreachable_job() -> JobName {
    // "serve" is a valid job name; this is only reached if an engine name were not.
    JobName::new("serve").unwrap_or_else(|e| panic!("{e}"))
}

/// The serving options from the model arguments and launch flags.
pub fn serve_options(
    engine: &str,
    m: &ModelArgs,
    flags: &LaunchFlags,
    default_image: &str,
    default_port: u16,
    extra: &[String],
) -> Result<ServeOptions, CmdError> {
    let model = ModelSource::parse(&m.model, m.revision.as_deref()).invalid()?;
    let job = flags
        .job
        .clone()
        .unwrap_or_else(|| default_job(engine, &model));
    Ok(ServeOptions {
        job,
        model,
        image: m.image.clone().unwrap_or_else(|| default_image.to_string()),
        port: m.port.unwrap_or(default_port),
        tp: m.tp,
        pp: m.pp,
        gpus_per_node: flags.gpus_per_node.unwrap_or(1),
        engine_args: extra.to_vec(),
        env: flags
            .env
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect(),
        paths: BTreeMap::new(),
        ulimits: flags.ulimits.clone(),
        gpus: flags.gpus,
        ready_timeout_s: flags.timeout,
        stage_model: !flags.no_stage,
    })
}

pub async fn vllm(args: VllmArgs, ctx: &Context) -> CmdResult {
    let serve = serve_options(
        "vllm",
        &args.model,
        &args.launch,
        VLLM_IMAGE,
        vllm::DEFAULT_PORT,
        &args.extra,
    )?;
    let mode = if args.ray {
        VllmMode::Ray {
            ray_port: args.ray_port,
        }
    } else {
        VllmMode::Native {
            master_port: args.master_port,
        }
    };
    launch(
        ServeRequest::Vllm(VllmOptions { serve, mode }),
        &args.launch,
        ctx,
    )
    .await
}

pub async fn trtllm(args: TrtllmArgs, ctx: &Context) -> CmdResult {
    let serve = serve_options(
        "trtllm",
        &args.model,
        &args.launch,
        TRTLLM_IMAGE,
        trtllm::DEFAULT_PORT,
        &args.extra,
    )?;
    let mut llm_api = LlmApiOptions::default();
    if let Some(f) = args.kv_cache_fraction {
        llm_api.kv_cache_free_gpu_memory_fraction = f;
    }
    if args.no_cuda_graph_padding {
        llm_api.cuda_graph_padding = false;
    }
    launch(
        ServeRequest::Trtllm(TrtllmOptions {
            serve,
            ssh_port: args.ssh_port,
            llm_api,
            max_batch_size: args.max_batch_size,
            max_num_tokens: args.max_num_tokens,
        }),
        &args.launch,
        ctx,
    )
    .await
}

/// Plans a serving job; prints it with `--dry-run`, else runs it.
pub async fn launch(mut req: ServeRequest, flags: &LaunchFlags, ctx: &Context) -> CmdResult {
    if flags.target.uses_snapshots() && !flags.dry_run {
        return Err(anyhow::anyhow!(
            "--snapshot plans on saved facts: add --dry-run (snapshots cannot run anything)"
        ))
        .invalid();
    }
    let cluster = resolve(&flags.target, ctx).await?;
    if flags.gpus_per_node.is_none() {
        match crate::workload::serve::gpus_from_facts(&cluster.nodes) {
            Ok(Some(n)) => req.serve_mut().gpus_per_node = n,
            Ok(None) => {}
            Err(p) => {
                close(cluster).await;
                return refuse(ServeRefusal { problems: vec![p] }, ctx);
            }
        }
    }
    if !flags.host_keys.is_empty() {
        let mut paths: BTreeMap<NodeName, NodePaths> = cluster
            .nodes
            .iter()
            .map(|n| (n.name.clone(), req.serve().paths_of(&n.name)))
            .collect();
        apply_host_keys(&mut paths, &flags.host_keys)?;
        req.serve_mut().paths = paths;
    }
    if let Some(h) = &flags.hf_home {
        let paths = NodePaths {
            hf_home: h.clone(),
            ..NodePaths::default()
        };
        req.serve_mut().paths = cluster
            .nodes
            .iter()
            .map(|n| (n.name.clone(), paths.clone()))
            .collect();
    }
    let plan = match req.plan(&cluster.nodes) {
        Ok(p) => p,
        Err(refusal) => {
            close(cluster).await;
            return refuse(refusal, ctx);
        }
    };
    if flags.dry_run {
        close(cluster).await;
        if ctx.json {
            print_json(&plan)?;
        } else {
            print_out(&render_plan(&plan));
        }
        return Ok(Outcome::Success);
    }
    let result = run_live(req, flags, &cluster, ctx).await;
    close(cluster).await;
    result
}

async fn close(cluster: Cluster) {
    if let Some(pool) = cluster.pool {
        pool.close().await;
    }
}

/// Prints a refusal (JSON with `--json`) and returns exit 2.
pub fn refuse(refusal: ServeRefusal, ctx: &Context) -> CmdResult {
    if ctx.json {
        print_json(&serde_json::json!({ "refused": refusal.problems }))?;
    }
    Err(refusal).invalid()
}

/// The live path: resolve paths and the model (before anything starts: a gated model without
/// a token stops here), then run the plan — staging, start, readiness — through the executor.
async fn run_live(
    mut req: ServeRequest,
    flags: &LaunchFlags,
    cluster: &Cluster,
    ctx: &Context,
) -> CmdResult {
    let Some(pool) = &cluster.pool else {
        return Err(anyhow::anyhow!("no live nodes to run on").into());
    };
    let mut shells: Vec<Arc<dyn NodeShell>> = Vec::new();
    for n in &cluster.nodes {
        shells.push(Arc::new(SshShell::new(pool.get(&n.name)?.clone())));
    }
    // 1. Where the cache is on each node (its user's home), then the model on the Hub.
    let mut paths = node_paths(&shells, flags.hf_home.as_deref()).await?;
    apply_host_keys(&mut paths, &flags.host_keys)?;
    req.serve_mut().paths = paths;
    let step = ctx.reporter.step(&format!("Resolve {}", req.serve().model));
    match stage::resolve_on_head(
        shells[0].clone(),
        &stage::hf_endpoint(),
        &req.serve().model,
        stage::hf_token(),
    )
    .await
    {
        Ok(Some(r)) => {
            step.ok_with(&format!(
                "commit {}, {}",
                &r.commit[..12],
                stage::human_bytes(r.total_bytes())
            ));
            req.serve_mut().model = r.source();
        }
        Ok(None) => step.ok(),
        Err(e) => {
            step.fail("");
            return hub_error(e);
        }
    }
    let plan = match req.plan(&cluster.nodes) {
        Ok(p) => p,
        Err(r) => return refuse(r, ctx),
    };
    for (node, ws) in &plan.warnings {
        for w in ws {
            ctx.reporter.warn(&format!("{node}: {w}"));
        }
    }
    // 2. The plan, through the executor: checks, image, staging, start, readiness.
    let targets = super::launch::node_targets(pool);
    let options = ApplyOptions {
        keep: flags.keep_on_failure,
        ..ApplyOptions::default()
    };
    let runtime_cluster = crate::runtime::Cluster::new(targets);
    let cancel = super::launch::cancel_on_signals(ctx.reporter.clone());
    if let Err(e) = execute(
        &plan.job,
        &runtime_cluster,
        &options,
        ctx.reporter.clone(),
        cancel.clone(),
    )
    .await
    {
        let code = e.exit_code();
        return Err(CmdError {
            code,
            error: anyhow::Error::new(e),
        });
    }
    print_ready(&plan, ctx)?;
    if flags.detach {
        return Ok(Outcome::Success);
    }
    // 3. Attached: the head's log until Ctrl-C or a container stops; then stop everything.
    let outcome = attach(&plan, &runtime_cluster, &cancel, ctx).await;
    let step = ctx.reporter.step(&format!("Stop {}", plan.job.job));
    let results = crate::apply::for_each_node(plan.nodes.clone(), 0, |node| {
        let rc = &runtime_cluster;
        let job = &plan.job.job;
        async move {
            rc.node(&node)?
                .stop_job(
                    job,
                    Some(crate::plan::RuntimeKind::Docker),
                    Duration::from_secs(10),
                )
                .await
        }
    })
    .await;
    match crate::apply::all_ok(results) {
        Ok(_) => step.ok(),
        Err(f) => {
            step.fail("");
            return Err(anyhow::anyhow!("stopping {}: {f}", plan.job.job).into());
        }
    }
    outcome
}

/// The endpoint, the model and a request to paste (stdout: the result).
fn print_ready(plan: &ServePlan, ctx: &Context) -> Result<(), CmdError> {
    let body = serde_json::json!({
        "model": plan.served_name,
        "messages": [{"role": "user", "content": "Say hello from both nodes."}],
        "max_tokens": 64,
    });
    let curl = format!(
        "curl {}/chat/completions -H 'Content-Type: application/json' -d '{}'",
        plan.endpoint.url, body
    );
    if ctx.json {
        return print_json(&serde_json::json!({
            "job": plan.job.job,
            "engine": plan.engine,
            "endpoint": plan.endpoint.url,
            "model": plan.served_name,
            "nodes": plan.nodes,
            "curl": curl,
        }));
    }
    print_out(&format!(
        "ready: {} serves {} (job {}, {} on {})\n\n  {curl}\n\nlogs: spark-launch logs {}    stop: spark-launch stop {}",
        plan.endpoint.url,
        plan.served_name,
        plan.job.job,
        plan.engine,
        names(&plan.nodes),
        plan.job.job,
        plan.job.job
    ));
    Ok(())
}

/// Follows the head's log on stderr until Ctrl-C (success) or a container of the job stops
/// (failure, naming it).
async fn attach(
    plan: &ServePlan,
    cluster: &crate::runtime::Cluster,
    cancel: &tokio_util::sync::CancellationToken,
    ctx: &Context,
) -> CmdResult {
    use futures::StreamExt;
    let head = &plan.nodes[0];
    let name = plan.job.job.container_name(head);
    let handle = cluster.node(head)?;
    let mut logs = handle
        .logs(crate::plan::RuntimeKind::Docker, &name, true, false)
        .await?;
    ctx.reporter.warn(
        "attached to the head's log; Ctrl-C stops the job on every node (-d returns instead)",
    );
    let mut check = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(Outcome::Success),
            chunk = logs.next() => match chunk {
                Some(Ok(bytes)) => {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(&bytes);
                }
                _ => tokio::time::sleep(Duration::from_secs(1)).await,
            },
            _ = check.tick() => {
                for node in &plan.nodes {
                    let entries = cluster
                        .node(node)?
                        .jobs(Some(&plan.job.job), Some(crate::plan::RuntimeKind::Docker))
                        .await
                        .unwrap_or_default();
                    let cname = plan.job.job.container_name(node);
                    if let Some(e) = entries.iter().find(|e| e.name == cname && e.state != "running") {
                        return Err(anyhow::anyhow!(
                            "{node}: {cname} is {} (exit code {}); stopping the job",
                            e.state,
                            e.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "?".into())
                        )
                        .into());
                    }
                }
            }
        }
    }
}

/// Each node's paths: `--hf-home` for all, else `$HOME/.cache/huggingface` of the SSH user
/// there (and `$HOME/.ssh`).
pub async fn node_paths(
    shells: &[Arc<dyn NodeShell>],
    hf_home: Option<&str>,
) -> Result<BTreeMap<NodeName, NodePaths>, CmdError> {
    let results = crate::apply::for_each_node(shells.iter().map(|s| s.node().clone()), 0, |name| {
        let shell = shells.iter().find(|s| *s.node() == name).cloned();
        async move {
            let Some(shell) = shell else {
                return Err(format!("{name}: no shell"));
            };
            let out = shell
                .run("printf '%s' \"$HOME\"", Vec::new(), None)
                .await
                .map_err(|e| e.to_string())?;
            let home = out.stdout.trim().to_string();
            if !out.success() || !home.starts_with('/') {
                return Err(format!(
                    "{name}: cannot read $HOME ({})",
                    out.stderr_tail.trim()
                ));
            }
            Ok(NodePaths {
                hf_home: hf_home
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{home}/.cache/huggingface")),
                ssh_dir: format!("{home}/.ssh"),
                ..NodePaths::default()
            })
        }
    })
    .await;
    let ok = crate::apply::all_ok(results).map_err(|f| anyhow::anyhow!("{f}"))?;
    Ok(ok.into_iter().collect())
}

/// `--host-keys DIR` (every node) or `NAME=DIR` (one node).
fn apply_host_keys(
    paths: &mut BTreeMap<NodeName, NodePaths>,
    host_keys: &[String],
) -> Result<(), CmdError> {
    for h in host_keys {
        match h.split_once('=') {
            Some((name, dir)) => {
                let Some(p) = paths
                    .iter_mut()
                    .find(|(n, _)| n.as_str() == name)
                    .map(|(_, p)| p)
                else {
                    return Err(anyhow::anyhow!(
                        "--host-keys names no node of the job: {name}"
                    ))
                    .invalid();
                };
                p.host_keys = dir.to_string();
            }
            None => paths.values_mut().for_each(|p| p.host_keys = h.clone()),
        }
    }
    Ok(())
}

/// A Hub error: access problems are refusals (exit 2), the rest failures (exit 1).
pub fn hub_error(e: HubError) -> CmdResult {
    match e {
        HubError::GatedNoToken { .. }
        | HubError::NoAccess { .. }
        | HubError::NotFound { .. }
        | HubError::NoRevision { .. } => Err(e).invalid(),
        other => Err(anyhow::anyhow!(other).into()),
    }
}

fn quote_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.contains('\n') {
                let lines = a.lines().count();
                format!("<script: {lines} lines, --json shows it>")
            } else {
                shlex::try_quote(a)
                    .map(|q| q.into_owned())
                    .unwrap_or_else(|_| a.clone())
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The plan as a person reads it.
pub fn render_plan(p: &ServePlan) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} ({}) · {} · tp {} × pp {} on {}\n",
        p.engine,
        p.mode,
        p.model,
        p.tp,
        p.pp,
        p.nodes
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out.push_str(&format!(
        "endpoint once ready: {}  (model {})\n",
        p.endpoint.url, p.served_name
    ));
    for n in &p.job.nodes {
        match &n.launch {
            Launch::Container(c) => {
                out.push_str(&format!(
                    "\n{} ({}): container {}\n",
                    n.node, n.role, c.name
                ));
                out.push_str(&format!("  image    {}\n", c.image));
                if let Some(e) = &c.entrypoint {
                    out.push_str(&format!("  entry    {}\n", quote_argv(e)));
                }
                out.push_str(&format!("  command  {}\n", quote_argv(&c.command)));
                for (k, v) in &c.env {
                    let v = if v.contains('\n') {
                        format!("<{} lines, --json shows it>", v.lines().count())
                    } else {
                        v.clone()
                    };
                    out.push_str(&format!("  env      {k}={v}\n"));
                }
                for m in &c.mounts {
                    out.push_str(&format!(
                        "  mount    {} → {}{}\n",
                        m.source,
                        m.target,
                        if m.read_only { " (read-only)" } else { "" }
                    ));
                }
                for d in &c.devices {
                    out.push_str(&format!("  device   {}\n", d.host));
                }
                let ulimits: Vec<String> = c
                    .ulimits
                    .iter()
                    .map(|u| {
                        if u.soft == u.hard {
                            format!("{}={}", u.name, u.soft)
                        } else {
                            format!("{}={}:{}", u.name, u.soft, u.hard)
                        }
                    })
                    .collect();
                let gpus = match c.gpus {
                    crate::plan::Gpus::None => "none".to_string(),
                    crate::plan::Gpus::All => "all".to_string(),
                    crate::plan::Gpus::Count(n) => n.to_string(),
                };
                let network = match c.network {
                    crate::plan::spec::NetworkMode::Host => "host",
                    crate::plan::spec::NetworkMode::Bridge => "bridge",
                };
                let ipc = match c.ipc {
                    crate::plan::spec::IpcMode::Host => "host",
                    crate::plan::spec::IpcMode::Private => "private",
                };
                out.push_str(&format!(
                    "  runs     gpus {gpus} · network {network} · ipc {ipc} · cap {} · ulimit {}\n",
                    c.cap_add.join(","),
                    ulimits.join(" ")
                ));
            }
            Launch::Process(pr) => {
                out.push_str(&format!("\n{} ({}): process {}\n", n.node, n.role, pr.name));
                out.push_str(&format!("  command  {}\n", quote_argv(&pr.command)));
            }
        }
    }
    out.push_str("\nsteps\n");
    for (i, s) in p.job.steps.iter().enumerate() {
        out.push_str(&format!("  {}. {}\n", i + 1, describe_step(s)));
    }
    if !p.notes.is_empty() {
        out.push_str("\nnotes\n");
        for n in &p.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    for (node, ws) in &p.warnings {
        for w in ws {
            out.push_str(&format!("warning: {node}: {w}\n"));
        }
    }
    out
}

fn names(nodes: &[NodeName]) -> String {
    nodes
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per step.
pub fn describe_step(s: &Step) -> String {
    match s {
        Step::CheckPorts { ports } => format!(
            "check that nothing listens yet on {}",
            ports
                .iter()
                .map(|p| format!(
                    "{} port {}",
                    p.node,
                    p.ports
                        .iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Step::CheckReachable {
            to,
            addr,
            port,
            from,
        } => format!(
            "check that {} reach{} {to} at {addr}:{port}",
            names(from),
            if from.len() == 1 { "es" } else { "" }
        ),
        Step::EnsureImage { image, nodes } => {
            format!(
                "make sure {} ha{} {image} (same digest; push where missing)",
                names(nodes),
                if nodes.len() == 1 { "s" } else { "ve" }
            )
        }
        Step::StageModel {
            model,
            nodes,
            copy: true,
        } => format!(
            "stage {model} on {} (the first downloads, the others copy from it over the fast link)",
            names(nodes)
        ),
        Step::StageModel { model, nodes, .. } => format!(
            "check that {model} is already on {} (--no-stage), refuse to start if not",
            names(nodes)
        ),
        Step::Start { nodes } => format!("start the containers on {}", names(nodes)),
        Step::WaitRay {
            node,
            expect,
            timeout_s,
        } => format!(
            "wait (≤ {}s) until Ray on {node} lists {}",
            timeout_s,
            expect
                .iter()
                .map(|m| format!("{} at {} with {} GPU", m.node, m.ip, m.gpus))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Step::WaitServing {
            node,
            url,
            model,
            timeout_s,
            ..
        } => format!(
            "wait (≤ {}) until {url}/health answers on {node} and /v1/models lists {model}",
            crate::workload::readiness::duration(timeout_s * 1000)
        ),
        Step::WriteFile { node, path, .. } => format!("write {path} on {node}"),
        Step::Exec { node, command, .. } => format!("run `{}` on {node}", quote_argv(command)),
        Step::WaitHttp { node, url, .. } => format!("wait until {url} answers on {node}"),
        Step::WaitExit { node, .. } => format!("wait for the job to finish on {node}"),
        Step::Stop => "stop the job".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_job_name_is_a_valid_slug_of_the_model() {
        let m = ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", None).unwrap();
        assert_eq!(
            default_job("vllm", &m).as_str(),
            "vllm-qwen2-5-0-5b-instruct"
        );
        let m = ModelSource::parse(&format!("org/{}", "x".repeat(90)), None).unwrap();
        assert!(default_job("trtllm", &m).as_str().len() <= 40);
    }

    #[test]
    fn env_arguments_need_a_variable_name() {
        assert!("NCCL_DEBUG=INFO".parse::<EnvArg>().is_ok());
        assert!("A=b=c".parse::<EnvArg>().unwrap().value == "b=c");
        assert!("1X=2".parse::<EnvArg>().is_err());
        assert!("novalue".parse::<EnvArg>().is_err());
    }
}
