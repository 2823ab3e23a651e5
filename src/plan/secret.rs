//! Secrets in plans: variables named like `*TOKEN*`, `*KEY*`, `*SECRET*`, `*PASS*`, `*AUTH*`,
//! `*BEARER*`, `*CRED*`, `*PRIVATE*`, `*COOKIE*`, `*SESSION*` (e.g. `HF_TOKEN`, `VLLM_API_KEY`,
//! `DB_PASS`, `AUTH_BEARER`), and any other a launch names with `--secret-env NAME` (recorded
//! in the env it marks as [`SECRET_ENV`], see [`mark`]), hold values no printout may show. A plan keeps the real value in
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

/// The parts of a name that make its value a secret, anywhere in the name, in any case.
const SECRET_PARTS: &[&str] = &[
    "TOKEN", "KEY", "SECRET", "PASS", // PASSWORD, PASSWD, PASSPHRASE, DB_PASS
    "AUTH", "BEARER", "CRED", // CREDENTIAL(S), CREDS
    "PRIVATE", "COOKIE", "SESSION",
];

/// The variable, in an env of a plan, that lists (comma-separated) the other variables of that
/// env which `--secret-env NAME` marked secret. It travels with the env it marks: into the
/// printed plan (where it shows which names are masked and why) and to the container.
pub const SECRET_ENV: &str = "SPARK_LAUNCH_SECRET_ENV";

/// True for variable names whose values are secrets by their name alone (see
/// [`SECRET_PARTS`]).
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    // The list of marked names is no secret itself (it says which values are masked).
    name != SECRET_ENV && SECRET_PARTS.iter().any(|w| n.contains(w))
}

/// True when `name` is a secret in `env`: by its name, or listed in the env's [`SECRET_ENV`].
pub fn is_secret_in(env: &BTreeMap<String, String>, name: &str) -> bool {
    is_secret_name(name)
        || env
            .get(SECRET_ENV)
            .is_some_and(|list| list.split(',').any(|n| n.trim() == name))
}

/// The value to show for `name`: the value itself, or [`MASK`] for a secret (by its name).
pub fn shown<'a>(name: &str, value: &'a str) -> &'a str {
    if is_secret_name(name) { MASK } else { value }
}

/// An environment as it may be printed: every secret's value replaced by [`MASK`]. The one
/// function every plan renderer calls.
pub fn masked_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| {
            let v = if is_secret_in(env, k) { MASK } else { v };
            (k.clone(), v.to_string())
        })
        .collect()
}

/// `serialize_with` for the env maps of plans: the map with secrets masked.
pub fn serialize_env<S: Serializer>(
    env: &BTreeMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(env.len()))?;
    for (k, v) in env {
        m.serialize_entry(k, if is_secret_in(env, k) { MASK } else { v })?;
    }
    m.end()
}

/// A `--secret-env` name that is not an environment variable name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--secret-env {0:?} is not an environment variable name (letters, digits and '_', not starting with a digit)"
)]
pub struct BadSecretName(pub String);

/// Checks a `--secret-env` name.
pub fn secret_env_name(name: &str) -> Result<String, BadSecretName> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(name.to_string())
    } else {
        Err(BadSecretName(name.to_string()))
    }
}

/// Marks `names` secret in every env of `job` that holds one of them (`--secret-env NAME`):
/// they are added to that env's [`SECRET_ENV`] list, so every printout of the plan shows
/// `<set>` for them, while the runtime still gets their values (in the container's create
/// body, or the host runtime's 0600 env file; never a command line).
pub fn mark(job: &mut super::JobPlan, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let mut envs: Vec<&mut BTreeMap<String, String>> = Vec::new();
    for n in &mut job.nodes {
        envs.push(match &mut n.launch {
            super::Launch::Container(c) => &mut c.env,
            super::Launch::Process(p) => &mut p.env,
        });
    }
    for step in &mut job.steps {
        if let super::Step::Exec(exec) = step {
            envs.push(&mut exec.env);
        }
    }
    for env in envs {
        let mut listed: Vec<String> = env
            .get(SECRET_ENV)
            .map(|l| l.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        for name in names {
            if env.contains_key(name) && !listed.contains(name) {
                listed.push(name.clone());
            }
        }
        if !listed.is_empty() {
            env.insert(SECRET_ENV.to_string(), listed.join(","));
        }
    }
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
    fn common_secret_names_beyond_token_and_key_are_masked() {
        // Seen once: `DB_PASS` and `AUTH_BEARER` were printed.
        for n in [
            "DB_PASS",
            "AUTH_BEARER",
            "OAUTH_BEARER",
            "GCP_CREDS",
            "SSH_PRIVATE",
            "SESSION_COOKIE",
            "FLASK_SESSION",
            "pgpassfile",
        ] {
            assert!(is_secret_name(n), "{n}");
            let env = BTreeMap::from([(n.to_string(), "x".to_string())]);
            assert_eq!(masked_env(&env)[n], MASK, "{n}");
        }
        // The variables spark-launch derives stay readable.
        for n in [
            "NCCL_IB_HCA",
            "NCCL_SOCKET_IFNAME",
            "UCX_NET_DEVICES",
            "OMPI_MCA_btl_tcp_if_include",
            "RAY_memory_monitor_refresh_ms",
            "GLOO_SOCKET_IFNAME",
            "VLLM_HOST_IP",
            "NCCL_IB_GID_INDEX",
            "NCCL_IB_SUBNET_AWARE_ROUTING",
        ] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn a_variable_marked_with_secret_env_is_masked_wherever_the_plan_prints_it() {
        use crate::node::{NodeName, Role};
        use crate::plan::{ContainerSpec, JobName, JobPlan, Launch, NodePlan};
        let job = JobName::new("demo").unwrap();
        let node = NodeName::new("a").unwrap();
        let mut spec = ContainerSpec::new(&job, &node, Role::Head, "img");
        spec.env
            .insert("DB_CONN".into(), "postgres://u:pw@db".into());
        spec.env.insert("NCCL_DEBUG".into(), "INFO".into());
        let mut plan = JobPlan {
            job,
            workload: "run".into(),
            runtime: Default::default(),
            nodes: vec![NodePlan {
                node,
                role: Role::Head,
                launch: Launch::Container(spec),
            }],
            steps: Vec::new(),
        };
        mark(&mut plan, &["DB_CONN".to_string(), "ABSENT".to_string()]);
        let json = serde_json::to_string(&plan).unwrap();
        assert!(!json.contains("pw@db"), "{json}");
        assert!(json.contains(r#""DB_CONN":"<set>""#), "{json}");
        assert!(
            json.contains(r#""SPARK_LAUNCH_SECRET_ENV":"DB_CONN""#),
            "{json}"
        );
        assert!(json.contains(r#""NCCL_DEBUG":"INFO""#), "{json}");
        let Launch::Container(c) = &plan.nodes[0].launch else {
            unreachable!()
        };
        assert_eq!(
            c.env["DB_CONN"], "postgres://u:pw@db",
            "the runtime gets the value"
        );
        assert_eq!(masked_env(&c.env)["DB_CONN"], MASK);
        assert!(secret_env_name("1X").is_err() && secret_env_name("DB_CONN").is_ok());
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
