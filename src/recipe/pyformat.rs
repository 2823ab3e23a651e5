//! The v1 command template: Python's `str.format(**params)` as eugr's `run-recipe.py` applies
//! it. `{key}` becomes `str(params[key])`, `{{` and `}}` are literal braces, a key with no
//! value is an error naming it, and a substituted value is never read as a template again
//! (one pass). Conversions `!s`/`!r` work as in Python; format specs, attribute and index
//! lookups and positional fields are refused by name rather than guessed. A command that
//! grows past [`MAX_RENDERED_BYTES`] (a large value repeated) is refused as it does. Pure.

use std::collections::{BTreeMap, BTreeSet};

use yaml_serde::Value;

use super::pyvalue::{python_repr, python_str};
use crate::workload::recipe_env::MAX_RENDERED_BYTES;

/// Why a v1 template cannot be rendered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{{{name}}} has no value: it is not a defaults key and no --set gives it")]
    Missing { name: String },
    #[error(
        "a single '{{' at character {at} opens a field that never closes (write '{{{{' for a literal brace)"
    )]
    Unclosed { at: usize },
    #[error("a single '}}' at character {at} closes no field (write '}}}}' for a literal brace)")]
    StrayClose { at: usize },
    #[error("{{{field}}}: {why}")]
    Unsupported { field: String, why: String },
    #[error(
        "the command grows past {} KiB as {} {} substituted; write the values out",
        MAX_RENDERED_BYTES >> 10,
        keys.iter().map(|k| format!("{{{k}}}")).collect::<Vec<_>>().join(", "),
        if keys.len() == 1 { "is" } else { "are" }
    )]
    TooLarge { keys: Vec<String> },
}

/// Renders `template` with `params`, one pass, as `str.format` does.
pub fn format(template: &str, params: &BTreeMap<String, Value>) -> Result<String, FormatError> {
    format_used(template, params).map(|(text, _)| text)
}

/// [`format`], and every key it substituted.
pub fn format_used(
    template: &str,
    params: &BTreeMap<String, Value>,
) -> Result<(String, BTreeSet<String>), FormatError> {
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::with_capacity(template.len());
    let mut used = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' if chars.get(i + 1) == Some(&'{') => {
                out.push('{');
                i += 2;
            }
            '}' if chars.get(i + 1) == Some(&'}') => {
                out.push('}');
                i += 2;
            }
            '}' => return Err(FormatError::StrayClose { at: i }),
            '{' => {
                let close = field_end(&chars, i).ok_or(FormatError::Unclosed { at: i })?;
                let field: String = chars[i + 1..close].iter().collect();
                let (name, text) = replacement(&field, params)?;
                out.push_str(&text);
                used.insert(name);
                if out.len() > MAX_RENDERED_BYTES {
                    return Err(FormatError::TooLarge {
                        keys: used.into_iter().collect(),
                    });
                }
                i = close + 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok((out, used))
}

/// The index of the `}` closing the field opened at `open` (a format spec may nest braces).
fn field_end(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, c) in chars.iter().enumerate().skip(open + 1) {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(j),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The key a field names and its text.
fn replacement(
    field: &str,
    params: &BTreeMap<String, Value>,
) -> Result<(String, String), FormatError> {
    let unsupported = |why: &str| FormatError::Unsupported {
        field: field.to_string(),
        why: why.to_string(),
    };
    let (head, spec) = match field.split_once(':') {
        Some((h, s)) => (h, Some(s)),
        None => (field, None),
    };
    let (name, conversion) = match head.split_once('!') {
        Some((n, c)) => (n, Some(c)),
        None => (head, None),
    };
    if name.is_empty() || name.chars().all(|c| c.is_ascii_digit()) {
        return Err(unsupported(
            "a positional field; the command takes {name} fields from defaults",
        ));
    }
    if name.contains(['.', '[']) {
        return Err(unsupported(
            "attribute and index lookups are not supported; use a plain {name}",
        ));
    }
    if spec.is_some_and(|s| !s.is_empty()) {
        return Err(unsupported(
            "format specs are not supported; put the formatted value in defaults",
        ));
    }
    let value = params.get(name).ok_or_else(|| FormatError::Missing {
        name: name.to_string(),
    })?;
    let text = match conversion {
        None | Some("s") => python_str(value),
        Some("r") | Some("a") => python_repr(value),
        Some(other) => {
            return Err(unsupported(&format!(
                "!{other} is not a conversion (Python knows !s, !r and !a)"
            )));
        }
    };
    Ok((name.to_string(), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), yaml_serde::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn keys_are_replaced_by_their_python_text() {
        let p = params(&[("port", "8000"), ("gpu", "0.85"), ("eager", "true")]);
        assert_eq!(
            format("--port {port} --gpu {gpu} {eager}", &p).unwrap(),
            "--port 8000 --gpu 0.85 True"
        );
    }

    #[test]
    fn doubled_braces_are_literal_and_json_survives() {
        let p = params(&[("n", "3")]);
        assert_eq!(
            format("'{{\"method\":\"mtp\",\"num\":{n}}}'", &p).unwrap(),
            "'{\"method\":\"mtp\",\"num\":3}'"
        );
    }

    #[test]
    fn a_missing_key_is_an_error_naming_it() {
        let e = format(
            "--port {port} --tp {tensor_parallel}",
            &params(&[("port", "1")]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            FormatError::Missing {
                name: "tensor_parallel".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "{tensor_parallel} has no value: it is not a defaults key and no --set gives it"
        );
    }

    #[test]
    fn a_substituted_value_is_not_formatted_again() {
        let p = params(&[("a", "'{b}'"), ("b", "x")]);
        assert_eq!(format("{a}", &p).unwrap(), "{b}");
    }

    #[test]
    fn single_braces_are_refused_as_python_refuses_them() {
        let p = params(&[]);
        assert_eq!(
            format("a } b", &p).unwrap_err(),
            FormatError::StrayClose { at: 2 }
        );
        assert_eq!(
            format("a { b", &p).unwrap_err(),
            FormatError::Unclosed { at: 2 }
        );
        assert!(matches!(
            format("{}", &p).unwrap_err(),
            FormatError::Unsupported { .. }
        ));
        assert!(matches!(
            format("{x:>4}", &params(&[("x", "1")])).unwrap_err(),
            FormatError::Unsupported { .. }
        ));
    }

    #[test]
    fn a_command_that_grows_past_the_bound_is_refused_naming_the_key() {
        let big = format!("'{}'", "x".repeat(64 << 10));
        let p = params(&[("big", &big), ("port", "1")]);
        let template = format!("--port {{port}} {}", "{big}".repeat(1000));
        let started = std::time::Instant::now();
        let e = format(&template, &p).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(
            e.to_string(),
            "the command grows past 256 KiB as {big}, {port} are substituted; write the values out"
        );
        let (_, used) = format_used("{port!r} {{big}}", &p).unwrap();
        assert_eq!(used.into_iter().collect::<Vec<_>>(), ["port"]);
    }

    #[test]
    fn conversions_follow_python() {
        let p = params(&[("s", "abc")]);
        assert_eq!(format("{s!r} {s!s}", &p).unwrap(), "'abc' abc");
    }
}
