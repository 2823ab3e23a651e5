//! A v2 recipe's `distribution_config`: what sparkrun fetches onto the nodes before a start.
//! spark-launch stages the recipe's model and ensures its image itself; what this field adds
//! is the other models the engine loads (a speculative draft pinned to a commit), each staged
//! at its own revision on the nodes its `target` names, and the served model's own pin. An
//! image entry other than the recipe's container, and `enabled: false`, are said, not applied.
//! Read as sparkrun reads it: a field of the wrong shape counts as absent. Pure.

use yaml_serde::Value;

use super::doc::RecipeDoc;
use super::error::{RecipeError, RecipeWarning};

/// The field as written (names still templates: `{model}`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Distribution {
    /// `models.enabled` (true unless `false`): sparkrun fetches the models.
    pub models_enabled: bool,
    pub models: Vec<DistributedModel>,
    /// `containers.entries` names.
    pub containers: Vec<String>,
}

/// One `models.entries` item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DistributedModel {
    /// A Hub repo id, or a template of one (`{model}`).
    pub name: String,
    pub revision: Option<String>,
    /// The ranks whose nodes get it (0: the head); `None`: every node (`[-1]` or absent).
    pub ranks: Option<Vec<usize>>,
}

/// Reads `distribution_config` from `doc` (`None`: absent, or not a mapping, as sparkrun then
/// uses its defaults); an entry that is neither a name nor a mapping with one is an error at
/// its place.
pub(super) fn read(doc: &RecipeDoc, errors: &mut Vec<RecipeError>) -> Option<Distribution> {
    let Value::Mapping(raw) = doc.get("distribution_config")? else {
        return None;
    };
    let section = |key: &str| match raw.get(key) {
        Some(Value::Mapping(m)) => Some(m),
        _ => None,
    };
    let entries = |m: Option<&yaml_serde::Mapping>| match m.and_then(|m| m.get("entries")) {
        Some(Value::Sequence(items)) => items.clone(),
        _ => Vec::new(),
    };
    let models_section = section("models");
    let mut out = Distribution {
        models_enabled: !matches!(
            models_section.and_then(|m| m.get("enabled")),
            Some(Value::Bool(false))
        ),
        ..Distribution::default()
    };
    for (i, item) in entries(models_section).iter().enumerate() {
        let field = format!("distribution_config.models.entries[{i}]");
        match model_entry(item) {
            Ok(m) => out.models.push(m),
            Err(why) => errors.push(doc.error(&field, why)),
        }
    }
    for (i, item) in entries(section("containers")).iter().enumerate() {
        match name_of(item) {
            Some(name) => out.containers.push(name),
            None => errors.push(doc.error(
                &format!("distribution_config.containers.entries[{i}]"),
                "expected an image name, or a mapping with name:",
            )),
        }
    }
    Some(out)
}

fn name_of(item: &Value) -> Option<String> {
    match item {
        Value::String(s) => Some(s.clone()),
        Value::Mapping(m) => match m.get("name") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn model_entry(item: &Value) -> Result<DistributedModel, String> {
    let name = name_of(item).ok_or("expected a model name, or a mapping with name:")?;
    let Value::Mapping(m) = item else {
        return Ok(DistributedModel {
            name,
            revision: None,
            ranks: None,
        });
    };
    let revision = match m.get("revision") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => return Err("revision: expected a branch, tag or commit".into()),
    };
    let ranks = match m.get("target") {
        None | Some(Value::Null) => None,
        Some(Value::Sequence(t)) => {
            let mut ranks = Vec::new();
            for v in t {
                match v.as_i64() {
                    Some(-1) => return Ok(every(name, revision)),
                    Some(r) if r >= 0 => ranks.push(r as usize),
                    _ => {
                        return Err(
                            "target: expected node indices (0 is the head, -1 every node)".into(),
                        );
                    }
                }
            }
            Some(ranks)
        }
        Some(_) => return Err("target: expected a list of node indices".into()),
    };
    Ok(DistributedModel {
        name,
        revision,
        ranks,
    })
}

fn every(name: String, revision: Option<String>) -> DistributedModel {
    DistributedModel {
        name,
        revision,
        ranks: None,
    }
}

impl Distribution {
    /// What is said about the parts not applied: `enabled: false` and images other than the
    /// recipe's own (`container`, rendered).
    pub fn warnings(&self, container: Option<&str>) -> Vec<RecipeWarning> {
        let mut out = Vec::new();
        if !self.models_enabled {
            out.push(RecipeWarning::new(
                "distribution_config.models.enabled",
                "false: sparkrun would fetch no model; spark-launch stages them as for every launch (a node whose cache already holds one is not sent it again)",
            ));
        }
        for c in &self.containers {
            if c != "{container}" && Some(c.as_str()) != container {
                out.push(RecipeWarning::new(
                    "distribution_config.containers",
                    format!(
                        "{c} is not fetched: spark-launch ensures the job's own image on its nodes, no other"
                    ),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::doc;

    fn read_text(text: &str) -> (Option<Distribution>, Vec<RecipeError>) {
        let d = doc::load("r.yaml", text).unwrap();
        let mut errors = Vec::new();
        (read(&d, &mut errors), errors)
    }

    #[test]
    fn model_entries_keep_their_revision_and_target_and_a_name_alone_goes_everywhere() {
        let (d, errors) = read_text(
            "distribution_config:\n  models:\n    entries:\n      - name: \"{model}\"\n        revision: 51058cd\n      - name: org/draft\n        revision: bf582e4\n        target: [0]\n      - org/other\n      - name: org/all\n        target: [-1]\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let d = d.unwrap();
        assert!(d.models_enabled);
        assert_eq!(
            d.models,
            vec![
                DistributedModel {
                    name: "{model}".into(),
                    revision: Some("51058cd".into()),
                    ranks: None
                },
                DistributedModel {
                    name: "org/draft".into(),
                    revision: Some("bf582e4".into()),
                    ranks: Some(vec![0])
                },
                every("org/other".into(), None),
                every("org/all".into(), None),
            ]
        );
    }

    #[test]
    fn a_field_of_the_wrong_shape_is_absent_and_a_bad_entry_is_named_at_its_place() {
        assert_eq!(read_text("distribution_config: yes\n").0, None);
        let (_, errors) = read_text(
            "model: m\ndistribution_config:\n  models:\n    entries:\n      - 3\n      - name: org/x\n        target: [a]\n",
        );
        let said: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("models.entries[0]"), "{said:?}");
        assert!(said[1].contains("node indices"), "{said:?}");
    }

    #[test]
    fn disabled_models_and_another_image_are_said_not_applied() {
        let (d, _) = read_text(
            "distribution_config:\n  models:\n    enabled: false\n  containers:\n    entries:\n      - \"{container}\"\n      - other/image:1\n",
        );
        let said: Vec<String> = d
            .unwrap()
            .warnings(Some("img:1"))
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[1].contains("other/image:1 is not fetched"), "{said:?}");
    }
}
