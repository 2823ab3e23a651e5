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
    let mut input = String::new();
    for line in lines {
        input.push_str(&serde_json::to_string(line).expect("JSON of a command line"));
        input.push('\n');
    }
    child
        .stdin
        .take()
        .expect("the helper's stdin")
        .write_all(input.as_bytes())
        .expect("write the command lines");
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
    let verdicts: Vec<Result<(), String>> = rows
        .map(|v| {
            if v["ok"] == Value::Bool(true) {
                Ok(())
            } else {
                Err(v["error"].as_str().unwrap_or("no message").to_string())
            }
        })
        .collect();
    assert_eq!(verdicts.len(), lines.len(), "one verdict per line: {text}");
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
