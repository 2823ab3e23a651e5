//! `--set KEY=VALUE` over a recipe's `defaults`: the value read as YAML (`0.8` a number, `true`
//! a boolean, anything unreadable as text), one plain key per `--set` (recipes have no nested
//! defaults), later ones winning. `--set KEY=` is the empty text, as sparkrun's `-o KEY=` is:
//! `{KEY}` renders as nothing (said in a warning), never as the placeholder left in the line.
//! A `--set` whose key the recipe neither has in `defaults` nor uses anywhere is said in a
//! warning, the same for both formats, with a command or without. Pure.

use std::collections::{BTreeMap, BTreeSet};

use yaml_serde::Value;

use super::error::{RecipeError, RecipeWarning};
use crate::profile::SetArg;

/// `defaults` with every `--set` applied.
pub fn apply(
    file: &str,
    defaults: &BTreeMap<String, Value>,
    sets: &[SetArg],
) -> Result<BTreeMap<String, Value>, Vec<RecipeError>> {
    let mut out = defaults.clone();
    let mut errors = Vec::new();
    for s in sets {
        let key = s.path.trim();
        if key.contains(['.', '[', ' ']) {
            errors.push(
                RecipeError::new(
                    file,
                    format!("--set {s}"),
                    format!("{key:?} is not a defaults key"),
                )
                .fix("recipes take --set KEY=VALUE for one key of defaults:"),
            );
            continue;
        }
        let value = if s.value.trim().is_empty() {
            Value::String(s.value.clone())
        } else {
            match yaml_serde::from_str::<Value>(&s.value) {
                Ok(Value::Sequence(_) | Value::Mapping(_)) | Err(_) => {
                    Value::String(s.value.clone())
                }
                Ok(v) => v,
            }
        };
        out.insert(key.to_string(), value);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// What the recipe made of the `--set`s: an empty value said once, and a key the recipe
/// neither has in `defaults` nor used (`used`: the keys its command, variables and shape
/// read) said as not used.
pub fn warnings(
    sets: &[SetArg],
    defaults: &BTreeMap<String, Value>,
    used: &BTreeSet<String>,
) -> Vec<RecipeWarning> {
    let mut out = Vec::new();
    for s in sets {
        let key = s.path.trim();
        if !defaults.contains_key(key) && !used.contains(key) {
            out.push(RecipeWarning::new(
                format!("--set {s}"),
                format!(
                    "the recipe has no {{{key}}} and no defaults key {key}; the value is not used"
                ),
            ));
        } else if s.value.trim().is_empty() {
            out.push(RecipeWarning::new(
                format!("--set {s}"),
                format!(
                    "an empty value: {{{key}}} renders as nothing, as sparkrun renders `-o {key}=`"
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_override_defaults_with_yaml_typed_values() {
        let defaults: BTreeMap<String, Value> =
            yaml_serde::from_str("{port: 8000, tp: 1}").unwrap();
        let sets: Vec<SetArg> = [
            "port=9000",
            "gpu=0.8",
            "flag=true",
            "name=a b",
            "json={a: 1}",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let out = apply("r", &defaults, &sets).unwrap();
        assert_eq!(out["port"], Value::from(9000));
        assert_eq!(out["gpu"], Value::from(0.8));
        assert_eq!(out["flag"], Value::Bool(true));
        assert_eq!(out["name"], Value::String("a b".into()));
        assert_eq!(out["json"], Value::String("{a: 1}".into()));
        assert_eq!(out["tp"], Value::from(1));
    }

    #[test]
    fn an_empty_value_is_the_empty_text_and_said() {
        let defaults: BTreeMap<String, Value> = yaml_serde::from_str("{max_model_len: 8}").unwrap();
        let sets = vec!["max_model_len=".parse().unwrap()];
        let out = apply("r", &defaults, &sets).unwrap();
        assert_eq!(out["max_model_len"], Value::String(String::new()));
        let w = warnings(&sets, &defaults, &BTreeSet::new());
        assert_eq!(
            w[0].to_string(),
            "--set max_model_len=: an empty value: {max_model_len} renders as nothing, as sparkrun renders `-o max_model_len=`"
        );
    }

    #[test]
    fn a_set_nothing_uses_is_said_and_one_the_recipe_uses_is_not() {
        let defaults: BTreeMap<String, Value> = yaml_serde::from_str("{port: 8}").unwrap();
        let sets: Vec<SetArg> = ["nosuch=1", "port=9", "tp=2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let used = BTreeSet::from(["tp".to_string()]);
        let w = warnings(&sets, &defaults, &used);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            w[0].to_string(),
            "--set nosuch=1: the recipe has no {nosuch} and no defaults key nosuch; the value is not used"
        );
    }

    #[test]
    fn a_dotted_key_is_refused() {
        let sets = vec!["model.revision=main".parse().unwrap()];
        let e = apply("r", &BTreeMap::new(), &sets).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "r: --set model.revision=main: \"model.revision\" is not a defaults key; recipes take --set KEY=VALUE for one key of defaults:"
        );
    }
}
