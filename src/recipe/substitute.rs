//! The v2 command template as sparkrun renders it: every `{…}` on one line whose name (braces
//! stripped from both ends) is a key of the config chain becomes `str(value)`; anything else
//! stays exactly as written (there is no `{{ }}` escape), and the whole pass repeats until the
//! text stops changing, so `{a}` may expand to a text that holds `{b}`. sparkrun repeats
//! forever on a cycle; here the passes are bounded and a cycle is an error naming its keys.
//! Then a backslash followed by spaces at a line end becomes a line continuation, as
//! sparkrun repairs it. Pure.

use std::collections::{BTreeMap, BTreeSet};

use yaml_serde::Value;

use super::pyvalue::python_str;

/// How many passes a command may take before its placeholders count as a cycle.
pub const MAX_PASSES: usize = 32;

/// Placeholders that never stop expanding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "placeholders still expand after {MAX_PASSES} passes: a cycle among {}",
    keys.iter().map(|k| format!("{{{k}}}")).collect::<Vec<_>>().join(", ")
)]
pub struct SubstituteCycle {
    pub keys: Vec<String>,
}

/// Renders a v2 command: trimmed, substituted until stable, continuations repaired.
pub fn render(command: &str, config: &BTreeMap<String, Value>) -> Result<String, SubstituteCycle> {
    let mut text = command.trim().to_string();
    let mut recent: Vec<BTreeSet<String>> = Vec::new();
    loop {
        let (next, used) = pass(&text, config);
        if next == text {
            break;
        }
        recent.push(used);
        if recent.len() >= MAX_PASSES {
            // The keys of the last few passes are the ones that keep expanding.
            let keys: BTreeSet<String> = recent.iter().rev().take(4).flatten().cloned().collect();
            return Err(SubstituteCycle {
                keys: keys.into_iter().collect(),
            });
        }
        text = next;
    }
    Ok(repair_continuations(&text))
}

/// One pass; also the keys it replaced.
fn pass(text: &str, config: &BTreeMap<String, Value>) -> (String, BTreeSet<String>) {
    let mut out = String::with_capacity(text.len());
    let mut used = BTreeSet::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        // `\{(.*?)\}` without DOTALL: the shortest span to the next `}` on the same line.
        let close = after
            .find(['}', '\n'])
            .filter(|&i| after.as_bytes()[i] == b'}');
        let Some(close) = close else {
            out.push_str(&rest[..=open]);
            rest = after;
            continue;
        };
        let whole = &rest[open..open + close + 2];
        let name = whole.trim_matches(['{', '}']);
        out.push_str(&rest[..open]);
        match config.get(name).filter(|v| !v.is_null()) {
            Some(v) => {
                out.push_str(&python_str(v));
                used.insert(name.to_string());
            }
            None => out.push_str(whole),
        }
        rest = &rest[open + close + 2..];
    }
    out.push_str(rest);
    (out, used)
}

/// `\` followed by spaces at a line end becomes `\` at the line end.
fn repair_continuations(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            let trimmed = line.trim_end_matches(' ');
            if trimmed.ends_with('\\') && trimmed.len() < line.len() {
                trimmed
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), yaml_serde::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn keys_are_replaced_and_unknown_names_stay_verbatim() {
        let c = config(&[("port", "8000"), ("model", "org/m")]);
        assert_eq!(
            render("vllm serve {model} --port {port} --x {nope}", &c).unwrap(),
            "vllm serve org/m --port 8000 --x {nope}"
        );
    }

    #[test]
    fn substitution_repeats_until_nothing_changes() {
        let c = config(&[("base", "'http://h:{port}'"), ("port", "9000")]);
        assert_eq!(render("--url {base}", &c).unwrap(), "--url http://h:9000");
    }

    #[test]
    fn doubled_braces_are_not_an_escape_in_v2() {
        // The shortest `{...}` from the first brace is `{{"n":{n}`; its name is not a key, so
        // the text stays, and the `{n}` inside it is consumed by that match, as in sparkrun.
        let c = config(&[("n", "3")]);
        assert_eq!(
            render("'{{\"n\":{n}}}' {n}", &c).unwrap(),
            "'{{\"n\":{n}}}' 3"
        );
    }

    #[test]
    fn a_cycle_is_an_error_naming_its_keys() {
        let c = config(&[("a", "'{b}'"), ("b", "'{a}'"), ("port", "1")]);
        let e = render("{a} {port}", &c).unwrap_err();
        assert_eq!(e.keys, ["a", "b"]);
        assert!(
            e.to_string()
                .starts_with("placeholders still expand after 32 passes")
        );
        let grows = config(&[("a", "'x{a}'")]);
        assert_eq!(render("{a}", &grows).unwrap_err().keys, ["a"]);
    }

    #[test]
    fn a_brace_pair_never_spans_lines_and_null_values_stay_placeholders() {
        let c = config(&[("a", "null"), ("b", "1")]);
        assert_eq!(render("{a} {\n{b}", &c).unwrap(), "{a} {\n1");
    }

    #[test]
    fn spaces_after_a_line_continuation_are_repaired() {
        assert_eq!(
            render("vllm serve m \\  \n  --port 1", &config(&[])).unwrap(),
            "vllm serve m \\\n  --port 1"
        );
    }
}
