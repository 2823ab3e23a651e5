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
