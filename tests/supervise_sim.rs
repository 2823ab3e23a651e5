//! The supervisor on simulated nodes: a 2-node stand-in vLLM job
//! (tests/standin/vllm: every token the head generates is one round trip to the worker rank, so
//! a frozen worker wedges generation while `/health` answers 200) started with
//! `spark-launch vllm --tp 2 -d` on nodes that each run their own dockerd (tests/harness/simnet),
//! then `spark-launch supervise JOB` running in the head. The worker's container is frozen with
//! `docker pause` (a wedge), later killed with `docker kill` (a crashed rank); each time the
//! supervisor restarts the whole group (both ranks' containers start again) and the job
//! answers with a token again; an unlabelled container on the worker stays as it was; Ctrl-C
//! (SIGINT) ends the supervisor and leaves the job running; each restarted rank finds its node's
//! runtime cache as the first start left it, and `status` measures it. Then `vllm --supervise`: the
//! launch stays as the job's supervisor, and Ctrl-C leaves that job running too; `stop JOB`
//! under a supervisor ends it without a restart.
//!
//! `wedge_bench` (ignored: run by `bench/wedge.sh`) measures the same under a steady load.

mod hub_standin;
mod sim_serving;
mod support;

use std::process::Output;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hub_standin::HubStandin;
use sim_serving::{Serving, docker, hosts, remove_job, two_nodes_serving};
use support::{SimNet, describe, stdout};

const MODEL: &str = "spark-test/tiny";

/// `docker inspect -f FORMAT NAME` on node `node`, trimmed.
fn inspect(net: &SimNet, node: usize, name: &str, format: &str) -> String {
    let out = docker(net, node, &["inspect", "-f", format, name]);
    assert!(out.status.success(), "inspect {name}: {}", describe(&out));
    stdout(&out).trim().to_string()
}

/// When each rank's container last started (Docker's StartedAt), head first.
fn started(net: &SimNet, job: &str) -> Vec<String> {
    (1..=2)
        .map(|i| {
            inspect(
                net,
                i,
                &format!("sl-{job}-{}", net.hostname(i)),
                "{{.State.StartedAt}}",
            )
        })
        .collect()
}

/// `vllm MODEL --tp 2 --job JOB` on the stand-in, with `how` (`-d`, `--supervise`).
fn vllm_args(net: &SimNet, image: &str, job: &str, how: &str) -> Vec<String> {
    [
        "vllm",
        MODEL,
        "--tp",
        "2",
        "--job",
        job,
        how,
        "--timeout",
        "180",
        "--hosts",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([hosts(net)])
    .chain(
        [
            "--image",
            image,
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
        ]
        .iter()
        .map(|s| s.to_string()),
    )
    .collect()
}

/// Starts the 2-node stand-in job, detached.
fn launch(net: &SimNet, hub: &HubStandin, image: &str, job: &str) {
    let args = vllm_args(net, image, job, "-d");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = net.spark_launch_with(1, &args, &[("HF_ENDPOINT", hub.url.as_str())], None);
    assert!(out.status.success(), "{}", describe(&out));
}

/// `spark-launch supervise JOB ARGS` in the head, in the background; its pid is written to
/// `~/sup.pid` inside the node (for the SIGINT).
fn spawn_supervise<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    net: &'s SimNet,
    job: &'s str,
    args: &'s [&'s str],
) -> std::thread::ScopedJoinHandle<'s, Output> {
    s.spawn(move || {
        let script = format!(
            "echo $$ > ~/sup.pid; exec {} supervise {job} --hosts {} {}",
            net.binary().display(),
            hosts(net),
            args.join(" ")
        );
        net.exec_user(
            1,
            &["bash", "-c", &script],
            &[("SPARK_LAUNCH_NO_PROGRESS", "1")],
            None,
        )
    })
}

/// The job's event log (kinds, in order), as the supervisor wrote it in the head.
fn events(net: &SimNet, job: &str) -> Vec<serde_json::Value> {
    let out = net.exec_user(
        1,
        &[
            "sh",
            "-c",
            &format!("cat ~/.local/state/spark-launch/records/{job}/events.jsonl 2>/dev/null"),
        ],
        &[],
        None,
    );
    stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn kinds(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits (≤ `within`) until the event log has `count` events of `kind`; returns the log.
fn wait_for(
    net: &SimNet,
    job: &str,
    kind: &str,
    count: usize,
    within: Duration,
) -> Vec<serde_json::Value> {
    let t = Instant::now();
    loop {
        let all = events(net, job);
        if kinds(&all).iter().filter(|k| *k == kind).count() >= count {
            return all;
        }
        assert!(
            t.elapsed() < within,
            "no {count}× {kind} within {within:?}; the events: {:#?}",
            kinds(&all)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `curl` inside node 1: one streamed completion's text, or the error.
fn token(net: &SimNet) -> String {
    let body = format!(r#"{{"model":"{MODEL}","prompt":"hi","max_tokens":2,"stream":true}}"#);
    let out = net.exec_user(
        1,
        &[
            "curl",
            "-sN",
            "-m",
            "10",
            "-H",
            "Content-Type: application/json",
            "-d",
            &body,
            "http://127.0.0.1:8000/v1/completions",
        ],
        &[],
        None,
    );
    stdout(&out)
}

#[test]
fn a_supervised_job_heals_a_wedge_and_a_crashed_rank_by_restarting_its_whole_group_and_ctrl_c_leaves_it_running_also_with_vllm_supervise()
 {
    let Serving {
        net,
        hub,
        image,
        rt: _rt,
    } = two_nodes_serving("v", MODEL);
    let job = "sup";
    launch(&net, &hub, &image, job);
    let worker = format!("sl-{job}-{}", net.hostname(2));
    // A container spark-launch did not label, on the worker, with a name like the job's.
    let bystander = format!("sl-{job}-bystander");
    let out = docker(
        &net,
        2,
        &[
            "run",
            "-d",
            "--name",
            &bystander,
            "--entrypoint",
            "sleep",
            &image,
            "1000000",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let bystander_started = inspect(&net, 2, &bystander, "{{.State.StartedAt}}");
    // What the first start compiled, as the engine would leave it in its runtime cache.
    for i in 1..=2 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        let out = docker(
            &net,
            i,
            &[
                "exec",
                &name,
                "sh",
                "-c",
                "echo compiled-once > /var/cache/spark-launch/marker",
            ],
        );
        assert!(out.status.success(), "{}", describe(&out));
    }

    // What it would watch, and the restart's order, without touching anything.
    let out = net.spark_launch(
        1,
        &[
            "supervise",
            job,
            "--dry-run",
            "--json",
            "--hosts",
            &hosts(&net),
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(plan["ranks"][1]["container"], worker.as_str());
    let stages: Vec<&str> = plan["restart"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["stop", "start", "run"], "{plan}");

    let policy = [
        "--probe-every",
        "2",
        "--probe-timeout",
        "4",
        "--backoff",
        "2",
    ];
    let (out, during) = std::thread::scope(|s| {
        let sup = spawn_supervise(s, &net, job, &policy);
        wait_for(&net, job, "watching", 1, Duration::from_secs(60));
        // One supervisor per job: a second one is refused, naming the first.
        let second = net.spark_launch(1, &["supervise", job, "--hosts", &hosts(&net)]);
        assert_eq!(second.status.code(), Some(2), "{}", describe(&second));
        assert!(
            support::stderr(&second).contains("already supervised here"),
            "{}",
            describe(&second)
        );

        // A wedge: the worker frozen. /health still answers; no token comes.
        let before = started(&net, job);
        let out = docker(&net, 2, &["pause", &worker]);
        assert!(out.status.success(), "docker pause: {}", describe(&out));
        let paused = Instant::now();
        let log = wait_for(&net, job, "wedge", 1, Duration::from_secs(60));
        let detected = paused.elapsed();
        assert!(!kinds(&log).contains(&"not_serving".to_string()), "{log:?}");
        wait_for(&net, job, "ready", 1, Duration::from_secs(180));
        let after = started(&net, job);
        // Both ranks started again: the whole group, not the frozen rank alone.
        assert_ne!(before[0], after[0], "the head was not restarted");
        assert_ne!(before[1], after[1], "the worker was not restarted");
        assert_eq!(inspect(&net, 2, &worker, "{{.State.Status}}"), "running");
        assert!(token(&net).contains("data:"), "no token after the restart");

        // A crashed rank: the worker killed.
        let out = docker(&net, 2, &["kill", &worker]);
        assert!(out.status.success(), "docker kill: {}", describe(&out));
        let log = wait_for(&net, job, "ready", 2, Duration::from_secs(180));
        let stopped = log
            .iter()
            .find(|e| e["kind"] == "container_stopped")
            .expect("a container_stopped event");
        assert!(
            stopped["detail"].as_str().unwrap().contains(&worker),
            "{stopped}"
        );
        let again = started(&net, job);
        assert_ne!(
            after[0], again[0],
            "the head was not restarted with the worker"
        );
        assert_ne!(after[1], again[1]);
        assert!(
            token(&net).contains("data:"),
            "no token after the second restart"
        );
        // Each restarted rank finds its node's runtime cache as the first start left it: in
        // the node's own folder (the mount's source, made by the launch as the node's user).
        for i in 1..=2 {
            let name = format!("sl-{job}-{}", net.hostname(i));
            let out = docker(
                &net,
                i,
                &["exec", &name, "cat", "/var/cache/spark-launch/marker"],
            );
            assert_eq!(stdout(&out).trim(), "compiled-once", "{}", describe(&out));
            let source = inspect(
                &net,
                i,
                &name,
                "{{range .Mounts}}{{if eq .Destination \"/var/cache/spark-launch\"}}{{.Source}}{{end}}{{end}}",
            );
            assert!(
                source.contains("/.cache/spark-launch/runtime/vllm/spark-test--tiny/"),
                "{source}"
            );
            let out = net.exec_user(i, &["cat", &format!("{source}/marker")], &[], None);
            assert_eq!(stdout(&out).trim(), "compiled-once", "{}", describe(&out));
        }

        // Ctrl-C: the supervisor ends, the job runs on.
        let out = net.exec_user(1, &["sh", "-c", "kill -INT $(cat ~/sup.pid)"], &[], None);
        assert!(out.status.success(), "{}", describe(&out));
        (sup.join().unwrap(), detected)
    });
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("the job keeps running"),
        "{}",
        describe(&out)
    );
    assert!(
        during < Duration::from_secs(30),
        "wedge named after {during:?}"
    );
    for i in 1..=2 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        assert_eq!(inspect(&net, i, &name, "{{.State.Status}}"), "running");
    }
    assert!(token(&net).contains("data:"), "no token after Ctrl-C");
    // The unlabelled container: never stopped, never started again.
    assert_eq!(inspect(&net, 2, &bystander, "{{.State.Status}}"), "running");
    assert_eq!(
        inspect(&net, 2, &bystander, "{{.State.StartedAt}}"),
        bystander_started
    );
    // What `status JOB` and `logs JOB --events` show.
    let out = net.spark_launch(1, &["logs", job, "--events", "--hosts", &hosts(&net)]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    for kind in [
        "watching",
        "probe_failed",
        "wedge",
        "restart",
        "ready",
        "container_stopped",
        "stopped",
    ] {
        assert!(text.contains(kind), "no {kind} in:\n{text}");
    }
    let out = net.spark_launch(1, &["status", job, "--json", "--hosts", &hosts(&net)]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let shown = v["events"].as_array().unwrap();
    assert_eq!(shown.last().unwrap()["kind"], "stopped", "{v}");
    // Each node's runtime cache, measured there.
    let caches = v["runtime_caches"].as_array().unwrap();
    assert_eq!(caches.len(), 2, "{v}");
    for c in caches {
        assert_eq!(c["state"], "present", "{v}");
        assert_eq!(c["jobs"], serde_json::json!([job]), "{v}");
        assert!(
            c["folder"]
                .as_str()
                .unwrap()
                .contains("/.cache/spark-launch/runtime/vllm/spark-test--tiny/"),
            "{v}"
        );
    }
    remove_job(&net, job);

    // `vllm --supervise`: once it serves it supervises; Ctrl-C leaves the job running.
    let job = "supd";
    let args = vllm_args(&net, &image, job, "--supervise");
    let script = format!(
        "echo $$ > ~/supd.pid; exec {} {}",
        net.binary().display(),
        args.join(" ")
    );
    let out = std::thread::scope(|s| {
        let launched = s.spawn(|| {
            net.exec_user(
                1,
                &["bash", "-c", &script],
                &[
                    ("HF_ENDPOINT", hub.url.as_str()),
                    ("SPARK_LAUNCH_NO_PROGRESS", "1"),
                ],
                None,
            )
        });
        wait_for(&net, job, "watching", 1, Duration::from_secs(240));
        let out = net.exec_user(1, &["sh", "-c", "kill -INT $(cat ~/supd.pid)"], &[], None);
        assert!(out.status.success(), "{}", describe(&out));
        launched.join().unwrap()
    });
    // Interrupted, as every launch is (130), saying the job keeps running.
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    assert!(
        support::stderr(&out).contains("it keeps running"),
        "{}",
        describe(&out)
    );
    assert_eq!(kinds(&events(&net, job)), ["watching", "stopped"]);
    for i in 1..=2 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        assert_eq!(inspect(&net, i, &name, "{{.State.Status}}"), "running");
    }
    assert!(token(&net).contains("data:"), "no token after Ctrl-C");

    // `stop JOB` while a supervisor watches: it sees the containers gone and ends (exit 0),
    // restarting nothing.
    let out = std::thread::scope(|s| {
        let sup = spawn_supervise(s, &net, job, &["--probe-every", "1"]);
        wait_for(&net, job, "watching", 2, Duration::from_secs(60));
        let out = net.spark_launch(1, &["stop", job, "--hosts", &hosts(&net)]);
        assert!(out.status.success(), "{}", describe(&out));
        sup.join().unwrap()
    });
    assert!(out.status.success(), "{}", describe(&out));
    let log = kinds(&events(&net, job));
    assert_eq!(log.last().map(String::as_str), Some("gone"), "{log:?}");
    assert!(!log.contains(&"restart".to_string()), "{log:?}");
    remove_job(&net, job);
}

#[test]
fn a_supervisor_connects_again_to_a_worker_whose_ssh_dropped_and_restarts_the_crashed_group_once_it_answers()
 {
    let Serving {
        net,
        hub,
        image,
        rt: _rt,
    } = two_nodes_serving("w", MODEL);
    let job = "supr";
    launch(&net, &hub, &image, job);
    // The launch kept its --hosts entries, and the unit for the job reaches those hosts (no
    // cluster file names them).
    let out = net.exec_user(
        1,
        &[
            net.binary().to_str().unwrap(),
            "export",
            "systemd",
            job,
            "-o",
            "-",
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let unit = stdout(&out);
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart=:"))
        .unwrap_or_default();
    assert!(
        exec.contains(&format!(" supervise {job} --hosts {}=", net.hostname(1))),
        "{unit}"
    );
    assert!(exec.contains(&format!(",{}=", net.hostname(2))), "{unit}");
    assert!(!exec.contains("--cluster"), "{unit}");
    let worker_node = net.hostname(2);
    let worker = format!("sl-{job}-{worker_node}");
    let policy = [
        "--probe-every",
        "2",
        "--probe-timeout",
        "4",
        "--backoff",
        "2",
    ];
    let out = std::thread::scope(|s| {
        let sup = spawn_supervise(s, &net, job, &policy);
        let _guard = EndOnPanic(&net);
        wait_for(&net, job, "watching", 1, Duration::from_secs(60));
        // The worker's sshd goes, and with it the connection the supervisor holds: named once,
        // by the SSH connection.
        net.stop(2, "sshd-all");
        let log = wait_for(&net, job, "connection_lost", 1, Duration::from_secs(40));
        let lost = log.iter().find(|e| e["kind"] == "connection_lost").unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            lost.starts_with(&format!(
                "{worker_node}: no answer through the SSH connection ("
            )),
            "{lost}"
        );
        assert!(!lost.to_lowercase().contains("hyper"), "{lost}");
        // The worker crashes meanwhile: the probes on the head find no token, and the restart
        // that is due waits for the worker to answer (it could only fail, spending restarts).
        let out = docker(&net, 2, &["kill", &worker]);
        assert!(out.status.success(), "docker kill: {}", describe(&out));
        // (The stand-in's head ends when its worker's connection closes: a stopped rank.)
        let log = wait_for(&net, job, "container_stopped", 1, Duration::from_secs(60));
        std::thread::sleep(Duration::from_secs(8));
        let k = kinds(&events(&net, job));
        assert_eq!(
            k.iter().filter(|k| *k == "connection_lost").count(),
            1,
            "{k:?}"
        );
        assert!(!k.contains(&"restart".to_string()), "{k:?} ({log:#?})");
        // sshd is back: the supervisor connects again, says so once, and restarts the group
        // through the new connection.
        net.start(2, "sshd");
        wait_for(&net, job, "connected_again", 1, Duration::from_secs(40));
        let log = wait_for(&net, job, "ready", 1, Duration::from_secs(180));
        let k = kinds(&log);
        assert!(!k.contains(&"restart_failed".to_string()), "{log:#?}");
        assert!(!k.contains(&"gave_up".to_string()), "{log:#?}");
        let at = |kind: &str| k.iter().position(|x| x == kind).unwrap();
        assert!(at("connected_again") < at("restart"), "{k:?}");
        eprintln!("the event log:\n{log:#?}");
        assert_eq!(inspect(&net, 2, &worker, "{{.State.Status}}"), "running");
        assert!(token(&net).contains("data:"), "no token after the restart");
        let out = net.exec_user(1, &["sh", "-c", "kill -INT $(cat ~/sup.pid)"], &[], None);
        assert!(out.status.success(), "{}", describe(&out));
        sup.join().unwrap()
    });
    assert!(out.status.success(), "{}", describe(&out));
    let err = support::stderr(&out);
    assert!(!err.to_lowercase().contains("hyper"), "{err}");
    assert_eq!(
        err.matches("no answer through the SSH connection").count(),
        1,
        "{err}"
    );
    remove_job(&net, job);
}

/// Ends the supervisor in the head when a test fails while it runs (else the test would wait
/// for it forever).
struct EndOnPanic<'a>(&'a SimNet);

impl Drop for EndOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self
                .0
                .exec_user(1, &["sh", "-c", "kill -KILL $(cat ~/sup.pid)"], &[], None);
        }
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `2026-11-26T18:02:03.456Z` → milliseconds since the epoch.
fn at_ms(at: &str) -> i64 {
    let (date, time) = at.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms: i64 = format!("{frac:0<3}")[..3].parse().unwrap();
    ((days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) * 1000) + ms
}

/// `bench/wedge.sh`: a steady load on a supervised 2-node job (the supervisor's default
/// policy), the worker paused, and three lines: how long until the wedge was named, until the
/// job served again, and how many requests failed.
#[test]
#[ignore = "a benchmark: bench/wedge.sh runs it"]
fn wedge_bench() {
    let Serving {
        net,
        hub,
        image,
        rt: _rt,
    } = two_nodes_serving("b", MODEL);
    let job = "wedgebench";
    launch(&net, &hub, &image, job);
    let worker = format!("sl-{job}-{}", net.hostname(2));
    let h = hosts(&net);
    let (soak, paused_at, in_flight) = std::thread::scope(|s| {
        let sup = spawn_supervise(s, &net, job, &[]);
        wait_for(&net, job, "watching", 1, Duration::from_secs(60));
        let load = s.spawn(|| {
            net.spark_launch(
                1,
                &[
                    "bench",
                    job,
                    "--hosts",
                    &h,
                    "--soak",
                    "120s",
                    "--window",
                    "2",
                    "--stall-after",
                    "4",
                    "--concurrency",
                    "4",
                    "--prompt-tokens",
                    "8",
                    "--output-tokens",
                    "32",
                    "--json",
                ],
            )
        });
        std::thread::sleep(Duration::from_secs(15));
        let out = docker(&net, 2, &["pause", &worker]);
        assert!(out.status.success(), "docker pause: {}", describe(&out));
        let paused_at = wall_ms();
        wait_for(&net, job, "ready", 1, Duration::from_secs(240));
        let soak = load.join().unwrap();
        let out = net.exec_user(1, &["sh", "-c", "kill -INT $(cat ~/sup.pid)"], &[], None);
        assert!(out.status.success(), "{}", describe(&out));
        let _ = sup.join();
        (soak, paused_at, 4)
    });
    let all = events(&net, job);
    let first = |kind: &str| {
        all.iter()
            .find(|e| e["kind"] == kind)
            .and_then(|e| e["at"].as_str())
            .map(at_ms)
            .unwrap_or_else(|| panic!("no {kind} in {:#?}", kinds(&all)))
    };
    let detected = (first("wedge") - paused_at) as f64 / 1000.0;
    let ready = (first("ready") - paused_at) as f64 / 1000.0;
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&soak)).unwrap_or_else(|e| panic!("{e}: {}", describe(&soak)));
    let report = &v["report"]["soak"];
    let shown = net.spark_launch(1, &["logs", job, "--events", "--hosts", &hosts(&net)]);
    println!("events:\n{}", stdout(&shown));
    println!(
        "soak: {} requests, {} failed, {} cut at the end, stalls {}",
        report["requests"], report["failed"], report["unfinished"], report["stalls"]
    );
    println!("streams in flight at the wedge {in_flight}");
    println!(
        "refused while restarting and sent again {}",
        report["refused_and_resent"]
    );
    println!("detected after {detected:.1} s");
    println!("serving again after {ready:.1} s");
    println!("requests failed {}", report["failed"]);
    remove_job(&net, job);
}
