//! `--set KEY=VALUE` over a recipe's `defaults`: the value read as YAML (`0.8` a number, `true`
//! a boolean, anything unreadable as text), one plain key per `--set` (recipes have no nested
//! defaults), later ones winning. Pure.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::error::RecipeError;
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
        let value = match yaml_serde::from_str::<Value>(&s.value) {
            Ok(Value::Sequence(_) | Value::Mapping(_)) | Err(_) => Value::String(s.value.clone()),
            Ok(v) => v,
        };
        out.insert(key.to_string(), value);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
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
    fn a_dotted_key_is_refused() {
        let sets = vec!["model.revision=main".parse().unwrap()];
        let e = apply("r", &BTreeMap::new(), &sets).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "r: --set model.revision=main: \"model.revision\" is not a defaults key; recipes take --set KEY=VALUE for one key of defaults:"
        );
    }
}
