//! The text a LeaderWorkerSet's containers run besides the engine: the entrypoint that reads
//! the node's own environment before the engine starts, each node's environment file, the
//! readiness probe that asks for one token, and the escaping the kubelet needs.
//!
//! The kubelet expands `$(NAME)` in a container's `command` and `args` (that is how
//! `$(LWS_WORKER_INDEX)` reaches the engine's line) and reads `$$` as `$`: every other `$`
//! that precedes `$` or `(` is doubled ([`kubelet_escape`]), so a script's `$(cat …)` reaches
//! the shell as written.
//!
//! Pure: text in, text out.

use std::collections::BTreeMap;

use crate::quote::{Style, quote};

/// Where the job's ConfigMap (each node's environment, the probe) is mounted.
pub const MOUNT_DIR: &str = "/etc/spark-launch/k8s";
/// Where the Secret's files are mounted (read-only) for the entrypoint to copy into place.
pub const SECRET_DIR: &str = "/etc/spark-launch/k8s-secret";
/// Where the plain files of the plan (a recipe's mods) are mounted for the entrypoint to copy.
pub const FILES_DIR: &str = "/etc/spark-launch/k8s-files";
/// The probe's file in the ConfigMap.
pub const READY_FILE: &str = "ready.py";
/// The name the entrypoint runs under (`$0` of its script).
pub const ENTRY_NAME: &str = "spark-launch-k8s";

/// `$` doubled where the kubelet would read it (before `$` or `(`): the word reaches the
/// container as written.
pub fn kubelet_escape(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' && matches!(chars.peek(), Some('$') | Some('(')) {
            out.push('$');
        }
    }
    out
}

/// [`kubelet_escape`] for every part of `word` except the references in `keep`
/// (`$(LWS_WORKER_INDEX)`), which the kubelet is meant to fill in.
pub fn kubelet_escape_except(word: &str, keep: &[&str]) -> String {
    let next = keep
        .iter()
        .filter(|k| !k.is_empty())
        .filter_map(|k| word.find(*k).map(|at| (at, *k)))
        .min();
    match next {
        None => kubelet_escape(word),
        Some((at, k)) => format!(
            "{}{}{}",
            kubelet_escape(&word[..at]),
            k,
            kubelet_escape_except(&word[at + k.len()..], keep)
        ),
    }
}

/// A file copied into place by the entrypoint: from a mounted Secret or ConfigMap key to its
/// path in the container, with its mode (a private key 0600).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyIn {
    /// The mounted file (`/etc/spark-launch/k8s-secret/id_ed25519`).
    pub from: String,
    /// Its path in the container, as the plan puts it there.
    pub to: String,
    pub mode: u32,
}

/// A Hub model whose commit the plan did not record: its snapshot folder is found at start
/// from the cache's `refs/REVISION` file, on the node the rank runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveAtStart {
    /// The model as the plan names it (`ORG/NAME@main`).
    pub model: String,
    /// The folder the plan's line names (`…/snapshots/main`).
    pub planned: String,
    /// The file inside the container that holds the commit (`…/refs/main`).
    pub refs_file: String,
}

impl ResolveAtStart {
    /// The folder once the commit is known: `…/snapshots/$c` (for the entrypoint).
    fn base(&self) -> &str {
        self.planned
            .rsplit_once("/snapshots/")
            .map(|(b, _)| b)
            .unwrap_or(&self.planned)
    }
}

/// `word` in single quotes. The export refuses a plan with a NUL byte before any text is
/// made, so the quoting's refusal cannot happen here.
fn q(word: &str) -> String {
    quote(word, Style::Always)
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

/// The entrypoint's bash script (its arguments are the rank's line): read the node's own
/// environment (`MOUNT_DIR/$NODE_NAME.env`, refusing to start on a node the plan does not
/// name), copy the Secret's and the ConfigMap's files into place, find the commit of every
/// model the plan did not resolve, then `exec` the line.
pub fn entrypoint(
    configmap: &str,
    nodes: &[String],
    copies: &[CopyIn],
    resolve: &[ResolveAtStart],
) -> String {
    let mut s = String::from("set -eu\n");
    s.push_str(&format!(
        "env_file={}/\"${{NODE_NAME:?the downward API sets NODE_NAME}}\".env\n",
        q(MOUNT_DIR)
    ));
    s.push_str(&format!(
        "if [ ! -r \"$env_file\" ]; then\n  echo \"spark-launch: node $NODE_NAME has no environment in ConfigMap {}: this group runs only on the plan's nodes ({})\" >&2\n  exit 1\nfi\n",
        configmap,
        nodes.join(", ")
    ));
    s.push_str(". \"$env_file\"\n");
    for c in copies {
        s.push_str(&format!(
            "install -D -m {:o} {} {}\n",
            c.mode,
            q(&c.from),
            q(&c.to)
        ));
    }
    for r in resolve {
        s.push_str(&format!(
            "c=$(cat {}) || {{ echo \"spark-launch: {} is not in this node's cache: run spark-launch model pull {} first\" >&2; exit 1; }}\n",
            q(&r.refs_file),
            r.model,
            r.model
        ));
        s.push_str(&format!(
            "p={}; r={}/snapshots/\"$c\"\nset -- \"${{@//\"$p\"/\"$r\"}}\"\n",
            q(&r.planned),
            q(r.base())
        ));
    }
    s.push_str("exec \"$@\"\n");
    s
}

/// A node's environment file: one `export NAME='value'` a line, sorted, under a comment that
/// says whose it is. Secrets are never in it (they come from the Secret).
pub fn env_file(header: &str, env: &BTreeMap<String, String>) -> String {
    let mut s = String::new();
    for line in header.lines() {
        s.push_str(&format!("# {line}\n"));
    }
    for (k, v) in env {
        s.push_str(&format!("export {k}={}\n", q(v)));
    }
    s
}

/// What the readiness probe asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyProbe {
    /// The API's base on the leader's node (`http://127.0.0.1:8000`).
    pub url: String,
    /// The served name.
    pub model: String,
    /// The variable of the container's environment that holds the API key, if the engine
    /// takes one.
    pub key_var: Option<String>,
    /// Seconds the request may take.
    pub timeout_s: u64,
}

/// The readiness probe (python3, which every engine's image has): one completion of one
/// token; ready only when the answer carries a generated token. The key is read from the
/// container's environment, never written here.
pub fn ready_py(p: &ReadyProbe) -> String {
    let lit = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".to_string());
    let body = serde_json::json!({
        "model": p.model,
        "prompt": crate::workload::token_probe::PROMPT,
        "max_tokens": 1,
        "temperature": 0,
    })
    .to_string();
    format!(
        r#"# spark-launch's readiness probe: ready once the engine generates a token, not merely
# once it answers /health. Exit 0: a token came back; 1: none (the reason is printed).
import json, os, sys, urllib.request

URL = {url}
BODY = {body}
KEY_VAR = {key}
req = urllib.request.Request(URL + "/v1/completions", data=BODY.encode(),
                             headers={{"Content-Type": "application/json"}})
key = os.environ.get(KEY_VAR) if KEY_VAR else None
if key:
    req.add_header("Authorization", "Bearer " + key)
try:
    with urllib.request.urlopen(req, timeout={timeout}) as r:
        answer = json.load(r)
except Exception as e:
    print("no token: %s" % e)
    sys.exit(1)
tokens = (answer.get("usage") or {{}}).get("completion_tokens") or 0
choices = answer.get("choices") or [{{}}]
if tokens >= 1 or (choices[0].get("text") or ""):
    sys.exit(0)
print("no token: the answer carried no generated token: %s" % json.dumps(answer)[:300])
sys.exit(1)
"#,
        url = lit(&p.url),
        body = lit(&body),
        key = p.key_var.as_deref().map_or("None".to_string(), lit),
        timeout = p.timeout_s,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_gets_every_dollar_it_would_read_doubled_and_nothing_else() {
        assert_eq!(kubelet_escape("echo $HOME"), "echo $HOME");
        assert_eq!(kubelet_escape("c=$(cat f)"), "c=$$(cat f)");
        assert_eq!(kubelet_escape("pid $$"), "pid $$$");
        assert_eq!(kubelet_escape("end $"), "end $");
        assert_eq!(
            kubelet_escape_except("$(A):$(cat x)$(A)", &["$(A)"]),
            "$(A):$$(cat x)$(A)"
        );
    }

    #[test]
    fn the_entrypoint_reads_the_node_s_own_file_and_refuses_a_node_the_plan_does_not_name() {
        let s = entrypoint("demo-env", &["spark".into(), "spark2".into()], &[], &[]);
        assert!(
            s.contains("env_file='/etc/spark-launch/k8s'/\"${NODE_NAME:?"),
            "{s}"
        );
        assert!(
            s.contains("only on the plan's nodes (spark, spark2)"),
            "{s}"
        );
        assert!(s.ends_with("exec \"$@\"\n"), "{s}");
    }

    #[test]
    fn an_environment_file_quotes_every_value_for_the_shell() {
        let env = BTreeMap::from([
            ("A".to_string(), "it's $x".to_string()),
            ("B".to_string(), "[{\"ip\": \"10.0.0.1\"}]".to_string()),
        ]);
        let text = env_file("node a", &env);
        assert_eq!(
            text,
            "# node a\nexport A='it'\\''s $x'\nexport B='[{\"ip\": \"10.0.0.1\"}]'\n"
        );
    }

    #[test]
    fn the_probe_asks_for_one_token_and_reads_the_key_from_the_environment() {
        let py = ready_py(&ReadyProbe {
            url: "http://127.0.0.1:8000".into(),
            model: "org/m".into(),
            key_var: Some("VLLM_API_KEY".into()),
            timeout_s: 25,
        });
        assert!(py.contains("\\\"max_tokens\\\":1"), "{py}");
        assert!(py.contains("KEY_VAR = \"VLLM_API_KEY\""), "{py}");
        assert!(py.contains("timeout=25"), "{py}");
    }
}
