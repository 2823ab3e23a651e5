//! What both recipe formats do alike once their fields are read: mappings with text keys,
//! errors located in the file, the PyYAML-vs-YAML-1.2 words (`yes`, `on`) said out loud, the
//! image and model names checked, `NAME=value` words before the program moved into the
//! environment, and `$VAR` words reported. Pure.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::doc::{DocFields, RecipeDoc};
use super::env::{RecipeEnv, RecipeEnvValue};
use super::error::{RecipeError, RecipeErrors, RecipeWarning};
use crate::model::ModelSource;
use crate::plan::secret::is_secret_name;
use crate::profile::locate;

/// A mapping field whose keys must be text, as an ordered map; other keys are errors.
pub(super) fn text_keyed(
    f: &mut DocFields,
    doc: &RecipeDoc,
    field: &str,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (k, v) in f.mapping(field) {
        match k.as_str() {
            Some(k) => {
                out.insert(k.to_string(), v);
            }
            None => f.errors.push(doc.error(
                field,
                format!("the key {} is not text", super::pyvalue::python_repr(&k)),
            )),
        }
    }
    out
}

/// The value of a part that read, or `None` with its problems added to `errors`: how a
/// reader goes on past one problem to find the others.
pub fn kept<T>(r: Result<T, RecipeErrors>, errors: &mut Vec<RecipeError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(es) => {
            errors.extend(es.0);
            None
        }
    }
}

/// The errors of a recipe's shape (`recipe::shape`), each at the line its field is written on
/// in `text`: the shape checks the merged settings, which know no lines.
pub fn shape_errors(text: &str, errors: Vec<RecipeError>) -> Vec<RecipeError> {
    errors
        .into_iter()
        .map(|e| RecipeError {
            line: line(text, &e.field),
            ..e
        })
        .collect()
}

/// The shape that read, its warnings added to `warnings`, or `None` with its problems added to
/// `errors` at their lines ([`shape_errors`]).
pub fn kept_shape<S>(
    read: Result<(S, Vec<RecipeWarning>), Vec<RecipeError>>,
    text: &str,
    warnings: &mut Vec<RecipeWarning>,
    errors: &mut Vec<RecipeError>,
) -> Option<S> {
    match read {
        Ok((shape, shape_warnings)) => {
            warnings.extend(shape_warnings);
            Some(shape)
        }
        Err(es) => {
            errors.extend(shape_errors(text, es));
            None
        }
    }
}

/// `errors` with the line of each field in `text` filled in where it was not known and the
/// field is written in the file (a `command` a flag table built has no line).
pub fn locate_all(text: &str, errors: Vec<RecipeError>) -> Vec<RecipeError> {
    errors
        .into_iter()
        .map(|e| {
            let top = e.field.split(['.', '[']).next().unwrap_or_default();
            let written = !top.is_empty()
                && text
                    .lines()
                    .any(|l| l.strip_prefix(top).is_some_and(|r| r.starts_with(':')));
            match e.line {
                None if written => {
                    let at = line(text, &e.field);
                    e.at(at)
                }
                _ => e,
            }
        })
        .collect()
}

/// The line of a dotted field in `text` (`None` for fields that are not in the file).
pub fn line(text: &str, field: &str) -> Option<usize> {
    if field.is_empty() || field.starts_with("--") {
        return None;
    }
    Some(locate::line_of(text, &locate::parse_path(field)))
}

/// An error about `field`, at its line in `text`.
pub fn located(file: &str, text: &str, field: &str, problem: impl Into<String>) -> RecipeError {
    RecipeError::new(file, field, problem).at(line(text, field))
}

/// Words PyYAML (which both runners use) reads as booleans but YAML 1.2 reads as text, when
/// written without quotes: said in a warning, since the two readings differ.
pub(super) fn yaml11_words(
    doc: &RecipeDoc,
    map: &BTreeMap<String, Value>,
    section: &str,
) -> Vec<RecipeWarning> {
    const WORDS: [&str; 12] = [
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "off",
    ];
    let lines: Vec<&str> = doc.text.lines().collect();
    map.iter()
        .filter_map(|(k, v)| {
            let s = v.as_str()?;
            let word = WORDS.contains(&s) || ["On", "ON", "Off", "OFF"].contains(&s);
            if !word {
                return None;
            }
            let field = format!("{section}.{k}");
            let at = locate::line_of(doc.text, &locate::parse_path(&field));
            let raw = lines.get(at.checked_sub(1)?)?;
            let after = raw.split_once(':')?.1.trim();
            let unquoted = after.split('#').next().unwrap_or("").trim() == s;
            unquoted.then(|| {
                RecipeWarning::new(
                    field,
                    format!("`{s}` without quotes: the recipe runners (PyYAML) read it as a boolean, spark-launch as the text {s:?}; quote it or write true/false"),
                )
            })
        })
        .collect()
}

/// The recipe's image, checked as an image reference.
pub fn image(file: &str, text: &str, container: &str) -> Result<String, RecipeErrors> {
    crate::plan::spec::check_image(container)
        .map(|()| container.to_string())
        .map_err(|e| RecipeErrors::one(located(file, text, "container", e)))
}

/// The model (a Hub id or an absolute folder) and revision, checked.
pub fn check_model(
    file: &str,
    text: &str,
    field: &str,
    model: &str,
    revision: Option<&str>,
) -> Result<(), RecipeErrors> {
    ModelSource::parse(model, revision)
        .map(|_| ())
        .map_err(|e| RecipeErrors::one(located(file, text, field, e.to_string())))
}

/// `NAME=value` words before the program: environment of the engine (they win over `env:`).
pub fn command_assignments(
    assignments: &[(String, String)],
    env: &mut RecipeEnv,
    warnings: &mut Vec<RecipeWarning>,
) {
    for (k, v) in assignments {
        env.0.insert(
            k.clone(),
            RecipeEnvValue::text(v.clone(), is_secret_name(k)),
        );
        warnings.push(RecipeWarning::new(
            format!("command: {k}=…"),
            "an assignment before the program: passed to the engine as environment",
        ));
    }
}

/// One warning per word the runner's shell would have expanded.
pub fn expansion_warnings(expansions: &[String]) -> Vec<RecipeWarning> {
    expansions
        .iter()
        .map(|w| {
            RecipeWarning::new(
                "command",
                format!("{w:?} holds a `$` the runner's shell would expand inside the container; spark-launch passes it as written"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::doc;

    #[test]
    fn unquoted_yaml_1_1_booleans_are_warned_about_quoted_ones_are_not() {
        let text = "defaults:\n  a: yes\n  b: \"yes\"\n  c: on # comment\n  d: yesterday\n";
        let d = doc::load("r.yaml", text).unwrap();
        let mut f = DocFields::new(&d);
        let defaults = text_keyed(&mut f, &d, "defaults");
        let w = yaml11_words(&d, &defaults, "defaults");
        let fields: Vec<_> = w.iter().map(|w| w.field.as_str()).collect();
        assert_eq!(fields, ["defaults.a", "defaults.c"]);
    }

    #[test]
    fn a_bad_image_or_model_is_located_at_its_field() {
        let text = "model: a\ncontainer: -bad\n";
        let e = image("r.yaml", text, "-bad").unwrap_err();
        assert_eq!(e.0[0].line, Some(2));
        let e = check_model("r.yaml", text, "model", "../x", None).unwrap_err();
        assert_eq!(e.0[0].field, "model");
    }
}
