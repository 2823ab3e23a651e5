//! The one input layer of serving: a launch asked for as a [`PartialServe`] — every field
//! optional, each value with where it came from — and the one function, [`layer`], that lays
//! the engine's defaults, a launch file's fields (a profile, a recipe: `--set` already applied
//! by their readers) and the flags over each other into the [`ServeRequest`] that is planned.
//!
//! The flags of `vllm`/`trtllm`/`sglang`, of `up`, `compose` and `export k8s`, and every launch
//! file format produce a `PartialServe`; none of them writes a `ServeOptions` itself, so a
//! serving option is added once, here and where it is read. Where a flag replaces a file's
//! different value, a warning names both. A recipe's final tensor- and pipeline-parallel sizes
//! go into its line here when its engine writes them there itself (llama.cpp's
//! `--split-mode`: `ServingEngine::recipe_parallel`), said among the recipe's warnings. Pure.

use std::collections::BTreeMap;
use std::fmt;

use super::endpoint::{ApiKeyAsk, Bind};
use super::engines::{EngineKind, EngineOptions};
use super::launch::ServeRequest;
use super::memory::MemoryAsk;
use super::nccl_lib::NcclFrom;
use super::recipe_part::RecipePart;
use super::serve::ServeOptions;
use crate::model::ModelSource;
use crate::plan::JobName;
use crate::plan::spec::{Gpus, Ulimit};

/// Where a value came from, for the messages that name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A field of a launch file: `file` is its label (a path, `launch-profiles/x.yaml`), `what`
    /// reads in a sentence (`the recipe's --port`, `the profile's tp`).
    File { file: String, what: String },
    /// A flag as typed (`--tp`).
    Flag(&'static str),
}

impl Origin {
    /// A launch file's field.
    pub fn file(file: &str, what: impl Into<String>) -> Origin {
        Origin::File {
            file: file.to_string(),
            what: what.into(),
        }
    }
}

/// A value and where it came from; `notes` are said only when this value is the one used (a
/// recipe's key taken from its command says so, unless a flag replaces it).
#[derive(Clone, Debug, PartialEq)]
pub struct Given<T> {
    pub value: T,
    pub from: Origin,
    pub notes: Vec<String>,
}

impl<T> Given<T> {
    pub fn new(value: T, from: Origin) -> Self {
        Given {
            value,
            from,
            notes: Vec::new(),
        }
    }

    /// A flag's value.
    pub fn flag(value: T, flag: &'static str) -> Self {
        Given::new(value, Origin::Flag(flag))
    }

    /// A flag's value when the flag was given.
    pub fn flag_opt(value: Option<T>, flag: &'static str) -> Option<Self> {
        value.map(|v| Given::flag(v, flag))
    }

    /// A file's field.
    pub fn file(value: T, file: &str, what: impl Into<String>) -> Self {
        Given::new(value, Origin::file(file, what))
    }
}

/// A flag that is on or off (`--no-stage`): off is "not given", never a value that replaces a
/// file's.
fn switch(on: bool, flag: &'static str) -> Option<Given<bool>> {
    on.then(|| Given::flag(true, flag))
}

/// How many nodes a launch file allows (a recipe's `min_nodes`/`max_nodes`): a flag that sizes
/// the job outside them is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeBounds {
    pub min: u32,
    pub max: Option<u32>,
}

/// A serving launch as one source asks for it: every field optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartialServe {
    pub engine: Option<Given<EngineKind>>,
    pub model: Option<Given<ModelSource>>,
    pub job: Option<Given<JobName>>,
    pub image: Option<Given<String>>,
    /// The API port on the head.
    pub port: Option<Given<u16>>,
    pub tp: Option<Given<u32>>,
    pub pp: Option<Given<u32>>,
    pub gpus_per_node: Option<Given<u32>>,
    pub ready_timeout_s: Option<Given<u64>>,
    /// Passed to the engine verbatim.
    pub engine_args: Option<Given<Vec<String>>>,
    /// Set in every container, key by key over the lower layer's.
    pub env: BTreeMap<String, String>,
    pub ulimits: Vec<Ulimit>,
    pub gpus: Option<Gpus>,
    pub no_stage: Option<Given<bool>>,
    pub no_check: Option<Given<bool>>,
    pub allow_tcp: Option<Given<bool>>,
    pub allow_old_nccl: Option<Given<bool>>,
    pub allow_overcommit: Option<Given<bool>>,
    pub bind: Option<Given<Bind>>,
    /// The cap on every container, in bytes.
    pub memory_limit: Option<Given<u64>>,
    pub api_key: Option<Given<ApiKeyAsk>>,
    pub nccl_from: Option<Given<NcclFrom>>,
    pub hf_home: Option<Given<String>>,
    /// Containers, or plain processes on each node (`--runtime host`).
    pub runtime: Option<Given<crate::plan::RuntimeKind>>,
    /// Serve on exactly this many nodes (an engine that spreads layers over the nodes it is
    /// given: llama.cpp's RPC servers).
    pub nodes: Option<Given<usize>>,
    /// What the engine takes beyond the shared options, field by field over the lower layer's.
    pub tuning: EngineOptions,
    /// A community recipe's part: its per-node environment, mods, served name.
    pub recipe: Option<Box<RecipePart>>,
    /// `--recipe-env`: a recipe's value of a derived variable wins.
    pub keep_recipe_env: Option<Given<bool>>,
    /// The nodes the launch file allows.
    pub node_bounds: Option<NodeBounds>,
    /// What reading the source had to say (a recipe's dropped flags, …).
    pub warnings: Vec<String>,
}

/// What a launch file asks for: a serving launch, or an nccl-test's options (a profile that
/// runs nccl-tests).
#[derive(Clone, Debug, PartialEq)]
pub enum LaunchAsk {
    Serve(Box<PartialServe>),
    NcclTest {
        options: Box<super::nccl_test::NcclTestOptions>,
        gpus_per_node: u32,
    },
}

/// The switches every serving launch takes, as flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    pub no_stage: bool,
    pub no_check: bool,
    pub allow_tcp: bool,
    pub allow_old_nccl: bool,
    pub allow_overcommit: bool,
    pub keep_recipe_env: bool,
}

impl PartialServe {
    /// Sets the on/off flags that were given.
    pub fn with_switches(mut self, s: Switches) -> Self {
        self.no_stage = switch(s.no_stage, "--no-stage");
        self.no_check = switch(s.no_check, "--no-check");
        self.allow_tcp = switch(s.allow_tcp, "--allow-tcp");
        self.allow_old_nccl = switch(s.allow_old_nccl, "--allow-old-nccl");
        self.allow_overcommit = switch(s.allow_overcommit, "--allow-overcommit");
        self.keep_recipe_env = switch(s.keep_recipe_env, "--recipe-env");
        self
    }
}

/// Why the layers cannot make a launch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    #[error("no engine: name one (a subcommand, or the launch file's engine)")]
    NoEngine,
    #[error("no model: name one (the command's MODEL, or the launch file's model)")]
    NoModel,
    /// A flag sizes the job outside the nodes the file allows.
    #[error("{file}: {field}: {problem}; {fix}")]
    Bounds {
        file: String,
        field: &'static str,
        problem: String,
        fix: &'static str,
    },
    /// The engine cannot take a recipe's tensor- and pipeline-parallel sizes together.
    #[error("{file}: {problem}; {fix}")]
    Parallel {
        file: String,
        problem: String,
        fix: String,
    },
}

/// The value of the top layer where it has one, else the lower's; a warning names both where a
/// flag replaces a file's different value. `show` writes a value into the warning (`None`:
/// never shown, a secret).
struct Layering {
    warnings: Vec<String>,
}

impl Layering {
    fn pick<T: PartialEq>(
        &mut self,
        low: Option<Given<T>>,
        top: Option<Given<T>>,
        show: impl Fn(&T) -> Option<String>,
    ) -> Option<T> {
        let chosen = match (low, top) {
            (Some(low), Some(top)) => {
                if let (Origin::File { file, what }, Origin::Flag(flag)) = (&low.from, &top.from)
                    && low.value != top.value
                {
                    self.warnings
                        .push(match (show(&top.value), show(&low.value)) {
                            (Some(new), Some(old)) => {
                                format!("{file}: {flag} {new} replaces {what} {old}")
                            }
                            _ => format!("{file}: {flag} replaces {what}"),
                        });
                }
                top
            }
            (low, top) => top.or(low)?,
        };
        self.warnings.extend(chosen.notes);
        Some(chosen.value)
    }
}

fn shown<T: fmt::Display>(v: &T) -> Option<String> {
    Some(v.to_string())
}

fn hidden<T>(_: &T) -> Option<String> {
    None
}

/// The serving launch `flags` ask for over `file` (a launch file's fields, when there is one),
/// over the engine's defaults. Where a value of the request came from decides nothing here
/// beyond the warnings: the highest layer that gives a field wins.
pub fn layer(file: PartialServe, flags: PartialServe) -> Result<ServeRequest, LayerError> {
    let mut l = Layering {
        warnings: file.warnings,
    };
    l.warnings.extend(flags.warnings);
    let engine = l
        .pick(file.engine, flags.engine, shown)
        .ok_or(LayerError::NoEngine)?;
    let model = l
        .pick(file.model, flags.model, shown)
        .ok_or(LayerError::NoModel)?;
    if flags.tuning.ray && !engine.engine().ray() {
        l.warnings.push(format!(
            "--ray is not used: {} runs no Ray",
            engine.engine().title()
        ));
    }
    // A job named by `--job` over a file's name is what the flag is for: no warning.
    let job = flags
        .job
        .or(file.job)
        .map(|j| j.value)
        .unwrap_or_else(|| JobName::of_model(engine.as_str(), &model));
    // The engine's defaults, then each field from the highest layer that gives it.
    let mut serve = ServeOptions::new(engine, job, model);
    if let Some(image) = l.pick(file.image, flags.image, shown) {
        serve.image = image;
    }
    if let Some(port) = l.pick(file.port, flags.port, shown) {
        serve.port = port;
    }
    let flag_tp = flags.tp.as_ref().map(|t| t.value);
    if let Some(tp) = l.pick(file.tp, flags.tp, shown) {
        serve.tp = tp;
    }
    if let Some(pp) = l.pick(file.pp, flags.pp, shown) {
        serve.pp = pp;
    }
    let gpus_per_node_given = file.gpus_per_node.is_some() || flags.gpus_per_node.is_some();
    if let Some(g) = l.pick(file.gpus_per_node, flags.gpus_per_node, shown) {
        serve.gpus_per_node = g;
    }
    if let Some(r) = l.pick(
        file.runtime,
        flags.runtime,
        |r: &crate::plan::RuntimeKind| Some(format!("{r:?}").to_lowercase()),
    ) {
        serve.runtime = r;
    }
    serve.nodes = l.pick(file.nodes, flags.nodes, shown);
    if let Some(t) = l.pick(file.ready_timeout_s, flags.ready_timeout_s, shown) {
        serve.ready_timeout_s = t;
    }
    if let Some(args) = l.pick(file.engine_args, flags.engine_args, |a: &Vec<String>| {
        Some(format!("{a:?}"))
    }) {
        serve.engine_args = args;
    }
    serve.env = file.env;
    serve.env.extend(flags.env);
    serve.ulimits = if flags.ulimits.is_empty() {
        file.ulimits
    } else {
        flags.ulimits
    };
    serve.gpus = flags.gpus.or(file.gpus);
    let on = |l: &mut Layering, low, top| l.pick(low, top, shown).unwrap_or(false);
    serve.stage_model = !on(&mut l, file.no_stage, flags.no_stage);
    serve.check_answers = !on(&mut l, file.no_check, flags.no_check);
    serve.allow_tcp = on(&mut l, file.allow_tcp, flags.allow_tcp);
    let allow_old_nccl = on(&mut l, file.allow_old_nccl, flags.allow_old_nccl);
    let keep_env = on(&mut l, file.keep_recipe_env, flags.keep_recipe_env);
    if let Some(bind) = l.pick(file.bind, flags.bind, shown) {
        serve.bind = bind;
    }
    serve.memory = MemoryAsk {
        limit: l.pick(file.memory_limit, flags.memory_limit, |b: &u64| {
            Some(format!("{:.1} GiB", *b as f64 / f64::from(1u32 << 30)))
        }),
        allow_overcommit: on(&mut l, file.allow_overcommit, flags.allow_overcommit),
    };
    let api_key = l.pick(file.api_key, flags.api_key, hidden);
    let nccl_from = l.pick(file.nccl_from, flags.nccl_from, shown);
    let hf_home = l.pick(file.hf_home, flags.hf_home, shown);
    let mut flag_tuning = flags.tuning;
    if flag_tuning.ray && file.recipe.as_deref().is_some_and(|r| r.solo) {
        flag_tuning.ray = false;
        l.warnings.push(
            "--ray is not used: the recipe runs solo (one node), and eugr's runner ignores --ray in solo mode"
                .to_string(),
        );
    }
    let tuning = file.tuning.under(flag_tuning);
    if let (Some(tp), Some(bounds), Some(recipe)) = (flag_tp, file.node_bounds, &file.recipe) {
        bounds_check(tp, &serve, engine, &tuning, bounds, &recipe.file)?;
    }
    // A recipe's sizes, where the engine writes them into the recipe's line itself
    // (llama.cpp's `--split-mode`): the final tp and pp, the flags' included.
    if let Some(recipe) = &file.recipe {
        let gpus = serve.tp.saturating_mul(serve.pp).max(1);
        let nodes = gpus.div_ceil(serve.gpus_per_node.max(1));
        match engine
            .engine()
            .recipe_parallel(serve.tp, serve.pp, nodes, &serve.engine_args)
        {
            Ok(Some(p)) => {
                serve.engine_args = p.args;
                l.warnings.push(format!("{}: {}", recipe.file, p.said));
            }
            Ok(None) => {}
            Err(p) => {
                return Err(LayerError::Parallel {
                    file: recipe.file.clone(),
                    problem: p.what,
                    fix: p.fix,
                });
            }
        }
    }
    let recipe = file.recipe.map(|mut part| {
        part.keep_env = keep_env;
        part.warnings.append(&mut l.warnings);
        part
    });
    Ok(ServeRequest {
        engine,
        serve,
        tuning,
        gpus_per_node_given,
        hf_home,
        nccl_from,
        allow_old_nccl,
        api_key,
        recipe,
        warnings: l.warnings,
    })
}

/// A `--tp` that fills fewer or more nodes than the launch file allows is refused.
fn bounds_check(
    tp: u32,
    serve: &ServeOptions,
    engine: EngineKind,
    tuning: &EngineOptions,
    b: NodeBounds,
    file: &str,
) -> Result<(), LayerError> {
    // The GPUs the engine spans with this tp (its own refusal of the shape comes at planning).
    let gpus = serve.gpus_per_node.max(1);
    let world = engine
        .engine()
        .world(tp, serve.pp, gpus, tuning)
        .unwrap_or(u64::from(tp) * u64::from(serve.pp));
    let nodes = world.div_ceil(u64::from(gpus));
    if nodes < u64::from(b.min) {
        return Err(LayerError::Bounds {
            file: file.to_string(),
            field: "min_nodes",
            problem: format!(
                "--tp {tp} fills {nodes} node(s) but the recipe runs on at least {}",
                b.min
            ),
            fix: "give a --tp that fills the recipe's nodes",
        });
    }
    if let Some(max) = b.max.filter(|m| nodes > u64::from(*m)) {
        return Err(LayerError::Bounds {
            file: file.to_string(),
            field: "max_nodes",
            problem: format!("--tp {tp} fills {nodes} nodes but the recipe runs on at most {max}"),
            fix: "give a --tp that fits the recipe's max_nodes",
        });
    }
    Ok(())
}
