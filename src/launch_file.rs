//! Launch files: a launch profile (bundled or the user's), an eugr recipe (v1) and a sparkrun
//! recipe (v2) are three formats of one kind of file, read here into the same partial request
//! the flags produce (`workload::partial`), and laid under those flags by the one merge. `up`,
//! `compose`, `export k8s` and `bench` read a launch file through [`read`] and make its launch
//! with [`request`]; the formats' own readers (`profile`, `recipe`) decide what their fields
//! mean. Reads files (through `profile::files` and `recipe::loader`); decides nothing itself.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::profile::files::{FindError, find};
use crate::profile::request::RequestError;
use crate::profile::{Loaded, SetArg};
use crate::recipe::RecipeInput;
use crate::recipe::loader::{self, RecipeLoadError};
use crate::recipe::registry::RegistryDir;
use crate::workload::launch::{LaunchRequest, NcclTestRequest};
use crate::workload::nccl_test::NcclTestOptions;
use crate::workload::partial::{self, LaunchAsk, LayerError, PartialServe};
use crate::workload::run::ContainerOverrides;

/// Where a launch file is looked up, and what its readers take besides the file.
#[derive(Clone, Debug, Default)]
pub struct FileSource {
    /// The user's profiles folder.
    pub profiles_dir: PathBuf,
    /// The recipe registries given (`--registry DIR`, repeatable) and kept (`spark-launch
    /// registry add`), in that order: a bare name is one of their recipes.
    pub registries: Vec<RegistryDir>,
    /// Registries were given on the command line: a name is a recipe's, never a profile's.
    pub registry_given: bool,
    /// `--set KEY=VALUE`: a profile's field, or a key of a recipe's `defaults`, changed before
    /// the file is checked.
    pub sets: Vec<SetArg>,
    /// The user's environment, for `$VAR` in a recipe's `env`.
    pub user_env: BTreeMap<String, String>,
    /// `--gpus-per-node`, which a recipe's shape is read with.
    pub gpus_per_node: Option<u32>,
    /// The nodes the launch is planned on, when the selection names them before any is
    /// reached: a v1 recipe on one node runs solo, as eugr's runner runs it.
    pub nodes: Option<u32>,
}

/// One launch file, read.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchFile {
    /// The profile's or the recipe's name.
    pub name: String,
    /// Where it was read from (`launch-profiles/x.yaml`, a path).
    pub file: String,
    /// The profile, when the file is one (its expectations, its fit).
    pub profile: Option<Box<Loaded>>,
    pub ask: LaunchAsk,
}

/// Why a launch file could not be read or launched (all the user's to fix: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum LaunchFileError {
    #[error(transparent)]
    Profile(#[from] FindError),
    #[error(transparent)]
    ProfileRequest(#[from] RequestError),
    #[error(transparent)]
    Recipe(#[from] RecipeLoadError),
    #[error(transparent)]
    Layer(#[from] LayerError),
}

/// Reads `name`: a recipe (a recipe file, or any name when a registry is given), else a launch
/// profile (a path, or a name among the user's and the bundled ones). `flags` are what will be
/// laid over the file: a profile checks its shape as a whole (`tp × pp = nodes ×
/// gpus_per_node`), so the shape flags are checked with it, as its last `--set`.
pub fn read(
    name: &str,
    src: &FileSource,
    flags: &PartialServe,
) -> Result<LaunchFile, LaunchFileError> {
    // `@NAME/recipe` is sparkrun's name of a recipe in a registry.
    if src.registry_given || name.starts_with('@') || loader::is_recipe_file(name) {
        return read_recipe(name, src, flags);
    }
    let mut sets = src.sets.clone();
    sets.extend(shape_sets(flags));
    let loaded = match find(name, &src.profiles_dir, &sets) {
        Ok(l) => l,
        // A name no profile has is a recipe's while registries are kept.
        Err(FindError::Unknown { .. }) if !src.registries.is_empty() => {
            return read_recipe(name, src, flags);
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!("profile {} from {}", loaded.profile.name, loaded.file);
    let ask = loaded.profile.ask(&loaded.file)?;
    Ok(LaunchFile {
        name: loaded.profile.name.clone(),
        file: loaded.file.clone(),
        profile: Some(Box::new(loaded)),
        ask,
    })
}

/// A recipe by path or by name in the registries; `--ray` among the flags keeps the Ray of a
/// recipe whose runner drops it without (eugr's).
fn read_recipe(
    name: &str,
    src: &FileSource,
    flags: &PartialServe,
) -> Result<LaunchFile, LaunchFileError> {
    let input = RecipeInput {
        sets: src.sets.clone(),
        user_env: src.user_env.clone(),
        gpus_per_node: src.gpus_per_node.unwrap_or(1),
        ray: flags.tuning.ray,
        nodes: src.nodes,
    };
    let ask = loader::load_ask(name, &src.registries, &input)?;
    let (name, file) = match &ask.recipe {
        Some(r) => (r.name.clone(), r.file.clone()),
        None => (name.to_string(), name.to_string()),
    };
    Ok(LaunchFile {
        name,
        file,
        profile: None,
        ask: LaunchAsk::Serve(Box::new(ask)),
    })
}

/// The shape flags (`--tp`, `--pp`) as a profile's fields.
fn shape_sets(flags: &PartialServe) -> Vec<SetArg> {
    let fields = [
        flags.tp.as_ref().map(|t| format!("tp={}", t.value)),
        flags.pp.as_ref().map(|p| format!("pp={}", p.value)),
    ];
    fields
        .into_iter()
        .flatten()
        .filter_map(|f| f.parse::<SetArg>().ok())
        .collect()
}

/// The launch `file` asks for with `flags` over it: one merge for every format.
pub fn request(file: LaunchFile, flags: PartialServe) -> Result<LaunchRequest, LaunchFileError> {
    let mut flags = flags;
    match file.ask {
        LaunchAsk::Serve(ask) => {
            if file.profile.is_some() && flags.keep_recipe_env.take().is_some() {
                flags
                    .warnings
                    .push("--recipe-env applies to recipes; this is a launch profile".to_string());
            }
            Ok(LaunchRequest::Serve(Box::new(partial::layer(*ask, flags)?)))
        }
        LaunchAsk::NcclTest {
            options,
            gpus_per_node,
        } => Ok(nccl_test(*options, gpus_per_node, flags)),
    }
}

/// An nccl-test profile's options with the flags that reach nccl-tests over them: the job's
/// name, the environment, TCP, the container's limits and GPUs.
fn nccl_test(
    mut options: NcclTestOptions,
    gpus_per_node: u32,
    flags: PartialServe,
) -> LaunchRequest {
    if let Some(job) = flags.job {
        options.job = job.value;
    }
    options.extra_env.extend(flags.env);
    options.allow_tcp = flags.allow_tcp.is_some();
    LaunchRequest::NcclTest(NcclTestRequest {
        options,
        gpus_per_node: Some(gpus_per_node),
        overrides: ContainerOverrides {
            ulimits: flags.ulimits,
            gpus: flags.gpus,
        },
        allow_old_nccl: flags.allow_old_nccl.is_some(),
    })
}
