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

use std::process::Output;

use hub_standin::tiny_repo;
use sim_serving::{Serving, WithRay, hosts, remove_job};
use support::{describe, stderr, stdout};

const MODEL: &str = "spark-test/tiny";

fn cluster() -> Serving {
    Serving::up(1, "q", WithRay::No, vec![tiny_repo(MODEL, 50_000)])
}

/// `spark-launch vllm MODEL --job JOB -d …` on the one node, with the stand-in's `extra`.
fn start(c: &Serving, job: &str, flags: &[&str], extra: &[&str]) -> Output {
    let mut args: Vec<&str> = vec!["vllm", MODEL, "--job", job, "-d", "--timeout", "120"];
    args.extend_from_slice(flags);
    c.launch(&args, extra)
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
    c.gone("slsoup");

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
    c.gone("slthink");

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
