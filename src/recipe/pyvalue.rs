//! YAML values as the recipe runners (Python) turn them into text: `str()` (`True`, `0.85`,
//! `None`, `['a', 'b']`), `repr()`, the v2 runner's boolean reading of a `defaults` value, and
//! its rendering of a structured flag value (compact JSON, shell-quoted). Both runners load
//! recipes with PyYAML and substitute with `str()`, so this is what their commands contain.
//! Pure.

use yaml_serde::Value;

/// Python's `str()` of a loaded YAML value.
pub fn python_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Tagged(t) => python_str(&t.value),
        other => python_repr(other),
    }
}

/// Python's `repr()` of a loaded YAML value.
pub fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                u.to_string()
            } else {
                python_float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => quote_repr(s),
        Value::Sequence(items) => format!(
            "[{}]",
            items.iter().map(python_repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Mapping(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", python_repr(k), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Tagged(t) => python_repr(&t.value),
    }
}

/// `repr()` of a Python string: single quotes unless the text holds a `'` and no `"`.
fn quote_repr(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// Python's `repr()` of a float: the shortest text that reads back, fixed between 1e-4 and
/// 1e16 (with `.0` when whole), otherwise `1.5e-07` / `1e+20`.
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = f.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        let s = format!("{f}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        format!("{mantissa}e{sign}{digits:0>2}")
    }
}

/// A short description of a value for error messages: `the text 'two'`, `a list`, …
pub fn kind(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(_) => format!("the number {}", python_repr(v)),
        Value::String(s) => format!("the text {}", quote_repr(s)),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => kind(&t.value),
    }
}

/// The v2 runner's reading of a boolean `defaults` value (`ext_parse_bool`): `true`/`false`
/// as they are; anything empty or zero is false; otherwise the text is true when it holds a
/// `1`, a `t` or a `y` anywhere (so `on` reads false and `10` reads true, as in sparkrun).
pub fn v2_truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Null => false,
        Value::Number(n) if n.as_f64() == Some(0.0) => false,
        Value::String(s) if s.is_empty() => false,
        Value::Sequence(s) if s.is_empty() => false,
        Value::Mapping(m) if m.is_empty() => false,
        Value::Tagged(t) => v2_truthy(&t.value),
        other => {
            let t = python_str(other).to_lowercase();
            t.contains('1') || t.contains('t') || t.contains('y')
        }
    }
}

/// True when `v2_truthy` is not surprising for this value: a YAML boolean, or the words
/// true/false/yes/no and 0/1.
pub fn plain_bool(v: &Value) -> bool {
    match v {
        Value::Bool(_) => true,
        Value::Number(n) => matches!(n.as_i64(), Some(0 | 1)),
        Value::String(s) => matches!(
            s.to_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "0" | "1"
        ),
        _ => false,
    }
}

/// The v2 runner's text for one structured flag value in a generated shell command: lists and
/// mappings as shell-quoted compact JSON, a text that starts with `{` or `[` shell-quoted,
/// anything else as `str()`.
pub fn v2_flag_value(v: &Value) -> String {
    match v {
        Value::Sequence(_) | Value::Mapping(_) => shell_quote(&compact_json(v)),
        Value::String(s) if s.trim().starts_with(['{', '[']) => shell_quote(s.trim()),
        Value::Tagged(t) => v2_flag_value(&t.value),
        other => python_str(other),
    }
}

/// `json.dumps(v, separators=(",", ":"))`: compact, keys in file order, non-ASCII escaped.
fn compact_json(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_else(|_| python_str(v));
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Python's `shlex.quote`.
pub fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let safe = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\"'\"'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn y(text: &str) -> Value {
        yaml_serde::from_str(text).unwrap()
    }

    #[test]
    fn values_read_as_python_str_would_print_them() {
        assert_eq!(python_str(&y("true")), "True");
        assert_eq!(python_str(&y("0.85")), "0.85");
        assert_eq!(python_str(&y("1.0")), "1.0");
        assert_eq!(python_str(&y("8000")), "8000");
        assert_eq!(python_str(&y("null")), "None");
        assert_eq!(python_str(&y("6G")), "6G");
        assert_eq!(python_str(&y("[a, 1]")), "['a', 1]");
        assert_eq!(python_str(&y("{a: b}")), "{'a': 'b'}");
        assert_eq!(python_str(&y("[\"it's\"]")), "[\"it's\"]");
    }

    #[test]
    fn floats_take_python_repr_form_at_both_ends_of_the_range() {
        assert_eq!(python_float(1e20), "1e+20");
        assert_eq!(python_float(1.5e-7), "1.5e-07");
        assert_eq!(python_float(1e15), "1000000000000000.0");
        assert_eq!(python_float(0.0001), "0.0001");
        assert_eq!(python_float(-0.0), "-0.0");
    }

    #[test]
    fn the_v2_boolean_reading_follows_sparkrun_including_its_surprises() {
        assert!(v2_truthy(&y("true")));
        assert!(v2_truthy(&y("yes")));
        assert!(v2_truthy(&y("1")));
        assert!(!v2_truthy(&y("false")));
        assert!(!v2_truthy(&y("0")));
        assert!(!v2_truthy(&y("''")));
        // Text without 1, t or y reads false; "10" reads true.
        assert!(!v2_truthy(&y("'on'")));
        assert!(v2_truthy(&y("10")));
        assert!(!plain_bool(&y("'on'")));
        assert!(plain_bool(&y("'yes'")));
    }

    #[test]
    fn structured_flag_values_become_quoted_compact_json() {
        assert_eq!(
            v2_flag_value(&y("{method: mtp, num_speculative_tokens: 3}")),
            "'{\"method\":\"mtp\",\"num_speculative_tokens\":3}'"
        );
        assert_eq!(v2_flag_value(&y("' {\"a\": 1} '")), "'{\"a\": 1}'");
        assert_eq!(v2_flag_value(&y("0.9")), "0.9");
        assert_eq!(v2_flag_value(&y("[é]")), "'[\"\\u00e9\"]'");
    }

    #[test]
    fn shell_quote_leaves_safe_words_alone_and_quotes_the_rest() {
        assert_eq!(shell_quote("a/b-c.d"), "a/b-c.d");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), "'it'\"'\"'s'");
    }
}
