//! Memory on simulated nodes (tests/harness/simnet `sshd,dockerd`, the stand-in serving image
//! of tests/standin): a 2-node stand-in vLLM job started with `spark-launch vllm --tp 2 -d`
//! and a cap on every container (`--memory-limit`). The worker rank, told to allocate far past
//! its cap (`--fake-eat-mib`, after the job serves), is killed inside its container
//! (`OOMKilled`), while its node still answers SSH and the head's rank stays up; `status`
//! shows the cap and the kill. Then the supervisor, given a floor above what the nodes have
//! (`--memory-floor`), stops the job at its first look (event `memory_floor`) and exits 1
//! instead of waiting for the host to hang.

mod hub_standin;
mod sim_serving;
mod support;

use std::time::{Duration, Instant};

use sim_serving::{Serving, docker, hosts, remove_job, two_nodes_serving};
use support::{SimNet, describe, stderr, stdout};

const MODEL: &str = "spark-test/tiny";

/// `docker inspect -f FORMAT NAME` on node `node`, trimmed.
fn inspect(net: &SimNet, node: usize, name: &str, format: &str) -> String {
    let out = docker(net, node, &["inspect", "-f", format, name]);
    assert!(out.status.success(), "inspect {name}: {}", describe(&out));
    stdout(&out).trim().to_string()
}

/// `vllm MODEL --tp 2 --job JOB -d --memory-limit LIMIT` on the stand-in, then `extra` for
/// the engine. `--no-check`: a rank that eats its cap seconds after the first token would
/// otherwise be killed while readiness asks the model its questions, and the launch itself
/// would fail; what these tests prove comes after the start.
fn launch(c: &Serving, job: &str, limit: &str, extra: &[&str]) {
    let out = c.launch(
        &[
            "vllm",
            MODEL,
            "--tp",
            "2",
            "--job",
            job,
            "-d",
            "--no-check",
            "--timeout",
            "180",
            "--memory-limit",
            limit,
        ],
        extra,
    );
    assert!(out.status.success(), "{}", describe(&out));
}

#[test]
fn a_rank_that_eats_past_its_cap_is_killed_there_while_its_node_answers_ssh_and_the_supervisor_stops_a_job_below_the_floor()
 {
    let c = two_nodes_serving("m", MODEL);
    let net = &c.net;
    let job = "eat";
    let worker = format!("sl-{job}-{}", net.hostname(2));
    let head = format!("sl-{job}-{}", net.hostname(1));
    // 256 MiB for each rank; the worker allocates 1 GiB 10 s after it starts (the job serves
    // by then: the launch returns once a token came back).
    launch(
        &c,
        job,
        "256M",
        &[
            "--fake-eat-mib",
            "1024",
            "--fake-eat-rank",
            "1",
            "--fake-eat-after-s",
            "10",
        ],
    );
    assert_eq!(
        inspect(net, 2, &worker, "{{.HostConfig.Memory}}"),
        (256u64 << 20).to_string()
    );
    let t = Instant::now();
    loop {
        if inspect(net, 2, &worker, "{{.State.OOMKilled}}") == "true" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the worker was not killed at its cap: {}",
            inspect(net, 2, &worker, "{{json .State}}")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(inspect(net, 2, &worker, "{{.State.Status}}"), "exited");
    assert_eq!(inspect(net, 2, &worker, "{{.State.ExitCode}}"), "137");
    // The node itself is fine: it answers SSH from the head, and the head's rank runs on.
    let alias = format!("HostKeyAlias={}", net.hostname(2));
    let ssh = net.exec_user(
        1,
        &[
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            &alias,
            &net.fabric_addr(2).to_string(),
            "true",
        ],
        &[],
        None,
    );
    assert!(ssh.status.success(), "ssh to the node: {}", describe(&ssh));
    assert_eq!(inspect(net, 1, &head, "{{.State.Status}}"), "running");
    assert_eq!(inspect(net, 1, &head, "{{.State.OOMKilled}}"), "false");
    // `status` shows the cap and the kill.
    let out = net.spark_launch(1, &["status", job, "--hosts", &hosts(net)]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains("exited (137, killed for memory)"),
        "{}",
        describe(&out)
    );
    assert!(text.contains("0.2 GiB"), "{}", describe(&out));
    let out = net.spark_launch(1, &["status", job, "--json", "--hosts", &hosts(net)]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rows = v["jobs"].as_array().unwrap();
    assert!(
        rows.iter().any(|r| r["name"] == worker.as_str()
            && r["oom_killed"] == true
            && r["memory_limit"] == 256u64 << 20),
        "{v}"
    );
    remove_job(net, job);

    // The supervisor's floor: above what these nodes have, so its first look stops the job.
    let job = "floor";
    launch(&c, job, "1G", &[]);
    let out = net.spark_launch(
        1,
        &[
            "supervise",
            job,
            "--memory-floor",
            "100000G",
            "--hosts",
            &hosts(net),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains("memory below the floor"),
        "{}",
        describe(&out)
    );
    let events = net.exec_user(
        1,
        &[
            "sh",
            "-c",
            &format!("cat ~/.local/state/spark-launch/records/{job}/events.jsonl"),
        ],
        &[],
        None,
    );
    let kinds: Vec<String> = stdout(&events)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["watching", "memory_floor"], "{}", stdout(&events));
    // Every rank stopped (kept, for its log), none restarted.
    for i in 1..=2 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        assert_eq!(inspect(net, i, &name, "{{.State.Status}}"), "exited");
    }
    remove_job(net, job);
}
