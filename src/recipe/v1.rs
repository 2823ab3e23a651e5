//! Format v1: eugr/spark-vllm-docker's recipes (`recipe_version: "1"`; `name`, `container`,
//! `command`, `defaults`, `env`, `mods`, `model`, `cluster_only`/`solo_only`, `build_args`),
//! read as its `run-recipe.py` reads them. The command is a Python `str.format` template over
//! `defaults` with `--set` on top; `env` values are text, never templates; the engine line
//! says tp, pp and the model. Ray as eugr's runner runs it: a recipe's
//! `--distributed-executor-backend` is dropped (vLLM's native multi-node mode) unless `--ray`
//! is given, and a recipe runs solo (one node, `tensor_parallel` 1 unless `--set`, no
//! executor) where eugr's runner runs it solo: `solo_only`, or a cluster of one node (unless
//! `cluster_only`, which that cluster cannot take), each said in a warning. Fields eugr's runner ignores are ignored here too,
//! said in a warning; `build_args` (building eugr's images) is not done here, also said. Pure.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::doc::{DocFields, RecipeDoc};
use super::engine_line::{self, LineFacts};
use super::env::{RecipeEnv, RecipeEnvValue, valid_name};
use super::error::{RecipeError, RecipeErrors, RecipeWarning};
use super::launch::{CommandSource, NodeBounds, OtherModel, RecipeLaunch};
use super::mods::RecipeMod;
use super::pyvalue::python_str;
use super::runtime;
use super::{RecipeFormat, RecipeInput, common, pyformat, sets, shape, words};
use crate::plan::secret::{Secret, is_secret_name};

/// sparkrun's name for the runtime of eugr's runner, whose engine v1 recipes are written for.
const EUGR_RUNTIME: &str = "eugr-vllm";

/// A v1 recipe as written.
#[derive(Clone, Debug, PartialEq)]
pub struct RecipeV1 {
    pub file: String,
    /// The file's text, to locate errors found when the recipe is built.
    pub text: String,
    pub name: String,
    pub description: String,
    pub model: Option<String>,
    pub container: String,
    pub command: String,
    pub defaults: BTreeMap<String, Value>,
    pub env: Vec<(String, String)>,
    pub mods: Vec<String>,
    pub cluster_only: bool,
    pub solo_only: bool,
    pub warnings: Vec<RecipeWarning>,
}

const FIELDS: [&str; 11] = [
    "recipe_version",
    "name",
    "description",
    "model",
    "container",
    "command",
    "defaults",
    "env",
    "mods",
    "cluster_only",
    "solo_only",
];

/// Reads a v1 recipe's fields; every problem at once.
pub(super) fn parse(doc: &RecipeDoc, stem: &str) -> Result<RecipeV1, RecipeErrors> {
    let mut f = DocFields::new(doc);
    let mut warnings = Vec::new();
    let name = f.text("name").unwrap_or_else(|| stem.to_string());
    let description = f.text("description").unwrap_or_default();
    let model = f.text("model");
    let container = f.text("container");
    let command = f.text("command");
    let defaults = common::text_keyed(&mut f, doc, "defaults");
    let env_map = common::text_keyed(&mut f, doc, "env");
    let mods = f.texts("mods");
    let cluster_only = f.flag("cluster_only").unwrap_or(false);
    let solo_only = f.flag("solo_only").unwrap_or(false);
    let build_args = f.texts("build_args");
    let mut errors = std::mem::take(&mut f.errors);
    for (field, value) in [("container", &container), ("command", &command)] {
        if value.is_none() {
            errors.push(doc.error(
                field,
                "missing; a v1 recipe needs it (eugr's runner refuses it without)",
            ));
        }
    }
    if cluster_only && solo_only {
        errors.push(doc.error(
            "solo_only",
            "cluster_only and solo_only are both true; keep one",
        ));
    }
    let mut env = Vec::new();
    for (k, v) in env_map {
        if !valid_name(&k) {
            errors.push(doc.error(&format!("env.{k}"), "is not a valid variable name"));
            continue;
        }
        let text = python_str(&v);
        if text.contains(['$', '`']) {
            warnings.push(RecipeWarning::new(
                format!("env.{k}"),
                "eugr's runner exports it through the container's shell, which expands `$`/`` ` ``; spark-launch passes the text as written",
            ));
        }
        env.push((k, text));
    }
    if !build_args.is_empty() {
        warnings.push(RecipeWarning::new(
            "build_args",
            format!("{:?} are arguments for building eugr's image; spark-launch builds no image: the container must exist on a node (build it with eugr's build-and-copy.sh) or be given with --image", build_args.join(" ")),
        ));
    }
    warnings.extend(common::yaml11_words(doc, &defaults, "defaults"));
    for key in doc.keys() {
        if !FIELDS.contains(&key.as_str()) && key != "build_args" {
            warnings.push(RecipeWarning::new(
                key,
                "not a field of eugr's v1 recipes; ignored (as eugr's runner ignores it)",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(RecipeErrors(errors));
    }
    Ok(RecipeV1 {
        file: doc.file.to_string(),
        text: doc.text.to_string(),
        name,
        description,
        model,
        container: container.unwrap_or_default(),
        command: command.unwrap_or_default(),
        defaults,
        env,
        mods,
        cluster_only,
        solo_only,
        warnings,
    })
}

impl RecipeV1 {
    fn error(&self, field: &str, problem: impl Into<String>) -> RecipeError {
        common::located(&self.file, &self.text, field, problem)
    }

    /// The launch this recipe asks for, with `--set` applied and its mods resolved. Every
    /// problem at once: a `--set` that does not apply leaves the command read with `defaults`,
    /// and a command that does not read still has its image checked.
    pub fn build(
        &self,
        input: &RecipeInput,
        mods: Vec<RecipeMod>,
    ) -> Result<RecipeLaunch, RecipeErrors> {
        let mut warnings = self.warnings.clone();
        let mut errors: Vec<RecipeError> = Vec::new();
        let mut params =
            sets::apply(&self.file, &self.defaults, &input.sets).unwrap_or_else(|es| {
                errors.extend(es);
                self.defaults.clone()
            });
        let solo = self.solo(input);
        if let Some(why) = solo {
            self.solo_tp(why, input, &mut params, &mut warnings);
        }
        let bounds = NodeBounds {
            min: if self.cluster_only { 2 } else { 1 },
            max: self.solo_only.then_some(1),
        };
        let line = common::kept(self.line(&params), &mut errors);
        let mut read = None;
        if let Some(Line {
            engine,
            mut argv,
            start,
            mut used,
            expansions,
            assignments,
        }) = line
        {
            let api_key = engine_line::take_api_key(&mut argv);
            let facts = engine_line::facts(engine, &argv, start);
            let ray = self.ray(&facts, input, solo, &mut warnings);
            used.extend(shape::keys_read(&facts));
            warnings.extend(sets::warnings(&input.sets, &self.defaults, &used));
            let model = common::kept(self.model_of(&facts, &mut warnings), &mut errors);
            let shape = common::kept_shape(
                shape::shape(&self.file, &facts, &params, input.gpus_per_node, bounds),
                &self.text,
                &mut warnings,
                &mut errors,
            );
            warnings.extend(common::expansion_warnings(&expansions));
            if let Ok(eugr) = runtime::resolve(EUGR_RUNTIME, None)
                && engine != eugr.engine
            {
                warnings.push(RecipeWarning::new(
                    "command",
                    format!(
                        "a v1 recipe running {engine}: eugr's recipes are written for {} images",
                        eugr.engine.engine().title()
                    ),
                ));
            }
            read = Some((engine, argv, api_key, facts, ray, model, shape, assignments));
        }
        let image = common::kept(
            common::image(&self.file, &self.text, &self.container),
            &mut errors,
        );
        let Some((engine, argv, api_key, facts, ray, Some(model), Some(shape), assignments)) = read
        else {
            return Err(RecipeErrors(errors));
        };
        let (Some(image), true) = (image, errors.is_empty()) else {
            return Err(RecipeErrors(errors));
        };
        let mut env = RecipeEnv::default();
        for (k, v) in &self.env {
            env.0.insert(
                k.clone(),
                RecipeEnvValue::text(v.clone(), is_secret_name(k)),
            );
        }
        common::command_assignments(&assignments, &mut env, &mut warnings);
        Ok(RecipeLaunch {
            file: self.file.clone(),
            text: self.text.clone(),
            format: RecipeFormat::V1,
            name: self.name.clone(),
            engine,
            image: Some(image),
            model,
            model_revision: facts.revision.clone(),
            tp: shape.tp,
            pp: shape.pp,
            gpus_per_node: input.gpus_per_node.max(1),
            nodes: shape.nodes,
            node_bounds: bounds,
            argv,
            command: CommandSource::Recipe,
            before_engine: None,
            env,
            pre_exec: Vec::new(),
            mods,
            ray,
            api_key: api_key.and_then(Secret::new),
            executor_config: BTreeMap::new(),
            entrypoint: None,
            // The draft its settings name (eugr's runner leaves it to the engine to fetch; here
            // the Hub is offline in the containers, so it is staged beside the model).
            models: engine
                .engine()
                .recipe_draft(&params)
                .map(OtherModel::from)
                .into_iter()
                .collect(),
            min_sparkrun_version: None,
            solo: solo.is_some(),
            warnings,
        })
    }

    /// Whether eugr's runner runs this recipe solo, and why: `solo_only`, or a cluster of one
    /// node (its solo mode whenever it has fewer than two nodes); a `cluster_only` recipe is
    /// refused there instead.
    fn solo(&self, input: &RecipeInput) -> Option<Solo> {
        if self.solo_only {
            Some(Solo::Only)
        } else if input.nodes == Some(1) && !self.cluster_only {
            Some(Solo::OneNode)
        } else {
            None
        }
    }

    /// The command rendered with `params` and split into words, starting an engine.
    fn line(&self, params: &BTreeMap<String, Value>) -> Result<Line, RecipeErrors> {
        let (rendered, used) = pyformat::format_used(&self.command, params)
            .map_err(|e| self.error("command", e.to_string()))?;
        let words = words::split(&rendered).map_err(|e| self.error("command", e.to_string()))?;
        let Some((engine, start)) = engine_line::program(&words.argv) else {
            return Err(self
                .error(
                    "command",
                    format!(
                        "`{}` starts no engine spark-launch runs",
                        words.argv.join(" ").chars().take(60).collect::<String>()
                    ),
                )
                .fix(engine_line::program_fix())
                .into());
        };
        Ok(Line {
            engine,
            argv: words.argv,
            start,
            used,
            expansions: words.expansions,
            assignments: words.assignments,
        })
    }

    /// A recipe run solo gets `tensor_parallel` 1, as eugr's runner gives it in solo mode,
    /// unless the user gives one with `--set`: the recipe's own default (say 2) is not what
    /// runs.
    fn solo_tp(
        &self,
        why: Solo,
        input: &RecipeInput,
        params: &mut BTreeMap<String, Value>,
        warnings: &mut Vec<RecipeWarning>,
    ) {
        const KEY: &str = "tensor_parallel";
        if input.sets.iter().any(|s| s.path.trim() == KEY) {
            return;
        }
        let one = Value::Number(1.into());
        let was = params.insert(KEY.into(), one.clone());
        if let Some(was) = was.filter(|v| python_str(v) != python_str(&one)) {
            let was = python_str(&was);
            warnings.push(match why {
                Solo::Only => RecipeWarning::new(
                    "solo_only",
                    format!(
                        "the recipe runs solo (one node), so tensor_parallel {was} becomes 1, as eugr's runner runs a solo recipe (--set tensor_parallel=N gives another)"
                    ),
                ),
                Solo::OneNode => RecipeWarning::new(
                    "defaults.tensor_parallel",
                    format!(
                        "the cluster has one node, so the recipe runs solo and tensor_parallel {was} becomes 1, as eugr's runner runs a recipe on one node (--set tensor_parallel=N gives another)"
                    ),
                ),
            });
        }
    }

    /// Ray as eugr's runner decides it: only with `--ray`, and never solo. The recipe's
    /// executor flag is dropped otherwise (the engine's native multi-node mode runs), said
    /// when it asked for Ray.
    fn ray(
        &self,
        facts: &LineFacts,
        input: &RecipeInput,
        solo: Option<Solo>,
        warnings: &mut Vec<RecipeWarning>,
    ) -> bool {
        if !facts.ray {
            return false;
        }
        match solo {
            Some(Solo::Only) => {
                warnings.push(RecipeWarning::new(
                    "command",
                    "--distributed-executor-backend ray dropped: a solo_only recipe runs on one node, with no Ray, as eugr's runner runs it",
                ));
                return false;
            }
            Some(Solo::OneNode) => {
                warnings.push(RecipeWarning::new(
                    "command",
                    "--distributed-executor-backend ray dropped: the cluster has one node, so the recipe runs solo, with no Ray, as eugr's runner runs it",
                ));
                return false;
            }
            None => {}
        }
        if !input.ray {
            warnings.push(RecipeWarning::new(
                "command",
                "--distributed-executor-backend ray dropped, as eugr's runner does without --ray: vLLM runs in its native multi-node mode; give --ray to keep it",
            ));
            return false;
        }
        true
    }

    /// The model the engine loads: the command's; the recipe's `model` when the command names
    /// none.
    fn model_of(
        &self,
        facts: &LineFacts,
        warnings: &mut Vec<RecipeWarning>,
    ) -> Result<String, RecipeErrors> {
        let model = match (&facts.model, &self.model) {
            (Some(line), Some(field)) if line != field => {
                warnings.push(RecipeWarning::new(
                    "model",
                    format!("{field} differs from the model the command serves ({line}); spark-launch stages {line}"),
                ));
                line.clone()
            }
            (Some(line), _) => line.clone(),
            (None, Some(field)) => field.clone(),
            (None, None) => {
                return Err(self
                    .error("command", "names no model, and the recipe has no model:")
                    .into());
            }
        };
        common::check_model(
            &self.file,
            &self.text,
            "model",
            &model,
            facts.revision.as_deref(),
        )?;
        Ok(model)
    }
}

/// Why eugr's runner runs a recipe solo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Solo {
    /// `solo_only: true`.
    Only,
    /// The cluster has one node.
    OneNode,
}

/// The command as rendered and split: the engine it starts, its words, where the engine's
/// own words start, the `defaults` keys it used, and what its shell would have expanded or
/// assigned.
struct Line {
    engine: crate::workload::engines::EngineKind,
    argv: Vec<String>,
    start: usize,
    used: std::collections::BTreeSet<String>,
    expansions: Vec<String>,
    assignments: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{Recipe, parse as parse_recipe};

    const RECIPE: &str = r#"recipe_version: "1"
name: Demo-NVFP4
model: org/demo-nvfp4
container: vllm-node-demo
cluster_only: true
mods:
  - mods/fix-demo
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 2
  gpu_memory_utilization: 0.85
  num_speculative_tokens: 3
env:
  VLLM_USE_DEMO: "1"
  PATH_WITH_DOLLAR: "$HOME/x"
  SOME_TOKEN: abc
command: |
  vllm serve org/demo-nvfp4 \
      --revision 0123456789abcdef0123456789abcdef01234567 \
      --port {port} --host {host} \
      -tp {tensor_parallel} \
      --gpu-memory-utilization {gpu_memory_utilization} \
      --distributed-executor-backend ray \
      --speculative-config '{{"method":"mtp","num_speculative_tokens":{num_speculative_tokens}}}'
"#;

    fn v1(text: &str) -> RecipeV1 {
        match parse_recipe("demo.yaml", "demo", text) {
            Ok(Recipe::V1(r)) => r,
            other => panic!("not a v1 recipe: {other:?}"),
        }
    }

    fn input(sets: &[&str]) -> RecipeInput {
        RecipeInput {
            sets: sets.iter().map(|s| s.parse().unwrap()).collect(),
            gpus_per_node: 1,
            ..RecipeInput::default()
        }
    }

    #[test]
    fn a_v1_recipe_reads_as_eugrs_runner_reads_it() {
        let l = v1(RECIPE).build(&input(&[]), vec![]).unwrap();
        assert_eq!(l.engine, crate::workload::engines::EngineKind::Vllm);
        assert_eq!(l.image.as_deref(), Some("vllm-node-demo"));
        assert_eq!(l.model, "org/demo-nvfp4");
        assert_eq!(
            l.model_revision.as_deref(),
            Some("0123456789abcdef0123456789abcdef01234567")
        );
        assert_eq!((l.tp, l.pp, l.nodes), (2, 1, 2));
        assert_eq!(l.node_bounds, NodeBounds { min: 2, max: None });
        assert_eq!(
            l.argv.last().unwrap(),
            "{\"method\":\"mtp\",\"num_speculative_tokens\":3}"
        );
        assert!(l.argv.contains(&"0.85".to_string()));
    }

    #[test]
    fn the_ray_executor_is_dropped_as_eugrs_runner_drops_it_unless_ray_is_given() {
        let l = v1(RECIPE).build(&input(&[]), vec![]).unwrap();
        assert!(!l.ray, "eugr's runner runs without Ray unless --ray");
        let said: Vec<String> = l
            .warnings
            .iter()
            .filter(|w| w.field == "command")
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            said,
            [
                "command: --distributed-executor-backend ray dropped, as eugr's runner does without --ray: vLLM runs in its native multi-node mode; give --ray to keep it"
            ]
        );
        let with_ray = RecipeInput {
            ray: true,
            ..input(&[])
        };
        let l = v1(RECIPE).build(&with_ray, vec![]).unwrap();
        assert!(l.ray, "--ray keeps the recipe's Ray");
        assert!(!l.warnings.iter().any(|w| w.field == "command"));
    }

    #[test]
    fn a_solo_only_recipe_runs_solo_with_tensor_parallel_one_and_no_ray() {
        // The shape of eugr's gemma4-26b-a4b-nvfp4.yaml (358bf26): solo_only with
        // tensor_parallel: 2 and the Ray executor in the command.
        let text = RECIPE
            .replace("cluster_only: true", "solo_only: true")
            .replace("mods:\n  - mods/fix-demo\n", "");
        for ray in [false, true] {
            let asked = RecipeInput { ray, ..input(&[]) };
            let l = v1(&text).build(&asked, vec![]).unwrap();
            assert_eq!((l.tp, l.nodes, l.ray), (1, 1, false));
            assert!(l.argv.windows(2).any(|w| w == ["-tp", "1"]), "{:?}", l.argv);
            let said: Vec<String> = l.warnings.iter().map(|w| w.to_string()).collect();
            for expected in [
                "solo_only: the recipe runs solo (one node), so tensor_parallel 2 becomes 1, as eugr's runner runs a solo recipe (--set tensor_parallel=N gives another)",
                "command: --distributed-executor-backend ray dropped: a solo_only recipe runs on one node, with no Ray, as eugr's runner runs it",
            ] {
                assert!(said.iter().any(|w| w == expected), "{said:?}");
            }
        }
        // A tensor_parallel the user sets is kept, and sizes the job as it asks.
        let e = v1(&text)
            .build(&input(&["tensor_parallel=2"]), vec![])
            .unwrap_err();
        assert_eq!(e.0[0].field, "max_nodes");
    }

    #[test]
    fn a_plain_recipe_on_one_node_runs_solo_unless_the_user_sets_tensor_parallel() {
        let plain = RECIPE
            .replace("cluster_only: true\n", "")
            .replace("mods:\n  - mods/fix-demo\n", "");
        let on = |nodes: Option<u32>, sets: &[&str]| RecipeInput {
            nodes,
            ..input(sets)
        };
        let l = v1(&plain).build(&on(Some(1), &[]), vec![]).unwrap();
        assert_eq!((l.tp, l.nodes, l.ray, l.solo), (1, 1, false, true));
        assert!(l.argv.windows(2).any(|w| w == ["-tp", "1"]), "{:?}", l.argv);
        assert!(
            l.warnings
                .iter()
                .any(|w| w.field == "defaults.tensor_parallel" && w.message.contains("becomes 1")),
            "{:?}",
            l.warnings
        );
        // The user's value stays; two nodes, or nodes not known, leave the recipe as written;
        // a cluster_only recipe is never made solo (the one node is refused at planning).
        let set = v1(&plain)
            .build(&on(Some(1), &["tensor_parallel=2"]), vec![])
            .unwrap();
        assert_eq!((set.tp, set.solo), (2, true));
        for nodes in [Some(2), None] {
            let l = v1(&plain).build(&on(nodes, &[]), vec![]).unwrap();
            assert_eq!((l.tp, l.solo), (2, false), "{nodes:?}");
        }
        let l = v1(RECIPE).build(&on(Some(1), &[]), vec![]).unwrap();
        assert_eq!((l.tp, l.solo), (2, false));
    }

    #[test]
    fn env_values_are_text_never_templates() {
        let l = v1(RECIPE).build(&input(&[]), vec![]).unwrap();
        let node = crate::recipe::RecipeNode::default();
        let env = l.env.render(&node).unwrap();
        assert_eq!(env["PATH_WITH_DOLLAR"], "$HOME/x");
        assert_eq!(env["VLLM_USE_DEMO"], "1");
        assert_eq!(l.env.secret_names(), ["SOME_TOKEN"]);
        assert!(l.warnings.iter().any(|w| w.field == "env.PATH_WITH_DOLLAR"));
    }

    #[test]
    fn a_set_overrides_a_default_and_an_unused_one_is_said() {
        let l = v1(RECIPE)
            .build(
                &input(&["tensor_parallel=4", "port=9000", "nope=1"]),
                vec![],
            )
            .unwrap();
        assert_eq!((l.tp, l.nodes), (4, 4));
        assert!(l.argv.windows(2).any(|w| w == ["--port", "9000"]));
        assert!(l.warnings.iter().any(|w| w.field == "--set nope=1"));
    }

    #[test]
    fn a_missing_template_key_is_refused_at_the_command() {
        let text = RECIPE.replace("  num_speculative_tokens: 3\n", "");
        let e = v1(&text).build(&input(&[]), vec![]).unwrap_err();
        assert_eq!(
            e.0[0].to_string(),
            "demo.yaml:17: command: {num_speculative_tokens} has no value: it is not a defaults key and no --set gives it"
        );
    }

    #[test]
    fn a_cluster_only_recipe_at_one_node_is_refused() {
        let e = v1(RECIPE)
            .build(&input(&["tensor_parallel=1"]), vec![])
            .unwrap_err();
        assert_eq!(e.0[0].field, "min_nodes");
    }

    #[test]
    fn build_args_and_unknown_fields_are_said_not_dropped() {
        let text = format!("{RECIPE}build_args:\n  - --tf5\npull_image: true\n");
        let r = v1(&text);
        let fields: Vec<_> = r.warnings.iter().map(|w| w.field.as_str()).collect();
        assert!(fields.contains(&"build_args"), "{fields:?}");
        assert!(fields.contains(&"pull_image"), "{fields:?}");
    }

    #[test]
    fn a_command_that_starts_no_engine_is_refused() {
        let text = "recipe_version: \"1\"\nname: x\ncontainer: c\ncommand: python3 server.py --port {port}\ndefaults:\n  port: 1\n";
        let e = v1(text).build(&input(&[]), vec![]).unwrap_err();
        assert!(
            e.0[0]
                .problem
                .what
                .starts_with("`python3 server.py --port 1` starts no engine"),
            "{e}"
        );
    }

    #[test]
    fn missing_container_and_command_are_both_reported() {
        let Err(e) = parse_recipe("r.yaml", "r", "recipe_version: \"1\"\nname: x\n") else {
            panic!("accepted");
        };
        let fields: Vec<_> = e.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["container", "command"]);
    }
}
