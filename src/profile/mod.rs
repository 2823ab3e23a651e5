//! Launch profiles: YAML files for one-command demos, bundled into the binary
//! (`launch-profiles/*.yaml`) and loadable from a user folder, validated with errors that name
//! the file, the line and the field.
//!
//! A profile says what to run (engine, image, model and revision, tp/pp, engine arguments,
//! environment, ports) and what it needs (nodes, memory per node). `--set key=value` changes
//! a field before validation, with the same rules. Syntax and type errors come from
//! `yaml_serde` with their location; semantic errors (a shape that does not fill whole nodes, a
//! flag spark-launch sets itself) are located by [`locate`]. An engine's own section (a
//! top-level key the engine names: `ServingEngine::profile_section`) is kept as YAML and read
//! by that engine; this module names no engine.
//!
//! Pure: texts in, profiles or errors out. Reading the files is the caller's job.

pub mod bundled;
pub mod files;
pub mod fit;
pub mod listing;
pub mod locate;
pub mod request;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bench::compare::Expectations;
use crate::model::{ModelSource, RepoId, Revision};
use crate::workload::engines::speculative::Speculative;
use crate::workload::engines::{EngineKind, EngineOptions, ServingEngine};
use crate::workload::limits;
use crate::workload::serve::Problem;

/// What a profile drives: a serving engine (by the seam's names: `vllm`, `trtllm`, `sglang`), or
/// `nccl-test`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileKind {
    Serve(EngineKind),
    NcclTest,
}

impl ProfileKind {
    const NCCL_TEST: &'static str = "nccl-test";

    pub fn as_str(self) -> &'static str {
        match self {
            ProfileKind::Serve(e) => e.as_str(),
            ProfileKind::NcclTest => Self::NCCL_TEST,
        }
    }

    /// The serving engine, for a serving profile.
    pub fn serving(self) -> Option<EngineKind> {
        match self {
            ProfileKind::Serve(e) => Some(e),
            ProfileKind::NcclTest => None,
        }
    }

    /// Every kind a profile may name, as written.
    fn names() -> Vec<&'static str> {
        let mut names: Vec<&str> = EngineKind::ALL.iter().map(|e| e.as_str()).collect();
        names.push(Self::NCCL_TEST);
        names
    }
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ProfileKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ProfileKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == Self::NCCL_TEST {
            return Ok(ProfileKind::NcclTest);
        }
        text.parse::<EngineKind>()
            .map(ProfileKind::Serve)
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "unknown variant `{text}`, expected one of {}",
                    ProfileKind::names()
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }
}

/// The model of a profile: a Hub repo at a revision, or a folder on the head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileModel {
    pub id: Option<String>,
    pub revision: Option<String>,
    pub path: Option<String>,
}

/// Ports; each defaults to the engine's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePorts {
    pub api: Option<u16>,
    pub rendezvous: Option<u16>,
    pub ray: Option<u16>,
    pub ssh: Option<u16>,
}

/// nccl-tests knobs (run by `spark-launch nccl-test`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclSection {
    #[serde(default)]
    pub ops: Vec<String>,
    /// `-b`, e.g. `16M`.
    pub min_bytes: Option<String>,
    /// `-e`, e.g. `4G`.
    pub max_bytes: Option<String>,
    pub iters: Option<u32>,
}

/// One launch profile, as written. Its fields are read by `yaml_serde`; the other top-level
/// keys are engines' sections or errors ([`EngineSections`]): [`parse`] reads both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub engine: ProfileKind,
    pub image: Option<String>,
    pub model: Option<ProfileModel>,
    #[serde(default = "one")]
    pub tp: u32,
    #[serde(default = "one")]
    pub pp: u32,
    /// Nodes this profile needs.
    pub nodes: u32,
    #[serde(default = "one")]
    pub gpus_per_node: u32,
    /// Memory each node needs for its share (weights, KV cache, activations), in GiB, as
    /// written by hand; the memory plan computes it when the model's files can be read.
    pub memory_gib: Option<f64>,
    /// The cap on every serving container (`110G`, `512M`), instead of the node's
    /// `MemTotal` less what the host keeps; `--memory-limit` wins.
    pub memory_limit: Option<String>,
    /// Engines that can run over Ray (`ServingEngine::ray`): use it instead of the native
    /// multi-node mode.
    #[serde(default)]
    pub ray: bool,
    #[serde(default)]
    pub engine_args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub ports: ProfilePorts,
    pub ready_timeout_s: Option<u64>,
    /// Engines' own sections by their key (`trtllm:`), as written (null ones left out); only
    /// the profile's engine's is allowed, and that engine reads it.
    #[serde(skip_deserializing, flatten)]
    pub sections: BTreeMap<String, yaml_serde::Value>,
    /// Speculative decoding (method, draft model, tokens), mapped by the engine; a draft repo
    /// is staged on every node like the model.
    pub speculative: Option<Speculative>,
    pub nccl_test: Option<NcclSection>,
    /// Serving engines: `--nccl-from`: an image whose `libnccl.so.2` (or an absolute folder on
    /// every node holding one) goes first on the containers' loader path.
    pub nccl_from: Option<String>,
    /// The figures `spark-launch bench` should measure on this profile's job.
    pub expect: Option<Expectations>,
    /// Serving engines: the API key, `auto` or `@FILE` (never the key itself: refused).
    pub api_key: Option<String>,
    /// Serving engines: where the API listens on the head: `all`, `fabric` or an address.
    pub bind: Option<String>,
}

fn one() -> u32 {
    1
}

/// The fields of [`Profile`] as a file writes them (a test compares them with what it
/// serializes).
const FIELDS: [&str; 22] = [
    "name",
    "description",
    "engine",
    "image",
    "model",
    "tp",
    "pp",
    "nodes",
    "gpus_per_node",
    "memory_gib",
    "memory_limit",
    "ray",
    "engine_args",
    "env",
    "ports",
    "ready_timeout_s",
    "speculative",
    "nccl_test",
    "nccl_from",
    "expect",
    "api_key",
    "bind",
];

/// The engine whose own section is the top-level key `key`.
fn section_engine(key: &str) -> Option<&'static dyn ServingEngine> {
    EngineKind::ALL
        .into_iter()
        .map(|e| e.engine())
        .find(|e| e.profile_section() == Some(key))
}

/// Every top-level key a profile may have: its fields, then the engines' sections.
fn known_keys() -> &'static [&'static str] {
    static KEYS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        FIELDS
            .into_iter()
            .chain(
                EngineKind::ALL
                    .into_iter()
                    .filter_map(|e| e.engine().profile_section()),
            )
            .collect()
    });
    &KEYS
}

/// The top-level keys of a profile that are no field of [`Profile`]: the engines' sections,
/// kept as written; any other key is the parser's error where the key is written.
struct EngineSections(BTreeMap<String, yaml_serde::Value>);

/// A top-level key, refused where it is written unless a profile may have it.
struct TopKey;

impl<'de> serde::de::DeserializeSeed<'de> for TopKey {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        // Refused inside the key's own reading, so that the parser says where it is written.
        d.deserialize_identifier(self)
    }
}

impl serde::de::Visitor<'_> for TopKey {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<String, E> {
        if known_keys().contains(&key) {
            Ok(key.to_string())
        } else {
            Err(E::unknown_field(key, known_keys()))
        }
    }
}

impl<'de> Deserialize<'de> for EngineSections {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = EngineSections;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a launch profile (a mapping)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<EngineSections, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key_seed(TopKey)? {
                    if section_engine(&key).is_some() {
                        let value: yaml_serde::Value = map.next_value()?;
                        if !value.is_null() {
                            out.insert(key, value);
                        }
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(EngineSections(out))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// A profile read from one source (its text, or the YAML after `--set`): its fields, then its
/// top-level keys. When both fail, the error the parser meets first reading the text: the
/// earlier one, a missing field (found at the mapping's end) after any other.
fn read_profile(
    fields: Result<Profile, yaml_serde::Error>,
    keys: Result<EngineSections, yaml_serde::Error>,
) -> Result<Profile, yaml_serde::Error> {
    let at = |e: &yaml_serde::Error| {
        let (line, column) = e
            .location()
            .map_or((usize::MAX, usize::MAX), |l| (l.line(), l.column()));
        (e.to_string().starts_with("missing field"), line, column)
    };
    match (fields, keys) {
        (Ok(mut p), Ok(sections)) => {
            p.sections = sections.0;
            Ok(p)
        }
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(if at(&b) < at(&a) { b } else { a }),
    }
}

/// Where a profile came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileOrigin {
    /// Shipped inside the binary (`launch-profiles/NAME.yaml`).
    Bundled,
    /// A user's file.
    User,
}

/// A validated profile with its origin and file label.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Loaded {
    pub profile: Profile,
    pub origin: ProfileOrigin,
    /// `launch-profiles/smoke-test.yaml` or the user's path.
    pub file: String,
}

/// One thing wrong with a profile, located.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProfileError {
    pub file: String,
    /// 1-based; `None` for errors about a `--set`.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// `tp`, `model.revision`, `engine_args[2]`, or the `--set` argument.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: ", self.file)?,
            (Some(l), None) => write!(f, "{}:{l}: ", self.file)?,
            _ => write!(f, "{}: ", self.file)?,
        }
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Every error found in one profile (exit 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct ProfileErrors(pub Vec<ProfileError>);

impl fmt::Display for ProfileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid launch profile ({n} problem{})",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// `key=value` from `--set`: a dotted path and a YAML value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetArg {
    pub path: String,
    pub value: String,
}

impl std::str::FromStr for SetArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (path, value) = s.split_once('=').ok_or_else(|| {
            format!("expected KEY=VALUE (e.g. tp=4 or model.revision=main), got {s:?}")
        })?;
        let path = path.trim();
        if path.is_empty() {
            return Err(format!("no key before '=' in {s:?}"));
        }
        Ok(SetArg {
            path: path.to_string(),
            value: value.to_string(),
        })
    }
}

impl fmt::Display for SetArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.path, self.value)
    }
}

/// Parses and validates a profile's text. `file` labels errors; `stem` (the file name
/// without `.yaml`) must equal the profile's name when given.
pub fn parse(
    file: &str,
    stem: Option<&str>,
    text: &str,
    sets: &[SetArg],
) -> Result<Profile, ProfileErrors> {
    let located = |e: yaml_serde::Error| {
        let loc = e.location();
        let msg = e.to_string();
        let msg = match msg.rfind(" at line ") {
            Some(i) => msg[..i].to_string(),
            None => msg,
        };
        let (field, message) = match msg.split_once(": ") {
            Some((f, m)) if !f.contains(' ') => (f.to_string(), m.to_string()),
            _ => (String::new(), msg),
        };
        ProfileError {
            file: file.to_string(),
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            field,
            message,
        }
    };
    // Deep nesting is refused before the parser spends minutes on it; so are tags.
    if let Err(e) = crate::yaml::check_depth(text) {
        return Err(ProfileErrors(vec![ProfileError {
            file: file.to_string(),
            line: e.line(),
            column: None,
            field: String::new(),
            message: e.to_string(),
        }]));
    }
    let profile = match read_profile(yaml_serde::from_str(text), yaml_serde::from_str(text)) {
        Ok(p) => p,
        Err(e) => {
            // The parser stops at the first wrong field; the others are found field by field,
            // so every type error is reported at once, each at its line.
            let first = located(e);
            let mut all = vec![first.clone()];
            for (field, message) in field_type_errors(text) {
                // The same error, found again for the top-level field it is inside.
                let same = field == first.field || first.field.starts_with(&format!("{field}."));
                if !same {
                    all.push(ProfileError {
                        file: file.to_string(),
                        line: Some(locate::line_of(text, &locate::parse_path(&field))),
                        column: None,
                        field,
                        message,
                    });
                }
            }
            return Err(ProfileErrors(all));
        }
    };
    let profile = if sets.is_empty() {
        profile
    } else {
        let mut value: yaml_serde::Value =
            yaml_serde::from_str(text).map_err(|e| ProfileErrors(vec![located(e)]))?;
        for s in sets {
            apply_set(&mut value, s).map_err(|message| {
                ProfileErrors(vec![ProfileError {
                    file: file.to_string(),
                    line: None,
                    column: None,
                    field: format!("--set {s}"),
                    message,
                }])
            })?;
        }
        read_profile(
            yaml_serde::from_value(value.clone()),
            yaml_serde::from_value(value),
        )
        .map_err(|e| {
            ProfileErrors(vec![ProfileError {
                file: file.to_string(),
                line: None,
                column: None,
                field: format!(
                    "--set {}",
                    sets.iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(" --set ")
                ),
                message: e.to_string(),
            }])
        })?
    };
    let problems = validate(&profile, stem);
    if problems.is_empty() {
        return Ok(profile);
    }
    Err(ProfileErrors(
        problems
            .into_iter()
            .map(|(field, message)| {
                let set = sets.iter().find(|s| {
                    field == s.path
                        || field.starts_with(&format!("{}.", s.path))
                        || field.starts_with(&format!("{}[", s.path))
                });
                match set {
                    Some(s) => ProfileError {
                        file: file.to_string(),
                        line: None,
                        column: None,
                        field: format!("--set {s}"),
                        message: format!("{field}: {message}"),
                    },
                    None => ProfileError {
                        file: file.to_string(),
                        line: Some(locate::line_of(text, &locate::parse_path(&field))),
                        column: None,
                        field,
                        message,
                    },
                }
            })
            .collect(),
    ))
}

/// Every top-level field of a profile's text whose value is not of the field's type (or that
/// is no field at all), with the parser's message: `(field, message)`.
fn field_type_errors(text: &str) -> Vec<(String, String)> {
    use yaml_serde::Value;
    fn check<T: serde::de::DeserializeOwned>(v: &Value) -> Result<(), String> {
        yaml_serde::from_value::<T>(v.clone())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    let Ok(Value::Mapping(root)) = yaml_serde::from_str::<Value>(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in &root {
        let Some(key) = k.as_str() else { continue };
        let result = match key {
            "name" | "description" => check::<String>(v),
            "engine" => check::<ProfileKind>(v),
            "image" => check::<Option<String>>(v),
            "model" => check::<Option<ProfileModel>>(v),
            "tp" | "pp" | "nodes" | "gpus_per_node" => check::<u32>(v),
            "memory_gib" => check::<Option<f64>>(v),
            "memory_limit" => check::<Option<String>>(v),
            "ray" => check::<bool>(v),
            "engine_args" => check::<Vec<String>>(v),
            "env" => check::<BTreeMap<String, String>>(v),
            "ports" => check::<ProfilePorts>(v),
            "ready_timeout_s" => check::<Option<u64>>(v),
            "speculative" => check::<Option<Speculative>>(v),
            "nccl_test" => check::<Option<NcclSection>>(v),
            "expect" => check::<Option<Expectations>>(v),
            "nccl_from" | "api_key" | "bind" => check::<Option<String>>(v),
            // Read by its engine when the profile is validated.
            section if section_engine(section).is_some() => Ok(()),
            other => Err(format!("unknown field `{other}`")),
        };
        if let Err(message) = result {
            out.push((key.to_string(), message));
        }
    }
    out
}

/// Sets `path` (dotted, `[i]` for sequence items) to the YAML value `s.value`.
fn apply_set(root: &mut yaml_serde::Value, s: &SetArg) -> Result<(), String> {
    use yaml_serde::Value;
    let segs = locate::parse_path(&s.path);
    let value: Value = if s.value.trim().is_empty() {
        Value::Null
    } else {
        yaml_serde::from_str(&s.value).map_err(|e| format!("the value is not YAML: {e}"))?
    };
    // Fields made of text take the value as text (`engine_args[1]=0.5` is the string "0.5").
    let textual = matches!(
        segs.first(),
        Some(locate::Seg::Key(k)) if ["name", "description", "image", "engine_args", "env", "model", "nccl_from"].contains(&k.as_str())
    );
    let value = if textual { as_text(value) } else { value };
    let mut at = root;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match seg {
            locate::Seg::Key(k) => {
                if at.is_null() {
                    *at = Value::Mapping(Default::default());
                }
                let Value::Mapping(m) = at else {
                    return Err(format!("{k} is inside something that is not a mapping"));
                };
                let key = Value::String(k.clone());
                if last {
                    m.insert(key, value);
                    return Ok(());
                }
                if !m.contains_key(&key) {
                    m.insert(key.clone(), Value::Null);
                }
                at = m.get_mut(&key).ok_or("unreachable")?;
            }
            locate::Seg::Index(n) => {
                let Value::Sequence(seq) = at else {
                    return Err(format!("[{n}] needs a list"));
                };
                if *n > seq.len() {
                    return Err(format!("[{n}] is past the end of a list of {}", seq.len()));
                }
                if *n == seq.len() {
                    seq.push(Value::Null);
                }
                if last {
                    seq[*n] = value;
                    return Ok(());
                }
                at = &mut seq[*n];
            }
        }
    }
    Err("empty key".into())
}

/// Scalars as strings (sequences and mappings keep their shape, their scalars become strings).
fn as_text(v: yaml_serde::Value) -> yaml_serde::Value {
    use yaml_serde::Value;
    match v {
        Value::Bool(b) => Value::String(b.to_string()),
        Value::Number(n) => Value::String(n.to_string()),
        Value::Sequence(items) => Value::Sequence(items.into_iter().map(as_text).collect()),
        Value::Mapping(m) => Value::Mapping(m.into_iter().map(|(k, v)| (k, as_text(v))).collect()),
        other => other,
    }
}

/// Semantic checks: `(field path, message)` for every problem.
pub fn validate(p: &Profile, stem: Option<&str>) -> Vec<(String, String)> {
    let mut out = Problems::default();
    check_name(p, stem, &mut out);
    if let Some(image) = &p.image
        && let Err(e) = crate::plan::spec::check_image(image)
    {
        out.push("image", e);
    }
    if p.description.trim().is_empty() {
        out.push(
            "description",
            "say in one line what this profile shows".into(),
        );
    }
    check_shape(p, &mut out);
    // The flag's bound: a longer wait is a typo, and its deadline would overflow the clock.
    if let Some(t) = p.ready_timeout_s
        && let Err(e) = limits::seconds(t)
    {
        out.push("ready_timeout_s", e);
    }
    if let Some(m) = p.memory_gib
        && !(m > 0.0 && m.is_finite())
    {
        out.push("memory_gib", format!("{m} is not a positive number of GiB"));
    }
    if let Some(l) = &p.memory_limit
        && let Err(e) = crate::workload::memory::parse_memory_size(l)
    {
        out.push("memory_limit", e);
    }
    check_model(p, &mut out);
    check_sections(p, &mut out);
    for k in p.env.keys() {
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            out.push(&format!("env.{k}"), "is not a valid variable name".into());
        }
    }
    let ports = [
        ("ports.api", p.ports.api),
        ("ports.rendezvous", p.ports.rendezvous),
        ("ports.ray", p.ports.ray),
        ("ports.ssh", p.ports.ssh),
    ];
    for (f, v) in ports {
        if v == Some(0) {
            out.push(f, "0 is not a port".into());
        }
    }
    check_engine_args(p, &mut out);
    check_expect_and_ops(p, &mut out);
    out.0
}

/// `(field path, message)` pairs, in the order found.
#[derive(Default)]
struct Problems(Vec<(String, String)>);

impl Problems {
    fn push(&mut self, field: &str, message: String) {
        self.0.push((field.to_string(), message));
    }
}

fn check_name(p: &Profile, stem: Option<&str>, out: &mut Problems) {
    let name_ok = !p.name.is_empty()
        && p.name.len() <= 40
        && p.name.starts_with(|c: char| c.is_ascii_lowercase())
        && p.name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !name_ok {
        out.push(
            "name",
            format!(
                "{:?} must be lowercase letters, digits and '-', starting with a letter, at most 40 characters (it names the job)",
                p.name
            ),
        );
    }
    if let Some(stem) = stem
        && stem != p.name
    {
        out.push(
            "name",
            format!(
                "{:?} differs from the file name {stem}.yaml; make them equal",
                p.name
            ),
        );
    }
}

/// The counts within their limits, and a serving shape that fills its nodes exactly.
fn check_shape(p: &Profile, out: &mut Problems) {
    let counts = [
        ("tp", p.tp, limits::MAX_TP),
        ("pp", p.pp, limits::MAX_PP),
        ("gpus_per_node", p.gpus_per_node, limits::MAX_GPUS_PER_NODE),
        ("nodes", p.nodes, limits::MAX_NODES),
    ];
    let mut counts_ok = true;
    for (field, value, max) in counts {
        if let Err(e) = limits::count(field, u64::from(value), u64::from(max)) {
            counts_ok = false;
            out.push(
                field,
                e.trim_start_matches(&format!("{field} {value}: "))
                    .to_string(),
            );
        }
    }
    if p.engine.serving().is_some() && counts_ok {
        // Both products fit a u64 (u32 × u32): compared, never wrapped.
        let world = u64::from(p.tp) * u64::from(p.pp);
        let have = u64::from(p.nodes) * u64::from(p.gpus_per_node);
        if world != have {
            out.push(
                "tp",
                format!(
                    "tp × pp = {} × {} = {world} GPUs, but nodes × gpus_per_node = {} × {} = {have}; make them equal",
                    p.tp, p.pp, p.nodes, p.gpus_per_node
                ),
            );
        }
    }
}

/// A serving profile names its model once (a Hub repo or a folder), an nccl-test one none.
fn check_model(p: &Profile, out: &mut Problems) {
    let serving = p.engine.serving().is_some();
    let Some(m) = &p.model else {
        if serving {
            out.push(
                "engine",
                format!(
                    "a {} profile needs a model (model: {{id: ORG/NAME, revision: main}})",
                    p.engine
                ),
            );
        }
        return;
    };
    if !serving {
        out.push("model", "nccl-test profiles run no model; remove it".into());
        return;
    }
    match (&m.id, &m.path) {
        (Some(id), None) => {
            if let Err(e) = RepoId::new(id.clone()) {
                out.push("model.id", e.to_string());
            }
            if let Some(r) = &m.revision
                && let Err(e) = Revision::new(r.clone())
            {
                out.push("model.revision", e.to_string());
            }
        }
        (None, Some(path)) => {
            if let Err(e) = ModelSource::parse(path, None) {
                out.push("model.path", e.to_string());
            }
            if m.revision.is_some() {
                out.push(
                    "model.revision",
                    "applies to Hub models (model.id), not to a folder".into(),
                );
            }
        }
        (Some(_), Some(_)) => out.push(
            "model",
            "give either id (a Hub repo) or path (a folder on the head), not both".into(),
        ),
        (None, None) => out.push(
            "model",
            "give id (a Hub repo, e.g. Qwen/Qwen2.5-0.5B-Instruct) or path (a folder on the head)"
                .into(),
        ),
    }
}

/// Knobs only some kinds take: Ray (engines that can run over it), an engine's own section
/// (`trtllm:`), `nccl_from` (serving), `nccl_test:` (nccl-test).
fn check_sections(p: &Profile, out: &mut Problems) {
    let engine = p.engine.serving().map(|e| e.engine());
    if p.ray && !engine.is_some_and(|e| e.ray()) {
        let with_ray: Vec<&str> = EngineKind::ALL
            .iter()
            .map(|e| e.engine())
            .filter(|e| e.ray())
            .map(|e| e.title())
            .collect();
        out.push(
            "ray",
            format!("only {} profiles can use Ray", with_ray.join(" or ")),
        );
    }
    for section in p.sections.keys() {
        let owner = section_engine(section).map_or("", |e| e.name());
        if engine.and_then(|e| e.profile_section()) != Some(section.as_str()) {
            out.push(
                section,
                format!(
                    "this section is for {owner} profiles; this one runs {}",
                    p.engine
                ),
            );
        }
    }
    if let Some(f) = &p.nccl_from {
        if engine.is_none() {
            out.push(
                "nccl_from",
                format!(
                    "only serving profiles ({}) take it: nccl-test runs the NCCL its image was built with (`spark-launch nccl-build --nccl-ref REF`)",
                    EngineKind::ALL.map(|e| e.as_str()).join(", ")
                ),
            );
        } else if let Err(e) = f.parse::<crate::workload::nccl_lib::NcclFrom>() {
            out.push("nccl_from", e);
        }
    }
    if p.nccl_test.is_some() && engine.is_some() {
        out.push(
            "nccl_test",
            format!(
                "this section is for nccl-test profiles; this one runs {}",
                p.engine
            ),
        );
    }
    for (section, value) in &p.sections {
        let Some(owner) = section_engine(section) else {
            continue;
        };
        for (field, message) in owner.read_profile_section(value, &mut EngineOptions::default()) {
            let path = if field.is_empty() {
                section.clone()
            } else {
                format!("{section}.{field}")
            };
            out.push(&path, message);
        }
    }
    check_speculative(p, out);
}

/// The speculative block on its own, then as the profile's engine can run it.
fn check_speculative(p: &Profile, out: &mut Problems) {
    let Some(s) = &p.speculative else { return };
    let Some(engine) = p.engine.serving() else {
        out.push(
            "speculative",
            "nccl-test profiles serve no model; remove it".into(),
        );
        return;
    };
    for (field, message) in s.problems() {
        out.push(&format!("speculative.{field}"), message);
    }
    for problem in engine.engine().speculative_problems(s, &p.engine_args) {
        out.push(
            "speculative.method",
            format!("{}; {}", problem.problem, problem.fix),
        );
    }
}

/// Extra arguments the engine's seam refuses (flags spark-launch sets itself), each at its
/// index; nccl-test profiles take none.
fn check_engine_args(p: &Profile, out: &mut Problems) {
    let reserved = match p.engine.serving() {
        Some(e) => e.engine().reserved_args(&p.engine_args),
        None if p.engine_args.is_empty() => Vec::new(),
        None => vec![Problem {
            problem: "nccl-test profiles take no engine_args".into(),
            fix: "use the nccl_test section".into(),
        }],
    };
    for problem in reserved {
        let idx = p
            .engine_args
            .iter()
            .position(|a| problem.problem.contains(a.as_str()))
            .unwrap_or(0);
        out.push(
            &format!("engine_args[{idx}]"),
            format!("{}; {}", problem.problem, problem.fix),
        );
    }
}

/// Expected figures (serving profiles only) and nccl-tests operation names.
fn check_expect_and_ops(p: &Profile, out: &mut Problems) {
    let serving = p.engine.serving().is_some();
    if let Some(e) = &p.expect {
        if !serving {
            out.push(
                "expect",
                "holds serving figures for `spark-launch bench`; an nccl-test profile serves nothing".into(),
            );
        }
        for (field, message) in e.validate() {
            out.push(&format!("expect.{field}"), message);
        }
    }
    if !serving && let Some(n) = &p.nccl_test {
        for (i, op) in n.ops.iter().enumerate() {
            if op.is_empty() || !op.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                out.push(
                    &format!("nccl_test.ops[{i}]"),
                    format!("{op:?} is not an nccl-tests operation (all_gather, all_reduce, ...)"),
                );
            }
        }
    }
}

impl Profile {
    /// What its engine's own section (`trtllm:`) asks, read by the engine over `into`
    /// (validated profiles only: a section's problems were refused then).
    pub fn read_section(&self, into: &mut EngineOptions) {
        let Some(engine) = self.engine.serving().map(|e| e.engine()) else {
            return;
        };
        if let Some(value) = engine.profile_section().and_then(|s| self.sections.get(s)) {
            engine.read_profile_section(value, into);
        }
    }

    /// The model as a source (validated profiles only).
    pub fn model_source(&self) -> Option<ModelSource> {
        let m = self.model.as_ref()?;
        match (&m.id, &m.path) {
            (Some(id), None) => ModelSource::parse(id, m.revision.as_deref()).ok(),
            (None, Some(path)) => ModelSource::parse(path, None).ok(),
            _ => None,
        }
    }

    /// `Qwen/Qwen2.5-0.5B-Instruct@main`, a folder, or `-`.
    pub fn model_label(&self) -> String {
        self.model_source()
            .map(|m| m.to_string())
            .unwrap_or_else(|| "-".to_string())
    }
}

/// Parses every bundled profile (they are tested to be valid).
pub fn bundled() -> Vec<Loaded> {
    bundled::FILES
        .iter()
        .filter_map(|(file, text)| {
            let stem = file.trim_end_matches(".yaml");
            parse(&format!("launch-profiles/{file}"), Some(stem), text, &[])
                .ok()
                .map(|profile| Loaded {
                    profile,
                    origin: ProfileOrigin::Bundled,
                    file: format!("launch-profiles/{file}"),
                })
        })
        .collect()
}

/// Merges user profiles over the bundled ones by name; user files win.
pub fn catalogue(user: Vec<Loaded>) -> Vec<Loaded> {
    let mut by_name: BTreeMap<String, Loaded> = bundled()
        .into_iter()
        .map(|l| (l.profile.name.clone(), l))
        .collect();
    for l in user {
        by_name.insert(l.profile.name.clone(), l);
    }
    by_name.into_values().collect()
}

#[cfg(test)]
mod tests;
