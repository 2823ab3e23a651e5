//! A recipe as a serving launch request (`up RECIPE`): the recipe's engine, image, model,
//! revision and shape become the serving options; its engine line is split by the engine
//! (`engines::split_recipe_args`) into the words kept verbatim, in order, and the flags the
//! engine writes itself, whose values become options (port, rendezvous, served name) or are
//! dropped with a warning (ranks, the head's address); its environment and mods travel as the
//! request's [`RecipePart`]. What the user typed beside `up` wins, and where it contradicts
//! the recipe (`--tp 4` over the recipe's 2) a warning names both. Pure.

use super::engine_line;
use super::env::{EnvPiece, RecipeEnv};
use super::error::{RecipeError, RecipeErrors};
use super::launch::RecipeLaunch;
use super::mods::ModFiles;
use crate::model::ModelSource;
use crate::plan::JobName;
use crate::plan::secret::Secret;
use crate::plan::secret::is_secret_name;
use crate::profile::fit::Fit;
use crate::profile::request::Overrides;
use crate::workload::endpoint::{ApiKeyAsk, Bind};
use crate::workload::engines::{
    ApiKeySupport, EngineOptions, OwnedArg, RecipeFlag, ServingEngine, split_recipe_args,
};
use crate::workload::launch::{LaunchRequest, ServeRequest};
use crate::workload::recipe_part::RecipePart;
use crate::workload::serve::ServeOptions;

/// What the launching flags set over a recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecipeOverrides {
    /// The flags every serving launch takes (`--job`, `--env`, `--api-key`, `--bind`, …).
    pub serve: Overrides,
    /// `--tp`, over the recipe's tensor-parallel size.
    pub tp: Option<u32>,
    /// `--port`, over the recipe's API port.
    pub port: Option<u16>,
    /// `--image`, over the recipe's container.
    pub image: Option<String>,
    /// `--gpus-per-node` (else what the nodes' drivers list).
    pub gpus_per_node: Option<u32>,
    /// `--recipe-env`: the recipe's value of a variable spark-launch derives wins.
    pub keep_env: bool,
}

/// The serving request `launch` asks for, with its mods' files and `o` on top.
pub fn request(
    launch: &RecipeLaunch,
    mods: Vec<ModFiles>,
    o: &RecipeOverrides,
) -> Result<LaunchRequest, RecipeErrors> {
    let err = |field: &str, problem: String| RecipeError::new(&launch.file, field, problem);
    let kind = launch.engine;
    let engine = kind.engine();
    let mut warnings: Vec<String> = launch
        .warnings
        .iter()
        .map(|w| format!("{}: {w}", launch.file))
        .collect();
    let mut errors = secret_names(launch);
    let model = ModelSource::parse(&launch.model, launch.model_revision.as_deref())
        .map_err(|e| err("model", e.to_string()))?;
    let job = o
        .serve
        .job
        .clone()
        .unwrap_or_else(|| job_name(&launch.name));
    let mut serve = ServeOptions::new(kind, job, model);
    let mut tuning = EngineOptions {
        ray: launch.ray && engine.ray(),
        ..EngineOptions::default()
    };
    let (program, args) = engine_words(launch);
    // Where an engine has two spellings (SGLang), the recipe's is kept: images differ in
    // which one they ship.
    tuning.launcher = engine.recipe_launcher(&program);
    let split = split_recipe_args(engine, &args);
    serve.engine_args = split.kept;
    errors.extend(split.refused.into_iter().map(|r| err("command", r)));
    let mut taken = Taken::default();
    for owned in &split.owned {
        match take(owned, &mut taken, &mut tuning) {
            Ok(Some(w)) => warnings.push(format!("{}: {w}", launch.file)),
            Ok(None) => {}
            Err(problem) => errors.push(err("command", problem)),
        }
    }
    serve.tp = shape(launch, o, &mut warnings, &mut errors);
    serve.pp = launch.pp;
    serve.port = port(launch, o, taken.port, engine, &mut warnings);
    if let Some(host) = taken
        .host
        .filter(|h| !["0.0.0.0", "::", ""].contains(&h.as_str()))
        && o.serve.bind.is_none()
    {
        warnings.push(format!(
            "{}: the recipe's --host {host} is not used: the API listens as --bind says (every interface unless told)",
            launch.file
        ));
    }
    if let (Some(flag), Some(recipe)) = (&o.image, &launch.image)
        && flag != recipe
    {
        warnings.push(format!(
            "{}: --image {flag} replaces the recipe's container {recipe}",
            launch.file
        ));
    }
    serve.image = o
        .image
        .clone()
        .or_else(|| launch.image.clone())
        .unwrap_or_else(|| engine.default_image().to_string());
    serve.gpus_per_node = o.gpus_per_node.unwrap_or(launch.gpus_per_node.max(1));
    shared(&mut serve, &o.serve);
    let mut env = launch.env.clone();
    let env_key = env_api_key(launch, engine, &mut env, &mut errors);
    let api_key = api_key(launch, env_key, o, &mut warnings);
    if !errors.is_empty() {
        return Err(RecipeErrors(errors));
    }
    let served_name = served_name(taken.served, &launch.file, &mut warnings);
    let part = RecipePart {
        name: launch.name.clone(),
        file: launch.file.clone(),
        format: launch.format,
        program,
        served_name,
        env,
        keep_env: o.keep_env,
        mods,
        warnings,
    };
    Ok(LaunchRequest::Serve(Box::new(ServeRequest {
        engine: kind,
        serve,
        tuning,
        gpus_per_node_given: o.gpus_per_node.is_some(),
        hf_home: o.serve.hf_home.clone(),
        nccl_from: o.serve.nccl_from.clone(),
        allow_old_nccl: o.serve.allow_old_nccl,
        api_key,
        recipe: Some(Box::new(part)),
    })))
}

/// The recipe's program words (`vllm serve`) and its arguments after them, the model
/// written as the first argument taken out (spark-launch passes the staged folder).
fn engine_words(launch: &RecipeLaunch) -> (Vec<String>, Vec<String>) {
    let start = engine_line::program(&launch.argv)
        .map(|(_, s)| s)
        .unwrap_or(0);
    let program = launch.argv[..start].to_vec();
    let mut args = launch.argv[start..].to_vec();
    let positional = launch.engine.engine().recipe().model_positional;
    if positional && args.first().is_some_and(|a| !a.starts_with('-')) {
        args.remove(0);
    }
    (program, args)
}

/// What the flags the engine writes itself said, to become options.
#[derive(Default)]
struct Taken {
    port: Option<u16>,
    host: Option<String>,
    served: Vec<String>,
}

/// One flag the engine writes itself: its value taken into an option, or a warning that it is
/// dropped, or why the recipe cannot run.
fn take(
    owned: &OwnedArg,
    taken: &mut Taken,
    tuning: &mut EngineOptions,
) -> Result<Option<String>, String> {
    let value = owned.values.last().cloned().unwrap_or_default();
    let port = |what: &str| {
        value
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{what} {value:?} in `{}` is not a port", owned.written()))
    };
    match owned.flag {
        // Staged by spark-launch at the recipe's revision; sized from the recipe already.
        RecipeFlag::Model | RecipeFlag::Revision | RecipeFlag::Tp | RecipeFlag::Pp => Ok(None),
        // Ray or not is the recipe's already (RecipeLaunch::ray); the rest is the mode's.
        RecipeFlag::Executor => Ok(None),
        // The recipe reader took the key out of the line already (RecipeLaunch::api_key).
        RecipeFlag::ApiKey => Ok(None),
        RecipeFlag::Port => {
            taken.port = Some(port("the API port")?);
            Ok(None)
        }
        RecipeFlag::Rendezvous => {
            tuning.rendezvous_port = Some(port("the rendezvous port")?);
            Ok(None)
        }
        RecipeFlag::Host => {
            taken.host = Some(value);
            Ok(None)
        }
        RecipeFlag::ServedName => {
            taken.served = owned.values.clone();
            Ok(None)
        }
        RecipeFlag::Reserved => Ok(Some(format!(
            "the recipe's `{}` is dropped: spark-launch writes {} itself (per node, for its multi-node mode)",
            owned.written(),
            owned.name
        ))),
        RecipeFlag::Unsupported(why) => Err(format!("`{}`: {why}", owned.written())),
    }
}

/// The tensor-parallel size: `--tp` over the recipe's (a warning naming both when they
/// differ), the nodes it fills checked against the recipe's `min_nodes`/`max_nodes`.
fn shape(
    launch: &RecipeLaunch,
    o: &RecipeOverrides,
    warnings: &mut Vec<String>,
    errors: &mut Vec<RecipeError>,
) -> u32 {
    let Some(tp) = o.tp.filter(|tp| *tp != launch.tp) else {
        return launch.tp;
    };
    warnings.push(format!(
        "{}: --tp {tp} replaces the recipe's tensor-parallel size {}",
        launch.file, launch.tp
    ));
    let per_node = u64::from(o.gpus_per_node.unwrap_or(launch.gpus_per_node).max(1));
    let nodes = (u64::from(tp) * u64::from(launch.pp)).div_ceil(per_node);
    let b = launch.node_bounds;
    if nodes < u64::from(b.min) {
        errors.push(
            RecipeError::new(
                &launch.file,
                "min_nodes",
                format!(
                    "--tp {tp} fills {nodes} node(s) but the recipe runs on at least {}",
                    b.min
                ),
            )
            .fix("give a --tp that fills the recipe's nodes"),
        );
    }
    if let Some(max) = b.max.filter(|m| nodes > u64::from(*m)) {
        errors.push(
            RecipeError::new(
                &launch.file,
                "max_nodes",
                format!("--tp {tp} fills {nodes} nodes but the recipe runs on at most {max}"),
            )
            .fix("give a --tp that fits the recipe's max_nodes"),
        );
    }
    tp
}

/// The API port: `--port` over the recipe's `--port` (a warning naming both when they
/// differ), else the engine's default.
fn port(
    launch: &RecipeLaunch,
    o: &RecipeOverrides,
    recipe: Option<u16>,
    engine: &dyn ServingEngine,
    warnings: &mut Vec<String>,
) -> u16 {
    match (o.port, recipe) {
        (Some(flag), Some(r)) if flag != r => {
            warnings.push(format!(
                "{}: --port {flag} replaces the recipe's --port {r}",
                launch.file
            ));
            flag
        }
        (Some(flag), _) => flag,
        (None, Some(r)) => r,
        (None, None) => engine.default_port(),
    }
}

/// The name the API lists: the recipe's `--served-model-name` (its first, when it gives
/// several), else the model's id (the serving plan's default).
fn served_name(names: Vec<String>, file: &str, warnings: &mut Vec<String>) -> Option<String> {
    if names.len() > 1 {
        warnings.push(format!(
            "{file}: --served-model-name {}: spark-launch serves the model as {} only",
            names.join(" "),
            names[0]
        ));
    }
    names.into_iter().next()
}

/// The key a recipe gives in its env, in the variable its engine reads its key from
/// (vLLM's `VLLM_API_KEY`): owned like `--api-key`, so taken out of the env (it never reaches a
/// container that way, nor replaces the user's key under `--recipe-env`). A plain value is the
/// recipe's key; a value that differs per node cannot be one and is refused.
fn env_api_key(
    launch: &RecipeLaunch,
    engine: &dyn ServingEngine,
    env: &mut RecipeEnv,
    errors: &mut Vec<RecipeError>,
) -> Option<EnvKey> {
    let ApiKeySupport::Env(var) = engine.api_key() else {
        return None;
    };
    let value = env.0.remove(var)?;
    let mut text = String::new();
    for piece in &value.pieces {
        match piece {
            EnvPiece::Text(t) => text.push_str(t),
            EnvPiece::Launch(_) => {
                errors.push(
                    RecipeError::new(
                        &launch.file,
                        format!("env.{var}"),
                        format!(
                            "{var} is the {} API key, which cannot differ per node",
                            engine.title()
                        ),
                    )
                    .fix("give the key with --api-key KEY|auto|@FILE"),
                );
                return None;
            }
        }
    }
    Some(EnvKey {
        var,
        key: Secret::new(text),
    })
}

/// The engine's key variable as a recipe's env set it (`key`: `None` when empty).
struct EnvKey {
    var: &'static str,
    key: Option<Secret>,
}

/// `--api-key` over a key written in the recipe's command, over one in its env (the engine
/// reads its command's key first); each key not used is named in a warning, never shown.
fn api_key(
    launch: &RecipeLaunch,
    env: Option<EnvKey>,
    o: &RecipeOverrides,
    warnings: &mut Vec<String>,
) -> Option<ApiKeyAsk> {
    let file = &launch.file;
    let env_var = env.as_ref().filter(|e| e.key.is_some()).map(|e| e.var);
    if let Some(e) = env.as_ref().filter(|e| e.key.is_none()) {
        warnings.push(format!(
            "{file}: the recipe's env sets {} empty: no key from it",
            e.var
        ));
    }
    match (&o.serve.api_key, &launch.api_key, env_var) {
        (Some(k), command, _) => {
            if command.is_some() {
                warnings.push(format!(
                    "{file}: --api-key replaces the key written in the recipe's command"
                ));
            }
            if let Some(var) = env_var {
                warnings.push(format!(
                    "{file}: --api-key replaces the key the recipe's env gives in {var}"
                ));
            }
            Some(k.clone())
        }
        (None, Some(k), _) => {
            warnings.push(format!(
                "{file}: the recipe's command carries an --api-key: the API enforces it (a key written in a shared recipe is no secret)"
            ));
            if let Some(var) = env_var {
                warnings.push(format!(
                    "{file}: the key the recipe's env gives in {var} is not used: the command's key wins, as the engine reads them"
                ));
            }
            Some(ApiKeyAsk::Given(k.clone()))
        }
        (None, None, Some(var)) => {
            warnings.push(format!(
                "{file}: the recipe's env gives {var}: it is taken as the API key, enforced as --api-key is (never on a command line, <set> in plans; a key written in a shared recipe is no secret)"
            ));
            env.and_then(|e| e.key).map(ApiKeyAsk::Given)
        }
        (None, None, None) => None,
    }
}

/// The options every serving launch takes from the flags.
fn shared(serve: &mut ServeOptions, o: &Overrides) {
    serve.env = o
        .env
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect();
    if let Some(t) = o.ready_timeout_s {
        serve.ready_timeout_s = t;
    }
    serve.ulimits = o.container.ulimits.clone();
    serve.gpus = o.container.gpus;
    serve.stage_model = !o.no_stage;
    serve.check_answers = !o.no_check;
    serve.allow_tcp = o.allow_tcp;
    serve.bind = o.bind.unwrap_or(Bind::All);
    serve.memory = o.memory.clone();
}

/// A variable holding a secret from the user's environment under a name that does not say
/// so would be printed in plans, which mask values by name: refused.
fn secret_names(launch: &RecipeLaunch) -> Vec<RecipeError> {
    launch
        .env
        .0
        .iter()
        .filter(|(k, v)| v.secret && !is_secret_name(k))
        .map(|(k, _)| {
            RecipeError::new(
                &launch.file,
                format!("env.{k}"),
                "takes a secret from your environment, but its name does not say so: plans would print its value",
            )
            .fix("give the variable a name with TOKEN, KEY or SECRET in it")
        })
        .collect()
}

/// `demo-glm-flash`: a job name from the recipe's name (letters, digits and `-`, starting with
/// a letter, at most 40 characters).
pub fn job_name(name: &str) -> JobName {
    JobName::slug(name, "r-")
}

/// Whether this version can run the recipe on a cluster of `nodes` nodes (`None`: the nodes
/// are not known; a recipe whose runtime no engine answers to is refused when it is read).
pub fn fit(launch: &RecipeLaunch, nodes: Option<usize>) -> Option<Fit> {
    let n = u32::try_from(nodes?).unwrap_or(u32::MAX);
    let problems = launch.fit(n);
    Some(if problems.is_empty() {
        Fit::Yes
    } else {
        Fit::No(problems.into_iter().map(|p| p.problem).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{RecipeInput, parse};
    use crate::workload::engines::{EngineKind, Launcher};

    fn launch(text: &str) -> RecipeLaunch {
        parse("r.yaml", "r", text)
            .unwrap()
            .build(
                &RecipeInput {
                    gpus_per_node: 1,
                    ..RecipeInput::default()
                },
                vec![],
            )
            .unwrap()
    }

    const V2: &str = "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\nmin_nodes: 2\nmax_nodes: 2\ndefaults:\n  tensor_parallel: 2\n  port: 9000\ncommand: vllm serve {model} --tensor-parallel-size {tensor_parallel} --kv-cache-dtype fp8 --port {port} --host 0.0.0.0 --nnodes 2 --served-model-name demo --max-model-len 4096\n";

    fn serve(r: LaunchRequest) -> ServeRequest {
        match r {
            LaunchRequest::Serve(s) => *s,
            other => panic!("not a serving request: {other:?}"),
        }
    }

    #[test]
    fn the_recipe_s_settings_reach_the_engine_verbatim_and_its_owned_flags_become_options() {
        let s = serve(request(&launch(V2), vec![], &RecipeOverrides::default()).unwrap());
        assert_eq!(
            s.serve.engine_args,
            ["--kv-cache-dtype", "fp8", "--max-model-len", "4096"]
        );
        assert_eq!((s.serve.tp, s.serve.port), (2, 9000));
        assert_eq!(s.serve.image, "img:1");
        assert_eq!(s.serve.job.as_str(), "r");
        let part = s.recipe.unwrap();
        assert_eq!(part.served_name.as_deref(), Some("demo"));
        assert_eq!(part.program, ["vllm", "serve"]);
        assert!(
            part.warnings.iter().any(|w| w
                == "r.yaml: the recipe's `--nnodes 2` is dropped: spark-launch writes --nnodes itself (per node, for its multi-node mode)"),
            "{:?}",
            part.warnings
        );
    }

    #[test]
    fn a_flag_over_the_recipe_wins_with_a_warning_naming_both() {
        let o = RecipeOverrides {
            port: Some(8001),
            tp: Some(2),
            ..RecipeOverrides::default()
        };
        let s = serve(request(&launch(V2), vec![], &o).unwrap());
        assert_eq!(s.serve.port, 8001);
        let w = &s.recipe.unwrap().warnings;
        assert!(
            w.iter()
                .any(|w| w == "r.yaml: --port 8001 replaces the recipe's --port 9000"),
            "{w:?}"
        );
        let o = RecipeOverrides {
            tp: Some(4),
            ..RecipeOverrides::default()
        };
        let e = request(&launch(V2), vec![], &o).unwrap_err();
        assert_eq!(
            e.0[0].to_string(),
            "r.yaml: max_nodes: --tp 4 fills 4 nodes but the recipe runs on at most 2; give a --tp that fits the recipe's max_nodes"
        );
    }

    #[test]
    fn an_sglang_recipe_keeps_its_launcher_and_its_settings_and_gives_up_its_shape() {
        let l = launch(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: sglang\nmin_nodes: 2\ndefaults:\n  tensor_parallel: 2\ncommand: sglang serve --model-path {model} --tp-size {tensor_parallel} --port 30001 --dist-init-addr 10.0.0.1:5000 --mem-fraction-static 0.8\n",
        );
        let s = serve(request(&l, vec![], &RecipeOverrides::default()).unwrap());
        assert_eq!(s.engine, EngineKind::Sglang);
        assert_eq!(s.tuning.launcher, Some(Launcher::Serve));
        assert_eq!(s.serve.engine_args, ["--mem-fraction-static", "0.8"]);
        assert_eq!((s.serve.tp, s.serve.port), (2, 30001));
        assert!(
            s.recipe.unwrap().warnings.iter().any(|w| w.contains(
                "`--dist-init-addr 10.0.0.1:5000` is dropped: spark-launch writes --dist-init-addr itself"
            ))
        );
    }

    #[test]
    fn abbreviations_of_the_flags_spark_launch_writes_are_read_as_those_flags_and_never_reach_the_engine()
     {
        let l = launch(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\ncommand: vllm serve {model} --tensor-parallel 2 --max-model-len 4096 --hos 0.0.0.0 --served-model demo --por=9001\n",
        );
        assert_eq!(
            (l.tp, l.nodes),
            (2, 2),
            "the shape is read from --tensor-parallel"
        );
        let o = RecipeOverrides {
            serve: Overrides {
                bind: Some(Bind::Fabric),
                ..Overrides::default()
            },
            ..RecipeOverrides::default()
        };
        let s = serve(request(&l, vec![], &o).unwrap());
        assert_eq!(s.serve.engine_args, ["--max-model-len", "4096"]);
        assert_eq!((s.serve.tp, s.serve.port), (2, 9001));
        assert_eq!(s.serve.bind, Bind::Fabric);
        assert_eq!(s.recipe.unwrap().served_name.as_deref(), Some("demo"));
    }

    #[test]
    fn an_sglang_recipe_s_underscored_api_key_is_refused_by_name_and_its_key_is_never_kept_or_printed()
     {
        let l = launch(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: sglang\ncommand: sglang serve --model-path {model} --api_key sk-hidden-1 --dist-init 10.0.0.1:5000\n",
        );
        assert!(
            !l.argv.iter().any(|w| w.contains("sk-hidden-1")),
            "{:?}",
            l.argv
        );
        let e = request(&l, vec![], &RecipeOverrides::default()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("`--api_key`: SGLang does not read this spelling of --api-key"),
            "{text}"
        );
        assert!(!text.contains("sk-hidden-1"), "{text}");
    }

    #[test]
    fn an_abbreviated_vllm_api_key_in_a_recipe_is_taken_as_the_key_and_leaves_the_line() {
        let l = launch(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\ncommand: vllm serve {model} --api_k sk-hidden-2 --max-model-len 4096\n",
        );
        assert!(l.api_key.is_some());
        assert_eq!(
            l.argv,
            ["vllm", "serve", "org/demo", "--max-model-len", "4096"]
        );
        let l = launch(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\ncommand: vllm serve {model} --api=sk-hidden-3\n",
        );
        let e = request(&l, vec![], &RecipeOverrides::default()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("`--api`: vLLM reads abbreviations, and this one could be --api-key"),
            "{text}"
        );
        assert!(
            !format!("{text}{:?}", l.argv).contains("sk-hidden-3"),
            "{text}"
        );
    }

    const ENV_KEY: &str = "recipe_version: \"2\"\nmodel: org/demo\nruntime: vllm\ncontainer: img:1\nenv:\n  VLLM_API_KEY: sk-env-1\n  OTHER: x\ncommand: vllm serve {model} --max-model-len 4096\n";

    #[test]
    fn a_recipe_s_vllm_api_key_variable_is_taken_as_the_key_and_leaves_the_env() {
        let s = serve(request(&launch(ENV_KEY), vec![], &RecipeOverrides::default()).unwrap());
        let Some(ApiKeyAsk::Given(k)) = &s.api_key else {
            panic!("the env's key is the launch's key: {:?}", s.api_key);
        };
        assert_eq!(k.expose(), "sk-env-1");
        let part = s.recipe.unwrap();
        assert_eq!(part.env.0.keys().collect::<Vec<_>>(), ["OTHER"]);
        assert!(
            part.warnings.iter().any(|w| w.starts_with(
                "r.yaml: the recipe's env gives VLLM_API_KEY: it is taken as the API key"
            )),
            "{:?}",
            part.warnings
        );
        assert!(!format!("{:?}", part.warnings).contains("sk-env-1"));
    }

    #[test]
    fn the_user_s_api_key_wins_over_a_recipe_s_key_variable_even_with_recipe_env() {
        let o = RecipeOverrides {
            serve: Overrides {
                api_key: Some(ApiKeyAsk::Auto),
                ..Overrides::default()
            },
            keep_env: true,
            ..RecipeOverrides::default()
        };
        let s = serve(request(&launch(ENV_KEY), vec![], &o).unwrap());
        assert_eq!(s.api_key, Some(ApiKeyAsk::Auto));
        let part = s.recipe.unwrap();
        assert!(!part.env.0.contains_key("VLLM_API_KEY"));
        assert!(
            part.warnings.iter().any(|w| w
                == "r.yaml: --api-key replaces the key the recipe's env gives in VLLM_API_KEY"),
            "{:?}",
            part.warnings
        );
    }

    #[test]
    fn a_per_node_key_variable_is_refused() {
        let text = ENV_KEY.replace("sk-env-1", "k-{launch.node_rank}");
        let e = request(&launch(&text), vec![], &RecipeOverrides::default()).unwrap_err();
        assert_eq!(
            e.0[0].to_string(),
            "r.yaml: env.VLLM_API_KEY: VLLM_API_KEY is the vLLM API key, which cannot differ per node; give the key with --api-key KEY|auto|@FILE"
        );
    }

    #[test]
    fn a_job_name_is_a_valid_slug_of_the_recipe_s_name() {
        assert_eq!(
            job_name("GLM-4.7 Flash (NVFP4)").as_str(),
            "glm-4-7-flash-nvfp4"
        );
        assert_eq!(job_name("4x-spark").as_str(), "r-4x-spark");
        assert!(job_name(&"x".repeat(80)).as_str().len() <= 40);
    }
}
