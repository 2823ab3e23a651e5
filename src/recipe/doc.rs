//! A recipe's YAML as a located document: the text read as the recipe runners' PyYAML safe
//! loader reads it (`crate::yaml`: the last of duplicate keys wins, said in a warning naming
//! both lines; merge keys applied; a tag it refuses, a second document or nesting too deep
//! refused at its line; a syntax error names its line and column), the top level a mapping,
//! and typed fields read out of it, every wrongly typed field an error at its own line, all
//! of them collected. Pure; knows no format's meaning.

use yaml_serde::{Mapping, Value};

use super::error::{RecipeError, RecipeErrors, RecipeWarning};
use crate::problem::Problem;
use crate::profile::locate;

/// The parsed text of one recipe file.
pub(super) struct RecipeDoc<'a> {
    pub file: &'a str,
    pub text: &'a str,
    pub map: Mapping,
    /// What reading the YAML itself has to say (duplicate keys).
    pub warnings: Vec<RecipeWarning>,
}

/// Parses `text`; the top level must be a mapping.
pub(super) fn load<'a>(file: &'a str, text: &'a str) -> Result<RecipeDoc<'a>, RecipeErrors> {
    let read = crate::yaml::read(text).map_err(|e| {
        RecipeErrors::one(RecipeError {
            file: file.to_string(),
            line: e.line(),
            column: e.column(),
            field: String::new(),
            problem: Problem::with_fix(format!("not valid YAML: {e}"), None),
        })
    })?;
    let warnings = read
        .duplicates
        .iter()
        .map(|d| {
            RecipeWarning::new(
                d.path(),
                format!(
                    "given {}{}: the last value is used, as the recipe runners (PyYAML) read it",
                    times(d.lines.len().max(2)),
                    place(&d.lines)
                ),
            )
        })
        .collect();
    match read.value {
        Value::Mapping(map) => Ok(RecipeDoc {
            file,
            text,
            map,
            warnings,
        }),
        Value::Null => Err(RecipeErrors::one(RecipeError::new(
            file,
            "",
            "the file is empty; a recipe is a YAML mapping (model:, container:, command:, …)",
        ))),
        _ => Err(RecipeErrors::one(
            RecipeError::new(file, "", "a recipe is a YAML mapping of fields").at(Some(1)),
        )),
    }
}

/// "more than once", "3 times".
fn times(n: usize) -> String {
    if n == 2 {
        "more than once".into()
    } else {
        format!("{n} times")
    }
}

/// Where a duplicate key is written: " (lines 8 and 19)", " (twice on line 3)", or nothing
/// when its lines are not known.
fn place(lines: &[usize]) -> String {
    match lines {
        [] | [_] => String::new(),
        [a, b] if a == b => format!(" (twice on line {a})"),
        [a, b] => format!(" (lines {a} and {b})"),
        [rest @ .., last] => format!(
            " (lines {} and {last})",
            rest.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl RecipeDoc<'_> {
    /// The 1-based line of a dotted field path (`defaults.port`, `mods[1]`).
    pub fn line(&self, path: &str) -> Option<usize> {
        Some(locate::line_of(self.text, &locate::parse_path(path)))
    }

    /// An error about `field`, at its line.
    pub fn error(&self, field: &str, problem: impl Into<String>) -> RecipeError {
        RecipeError::new(self.file, field, problem).at(self.line(field))
    }

    /// A top-level field; `null` counts as absent (as an empty `mods:` reads in PyYAML).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The top-level keys, in file order (keys that are not text are skipped; `fields` reports
    /// them).
    pub fn keys(&self) -> Vec<String> {
        self.map
            .keys()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect()
    }
}

/// Typed reads of top-level fields, every wrong one collected as an error at its line.
pub(super) struct DocFields<'d, 'a> {
    doc: &'d RecipeDoc<'a>,
    pub errors: Vec<RecipeError>,
}

impl<'d, 'a> DocFields<'d, 'a> {
    pub fn new(doc: &'d RecipeDoc<'a>) -> DocFields<'d, 'a> {
        let mut errors = Vec::new();
        for k in doc.map.keys() {
            if k.as_str().is_none() {
                errors.push(RecipeError::new(
                    doc.file,
                    "",
                    format!("the key {} is not text", super::pyvalue::python_repr(k)),
                ));
            }
        }
        DocFields { doc, errors }
    }

    fn wrong(&mut self, key: &str, wanted: &str, got: &Value) {
        let e = self.doc.error(
            key,
            format!("expected {wanted}, found {}", super::pyvalue::kind(got)),
        );
        self.errors.push(e);
    }

    /// A text field; numbers are taken as their text (`recipe_version: 2`).
    pub fn text(&mut self, key: &str) -> Option<String> {
        let v = self.doc.get(key)?;
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(_) => Some(super::pyvalue::python_str(v)),
            other => {
                let other = other.clone();
                self.wrong(key, "text", &other);
                None
            }
        }
    }

    /// A yes/no field.
    pub fn flag(&mut self, key: &str) -> Option<bool> {
        let v = self.doc.get(key)?;
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                let v = v.clone();
                self.wrong(key, "true or false", &v);
                None
            }
        }
    }

    /// A count of nodes (1 or more).
    pub fn count(&mut self, key: &str) -> Option<u32> {
        let v = self.doc.get(key)?;
        match v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
        {
            Some(n) => Some(n),
            None => {
                let v = v.clone();
                self.wrong(key, "a whole number of 1 or more", &v);
                None
            }
        }
    }

    /// A mapping field (absent: empty).
    pub fn mapping(&mut self, key: &str) -> Mapping {
        match self.doc.get(key) {
            None => Mapping::new(),
            Some(Value::Mapping(m)) => m.clone(),
            Some(other) => {
                let other = other.clone();
                self.wrong(key, "a mapping of KEY: value", &other);
                Mapping::new()
            }
        }
    }

    /// A list of texts (absent: empty).
    pub fn texts(&mut self, key: &str) -> Vec<String> {
        let Some(v) = self.doc.get(key) else {
            return Vec::new();
        };
        let Some(items) = v.as_sequence() else {
            let v = v.clone();
            self.wrong(key, "a list", &v);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push(s.clone()),
                other => {
                    let other = other.clone();
                    self.wrong(&format!("{key}[{i}]"), "text", &other);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_names_its_line() {
        let Err(e) = load("r.yaml", "model: a\ndefaults: [1,\n") else {
            panic!("bad YAML parsed");
        };
        assert_eq!(e.0[0].file, "r.yaml");
        assert!(e.0[0].line.is_some(), "{e}");
        assert!(e.0[0].problem.what.starts_with("not valid YAML"), "{e}");
    }

    #[test]
    fn a_recipe_that_is_not_a_mapping_is_refused() {
        let Err(e) = load("r.yaml", "- a\n- b\n") else {
            panic!("a list was taken for a recipe");
        };
        assert_eq!(
            e.to_string(),
            "recipe refused (1 problem)\n  r.yaml:1: a recipe is a YAML mapping of fields"
        );
    }

    #[test]
    fn every_wrongly_typed_field_is_reported_at_its_own_line() {
        let doc = load(
            "r.yaml",
            "model: m\nmin_nodes: two\nmods: x\ncluster_only: 3\n",
        )
        .unwrap();
        let mut f = DocFields::new(&doc);
        assert_eq!(f.text("model").as_deref(), Some("m"));
        assert_eq!(f.count("min_nodes"), None);
        assert!(f.texts("mods").is_empty());
        assert_eq!(f.flag("cluster_only"), None);
        let lines: Vec<_> = f
            .errors
            .iter()
            .map(|e| (e.field.as_str(), e.line))
            .collect();
        assert_eq!(
            lines,
            [
                ("min_nodes", Some(2)),
                ("mods", Some(3)),
                ("cluster_only", Some(4))
            ]
        );
        assert_eq!(
            f.errors[0].problem.what,
            "expected a whole number of 1 or more, found the text 'two'"
        );
    }
}
