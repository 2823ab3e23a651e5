//! `env`'s text forms of the derived variables: a readable listing, shell `export` lines,
//! `docker run -e` arguments. Values are shell-quoted (a NUL byte is refused: no shell can
//! hold it). Pure.

use super::{ClusterEnv, NodeEnv};
use crate::quote::{NulByte, Style, quote};

/// A readable listing: the topology and head, then each node's variables and warnings.
pub fn text(cluster: &ClusterEnv, nodes: &[&NodeEnv]) -> String {
    let mut out = format!("topology: {}   head: {}\n", cluster.topology, cluster.head);
    for n in nodes {
        out.push_str(&format!("\n{} ({})\n", n.name, n.role));
        for (k, v) in &n.env {
            out.push_str(&format!("  {k}={v}\n"));
        }
        for w in &n.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
    }
    out
}

/// `export VAR=value` lines, a commented block per node when there are several.
pub fn shell(nodes: &[&NodeEnv]) -> Result<String, NulByte> {
    let mut out = String::new();
    for n in nodes {
        if nodes.len() > 1 {
            out.push_str(&format!("# node {} ({})\n", n.name, n.role));
        }
        for w in &n.warnings {
            out.push_str(&format!("# warning: {w}\n"));
        }
        for (k, v) in &n.env {
            out.push_str(&format!("export {k}={}\n", quote(v, Style::Plain)?));
        }
    }
    Ok(out)
}

/// `-e VAR=value` arguments for `docker run`, a line per node.
pub fn docker(nodes: &[&NodeEnv]) -> Result<String, NulByte> {
    let mut out = String::new();
    for n in nodes {
        if nodes.len() > 1 {
            out.push_str(&format!("# node {} ({})\n", n.name, n.role));
        }
        let args: Vec<String> = n
            .env
            .iter()
            .map(|(k, v)| Ok(format!("-e {}", quote(&format!("{k}={v}"), Style::Plain)?)))
            .collect::<Result<_, NulByte>>()?;
        out.push_str(&args.join(" "));
        out.push('\n');
    }
    Ok(out)
}
