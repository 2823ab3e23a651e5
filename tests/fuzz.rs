//! The fuzz loop: a seeded, bounded mutation loop over the readers of foreign input —
//! the snapshot reader (emitter streams and snapshot files), the nccl-tests parser and the
//! cluster file (reading it, and editing it with `nodes add`/`rm`) — on stable Rust, run by CI
//! with the rest of the suite. It starts from the bundled fixtures, mutates them (flip, insert,
//! delete, duplicate, splice, tokens that parsers trip on), and demands 0 panics and 0 hangs:
//! every input must be answered within [`HANG`], or the test fails naming the input's seed.
//!
//! `FUZZ_SECONDS` bounds each target's time (default 8), `FUZZ_SEED` replays one input
//! (`FUZZ_SEED=<seed> cargo nextest run --test fuzz`). A failing input is also written to
//! `target/fuzz-failures/`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spark_launch::inventory;
use spark_launch::probe::{MemTree, read_facts};
use spark_launch::report::nccl;

/// An input that takes longer than this is a hang.
const HANG: Duration = Duration::from_secs(10);

/// xorshift64*: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Strings that parsers of this project have reasons to trip on.
const TOKENS: &[&str] = &[
    "\0",
    "\n",
    "\r\n",
    "\t",
    "\u{1b}[2J",
    "\u{fffd}",
    "-1",
    "0",
    "4294967295",
    "18446744073709551616",
    "NaN",
    "1e309",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    ":",
    "- ",
    "  ",
    "#",
    "@",
    "|",
    "+",
    "!",
    "/",
    "../",
    "/etc/passwd",
    "&a",
    "*a",
    "!!binary",
    "~",
    "null",
    "4: ACTIVE",
    "1: DOWN",
    "RoCE v2",
    "::ffff:10.0.0.1",
    "999.1.1.1",
    "# Avg bus bandwidth",
    "# Out of bounds values",
    "NCCL INFO",
    "NCCL WARN",
    "via NET/Socket",
    "NET/IB : Using [0]",
    "nodes:",
    "name:",
    "addresses:",
    "port: 0",
    "role: head",
];

fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(8);
    for _ in 0..rounds {
        let len = out.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                out.insert(i, rng.next() as u8);
            }
            2 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                out.drain(a..b);
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(256)).min(len);
                let chunk = out[a..b].to_vec();
                let at = rng.below(out.len() + 1);
                let times = 1 + rng.below(4);
                for _ in 0..times {
                    out.splice(at..at, chunk.iter().copied());
                }
            }
            4 | 5 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let at = rng.below(len + 1);
                out.splice(at..at, t.iter().copied());
            }
            6 if !others.is_empty() => {
                let o = &others[rng.below(others.len())];
                if !o.is_empty() {
                    let a = rng.below(o.len());
                    let b = (a + 1 + rng.below(512)).min(o.len());
                    let at = rng.below(len + 1);
                    out.splice(at..at, o[a..b].iter().copied());
                }
            }
            7 if len > 0 => out.truncate(rng.below(len)),
            _ => {
                // Replace a number with an extreme one.
                let digits: Vec<usize> = (0..len).filter(|&i| out[i].is_ascii_digit()).collect();
                if let Some(&i) = digits.get(rng.below(digits.len().max(1))) {
                    let t = ["0", "-1", "4294967296", "99999999999999999999"][rng.below(4)];
                    out.splice(i..i + 1, t.bytes());
                }
            }
        }
    }
    out
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every regular file under `dir`, as (path relative to `dir`, content).
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// A snapshot folder as the emitter's stream.
fn stream_of(dir: &Path) -> Vec<u8> {
    let mut s = String::from("#spark-launch-snapshot 1\n");
    for (rel, content) in files_under(dir) {
        s.push_str(&format!("@{rel}\n"));
        for line in String::from_utf8_lossy(&content).lines() {
            s.push_str(&format!("|{line}\n"));
        }
    }
    s.into_bytes()
}

fn snapshot_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fixture in [
        "seed-001-two-sparks-both-twins",
        "seed-003-triangle",
        "seed-004-spark-and-workstation",
    ] {
        let root = fixtures().join(fixture);
        for n in std::fs::read_to_string(root.join("nodes")).unwrap().lines() {
            if !n.is_empty() {
                out.push(root.join(n));
            }
        }
    }
    out
}

fn seconds() -> f64 {
    std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0)
}

/// Runs `check` on mutations of `corpus` for the time budget (or once, for `FUZZ_SEED`): fails
/// on the first panic or hang, naming the seed and saving the input.
fn fuzz(target: &str, corpus: Vec<Vec<u8>>, check: impl Fn(&[u8]) + Send + Sync + 'static) {
    let replay: Option<u64> = std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok());
    let budget = Duration::from_secs_f64(seconds());
    let corpus = Arc::new(corpus);
    let check = Arc::new(check);
    let current = Arc::new(AtomicU64::new(0));
    let busy_since = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let base = 0x5eed_0000_u64
        ^ target
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ b as u64);
    let worker = {
        let (corpus, check, current, busy_since, done) = (
            corpus.clone(),
            check.clone(),
            current.clone(),
            busy_since.clone(),
            done.clone(),
        );
        std::thread::spawn(move || -> Result<u64, (u64, Vec<u8>, String)> {
            let mut runs = 0u64;
            let mut i = 0u64;
            loop {
                let seed = replay.unwrap_or(base.wrapping_add(i));
                let mut rng = Rng::new(seed);
                let input = if i == 0 && replay.is_none() {
                    corpus[0].clone()
                } else {
                    let pick = &corpus[rng.below(corpus.len())];
                    mutate(&mut rng, pick, &corpus)
                };
                current.store(seed, Ordering::SeqCst);
                busy_since.store(started.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
                let result = catch_unwind(AssertUnwindSafe(|| check(&input)));
                busy_since.store(0, Ordering::SeqCst);
                runs += 1;
                if let Err(e) = result {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    done.store(true, Ordering::SeqCst);
                    return Err((seed, input, msg));
                }
                i += 1;
                if replay.is_some() || started.elapsed() >= budget {
                    done.store(true, Ordering::SeqCst);
                    return Ok(runs);
                }
            }
        })
    };
    // The watchdog: an input that does not finish within HANG is a hang.
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        let since = busy_since.load(Ordering::SeqCst);
        if since > 0 && started.elapsed().as_millis() as u64 > since + HANG.as_millis() as u64 {
            panic!(
                "{target}: an input took longer than {HANG:?} (a hang): replay with FUZZ_SEED={}",
                current.load(Ordering::SeqCst)
            );
        }
    }
    match worker.join().expect("the fuzz worker") {
        Ok(runs) => {
            eprintln!(
                "{target}: {runs} inputs in {:.1}s, 0 panics, 0 hangs",
                started.elapsed().as_secs_f64()
            );
            assert!(runs > 0);
        }
        Err((seed, input, msg)) => {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{target}-{seed}"));
            let _ = std::fs::write(&file, &input);
            panic!(
                "{target}: panicked on an input ({msg}); replay with FUZZ_SEED={seed}; input saved to {}",
                file.display()
            );
        }
    }
}

#[test]
fn the_snapshot_reader_survives_mutated_streams_without_a_panic_or_a_hang() {
    let corpus: Vec<Vec<u8>> = snapshot_dirs().iter().map(|d| stream_of(d)).collect();
    fuzz("snapshot-stream", corpus, |input| {
        let text = String::from_utf8_lossy(input);
        if let Ok(tree) = MemTree::parse(&text) {
            let _ = read_facts(&tree);
        }
    });
}

#[test]
fn the_snapshot_reader_survives_mutated_files_without_a_panic_or_a_hang() {
    // One file of a real snapshot mutated at a time (ip-addr.json, GIDs, states, meminfo...).
    let dir = fixtures().join("seed-001-two-sparks-both-twins/spark");
    let files = files_under(&dir);
    let corpus: Vec<Vec<u8>> = files.iter().map(|(_, c)| c.clone()).collect();
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    fuzz("snapshot-file", corpus.clone(), move |input| {
        // The input is one file's new content; which file comes from its own bytes.
        let which = input
            .iter()
            .fold(0usize, |h, b| h.wrapping_mul(31) ^ *b as usize)
            % names.len();
        let mut tree = MemTree::default();
        for (i, (name, content)) in names.iter().zip(&corpus).enumerate() {
            let c = if i == which {
                input
            } else {
                content.as_slice()
            };
            tree.insert_file(name, String::from_utf8_lossy(c).into_owned());
        }
        let _ = read_facts(&tree);
    });
}

#[test]
fn the_nccl_tests_parser_survives_mutated_logs_without_a_panic_or_a_hang() {
    let mut corpus = Vec::new();
    for dir in [fixtures().join("nccl-tests"), fixtures().join("logs")] {
        for (name, content) in files_under(&dir) {
            if name.ends_with(".log") {
                corpus.push(content);
            }
        }
    }
    fuzz("nccl-log", corpus, |input| {
        let a = nccl::analyse(
            &String::from_utf8_lossy(input),
            &nccl::AnalysisContext::default(),
        );
        let _ = nccl::render::text(&a);
        let _ = serde_json::to_string(&a);
    });
}

const CLUSTER_FILES: &[&str] = &[
    "# spark-launch cluster file. Edit it freely; every command validates it.\n# Per node: name, addresses\nnodes:\n- name: spark-1d84          # the head\n  addresses: [169.254.12.7] # tried in order\n  user: nvidia\n- name: spark-1b3b\n  addresses:\n    - 169.254.12.8\n    - spark-1b3b.local\n  port: 2222\n  role: worker\n",
    "nodes:\n  - name: a\n    addresses: [x]\n  - name: b\n    addresses: [y]\n    port: 70000\n",
    "nodes: [{name: a, addresses: [1.2.3.4]}, {name: b, addresses: [1.2.3.5], role: head}]\n",
    "# nothing yet\n",
];

/// Mutated cluster files that read and were edited (add, then rm), for the test's summary.
static EDITS: AtomicU64 = AtomicU64::new(0);

#[test]
fn the_cluster_file_reader_and_editor_survive_mutated_files_without_a_panic_or_a_hang() {
    let corpus: Vec<Vec<u8>> = CLUSTER_FILES
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    fuzz("cluster-file", corpus, |input| {
        let text = String::from_utf8_lossy(input);
        let Ok(before) = inventory::file::parse(&text) else {
            return;
        };
        let node = inventory::NodeConfig::new(
            spark_launch::node::NodeName::new("fuzz-node").unwrap(),
            "169.254.9.9",
        );
        if before.get(&node.name).is_some() || before.by_address("169.254.9.9").is_some() {
            return;
        }
        // An edit either refuses (a layout it cannot edit line by line) or gives a file that
        // reads back with exactly that node added; removing it gives the same nodes again.
        let Ok(edited) = inventory::edit::add_node(&text, &node) else {
            return;
        };
        EDITS.fetch_add(1, Ordering::Relaxed);
        let after = inventory::file::parse(&edited).unwrap_or_else(|e| {
            panic!(
                "the edited file does not read back: {e:?}\n--- before\n{text}\n--- after\n{edited}"
            )
        });
        let mut want = before.clone();
        want.nodes.push(node.clone());
        assert_eq!(after, want, "{edited}");
        let removed = inventory::edit::remove_node(&edited, &node.name)
            .unwrap_or_else(|e| panic!("cannot remove what was added: {e}\n{edited}"));
        let back = inventory::file::parse(&removed)
            .unwrap_or_else(|e| panic!("the file does not read back after rm: {e:?}\n{removed}"));
        assert_eq!(back, before, "{removed}");
    });
    eprintln!(
        "cluster-file: {} valid mutated files edited (add, then rm) and read back",
        EDITS.load(Ordering::Relaxed)
    );
}
