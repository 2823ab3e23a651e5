//! `spark-launch check --url` (and `bench`'s gate, which asks the same questions first)
//! against the serving stand-in (tests/standin/vllm, its HTTP server run here as a plain
//! Python process): a stand-in that answers right passes every check, one that answers soup
//! (`--fake-soup`), thinks forever (`--fake-think-forever`) or gets the numbers wrong
//! (`--fake-wrong`) fails with its answer as the evidence and exit 1; bench refuses to measure
//! a model that answers wrong unless `--skip-check`, which the result file records.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The stand-in's own HTTP server (`serve_api`, as its head serves it), fast tokens, with
/// these `--fake-*` answer flags.
struct Standin {
    child: Child,
    url: String,
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SERVE: &str = r#"
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("standin", sys.argv[1])
spec = importlib.util.spec_from_loader("standin", loader)
m = importlib.util.module_from_spec(spec); loader.exec_module(m)
m.answer_mode(set(sys.argv[3:]))
d = m.Decoder(2000.0, 0.01, 8, m.Collective([], 600), 65536, 0)
m.serve_api("127.0.0.1", int(sys.argv[2]), "org/standin", d)
"#;

fn standin(flags: &[&str]) -> Standin {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/vllm");
    let child = Command::new("python3")
        .arg("-c")
        .arg(SERVE)
        .arg(&file)
        .arg(port.to_string())
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs the stand-in");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the stand-in never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Standin {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

fn run(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("SPARK_LAUNCH_STATE_DIR")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap()
}

fn shown(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `check --json`: the exit code and the checks by name (the first of each name).
fn check(flags: &[&str], extra: &[&str]) -> (Option<i32>, Value, String) {
    let s = standin(flags);
    let home = tempfile::tempdir().unwrap();
    let mut args = vec!["check", "--url", &s.url, "--json", "--max-tokens", "128"];
    args.extend_from_slice(extra);
    let o = run(home.path(), &args);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code(), v, shown(&o))
}

fn by<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["check"] == name))
        .unwrap_or(&Value::Null)
}

#[test]
fn a_stand_in_that_answers_right_passes_every_check_and_finds_the_needle() {
    let (code, v, out) = check(&[], &["--context", "400", "--seed", "5"]);
    assert_eq!(code, Some(0), "{out}");
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["mark"], "ok", "{c}\n{out}");
    }
    assert_eq!(v["model"], "org/standin");
    assert_eq!(v["seed"], 5);
    assert_eq!(by(&v, "needle")["subject"], "400 words deep");
    // The same check without --context says the needle was not asked, and passes.
    let (code, v, out) = check(&[], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(by(&v, "needle")["mark"], "skip", "{out}");
}

#[test]
fn soup_fails_with_the_answer_as_evidence() {
    let (code, v, out) = check(&["--fake-soup"], &[]);
    assert_eq!(code, Some(1), "{out}");
    let soup = by(&v, "soup");
    assert_eq!(soup["mark"], "fail", "{out}");
    assert!(soup["reason"].as_str().unwrap().contains("soup"), "{out}");
    assert!(
        soup["evidence"]
            .as_str()
            .unwrap()
            .starts_with("sky blue blue sky"),
        "{out}"
    );
    assert_eq!(by(&v, "arithmetic")["mark"], "fail", "{out}");
}

#[test]
fn thinking_forever_fails_on_termination_and_wrong_numbers_fail_arithmetic() {
    let (code, v, out) = check(&["--fake-think-forever"], &[]);
    assert_eq!(code, Some(1), "{out}");
    let t = by(&v, "termination");
    assert_eq!(t["mark"], "fail", "{out}");
    assert!(
        t["reason"].as_str().unwrap().contains("token limit (128)")
            && t["reason"].as_str().unwrap().contains("never closed"),
        "{out}"
    );
    let (code, v, out) = check(&["--fake-wrong"], &["--seed", "9"]);
    assert_eq!(code, Some(1), "{out}");
    let a = by(&v, "arithmetic");
    assert_eq!(a["mark"], "fail", "{out}");
    assert!(
        a["reason"].as_str().unwrap().starts_with("answered "),
        "{out}"
    );
    assert_eq!(by(&v, "soup")["mark"], "ok", "{out}");
}

#[test]
fn bench_refuses_to_measure_a_model_that_answers_wrong_unless_told_and_records_it() {
    let s = standin(&["--fake-wrong"]);
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("run.json");
    let file_s = file.to_str().unwrap();
    let args = [
        "bench",
        "--url",
        &s.url,
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "4",
        "--out",
        file_s,
    ];
    let o = run(home.path(), &args);
    assert_eq!(o.status.code(), Some(1), "{}", shown(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("does not answer right, so bench measures nothing and saves nothing")
            && err.contains("arithmetic ("),
        "{}",
        shown(&o)
    );
    assert!(!file.exists(), "no numbers saved from a wrong model");
    let mut skip = args.to_vec();
    skip.push("--skip-check");
    let o = run(home.path(), &skip);
    assert_eq!(o.status.code(), Some(0), "{}", shown(&o));
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(saved["answer_check"], "skipped (--skip-check)");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("answers not checked first"),
        "{}",
        shown(&o)
    );
}
