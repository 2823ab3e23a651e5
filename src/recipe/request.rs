//! A recipe as a launch file's part of a serving request (`up RECIPE`): the recipe's engine,
//! image, model, revision and shape become a [`PartialServe`], each value marked as the
//! recipe's; its engine line is split by the engine (`engines::split_recipe_args`) into the
//! words kept verbatim, in order, and the flags the engine writes itself, whose values become
//! options (port, rendezvous, served name) or are dropped with a warning (ranks, the head's
//! address); its environment, `pre_exec` commands and mods travel as the request's
//! [`RecipePart`]. What the user
//! typed beside `up` is laid over it by `workload::partial::layer`, which names both values
//! where a flag contradicts the recipe (`--tp 4` over the recipe's 2). Pure.

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
use crate::workload::endpoint::ApiKeyAsk;
use crate::workload::engines::{
    ApiKeySupport, EngineOptions, OwnedArg, RecipeFlag, ServingEngine, split_recipe_args,
};
use crate::workload::partial::{Given, Origin, PartialServe};
use crate::workload::recipe_part::{RecipeModel, RecipePart};

/// The serving launch `launch` asks for, with its mods' files, as a launch file's part of a
/// request (`workload::partial::layer` lays the flags over it).
pub fn ask(launch: &RecipeLaunch, mods: Vec<ModFiles>) -> Result<PartialServe, RecipeErrors> {
    let err = |field: &str, problem: String| RecipeError::new(&launch.file, field, problem);
    let kind = launch.engine;
    let engine = kind.engine();
    let file = launch.file.as_str();
    let mut warnings: Vec<String> = launch
        .warnings
        .iter()
        .map(|w| format!("{file}: {w}"))
        .collect();
    let mut errors = secret_names(launch);
    let model = ModelSource::parse(&launch.model, launch.model_revision.as_deref())
        .map_err(|e| errors.push(err("model", e.to_string())))
        .ok();
    let mut tuning = EngineOptions {
        ray: launch.ray && engine.ray(),
        ..EngineOptions::default()
    };
    let (program, args) = engine_words(launch);
    // Where an engine has two spellings (SGLang), the recipe's is kept: images differ in
    // which one they ship.
    tuning.launcher = engine.recipe_launcher(&program);
    let split = split_recipe_args(engine, &args);
    errors.extend(split.refused.into_iter().map(|r| err("command", r)));
    let mut taken = Taken::default();
    for owned in &split.owned {
        match take(owned, &mut taken, &mut tuning) {
            Ok(Some(w)) => warnings.push(format!("{file}: {w}")),
            Ok(None) => {}
            Err(problem) => errors.push(err("command", problem)),
        }
    }
    if let Some(host) = taken
        .host
        .filter(|h| !["0.0.0.0", "::", ""].contains(&h.as_str()))
    {
        warnings.push(format!(
            "{file}: the recipe's --host {host} is not used: the API listens as --bind says (every interface unless told)"
        ));
    }
    let mut env = launch.env.clone();
    let env_key = env_api_key(launch, engine, &mut env, &mut errors);
    let api_key = api_key(launch, env_key, &mut warnings);
    let models = other_models(launch, &mut errors);
    let Some(model) = model.filter(|_| errors.is_empty()) else {
        return Err(RecipeErrors(super::common::locate_all(
            &launch.text,
            errors,
        )));
    };
    let served_name = served_name(taken.served, file, &mut warnings);
    let part = RecipePart {
        name: launch.name.clone(),
        file: launch.file.clone(),
        format: launch.format,
        program,
        served_name,
        env,
        keep_env: false,
        pre_exec: launch.pre_exec.clone(),
        before_engine: launch.before_engine.clone(),
        mods,
        models,
        entrypoint: launch.entrypoint.clone(),
        solo: launch.solo,
        warnings,
    };
    let given = |what: &str| Origin::file(file, what);
    Ok(PartialServe {
        engine: Some(Given::new(kind, given("the recipe's runtime"))),
        model: Some(Given::new(model, given("the recipe's model"))),
        job: Some(Given::new(
            job_name(&launch.name),
            given("the recipe's name"),
        )),
        image: launch
            .image
            .clone()
            .map(|i| Given::new(i, given("the recipe's container"))),
        port: taken
            .port
            .map(|p| Given::new(p, given("the recipe's --port"))),
        tp: Some(Given::new(
            launch.tp,
            given("the recipe's tensor-parallel size"),
        )),
        pp: Some(Given::new(
            launch.pp,
            given("the recipe's pipeline-parallel size"),
        )),
        engine_args: Some(Given::new(split.kept, given("the recipe's command"))),
        api_key,
        tuning,
        recipe: Some(Box::new(part)),
        node_bounds: Some(launch.node_bounds),
        ..PartialServe::default()
    })
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
        // Sized from the recipe already; the engine writes it on every rank.
        RecipeFlag::ExpertParallel => {
            tuning.expert_parallel = Some(
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        format!(
                            "the expert-parallel size {value:?} in `{}` is not a count",
                            owned.written()
                        )
                    })?,
            );
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

/// The key a recipe gives: one written in its command over one in its env (the engine reads
/// its command's key first). What is said about it is said only when no `--api-key` replaces
/// it; the key itself is never shown.
fn api_key(
    launch: &RecipeLaunch,
    env: Option<EnvKey>,
    warnings: &mut Vec<String>,
) -> Option<Given<ApiKeyAsk>> {
    let file = &launch.file;
    let env_var = env.as_ref().filter(|e| e.key.is_some()).map(|e| e.var);
    if let Some(e) = env.as_ref().filter(|e| e.key.is_none()) {
        warnings.push(format!(
            "{file}: the recipe's env sets {} empty: no key from it",
            e.var
        ));
    }
    match (&launch.api_key, env_var) {
        (Some(k), _) => {
            let mut g = Given::file(
                ApiKeyAsk::Given(k.clone()),
                file,
                "the key written in the recipe's command",
            );
            g.notes.push(format!(
                "{file}: the recipe's command carries an --api-key: the API enforces it (a key written in a shared recipe is no secret)"
            ));
            if let Some(var) = env_var {
                g.notes.push(format!(
                    "{file}: the key the recipe's env gives in {var} is not used: the command's key wins, as the engine reads them"
                ));
            }
            Some(g)
        }
        (None, Some(var)) => {
            let key = env.and_then(|e| e.key)?;
            let mut g = Given::file(
                ApiKeyAsk::Given(key),
                file,
                format!("the key the recipe's env gives in {var}"),
            );
            g.notes.push(format!(
                "{file}: the recipe's env gives {var}: it is taken as the API key, enforced as --api-key is (never on a command line, <set> in plans; a key written in a shared recipe is no secret)"
            ));
            Some(g)
        }
        (None, None) => None,
    }
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
        Fit::No(problems.into_iter().map(|p| p.problem.what).collect())
    })
}

/// The models `launch` stages beside its model, as Hub sources; one that is not a Hub repo
/// (`ORG/NAME`) is an error at the field that names it.
fn other_models(launch: &RecipeLaunch, errors: &mut Vec<RecipeError>) -> Vec<RecipeModel> {
    let mut out = Vec::new();
    for m in &launch.models {
        match ModelSource::parse(&m.repo, m.revision.as_deref()) {
            Ok(source @ ModelSource::Hub { .. }) => out.push(RecipeModel {
                source,
                ranks: m.ranks.clone(),
            }),
            Ok(ModelSource::Local { .. }) => errors.push(
                RecipeError::new(
                    &launch.file,
                    &m.field,
                    format!(
                        "{} is a folder; a model besides the recipe's is staged from the Hub",
                        m.repo
                    ),
                )
                .fix("name it ORG/NAME"),
            ),
            Err(e) => errors.push(RecipeError::new(&launch.file, &m.field, e.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::{RecipeInput, parse};
    use crate::workload::endpoint::Bind;
    use crate::workload::engines::{EngineKind, Launcher};
    use crate::workload::launch::ServeRequest;
    use crate::workload::partial;

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

    /// The recipe's launch with `flags` laid over it, through the one merge; a refusal as
    /// its first line.
    fn request(l: &RecipeLaunch, flags: PartialServe) -> Result<ServeRequest, String> {
        let ask = ask(l, vec![]).map_err(|e| e.0[0].to_string())?;
        partial::layer(ask, flags).map_err(|e| e.to_string())
    }

    fn serve(r: Result<ServeRequest, String>) -> ServeRequest {
        r.unwrap()
    }

    #[test]
    fn the_recipe_s_settings_reach_the_engine_verbatim_and_its_owned_flags_become_options() {
        let s = serve(request(&launch(V2), PartialServe::default()));
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
        let o = PartialServe {
            port: Given::flag_opt(Some(8001), "--port"),
            tp: Given::flag_opt(Some(2), "--tp"),
            ..PartialServe::default()
        };
        let s = serve(request(&launch(V2), o));
        assert_eq!(s.serve.port, 8001);
        let w = &s.recipe.unwrap().warnings;
        assert!(
            w.iter()
                .any(|w| w == "r.yaml: --port 8001 replaces the recipe's --port 9000"),
            "{w:?}"
        );
        let o = PartialServe {
            tp: Given::flag_opt(Some(4), "--tp"),
            ..PartialServe::default()
        };
        let e = request(&launch(V2), o).unwrap_err();
        assert_eq!(
            e,
            "r.yaml: max_nodes: --tp 4 fills 4 nodes but the recipe runs on at most 2; give a --tp that fits the recipe's max_nodes"
        );
    }

    #[test]
    fn an_sglang_recipe_keeps_its_launcher_and_its_settings_and_gives_up_its_shape() {
        let l = launch(
            "recipe_version: \"2\"\nmodel: org/demo\nruntime: sglang\nmin_nodes: 2\ndefaults:\n  tensor_parallel: 2\ncommand: sglang serve --model-path {model} --tp-size {tensor_parallel} --port 30001 --dist-init-addr 10.0.0.1:5000 --mem-fraction-static 0.8\n",
        );
        let s = serve(request(&l, PartialServe::default()));
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
        let o = PartialServe {
            bind: Given::flag_opt(Some(Bind::Fabric), "--bind"),
            ..PartialServe::default()
        };
        let s = serve(request(&l, o));
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
        let e = request(&l, PartialServe::default()).unwrap_err();
        let text = e;
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
        let e = request(&l, PartialServe::default()).unwrap_err();
        let text = e;
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
        let s = serve(request(&launch(ENV_KEY), PartialServe::default()));
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
        let o = PartialServe {
            api_key: Given::flag_opt(Some(ApiKeyAsk::Auto), "--api-key"),
            keep_recipe_env: Given::flag_opt(Some(true), "--recipe-env"),
            ..PartialServe::default()
        };
        let s = serve(request(&launch(ENV_KEY), o));
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
        let e = request(&launch(&text), PartialServe::default()).unwrap_err();
        assert_eq!(
            e,
            "r.yaml:6: env.VLLM_API_KEY: VLLM_API_KEY is the vLLM API key, which cannot differ per node; give the key with --api-key KEY|auto|@FILE"
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
