//! The supervisor asks the questions of `spark-launch check` after every restart: a 2-node
//! stand-in vLLM job (tests/standin/vllm) that answers right at its first start and soup once
//! its containers start again (`--fake-soup-after-restart`), supervised in the head; its worker
//! is killed, the supervisor restarts the whole group, and the group that comes back answering
//! soup is not healthy: the restart fails with an event that says so and shows the answer.

mod hub_standin;
mod sim_serving;
mod support;

use std::time::{Duration, Instant};

use sim_serving::{docker, hosts, remove_job, two_nodes_serving};
use support::{describe, stdout};

const MODEL: &str = "spark-test/tiny";

#[test]
fn a_group_that_comes_back_answering_soup_is_a_failed_restart_with_the_evidence() {
    let c = two_nodes_serving("k", MODEL);
    let net = &c.net;
    let job = "supsoup";
    let h = hosts(net);
    let out = c.launch(
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
        ],
        &["--fake-soup-after-restart"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let worker = format!("sl-{job}-{}", net.hostname(2));
    let events = || -> Vec<serde_json::Value> {
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
    };
    let wait_for = |kind: &str| -> Vec<serde_json::Value> {
        let t = Instant::now();
        loop {
            let all = events();
            if all.iter().any(|e| e["kind"] == kind) {
                return all;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "no {kind} event; the events: {all:#?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    std::thread::scope(|s| {
        let sup = s.spawn(|| {
            let script = format!(
                "echo $$ > ~/sup.pid; exec {} supervise {job} --hosts {h} --probe-every 2 --probe-timeout 4 --backoff 2",
                net.binary().display(),
            );
            net.exec_user(
                1,
                &["bash", "-c", &script],
                &[("SPARK_LAUNCH_NO_PROGRESS", "1")],
                None,
            )
        });
        // Ctrl-C for the supervisor however this ends, a failed assertion included (the
        // scope waits for it).
        struct Interrupt<'a>(&'a support::SimNet);
        impl Drop for Interrupt<'_> {
            fn drop(&mut self) {
                let _ = self
                    .0
                    .exec_user(1, &["sh", "-c", "kill -INT $(cat ~/sup.pid)"], &[], None);
            }
        }
        let _interrupt = Interrupt(net);
        wait_for("watching");
        let out = docker(net, 2, &["kill", &worker]);
        assert!(out.status.success(), "docker kill: {}", describe(&out));
        let log = wait_for("restart_failed");
        let failed = log.iter().find(|e| e["kind"] == "restart_failed").unwrap();
        let detail = failed["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("does not answer right"), "{failed}");
        assert!(
            detail.contains("soup (prose): the answer is soup") && detail.contains("sky blue"),
            "{failed}"
        );
        assert!(
            !log.iter().any(|e| e["kind"] == "ready"),
            "a group answering soup was counted ready: {log:#?}"
        );
        drop(_interrupt);
        let _ = sup.join();
    });
    remove_job(net, job);
}
