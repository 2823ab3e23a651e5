//! Reading an engine command line: which engine its first words start (`vllm serve`,
//! `sglang serve`, `python3 -m sglang.launch_server`, `trtllm-serve`, …), and the values
//! spark-launch plans from — the model, its revision, tensor/pipeline/data parallel sizes, a
//! Ray executor — as the engine's own parser would read them (the last occurrence wins;
//! `--flag value` and `--flag=value`; the spellings and abbreviations the engine's parser
//! reads, as the engine says: `engines::match_flag`). Also takes the API key out of the
//! words, in every spelling of its flag, so no key stays in an argv. Pure.

use crate::workload::engines::{
    self, EngineKind, FlagMatch, FlagValues, RecipeFlag, ServingEngine, match_flag, spelling,
};

/// The engine a command starts, and the index of its first argument (as the engines spell
/// their programs: `engines::spelling`).
pub fn program(argv: &[String]) -> Option<(EngineKind, usize)> {
    spelling::program(argv)
}

/// The fix for a line that starts no engine: the program words every engine's line may start
/// with (`vllm serve`, `python3 -m sglang.launch_server`, …).
pub fn program_fix() -> String {
    let mut shown = spelling::programs_shown();
    let last = shown.pop().unwrap_or_default();
    if shown.is_empty() {
        format!("the command must start with {last}")
    } else {
        format!("the command must start with {} or {last}", shown.join(", "))
    }
}

/// A flag compared as the engine's parser reads it (vLLM reads `_` for `-` in long flags).
fn same_flag(engine: &dyn ServingEngine, word: &str, flag: &str) -> bool {
    engine.flag_name(word) == flag
}

/// The last value given to any of `flags` (`--f v` or `--f=v`), with the word index.
fn last_value(
    engine: &dyn ServingEngine,
    args: &[String],
    flags: &[&str],
) -> Option<(usize, String)> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        let (name, inline) = match w.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v)),
            _ => (w.as_str(), None),
        };
        if flags.iter().any(|f| same_flag(engine, name, f)) {
            match inline {
                Some(v) => found = Some((i, v.to_string())),
                None => {
                    if let Some(v) = args.get(i + 1) {
                        found = Some((i, v.clone()));
                        i += 1;
                    }
                }
            }
        }
        i += 1;
    }
    found
}

/// What the planner needs from an engine line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineFacts {
    pub model: Option<String>,
    pub revision: Option<String>,
    /// Each as written (`Some("2")`); the caller turns them into counts.
    pub tp: Option<String>,
    pub pp: Option<String>,
    pub dp: Option<String>,
    /// The expert-parallel size of an engine whose expert groups add ranks (Atlas's
    /// `--ep-size`).
    pub ep: Option<String>,
    /// vLLM's `--distributed-executor-backend ray`.
    pub ray: bool,
}

/// The last value of each flag spark-launch writes itself, as the engine's parser reads the
/// words ([`match_flag`]: `--tensor-parallel 8` is vLLM's `--tensor-parallel-size 8`).
fn owned_values(engine: &dyn ServingEngine, args: &[String]) -> Vec<(RecipeFlag, String)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        i += 1;
        let (name, inline) = match w.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v)),
            _ => (w.as_str(), None),
        };
        let FlagMatch::Owned(f) = match_flag(engine, name) else {
            continue;
        };
        let value = match (inline, f.values) {
            (Some(v), _) => Some(v.to_string()),
            (None, FlagValues::None) => None,
            (None, _) => args.get(i).cloned().inspect(|_| i += 1),
        };
        if let Some(v) = value {
            found.retain(|(flag, _)| *flag != f.flag);
            found.push((f.flag, v));
        }
    }
    found
}

/// Reads the facts of a line whose engine starts at `args_start`.
pub fn facts(kind: EngineKind, argv: &[String], args_start: usize) -> LineFacts {
    let engine = kind.engine();
    let spelling = engine.recipe();
    let args = argv.get(args_start..).unwrap_or(&[]);
    let owned = owned_values(engine, args);
    let value = |flag: RecipeFlag| {
        owned
            .iter()
            .find(|(f, _)| *f == flag)
            .map(|(_, v)| v.clone())
    };
    let positional = if spelling.model_positional {
        args.first().filter(|a| !a.starts_with('-')).cloned()
    } else {
        None
    };
    let ray = engine.ray() && value(RecipeFlag::Executor).is_some_and(|v| v == "ray");
    LineFacts {
        model: value(RecipeFlag::Model).or(positional),
        revision: value(RecipeFlag::Revision),
        tp: value(RecipeFlag::Tp),
        pp: value(RecipeFlag::Pp),
        dp: last_value(engine, args, spelling.data_parallel).map(|(_, v)| v),
        ep: value(RecipeFlag::ExpertParallel),
        ray,
    }
}

/// Takes the API key out of `argv` as the engine its program words start reads its key flag
/// (in full, in another spelling, abbreviated: `engines::take_api_key`), so no key stays in
/// an argv; returns the last key given. A line that starts no engine loses every `--api-key`.
pub fn take_api_key(argv: &mut Vec<String>) -> Option<String> {
    if let Some((engine, start)) = program(argv) {
        let mut args = argv.split_off(start);
        let key = engines::take_api_key(engine.engine(), &mut args);
        argv.extend(args);
        return key;
    }
    let mut key = None;
    let mut out = Vec::with_capacity(argv.len());
    let mut words = std::mem::take(argv).into_iter();
    while let Some(w) = words.next() {
        if w == "--api-key" {
            key = words.next().or(key);
        } else if let Some(v) = w.strip_prefix("--api-key=") {
            key = Some(v.to_string());
        } else {
            out.push(w);
        }
    }
    *argv = out;
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_program_names_the_engine() {
        assert_eq!(program(&w("vllm serve m")), Some((EngineKind::Vllm, 2)));
        assert_eq!(
            program(&w(
                "/usr/bin/python3.12 -m sglang.launch_server --model-path m"
            )),
            Some((EngineKind::Sglang, 3))
        );
        assert_eq!(
            program(&w("sglang serve --model-path m")),
            Some((EngineKind::Sglang, 2))
        );
        assert_eq!(
            program(&w("trtllm-serve m --tp_size 2")),
            Some((EngineKind::Trtllm, 1))
        );
        assert_eq!(program(&w("python3 server.py")), None);
    }

    #[test]
    fn vllm_facts_take_the_last_value_in_any_spelling() {
        let argv = w(
            "vllm serve org/m -tp 1 --tensor_parallel_size=2 --pipeline-parallel-size 2 --revision abc --distributed-executor-backend=ray",
        );
        let f = facts(EngineKind::Vllm, &argv, 2);
        assert_eq!(f.model.as_deref(), Some("org/m"));
        assert_eq!(f.tp.as_deref(), Some("2"));
        assert_eq!(f.pp.as_deref(), Some("2"));
        assert_eq!(f.revision.as_deref(), Some("abc"));
        assert!(f.ray);
    }

    #[test]
    fn vllm_facts_read_abbreviations_as_vllm_does() {
        let argv = w(
            "vllm serve org/m --tensor-parallel 8 --pipeline_parallel=2 --distributed-executor ray",
        );
        let f = facts(EngineKind::Vllm, &argv, 2);
        assert_eq!((f.tp.as_deref(), f.pp.as_deref()), (Some("8"), Some("2")));
        assert!(f.ray);
    }

    #[test]
    fn sglang_facts_read_its_own_spellings() {
        let argv = w("python3 -m sglang.launch_server --model-path org/m --tp 2 --dp-size 2");
        let f = facts(EngineKind::Sglang, &argv, 3);
        assert_eq!(f.model.as_deref(), Some("org/m"));
        assert_eq!(f.tp.as_deref(), Some("2"));
        assert_eq!(f.dp.as_deref(), Some("2"));
        assert!(!f.ray);
    }

    #[test]
    fn an_api_key_is_taken_out_of_the_words() {
        let mut argv = w("vllm serve m --api-key sk-1 --port 1 --api-key=sk-2");
        assert_eq!(take_api_key(&mut argv).as_deref(), Some("sk-2"));
        assert_eq!(argv, w("vllm serve m --port 1"));
    }
}
