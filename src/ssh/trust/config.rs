//! The `Host` entries `trust` keeps in a node's `~/.ssh/config`: one scoped block per other
//! node of the cluster (never `Host *`), between marker comments so a later run can find its
//! own lines. Every line the user wrote stays exactly as it was, in place: new blocks are
//! appended, and only a block of ours whose content changed (a new address) is replaced where
//! it stands. Pure: text in, text out.

use crate::node::NodeName;

/// The known-hosts file spark-launch keeps for the cluster (its own; the user's
/// `~/.ssh/known_hosts` is read but never written).
pub const KNOWN_HOSTS: &str = ".ssh/spark-launch_known_hosts";

/// What a `Host` block says about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    pub name: NodeName,
    /// Addresses, the first one is `HostName`; all of them are patterns of the block, so
    /// `ssh 169.254.3.7` (as mpirun does) finds the entry too.
    pub addresses: Vec<String>,
    pub user: Option<String>,
    pub port: u16,
}

fn begin_marker(name: &NodeName) -> String {
    format!(
        "# spark-launch node {name}: added by `spark-launch trust` (this block is rewritten by it)"
    )
}

fn end_marker(name: &NodeName) -> String {
    format!("# end spark-launch node {name}")
}

/// The block for one node, ending with a newline.
pub fn block(e: &HostEntry) -> String {
    let mut patterns = vec![e.name.to_string()];
    for a in &e.addresses {
        if !patterns.contains(a) {
            patterns.push(a.clone());
        }
    }
    let mut out = format!("{}\nHost {}\n", begin_marker(&e.name), patterns.join(" "));
    if let Some(first) = e.addresses.first() {
        out.push_str(&format!("    HostName {first}\n"));
    }
    out.push_str(&format!("    HostKeyAlias {}\n", e.name));
    if let Some(u) = &e.user {
        out.push_str(&format!("    User {u}\n"));
    }
    if e.port != 22 {
        out.push_str(&format!("    Port {}\n", e.port));
    }
    out.push_str("    IdentityFile ~/.ssh/id_ed25519\n");
    out.push_str(&format!(
        "    UserKnownHostsFile ~/{KNOWN_HOSTS} ~/.ssh/known_hosts\n"
    ));
    out.push_str(&end_marker(&e.name));
    out.push('\n');
    out
}

/// The result of merging the wanted entries into a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEdit {
    /// The whole new file.
    pub text: String,
    /// Nodes whose block was appended.
    pub added: Vec<NodeName>,
    /// Nodes whose block of ours was replaced in place.
    pub updated: Vec<NodeName>,
}

impl ConfigEdit {
    pub fn is_noop(&self) -> bool {
        self.added.is_empty() && self.updated.is_empty()
    }

    /// True when the new text only adds bytes after the old ones (a plain append suffices).
    pub fn append_only(&self) -> bool {
        self.updated.is_empty()
    }
}

/// A block of ours that cannot be updated safely.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "~/.ssh/config has the start of spark-launch's block for {0} (line {1}) but not its end line `# end spark-launch node {0}`: restore it or delete the block, then run trust again"
)]
pub struct BrokenBlock(pub NodeName, pub usize);

/// Merges `entries` into the config text `existing`.
pub fn merge(existing: &str, entries: &[HostEntry]) -> Result<ConfigEdit, BrokenBlock> {
    let mut text = existing.to_string();
    let mut updated = Vec::new();
    let mut missing = Vec::new();
    for e in entries {
        let want = block(e);
        match find_block(&text, &e.name)? {
            Some((start, end)) => {
                if text[start..end] != want {
                    text.replace_range(start..end, &want);
                    updated.push(e.name.clone());
                }
            }
            None => missing.push(e),
        }
    }
    let mut added = Vec::new();
    if !missing.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        for e in missing {
            if !text.is_empty() && !text.ends_with("\n\n") {
                text.push('\n');
            }
            text.push_str(&block(e));
            added.push(e.name.clone());
        }
    }
    Ok(ConfigEdit {
        text,
        added,
        updated,
    })
}

/// The byte range of our block for `name` (through the end marker's newline), if present.
fn find_block(text: &str, name: &NodeName) -> Result<Option<(usize, usize)>, BrokenBlock> {
    let begin = begin_marker(name);
    let end = end_marker(name);
    let mut offset = 0;
    let mut start: Option<(usize, usize)> = None;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let content = line.trim_end_matches(['\n', '\r']);
        if start.is_none() && content == begin {
            start = Some((offset, i + 1));
        } else if let Some((s, _)) = start
            && content == end
        {
            return Ok(Some((s, offset + line.len())));
        }
        offset += line.len();
    }
    match start {
        Some((_, line)) => Err(BrokenBlock(name.clone(), line)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, addr: &str) -> HostEntry {
        HostEntry {
            name: NodeName::new(name).unwrap(),
            addresses: vec![addr.to_string()],
            user: Some("nvidia".into()),
            port: 22,
        }
    }

    #[test]
    fn a_block_is_scoped_to_the_node_and_pins_its_host_key_alias() {
        let b = block(&HostEntry {
            port: 2222,
            ..entry("spark-b", "169.254.3.8")
        });
        assert_eq!(
            b,
            "# spark-launch node spark-b: added by `spark-launch trust` (this block is rewritten by it)\n\
             Host spark-b 169.254.3.8\n    HostName 169.254.3.8\n    HostKeyAlias spark-b\n    User nvidia\n    Port 2222\n\
             \x20   IdentityFile ~/.ssh/id_ed25519\n    UserKnownHostsFile ~/.ssh/spark-launch_known_hosts ~/.ssh/known_hosts\n\
             # end spark-launch node spark-b\n"
        );
        assert!(!b.contains("Host *"));
    }

    #[test]
    fn new_blocks_are_appended_after_the_users_bytes_which_stay_identical() {
        let user = "Host *\n    ServerAliveInterval 30\n# no trailing newline";
        let edit = merge(user, &[entry("b", "10.0.0.2"), entry("c", "10.0.0.3")]).unwrap();
        assert!(edit.text.starts_with(user));
        assert!(edit.append_only());
        assert_eq!(edit.added.len(), 2);
        assert_eq!(
            edit.text[user.len()..].lines().next(),
            Some(""),
            "the user's last line is ended, not changed"
        );
        assert_eq!(edit.text.matches("Host b 10.0.0.2").count(), 1);
        assert!(
            merge("", &[entry("b", "x")])
                .unwrap()
                .text
                .starts_with("# spark-launch node b")
        );
    }

    #[test]
    fn a_second_merge_with_the_same_entries_changes_nothing() {
        let first = merge("Host x\n  User me\n", &[entry("b", "10.0.0.2")]).unwrap();
        let second = merge(&first.text, &[entry("b", "10.0.0.2")]).unwrap();
        assert!(second.is_noop());
        assert_eq!(second.text, first.text);
    }

    #[test]
    fn a_changed_address_replaces_only_our_block_in_place() {
        let user_after = "\nHost mine\n    User me\n";
        let first = merge(
            "Host a\n  Port 1\n",
            &[entry("b", "10.0.0.2"), entry("c", "10.0.0.3")],
        )
        .unwrap();
        let with_user_lines_after = format!("{}{user_after}", first.text);
        let edit = merge(
            &with_user_lines_after,
            &[entry("b", "10.0.0.9"), entry("c", "10.0.0.3")],
        )
        .unwrap();
        assert_eq!(edit.updated, vec![NodeName::new("b").unwrap()]);
        assert!(edit.added.is_empty());
        assert!(edit.text.starts_with("Host a\n  Port 1\n"));
        assert!(edit.text.ends_with(user_after));
        assert!(edit.text.contains("HostName 10.0.0.9"));
        assert!(!edit.text.contains("10.0.0.2"));
        assert_eq!(edit.text.len(), with_user_lines_after.len());
    }

    #[test]
    fn a_block_whose_end_line_was_deleted_is_refused_not_guessed() {
        let first = merge("", &[entry("b", "10.0.0.2")]).unwrap();
        let broken = first.text.replace("# end spark-launch node b\n", "");
        let err = merge(&broken, &[entry("b", "10.0.0.9")]).unwrap_err();
        assert_eq!(err.1, 1);
        assert!(err.to_string().contains("restore it or delete the block"));
    }
}
