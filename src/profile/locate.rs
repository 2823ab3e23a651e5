//! Finds the line of a field in a profile's YAML text, so that an error found after parsing
//! (a tp that does not fit, an unknown engine flag) still names the line it comes from.
//!
//! Profiles are short block-style YAML; this follows keys by indentation and counts `- `
//! items of sequences. Anything it cannot follow (flow style, anchors) falls back to the
//! deepest parent it found, and finally to line 1. Pure.

/// One step of a path: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// `model.revision` or `engine_args[2]` as segments.
pub fn parse_path(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Seg::Key(key.to_string()));
        }
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Seg::Index(i));
            }
        }
    }
    out
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn meaningful(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#') && t != "---"
}

/// The 1-based line of `path` in `text` (its deepest found parent when the path itself cannot
/// be followed).
pub fn line_of(text: &str, path: &[Seg]) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    follow(&lines, path)
}

/// Whether `line` writes `key:` (plain or double-quoted, after any `- `).
fn is_key(line: &str, key: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("- ").unwrap_or(t);
    if let Some(rest) = t.strip_prefix(key)
        && (rest.starts_with(':') || rest.starts_with(" :"))
    {
        return true;
    }
    t.starts_with(&format!("\"{key}\""))
}

/// The 1-based line of the last segment of `path` found.
fn follow(lines: &[&str], path: &[Seg]) -> usize {
    // The block we search: lines [start, end) at indentation > parent_indent.
    let mut start = 0usize;
    let mut end = lines.len();
    let mut min_indent: Option<usize> = None;
    let mut found_line = 1usize;
    for seg in path {
        let mut hit = None;
        match seg {
            Seg::Key(k) => {
                // The block's own indentation is that of its first meaningful line.
                let block_indent = (start..end)
                    .find(|&i| meaningful(lines[i]))
                    .map(|i| indent(lines[i]));
                let Some(bi) = block_indent else { break };
                if min_indent.is_some_and(|m| bi <= m) {
                    break;
                }
                hit = (start..end).find(|&i| {
                    meaningful(lines[i]) && indent(lines[i]) == bi && is_key(lines[i], k)
                });
            }
            Seg::Index(n) => {
                let mut count = 0usize;
                let mut item_indent = None;
                for (i, line) in lines.iter().enumerate().take(end).skip(start) {
                    if !meaningful(line) {
                        continue;
                    }
                    let t = line.trim_start();
                    if !t.starts_with("- ") && t != "-" {
                        continue;
                    }
                    let ind = indent(line);
                    if *item_indent.get_or_insert(ind) != ind {
                        continue;
                    }
                    if count == *n {
                        hit = Some(i);
                        break;
                    }
                    count += 1;
                }
            }
        }
        let Some(i) = hit else { break };
        found_line = i + 1;
        let ind = indent(lines[i]);
        // The value's block: following lines indented deeper than this key.
        let mut j = i + 1;
        while j < lines.len() && (!meaningful(lines[j]) || indent(lines[j]) > ind) {
            j += 1;
        }
        // A sequence may sit at the key's own indentation (`key:\n- a`).
        if j < lines.len()
            && matches!(seg, Seg::Key(_))
            && lines[j].trim_start().starts_with("- ")
            && indent(lines[j]) == ind
        {
            while j < lines.len()
                && (!meaningful(lines[j])
                    || indent(lines[j]) > ind
                    || (indent(lines[j]) == ind && lines[j].trim_start().starts_with('-')))
            {
                j += 1;
            }
            min_indent = ind.checked_sub(1);
        } else {
            min_indent = Some(ind);
        }
        start = i + 1;
        end = j;
    }
    found_line
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name: x
# comment
model:
  id: org/m
  revision: main
engine_args:
  - --max-model-len
  - \"4096\"
env:
  NCCL_DEBUG: INFO
trtllm:
  options:
    kv_cache_config:
      enable_block_reuse: false
";

    #[test]
    fn nested_keys_and_sequence_items_are_found_on_their_lines() {
        assert_eq!(line_of(TEXT, &parse_path("name")), 1);
        assert_eq!(line_of(TEXT, &parse_path("model.revision")), 5);
        assert_eq!(line_of(TEXT, &parse_path("engine_args[1]")), 8);
        assert_eq!(line_of(TEXT, &parse_path("env.NCCL_DEBUG")), 10);
        assert_eq!(
            line_of(
                TEXT,
                &parse_path("trtllm.options.kv_cache_config.enable_block_reuse")
            ),
            14
        );
    }

    #[test]
    fn a_missing_field_points_at_its_deepest_parent() {
        assert_eq!(line_of(TEXT, &parse_path("model.commit")), 3);
        assert_eq!(line_of(TEXT, &parse_path("nope")), 1);
        assert_eq!(line_of("a:\n- x\n- y\n", &parse_path("a[1]")), 3);
    }
}
