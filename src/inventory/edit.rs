//! Editing `cluster.yaml` in place: a change to the inventory (a node added, changed or
//! removed) becomes a change to the lines of those nodes only. Comments, blank lines, the order
//! of nodes and keys and the formatting of every other node stay byte for byte as the user
//! wrote them; a new node is appended to the list in the file's own indentation. Pure: text in,
//! text out.
//!
//! A node is the block of lines from its `- ` item to the last line indented deeper than that
//! item (full-line comments and blank lines right after it stay, as they may introduce the
//! next node). The result is read back and must give exactly the wanted inventory; a file this
//! cannot edit line by line (a flow-style `nodes: [...]`, anchors, odd indentation) is an
//! [`EditError`], never a silent rewrite.

use super::{Inventory, NodeConfig};
use crate::node::NodeName;

/// The file cannot be changed line by line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EditError {
    #[error("the `nodes:` list is not written one `- ` item per node ({0})")]
    Layout(String),
    #[error("no node named {0} in the file")]
    NoSuchNode(NodeName),
    #[error("the edited file would not read back as intended ({0})")]
    Mismatch(String),
}

/// One item of the `nodes:` list: its lines `[start, end)` and the node's name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Item {
    start: usize,
    end: usize,
    indent: usize,
    name: Option<String>,
}

/// The `nodes:` list of a file.
#[derive(Clone, Debug)]
struct List {
    /// The index of the `nodes:` line, if there is one.
    key: Option<usize>,
    /// The indentation of `- ` items (from the first one, else 0).
    indent: usize,
    items: Vec<Item>,
    /// Where a new item goes: after the last line of the last item (or after `nodes:`).
    insert_at: usize,
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_filler(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The lines of a text, each with its line ending.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

fn find_list(lines: &[&str]) -> Result<List, EditError> {
    let key = lines.iter().position(|l| {
        indent_of(l) == 0 && {
            let t = l.trim_end();
            t == "nodes:"
                || t.starts_with("nodes:") && t["nodes:".len()..].trim_start().starts_with('#')
        }
    });
    if key.is_none() {
        if let Some(l) = lines
            .iter()
            .find(|l| indent_of(l) == 0 && l.starts_with("nodes:"))
        {
            return Err(EditError::Layout(format!("`{}`", l.trim_end())));
        }
        if let Some(l) = lines.iter().find(|l| !is_filler(l) && l.trim() != "---") {
            return Err(EditError::Layout(format!(
                "unexpected `{}` outside a `nodes:` list",
                l.trim_end()
            )));
        }
        return Ok(List {
            key: None,
            indent: 0,
            items: Vec::new(),
            insert_at: lines.len(),
        });
    }
    let key = key.unwrap_or_default();
    let mut items: Vec<Item> = Vec::new();
    let mut indent: Option<usize> = None;
    let mut last_content = key;
    for (i, line) in lines.iter().enumerate().skip(key + 1) {
        if is_filler(line) {
            continue;
        }
        let ind = indent_of(line);
        let t = line.trim_start_matches(' ');
        let is_item = t.starts_with("- ") || t.trim_end() == "-";
        match indent {
            None if is_item => indent = Some(ind),
            None if ind == 0 => break,
            None => return Err(EditError::Layout(format!("`{}`", line.trim_end()))),
            Some(_) => {}
        }
        let item_indent = indent.unwrap_or_default();
        if is_item && ind == item_indent {
            if let Some(prev) = items.last_mut() {
                prev.end = last_content + 1;
            }
            items.push(Item {
                start: i,
                end: i + 1,
                indent: ind,
                name: None,
            });
        } else if ind <= item_indent {
            if ind == 0 {
                break;
            }
            return Err(EditError::Layout(format!("`{}`", line.trim_end())));
        }
        if line.contains('&') || line.contains('*') || line.contains("<<") {
            // Anchors, aliases and merge keys tie nodes together: no safe line edit.
            let t = line.trim_start();
            if t.contains(" &") || t.contains(" *") || t.contains("<<:") {
                return Err(EditError::Layout("anchors or aliases".into()));
            }
        }
        last_content = i;
    }
    if let Some(prev) = items.last_mut() {
        prev.end = last_content + 1;
    }
    for item in &mut items {
        item.name = item_name(&lines[item.start..item.end], item.indent);
    }
    Ok(List {
        key: Some(key),
        indent: indent.unwrap_or(0),
        items,
        insert_at: last_content + 1,
    })
}

/// The `name` of one item, read with the YAML parser from the item's own lines.
fn item_name(block: &[&str], indent: usize) -> Option<String> {
    let text: String = block
        .iter()
        .map(|l| {
            if l.len() >= indent {
                &l[indent..]
            } else {
                l.trim_start()
            }
        })
        .collect();
    let v: yaml_serde::Value = yaml_serde::from_str(&text).ok()?;
    v.as_sequence()?
        .first()?
        .get("name")?
        .as_str()
        .map(str::to_string)
}

/// The lines of one node in the writer's style, indented by `indent`.
fn render(node: &NodeConfig, indent: usize) -> Result<String, EditError> {
    let text = yaml_serde::to_string(&vec![node])
        .map_err(|e| EditError::Mismatch(format!("cannot write the node: {e}")))?;
    let pad = " ".repeat(indent);
    Ok(text
        .lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>())
}

/// The file's text with `before`'s nodes changed into `after`'s: removed nodes' lines taken
/// out, changed nodes' lines replaced, new nodes appended. Fails rather than rewrite anything
/// else.
pub fn update(text: &str, before: &Inventory, after: &Inventory) -> Result<String, EditError> {
    let ls = lines(text);
    let list = find_list(&ls)?;
    // Map every node of `before` to its item.
    let item_of = |name: &NodeName| {
        list.items
            .iter()
            .find(|i| i.name.as_deref() == Some(name.as_str()))
    };
    if list.items.len() != before.nodes.len() {
        return Err(EditError::Layout(format!(
            "{} items in the file for {} nodes",
            list.items.len(),
            before.nodes.len()
        )));
    }
    // Replacements by line index: (start, end, new text).
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for old in &before.nodes {
        let Some(item) = item_of(&old.name) else {
            return Err(EditError::NoSuchNode(old.name.clone()));
        };
        match after.get(&old.name) {
            None => edits.push((item.start, item.end, String::new())),
            Some(new) if new != old => {
                edits.push((item.start, item.end, render(new, item.indent)?));
            }
            Some(_) => {}
        }
    }
    let mut appended = String::new();
    for new in &after.nodes {
        if before.get(&new.name).is_none() {
            appended.push_str(&render(new, list.indent)?);
        }
    }
    let mut out = String::new();
    let mut i = 0;
    edits.sort_by_key(|e| e.0);
    let mut edits = edits.into_iter().peekable();
    while i < ls.len() {
        if i == list.insert_at && !appended.is_empty() {
            ensure_newline(&mut out);
            out.push_str(&appended);
            appended.clear();
        }
        match edits.peek() {
            Some((start, end, new)) if *start == i => {
                out.push_str(new);
                i = *end;
                edits.next();
            }
            _ => {
                out.push_str(ls[i]);
                i += 1;
            }
        }
    }
    if !appended.is_empty() {
        ensure_newline(&mut out);
        if list.key.is_none() {
            out.push_str("nodes:\n");
        }
        out.push_str(&appended);
    }
    check(&out, after)?;
    Ok(out)
}

fn ensure_newline(out: &mut String) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
}

/// The edited text must read back as exactly `want`.
fn check(text: &str, want: &Inventory) -> Result<(), EditError> {
    match super::file::parse(text) {
        Ok(got) if &got == want => Ok(()),
        Ok(_) => Err(EditError::Mismatch("other nodes than intended".into())),
        Err(errors) => Err(EditError::Mismatch(
            errors
                .into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

/// `text` with `node` appended to its `nodes:` list.
pub fn add_node(text: &str, node: &NodeConfig) -> Result<String, EditError> {
    let before = super::file::parse(text)
        .map_err(|e| EditError::Mismatch(format!("the file does not read: {e:?}")))?;
    let mut after = before.clone();
    after.nodes.push(node.clone());
    update(text, &before, &after)
}

/// `text` without the lines of the node `name`.
pub fn remove_node(text: &str, name: &NodeName) -> Result<String, EditError> {
    let before = super::file::parse(text)
        .map_err(|e| EditError::Mismatch(format!("the file does not read: {e:?}")))?;
    let mut after = before.clone();
    if after.remove(name).is_none() {
        return Err(EditError::NoSuchNode(name.clone()));
    }
    update(text, &before, &after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Role;

    /// A file as a user edits it: the header, comments above and beside nodes, a blank line
    /// between them, flow and block lists, quoting, a key order of their own.
    const FILE: &str = include_str!("../../tests/fixtures/cluster-files/hand-edited.yaml");

    fn name(s: &str) -> NodeName {
        NodeName::new(s).unwrap()
    }

    #[test]
    fn adding_a_node_appends_its_lines_and_changes_nothing_else() {
        let mut node = NodeConfig::new(name("spark-1b3b"), "169.254.12.8");
        node.user = Some("nvidia".into());
        let out = add_node(FILE, &node).unwrap();
        let want = FILE.replace(
            "    port: 2222\n# end of list\n",
            "    port: 2222\n  - name: spark-1b3b\n    addresses:\n    - 169.254.12.8\n    user: nvidia\n# end of list\n",
        );
        assert_eq!(out, want);
    }

    #[test]
    fn removing_a_node_takes_out_its_lines_only() {
        let out = remove_node(FILE, &name("spark-1d84")).unwrap();
        let want = FILE.replace(
            "  - name: spark-1d84        # head, rank 0\n    user: nvidia\n    addresses: [169.254.12.7, \"spark-1d84.local\"]\n",
            "",
        );
        assert_eq!(out, want);
        let out = remove_node(FILE, &name("ws")).unwrap();
        let want = FILE.replace(
            "  - name: ws\n    addresses:\n      - 10.0.0.5   # eno2np1\n    port: 2222\n",
            "",
        );
        assert_eq!(out, want);
        assert_eq!(
            remove_node(FILE, &name("nope")),
            Err(EditError::NoSuchNode(name("nope")))
        );
    }

    #[test]
    fn a_changed_node_gets_its_lines_rewritten_in_place() {
        let before = super::super::file::parse(FILE).unwrap();
        let mut after = before.clone();
        after.nodes[1].role = Some(Role::Head);
        let out = update(FILE, &before, &after).unwrap();
        assert!(
            out.starts_with(&FILE[..FILE.find("  - name: ws").unwrap()]),
            "{out}"
        );
        assert!(out.ends_with("  - name: ws\n    addresses:\n    - 10.0.0.5\n    port: 2222\n    role: head\n# end of list\n"), "{out}");
    }

    #[test]
    fn an_empty_or_comment_only_file_gets_a_nodes_list() {
        let node = NodeConfig::new(name("a"), "169.254.1.1");
        assert_eq!(
            add_node("", &node).unwrap(),
            "nodes:\n- name: a\n  addresses:\n  - 169.254.1.1\n"
        );
        assert_eq!(
            add_node("# mine\n", &node).unwrap(),
            "# mine\nnodes:\n- name: a\n  addresses:\n  - 169.254.1.1\n"
        );
        // The writer's own style (items at column 0) is kept.
        let two = add_node(
            &add_node("", &node).unwrap(),
            &NodeConfig::new(name("b"), "x"),
        )
        .unwrap();
        assert_eq!(
            two,
            "nodes:\n- name: a\n  addresses:\n  - 169.254.1.1\n- name: b\n  addresses:\n  - x\n"
        );
    }

    #[test]
    fn a_flow_style_list_is_refused_not_rewritten() {
        let text = "nodes: [{name: a, addresses: [x]}]\n";
        assert!(matches!(
            add_node(text, &NodeConfig::new(name("b"), "y")),
            Err(EditError::Layout(_))
        ));
    }
}
