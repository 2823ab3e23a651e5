//! SGLang's own argument parser as tests call it: `tests/standin/sglang_parse.py` over the
//! pinned SGLang wheel that `tests/standin/fetch-sglang-wheels` fetches once from PyPI (cached
//! in `.whl/sglang`). Two pins: the newest release the tests know ([`NEWEST`]) and the release
//! inside spark-launch's default SGLang image ([`IMAGE`]). A missing prerequisite fails the
//! test; it never skips.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What SGLang's parser said about a batch of command lines.
#[derive(Debug)]
pub struct SglangVerdicts {
    /// The SGLang release whose parser judged.
    pub version: String,
    /// How many arguments the parser defines.
    pub flags: u64,
    /// Modules SGLang imports that are not installed and stood in for (see the helper).
    pub stand_ins: Vec<String>,
    /// One per line: `Ok(())` or `Err(argparse's message)`.
    pub lines: Vec<Result<(), String>>,
}

/// The newest SGLang release the tests pin (`sglang-requirements.txt`).
pub const NEWEST: &str = "tests/standin/sglang-requirements.txt";
/// The SGLang release inside the default image (`sglang-image-requirements.txt`).
pub const IMAGE: &str = "tests/standin/sglang-image-requirements.txt";

/// Parses each command line (program words first, or the arguments alone) with SGLang's
/// `ServerArgs.add_cli_args` on an `argparse.ArgumentParser()`, of the [`NEWEST`] pin.
pub fn sglang_parse(lines: &[Vec<String>]) -> SglangVerdicts {
    sglang_parse_with(NEWEST, lines)
}

/// [`sglang_parse`] with the parser of the release `pins` names ([`NEWEST`], [`IMAGE`]).
pub fn sglang_parse_with(pins: &str, lines: &[Vec<String>]) -> SglangVerdicts {
    let input: Vec<String> = lines
        .iter()
        .map(|line| serde_json::to_string(line).expect("JSON of a command line"))
        .collect();
    let (head, rows) = run_helper(pins, &input);
    let verdicts: Vec<Result<(), String>> = rows
        .iter()
        .map(|v| {
            if v["ok"] == Value::Bool(true) {
                Ok(())
            } else {
                Err(v["error"].as_str().unwrap_or("no message").to_string())
            }
        })
        .collect();
    SglangVerdicts {
        version: head["sglang"].as_str().unwrap_or_default().to_string(),
        flags: head["flags"].as_u64().unwrap_or_default(),
        stand_ins: head["stand_ins"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        lines: verdicts,
    }
}

/// How SGLang's parser reads one flag word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// As this flag (every spelling of it).
    Flag(Vec<String>),
    /// As more than one flag: argparse's message.
    Ambiguous(String),
    /// As no flag.
    Nothing,
}

/// Which flag the parser of the release `pins` names reads each word as (argparse's lookup,
/// abbreviations included); the release's version first.
pub fn sglang_resolve_with(pins: &str, words: &[String]) -> (String, Vec<Resolved>) {
    let input: Vec<String> = words
        .iter()
        .map(|w| serde_json::json!({ "resolve": w }).to_string())
        .collect();
    let (head, rows) = run_helper(pins, &input);
    let resolved = rows
        .iter()
        .map(|v| {
            if let Some(m) = v["ambiguous"].as_str() {
                Resolved::Ambiguous(m.to_string())
            } else if let Some(a) = v["options"].as_array() {
                Resolved::Flag(
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect(),
                )
            } else {
                Resolved::Nothing
            }
        })
        .collect();
    (
        head["sglang"].as_str().unwrap_or_default().to_string(),
        resolved,
    )
}

/// Runs the helper over the pinned release with one JSON input line each; its header and one
/// answer per line.
fn run_helper(pins: &str, input: &[String]) -> (Value, Vec<Value>) {
    let fetch = Command::new(repo().join("tests/standin/fetch-sglang-wheels"))
        .arg(repo().join(pins))
        .output()
        .expect("run tests/standin/fetch-sglang-wheels");
    assert!(
        fetch.status.success(),
        "SGLang's parser is needed (PyPI, or the .whl/sglang cache): {}",
        String::from_utf8_lossy(&fetch.stderr)
    );
    let site = String::from_utf8_lossy(&fetch.stdout).trim().to_string();
    let mut child = Command::new("/usr/bin/python3")
        .args(["-I", "-S"])
        .arg(repo().join("tests/standin/sglang_parse.py"))
        .arg(&site)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tests/standin/sglang_parse.py");
    let mut text = String::new();
    for line in input {
        text.push_str(line);
        text.push('\n');
    }
    child
        .stdin
        .take()
        .expect("the helper's stdin")
        .write_all(text.as_bytes())
        .expect("write the input lines");
    let out = child.wait_with_output().expect("the helper finishes");
    assert!(
        out.status.success(),
        "sglang_parse.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows = text.lines().map(|l| {
        serde_json::from_str::<Value>(l)
            .unwrap_or_else(|e| panic!("not JSON from the helper: {l}: {e}"))
    });
    let head = rows.next().expect("the helper's header line");
    let rows: Vec<Value> = rows.collect();
    assert_eq!(rows.len(), input.len(), "one answer per line: {text}");
    (head, rows)
}
