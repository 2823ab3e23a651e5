//! `spark-launch up` and `profiles`: launch profiles — bundled in the binary, or YAML files in
//! the user's folder — run with one command, or listed with whether this cluster can run them.

use std::path::{Path, PathBuf};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::args::{TargetArgs, resolve};
use super::cmd_serve::{self, LaunchFlags, ServeRequest};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::model::ModelSource;
use crate::profile::fit::{Fit, capacity, fit};
use crate::profile::{self, Loaded, Origin, Profile, ProfileEngine, SetArg};
use crate::workload::serve::{ServeOptions, TRTLLM_IMAGE, VLLM_IMAGE};
use crate::workload::trtllm::{self, LlmApiOptions, TrtllmOptions};
use crate::workload::vllm::{self, VllmMode, VllmOptions};

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// A profile name (`spark-launch profiles` lists them) or a path to a profile file.
    pub profile: String,

    /// Change a field before validation (repeat): tp=4, model.revision=v2, env.NCCL_DEBUG=INFO.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<SetArg>,

    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    #[command(flatten)]
    pub launch: LaunchFlags,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    /// Check fit against these nodes; without any, against the cluster file when it exists.
    #[command(flatten)]
    pub target: TargetArgs,
}

/// `$XDG_CONFIG_HOME/spark-launch/profiles`.
pub fn default_profiles_dir() -> PathBuf {
    super::default_cluster_file()
        .parent()
        .map(|p| p.join("profiles"))
        .unwrap_or_else(|| PathBuf::from("profiles"))
}

/// Reads every `*.yaml` of the user's folder; each invalid file is an error naming it.
pub fn user_profiles(dir: &Path) -> (Vec<Loaded>, Vec<String>) {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (loaded, errors);
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    for p in paths {
        match load_file(&p, &[]) {
            Ok(l) => loaded.push(l),
            Err(e) => errors.push(e.error.to_string()),
        }
    }
    (loaded, errors)
}

fn load_file(path: &Path, sets: &[SetArg]) -> Result<Loaded, CmdError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the profile {}: {e}", path.display()))
        .invalid()?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let file = path.display().to_string();
    let profile = profile::parse(&file, Some(stem), &text, sets).invalid()?;
    Ok(Loaded {
        profile,
        origin: Origin::User,
        file,
    })
}

/// Finds a profile by name (user folder first, then bundled) or by path.
pub fn find(name: &str, dir: &Path, sets: &[SetArg]) -> Result<Loaded, CmdError> {
    let as_path = Path::new(name);
    if name.ends_with(".yaml") || name.ends_with(".yml") || name.contains('/') {
        return load_file(as_path, sets);
    }
    for ext in ["yaml", "yml"] {
        let p = dir.join(format!("{name}.{ext}"));
        if p.is_file() {
            return load_file(&p, sets);
        }
    }
    if let Some((file, text)) = profile::bundled::FILES
        .iter()
        .find(|(f, _)| f.trim_end_matches(".yaml") == name)
    {
        let label = format!("launch-profiles/{file}");
        let profile = profile::parse(&label, Some(name), text, sets).invalid()?;
        return Ok(Loaded {
            profile,
            origin: Origin::Bundled,
            file: label,
        });
    }
    let mut known: Vec<String> = profile::catalogue(user_profiles(dir).0)
        .into_iter()
        .map(|l| l.profile.name)
        .collect();
    known.sort();
    Err(anyhow::anyhow!(
        "no launch profile named {name:?}; known: {} (or give a path to a .yaml file)",
        known.join(", ")
    ))
    .invalid()
}

/// The serving request a profile describes, with the launch flags on top.
pub fn request(p: &Profile, flags: &LaunchFlags) -> Result<Option<ServeRequest>, CmdError> {
    let Some(engine) = p.engine.serving() else {
        return Ok(None);
    };
    let Some(model) = p.model_source() else {
        return Err(anyhow::anyhow!("profile {} has no model", p.name)).invalid();
    };
    let mut env = p.env.clone();
    for e in &flags.env {
        env.insert(e.key.clone(), e.value.clone());
    }
    let job = match &flags.job {
        Some(j) => j.clone(),
        None => crate::plan::JobName::new(p.name.clone()).invalid()?,
    };
    let (default_image, default_port) = match engine {
        crate::workload::serve::Engine::Vllm => (VLLM_IMAGE, vllm::DEFAULT_PORT),
        crate::workload::serve::Engine::Trtllm => (TRTLLM_IMAGE, trtllm::DEFAULT_PORT),
    };
    let serve = ServeOptions {
        job,
        model,
        image: p.image.clone().unwrap_or_else(|| default_image.to_string()),
        port: p.ports.api.unwrap_or(default_port),
        tp: p.tp,
        pp: p.pp,
        gpus_per_node: p.gpus_per_node,
        engine_args: p.engine_args.clone(),
        env,
        paths: Default::default(),
        ulimits: flags.ulimits.clone(),
        gpus: flags.gpus,
        ready_timeout_s: if flags.timeout != crate::workload::serve::DEFAULT_READY_TIMEOUT_S {
            flags.timeout
        } else {
            p.ready_timeout_s.unwrap_or(flags.timeout)
        },
        stage_model: !flags.no_stage,
    };
    Ok(Some(match engine {
        crate::workload::serve::Engine::Vllm => ServeRequest::Vllm(VllmOptions {
            serve,
            mode: if p.ray {
                VllmMode::Ray {
                    ray_port: p.ports.ray.unwrap_or(vllm::DEFAULT_RAY_PORT),
                }
            } else {
                VllmMode::Native {
                    master_port: p.ports.rendezvous.unwrap_or(vllm::DEFAULT_MASTER_PORT),
                }
            },
        }),
        crate::workload::serve::Engine::Trtllm => {
            let t = p.trtllm.clone().unwrap_or_default();
            let mut llm_api = LlmApiOptions::default();
            if let Some(f) = t.kv_cache_fraction {
                llm_api.kv_cache_free_gpu_memory_fraction = f;
            }
            if let Some(c) = t.cuda_graph_padding {
                llm_api.cuda_graph_padding = c;
            }
            if let Some(d) = t.disable_overlap_scheduler {
                llm_api.disable_overlap_scheduler = d;
            }
            llm_api.extra = t.options.clone();
            ServeRequest::Trtllm(TrtllmOptions {
                serve,
                ssh_port: p.ports.ssh.unwrap_or(trtllm::DEFAULT_SSH_PORT),
                llm_api,
                max_batch_size: t.max_batch_size,
                max_num_tokens: t.max_num_tokens,
            })
        }
    }))
}

pub async fn up(args: UpArgs, ctx: &Context) -> CmdResult {
    let dir = args
        .profiles_dir
        .clone()
        .unwrap_or_else(default_profiles_dir);
    let loaded = find(&args.profile, &dir, &args.sets)?;
    tracing::info!("profile {} from {}", loaded.profile.name, loaded.file);
    // The profile's shape holds: its gpus_per_node, not the drivers' count.
    let mut flags = args.launch.clone();
    flags.gpus_per_node = Some(loaded.profile.gpus_per_node);
    match request(&loaded.profile, &flags)? {
        Some(req) => cmd_serve::launch(req, &flags, ctx).await,
        None => super::cmd_nccl::test(nccl_args(&loaded.profile, &args.launch)?, ctx).await,
    }
}

/// `nccl-test`'s arguments for an nccl-test profile, with the launch flags on top.
fn nccl_args(p: &Profile, flags: &LaunchFlags) -> Result<super::cmd_nccl::TestArgs, CmdError> {
    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        args: super::cmd_nccl::TestArgs,
    }
    let mut argv: Vec<String> = vec!["nccl-test".into()];
    if let Some(n) = &p.nccl_test {
        if !n.ops.is_empty() {
            argv.push(format!("--op={}", n.ops.join(",")));
        }
        if let Some(b) = &n.min_bytes {
            argv.push(format!("--min-bytes={b}"));
        }
        if let Some(e) = &n.max_bytes {
            argv.push(format!("--max-bytes={e}"));
        }
        if let Some(i) = n.iters {
            argv.push(format!("--iters={i}"));
        }
    }
    if let Some(image) = &p.image {
        argv.push(format!("--image={image}"));
    }
    argv.push(format!("--gpus-per-node={}", p.gpus_per_node));
    for (k, v) in &p.env {
        argv.push(format!("--env={k}={v}"));
    }
    let mut args = <Wrap as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("profile {}: {e}", p.name))
        .invalid()?
        .args;
    args.target = flags.target.clone();
    args.job = match &flags.job {
        Some(j) => j.clone(),
        None => crate::plan::JobName::new(p.name.clone()).invalid()?,
    };
    for e in &flags.env {
        args.env.push((e.key.clone(), e.value.clone()));
    }
    args.launch.dry_run = flags.dry_run;
    args.launch.keep = flags.keep_on_failure;
    args.launch.gpus = flags.gpus;
    args.launch.ulimits = flags.ulimits.clone();
    Ok(args)
}

#[derive(serde::Serialize)]
struct Row<'a> {
    name: &'a str,
    engine: ProfileEngine,
    model: Option<ModelSource>,
    tp: u32,
    pp: u32,
    nodes: u32,
    memory_gib: Option<f64>,
    description: &'a str,
    origin: &'a Origin,
    file: &'a str,
    fit: Option<Fit>,
}

pub async fn list(args: ListArgs, ctx: &Context) -> CmdResult {
    let dir = args
        .profiles_dir
        .clone()
        .unwrap_or_else(default_profiles_dir);
    let (user, errors) = user_profiles(&dir);
    for e in &errors {
        ctx.reporter.warn(e);
    }
    let all = profile::catalogue(user);
    // Fit: against the nodes given, or the cluster file when there is one.
    let check = args.target.uses_snapshots()
        || args.target.uses_hosts()
        || !args.target.nodes.is_empty()
        || ctx.cluster_file.is_file();
    let caps = if check {
        match resolve(&args.target, ctx).await {
            Ok(cluster) => {
                let caps: Vec<_> = cluster.nodes.iter().map(capacity).collect();
                if let Some(pool) = cluster.pool {
                    pool.close().await;
                }
                Some(caps)
            }
            Err(e) => {
                ctx.reporter.warn(&format!(
                    "cannot check which profiles fit this cluster: {}",
                    e.error
                ));
                None
            }
        }
    } else {
        None
    };
    let rows: Vec<Row> = all
        .iter()
        .map(|l| Row {
            name: &l.profile.name,
            engine: l.profile.engine,
            model: l.profile.model_source(),
            tp: l.profile.tp,
            pp: l.profile.pp,
            nodes: l.profile.nodes,
            memory_gib: l.profile.memory_gib,
            description: &l.profile.description,
            origin: &l.origin,
            file: &l.file,
            fit: caps.as_ref().map(|c| fit(&l.profile, c)),
        })
        .collect();
    if ctx.json {
        print_json(&rows)?;
        return Ok(if errors.is_empty() {
            Outcome::Success
        } else {
            Outcome::Failed
        });
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "profile",
        "engine",
        "model",
        "tp×pp",
        "nodes",
        "memory/node",
        "fits",
        "description",
    ]);
    for r in &rows {
        t.add_row(vec![
            format!(
                "{}{}",
                r.name,
                if *r.origin == Origin::User {
                    " (yours)"
                } else {
                    ""
                }
            ),
            r.engine.to_string(),
            r.model
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_else(|| "-".into()),
            if r.engine == ProfileEngine::NcclTest {
                "-".into()
            } else {
                format!("{}×{}", r.tp, r.pp)
            },
            r.nodes.to_string(),
            r.memory_gib
                .map(|m| format!("{m:.0} GiB"))
                .unwrap_or_else(|| "-".into()),
            r.fit
                .as_ref()
                .map(|f| f.label())
                .unwrap_or_else(|| "?".into()),
            r.description.to_string(),
        ]);
    }
    let mut out = t.to_string();
    if caps.is_none() {
        out.push_str(
            "\n(fits: ? — give --snapshot NAME=DIR per node, or a cluster file, to check node count and memory)",
        );
    }
    out.push_str(&format!(
        "\nyour profiles: {} (run one: spark-launch up NAME)",
        dir.display()
    ));
    print_out(&out);
    Ok(if errors.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}
