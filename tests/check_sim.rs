//! Readiness asks the questions of `spark-launch check` after the first token, on a simulated
//! node (tests/harness/simnet `sshd,dockerd`) running the serving stand-in (tests/standin/vllm)
//! through the whole launch: a stand-in that answers soup (`--fake-soup`) fails the start with
//! its answer as the evidence and leaves nothing behind, one that thinks forever
//! (`--fake-think-forever`) fails on termination, one that answers right starts and
//! `spark-launch check JOB` finds it by name and passes; `--no-check` starts the soup anyway
//! and says the answers were not checked.

mod hub_standin;
mod sim_serving;
mod support;

use std::path::PathBuf;
use std::process::Output;

use hub_standin::{HubStandin, tiny_repo};
use sim_serving::{WithRay, containers, hosts, remove_job, standin_on_every_node, trust_all};
use support::{SimNet, describe, stderr, stdout};

const MODEL: &str = "spark-test/tiny";
const STANDIN_TAG: &str = "standin-noray:test";

struct Cluster {
    net: SimNet,
    hub: HubStandin,
    image: String,
    _rt: tokio::runtime::Runtime,
}

fn cluster() -> Cluster {
    let net = SimNet::builder(1).services("sshd,dockerd").tag("q").up();
    trust_all(&net);
    let image = format!("{}{STANDIN_TAG}", net.prefix());
    standin_on_every_node(&net, &image, WithRay::No);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(
        vec![tiny_repo(MODEL, 50_000)],
        &netns,
    ));
    Cluster {
        net,
        hub,
        image,
        _rt: rt,
    }
}

/// `spark-launch vllm MODEL --job JOB -d …` on the one node, with the stand-in's `extra`.
fn start(c: &Cluster, job: &str, flags: &[&str], extra: &[&str]) -> Output {
    let h = hosts(&c.net);
    let mut all: Vec<&str> = vec!["vllm", MODEL, "--job", job, "-d", "--timeout", "120"];
    all.extend_from_slice(flags);
    all.extend([
        "--hosts",
        &h,
        "--image",
        &c.image,
        "--gpus",
        "none",
        "--ulimit",
        "memlock=8388608",
        "--ulimit",
        "nofile=16384",
    ]);
    if !extra.is_empty() {
        all.push("--");
        all.extend(extra);
    }
    c.net
        .spark_launch_with(1, &all, &[("HF_ENDPOINT", c.hub.url.as_str())], None)
}

fn gone(c: &Cluster, job: &str) {
    let left = containers(&c.net, 1, &format!("sl-{job}-"));
    assert!(left.is_empty(), "n1 still has {left:?}");
}

#[test]
fn readiness_fails_a_start_that_answers_soup_or_thinks_forever_and_passes_a_right_one() {
    let c = cluster();

    let out = start(&c, "slsoup", &[], &["--fake-soup"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("does not answer right"), "{err}");
    assert!(err.contains("soup (prose): the answer is soup"), "{err}");
    assert!(err.contains("it answered: sky blue blue sky"), "{err}");
    assert!(err.contains("--no-check starts it anyway"), "{err}");
    gone(&c, "slsoup");

    // Fast tokens: thinking until the token limit (2048) takes a second, not a minute.
    let out = start(
        &c,
        "slthink",
        &[],
        &["--fake-think-forever", "--fake-tokens-per-s", "5000"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "termination: still thinking at the token limit (2048): the think section never closed"
        ),
        "{err}"
    );
    gone(&c, "slthink");

    let out = start(&c, "slright", &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains("answers right (5 ok, 1 skipped)"), "{all}");
    // The same questions by job name, found by its labels as bench finds it.
    let h = hosts(&c.net);
    let out = c
        .net
        .spark_launch_with(1, &["check", "slright", "--hosts", &h, "--json"], &[], None);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["checks"][0]["check"], "arithmetic", "{v}");
    assert_eq!(v["checks"][0]["mark"], "ok", "{v}");
    remove_job(&c.net, "slright");

    let out = start(&c, "slunchecked", &["--no-check"], &["--fake-soup"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains("answers not checked (--no-check)"), "{all}");
    remove_job(&c.net, "slunchecked");
}
