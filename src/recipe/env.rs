//! A recipe's environment: each variable as a template kept until the node is known. v1 values
//! are plain text. v2 values may hold `{config.KEY}` (filled from `defaults` and `--set` when
//! the recipe is read) and `{launch.FIELD}` (filled per node: num_nodes, node_rank, node_host,
//! model_path, model_revision, runtime_cache_dir, cluster_id); `{{config.…}}` is the literal
//! text, other braces are left alone, and `$VAR`/`${VAR}` in the literal parts take the
//! user's environment, a value so taken being a secret when its name looks like one (shown
//! as `<set>`). Pure: the user's environment is passed in.

use std::collections::BTreeMap;

use yaml_serde::Value;

use super::pyvalue::python_str;
use crate::plan::secret::is_secret_name;
pub use crate::workload::recipe_env::{
    EnvPiece, EnvRenderError, LaunchField, MAX_RENDERED_BYTES, RecipeEnv, RecipeEnvValue,
    RecipeNode,
};

/// True for a portable variable name.
pub fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A v2 env value read: its pieces, and what it took from the user's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadValue {
    pub value: RecipeEnvValue,
    /// `$VAR`s not set in the user's environment, kept as written.
    pub unset: Vec<String>,
    /// The `defaults` keys its `{config.KEY}` took.
    pub config_keys: Vec<String>,
}

/// Reads one v2 env value: templates parsed, `{config.KEY}` filled from `config`, `$VAR` from
/// `user_env` in the literal parts. The error names what is wrong with the template.
pub fn read_v2(
    name: &str,
    raw: &Value,
    config: &BTreeMap<String, Value>,
    user_env: &BTreeMap<String, String>,
) -> Result<ReadValue, String> {
    let text = python_str(raw);
    let mut pieces = Vec::new();
    let mut unset = Vec::new();
    let mut config_keys = Vec::new();
    let mut secret = is_secret_name(name);
    let mut size = 0usize;
    for token in tokens(&text)? {
        if size > MAX_RENDERED_BYTES {
            return Err(format!(
                "grows past {} KiB as its {{config.…}} values are filled in ({}); write it out shorter",
                MAX_RENDERED_BYTES >> 10,
                config_keys.join(", ")
            ));
        }
        match token {
            Token::Literal(t) => {
                let (expanded, taken, missing) = expand_vars(&t, user_env);
                secret |= taken.iter().any(|v| is_secret_name(v));
                unset.extend(missing);
                size += expanded.len();
                push_text(&mut pieces, expanded);
            }
            Token::Escaped(t) => {
                size += t.len();
                push_text(&mut pieces, t);
            }
            Token::Config(key) => {
                let v = config.get(&key).filter(|v| !v.is_null()).ok_or_else(|| {
                    format!("{{config.{key}}} names no defaults key (and no --set gives it)")
                })?;
                if v.is_sequence() || v.is_mapping() {
                    return Err(format!(
                        "{{config.{key}}} is a list or mapping; only single values go in env"
                    ));
                }
                let shown = python_str(v);
                size += shown.len();
                push_text(&mut pieces, shown);
                if !config_keys.contains(&key) {
                    config_keys.push(key);
                }
            }
            Token::Launch(f) => pieces.push(EnvPiece::Launch(f)),
        }
    }
    if size > MAX_RENDERED_BYTES {
        return Err(format!(
            "grows past {} KiB as its {{config.…}} values are filled in ({}); write it out shorter",
            MAX_RENDERED_BYTES >> 10,
            config_keys.join(", ")
        ));
    }
    if pieces.is_empty() {
        pieces.push(EnvPiece::Text(String::new()));
    }
    Ok(ReadValue {
        value: RecipeEnvValue { pieces, secret },
        unset,
        config_keys,
    })
}

fn push_text(pieces: &mut Vec<EnvPiece>, t: String) {
    if t.is_empty() {
        return;
    }
    if let Some(EnvPiece::Text(prev)) = pieces.last_mut() {
        prev.push_str(&t);
    } else {
        pieces.push(EnvPiece::Text(t));
    }
}

enum Token {
    Literal(String),
    /// An escaped reserved token, emitted without one brace on each side.
    Escaped(String),
    Config(String),
    Launch(LaunchField),
}

/// Splits a value at the reserved `{config.…}` / `{launch.…}` tokens. Braces not opening such
/// a token (JSON, `${VAR}`) are literal text.
fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut literal_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let preceded = i > 0 && matches!(bytes[i - 1], b'$' | b'{');
        if bytes[i] != b'{' || preceded {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'{').count();
        let after = &text[i + run..];
        if !(after.starts_with("config.") || after.starts_with("launch.")) {
            i += run;
            continue;
        }
        out.push(Token::Literal(text[literal_start..i].to_string()));
        let close = after.find('}').filter(|&c| !after[..c].contains('{'));
        let Some(close) = close else {
            if run == 1 {
                return Err(format!(
                    "{{{} opens a template that never closes",
                    after.split_whitespace().next().unwrap_or("")
                ));
            }
            out.push(Token::Escaped(text[i + 1..].to_string()));
            literal_start = text.len();
            i = text.len();
            continue;
        };
        let name = &after[..close];
        let closing = after[close..].bytes().take_while(|&b| b == b'}').count();
        let used = closing.min(run);
        let stop = i + run + close + used;
        if run > 1 {
            let inner = if used == run {
                &text[i + 1..stop - 1]
            } else {
                &text[i + 1..stop]
            };
            out.push(Token::Escaped(inner.to_string()));
        } else {
            out.push(reserved(name)?);
        }
        i = stop;
        literal_start = stop;
    }
    out.push(Token::Literal(text[literal_start..].to_string()));
    Ok(out)
}

fn reserved(name: &str) -> Result<Token, String> {
    let (ns, field) = name.split_once('.').unwrap_or((name, ""));
    let plain = field.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Err(format!(
            "{{{name}}}: env takes only {{config.NAME}} or {{launch.NAME}}, without formatting"
        ));
    }
    match ns {
        "config" => Ok(Token::Config(field.to_string())),
        _ => LaunchField::parse(field).map(Token::Launch).ok_or_else(|| {
            format!(
                "{{launch.{field}}} is not a launch field (known: {})",
                LaunchField::ALL.map(LaunchField::name).join(", ")
            )
        }),
    }
}

/// `os.path.expandvars` over `text`: `$NAME` and `${NAME}` replaced where set. Returns the
/// text, the names taken and the names left unset.
fn expand_vars(text: &str, env: &BTreeMap<String, String>) -> (String, Vec<String>, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut taken = Vec::new();
    let mut unset = Vec::new();
    let mut rest = text;
    while let Some(d) = rest.find('$') {
        out.push_str(&rest[..d]);
        let after = &rest[d + 1..];
        let (name, len) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(c) => (&inner[..c], c + 2),
                None => ("", 0),
            }
        } else {
            let n = after
                .char_indices()
                .take_while(|(_, c)| c.is_alphanumeric() || *c == '_')
                .map(|(i, c)| i + c.len_utf8())
                .last()
                .unwrap_or(0);
            (&after[..n], n)
        };
        if len == 0 || name.is_empty() {
            out.push('$');
            rest = after;
            continue;
        }
        match env.get(name) {
            Some(v) => {
                out.push_str(v);
                taken.push(name.to_string());
            }
            None => {
                out.push_str(&rest[d..d + 1 + len]);
                if valid_name(name) {
                    unset.push(name.to_string());
                }
            }
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    (out, taken, unset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn y(text: &str) -> Value {
        yaml_serde::from_str(text).unwrap()
    }

    fn config() -> BTreeMap<String, Value> {
        [("port".to_string(), y("9123"))].into_iter().collect()
    }

    fn user() -> BTreeMap<String, String> {
        [
            ("HF_TOKEN".to_string(), "hf_x".to_string()),
            ("HOME".to_string(), "/home/u".to_string()),
        ]
        .into_iter()
        .collect()
    }

    fn read(name: &str, raw: &str) -> Result<ReadValue, String> {
        read_v2(name, &Value::String(raw.into()), &config(), &user())
    }

    #[test]
    fn only_reserved_tokens_are_templates() {
        let r = read(
            "V",
            "{config.port}/{launch.node_rank} {\"a\":{\"b\":1}} {other} ${HOME}",
        )
        .unwrap();
        assert_eq!(
            r.value.template(),
            "9123/{launch.node_rank} {\"a\":{\"b\":1}} {other} /home/u"
        );
        let r = read("V", "{{launch.node_rank}} {{config.port}}").unwrap();
        assert_eq!(
            r.value.pieces,
            [EnvPiece::Text("{launch.node_rank} {config.port}".into())]
        );
    }

    #[test]
    fn launch_fields_render_per_node() {
        let mut env = RecipeEnv::default();
        env.0.insert(
            "RANK".into(),
            read(
                "RANK",
                "{launch.node_rank}/{launch.num_nodes}@{launch.node_host}",
            )
            .unwrap()
            .value,
        );
        env.0
            .insert("PORT".into(), read("PORT", "{config.port}").unwrap().value);
        let node = |rank: u32, host: &str| RecipeNode {
            num_nodes: 2,
            node_rank: rank,
            node_host: host.into(),
            ..RecipeNode::default()
        };
        let head = env.render(&node(0, "10.0.0.1")).unwrap();
        let worker = env.render(&node(1, "10.0.0.2")).unwrap();
        assert_eq!(head["RANK"], "0/2@10.0.0.1");
        assert_eq!(worker["RANK"], "1/2@10.0.0.2");
        assert_eq!(worker["PORT"], "9123");
        assert_eq!(
            env.launch_fields(),
            [
                LaunchField::NumNodes,
                LaunchField::NodeRank,
                LaunchField::NodeHost
            ]
        );
    }

    #[test]
    fn a_launch_field_the_node_lacks_is_an_error_naming_it() {
        let mut env = RecipeEnv::default();
        env.0.insert(
            "R".into(),
            read("R", "rev-{launch.model_revision}").unwrap().value,
        );
        let e = env.render(&RecipeNode::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "env.R: {launch.model_revision} has no value on node 0: the model is a local folder, which has no Hub revision (serve it from the Hub, or write the value out)"
        );
    }

    #[test]
    fn bad_templates_are_refused_by_name() {
        assert!(
            read("V", "{launch.unknown}")
                .unwrap_err()
                .contains("not a launch field")
        );
        assert!(
            read("V", "{config.port:04}")
                .unwrap_err()
                .contains("without formatting")
        );
        assert!(
            read("V", "{config.nope}")
                .unwrap_err()
                .contains("names no defaults key")
        );
        assert!(
            read("V", "{config.port")
                .unwrap_err()
                .contains("never closes")
        );
    }

    #[test]
    fn user_variables_are_taken_and_secrets_marked() {
        let r = read("AUTH", "Bearer $HF_TOKEN").unwrap();
        assert!(r.value.secret, "a value taken from HF_TOKEN is a secret");
        assert_eq!(r.value.template(), "Bearer hf_x");
        let r = read("PLAIN", "$UNSET_VAR/x ${config.port} $").unwrap();
        assert!(!r.value.secret);
        assert_eq!(r.unset, ["UNSET_VAR"]);
        assert_eq!(r.value.template(), "$UNSET_VAR/x ${config.port} $");
    }

    #[test]
    fn a_value_that_grows_past_the_bound_is_refused_when_read_and_when_rendered() {
        let big: BTreeMap<String, Value> =
            [("big".to_string(), Value::String("x".repeat(64 << 10)))].into();
        let raw = Value::String("{config.big}".repeat(1000));
        let started = std::time::Instant::now();
        let e = read_v2("V", &raw, &big, &user()).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(
            e,
            "grows past 256 KiB as its {config.…} values are filled in (big); write it out shorter"
        );
        let mut env = RecipeEnv::default();
        env.0.insert(
            "P".into(),
            read("P", &"{launch.model_path}".repeat(20_000))
                .unwrap()
                .value,
        );
        let node = RecipeNode {
            model_path: Some(format!("/models/{}", "m".repeat(100))),
            ..RecipeNode::default()
        };
        assert_eq!(
            env.render(&node).unwrap_err(),
            EnvRenderError::TooLarge {
                var: "P".into(),
                rank: 0
            }
        );
    }

    #[test]
    fn secrets_print_as_set() {
        let mut env = RecipeEnv::default();
        env.0.insert(
            "HF_TOKEN".into(),
            read("HF_TOKEN", "$HF_TOKEN").unwrap().value,
        );
        env.0.insert("A".into(), RecipeEnvValue::text("1", false));
        assert_eq!(
            serde_json::to_string(&env).unwrap(),
            r#"{"A":"1","HF_TOKEN":"<set>"}"#
        );
        assert_eq!(env.to_string(), "A=1\nHF_TOKEN=<set>\n");
        assert_eq!(env.secret_names(), ["HF_TOKEN"]);
    }
}
