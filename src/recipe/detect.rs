//! Which format a recipe file is: `recipe_version: "1"` or `"2"` says it; without the field,
//! v2-only fields (`runtime`, `min_nodes`, `model_revision`, …) mean v2, eugr-only ones
//! (`build_args`) mean v1, and anything else is read as v2, sparkrun's default — each choice
//! made without the field said in a warning, since the two formats template differently.
//! Pure.

use super::RecipeFormat;
use super::doc::RecipeDoc;
use super::error::{RecipeErrors, RecipeWarning};
use super::pyvalue::python_str;

const V2_ONLY: [&str; 8] = [
    "runtime",
    "min_nodes",
    "max_nodes",
    "model_revision",
    "executor_config",
    "metadata",
    "min_sparkrun_version",
    "pre_exec",
];
const V1_ONLY: [&str; 1] = ["build_args"];

/// The recipe's format, and a warning when it was inferred.
pub(super) fn format(
    doc: &RecipeDoc,
) -> Result<(RecipeFormat, Option<RecipeWarning>), RecipeErrors> {
    if let Some(v) = doc
        .get("recipe_version")
        .or_else(|| doc.get("sparkrun_version"))
    {
        let text = python_str(v);
        return match text.trim() {
            "1" => Ok((RecipeFormat::V1, None)),
            "2" => Ok((RecipeFormat::V2, None)),
            other => Err(RecipeErrors::one(
                doc.error(
                    "recipe_version",
                    format!("{other:?} is not a recipe format spark-launch reads"),
                )
                .fix("write recipe_version: \"1\" (eugr's format) or \"2\" (sparkrun's)"),
            )),
        };
    }
    let keys = doc.keys();
    let inferred =
        |format, why: String| Ok((format, Some(RecipeWarning::new("recipe_version", why))));
    if let Some(k) = keys.iter().find(|k| V2_ONLY.contains(&k.as_str())) {
        return inferred(
            RecipeFormat::V2,
            format!("missing; read as v2 (sparkrun's format) because of {k}:"),
        );
    }
    if let Some(k) = keys.iter().find(|k| V1_ONLY.contains(&k.as_str())) {
        return inferred(
            RecipeFormat::V1,
            format!("missing; read as v1 (eugr's format) because of {k}:"),
        );
    }
    inferred(
        RecipeFormat::V2,
        "missing; read as v2, sparkrun's default (write recipe_version: \"1\" for an eugr recipe)"
            .into(),
    )
}

/// Fields only recipes have (a launch profile says `engine:` instead).
const RECIPE_FIELDS: [&str; 7] = [
    "recipe_version",
    "sparkrun_version",
    "runtime",
    "container",
    "command",
    "defaults",
    "mods",
];

/// Whether a YAML text is a recipe rather than a launch profile: a mapping with a recipe's
/// fields and no profile's `engine:`, or any text with `recipe_version:`. A text that does not
/// read as YAML is judged by the keys written at the start of its lines, so that a recipe
/// with a YAML error is reported as a recipe, never as an invalid launch profile.
pub fn is_recipe(text: &str) -> bool {
    let keys: Vec<String> = match crate::yaml::read(text) {
        Ok(read) => match read.value {
            yaml_serde::Value::Mapping(map) => map
                .keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
            _ => return false,
        },
        Err(_) => top_level_keys(text),
    };
    let has = |k: &str| keys.iter().any(|key| key == k);
    has("recipe_version")
        || has("sparkrun_version")
        || (!has("engine") && RECIPE_FIELDS.iter().any(|k| has(k)))
}

/// The keys written at the start of a line (`name:`, `"name":`), for text that is not YAML.
fn top_level_keys(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let (key, _) = line.split_once(':')?;
            let key = key.trim_end().trim_matches(['"', '\'']);
            let plain = !key.is_empty()
                && !line.starts_with([' ', '\t', '#', '-'])
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            plain.then(|| key.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::doc;

    fn detect(text: &str) -> Result<(RecipeFormat, Option<RecipeWarning>), RecipeErrors> {
        format(&doc::load("r.yaml", text).unwrap())
    }

    #[test]
    fn a_recipe_is_told_from_a_launch_profile_by_its_fields() {
        assert!(is_recipe("recipe_version: \"1\"\ncommand: vllm serve m\n"));
        assert!(is_recipe("model: m\nruntime: vllm\n"));
        assert!(!is_recipe("name: p\nengine: vllm\nmodel: m\ntp: 2\n"));
        assert!(!is_recipe("- a\n"));
    }

    #[test]
    fn a_recipe_with_a_yaml_error_is_still_a_recipe() {
        for text in [
            "recipe_version: \"2\"\nmodel: m\nmodel: n\n",
            "recipe_version: \"2\"\ndefaults:\n\tport: 1\n",
            "recipe_version: \"2\"\nmodel: m\n---\nmodel: n\n",
            "model: m\ncommand: vllm serve m\ndefaults: {a: [\n",
        ] {
            assert!(is_recipe(text), "{text}");
        }
        assert!(!is_recipe("name: p\nengine: vllm\nmodel: [\n"));
    }

    #[test]
    fn the_version_field_decides() {
        assert_eq!(
            detect("recipe_version: \"1\"\n").unwrap(),
            (RecipeFormat::V1, None)
        );
        assert_eq!(
            detect("recipe_version: 2\n").unwrap(),
            (RecipeFormat::V2, None)
        );
        let e = detect("recipe_version: \"3\"\n").unwrap_err();
        assert_eq!(
            e.0[0].to_string(),
            "r.yaml:1: recipe_version: \"3\" is not a recipe format spark-launch reads; write recipe_version: \"1\" (eugr's format) or \"2\" (sparkrun's)"
        );
    }

    #[test]
    fn without_the_version_the_fields_decide_and_say_so() {
        let (f, w) = detect("model: m\nmin_nodes: 2\n").unwrap();
        assert_eq!(f, RecipeFormat::V2);
        assert!(w.unwrap().message.contains("because of min_nodes:"));
        let (f, _) = detect("name: x\nbuild_args: [--tf5]\ncommand: vllm serve m\n").unwrap();
        assert_eq!(f, RecipeFormat::V1);
        let (f, w) = detect("model: m\ncontainer: c\n").unwrap();
        assert_eq!(f, RecipeFormat::V2);
        assert!(w.unwrap().message.contains("sparkrun's default"));
    }
}
