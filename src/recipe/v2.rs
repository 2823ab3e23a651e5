//! Format v2: sparkrun's recipes (spark-arena/recipe-registry and community registries;
//! `recipe_version: "2"`; `model`, `model_revision`, `runtime`, `container`, `min_nodes`,
//! `max_nodes`, `defaults`, `env`, `command`, `pre_exec`, `mods`, `executor_config`,
//! `min_sparkrun_version`), read as sparkrun reads them: the command's `{key}` placeholders
//! substituted until stable from `defaults` (+ `--set`), `{model}` and `{model_revision}`; no
//! command means the runtime's flag table builds one; `env` templates rendered per node;
//! `pre_exec` commands (a list, or one text) rendered as the command is, to run in every
//! container before the mods and the engine; for a runtime whose runner hands the command to
//! bash whole (llama-cpp), a script's commands before the server kept to run before it, on one
//! node only; `executor_config.entrypoint` applied as sparkrun's Docker executor applies it
//! (`""` clears the image's entrypoint, a program name replaces it), the other executor
//! settings warned about. Fields that change what runs and are not done
//! here (`include`, `overrides`, …) refuse the recipe by name; fields that only follow serving
//! (`post_exec`, …) are warned about; unknown fields refuse a recipe that asks for a newer
//! sparkrun. Pure.

use std::collections::{BTreeMap, BTreeSet};

use yaml_serde::Value;

use super::distribution::{self, Distribution};
use super::doc::{DocFields, RecipeDoc};
use super::engine_line::{self, LineFacts};
use super::env::{self, RecipeEnv, valid_name};
use super::error::{RecipeError, RecipeErrors, RecipeWarning};
use super::flags::{self, FlagInput};
use super::launch::{CommandSource, NodeBounds, OtherModel, RecipeLaunch};
use super::mods::RecipeMod;
use super::pyvalue::python_str;
use super::runtime::{self, RuntimeChoice};
use super::{RecipeFormat, RecipeInput, common, sets, shape, substitute, words};
use crate::plan::secret::Secret;

/// A v2 recipe as written.
#[derive(Clone, Debug, PartialEq)]
pub struct RecipeV2 {
    pub file: String,
    pub text: String,
    pub name: String,
    pub description: String,
    pub model: String,
    pub model_revision: Option<String>,
    pub runtime: String,
    pub container: Option<String>,
    pub bounds: NodeBounds,
    pub defaults: BTreeMap<String, Value>,
    pub env: BTreeMap<String, Value>,
    pub command: Option<String>,
    /// `pre_exec`, as written.
    pub pre_exec: Vec<String>,
    pub mods: Vec<String>,
    pub executor_config: BTreeMap<String, Value>,
    /// `executor_config.entrypoint`: `Some("")` clears the image's entrypoint, `Some(program)`
    /// replaces it, `None` (absent or null) keeps it.
    pub entrypoint: Option<String>,
    /// `distribution_config`: the other models to stage, the model's own pin.
    distribution: Option<Box<Distribution>>,
    pub min_sparkrun_version: Option<String>,
    pub warnings: Vec<RecipeWarning>,
}

/// Fields read here.
const FIELDS: [&str; 25] = [
    "recipe_version",
    "sparkrun_version",
    "name",
    "description",
    "model",
    "model_revision",
    "runtime",
    "runtime_version",
    "mode",
    "min_nodes",
    "max_nodes",
    "solo_only",
    "cluster_only",
    "container",
    "defaults",
    "env",
    "command",
    "pre_exec",
    "mods",
    "executor_config",
    "distribution_config",
    "runtime_config",
    "metadata",
    "benchmark",
    "min_sparkrun_version",
];

/// Fields that change what runs and that spark-launch does not do: the recipe is refused.
const REFUSED: [(&str, &str); 3] = [
    (
        "include",
        "recipes built from other recipes are not supported yet; write the fields out",
    ),
    (
        "overrides",
        "conditional overrides are not supported yet; write the fields out",
    ),
    (
        "containers",
        "a different image per node is not supported yet; give one container:",
    ),
];

/// Fields that do not change what serves: warned about, not applied.
const NOT_APPLIED: [(&str, &str); 6] = [
    (
        "post_exec",
        "commands after the server is ready are not run by spark-launch",
    ),
    (
        "post_commands",
        "commands on this machine after the server is ready are not run by spark-launch",
    ),
    (
        "stop_after_post",
        "not applied: spark-launch runs no post hooks",
    ),
    (
        "builder",
        "spark-launch builds no image: the container must exist on a node or be given with --image",
    ),
    (
        "builder_config",
        "spark-launch builds no image: the container must exist on a node or be given with --image",
    ),
    (
        "build_args",
        "spark-launch builds no image: the container must exist on a node or be given with --image",
    ),
];

/// Reads a v2 recipe's fields; every problem at once.
pub(super) fn parse(doc: &RecipeDoc, stem: &str) -> Result<RecipeV2, RecipeErrors> {
    let mut f = DocFields::new(doc);
    let name = f.text("name").unwrap_or_else(|| stem.to_string());
    let description = f.text("description").unwrap_or_default();
    let model = f.text("model");
    let model_revision = f.text("model_revision");
    let runtime = f.text("runtime").unwrap_or_default();
    let container = f.text("container");
    let mode = f.text("mode").unwrap_or_else(|| "auto".into());
    let min_nodes = f.count("min_nodes").unwrap_or(1);
    let max_nodes = f.count("max_nodes");
    let solo_only = f.flag("solo_only").unwrap_or(false);
    let cluster_only = f.flag("cluster_only").unwrap_or(false);
    let defaults = common::text_keyed(&mut f, doc, "defaults");
    let env = common::text_keyed(&mut f, doc, "env");
    let command = f.text("command").filter(|c| !c.trim().is_empty());
    let pre_exec = pre_exec(doc, &mut f.errors);
    let mut mods = f.texts("mods");
    let executor_config = common::text_keyed(&mut f, doc, "executor_config");
    let min_version = f.text("min_sparkrun_version");
    let mut errors = std::mem::take(&mut f.errors);
    let mut warnings = Vec::new();
    if model.is_none() {
        errors.push(doc.error(
            "model",
            "missing; a v2 recipe names its model (model: ORG/NAME)",
        ));
    }
    if container.is_none() {
        warnings.push(RecipeWarning::new(
            "container",
            "none given: spark-launch's default image for the engine applies (sparkrun would use its own)",
        ));
    }
    if let Some(v) = &min_version
        && !version_like(v)
    {
        errors.push(doc.error(
            "min_sparkrun_version",
            format!("{v:?} is not a version such as \"0.4.0\" (not a version range)"),
        ));
    }
    let bounds = match bounds(&mode, min_nodes, max_nodes, solo_only, cluster_only) {
        Ok(b) => b,
        Err((field, why)) => {
            errors.push(doc.error(field, why));
            NodeBounds { min: 1, max: None }
        }
    };
    for k in env.keys() {
        if !valid_name(k) {
            errors.push(doc.error(&format!("env.{k}"), "is not a valid variable name"));
        }
    }
    field_rules(doc, min_version.as_deref(), &mut errors, &mut warnings);
    warnings.extend(common::yaml11_words(doc, &defaults, "defaults"));
    let entrypoint = entrypoint(doc, &executor_config, &mut errors, &mut warnings);
    let distribution = distribution::read(doc, &mut errors).map(Box::new);
    runtime_config(doc, &mut mods, &mut errors, &mut warnings);
    let not_applied: Vec<&str> = executor_config
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "entrypoint")
        .collect();
    if !not_applied.is_empty() {
        warnings.push(RecipeWarning::new(
            "executor_config",
            format!(
                "{} not applied: spark-launch sets the container options itself (host network and IPC, GPUs, RDMA devices, memlock)",
                not_applied.join(", ")
            ),
        ));
    }
    if !errors.is_empty() {
        return Err(RecipeErrors(errors));
    }
    Ok(RecipeV2 {
        file: doc.file.to_string(),
        text: doc.text.to_string(),
        name,
        description,
        model: model.unwrap_or_default(),
        model_revision,
        runtime,
        container,
        bounds,
        defaults,
        env,
        command,
        pre_exec,
        mods,
        executor_config,
        entrypoint,
        distribution,
        min_sparkrun_version: min_version,
        warnings,
    })
}

/// `executor_config.entrypoint` as sparkrun's Docker executor takes it: null or absent keeps
/// the image's entrypoint, `""` clears it (the command then runs alone), any other text is
/// the one program Docker's `--entrypoint` names (not split into words). Anything else is an
/// error at its line.
fn entrypoint(
    doc: &RecipeDoc,
    executor_config: &BTreeMap<String, Value>,
    errors: &mut Vec<RecipeError>,
    warnings: &mut Vec<RecipeWarning>,
) -> Option<String> {
    const FIELD: &str = "executor_config.entrypoint";
    match executor_config.get("entrypoint")? {
        Value::Null => None,
        Value::String(s) => {
            if s.chars().any(char::is_whitespace) {
                warnings.push(RecipeWarning::new(
                    FIELD,
                    format!(
                        "{s:?} is one program name to Docker's --entrypoint (as sparkrun passes it), not a command line: a program of that whole name must exist in the image"
                    ),
                ));
            }
            Some(s.clone())
        }
        other => {
            errors.push(
                doc.error(
                    FIELD,
                    format!(
                        "expected a text, found {}",
                        super::pyvalue::kind(other)
                    ),
                )
                .fix("write entrypoint: \"\" to clear the image's entrypoint, or the program to run instead"),
            );
            None
        }
    }
}

/// `pre_exec` as sparkrun takes it: a list of commands, or one command as a text. A `copy`
/// entry (files put into the container) is refused with a mod as the fix; anything else that
/// is not a command is an error at its place.
fn pre_exec(doc: &RecipeDoc, errors: &mut Vec<RecipeError>) -> Vec<String> {
    let Some(v) = doc.get("pre_exec") else {
        return Vec::new();
    };
    let items = match v {
        Value::String(s) => return vec![s.clone()],
        Value::Sequence(items) => items,
        other => {
            errors.push(doc.error(
                "pre_exec",
                format!(
                    "expected a list of commands, found {}",
                    super::pyvalue::kind(other)
                ),
            ));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let field = format!("pre_exec[{i}]");
        match item {
            Value::String(s) => out.push(s.clone()),
            Value::Number(_) | Value::Bool(_) => out.push(python_str(item)),
            Value::Mapping(m) if m.contains_key("copy") => errors.push(
                doc.error(
                    &field,
                    "a copy entry (files put into the container) is not supported yet",
                )
                .fix("put the files in a mod (a folder with run.sh) and name it under mods:"),
            ),
            other => errors.push(doc.error(
                &field,
                format!("expected a command, found {}", super::pyvalue::kind(other)),
            )),
        }
    }
    out
}

/// `runtime_config`, as sparkrun reads it: its `mods` are the recipe's mods where it names
/// none at the top (the v1 place), its `build_args` ask sparkrun's builder for an image (none
/// is built here: said), anything else is settings the runtime reads beside `defaults`, none of
/// which spark-launch's engines take (said by name). Not a mapping: an error, as sparkrun's.
fn runtime_config(
    doc: &RecipeDoc,
    mods: &mut Vec<String>,
    errors: &mut Vec<RecipeError>,
    warnings: &mut Vec<RecipeWarning>,
) {
    let raw = match doc.get("runtime_config") {
        None | Some(Value::Null) => return,
        Some(Value::Mapping(m)) => m,
        Some(other) => {
            errors.push(doc.error(
                "runtime_config",
                format!("expected a mapping, found {}", super::pyvalue::kind(other)),
            ));
            return;
        }
    };
    let mut ignored = Vec::new();
    for (k, v) in raw {
        let key = k.as_str().unwrap_or_default();
        match (key, v) {
            ("mods", Value::Sequence(items)) if mods.is_empty() => {
                mods.extend(items.iter().filter_map(|i| i.as_str().map(String::from)));
            }
            ("build_args", _) => warnings.push(RecipeWarning::new(
                "runtime_config.build_args",
                "asks sparkrun's builder to build the image; spark-launch builds no image: the container must exist on a node or be given with --image",
            )),
            _ => ignored.push(key.to_string()),
        }
    }
    if !ignored.is_empty() {
        warnings.push(RecipeWarning::new(
            "runtime_config",
            format!(
                "{} not applied: no engine here reads runtime settings beside defaults and the command",
                ignored.join(", ")
            ),
        ));
    }
}

/// Refused, not-applied and unknown fields.
fn field_rules(
    doc: &RecipeDoc,
    min_version: Option<&str>,
    errors: &mut Vec<RecipeError>,
    warnings: &mut Vec<RecipeWarning>,
) {
    for key in doc.keys() {
        if FIELDS.contains(&key.as_str()) {
            continue;
        }
        if let Some((_, why)) = REFUSED.iter().find(|(k, _)| *k == key) {
            errors.push(doc.error(&key, *why));
        } else if let Some((_, why)) = NOT_APPLIED.iter().find(|(k, _)| *k == key) {
            warnings.push(RecipeWarning::new(key, *why));
        } else if let Some(v) = min_version {
            errors.push(doc.error(
                &key,
                format!("not a field spark-launch knows; the recipe asks for sparkrun {v} or newer, whose feature this may be — not supported yet"),
            ));
        } else {
            warnings.push(RecipeWarning::new(
                key,
                "not a sparkrun recipe field spark-launch knows; ignored",
            ));
        }
    }
}

/// A version such as `0.4.0` (no ranges, no wildcards).
fn version_like(v: &str) -> bool {
    v.starts_with(|c: char| c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+' || c == '-')
}

/// `mode`, `min_nodes`/`max_nodes` and the `solo_only`/`cluster_only` shorthands, as sparkrun
/// combines them.
fn bounds(
    mode: &str,
    min: u32,
    max: Option<u32>,
    solo_only: bool,
    cluster_only: bool,
) -> Result<NodeBounds, (&'static str, String)> {
    let (mut min, mut max) = (min, max);
    match mode {
        "auto" | "cluster" => {}
        "solo" => (min, max) = (1, Some(1)),
        other => return Err(("mode", format!("{other:?} is not auto, solo or cluster"))),
    }
    if cluster_only {
        min = min.max(2);
    }
    if solo_only {
        max = Some(1);
    }
    if let Some(m) = max
        && m < min
    {
        return Err((
            "max_nodes",
            format!("max_nodes {m} is below min_nodes {min}"),
        ));
    }
    Ok(NodeBounds { min, max })
}

impl RecipeV2 {
    fn error(&self, field: &str, problem: impl Into<String>) -> RecipeError {
        common::located(&self.file, &self.text, field, problem)
    }

    /// The launch this recipe asks for, with `--set` applied and its mods resolved. Every
    /// problem at once: a part that cannot be read (the runtime, a `--set`, the command) stops
    /// only what depends on it; the rest (the model, `pre_exec`, `env`, the image) is checked
    /// as well.
    pub fn build(
        &self,
        input: &RecipeInput,
        mods: Vec<RecipeMod>,
    ) -> Result<RecipeLaunch, RecipeErrors> {
        let mut warnings = self.warnings.clone();
        let mut errors: Vec<RecipeError> = Vec::new();
        let choice = match runtime::resolve(&self.runtime, self.command.as_deref()) {
            Ok(c) => Some(c),
            Err(e) => {
                let field = if self.runtime.is_empty() {
                    "command"
                } else {
                    "runtime"
                };
                errors.push(self.error(field, e.to_string()));
                None
            }
        };
        // A `--set` that does not apply is an error; the rest is read with `defaults` alone.
        let config = sets::apply(&self.file, &self.defaults, &input.sets).unwrap_or_else(|es| {
            errors.extend(es);
            self.defaults.clone()
        });
        let chain = self.chain(&config);
        let line = choice.and_then(|choice| {
            let words = match &self.command {
                Some(command) => self.words_of_command(command, &chain, choice),
                None => self.words_of_table(&config, input, choice),
            };
            common::kept(words, &mut errors).map(|w| (choice, w))
        });
        let mut used = BTreeSet::new();
        let mut read = None;
        if let Some((choice, line)) = line {
            let EngineWords {
                mut argv,
                before,
                facts,
                source,
                assignments,
                expansions,
                table_warnings,
                used: line_used,
            } = line;
            used.extend(line_used);
            warnings.extend(table_warnings);
            let api_key = engine_line::take_api_key(&mut argv);
            let shape_facts = if source == CommandSource::Recipe {
                facts.clone()
            } else {
                LineFacts::default()
            };
            let shape = common::kept_shape(
                shape::shape_for(
                    Some(choice.engine),
                    &self.file,
                    &shape_facts,
                    &config,
                    input.gpus_per_node,
                    self.bounds,
                ),
                &self.text,
                &mut warnings,
                &mut errors,
            );
            if let (Some(before), Some(shape)) = (&before, &shape)
                && let Err(es) = self.script_rules(before, shape.nodes, &mut warnings)
            {
                errors.extend(es.0);
            }
            warnings.extend(common::expansion_warnings(&expansions));
            used.extend(shape::keys_read(&shape_facts));
            if let Some(key) = choice.engine.engine().recipe().ray_key {
                used.insert(key.into());
            }
            let ray = self.ray(choice, &facts, &config, &mut warnings);
            if let Some(line_model) = &facts.model
                && *line_model != self.model
                && !line_model.contains('{')
            {
                warnings.push(RecipeWarning::new(
                    "model",
                    format!("{} differs from the model the command serves ({line_model}); spark-launch stages {}", self.model, self.model),
                ));
            }
            read = Some(ReadLine {
                choice,
                argv,
                facts,
                source,
                before,
                assignments,
                api_key,
                shape,
                ray,
            });
        }
        let mut models: Vec<OtherModel> = read
            .as_ref()
            .and_then(|r| r.choice.engine.engine().recipe_draft(&config))
            .map(OtherModel::from)
            .into_iter()
            .collect();
        let pin = self.distributed(&chain, &mut models, &mut used, &mut errors);
        if let (Some(r), Some(p)) = (&self.model_revision, &pin)
            && r != p
        {
            warnings.push(RecipeWarning::new(
                "distribution_config",
                format!(
                    "fetches {} at {p}, but model_revision says {r}: {r} is staged and served",
                    self.model
                ),
            ));
        }
        let revision = self
            .model_revision
            .clone()
            .or(read.as_ref().and_then(|r| r.facts.revision.clone()))
            .or(pin);
        common::kept(
            common::check_model(
                &self.file,
                &self.text,
                "model",
                &self.model,
                revision.as_deref(),
            ),
            &mut errors,
        );
        let pre_exec = common::kept(self.pre_exec(&chain, &mut warnings, &mut used), &mut errors);
        let env = common::kept(
            self.env(&chain, &input.user_env, &mut warnings, &mut used),
            &mut errors,
        );
        let image = match &self.container {
            Some(c) => common::kept(common::image(&self.file, &self.text, c), &mut errors),
            None => None,
        };
        if let Some(d) = &self.distribution {
            warnings.extend(d.warnings(image.as_deref()));
        }
        let (Some(read), Some(pre_exec), Some(mut env)) = (read, pre_exec, env) else {
            return Err(RecipeErrors(errors));
        };
        let Some(shape) = read.shape.filter(|_| errors.is_empty()) else {
            return Err(RecipeErrors(errors));
        };
        warnings.extend(sets::warnings(&input.sets, &self.defaults, &used));
        common::command_assignments(&read.assignments, &mut env, &mut warnings);
        Ok(RecipeLaunch {
            file: self.file.clone(),
            text: self.text.clone(),
            format: RecipeFormat::V2,
            name: self.name.clone(),
            engine: read.choice.engine,
            image,
            model: self.model.clone(),
            model_revision: revision,
            tp: shape.tp,
            pp: shape.pp,
            gpus_per_node: input.gpus_per_node.max(1),
            nodes: shape.nodes,
            node_bounds: self.node_bounds(read.choice),
            argv: read.argv,
            command: read.source,
            before_engine: read.before,
            env,
            pre_exec,
            mods,
            ray: read.ray,
            api_key: read.api_key.and_then(Secret::new),
            executor_config: self.executor_config.clone(),
            entrypoint: self.entrypoint.clone(),
            models,
            min_sparkrun_version: self.min_sparkrun_version.clone(),
            solo: false,
            warnings,
        })
    }

    /// A command that runs other commands before the engine's (`before`): planned on one node
    /// only, as sparkrun runs it; across nodes sparkrun's head builds its line from `defaults`
    /// and never runs the recipe's command, so nothing would say what to run. A model named in
    /// those commands is said: sparkrun gives `{model}` the staged file's path there.
    fn script_rules(
        &self,
        before: &str,
        nodes: u32,
        warnings: &mut Vec<RecipeWarning>,
    ) -> Result<(), RecipeErrors> {
        if nodes > 1 {
            return Err(self
                .error(
                    "command",
                    format!(
                        "runs commands before the server (a script), and its shape fills {nodes} nodes: such a command runs on one node only (across nodes sparkrun builds the head's line from defaults and never runs the recipe's command)"
                    ),
                )
                .fix("run it on one node (--set tensor_parallel=1), or move the commands into pre_exec, which runs on every node")
                .into());
        }
        if before.contains(&self.model) {
            warnings.push(RecipeWarning::new(
                "command",
                format!(
                    "the commands before the server name the model as {} (sparkrun renders {{model}} there as the staged file's path)",
                    self.model
                ),
            ));
        }
        Ok(())
    }

    /// The nodes the recipe accepts once built: its own bounds, except for an engine its size
    /// alone sizes (the shape said a `min_nodes` above that size, and spark-launch plans what
    /// the size fills, as sparkrun does), where only `max_nodes` holds.
    fn node_bounds(&self, choice: RuntimeChoice) -> NodeBounds {
        if choice.engine.engine().recipe().sized_by_parallel {
            NodeBounds {
                min: 1,
                max: self.bounds.max,
            }
        } else {
            self.bounds
        }
    }

    /// The models `distribution_config` names besides the recipe's, rendered as the command is
    /// (`{model}`), added to `models` once each; returns the revision its entry for the recipe's
    /// own model pins (sparkrun fetches the model at it), said where `model_revision` differs.
    fn distributed(
        &self,
        chain: &BTreeMap<String, Value>,
        models: &mut Vec<OtherModel>,
        used: &mut BTreeSet<String>,
        errors: &mut Vec<RecipeError>,
    ) -> Option<String> {
        let mut pin = None;
        for (i, m) in self.distribution.iter().flat_map(|d| &d.models).enumerate() {
            let field = format!("distribution_config.models.entries[{i}]");
            let name = match substitute::render_used(&m.name, chain) {
                Ok((name, keys)) => {
                    used.extend(keys);
                    name
                }
                Err(e) => {
                    errors.push(self.error(&field, e.to_string()));
                    continue;
                }
            };
            if name == self.model {
                pin = pin.or(m.revision.clone());
            } else if !models.iter().any(|o| o.repo == name) {
                models.push(OtherModel {
                    repo: name,
                    revision: m.revision.clone(),
                    ranks: m.ranks.clone(),
                    field,
                });
            }
        }
        pin
    }

    /// The config chain the command and env templates read: `defaults` + `--set`, `model`
    /// (unless `defaults` has one) and `model_revision`.
    fn chain(&self, config: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
        let mut chain = config.clone();
        chain
            .entry("model".into())
            .or_insert_with(|| Value::String(self.model.clone()));
        if let Some(rev) = &self.model_revision {
            chain
                .entry("model_revision".into())
                .or_insert_with(|| Value::String(rev.clone()));
        }
        chain
    }

    fn words_of_command(
        &self,
        command: &str,
        chain: &BTreeMap<String, Value>,
        choice: RuntimeChoice,
    ) -> Result<EngineWords, RecipeErrors> {
        let (rendered, used) = substitute::render_used(command, chain)
            .map_err(|e| self.error("command", e.to_string()))?;
        let in_words = |e: words::WordsError| self.error("command", e.to_string());
        // A runner that hands the command to bash whole runs a script's commands first.
        let (before, words) = if choice.engine.engine().recipe().script {
            let s = words::split_script(&rendered).map_err(in_words)?;
            (s.before, s.last)
        } else {
            (None, words::split(&rendered).map_err(in_words)?)
        };
        let Some((engine, start)) = engine_line::program(&words.argv) else {
            return Err(self
                .error(
                    "command",
                    format!(
                        "`{}` starts no engine spark-launch runs",
                        first_words(&words.argv)
                    ),
                )
                .fix(engine_line::program_fix())
                .into());
        };
        if engine != choice.engine {
            return Err(self
                .error(
                    "command",
                    format!(
                        "runs {engine}, but the recipe's runtime is {}",
                        choice.engine
                    ),
                )
                .into());
        }
        let facts = engine_line::facts(engine, &words.argv, start);
        Ok(EngineWords {
            argv: words.argv,
            before,
            facts,
            source: CommandSource::Recipe,
            assignments: words.assignments,
            expansions: words.expansions,
            table_warnings: Vec::new(),
            used,
        })
    }

    fn words_of_table(
        &self,
        config: &BTreeMap<String, Value>,
        input: &RecipeInput,
        choice: RuntimeChoice,
    ) -> Result<EngineWords, RecipeErrors> {
        let (shape, _) = shape::shape_for(
            Some(choice.engine),
            &self.file,
            &LineFacts::default(),
            config,
            input.gpus_per_node,
            self.bounds,
        )
        .map_err(|es| RecipeErrors(common::shape_errors(&self.text, es)))?;
        let generated = flags::generate(&FlagInput {
            engine: choice.engine,
            config,
            model: &self.model,
            model_revision: self.model_revision.as_deref(),
            nodes: shape.nodes,
        });
        let Some(generated) = generated else {
            return Err(self
                .error(
                    "command",
                    format!(
                        "missing; spark-launch has no flag table for {}",
                        choice.engine
                    ),
                )
                .fix("write the engine command out in command:")
                .into());
        };
        let g = generated.map_err(|e| {
            self.error(
                "defaults",
                format!("the generated command does not split: {e}"),
            )
        })?;
        Ok(EngineWords {
            argv: g.argv,
            before: None,
            facts: LineFacts::default(),
            source: CommandSource::FlagTable,
            assignments: Vec::new(),
            expansions: Vec::new(),
            table_warnings: g.warnings,
            // The flag table names every key no flag carries itself.
            used: config.keys().cloned().collect(),
        })
    }

    /// Ray, for an engine that can run over it: the runtime's word if it has one, else the
    /// recipe's (the engine's Ray key in `defaults`, `distributed_executor_backend: ray` for
    /// vLLM, or the executor flag in the command).
    fn ray(
        &self,
        choice: RuntimeChoice,
        facts: &LineFacts,
        config: &BTreeMap<String, Value>,
        warnings: &mut Vec<RecipeWarning>,
    ) -> bool {
        if !choice.engine.engine().ray() {
            return false;
        }
        let asked = facts.ray
            || choice
                .engine
                .engine()
                .recipe()
                .ray_key
                .and_then(|key| config.get(key))
                .is_some_and(|v| python_str(v).eq_ignore_ascii_case("ray"));
        match choice.ray {
            Some(false) if asked => {
                warnings.push(RecipeWarning::new(
                    "runtime",
                    format!(
                        "{} runs no Ray, but the recipe asks for the Ray executor; spark-launch follows the runtime",
                        choice.runtime
                    ),
                ));
                false
            }
            Some(r) => r,
            None => asked,
        }
    }

    /// The `pre_exec` commands rendered as sparkrun renders them (the command's `{key}`
    /// substitution over the same config); each a field of its own in errors. sparkrun gives
    /// its hooks `SPARKRUN_*` variables that spark-launch does not set: a command that reads
    /// one is warned about.
    fn pre_exec(
        &self,
        chain: &BTreeMap<String, Value>,
        warnings: &mut Vec<RecipeWarning>,
        used: &mut BTreeSet<String>,
    ) -> Result<Vec<String>, RecipeErrors> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for (i, command) in self.pre_exec.iter().enumerate() {
            let field = format!("pre_exec[{i}]");
            match substitute::render_used(command, chain) {
                Ok((rendered, keys)) => {
                    used.extend(keys);
                    if rendered.contains("SPARKRUN_") {
                        warnings.push(RecipeWarning::new(
                            field,
                            "reads a SPARKRUN_* variable, which sparkrun sets for its hooks and spark-launch does not: it is empty here",
                        ));
                    }
                    out.push(rendered);
                }
                Err(e) => errors.push(self.error(&field, e.to_string())),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(RecipeErrors(errors))
        }
    }

    fn env(
        &self,
        chain: &BTreeMap<String, Value>,
        user_env: &BTreeMap<String, String>,
        warnings: &mut Vec<RecipeWarning>,
        used: &mut BTreeSet<String>,
    ) -> Result<RecipeEnv, RecipeErrors> {
        let mut out = RecipeEnv::default();
        let mut errors = Vec::new();
        for (k, raw) in &self.env {
            let field = format!("env.{k}");
            match env::read_v2(k, raw, chain, user_env) {
                Ok(read) => {
                    used.extend(read.config_keys);
                    for var in read.unset {
                        warnings.push(RecipeWarning::new(
                            field.clone(),
                            format!(
                                "${var} is not set in your environment; passed as the text ${var}"
                            ),
                        ));
                    }
                    out.0.insert(k.clone(), read.value);
                }
                Err(why) => errors.push(self.error(&field, why)),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(RecipeErrors(errors))
        }
    }
}

/// The engine's line as the recipe gives it, read: the engine, its words, the shape (`None`
/// when the shape is refused) and Ray.
struct ReadLine {
    choice: RuntimeChoice,
    argv: Vec<String>,
    facts: LineFacts,
    source: CommandSource,
    /// The commands a script runs before the engine's, as written.
    before: Option<String>,
    assignments: Vec<(String, String)>,
    api_key: Option<String>,
    shape: Option<shape::JobShape>,
    ray: bool,
}

/// The engine's words and what was read from them.
struct EngineWords {
    argv: Vec<String>,
    /// The commands a script runs before the engine's, as written.
    before: Option<String>,
    facts: LineFacts,
    source: CommandSource,
    assignments: Vec<(String, String)>,
    expansions: Vec<String>,
    table_warnings: Vec<RecipeWarning>,
    /// The `defaults` keys the line took.
    used: BTreeSet<String>,
}

fn first_words(argv: &[String]) -> String {
    argv.iter().take(4).cloned().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{Recipe, RecipeNode, parse as parse_recipe};

    const RECIPE: &str = r#"recipe_version: "2"
model: org/demo
model_revision: 0123456789abcdef0123456789abcdef01234567
runtime: sglang
container: lmsysorg/sglang:v0.5.9-cu130
min_nodes: 2
defaults:
  port: 30000
  tensor_parallel: 2
  mem: 0.8
  base: "http://127.0.0.1:{port}"
env:
  SGLANG_RANK_NOTE: "rank {launch.node_rank} of {launch.num_nodes} on {launch.node_host}"
  PORT_COPY: "{config.port}"
  HF_TOKEN: "$HF_TOKEN"
  JSON: '{"a": {"b": 1}}'
command: |
  python3 -m sglang.launch_server --model-path {model} \
    --revision {model_revision} --tp-size {tensor_parallel} \
    --mem-fraction-static {mem} --port {port} --api-key sk-demo \
    --served-model-name {unknown_key}
"#;

    fn v2(text: &str) -> RecipeV2 {
        match parse_recipe("demo.yaml", "demo", text) {
            Ok(Recipe::V2(r)) => r,
            other => panic!("not a v2 recipe: {other:?}"),
        }
    }

    fn input() -> RecipeInput {
        RecipeInput {
            user_env: [("HF_TOKEN".to_string(), "hf_secret".to_string())].into(),
            gpus_per_node: 1,
            ..RecipeInput::default()
        }
    }

    #[test]
    fn a_v2_command_is_substituted_until_stable_and_unknown_names_stay() {
        let l = v2(RECIPE).build(&input(), vec![]).unwrap();
        assert_eq!(l.engine, crate::workload::engines::EngineKind::Sglang);
        assert_eq!(
            l.argv,
            [
                "python3",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "org/demo",
                "--revision",
                "0123456789abcdef0123456789abcdef01234567",
                "--tp-size",
                "2",
                "--mem-fraction-static",
                "0.8",
                "--port",
                "30000",
                "--served-model-name",
                "{unknown_key}"
            ]
        );
        assert_eq!(l.api_key.as_ref().map(|k| k.expose()), Some("sk-demo"));
        assert_eq!((l.tp, l.nodes), (2, 2));
        assert_eq!(l.command, CommandSource::Recipe);
    }

    #[test]
    fn a_v2_env_template_is_rendered_per_node() {
        let l = v2(RECIPE).build(&input(), vec![]).unwrap();
        let node = |rank: u32, host: &str| RecipeNode {
            num_nodes: 2,
            node_rank: rank,
            node_host: host.into(),
            ..RecipeNode::default()
        };
        let head = l.env.render(&node(0, "169.254.1.1")).unwrap();
        let worker = l.env.render(&node(1, "169.254.1.2")).unwrap();
        assert_eq!(head["SGLANG_RANK_NOTE"], "rank 0 of 2 on 169.254.1.1");
        assert_eq!(worker["SGLANG_RANK_NOTE"], "rank 1 of 2 on 169.254.1.2");
        assert_eq!(worker["PORT_COPY"], "30000");
        assert_eq!(worker["HF_TOKEN"], "hf_secret");
        assert_eq!(worker["JSON"], "{\"a\": {\"b\": 1}}");
        let shown = serde_json::to_value(&l.env).unwrap();
        assert_eq!(shown["HF_TOKEN"], "<set>");
        assert_eq!(
            shown["SGLANG_RANK_NOTE"],
            "rank {launch.node_rank} of {launch.num_nodes} on {launch.node_host}"
        );
    }

    #[test]
    fn a_v2_recipe_without_command_gets_the_flag_table_command() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\ndefaults:\n  tensor_parallel: 2\n  port: 8000\n  distributed_executor_backend: ray\n  expert_parallel: 2\n";
        let l = v2(text).build(&input(), vec![]).unwrap();
        assert_eq!(l.command, CommandSource::FlagTable);
        assert_eq!(
            l.argv,
            ["vllm", "serve", "org/demo", "-tp", "2", "--port", "8000"]
        );
        assert!(l.ray, "distributed_executor_backend: ray means Ray");
        assert!(
            l.warnings
                .iter()
                .any(|w| w.field == "defaults.expert_parallel")
        );
    }

    #[test]
    fn unsupported_runtimes_are_refused_naming_the_runtime() {
        for runtime in ["ds4-cuda", "mystery"] {
            let text = format!(
                "recipe_version: \"2\"\nmodel: org/demo\nruntime: {runtime}\ncontainer: c\n"
            );
            let e = v2(&text).build(&input(), vec![]).unwrap_err();
            assert_eq!(e.0[0].field, "runtime");
            assert_eq!(e.0[0].line, Some(3));
            assert!(e.0[0].problem.what.contains(&format!("{runtime:?}")), "{e}");
        }
    }

    #[test]
    fn a_command_for_another_engine_than_the_runtime_is_refused() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\nruntime: sglang\ncommand: vllm serve {model}\n";
        let e = v2(text).build(&input(), vec![]).unwrap_err();
        assert_eq!(
            e.0[0].problem.what,
            "runs vllm, but the recipe's runtime is sglang"
        );
    }

    #[test]
    fn pre_exec_commands_are_rendered_as_the_command_is_and_post_hooks_are_warned_about() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  patch: fix-{model}\npre_exec:\n  - pip install x\n  - python3 /opt/{patch}.py --keep {unknown}\npost_exec:\n  - echo hi\ncommand: vllm serve {model}\n";
        let r = v2(text);
        assert!(r.warnings.iter().any(|w| w.field == "post_exec"));
        let l = r.build(&input(), vec![]).unwrap();
        assert_eq!(
            l.pre_exec,
            [
                "pip install x",
                "python3 /opt/fix-org/demo.py --keep {unknown}"
            ]
        );
        // One text is one command; `--set` reaches it.
        let one = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  v: 1\npre_exec: echo {v} $SPARKRUN_NODE_RANK\ncommand: vllm serve {model}\n";
        let with_set = RecipeInput {
            sets: vec!["v=2".parse().unwrap()],
            ..input()
        };
        let l = v2(one).build(&with_set, vec![]).unwrap();
        assert_eq!(l.pre_exec, ["echo 2 $SPARKRUN_NODE_RANK"]);
        assert!(
            l.warnings
                .iter()
                .any(|w| w.field == "pre_exec[0]" && w.message.contains("SPARKRUN_")),
            "{:?}",
            l.warnings
        );
        assert!(!l.warnings.iter().any(|w| w.field.starts_with("--set")));
    }

    #[test]
    fn a_pre_exec_entry_that_is_not_a_command_is_refused_at_its_line() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\npre_exec:\n  - echo ok\n  - copy: ./patches\n    dest: /workspace/p\n  - [a, b]\n";
        let Err(e) = parse_recipe("r.yaml", "r", text) else {
            panic!("accepted")
        };
        let said: Vec<String> = e.0.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            said,
            [
                "r.yaml:5: pre_exec[1]: a copy entry (files put into the container) is not supported yet; put the files in a mod (a folder with run.sh) and name it under mods:",
                "r.yaml:7: pre_exec[2]: expected a command, found a list"
            ]
        );
    }

    #[test]
    fn an_unknown_field_refuses_a_recipe_that_asks_for_a_newer_sparkrun() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\nmin_sparkrun_version: \"0.4.0\"\nreadiness:\n  inference: x\n";
        let Err(e) = parse_recipe("r.yaml", "r", text) else {
            panic!("accepted")
        };
        assert_eq!(e.0[0].field, "readiness");
        assert!(
            e.0[0].problem.what.contains("sparkrun 0.4.0 or newer"),
            "{e}"
        );
        let plain = "recipe_version: \"2\"\nmodel: org/demo\nreadiness: x\n";
        assert!(v2(plain).warnings.iter().any(|w| w.field == "readiness"));
        let range = "recipe_version: \"2\"\nmodel: org/demo\nmin_sparkrun_version: \">=0.4\"\n";
        assert!(parse_recipe("r.yaml", "r", range).is_err());
    }

    #[test]
    fn an_empty_executor_entrypoint_clears_the_image_s_and_other_executor_settings_are_warned_about()
     {
        // The shape of a community recipe whose image's ENTRYPOINT is `vllm serve`.
        let text = "model: org/demo\nruntime: vllm\ncontainer: vllm/vllm-openai:x\nexecutor_config:\n  entrypoint: \"\"\n  shm_size: 20gb\ncommand: vllm serve {model}\n";
        let r = v2(text);
        assert_eq!(r.entrypoint.as_deref(), Some(""));
        let said: Vec<String> = r
            .warnings
            .iter()
            .filter(|w| w.field.starts_with("executor_config"))
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            said,
            [
                "executor_config: shm_size not applied: spark-launch sets the container options itself (host network and IPC, GPUs, RDMA devices, memlock)"
            ]
        );
        let l = r.build(&input(), vec![]).unwrap();
        assert_eq!(l.entrypoint.as_deref(), Some(""));
        // Only an entrypoint: nothing to warn about.
        let only = text.replace("  shm_size: 20gb\n", "");
        assert!(
            !v2(&only)
                .warnings
                .iter()
                .any(|w| w.field.starts_with("executor_config"))
        );
        // null keeps the image's; a program replaces it, one word as Docker takes it.
        let null = text.replace("entrypoint: \"\"", "entrypoint: null");
        assert_eq!(v2(&null).entrypoint, None);
        let program = text.replace("\"\"", "/opt/nvidia/nvidia_entrypoint.sh");
        assert_eq!(
            v2(&program).entrypoint.as_deref(),
            Some("/opt/nvidia/nvidia_entrypoint.sh")
        );
        let two_words = text.replace("\"\"", "\"vllm serve\"");
        assert!(
            v2(&two_words)
                .warnings
                .iter()
                .any(|w| w.field == "executor_config.entrypoint"
                    && w.message.contains("one program name")),
        );
    }

    #[test]
    fn an_executor_entrypoint_that_is_not_text_is_refused_at_its_line() {
        let text =
            "model: org/demo\nruntime: vllm\nexecutor_config:\n  entrypoint: [vllm, serve]\n";
        let Err(e) = parse_recipe("r.yaml", "r", text) else {
            panic!("accepted")
        };
        assert_eq!(
            e.0[0].to_string(),
            "r.yaml:4: executor_config.entrypoint: expected a text, found a list; write entrypoint: \"\" to clear the image's entrypoint, or the program to run instead"
        );
    }

    #[test]
    fn node_bounds_follow_sparkrun_and_contradictions_are_named() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\nmin_nodes: 3\nmax_nodes: 2\n";
        let Err(e) = parse_recipe("r.yaml", "r", text) else {
            panic!("accepted")
        };
        assert_eq!(
            e.0[0].to_string(),
            "r.yaml:4: max_nodes: max_nodes 2 is below min_nodes 3"
        );
        assert_eq!(
            bounds("solo", 2, None, false, false).unwrap(),
            NodeBounds {
                min: 1,
                max: Some(1)
            }
        );
        assert_eq!(
            bounds("auto", 1, None, false, true).unwrap(),
            NodeBounds { min: 2, max: None }
        );
    }

    #[test]
    fn a_llama_cpp_script_keeps_its_commands_before_the_server_on_one_node_only() {
        // The shape of ishan5ain's dflash llama-cpp recipes: a draft fetched, then the server.
        let text = "recipe_version: \"2\"\nmodel: org/m-GGUF:Q4_K_M\nruntime: llama-cpp\ndefaults:\n  url: https://h/d.gguf\n  port: 8080\ncommand: |\n  if [ ! -f /tmp/d.gguf ]; then \\\n    curl -sL -o /tmp/d.gguf \"{url}\" ; \\\n  fi && \\\n  llama-server -hf {model} -md /tmp/d.gguf --port {port}\n";
        let l = v2(text).build(&input(), vec![]).unwrap();
        assert_eq!(
            l.before_engine.as_deref(),
            Some(
                "if [ ! -f /tmp/d.gguf ]; then \\\n  curl -sL -o /tmp/d.gguf \"https://h/d.gguf\" ; \\\nfi &&"
            )
        );
        assert_eq!(
            l.argv,
            [
                "llama-server",
                "-hf",
                "org/m-GGUF:Q4_K_M",
                "-md",
                "/tmp/d.gguf",
                "--port",
                "8080"
            ]
        );
        // Across nodes sparkrun never runs the recipe's command: refused, naming why.
        let two = RecipeInput {
            sets: vec!["tensor_parallel=2".parse().unwrap()],
            ..input()
        };
        let e = v2(text).build(&two, vec![]).unwrap_err();
        assert_eq!(e.0[0].field, "command");
        assert!(
            e.0[0].problem.what.contains("fills 2 nodes")
                && e.0[0].to_string().contains("pre_exec"),
            "{e}"
        );
        // Another engine's runner gets one command, as before.
        let vllm = "recipe_version: \"2\"\nmodel: org/m\nruntime: vllm\ncommand: cd /w && vllm serve {model}\n";
        let e = v2(vllm).build(&input(), vec![]).unwrap_err();
        assert!(e.0[0].problem.what.contains("`&&`"), "{e}");
    }

    #[test]
    fn a_llama_cpp_recipe_below_its_min_nodes_keeps_only_max_nodes_as_its_bounds() {
        let text = "model: org/m-GGUF:Q3_K_M\nruntime: llama-cpp\nmin_nodes: 2\ndefaults:\n  tensor_parallel: 1\ncommand: llama-server -hf {model}\n";
        let l = v2(text).build(&input(), vec![]).unwrap();
        assert_eq!(l.nodes, 1);
        assert_eq!(l.node_bounds, NodeBounds { min: 1, max: None });
        assert!(l.fit(1).is_empty(), "{:?}", l.fit(1));
        assert!(l.warnings.iter().any(|w| w.field == "min_nodes"));
    }

    #[test]
    fn a_cycle_in_defaults_is_refused_at_the_command() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  a: \"{b}\"\n  b: \"{a}\"\ncommand: vllm serve {model} --x {a}\n";
        let e = v2(text).build(&input(), vec![]).unwrap_err();
        assert_eq!(e.0[0].field, "command");
        assert!(
            e.0[0].problem.what.contains("a cycle among {a}, {b}"),
            "{e}"
        );
    }

    #[test]
    fn a_set_the_command_does_not_use_is_said_as_in_v1() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  port: 8000\n  base: \"http://h:{port}\"\nenv:\n  E: \"{config.note}\"\ncommand: vllm serve {model} --port {port} --x {base}\n";
        let with = |sets: &[&str]| RecipeInput {
            sets: sets.iter().map(|s| s.parse().unwrap()).collect(),
            ..input()
        };
        let l = v2(text)
            .build(&with(&["nosuch=1", "port=9000", "note=x"]), vec![])
            .unwrap();
        let said: Vec<String> = l
            .warnings
            .iter()
            .filter(|w| w.field.starts_with("--set"))
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            said,
            [
                "--set nosuch=1: the recipe has no {nosuch} and no defaults key nosuch; the value is not used"
            ]
        );
    }

    #[test]
    fn an_empty_set_renders_empty_as_sparkrun_does_never_as_the_placeholder() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  served: demo\ncommand: vllm serve {model} --served-model-name x{served}\n";
        let input = RecipeInput {
            sets: vec!["served=".parse().unwrap()],
            ..input()
        };
        let l = v2(text).build(&input, vec![]).unwrap();
        assert_eq!(l.argv.last().map(String::as_str), Some("x"));
        assert!(
            l.warnings
                .iter()
                .any(|w| w.field == "--set served=" && w.message.contains("renders as nothing")),
            "{:?}",
            l.warnings
        );
    }

    #[test]
    fn a_set_that_doubles_on_every_pass_is_refused_fast_naming_the_key() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  max_model_len: 4096\ncommand: vllm serve {model} --max-model-len {max_model_len}\n";
        let input = RecipeInput {
            sets: vec![
                "max_model_len={max_model_len}{max_model_len}"
                    .parse()
                    .unwrap(),
            ],
            ..input()
        };
        let started = std::time::Instant::now();
        let e = v2(text).build(&input, vec![]).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(e.0[0].field, "command");
        assert_eq!(
            e.0[0].problem.what,
            "the value of {max_model_len} holds {max_model_len} itself, so the command grows on every pass and never settles; write the value out"
        );
        let looped = "recipe_version: \"2\"\nmodel: org/demo\ndefaults:\n  a: \"{a}{a}\"\ncommand: vllm serve {model} --x {a}\n";
        let e = v2(looped).build(&self::input(), vec![]).unwrap_err();
        assert!(e.0[0].problem.what.contains("holds {a} itself"), "{e}");
    }

    #[test]
    fn an_unset_user_variable_is_said_and_kept_as_written() {
        let text = "recipe_version: \"2\"\nmodel: org/demo\ncommand: vllm serve {model}\nenv:\n  X: \"$NOT_SET_HERE\"\n";
        let l = v2(text).build(&input(), vec![]).unwrap();
        assert!(
            l.warnings
                .iter()
                .any(|w| w.field == "env.X" && w.message.contains("$NOT_SET_HERE"))
        );
        assert_eq!(
            l.env.render(&RecipeNode::default()).unwrap()["X"],
            "$NOT_SET_HERE"
        );
    }

    #[test]
    fn distribution_config_pins_the_model_where_model_revision_is_absent_and_is_said_where_they_differ()
     {
        let base = "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\ndefaults:\n  tensor_parallel: 1\ndistribution_config:\n  models:\n    entries:\n      - name: \"{model}\"\n        revision: abc123\n      - name: org/helper\n        target: [0]\n";
        let l = v2(base).build(&input(), vec![]).unwrap();
        assert_eq!(l.model_revision.as_deref(), Some("abc123"));
        assert_eq!(
            l.models,
            vec![OtherModel {
                repo: "org/helper".into(),
                revision: None,
                ranks: Some(vec![0]),
                field: "distribution_config.models.entries[1]".into(),
            }]
        );
        let pinned = base.replace("model: org/demo\n", "model: org/demo\nmodel_revision: v2\n");
        let l = v2(&pinned).build(&input(), vec![]).unwrap();
        assert_eq!(l.model_revision.as_deref(), Some("v2"));
        assert!(
            l.warnings.iter().any(|w| w
                .to_string()
                .contains("fetches org/demo at abc123, but model_revision says v2")),
            "{:?}",
            l.warnings
        );
    }

    #[test]
    fn runtime_config_mods_are_the_recipe_s_and_its_build_args_and_other_settings_are_said() {
        let r = v2(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\nruntime_config:\n  build_args: [--vllm-ref, v0.21.0]\n  mods: [mods/fix-a]\n  gpu_arch: sm_121a\ncommand: vllm serve org/demo\n",
        );
        assert_eq!(r.mods, ["mods/fix-a"]);
        let said: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
        assert!(
            said.iter()
                .any(|w| w.starts_with("runtime_config.build_args: asks sparkrun's builder")),
            "{said:?}"
        );
        assert!(
            said.iter()
                .any(|w| w.starts_with("runtime_config: gpu_arch not applied")),
            "{said:?}"
        );
        let e = parse_recipe(
            "demo.yaml",
            "demo",
            "recipe_version: \"2\"\nmodel: org/demo\nruntime_config: [a]\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("runtime_config: expected a mapping"),
            "{e}"
        );
    }
}
