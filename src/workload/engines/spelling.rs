//! How community recipes write an engine, as each engine says it ([`RecipeSpelling`], plain
//! data): the program words its server line starts with, whether the model is that line's
//! first argument, its data-parallel flags, the runtime names a recipe's `runtime:` gives it
//! (sparkrun's), the command hints that name it when `runtime:` is empty, and the flag table a
//! line is built from when a recipe has no `command:`. The look-ups over every engine
//! ([`program`], [`runtime`], [`hinted`], [`fallback_runtime`]) are here too, so the recipe
//! readers ask by words and names and never name an engine themselves.
//!
//! Pure: words in, engines out.

use super::EngineKind;

/// Words a server line (or a hint) starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramWords {
    /// A program and its first arguments: `vllm serve`, `trtllm-serve`.
    Command(&'static [&'static str]),
    /// A Python module: `python`/`python3…` `-m sglang.launch_server`.
    Module(&'static str),
    /// `mpirun …` whose line names this word anywhere (a hint only: spark-launch writes its own
    /// `mpirun`).
    Mpirun(&'static str),
}

fn is_python(word: &str) -> bool {
    word == "python" || word.starts_with("python3")
}

impl ProgramWords {
    /// How many words of `argv` these are, when `argv` starts with them (the program compared
    /// by its file name, whatever folder is written before it).
    pub fn starts(&self, argv: &[String]) -> Option<usize> {
        let first = argv.first()?;
        let base = first.rsplit('/').next().unwrap_or(first);
        let word = |i: usize| argv.get(i).map(String::as_str);
        match self {
            ProgramWords::Command(words) => {
                let (program, rest) = words.split_first()?;
                let same = base == *program
                    && rest
                        .iter()
                        .enumerate()
                        .all(|(i, w)| word(i + 1) == Some(*w));
                same.then_some(words.len())
            }
            ProgramWords::Module(module) => {
                (is_python(base) && word(1) == Some("-m") && word(2) == Some(*module)).then_some(3)
            }
            ProgramWords::Mpirun(_) => None,
        }
    }

    /// Whether a command's first words hint at these, as sparkrun reads a command whose
    /// recipe names no runtime (the words as written: no folder taken off).
    pub fn hints(&self, command: &str) -> bool {
        let words: Vec<&str> = command.split_whitespace().take(3).collect();
        match self {
            ProgramWords::Command(w) => words.starts_with(w),
            ProgramWords::Module(module) => {
                matches!(words.as_slice(), [p, "-m", m, ..] if is_python(p) && m == module)
            }
            ProgramWords::Mpirun(word) => {
                words.first() == Some(&"mpirun") && command.contains(word)
            }
        }
    }

    /// As a message writes them: `vllm serve`, `python3 -m sglang.launch_server`.
    pub fn shown(&self) -> String {
        match self {
            ProgramWords::Command(words) => words.join(" "),
            ProgramWords::Module(module) => format!("python3 -m {module}"),
            ProgramWords::Mpirun(word) => format!("mpirun … {word}"),
        }
    }
}

/// A runtime name a recipe's `runtime:` gives an engine, and what it says about Ray.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecipeRuntime {
    pub name: &'static str,
    /// `Some(true)`: this runtime runs the ranks over Ray; `Some(false)`: never; `None`: as the
    /// recipe asks.
    pub ray: Option<bool>,
}

/// A count key passed only where one launch owns every replica: on one node, or where the
/// `unless` key is true (SGLang's `--dp-size` across nodes needs DP attention). Elsewhere it
/// is left out with a warning naming `flag` and `unless`, as sparkrun leaves it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeGated {
    pub key: &'static str,
    pub flag: &'static str,
    pub unless: &'static str,
}

/// The table sparkrun builds an engine's line from when a v2 recipe has no `command:`:
/// `defaults` keys → flags, emitted in table order (the recipe reader applies sparkrun's rules:
/// booleans as bare flags, negatable ones as `--no-…` when false, structured values as JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagTable {
    /// The program words of the built line: `vllm serve`.
    pub program: &'static [&'static str],
    /// The flag the model follows (`--model-path`); `None`: the model is the first argument.
    pub model_flag: Option<&'static str>,
    /// The flag a Hub model's revision follows, when the line carries one (`--revision`).
    pub revision_flag: Option<&'static str>,
    /// Recipe key → flag, in sparkrun's order. `tensor_parallel`'s flag comes first in the line.
    pub flags: &'static [(&'static str, &'static str)],
    /// Keys that are flags without a value.
    pub bools: &'static [&'static str],
    /// Booleans that are on unless turned off: `false` becomes `--no-<flag>`.
    pub negatable: &'static [&'static str],
    /// Keys of `flags` not emitted in the table walk (written first, by a rule, or read for
    /// something else: vLLM's executor backend is spark-launch's Ray choice).
    pub skip: &'static [&'static str],
    /// `(alias, key)`: a key the runner also reads under another name when `key` is not given.
    pub aliases: &'static [(&'static str, &'static str)],
    /// A count key passed only where one launch owns the replicas.
    pub node_gated: Option<NodeGated>,
}

/// How community recipes write one engine. [`RecipeSpelling::NONE`]: recipes cannot run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecipeSpelling {
    /// The words a recipe's server line starts with, each form the engine's images run.
    pub programs: &'static [ProgramWords],
    /// Whether the model is the first argument after the program words (`vllm serve MODEL`)
    /// when no flag names it.
    pub model_positional: bool,
    /// The data-parallel size's flags, as the engine's parser spells them (compared after
    /// `ServingEngine::flag_name`).
    pub data_parallel: &'static [&'static str],
    /// The names a recipe's `runtime:` gives this engine.
    pub runtimes: &'static [RecipeRuntime],
    /// Command words that name this engine when a recipe's `runtime:` is empty (sparkrun's
    /// hints).
    pub hints: &'static [ProgramWords],
    /// Whether this engine's first runtime is the one sparkrun assumes when a recipe names
    /// none and its command hints at no other.
    pub fallback: bool,
    /// The `defaults` key whose value `ray` asks for the Ray executor.
    pub ray_key: Option<&'static str>,
    /// sparkrun's flag table for a recipe without `command:`; `None`: such a recipe is refused.
    pub table: Option<&'static FlagTable>,
    /// Whether a recipe's own tensor- or pipeline-parallel size alone sizes the job: a
    /// `min_nodes` (or `cluster_only`) above the nodes that size fills is said, not refused, as
    /// sparkrun's runtime for the engine trims the hosts to that count (llama.cpp's).
    pub sized_by_parallel: bool,
    /// Whether a recipe's command may be a shell script that runs commands before the server
    /// (`if …; fi && llama-server …`): its runtime hands the command to bash whole on one
    /// node, so the commands run there first (llama.cpp's solo runs). Refused across nodes.
    pub script: bool,
}

impl RecipeSpelling {
    /// An engine recipes do not run.
    pub const NONE: RecipeSpelling = RecipeSpelling {
        programs: &[],
        model_positional: false,
        data_parallel: &[],
        runtimes: &[],
        hints: &[],
        fallback: false,
        ray_key: None,
        table: None,
        sized_by_parallel: false,
        script: false,
    };
}

/// The engine whose server line `argv` starts, and the index of its first argument.
pub fn program(argv: &[String]) -> Option<(EngineKind, usize)> {
    EngineKind::ALL.into_iter().find_map(|kind| {
        kind.engine()
            .recipe()
            .programs
            .iter()
            .find_map(|p| p.starts(argv))
            .map(|start| (kind, start))
    })
}

/// Every program spelling a recipe's line may start with, as a message lists them (one that
/// only adds words to another is left out: `trtllm-serve` stands for `trtllm-serve serve`).
pub fn programs_shown() -> Vec<String> {
    let all: Vec<String> = EngineKind::ALL
        .into_iter()
        .flat_map(|kind| kind.engine().recipe().programs.iter().map(|p| p.shown()))
        .collect();
    all.iter()
        .filter(|p| !all.iter().any(|o| p.starts_with(&format!("{o} "))))
        .cloned()
        .collect()
}

/// The engine a recipe's `runtime:` name runs on, with the runtime as the engine lists it.
pub fn runtime(name: &str) -> Option<(EngineKind, &'static RecipeRuntime)> {
    EngineKind::ALL.into_iter().find_map(|kind| {
        kind.engine()
            .recipe()
            .runtimes
            .iter()
            .find(|r| r.name == name)
            .map(|r| (kind, r))
    })
}

/// Every runtime name an engine answers to, engine by engine.
pub fn runtime_names() -> Vec<&'static str> {
    EngineKind::ALL
        .into_iter()
        .flat_map(|kind| kind.engine().recipe().runtimes.iter().map(|r| r.name))
        .collect()
}

/// The runtime an engine's hint finds in a command's first words (its first runtime name).
pub fn hinted(command: &str) -> Option<&'static str> {
    EngineKind::ALL.into_iter().find_map(|kind| {
        let s = kind.engine().recipe();
        s.hints
            .iter()
            .any(|h| h.hints(command))
            .then(|| s.runtimes.first().map(|r| r.name))
            .flatten()
    })
}

/// The `defaults` key an engine's flag table gives its expert-parallel size under (the key
/// whose flag the engine owns as [`super::RecipeFlag::ExpertParallel`]), for an engine whose
/// expert groups add ranks; `None` for the others.
pub fn expert_parallel_key(kind: EngineKind) -> Option<&'static str> {
    let engine = kind.engine();
    let table = engine.recipe().table?;
    table.flags.iter().find_map(|(key, flag)| {
        engine
            .owned_flags()
            .iter()
            .any(|f| f.name == *flag && f.flag == super::RecipeFlag::ExpertParallel)
            .then_some(*key)
    })
}

/// A recipe registry of an engine's own, under the `@name` sparkrun reserves for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecipeNamespace {
    /// `atlas`, as in `@atlas/NAME` (the sub-registry the registry's manifest names).
    pub name: &'static str,
    /// The git URL sparkrun clones it from.
    pub url: &'static str,
}

/// The engine and registry of a `@name` namespace an engine reserves (`atlas`).
pub fn namespace(name: &str) -> Option<(EngineKind, RecipeNamespace)> {
    EngineKind::ALL.into_iter().find_map(|kind| {
        kind.engine()
            .recipe_namespace()
            .filter(|n| n.name == name)
            .map(|n| (kind, n))
    })
}

/// The runtime sparkrun assumes when a recipe names none and its command hints at none.
pub fn fallback_runtime() -> Option<&'static str> {
    EngineKind::ALL.into_iter().find_map(|kind| {
        let s = kind.engine().recipe();
        s.fallback
            .then(|| s.runtimes.first().map(|r| r.name))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn program_words_match_by_the_program_s_file_name_and_count_the_words_they_take() {
        let serve = ProgramWords::Command(&["vllm", "serve"]);
        assert_eq!(serve.starts(&w("/usr/local/bin/vllm serve m")), Some(2));
        assert_eq!(serve.starts(&w("vllm m")), None);
        let module = ProgramWords::Module("sglang.launch_server");
        assert_eq!(
            module.starts(&w("/usr/bin/python3.12 -m sglang.launch_server --x")),
            Some(3)
        );
        assert_eq!(module.starts(&w("pip -m sglang.launch_server")), None);
        assert_eq!(ProgramWords::Mpirun("x").starts(&w("mpirun x")), None);
    }

    #[test]
    fn hints_read_the_words_as_written() {
        let module = ProgramWords::Module("sglang.launch_server");
        assert!(module.hints("python3 -m sglang.launch_server --model-path m"));
        assert!(!module.hints("/usr/bin/python3 -m sglang.launch_server"));
        assert!(ProgramWords::Mpirun("trtllm").hints("mpirun -n 2 trtllm-llmapi-launch x"));
        assert!(!ProgramWords::Mpirun("trtllm").hints("mpirun -n 2 other"));
        assert!(ProgramWords::Command(&["trtllm-serve"]).hints("trtllm-serve m"));
    }

    #[test]
    fn every_runtime_name_and_program_belongs_to_one_engine() {
        let names = runtime_names();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} is given twice");
        }
        let mut shown = programs_shown();
        let all = shown.len();
        shown.sort();
        shown.dedup();
        assert_eq!(shown.len(), all);
        assert!(fallback_runtime().is_some_and(|r| runtime(r).is_some()));
    }
}
