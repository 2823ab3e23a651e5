//! Secrets in plans: variables named like `*TOKEN*`, `*KEY*`, `*SECRET*`, `*PASSWORD*` (e.g.
//! `HF_TOKEN`, `VLLM_API_KEY`) hold values no printout may show. A plan keeps the real value in
//! memory, where only the runtime edge reads it (`runtime::request` puts it in the create
//! body, `runtime::host` in a 0600 file the process reads); everything that prints a plan —
//! `--dry-run --json` (the env maps serialise through [`serialize_env`]), the text renderers
//! ([`masked_env`]), `status` ([`mask_assignments`]) — shows `<set>`. So the plan that is printed
//! is the plan the executor runs, with the value replaced by the fact that it is set. Pure.

use std::collections::BTreeMap;

use serde::Serializer;
use serde::ser::SerializeMap;

/// What a secret's value is shown as.
pub const MASK: &str = "<set>";

/// True for variable names whose values are secrets: `TOKEN`, `KEY`, `SECRET`, `PASSWORD`,
/// `PASSWD` or `CREDENTIAL` anywhere in the name, in any case.
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"]
        .iter()
        .any(|w| n.contains(w))
}

/// The value to show for `name`: the value itself, or [`MASK`] for a secret.
pub fn shown<'a>(name: &str, value: &'a str) -> &'a str {
    if is_secret_name(name) { MASK } else { value }
}

/// An environment as it may be printed: every secret's value replaced by [`MASK`]. The one
/// function every plan renderer calls.
pub fn masked_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| (k.clone(), shown(k, v).to_string()))
        .collect()
}

/// `serialize_with` for the env maps of plans: the map with secrets masked.
pub fn serialize_env<S: Serializer>(
    env: &BTreeMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(env.len()))?;
    for (k, v) in env {
        m.serialize_entry(k, shown(k, v))?;
    }
    m.end()
}

/// A command line with the value of every `NAME=value` word whose name is a secret's masked
/// (`env HF_TOKEN=hf_x cmd` → `env HF_TOKEN=<set> cmd`), for `status` and logs of commands.
pub fn mask_assignments(line: &str) -> String {
    line.split(' ')
        .map(|word| {
            let bare = word.trim_start_matches(['\'', '"']);
            match bare.split_once('=') {
                Some((name, _))
                    if !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && is_secret_name(name) =>
                {
                    let quote = &word[..word.len() - bare.len()];
                    format!("{quote}{name}={MASK}{quote}")
                }
                _ => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A secret value (an API key): shown as [`MASK`] by `Debug` and by serde, so a plan that
/// holds one prints `<set>`; only [`Secret::expose`] gives the value, to the runtime edge.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// `None` for an empty or blank value.
    pub fn new(value: impl Into<String>) -> Option<Secret> {
        let v = value.into();
        let v = v.trim();
        (!v.is_empty()).then(|| Secret(v.to_string()))
    }

    /// A fixed stand-in (a dry run's placeholder): `value` is taken as is.
    pub fn placeholder(value: &'static str) -> Secret {
        Secret(value.to_string())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

impl serde::Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(MASK)
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = String::deserialize(d)?;
        Ok(Secret(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_recognised_in_any_case() {
        for n in [
            "HF_TOKEN",
            "VLLM_API_KEY",
            "aws_secret_access_key",
            "DB_PASSWORD",
            "hf_token",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["NCCL_IB_HCA", "HF_HOME", "MASTER_ADDR", "NCCL_DEBUG"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn a_masked_env_shows_set_for_secrets_only() {
        let env = BTreeMap::from([
            ("HF_TOKEN".to_string(), "hf_abc".to_string()),
            ("NCCL_DEBUG".to_string(), "INFO".to_string()),
        ]);
        let m = masked_env(&env);
        assert_eq!(m["HF_TOKEN"], "<set>");
        assert_eq!(m["NCCL_DEBUG"], "INFO");
        #[derive(serde::Serialize)]
        struct S {
            #[serde(serialize_with = "serialize_env")]
            env: BTreeMap<String, String>,
        }
        let json = serde_json::to_string(&S { env: env.clone() }).unwrap();
        assert_eq!(json, r#"{"env":{"HF_TOKEN":"<set>","NCCL_DEBUG":"INFO"}}"#);
    }

    #[test]
    fn a_secret_prints_as_set_in_debug_and_json() {
        let k = Secret::new(" sk-real ").unwrap();
        assert_eq!(k.expose(), "sk-real");
        assert_eq!(format!("{k:?}"), "<set>");
        assert_eq!(serde_json::to_string(&k).unwrap(), r#""<set>""#);
        assert!(Secret::new("  ").is_none());
    }

    #[test]
    fn assignments_in_a_command_line_are_masked() {
        assert_eq!(
            mask_assignments("env HF_TOKEN=hf_abc NCCL_DEBUG=INFO python serve.py"),
            "env HF_TOKEN=<set> NCCL_DEBUG=INFO python serve.py"
        );
        assert_eq!(
            mask_assignments("sh -c 'API_KEY=x' run"),
            "sh -c 'API_KEY=<set>' run"
        );
    }
}
