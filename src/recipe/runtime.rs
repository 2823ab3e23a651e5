//! Which engine a recipe runs: a v2 `runtime:` name mapped to the engine that answers to it
//! (each engine lists its names, sparkrun's, and whether one means Ray:
//! `engines::spelling`), sparkrun's command hints when the field is empty, and the runtimes
//! refused by name: sparkrun's runtimes no engine answers to (ds4-cuda, mlx, …), and
//! anything unknown. Pure.

use crate::workload::engines::EngineKind;
use crate::workload::engines::spelling::{self, ProgramWords};

/// A v2 `runtime:` resolved: the engine, the runtime's name as the engine lists it, and
/// whether the runtime itself means Ray (`Some(true)`), never Ray (`Some(false)`) or leaves it
/// to the recipe (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeChoice {
    pub engine: EngineKind,
    pub runtime: &'static str,
    pub ray: Option<bool>,
}

/// Why a runtime is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeRefusal {
    #[error(
        "runtime {runtime:?} is not supported yet (spark-launch runs {} recipes)",
        engine_names()
    )]
    NotYet { runtime: String },
    #[error(
        "runtime {runtime:?} is not a runtime spark-launch knows (known: {})",
        spelling::runtime_names().join(", ")
    )]
    Unknown { runtime: String },
}

/// `vllm, trtllm and sglang`: the engines recipes run.
fn engine_names() -> String {
    let names: Vec<&str> = EngineKind::ALL
        .into_iter()
        .filter(|e| !e.engine().recipe().runtimes.is_empty())
        .map(|e| e.as_str())
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Runtimes sparkrun has that no engine here answers to (refused as not supported yet), with
/// the command words that hint at one when a recipe names no runtime.
const NOT_YET: [(&str, &[ProgramWords]); 4] = [
    ("ds4-cuda", &[]),
    ("modular-max", &[]),
    ("tokenary", &[]),
    ("mlx", &[]),
];

/// Resolves a v2 `runtime:` (empty: from the command's first words, as sparkrun's hints do).
pub fn resolve(runtime: &str, command: Option<&str>) -> Result<RuntimeChoice, RuntimeRefusal> {
    let hinted = command.and_then(|c| spelling::hinted(c).or_else(|| hint_not_yet(c)));
    let name = if runtime.trim().is_empty() {
        hinted.or_else(spelling::fallback_runtime).unwrap_or("")
    } else {
        runtime.trim()
    };
    if let Some((engine, r)) = spelling::runtime(name) {
        return Ok(RuntimeChoice {
            engine,
            runtime: r.name,
            ray: r.ray,
        });
    }
    if NOT_YET.iter().any(|(n, _)| *n == name) {
        Err(RuntimeRefusal::NotYet {
            runtime: name.to_string(),
        })
    } else {
        Err(RuntimeRefusal::Unknown {
            runtime: name.to_string(),
        })
    }
}

/// The not-yet runtime a command's first words hint at.
fn hint_not_yet(command: &str) -> Option<&'static str> {
    NOT_YET
        .iter()
        .find(|(_, hints)| hints.iter().any(|h| h.hints(command)))
        .map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkrun_runtime_names_map_to_engines_and_ray() {
        let r = |n| resolve(n, None).unwrap();
        assert_eq!(
            r("vllm"),
            RuntimeChoice {
                engine: EngineKind::Vllm,
                runtime: "vllm",
                ray: None
            }
        );
        assert_eq!(r("vllm-ray").ray, Some(true));
        assert_eq!(r("eugr-vllm").ray, Some(true));
        assert_eq!(r("vllm-distributed").ray, Some(false));
        assert_eq!(r("sglang").engine, EngineKind::Sglang);
        assert_eq!(r("trtllm").engine, EngineKind::Trtllm);
    }

    #[test]
    fn an_empty_runtime_is_read_from_the_command() {
        let r = |c| resolve("", Some(c)).map(|x| x.engine);
        assert_eq!(r("sglang serve --model-path m"), Ok(EngineKind::Sglang));
        assert_eq!(
            r("python3 -m sglang.launch_server --model-path m"),
            Ok(EngineKind::Sglang)
        );
        assert_eq!(r("trtllm-serve m"), Ok(EngineKind::Trtllm));
        assert_eq!(
            r("mpirun -n 2 trtllm-llmapi-launch trtllm-serve m"),
            Ok(EngineKind::Trtllm)
        );
        assert_eq!(r("vllm serve m"), Ok(EngineKind::Vllm));
        assert_eq!(resolve("", None).map(|x| x.engine), Ok(EngineKind::Vllm));
    }

    #[test]
    fn atlas_and_llama_cpp_run_on_their_engines_and_others_are_refused_naming_the_runtime() {
        assert_eq!(
            resolve("ds4-cuda", None).unwrap_err().to_string(),
            "runtime \"ds4-cuda\" is not supported yet (spark-launch runs vllm, trtllm, sglang, llamacpp and atlas recipes)"
        );
        assert!(matches!(
            resolve("mlx", None),
            Err(RuntimeRefusal::NotYet { .. })
        ));
        assert_eq!(
            resolve("atlas", None).map(|c| c.engine),
            Ok(EngineKind::Atlas)
        );
        assert_eq!(
            resolve("", Some("llama-server -m /m/x.gguf")).map(|x| x.engine),
            Ok(EngineKind::Llamacpp)
        );
        assert_eq!(
            resolve("ollama", None).unwrap_err(),
            RuntimeRefusal::Unknown {
                runtime: "ollama".into()
            }
        );
        assert_eq!(
            resolve("ollama", None).unwrap_err().to_string(),
            "runtime \"ollama\" is not a runtime spark-launch knows (known: vllm, vllm-distributed, vllm-ray, eugr-vllm, trtllm, sglang, llama-cpp, atlas)"
        );
    }

    #[test]
    fn no_runtime_refused_as_not_yet_is_one_an_engine_answers_to() {
        for (name, _) in NOT_YET {
            assert!(spelling::runtime(name).is_none(), "{name}");
        }
    }
}
