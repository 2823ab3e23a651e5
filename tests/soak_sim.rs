//! A wedge, as users meet it on two Sparks, found by `bench --soak` on simulated nodes: a
//! 2-node stand-in vLLM job (tests/standin/vllm: every token the head generates is one round
//! trip to the worker rank over the fabric, as a collective is) started with `spark-launch
//! vllm --tp 2` on nodes that each run their own dockerd (tests/harness/simnet), a soak on it
//! by the job's name, and the worker's container frozen with `docker pause` part-way. The head
//! keeps answering `/health` 200 and its `/metrics` still lists the requests running, while no
//! token comes: the soak names the stall with its span and exits 1; once the worker is
//! unpaused, tokens flow again. The job is started with `--speculative-config` passed through,
//! so `/metrics` also carries vLLM's speculative-decoding counters.

mod hub_standin;
mod sim_serving;
mod support;

use std::time::{Duration, Instant};

use sim_serving::{Serving, docker, hosts, remove_job, two_nodes_serving};
use support::{SimNet, describe, stdout};

const MODEL: &str = "spark-test/tiny";

/// `curl` inside node 1: the HTTP status and the body.
fn curl(net: &SimNet, path: &str) -> (String, String) {
    let out = net.exec_user(
        1,
        &[
            "curl",
            "-s",
            "-m",
            "5",
            "-w",
            "\n%{http_code}",
            &format!("http://127.0.0.1:8000{path}"),
        ],
        &[],
        None,
    );
    let text = stdout(&out);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    (code.trim().to_string(), body.to_string())
}

/// A gauge's value on a Prometheus page (`name{labels} value`).
fn gauge(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_paused_worker_wedges_generation_while_health_answers_and_the_soak_names_the_stall() {
    let Serving {
        net,
        hub,
        image,
        rt: _rt,
    } = two_nodes_serving("w", MODEL);
    let job = "wedge";
    let h = hosts(&net);
    let out = net.spark_launch_with(
        1,
        &[
            "vllm",
            MODEL,
            "--tp",
            "2",
            "--job",
            job,
            "-d",
            "--timeout",
            "180",
            "--hosts",
            &h,
            "--image",
            &image,
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
            "--",
            "--speculative-config",
            r#"{"method":"ngram","num_speculative_tokens":3}"#,
        ],
        &[("HF_ENDPOINT", hub.url.as_str())],
        None,
    );
    assert!(out.status.success(), "{}", describe(&out));
    // The stand-in's Prometheus page, with vLLM's names.
    let (code, page) = curl(&net, "/metrics");
    assert_eq!(code, "200", "{page}");
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ] {
        assert!(
            page.contains(&format!("{name}{{engine=\"0\",model_name=\"{MODEL}\"}}")),
            "no {name} in:\n{page}"
        );
    }
    // `status --watch --json JOB`: one sample of the live view, with the stand-in's metrics
    // read on the head, both nodes' memory from /proc/meminfo, no GPU (no nvidia-smi here:
    // not recorded, not zero) and the job's parts.
    let out = net.spark_launch(1, &["status", "--watch", "--json", job, "--hosts", &h]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["job"], job, "{v}");
    assert_eq!(v["engine"]["url"], "http://127.0.0.1:8000/metrics", "{v}");
    for k in ["running", "waiting", "kv_cache", "generation_tokens_total"] {
        assert!(v["engine"][k].is_number(), "no {k}: {v}");
    }
    assert!(
        v["engine"]["generation_tokens_per_s"].is_number(),
        "no counter delta: {v}"
    );
    // The token probe ran 4 tokens through the speculative counters at start.
    assert!(v["engine"]["spec_acceptance"].is_number(), "{v}");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{v}");
    for n in nodes {
        assert!(n["memory"]["total_bytes"].as_u64().unwrap() > 0, "{v}");
        assert!(n["gpus"].is_null(), "{v}");
    }
    let parts = v["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{v}");
    assert!(parts.iter().all(|p| p["state"] == "running"), "{v}");
    // The worker's container is frozen ~4-6 s into the soak, for 12 s.
    let worker = format!("sl-{job}-{}", net.hostname(2));
    let pause_for = Duration::from_secs(12);
    let watched = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            std::thread::sleep(Duration::from_secs(8));
            let out = docker(&net, 2, &["pause", &worker]);
            assert!(out.status.success(), "docker pause: {}", describe(&out));
            let paused_at = Instant::now();
            std::thread::sleep(Duration::from_secs(6));
            let health = curl(&net, "/health");
            let (_, page) = curl(&net, "/metrics");
            std::thread::sleep(pause_for.saturating_sub(paused_at.elapsed()));
            let out = docker(&net, 2, &["unpause", &worker]);
            assert!(out.status.success(), "docker unpause: {}", describe(&out));
            (health, page)
        });
        let out = net.spark_launch(
            1,
            &[
                "bench",
                job,
                "--hosts",
                &h,
                "--soak",
                "32s",
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
        );
        (out, watcher.join().unwrap())
    });
    let (out, ((health_code, _), paused_page)) = watched;
    // Frozen, the worker answered nothing; the head's /health did, and it knew 4 were running.
    assert_eq!(health_code, "200", "/health while the worker was paused");
    assert_eq!(
        gauge(&paused_page, "vllm:num_requests_running"),
        Some(4.0),
        "{paused_page}"
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["report"]["job"], job);
    let soak = &v["report"]["soak"];
    let stalls = soak["stalls"].as_array().unwrap();
    assert_eq!(stalls.len(), 1, "{soak}");
    let duration = stalls[0]["duration_s"].as_f64().unwrap();
    assert!((9.0..15.0).contains(&duration), "{}", stalls[0]);
    assert_eq!(stalls[0]["in_flight"], 4, "{}", stalls[0]);
    assert_eq!(stalls[0]["ongoing_at_end"], false, "{}", stalls[0]);
    assert_eq!(soak["failed"], 0, "{soak}");
    // Before and after the wedge the job generated: the first and the last windows have tokens.
    let windows = soak["windows"].as_array().unwrap();
    for w in [&windows[0], &windows[windows.len() - 1]] {
        assert!(w["tokens"].as_u64().unwrap() > 0, "{w}");
    }
    // Speculative decoding was configured (passed through to the engine): its counters are
    // there, per draft position, and they counted.
    let (_, page) = curl(&net, "/metrics");
    for name in [
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ] {
        assert!(
            gauge(&page, name).is_some_and(|v| v > 0.0),
            "{name} in:\n{page}"
        );
    }
    assert!(
        page.contains(&format!(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",model_name=\"{MODEL}\",position=\"2\"}}"
        )),
        "{page}"
    );
    remove_job(&net, job);
}
