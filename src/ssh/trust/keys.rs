//! Public keys in `authorized_keys` and host keys in spark-launch's known-hosts file. Keys are
//! compared by type and key material (options and comments differ between nodes); new ones are
//! only ever appended to `authorized_keys`. Pure: text in, text out.

use std::collections::BTreeMap;

use crate::node::NodeName;

/// `(type, base64)` of a public key line, wherever it sits on the line (after options such as
/// `from="..."`), or `None` for comments, blank lines and lines that hold no key.
pub fn key_id(line: &str) -> Option<(String, String)> {
    let words = words(line.trim());
    if words.first().is_some_and(|w| w.starts_with('#')) {
        return None;
    }
    let at = words.iter().position(|w| is_key_type(w))?;
    let blob = words.get(at + 1)?;
    Some((words[at].clone(), blob.clone()))
}

fn is_key_type(w: &str) -> bool {
    w.starts_with("ssh-")
        || w.starts_with("ecdsa-sha2-")
        || w.starts_with("sk-ssh-")
        || w.starts_with("sk-ecdsa-")
}

/// Splits on whitespace outside double quotes (`from="a b" ssh-ed25519 AAAA c`).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The wanted public-key lines that `existing` does not hold yet (by key material).
pub fn missing_keys(existing: &str, wanted: &[String]) -> Vec<String> {
    let have: Vec<(String, String)> = existing.lines().filter_map(key_id).collect();
    let mut out: Vec<String> = Vec::new();
    for w in wanted {
        let Some(id) = key_id(w) else { continue };
        if !have.contains(&id) && !out.iter().any(|o| key_id(o).as_ref() == Some(&id)) {
            out.push(w.trim().to_string());
        }
    }
    out
}

/// The bytes to append to `existing` so that `lines` follow it, one per line (a newline first
/// when the file does not end with one).
pub fn append_text(existing: &str, lines: &[String]) -> String {
    let mut out = String::new();
    if !existing.is_empty() && !existing.ends_with('\n') {
        out.push('\n');
    }
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// spark-launch's known-hosts file with the given nodes' host keys: lines of other hosts stay,
/// lines of these nodes are replaced by their current keys. `None` when nothing changes.
pub fn known_hosts(existing: &str, wanted: &BTreeMap<NodeName, Vec<String>>) -> Option<String> {
    let mut out = String::new();
    for line in existing.lines() {
        let host = line.split_whitespace().next().unwrap_or("");
        let ours = host
            .split(',')
            .any(|h| wanted.keys().any(|n| n.as_str() == h));
        if !ours && !line.trim().is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    for (name, keys) in wanted {
        for k in keys {
            out.push_str(&format!("{name} {}\n", k.trim()));
        }
    }
    let normal = |t: &str| {
        let mut v: Vec<String> = t
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        v.sort();
        v
    };
    if normal(&out) == normal(existing) {
        None
    } else {
        Some(out)
    }
}

/// Host keys from `ssh-keyscan` output (`host keytype base64`), as `keytype base64`.
pub fn parse_keyscan(output: &str) -> Vec<String> {
    let mut keys: Vec<String> = output
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let _host = w.next()?;
            let t = w.next()?;
            let k = w.next()?;
            is_key_type(t).then(|| format!("{t} {k}"))
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAA spark-launch@a";
    const B: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBB spark-launch@b";

    #[test]
    fn keys_are_recognised_after_options_and_whatever_their_comment() {
        assert_eq!(
            key_id(
                r#"from="10.0.0.0/8,a b",no-pty ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAA other comment"#
            ),
            Some(("ssh-ed25519".into(), "AAAAC3NzaC1lZDI1NTE5AAAAIAAA".into()))
        );
        assert_eq!(key_id("# ssh-ed25519 AAAA"), None);
        assert_eq!(key_id(""), None);
        assert_eq!(key_id("garbage"), None);
    }

    #[test]
    fn only_keys_not_yet_authorised_are_added_once() {
        let existing =
            "# mine\nssh-rsa AAAAB3Nza me@laptop\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAA renamed";
        assert_eq!(
            missing_keys(existing, &[A.into(), B.into(), B.into()]),
            vec![B.to_string()]
        );
        assert!(missing_keys(&format!("{existing}\n{B}\n"), &[A.into(), B.into()]).is_empty());
    }

    #[test]
    fn appending_to_a_file_without_a_final_newline_ends_its_last_line_first() {
        assert_eq!(append_text("x", &[A.into()]), format!("\n{A}\n"));
        assert_eq!(append_text("x\n", &[A.into()]), format!("{A}\n"));
        assert_eq!(append_text("", &[A.into()]), format!("{A}\n"));
    }

    #[test]
    fn known_hosts_replaces_only_the_cluster_nodes_and_says_when_nothing_changed() {
        let n = |s: &str| NodeName::new(s).unwrap();
        let mut want = BTreeMap::new();
        want.insert(n("b"), vec!["ssh-ed25519 KEYB".to_string()]);
        want.insert(
            n("c"),
            vec!["ssh-ed25519 KEYC".to_string(), "ssh-rsa RSAC".to_string()],
        );
        let first = known_hosts("other ssh-ed25519 KEYO\nb ssh-ed25519 OLD\n", &want).unwrap();
        assert_eq!(
            first,
            "other ssh-ed25519 KEYO\nb ssh-ed25519 KEYB\nc ssh-ed25519 KEYC\nc ssh-rsa RSAC\n"
        );
        assert_eq!(known_hosts(&first, &want), None);
    }

    #[test]
    fn keyscan_output_gives_every_key_type_once() {
        let out = "# 10.0.0.2:22 SSH-2.0-OpenSSH_9.2\n10.0.0.2 ssh-rsa RSA\n10.0.0.2 ssh-ed25519 ED\n10.0.0.2 ssh-ed25519 ED\n";
        assert_eq!(parse_keyscan(out), vec!["ssh-ed25519 ED", "ssh-rsa RSA"]);
    }
}
