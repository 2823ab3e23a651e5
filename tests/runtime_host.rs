//! The host-process runtime on this machine alone, as on a GPU box without Docker or sshd:
//! no cluster file, no SSH, processes started locally and found again by `status`, `logs` and
//! `stop` through their folder under the state dir (a temp dir here).

use std::process::{Command, Output};

mod support;

fn sl(state: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_STATE_DIR", state)
        .env("SPARK_LAUNCH_CLUSTER", state.join("no-cluster.yaml"))
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn job_processes(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .starts_with(marker)
                })
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn a_local_host_job_is_started_listed_logged_and_stopped_without_docker_or_ssh() {
    let state = tempfile::tempdir().unwrap();
    let job = format!("sl4h{}", std::process::id());
    let marker = format!("sleep 42{}", std::process::id());
    let out = sl(
        state.path(),
        &[
            "run",
            "--job",
            &job,
            "--runtime",
            "host",
            "-e",
            "GREETING=hello",
            "--",
            "sh",
            "-c",
            &format!("echo $GREETING from $(hostname); exec {marker}"),
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(job_processes(&marker), 1);

    let status = sl(state.path(), &["status", &job, "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let rows = v["jobs"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["runtime"], "host");
    assert_eq!(rows[0]["state"], "running");
    assert_eq!(rows[0]["role"], "head");

    let logs = sl(state.path(), &["logs", &job]);
    assert!(logs.status.success(), "{}", describe(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("hello from "),
        "{}",
        describe(&logs)
    );

    let clash = sl(
        state.path(),
        &["run", "--job", &job, "--runtime", "host", "--", "true"],
    );
    assert_eq!(clash.status.code(), Some(2), "{}", describe(&clash));
    assert!(
        String::from_utf8_lossy(&clash.stderr).contains("already exists"),
        "{}",
        describe(&clash)
    );

    let stop = sl(state.path(), &["stop", &job]);
    assert!(stop.status.success(), "{}", describe(&stop));
    assert_eq!(job_processes(&marker), 0, "the process survived stop");
    let after = sl(state.path(), &["status", &job, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert!(v["jobs"].as_array().unwrap().is_empty(), "{v}");
    assert!(
        std::fs::read_dir(state.path().join("jobs"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[test]
fn a_host_job_that_ended_shows_its_exit_code_and_its_log_outlives_it_until_stop() {
    let state = tempfile::tempdir().unwrap();
    let job = format!("sl4e{}", std::process::id());
    let out = sl(
        state.path(),
        &[
            "run",
            "--job",
            &job,
            "--runtime",
            "host",
            "--",
            "sh",
            "-c",
            "echo last words; exit 3",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let row = loop {
        let status = sl(state.path(), &["status", &job, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        let row = v["jobs"][0].clone();
        if row["state"] == "exited" {
            break row;
        }
        assert!(std::time::Instant::now() < deadline, "never exited: {v}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(row["exit_code"], 3, "{row}");
    let logs = sl(state.path(), &["logs", &job]);
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout),
        "last words\n",
        "{}",
        describe(&logs)
    );
    let stop = sl(state.path(), &["stop", &job]);
    assert!(stop.status.success(), "{}", describe(&stop));
}

/// Every process's command line on this machine, as `ps` shows them.
fn all_command_lines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .collect()
}

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_host_job_gets_its_secrets_through_a_private_file_never_its_command_line() {
    // Seen once: with `--runtime host`, `-e HF_TOKEN=…` appeared in `ps` argv; the job folder
    // was 0755 and its files 0644.
    let state = tempfile::tempdir().unwrap();
    let job = format!("sl12s{}", std::process::id());
    let token = format!("hf_s3cret{}", std::process::id());
    let marker = format!("sleep 43{}", std::process::id());
    let run = [
        "run",
        "--job",
        &job,
        "--runtime",
        "host",
        "-e",
        &format!("HF_TOKEN={token}"),
        "-e",
        "GREETING=hello",
        "--",
        "sh",
        "-c",
        &format!("echo \"$GREETING, the token has ${{#HF_TOKEN}} characters\"; exec {marker}"),
    ];
    // The plan shows that the token is set, never its value.
    let mut dry: Vec<&str> = run.to_vec();
    dry.insert(1, "--dry-run");
    dry.insert(1, "--json");
    let out = sl(state.path(), &dry);
    assert!(out.status.success(), "{}", describe(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.contains(r#""HF_TOKEN": "<set>""#), "{plan}");
    assert!(!plan.contains(&token), "{plan}");

    let out = sl(state.path(), &run);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(job_processes(&marker), 1);
    let leaks: Vec<String> = all_command_lines()
        .into_iter()
        .filter(|c| c.contains(&token))
        .collect();
    assert!(
        leaks.is_empty(),
        "the token is on a command line: {leaks:#?}"
    );

    // Private state: the folders 0700, the files 0600, the environment file gone once read.
    let jobs = state.path().join("jobs");
    assert_eq!(mode(&jobs), 0o700);
    let dir = std::fs::read_dir(&jobs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    let mut files = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let f = f.unwrap().path();
        assert_eq!(mode(&f), 0o600, "{}", f.display());
        assert!(
            !std::fs::read_to_string(&f)
                .unwrap_or_default()
                .contains(&token),
            "{}",
            f.display()
        );
        files += 1;
    }
    assert!(files >= 4, "pid, log, labels, command, started");
    assert!(!dir.join("env").exists());

    // The process got it, through its environment.
    let mut logged = String::new();
    for _ in 0..50 {
        let out = sl(state.path(), &["logs", &job]);
        logged = String::from_utf8_lossy(&out.stdout).into_owned();
        if logged.contains("characters") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        logged.contains(&format!("hello, the token has {} characters", token.len())),
        "{logged}"
    );
    let status = sl(state.path(), &["status", &job, "--json"]);
    assert!(!String::from_utf8_lossy(&status.stdout).contains(&token));

    let out = sl(state.path(), &["stop", &job]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(job_processes(&marker), 0);
}

#[test]
fn status_names_the_nccl_a_running_host_jobs_processes_have_mapped() {
    // A real NCCL build (tests/standin/fetch-nccl-wheels), loaded by CPython as a program
    // loads it; status reads the job's processes' /proc/PID/maps and the file's build string.
    let lib = support::standin::nccl_wheels().join("nvidia-nccl-cu13-2.30.7/libnccl.so.2");
    let lib = std::fs::canonicalize(lib).unwrap();
    let state = tempfile::tempdir().unwrap();
    let job = format!("sl4n{}", std::process::id());
    let script = "import ctypes, sys, time\nctypes.CDLL(sys.argv[1])\nprint('loaded', flush=True)\ntime.sleep(60)";
    let out = sl(
        state.path(),
        &[
            "run",
            "--job",
            &job,
            "--runtime",
            "host",
            "--",
            "/usr/bin/python3",
            "-c",
            script,
            lib.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let started = std::time::Instant::now();
    loop {
        let logs = sl(state.path(), &["logs", &job]);
        if String::from_utf8_lossy(&logs.stdout).contains("loaded") {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the job never loaded NCCL: {}",
            describe(&logs)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let status = sl(state.path(), &["status", &job, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let mapped = &v["jobs"][0]["nccl_mapped"];
    assert_eq!(mapped["state"], "mapped", "{v}");
    assert_eq!(mapped["libs"][0]["path"], lib.to_str().unwrap(), "{v}");
    assert_eq!(mapped["libs"][0]["version"], "2.30.7+cuda13.3");
    let text = sl(state.path(), &["status", &job]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "NCCL the host processes have mapped:\n  sl-{job}-"
        )) && text.contains(&format!("NCCL 2.30.7+cuda13.3 from {}", lib.display())),
        "{text}"
    );
    let stop = sl(state.path(), &["stop", &job]);
    assert!(stop.status.success(), "{}", describe(&stop));
}

/// Stand-ins for llama.cpp's two programs, written for this test: `ggml-rpc-server` prints the
/// banner llama.cpp's RPC server prints (`Starting RPC server`, its endpoint and transport; the
/// transport line as a build with `GGML_RPC_RDMA` prints it) and holds its port; `llama-server`
/// prints what the RPC backend logs per connection (`RDMA activated: qpn=…` when
/// `FAKE_RDMA=activated`, nothing of it otherwise) and serves `/health`, `/v1/models` and a
/// streamed completion, as readiness asks.
const FAKE_RPC_SERVER: &str = r#"#!/usr/bin/env python3
import socket, sys
a = sys.argv[1:]
host, port = a[a.index("--host") + 1], int(a[a.index("--port") + 1])
print("Starting RPC server v3.0.0", flush=True)
print(f"  endpoint       : {host}:{port}", flush=True)
print("  transport      : TCP (RDMA auto-negotiate enabled)", flush=True)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port)); s.listen(8)
while True:
    s.accept()[0].close()
"#;

const FAKE_LLAMA_SERVER: &str = r#"#!/usr/bin/env python3
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
a = sys.argv[1:]
port, alias = int(a[a.index("--port") + 1]), a[a.index("--alias") + 1]
if "--rpc" in a and os.environ.get("FAKE_RDMA") == "activated":
    print("RDMA activated: qpn=7->9 mtu=4096 rx_depth=24", file=sys.stderr, flush=True)
class H(BaseHTTPRequestHandler):
    def log_message(self, *x):
        pass
    def reply(self, body, kind="application/json"):
        b = body.encode()
        self.send_response(200); self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if self.path.startswith("/v1/models"):
            self.reply(json.dumps({"object": "list", "data": [{"id": alias}]}))
        else:
            self.reply('{"status":"ok"}')
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        c = {"choices": [{"index": 0, "text": " Paris", "finish_reason": None}]}
        self.reply(f"data: {json.dumps(c)}\n\ndata: [DONE]\n\n", "text/event-stream")
print(f"main: server is listening on http://0.0.0.0:{port}", file=sys.stderr, flush=True)
ThreadingHTTPServer(("0.0.0.0", port), H).serve_forever()
"#;

/// Stops the job when the test ends, whichever way.
struct StopAfter<'a>(&'a std::path::Path, String);

impl Drop for StopAfter<'_> {
    fn drop(&mut self) {
        let _ = sl(self.0, &["stop", &self.1]);
    }
}

#[test]
fn a_llama_cpp_job_says_its_rpc_transport_after_the_start_and_in_status() {
    use std::os::unix::fs::PermissionsExt;
    let state = tempfile::tempdir().unwrap();
    let bin = state.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, text) in [
        ("ggml-rpc-server", FAKE_RPC_SERVER),
        ("llama-server", FAKE_LLAMA_SERVER),
    ] {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let model = state.path().join("tiny.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let hf = state.path().join("hf");
    let base = 20_000 + (std::process::id() % 5_000) as u16 * 2;
    for (i, (rdma, verdict)) in [("activated", "RDMA"), ("none", "not recorded")]
        .into_iter()
        .enumerate()
    {
        let job = format!("sl31r{i}{}", std::process::id());
        let _stop = StopAfter(state.path(), job.clone());
        let (port, rpc_port) = (
            (base + 10_000 + i as u16).to_string(),
            (base + i as u16 * 100).to_string(),
        );
        let out = sl(
            state.path(),
            &[
                "llamacpp",
                model.to_str().unwrap(),
                "--local",
                "--runtime",
                "host",
                "--programs",
                bin.to_str().unwrap(),
                "--rpc-gpus",
                "1",
                "--gpus-per-node",
                "2",
                "--port",
                &port,
                "--rpc-port",
                &rpc_port,
                "--hf-home",
                hf.to_str().unwrap(),
                "--env",
                &format!("FAKE_RDMA={rdma}"),
                "--no-check",
                "--timeout",
                "60",
                "--job",
                &job,
                "-d",
            ],
        );
        assert!(out.status.success(), "{}", describe(&out));
        let summary = String::from_utf8_lossy(&out.stdout);
        assert!(
            summary.contains(&format!("\nRPC transport: {verdict}")),
            "{}",
            describe(&out)
        );
        let status = sl(state.path(), &["status", &job]);
        assert!(status.status.success(), "{}", describe(&status));
        assert!(
            String::from_utf8_lossy(&status.stdout)
                .contains(&format!("{job}: RPC transport: {verdict}")),
            "{}",
            describe(&status)
        );
        let json = sl(state.path(), &["status", &job, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(v["links"][0]["verdict"], verdict, "{v}");
        assert_eq!(v["jobs"][0]["workload"], "llamacpp", "{v}");
        // The RPC server and the server run as one group on this node: `logs` shows both.
        let logs = sl(state.path(), &["logs", &job]);
        let text = String::from_utf8_lossy(&logs.stdout);
        assert!(
            text.contains("Starting RPC server") && text.contains("server is listening"),
            "{}",
            describe(&logs)
        );
    }
}
