//! `spark-launch up` and `profiles`: launch profiles — bundled in the binary, or YAML files in
//! the user's folder — and community recipes (a recipe file, or a name in `--registry DIR`)
//! run with one command, or listed with whether this cluster can run them. Flags and
//! rendering: a launch file of any format is read by `launch_file::read` and laid under the
//! flags by `launch_file::request` (the one merge), then launched by `cli::launch::run`.

use std::path::PathBuf;

use super::args::NodeFlags;
use super::cmd_serve::{RayFlag, ServeFlags};
use super::{CmdError, CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::launch_file::{self, FileSource, LaunchFile};
use crate::profile::files::{FindError, find, user_profiles};
use crate::profile::{self, Loaded, SetArg};
use crate::recipe::loader;
use crate::recipe::registry::RegistryDir;
use crate::recipe::{self, RecipeInput};
use crate::registries as kept;
use crate::resolve::{self, Needs, Purpose};
use crate::workload::launch::LaunchRequest;
use crate::workload::limits;
use crate::workload::partial::{Given, PartialServe};

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// A profile name (`spark-launch profiles` lists them) or a path to a profile file; a
    /// path to a community recipe (eugr v1, sparkrun v2); a recipe's name with --registry.
    pub profile: String,

    /// Change a field before validation (repeat): tp=4, model.revision=v2, env.NCCL_DEBUG=INFO;
    /// for a recipe, one key of its `defaults`: max_model_len=65536.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<SetArg>,

    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    /// A local clone of a recipe registry (spark-arena/recipe-registry, eugr/spark-vllm-docker),
    /// searched before the kept ones (`spark-launch registry add`); repeat for more: run the
    /// recipe named NAME (or @REGISTRY/NAME) from them.
    #[arg(long, value_name = "DIR")]
    pub registry: Vec<PathBuf>,

    /// Keep a recipe's values of the variables spark-launch derives per node (NCCL_IB_HCA,
    /// NCCL_SOCKET_IFNAME, MASTER_ADDR, …) instead of the derived ones.
    #[arg(long)]
    pub recipe_env: bool,

    /// Tensor-parallel size, over the profile's or the recipe's.
    #[arg(long, value_parser = limits::parse_tp)]
    pub tp: Option<u32>,

    /// The API port on the head, over the profile's or the recipe's.
    #[arg(long, value_parser = limits::parse_port)]
    pub port: Option<u16>,

    /// The container image, over the profile's or the recipe's.
    #[arg(long)]
    pub image: Option<String>,

    #[command(flatten)]
    pub ray: RayFlag,

    #[command(flatten)]
    pub serve: ServeFlags,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Your profiles folder [default: $XDG_CONFIG_HOME/spark-launch/profiles].
    #[arg(long, value_name = "DIR", env = "SPARK_LAUNCH_PROFILES")]
    pub profiles_dir: Option<PathBuf>,

    /// List the recipes of this local clone of a recipe registry (repeat for more) beside the
    /// kept ones, instead of the launch profiles.
    #[arg(long, value_name = "DIR")]
    pub registry: Vec<PathBuf>,

    /// List the recipes of every kept registry (`spark-launch registry list`) instead of the
    /// launch profiles.
    #[arg(long)]
    pub recipes: bool,

    /// Check fit against these nodes; without any, against the cluster file when it exists.
    #[command(flatten)]
    pub target: NodeFlags,
}

/// `$XDG_CONFIG_HOME/spark-launch/profiles`.
pub fn default_profiles_dir() -> PathBuf {
    super::default_cluster_file()
        .parent()
        .map(|p| p.join("profiles"))
        .unwrap_or_else(|| PathBuf::from("profiles"))
}

/// Finds a profile; a missing or invalid one is the user's to fix (exit 2).
pub fn load(name: &str, dir: Option<&PathBuf>, sets: &[SetArg]) -> Result<Loaded, CmdError> {
    let dir = dir.cloned().unwrap_or_else(default_profiles_dir);
    match find(name, &dir, sets) {
        Ok(l) => Ok(l),
        Err(e @ FindError::Read { .. }) | Err(e @ FindError::Unknown { .. }) => Err(e).invalid(),
        Err(FindError::Invalid(e)) => Err(e).invalid(),
    }
}

pub async fn up(args: UpArgs, ctx: &Context) -> CmdResult {
    let request = request(&args, ctx)?;
    super::launch::run(args.serve.launch(request, ctx), Default::default(), ctx).await
}

impl UpArgs {
    /// Where the launch file is looked up and what its readers take (the nodes it is planned
    /// on, when the selection names them: a v1 recipe on one node runs solo).
    pub fn source(&self, ctx: &Context) -> FileSource {
        FileSource {
            profiles_dir: self
                .profiles_dir
                .clone()
                .unwrap_or_else(default_profiles_dir),
            registries: registries(&self.registry),
            registry_given: !self.registry.is_empty(),
            sets: self.sets.clone(),
            user_env: std::env::vars().collect(),
            gpus_per_node: self.serve.gpus_per_node,
            nodes: named_nodes(&self.serve.target, ctx),
        }
    }

    /// What the flags beside the launch file ask for.
    pub fn ask(&self) -> PartialServe {
        let mut ask = PartialServe {
            tp: Given::flag_opt(self.tp, "--tp"),
            port: Given::flag_opt(self.port, "--port"),
            image: Given::flag_opt(self.image.clone(), "--image"),
            ..self.serve.ask()
        };
        ask.keep_recipe_env = Given::flag_opt(self.recipe_env.then_some(true), "--recipe-env");
        ask.tuning.ray = self.ray.ray;
        ask
    }
}

/// The launch `up`'s arguments name: the launch file (a profile, a recipe file, a recipe's
/// name in `--registry`) with the flags over it, through the one merge.
pub(super) fn request(args: &UpArgs, ctx: &Context) -> Result<LaunchRequest, CmdError> {
    let flags = args.ask();
    let file = read_file(&args.profile, &args.source(ctx), &flags)?;
    launch_file::request(file, flags).invalid()
}

/// Reads a launch file; a missing or invalid one is the user's to fix (exit 2).
pub(super) fn read_file(
    name: &str,
    src: &FileSource,
    flags: &PartialServe,
) -> Result<LaunchFile, CmdError> {
    launch_file::read(name, src, flags).invalid()
}

/// How many nodes the flags (or the cluster file) name, before any is reached.
pub(super) fn named_nodes(target: &NodeFlags, ctx: &Context) -> Option<u32> {
    target
        .selection(ctx)
        .named_count()
        .and_then(|n| u32::try_from(n).ok())
}

/// The nodes given (or the cluster file's), to check fit against; `None` without nodes or
/// when they cannot be read (said).
async fn cluster_caps(target: &NodeFlags, ctx: &Context) -> Option<Vec<crate::derive::NodeInput>> {
    let check = target.uses_snapshots()
        || !target.hosts.is_empty()
        || !target.nodes.is_empty()
        || ctx.cluster_file.is_file();
    if !check {
        return None;
    }
    let selection = target.selection(ctx);
    match resolve::inputs(&selection, Needs::facts(Purpose::Plan), &ctx.reporter).await {
        Ok(nodes) => Some(nodes),
        Err(e) => {
            ctx.reporter
                .warn(&format!("cannot check what fits this cluster: {e}"));
            None
        }
    }
}

/// The registries a command reads: those given (`--registry DIR`, in order), then the kept
/// ones (a kept list that cannot be read is said, and skipped).
pub(super) fn registries(given: &[PathBuf]) -> Vec<RegistryDir> {
    let mut dirs: Vec<RegistryDir> = given.iter().cloned().map(RegistryDir::given).collect();
    match kept::read(&super::cmd_registry::kept_file()) {
        Ok(k) => dirs.extend(k.iter().map(|k| k.dir())),
        Err(e) => tracing::warn!("kept registries not read: {e}"),
    }
    dirs
}

/// `profiles --recipes` or `--registry DIR`: every recipe of the registries given and kept, with
/// what it runs and whether this cluster (and this version) can run it.
async fn list_recipes(args: &ListArgs, ctx: &Context) -> CmdResult {
    let caps = cluster_caps(&args.target, ctx).await;
    let input = RecipeInput {
        user_env: std::env::vars().collect(),
        gpus_per_node: 1,
        // A v1 recipe on a one-node cluster is read as it runs there: solo.
        nodes: caps.as_ref().and_then(|c| u32::try_from(c.len()).ok()),
        ..RecipeInput::default()
    };
    let entries = loader::list(&registries(&args.registry), &input).invalid()?;
    let rows = recipe::listing::rows(&entries, caps.as_ref().map(Vec::len));
    if ctx.json {
        print_json(&rows)?;
    } else {
        let how: String = args
            .registry
            .iter()
            .map(|d| format!(" --registry {}", d.display()))
            .collect();
        print_out(&recipe::listing::table(&rows, caps.is_some(), &how));
    }
    Ok(Outcome::Success)
}

pub async fn list(args: ListArgs, ctx: &Context) -> CmdResult {
    if args.recipes || !args.registry.is_empty() {
        return list_recipes(&args, ctx).await;
    }
    let dir = args
        .profiles_dir
        .clone()
        .unwrap_or_else(default_profiles_dir);
    let (user, errors) = user_profiles(&dir);
    for e in &errors {
        ctx.reporter.warn(&e.to_string());
    }
    let all = profile::catalogue(user);
    // Fit: against the nodes given, or the cluster file when there is one.
    let caps = cluster_caps(&args.target, ctx).await;
    // The models whose files are on this machine (a folder, the Hugging Face cache): their
    // memory plans; nothing is fetched.
    let footprints = match &caps {
        Some(_) => crate::staging::shape::footprints_here(
            all.iter().filter_map(|l| l.profile.model_source()),
        ),
        None => Default::default(),
    };
    let rows = profile::listing::rows(&all, caps.as_deref(), &footprints);
    if ctx.json {
        print_json(&rows)?;
    } else {
        print_out(&profile::listing::table(&rows, caps.is_some(), &dir));
    }
    Ok(if errors.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}
