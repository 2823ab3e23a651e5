//! YAML a user wrote — recipes, registry manifests, launch profiles — read as the community
//! recipe runners read it (PyYAML's safe loader), and read fast whatever it holds:
//!
//! - **Nesting is bounded before parsing.** A cheap scan of the text refuses anything nested
//!   deeper than [`MAX_DEPTH`], naming the line: the parser takes time quadratic in the depth
//!   of flow collections (`[[[[…` of 200 KB takes minutes) before it reaches its own limit.
//! - **Tags PyYAML's safe loader has no constructor for are refused** (`!!python/object:…`,
//!   `!foo`), naming the tag and its line: the runners refuse such a file, and the YAML reader
//!   under this one would drop a `!!` tag without a word.
//! - **A duplicate key is read as PyYAML reads it**: the last value wins; each one is reported
//!   (its place, its key and every line it is written on, at any depth, in flow style too) for
//!   the caller to say with those lines.
//! - **Merge keys (`<<: *base`) are applied** as PyYAML applies them: the mapping's own keys
//!   win, then the merged mappings in order.
//! - One document only, as `yaml.safe_load` reads one (a byte-order mark before it read past);
//!   an alias bomb, a tab in the indentation and the rest of the parser's errors are said
//!   plainly, with their line.
//!
//! Pure: text in, a value out.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use yaml_serde::{Mapping, Value};

/// How deep collections may nest (recipes and profiles nest a handful of levels).
pub const MAX_DEPTH: usize = 64;

/// The standard tags PyYAML's safe loader constructs; it refuses every other tag.
const SAFE_TAGS: [&str; 12] = [
    "null",
    "bool",
    "int",
    "float",
    "binary",
    "timestamp",
    "omap",
    "pairs",
    "set",
    "str",
    "seq",
    "map",
];

/// Why a YAML text is not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    #[error(
        "nested more than {MAX_DEPTH} levels deep at line {line}; a recipe or profile nests a few levels: this is not one"
    )]
    TooDeep { line: usize },
    #[error(
        "the tag {tag} at line {line} is refused: PyYAML's safe loader, which the recipe runners read YAML with, constructs no such value (a Python object runs code); remove the tag"
    )]
    Tag { tag: String, line: usize },
    #[error(
        "more than one YAML document{}: a recipe or profile is one document (the runners' yaml.safe_load reads one); remove the `---` or split the file",
        line.map(|l| format!(" (another starts at line {l})")).unwrap_or_default()
    )]
    Documents { line: Option<usize> },
    #[error("{message}")]
    Syntax {
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
}

impl YamlError {
    /// The 1-based line it is about, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            YamlError::TooDeep { line } | YamlError::Tag { line, .. } => Some(*line),
            YamlError::Documents { line } | YamlError::Syntax { line, .. } => *line,
        }
    }

    pub fn column(&self) -> Option<usize> {
        match self {
            YamlError::Syntax { column, .. } => *column,
            _ => None,
        }
    }
}

/// A key given more than once in one mapping: `parent` is the mapping's dotted path
/// (`defaults`, `env`, `mods[0]`, empty at the top), `key` the key as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateKey {
    pub parent: String,
    pub key: String,
    /// The 1-based lines the key is written on in that mapping, in order (one line may hold
    /// it twice in flow style); empty past the occurrences a text is searched for
    /// ([`MAX_LOCATED`]).
    pub lines: Vec<usize>,
}

/// How many occurrences of duplicate keys one text is searched for at most, and how many
/// bytes of text those searches read in all: each one reads the text again (a recipe has a
/// handful of duplicates in a few KiB; a hostile text is not read without end).
pub const MAX_LOCATED: usize = 32;
const MAX_LOCATED_BYTES: usize = 512 << 10;

impl DuplicateKey {
    /// `defaults.port`.
    pub fn path(&self) -> String {
        if self.parent.is_empty() {
            self.key.clone()
        } else {
            format!("{}.{}", self.parent, self.key)
        }
    }
}

/// A text read: its value and the duplicate keys the last of which was kept.
#[derive(Clone, Debug, PartialEq)]
pub struct YamlRead {
    pub value: Value,
    pub duplicates: Vec<DuplicateKey>,
}

/// Reads `text` as PyYAML's safe loader would (see the module's doc).
pub fn read(text: &str) -> Result<YamlRead, YamlError> {
    // A byte-order mark may open a text (PyYAML reads past it; the parser here does not).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    scan(text)?;
    let found = RefCell::new(Vec::new());
    let index = RefCell::new(HashMap::new());
    let maps = Cell::new(0);
    let seed = LastWins {
        path: String::new(),
        duplicates: &found,
        index: &index,
        maps: &maps,
    };
    let mut value = seed
        .deserialize(yaml_serde::Deserializer::from_str(text))
        .map_err(|e| parser_error(text, &e))?;
    value.apply_merge().map_err(|e| YamlError::Syntax {
        line: None,
        column: None,
        message: format!("a merge key (<<) takes a mapping or a list of mappings: {e}"),
    })?;
    let mut budget = MAX_LOCATED.min(MAX_LOCATED_BYTES / text.len().max(1));
    let duplicates = found
        .into_inner()
        .into_iter()
        .map(|d| {
            let lines = (0..d.count)
                .map_while(|occurrence| {
                    budget = budget.checked_sub(1)?;
                    Some(key_line(text, d.map, &d.key_value, occurrence))
                })
                .flatten()
                .collect();
            DuplicateKey {
                parent: d.parent,
                key: d.key,
                lines,
            }
        })
        .collect();
    Ok(YamlRead { value, duplicates })
}

/// The line of the `occurrence`-th (from 0) `key` of the `map`-th mapping the text opens (in
/// the order a reader meets them): the text is read again and stopped at that key, whose
/// place the parser's error then carries.
fn key_line(text: &str, map: usize, key: &Value, occurrence: usize) -> Option<usize> {
    let maps = Cell::new(0);
    let target = Target {
        map,
        key,
        occurrence,
    };
    let seed = Find {
        maps: &maps,
        target: &target,
        key_count: None,
    };
    match seed.deserialize(yaml_serde::Deserializer::from_str(text)) {
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| l.line()),
        _ => None,
    }
}

/// Refuses `text` when it nests deeper than [`MAX_DEPTH`] (for readers that parse it
/// themselves, such as launch profiles).
pub fn check_depth(text: &str) -> Result<(), YamlError> {
    scan(text)
}

/// The parser's error said plainly, at its line.
fn parser_error(text: &str, e: &yaml_serde::Error) -> YamlError {
    let loc = e.location();
    let line = loc.as_ref().map(|l| l.line());
    let column = loc.as_ref().map(|l| l.column());
    let full = e.to_string();
    if full.contains("more than one document") {
        return YamlError::Documents {
            line: second_document(text),
        };
    }
    if let Some(tag) = full.split("refused tag ").nth(1) {
        let tag = tag.split(" at line ").next().unwrap_or(tag).to_string();
        return YamlError::Tag {
            tag,
            line: line.unwrap_or(1),
        };
    }
    if full.contains("recursion limit exceeded") {
        return YamlError::TooDeep {
            line: line.unwrap_or(1),
        };
    }
    let mut message = match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full.clone(),
    };
    if message.contains("repetition limit exceeded") {
        message = "aliases expand to too many values (an alias bomb); write the values out".into();
    }
    let tab_indent = line
        .and_then(|l| text.lines().nth(l.saturating_sub(1)))
        .is_some_and(|l| {
            l.chars()
                .take_while(|c| c.is_whitespace())
                .any(|c| c == '\t')
        });
    if tab_indent {
        message = format!("a tab in the indentation (YAML indents with spaces only): {message}");
    }
    YamlError::Syntax {
        line,
        column,
        message,
    }
}

/// The line where a second document starts (`---` after content, or content after `...`).
fn second_document(text: &str) -> Option<usize> {
    let mut content = false;
    let mut ended = false;
    for (i, line) in text.lines().enumerate() {
        let marker = |m: &str| {
            line.strip_prefix(m)
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        };
        if marker("---") {
            if content || ended {
                return Some(i + 1);
            }
            content = !line[3..].trim().is_empty() && !line[3..].trim().starts_with('#');
            continue;
        }
        if marker("...") {
            ended = content;
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || (line.starts_with('%') && !content) {
            continue;
        }
        if ended {
            return Some(i + 1);
        }
        content = true;
    }
    None
}

/// Whether a node may start right after `before` (the line up to here): at the line's start
/// or after its block entries (`- `, `? `), after a `:`, in a flow collection after `,`,
/// `[` or `{`, or after an anchor or a tag.
fn node_start(before: &str, in_flow: bool) -> bool {
    let b = before.trim_end_matches([' ', '\t']);
    if b.is_empty() || b.ends_with(':') || (in_flow && b.ends_with([',', '[', '{'])) {
        return true;
    }
    if b.split_whitespace().all(|w| w == "-" || w == "?") {
        return true;
    }
    let last = b.rsplit([' ', '\t']).next().unwrap_or(b);
    last.starts_with('&') || last.starts_with('!')
}

/// A tag PyYAML's safe loader has a constructor for (`!` alone is the plain one).
fn safe_tag(tag: &str) -> bool {
    if tag == "!" {
        return true;
    }
    if let Some(name) = tag.strip_prefix("!!") {
        return SAFE_TAGS.contains(&name);
    }
    if let Some(verbatim) = tag.strip_prefix("!<").and_then(|t| t.strip_suffix('>')) {
        return verbatim
            .strip_prefix("tag:yaml.org,2002:")
            .is_some_and(|n| SAFE_TAGS.contains(&n));
    }
    false
}

/// One linear pass over the text: nesting depth (block indentation levels, compact `- `
/// entries and flow brackets, outside quotes, comments and block scalars) and tags.
fn scan(text: &str) -> Result<(), YamlError> {
    let mut flow = 0usize;
    // The block depth where the open flow collection started.
    let mut base = 0usize;
    let mut quote: Option<u8> = None;
    let mut indents: Vec<usize> = Vec::new();
    // Inside a literal or folded block scalar: the indentation of the line that opened it.
    let mut block_scalar: Option<usize> = None;
    for (n, raw) in text.split('\n').enumerate() {
        let line_no = n + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let ind = line.len() - line.trim_start_matches(' ').len();
        let blank = line.trim().is_empty();
        if let Some(parent) = block_scalar {
            if blank || ind > parent {
                continue;
            }
            block_scalar = None;
        }
        let mut from = 0;
        if flow == 0 && quote.is_none() {
            let t = line.trim_start();
            if blank || t.starts_with('#') {
                continue;
            }
            let marker = ["---", "..."].iter().any(|m| {
                line.strip_prefix(m)
                    .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
            });
            if marker || line.starts_with('%') {
                indents.clear();
                if line.starts_with('%') {
                    continue;
                }
                from = 3;
            } else {
                while indents.last().is_some_and(|&l| l > ind) {
                    indents.pop();
                }
                if indents.last() != Some(&ind) {
                    indents.push(ind);
                }
            }
            let mut rest = &line[from..];
            let mut entries = 0;
            while let Some(r) = rest
                .trim_start()
                .strip_prefix("- ")
                .or_else(|| rest.trim_start().strip_prefix("? "))
            {
                entries += 1;
                rest = r;
            }
            base = indents.len() + entries;
            if base > MAX_DEPTH {
                return Err(YamlError::TooDeep { line: line_no });
            }
        }
        let bytes = line.as_bytes();
        let mut i = from;
        while i < bytes.len() {
            let c = bytes[i];
            match quote {
                Some(b'\'') => {
                    if c == b'\'' {
                        if bytes.get(i + 1) == Some(&b'\'') {
                            i += 1;
                        } else {
                            quote = None;
                        }
                    }
                    i += 1;
                    continue;
                }
                Some(_) => {
                    if c == b'\\' {
                        i += 1;
                    } else if c == b'"' {
                        quote = None;
                    }
                    i += 1;
                    continue;
                }
                None => {}
            }
            // A node starts after a separator; checking that first keeps the scan linear.
            let at_start = |i: usize| {
                (i == from
                    || matches!(
                        bytes[i - 1],
                        b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'-' | b'?'
                    ))
                    && node_start(&line[from..i], flow > 0)
            };
            match c {
                b'#' if i == 0 || matches!(bytes[i - 1], b' ' | b'\t') => break,
                b'\'' | b'"' if at_start(i) => quote = Some(c),
                b'[' | b'{' if flow > 0 || at_start(i) => {
                    flow += 1;
                    if base + flow > MAX_DEPTH {
                        return Err(YamlError::TooDeep { line: line_no });
                    }
                }
                b']' | b'}' if flow > 0 => flow -= 1,
                b'!' if at_start(i) => {
                    let end = line[i..]
                        .find([' ', '\t', ',', '[', ']', '{', '}'])
                        .map_or(line.len(), |e| i + e);
                    let tag = &line[i..end];
                    if !safe_tag(tag) {
                        return Err(YamlError::Tag {
                            tag: tag.to_string(),
                            line: line_no,
                        });
                    }
                    i = end;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        if flow == 0 && quote.is_none() {
            let content = match line.find(" #") {
                Some(c) => &line[..c],
                None => line,
            }
            .trim_end();
            let indicator = content
                .rfind(['|', '>'])
                .filter(|&p| {
                    content[p + 1..]
                        .bytes()
                        .all(|b| matches!(b, b'+' | b'-' | b'1'..=b'9'))
                })
                .filter(|&p| node_start(&content[from.min(p)..p], false));
            if indicator.is_some() {
                block_scalar = Some(ind);
            }
        }
    }
    Ok(())
}

/// A value read with the last of duplicate keys winning (the first's place kept, as a
/// Python dict keeps it), each duplicate noted, and tags refused.
struct LastWins<'a> {
    path: String,
    duplicates: &'a RefCell<Vec<Repeated>>,
    /// Where each (mapping, key) met more than once is in `duplicates`.
    index: &'a RefCell<HashMap<(usize, Value), usize>>,
    /// Mappings opened so far, in reading order: a mapping's number.
    maps: &'a Cell<usize>,
}

/// A key met more than once in one mapping, while reading.
struct Repeated {
    parent: String,
    key: String,
    key_value: Value,
    /// The mapping's number ([`LastWins::maps`]).
    map: usize,
    /// How many times the key is written in it.
    count: usize,
}

impl LastWins<'_> {
    fn at(&self, step: String) -> Self {
        LastWins {
            path: step,
            duplicates: self.duplicates,
            index: self.index,
            maps: self.maps,
        }
    }
}

impl<'de> DeserializeSeed<'de> for LastWins<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A key as its path shows it.
fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        _ => "?".into(),
    }
}

impl<'de> Visitor<'de> for LastWins<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Number(i.into()))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        Ok(Value::Number(u.into()))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        Ok(Value::Number(f.into()))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let item = self.at(format!("{}[{}]", self.path, out.len()));
            match seq.next_element_seed(item)? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Sequence(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let id = self.maps.get();
        self.maps.set(id + 1);
        let mut out = Mapping::new();
        while let Some(k) = map.next_key_seed(self.at(self.path.clone()))? {
            let key = key_text(&k);
            let child = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let v = map.next_value_seed(self.at(child))?;
            if out.contains_key(&k) {
                let mut found = self.duplicates.borrow_mut();
                let mut index = self.index.borrow_mut();
                match index.get(&(id, k.clone())) {
                    Some(&i) => found[i].count += 1,
                    None => {
                        index.insert((id, k.clone()), found.len());
                        found.push(Repeated {
                            parent: self.path.clone(),
                            key,
                            key_value: k.clone(),
                            map: id,
                            count: 2,
                        });
                    }
                }
            }
            out.insert(k, v);
        }
        Ok(Value::Mapping(out))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        // Only tags the reader keeps come here (`!foo`); the scan refuses them first.
        let (tag, _): (String, _) = data.variant()?;
        Err(de::Error::custom(format!("refused tag !{tag}")))
    }
}

/// The message [`Find`] stops a reading with.
const FOUND: &str = "spark-launch: the key sought";

/// The key [`Find`] stops at.
struct Target<'a> {
    map: usize,
    key: &'a Value,
    occurrence: usize,
}

/// Reads a text as [`LastWins`] does (mappings numbered in the same order) without keeping
/// anything, and stops with an error at the key [`Target`] names, inside the parser's reading
/// of that key, so the error carries the key's place.
struct Find<'a> {
    maps: &'a Cell<usize>,
    target: &'a Target<'a>,
    /// Set while reading a key of the target's mapping: how many keys equal to the target's
    /// it has met.
    key_count: Option<&'a Cell<usize>>,
}

impl<'a> Find<'a> {
    fn inner(&self) -> Find<'a> {
        Find {
            maps: self.maps,
            target: self.target,
            key_count: None,
        }
    }

    fn scalar<E: de::Error>(&self, v: Value) -> Result<(), E> {
        if let Some(count) = self.key_count
            && v == *self.target.key
        {
            let n = count.get();
            count.set(n + 1);
            if n == self.target.occurrence {
                return Err(E::custom(FOUND));
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.scalar(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        self.scalar(Value::Number(i.into()))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        self.scalar(Value::Number(u.into()))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        self.scalar(Value::Number(f.into()))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.scalar(Value::String(s.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self.inner())?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let id = self.maps.get();
        self.maps.set(id + 1);
        let count = Cell::new(0);
        let key_count = (id == self.target.map).then_some(&count);
        while map
            .next_key_seed(Find {
                key_count,
                ..self.inner()
            })?
            .is_some()
        {
            map.next_value_seed(self.inner())?;
        }
        Ok(())
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let (tag, _): (String, _) = data.variant()?;
        Err(de::Error::custom(format!("refused tag !{tag}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast<T>(f: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = f();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        out
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing_and_fast() {
        // 100 000 levels (200 KB): the parser alone takes minutes on this.
        for text in [
            format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
            format!("a: {}{}\n", "{a: ".repeat(50_000), "}".repeat(50_000)),
            format!("a:\n  {}x\n", "- ".repeat(100_000)),
            (0..2000)
                .map(|i| format!("{}k:\n", " ".repeat(i)))
                .collect(),
        ] {
            let e = fast(|| read(&text)).unwrap_err();
            assert!(matches!(e, YamlError::TooDeep { .. }), "{e}");
        }
        let e = read(&format!("a:\n  b: {}1{}\n", "[".repeat(70), "]".repeat(70))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nested more than 64 levels deep at line 2; a recipe or profile nests a few levels: this is not one"
        );
        // What recipes hold passes: JSON in a quoted flag, braces in a block scalar.
        let ok = "command: |\n  vllm serve m --x '{\"a\":{\"b\":{\"c\":[[[[1]]]]}}}'\n  {{{{{{{{\nenv: {A: \"[[[[\"}\n";
        read(ok).unwrap();
    }

    #[test]
    fn tags_the_safe_loader_refuses_are_refused_naming_tag_and_line() {
        for (text, tag, line) in [
            (
                "a: 1\nb: !!python/object/apply:os.system [\"id\"]\n",
                "!!python/object/apply:os.system",
                2,
            ),
            (
                "env:\n  X: !!python/name:os.system\n",
                "!!python/name:os.system",
                2,
            ),
            ("a: !foo x\n", "!foo", 1),
            ("- [1, !<tag:x> 2]\n", "!<tag:x>", 1),
        ] {
            let e = read(text).unwrap_err();
            assert_eq!(
                e,
                YamlError::Tag {
                    tag: tag.into(),
                    line
                },
                "{text}"
            );
        }
        let ok = read("a: !!str 5\nb: x !y\nc: '!!python'\n").unwrap();
        assert_eq!(ok.value["a"], Value::String("5".into()));
        assert_eq!(ok.value["b"], Value::String("x !y".into()));
    }

    #[test]
    fn the_last_of_duplicate_keys_wins_and_each_is_reported() {
        let r = read("a: 1\ndefaults:\n  port: 1\n  port: 2\na: 3\n").unwrap();
        assert_eq!(r.value["a"], Value::from(3));
        assert_eq!(r.value["defaults"]["port"], Value::from(2));
        let paths: Vec<(String, Vec<usize>)> = r
            .duplicates
            .iter()
            .map(|d| (d.path(), d.lines.clone()))
            .collect();
        assert_eq!(
            paths,
            [
                ("defaults.port".into(), vec![3, 4]),
                ("a".into(), vec![1, 5])
            ]
        );
        // The first key keeps its place, as in a Python dict.
        let keys: Vec<&str> = r
            .value
            .as_mapping()
            .unwrap()
            .keys()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(keys, ["a", "defaults"]);
    }

    #[test]
    fn every_duplicate_key_is_found_on_its_lines_at_any_depth_and_in_flow_style() {
        let text = "model: a
defaults:
  port: 1
defaults:
  port: 2
  tp: 1
  port: 3
env: {A: 1, B: 2, A: 3}
mods:
  - x: 1
    x: 2
executor_config:
  volumes:
    a: 1
    b: 2
    a: 3
    a: 4
1: one
\"1\": text one
1: uno
";
        let r = read(text).unwrap();
        let found: Vec<(String, Vec<usize>)> = r
            .duplicates
            .iter()
            .map(|d| (d.path(), d.lines.clone()))
            .collect();
        assert_eq!(
            found,
            [
                ("defaults.port".into(), vec![5, 7]),
                ("defaults".into(), vec![2, 4]),
                ("env.A".into(), vec![8, 8]),
                ("mods[0].x".into(), vec![10, 11]),
                ("executor_config.volumes.a".into(), vec![14, 16, 17]),
                ("1".into(), vec![18, 20]),
            ]
        );
        assert_eq!(r.value["defaults"]["port"], Value::from(3));
        assert_eq!(r.value["env"]["A"], Value::from(3));
    }

    #[test]
    fn many_duplicate_keys_are_read_fast_and_only_the_first_are_located() {
        let small: String = (0..200).map(|i| format!("k{}: {i}\n", i / 2)).collect();
        let r = fast(|| read(&small)).unwrap();
        assert_eq!(r.duplicates.len(), 100);
        assert_eq!(r.duplicates[0].lines, [1, 2]);
        let located: usize = r.duplicates.iter().map(|d| d.lines.len()).sum();
        assert_eq!(located, MAX_LOCATED);
        let big: String = (0..20_000).map(|i| format!("k{}: {i}\n", i / 2)).collect();
        let r = fast(|| read(&big)).unwrap();
        assert_eq!(r.duplicates.len(), 10_000);
        let located: usize = r.duplicates.iter().map(|d| d.lines.len()).sum();
        assert!(located < MAX_LOCATED, "{located}");
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_read_as_pyyaml_reads_it() {
        let r = read("\u{feff}recipe_version: \"1\"\r\nname: x\r\n").unwrap();
        assert_eq!(r.value["recipe_version"], Value::from("1"));
        assert_eq!(r.value["name"], Value::from("x"));
    }

    #[test]
    fn merge_keys_are_applied_with_the_mapping_s_own_keys_winning() {
        let r = read(
            "base: &b\n  port: 1\n  tp: 2\ndefaults:\n  <<: *b\n  port: 9\nlist:\n  <<: [{x: 1}, {x: 2, y: 3}]\n",
        )
        .unwrap();
        assert_eq!(r.value["defaults"]["port"], Value::from(9));
        assert_eq!(r.value["defaults"]["tp"], Value::from(2));
        assert_eq!(r.value["list"]["x"], Value::from(1));
        assert_eq!(r.value["list"]["y"], Value::from(3));
        assert!(r.value["defaults"].get("<<").is_none());
    }

    #[test]
    fn documents_bombs_and_tabs_are_said_plainly() {
        assert_eq!(
            read("a: 1\n---\nb: 2\n").unwrap_err(),
            YamlError::Documents { line: Some(2) }
        );
        assert_eq!(
            read("--- # one\na: 1\n...\nb: 2\n").unwrap_err(),
            YamlError::Documents { line: Some(4) }
        );
        let bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n";
        let e = fast(|| read(bomb)).unwrap_err();
        assert!(e.to_string().contains("alias bomb"), "{e}");
        let e = read("a:\n\tb: 1\n").unwrap_err();
        assert_eq!(e.line(), Some(2));
        assert!(e.to_string().starts_with("a tab in the indentation"), "{e}");
    }
}
