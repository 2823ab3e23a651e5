//! Which engine a recipe runs: the engines spark-launch takes from recipes (vLLM, SGLang,
//! TensorRT-LLM, as data), how a v2 `runtime:` name maps to one (sparkrun's names, its command
//! hints when the field is empty, and its Ray signals for vLLM), and the runtimes refused by
//! name (llama-cpp, atlas, anything unknown). Pure.

use std::fmt;

use serde::Serialize;

/// An engine a recipe can run. The lead maps it onto the engine seam's own enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecipeEngine {
    Vllm,
    Sglang,
    Trtllm,
}

impl RecipeEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            RecipeEngine::Vllm => "vllm",
            RecipeEngine::Sglang => "sglang",
            RecipeEngine::Trtllm => "trtllm",
        }
    }
}

impl fmt::Display for RecipeEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A v2 `runtime:` resolved: the engine, and for vLLM whether the runtime itself means Ray
/// (`vllm-ray`, `eugr-vllm`), native (`vllm-distributed`) or leaves it to the recipe (`vllm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeChoice {
    pub engine: RecipeEngine,
    pub ray: Option<bool>,
}

/// Why a runtime is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeRefusal {
    #[error(
        "runtime {runtime:?} is not supported yet (spark-launch runs vllm, sglang and trtllm recipes)"
    )]
    NotYet { runtime: String },
    #[error(
        "runtime {runtime:?} is not a runtime spark-launch knows (known: vllm, vllm-distributed, vllm-ray, eugr-vllm, sglang, trtllm)"
    )]
    Unknown { runtime: String },
}

/// Runtimes sparkrun has that spark-launch refuses for now.
const NOT_YET: [&str; 6] = [
    "llama-cpp",
    "atlas",
    "ds4-cuda",
    "modular-max",
    "tokenary",
    "mlx",
];

/// Resolves a v2 `runtime:` (empty: from the command's first words, as sparkrun's hints do).
pub fn resolve(runtime: &str, command: Option<&str>) -> Result<RuntimeChoice, RuntimeRefusal> {
    let name = if runtime.trim().is_empty() {
        command.map(hint).unwrap_or("vllm")
    } else {
        runtime.trim()
    };
    let choice = |engine, ray| Ok(RuntimeChoice { engine, ray });
    match name {
        "vllm" => choice(RecipeEngine::Vllm, None),
        "vllm-distributed" => choice(RecipeEngine::Vllm, Some(false)),
        "vllm-ray" | "eugr-vllm" => choice(RecipeEngine::Vllm, Some(true)),
        "sglang" => choice(RecipeEngine::Sglang, None),
        "trtllm" => choice(RecipeEngine::Trtllm, None),
        other if NOT_YET.contains(&other) => Err(RuntimeRefusal::NotYet {
            runtime: other.to_string(),
        }),
        other => Err(RuntimeRefusal::Unknown {
            runtime: other.to_string(),
        }),
    }
}

/// sparkrun's command hints: the runtime a command's first words name.
fn hint(command: &str) -> &'static str {
    let words: Vec<&str> = command.split_whitespace().take(3).collect();
    let python = |w: &str| w == "python" || w.starts_with("python3");
    match words.as_slice() {
        ["sglang", "serve", ..] => "sglang",
        [p, "-m", "sglang.launch_server", ..] if python(p) => "sglang",
        ["llama-server", ..] => "llama-cpp",
        ["trtllm-serve", ..] => "trtllm",
        ["mpirun", ..] if command.contains("trtllm") => "trtllm",
        _ => "vllm",
    }
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
                engine: RecipeEngine::Vllm,
                ray: None
            }
        );
        assert_eq!(r("vllm-ray").ray, Some(true));
        assert_eq!(r("eugr-vllm").ray, Some(true));
        assert_eq!(r("vllm-distributed").ray, Some(false));
        assert_eq!(r("sglang").engine, RecipeEngine::Sglang);
        assert_eq!(r("trtllm").engine, RecipeEngine::Trtllm);
    }

    #[test]
    fn an_empty_runtime_is_read_from_the_command() {
        let r = |c| resolve("", Some(c)).map(|x| x.engine);
        assert_eq!(r("sglang serve --model-path m"), Ok(RecipeEngine::Sglang));
        assert_eq!(
            r("python3 -m sglang.launch_server --model-path m"),
            Ok(RecipeEngine::Sglang)
        );
        assert_eq!(r("trtllm-serve m"), Ok(RecipeEngine::Trtllm));
        assert_eq!(r("vllm serve m"), Ok(RecipeEngine::Vllm));
        assert_eq!(resolve("", None).map(|x| x.engine), Ok(RecipeEngine::Vllm));
    }

    #[test]
    fn llama_cpp_atlas_and_unknown_runtimes_are_refused_naming_the_runtime() {
        assert_eq!(
            resolve("llama-cpp", None).unwrap_err().to_string(),
            "runtime \"llama-cpp\" is not supported yet (spark-launch runs vllm, sglang and trtllm recipes)"
        );
        assert!(matches!(
            resolve("atlas", None),
            Err(RuntimeRefusal::NotYet { .. })
        ));
        assert!(matches!(
            resolve("", Some("llama-server -hf x")),
            Err(RuntimeRefusal::NotYet { .. })
        ));
        assert_eq!(
            resolve("ollama", None).unwrap_err(),
            RuntimeRefusal::Unknown {
                runtime: "ollama".into()
            }
        );
    }
}
