//! `spark-launch vllm` end to end on simulated nodes that each run their own dockerd
//! (tests/harness/simnet `sshd,dockerd`), with the stand-in serving image (tests/standin: a
//! fake `vllm` that checks its arguments and environment, does a real TCP rendezvous across the
//! nodes and serves /health and /v1/models; real Ray from PyPI, pinned in
//! tests/standin/ray-requirements.txt). spark-launch runs inside the head as
//! the test user, as on a real cluster: every step of the plan runs for real — ports,
//! rendezvous reachability, image push, model staging over SSH from a stand-in Hub, start,
//! readiness, stop. No GPUs here: `--gpus none`, and limits this machine allows.

mod hub_standin;
mod sim_serving;
mod support;

use std::path::PathBuf;
use std::process::Output;

use hub_standin::{HubStandin, tiny_repo};
use sim_serving::{
    STANDIN_RAY_TAG, Serving, WithRay, container_log, containers, docker_socket, hosts, remove_job,
    shaped_repo, standin_on_every_node, trtllm_standin_on_every_node, trust_all,
};
use support::{SimNet, describe, stderr, stdout};

const MODEL: &str = "spark-test/tiny";

fn cluster(n: usize, tag: &str, ray: WithRay) -> Serving {
    cluster_with(n, tag, ray, Vec::new())
}

/// [`cluster`] whose Hub stand-in also serves `more` repos.
fn cluster_with(n: usize, tag: &str, ray: WithRay, more: Vec<hub_standin::FakeRepo>) -> Serving {
    let mut repos = vec![shaped_repo(MODEL)];
    repos.extend(more);
    Serving::up(n, tag, ray, repos)
}

#[test]
fn vllm_native_serves_across_two_nodes_and_bench_measures_it_by_job_name() {
    let c = cluster(2, "v", WithRay::No);
    let job = "sl7native";
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
        &["--max-model-len", "4096"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let result = stdout(&out);
    let head_mgmt = c.net.mgmt_addr(1);
    assert!(
        result.contains(&format!("ready: http://{head_mgmt}:8000/v1 serves {MODEL}")),
        "{result}"
    );
    assert!(result.contains("curl http://"), "{result}");
    // Ready means a token came back; each stage of the start-up is timed and printed.
    let startup = result
        .lines()
        .find(|l| l.starts_with("start-up: "))
        .unwrap_or_else(|| panic!("no start-up line in:\n{result}"));
    for stage in [
        "containers started ",
        "port open ",
        "HTTP ready ",
        "first token ",
    ] {
        let after = startup.split(stage).nth(1).unwrap_or("");
        assert!(
            after.starts_with(|c: char| c.is_ascii_digit()),
            "{stage}not timed: {startup}"
        );
    }
    let progress = stderr(&out);
    for step in [
        "✓ Check ports are free",
        "✓ Check",
        "✓ Ensure image",
        "✓ Stage spark-test/tiny",
        "✓ Start on",
        "✓ Wait until http://127.0.0.1:8000 serves",
    ] {
        assert!(progress.contains(step), "no `{step}` in:\n{progress}");
    }
    // The API really answers on the head, and the worker joined the rendezvous as rank 1.
    let models = c.net.exec_user(
        1,
        &["curl", "-s", "http://127.0.0.1:8000/v1/models"],
        &[],
        None,
    );
    assert!(stdout(&models).contains(MODEL), "{}", describe(&models));
    // `status JOB` shows the timings kept at launch (text and JSON).
    let h = hosts(&c.net);
    let status = c.net.spark_launch(1, &["status", job, "--hosts", &h]);
    assert!(status.status.success(), "{}", describe(&status));
    assert!(stdout(&status).contains(startup), "{}", describe(&status));
    let status = c
        .net
        .spark_launch(1, &["status", job, "--hosts", &h, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(v["startup"]["job"], job, "{v}");
    let s = &v["startup"];
    let t = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("no {k}: {s}"));
    assert!(t("containers_started_s") <= t("port_open_s"), "{s}");
    assert!(t("port_open_s") <= t("http_ready_s"), "{s}");
    assert!(t("http_ready_s") <= t("first_token_s"), "{s}");
    let text = container_log(&c.net, 1, &format!("sl-{job}-{}", c.net.hostname(1)));
    assert!(text.contains("rank 1 joined from 169.254.100.2"), "{text}");
    assert!(text.contains("extra=['--max-model-len', '4096']"), "{text}");
    // `bench JOB` finds the job's endpoint by its labels and measures the stand-in's known
    // rate: first token after 100 ms, then one every 20 ms per stream (up to 8 at once).
    let out = c.net.spark_launch(
        1,
        &[
            "bench",
            job,
            "--hosts",
            &h,
            "--concurrency",
            "1,4",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "16",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["report"]["job"], job);
    assert_eq!(v["report"]["url"], "http://127.0.0.1:8000/v1");
    assert_eq!(v["report"]["model"], MODEL);
    let per_request = 0.1 + 15.0 * 0.02;
    for l in v["report"]["levels"].as_array().unwrap() {
        let conc = l["concurrency"].as_f64().unwrap();
        let tps = l["output_tokens_per_s"].as_f64().unwrap();
        let known = conc * 16.0 / per_request;
        assert!(
            (tps - known).abs() <= known * 0.2,
            "c={conc}: {tps} vs {known}: {l}"
        );
        let ttft = l["ttft_ms"]["p50"].as_f64().unwrap();
        assert!((100.0..140.0).contains(&ttft), "c={conc}: {l}");
        let itl = l["itl_ms"]["p50"].as_f64().unwrap();
        assert!((18.0..26.0).contains(&itl), "c={conc}: {l}");
    }
    assert!(
        v["saved"].as_str().unwrap().starts_with(&format!(
            "/home/{}/.local/state/spark-launch/bench/{job}-",
            support::USER
        )),
        "{v}"
    );
    remove_job(&c.net, job);
}

#[test]
fn vllm_on_ray_starts_once_ray_lists_both_nodes_at_their_fabric_addresses() {
    let c = cluster(2, "r", WithRay::Yes);
    let job = "sl7ray";
    let out = c.launch(
        &[
            "vllm",
            MODEL,
            "--tp",
            "2",
            "--ray",
            "--job",
            job,
            "-d",
            "--timeout",
            "240",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let progress = stderr(&out);
    assert!(progress.contains("✓ Wait for 2 Ray nodes on"), "{progress}");
    let head = container_log(&c.net, 1, &format!("sl-{job}-{}", c.net.hostname(1)));
    let worker = container_log(&c.net, 2, &format!("sl-{job}-{}", c.net.hostname(2)));
    // Real Ray started on both nodes, each at its own fabric address ...
    assert!(head.contains("Ray runtime started."), "{head}");
    assert!(worker.contains("Ray runtime started."), "{worker}");
    // ... and the head script saw both in `ray.nodes()` with their GPU before starting vLLM.
    assert!(
        head.contains("spark-launch: ray: 2/2 nodes: 169.254.100.1 (1 GPU), 169.254.100.2 (1 GPU)"),
        "{head}"
    );
    assert!(
        head.contains("spark-launch: ray: cluster complete"),
        "{head}"
    );
    assert!(
        head.contains("Ray cluster has 2 GPUs for world size 2"),
        "{head}"
    );
    remove_job(&c.net, job);
}

/// The Ray-IP check (`RAY_QUERY_PY` read by `ray_state`, what `WaitRay` runs) against real
/// Ray: a worker that joins from its management address instead of its fabric address is
/// named, with the address Ray lists it under.
#[test]
fn ray_names_a_worker_that_joined_from_another_interface() {
    use spark_launch::node::NodeName;
    use spark_launch::plan::RayMember;
    use spark_launch::workload::engines::ray::{QUERY_PY as RAY_QUERY_PY, RayState, ray_state};
    let net = SimNet::builder(2).services("sshd,dockerd").tag("i").up();
    let image = format!("{}{STANDIN_RAY_TAG}", net.prefix());
    standin_on_every_node(&net, &image, WithRay::Yes);
    let docker = |i: usize, args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(["-H", &format!("unix://{}", net.docker_socket(i).display())])
            .args(args)
            .output()
            .expect("docker");
        assert!(out.status.success(), "docker {args:?}: {}", describe(&out));
        stdout(&out)
    };
    let (head_ip, wrong_ip) = (net.fabric_addr(1).to_string(), net.mgmt_addr(2).to_string());
    // Retried: on a crowded machine Ray's own start-up deadlines can pass (a real cluster
    // has the cores to spare; this test is about which address Ray lists, not start-up).
    let head_script = format!(
        "until ray start --head --port=6379 --node-ip-address={head_ip} --num-gpus=1 --include-dashboard=false --disable-usage-stats; do ray stop --force; sleep 2; done; sleep infinity"
    );
    docker(
        1,
        &[
            "run",
            "-d",
            "--name",
            "raytest-head",
            "--network",
            "host",
            &image,
            "bash",
            "-c",
            &head_script,
        ],
    );
    let expect = [
        RayMember {
            node: NodeName::new(net.hostname(1)).unwrap(),
            ip: net.fabric_addr(1),
            gpus: 1,
        },
        RayMember {
            node: NodeName::new(net.hostname(2)).unwrap(),
            ip: net.fabric_addr(2),
            gpus: 1,
        },
    ];
    // What WaitRay sees: the query run in the head's container, read by ray_state. Polled
    // until `done` says so (every 2 s, at most 180 s).
    let wait = |what: &str, done: &dyn Fn(&RayState) -> bool| -> RayState {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
        loop {
            let out = std::process::Command::new("docker")
                .args(["-H", &format!("unix://{}", net.docker_socket(1).display())])
                .args(["exec", "raytest-head", "python3", "-c", RAY_QUERY_PY])
                .output()
                .expect("docker exec");
            if let Some(s) = out
                .status
                .success()
                .then(|| ray_state(&expect, &stdout(&out)).ok())
                .flatten()
                && done(&s)
            {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {}\nhead log: {}\nworker log: {}",
                describe(&out),
                container_log(&net, 1, "raytest-head"),
                container_log(&net, 2, "raytest-worker")
            );
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
    };
    // The head first (the worker then joins at once instead of waiting out Ray's timeouts).
    wait("the Ray head never answered", &|_| true);
    let worker_script = format!(
        "until ray start --block --address={head_ip}:6379 --node-ip-address={wrong_ip} --num-gpus=1 --disable-usage-stats; do ray stop --force; sleep 2; done"
    );
    docker(
        2,
        &[
            "run",
            "-d",
            "--name",
            "raytest-worker",
            "--network",
            "host",
            &image,
            "bash",
            "-c",
            &worker_script,
        ],
    );
    let state = wait("Ray never listed the worker", &|s| {
        s.describe().contains("Ray also lists")
    });
    assert_eq!(
        state,
        RayState::Incomplete {
            missing: vec![format!("{} at {}", net.hostname(2), net.fabric_addr(2))],
            strangers: vec![wrong_ip.clone()],
        }
    );
    assert!(
        state.describe().contains(&format!(
            "Ray also lists {wrong_ip} — a node that joined from another interface"
        )),
        "{}",
        state.describe()
    );
    for (i, name) in [(1, "raytest-head"), (2, "raytest-worker")] {
        let _ = std::process::Command::new("docker")
            .args(["-H", &format!("unix://{}", net.docker_socket(i).display())])
            .args(["rm", "-f", name])
            .output();
    }
}

#[test]
fn a_server_that_never_becomes_ready_times_out_names_the_phase_and_leaves_nothing() {
    let c = cluster(2, "t", WithRay::No);
    let job = "sl7never";
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
            "8",
        ],
        &["--fake-never-ready"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("not ready after"), "{err}");
    assert!(
        err.contains("last phase: capturing CUDA graphs 100%"),
        "{err}"
    );
    assert!(err.contains("first error line of each node's log"), "{err}");
    assert!(err.contains("stopped and removed"), "{err}");
    c.gone(job);
}

#[test]
fn a_container_that_dies_fails_at_once_with_its_first_error_line() {
    let c = cluster(2, "e", WithRay::No);
    let job = "sl7dies";
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
            "120",
        ],
        &["--fake-crash"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("exited with code 1"), "{err}");
    assert!(
        err.contains("n2: ERROR") && err.contains("RuntimeError: NCCL error in:"),
        "{err}"
    );
    assert!(err.contains("n1: (no error line in its log)"), "{err}");
    c.gone(job);
}

#[test]
fn a_live_dry_run_prints_the_very_plan_the_run_then_executes() {
    let c = cluster(2, "p", WithRay::No);
    let job = "sl11plan";
    let args = [
        "--json",
        "vllm",
        MODEL,
        "--tp",
        "2",
        "--job",
        job,
        "--timeout",
        "180",
    ];
    // The dry run on the live nodes looks up what the run would ($HOME on every node, the
    // model's commit and files on the Hub) and starts nothing.
    let mut dry: Vec<&str> = args.to_vec();
    dry.push("--dry-run");
    let planned = c.launch(&dry, &[]);
    assert!(planned.status.success(), "{}", describe(&planned));
    let planned: serde_json::Value =
        serde_json::from_slice(&planned.stdout).expect("the dry run prints the plan as JSON");
    c.gone(job);
    let mut run: Vec<&str> = args.to_vec();
    run.push("-d");
    let ran = c.launch(&run, &[]);
    assert!(ran.status.success(), "{}", describe(&ran));
    let ran: serde_json::Value =
        serde_json::from_slice(&ran.stdout).expect("the run prints its result as JSON");
    assert_eq!(
        ran["plan"], planned,
        "the plan that ran is not the plan the dry run printed"
    );
    let listing = planned["job"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "stage-model")
        .expect("a stage-model step");
    assert!(listing["listing"]["commit"].is_string(), "{listing}");
    let home = format!("/home/{}/.cache/huggingface", support::USER);
    assert!(
        planned.to_string().contains(&home),
        "the plan mounts each node's own resolved cache: {planned}"
    );
    let stop = c
        .net
        .spark_launch(1, &["stop", job, "--hosts", &hosts(&c.net)]);
    assert!(stop.status.success(), "{}", describe(&stop));
    c.gone(job);
}

#[test]
fn a_tp_that_does_not_divide_the_heads_is_refused_from_the_hubs_config_before_anything_is_copied() {
    let c = cluster(2, "h", WithRay::No);
    let job = "sl15heads";
    let out = c.launch(
        &[
            "vllm",
            MODEL,
            "--tp",
            "4",
            "--gpus-per-node",
            "2",
            "--job",
            job,
            "-d",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("tp 4 does not divide the 14 attention heads of spark-test/tiny"),
        "{err}"
    );
    assert!(err.contains("use tp 1, 2 or 14"), "{err}");
    assert!(!err.contains("Stage"), "nothing was copied: {err}");
    c.gone(job);
    // Nothing of the model reached the worker's cache.
    let cache = c
        .net
        .home(2)
        .join(".cache/huggingface/hub/models--spark-test--tiny");
    assert!(!cache.exists(), "{} exists", cache.display());
}

#[test]
fn vllm_enforces_the_api_key_that_readiness_and_the_printed_curl_use_and_no_printout_shows() {
    let c = cluster(2, "k", WithRay::No);
    let job = "sl15key";
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
            "--api-key",
            "auto",
            "--bind",
            "fabric",
            "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    // `auto` generated the key once, 0600, in the config folder of the user on the head.
    let file = c.net.home(1).join(".config/spark-launch/api-key");
    let key = std::fs::read_to_string(&file).unwrap().trim().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(key.starts_with("sl-") && key.len() == 67, "{key}");
    let all = describe(&out);
    assert!(!all.contains(&key), "the key was printed:\n{all}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    // The token probe sent the key too (the stand-in answers 401 without it): a first token
    // came, and its time is in the JSON.
    assert!(v["startup"]["first_token_s"].as_f64().is_some(), "{v}");
    // Bound to the head's fabric address: the endpoint and readiness use it.
    let fabric = c.net.fabric_addr(1);
    assert_eq!(v["endpoint"], format!("http://{fabric}:8000/v1"));
    let curl = v["curl"].as_str().unwrap();
    assert!(
        curl.contains("-H \"Authorization: Bearer $(cat ")
            && curl.contains("/.config/spark-launch/api-key)\""),
        "{curl}"
    );
    assert_eq!(
        v["plan"]["job"]["nodes"][0]["launch"]["container"]["env"]["VLLM_API_KEY"],
        "<set>"
    );
    // The stand-in enforces it as vLLM does: 401 without the key, the model list with it.
    let url = format!("http://{fabric}:8000/v1/models");
    let code = |auth: &[&str]| {
        let mut argv = vec!["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"];
        argv.extend_from_slice(auth);
        argv.push(&url);
        stdout(&c.net.exec_user(1, &argv, &[], None))
    };
    assert_eq!(code(&[]), "401");
    let wrong = "Authorization: Bearer sl-wrong";
    assert_eq!(code(&["-H", wrong]), "401");
    let right = format!("Authorization: Bearer {key}");
    assert_eq!(code(&["-H", &right]), "200");
    // Not on every interface: the management address does not answer.
    let mgmt = format!("http://{}:8000/health", c.net.mgmt_addr(1));
    let refused = c
        .net
        .exec_user(1, &["curl", "-s", "--max-time", "3", &mgmt], &[], None);
    assert!(!refused.status.success(), "{}", describe(&refused));
    // The key is on no command line of the head's container.
    let name = format!("sl-{job}-{}", c.net.hostname(1));
    let inspect = std::process::Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", c.net.docker_socket(1).display()),
        ])
        .args(["inspect", "-f", "{{json .Path}} {{json .Args}}", &name])
        .output()
        .unwrap();
    assert!(!stdout(&inspect).contains(&key), "{}", describe(&inspect));
    // `bench JOB` finds the job at the address it is bound to (its head's label) and sends the
    // key `auto` keeps; without it every request would be a 401.
    let h = hosts(&c.net);
    let out = c.net.spark_launch_with(
        1,
        &[
            "bench",
            job,
            "--hosts",
            &h,
            "--concurrency",
            "1",
            "--requests",
            "1",
            "--output-tokens",
            "4",
            "--no-warmup",
            "--json",
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!describe(&out).contains(&key), "the key was printed");
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v["report"]["url"],
        format!("http://{fabric}:8000/v1"),
        "{v:#}"
    );
    assert_eq!(v["report"]["levels"][0]["failed"], 0, "{v:#}");
    remove_job(&c.net, job);
}

/// `docker exec` in container `name` on node `i` (the node's own dockerd).
fn exec_in(c: &Serving, i: usize, name: &str, script: &str) -> Output {
    std::process::Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", c.net.docker_socket(i).display()),
        ])
        .args(["exec", name, "sh", "-c", script])
        .output()
        .unwrap()
}

#[test]
fn sglang_serves_across_two_nodes_with_its_key_in_no_argv_or_log_and_bench_measures_it() {
    let c = cluster(2, "g", WithRay::No);
    let job = "sl22sglang";
    let out = c.launch(
        &[
            "sglang",
            MODEL,
            "--tp",
            "2",
            "--job",
            job,
            "-d",
            "--timeout",
            "180",
            "--api-key",
            "auto",
            "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", describe(&out));
    let file = c.net.home(1).join(".config/spark-launch/api-key");
    let key = std::fs::read_to_string(&file).unwrap().trim().to_string();
    let all = describe(&out);
    assert!(!all.contains(&key), "the key was printed:\n{all}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v["endpoint"],
        format!("http://{}:30000/v1", c.net.mgmt_addr(1))
    );
    let nodes = &v["plan"]["job"]["nodes"];
    assert_eq!(
        nodes[0]["launch"]["container"]["env"]["SL_SGLANG_API_KEY"],
        "<set>"
    );
    // Every node ran SGLang's server with its rank; the worker joined the head's
    // --dist-init-addr from its own fabric address, and serves no HTTP.
    let fabric = c.net.fabric_addr(1);
    for (i, n) in [(0, "0"), (1, "1")] {
        let cmd: Vec<&str> = nodes[i]["launch"]["container"]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let line = cmd.join(" ");
        assert!(
            line.contains(&format!(
                "--tp-size 2 {}--enable-metrics --nnodes 2 --node-rank {n} --dist-init-addr {fabric}:20000",
                if i == 0 { "--host 0.0.0.0 --port 30000 " } else { "" }
            )),
            "{line}"
        );
    }
    let head_name = format!("sl-{job}-{}", c.net.hostname(1));
    let head = container_log(&c.net, 1, &head_name);
    assert!(head.contains("rank 1 joined from 169.254.100.2"), "{head}");
    assert!(
        head.contains("The server is fired up and ready to roll!"),
        "{head}"
    );
    let worker = container_log(&c.net, 2, &format!("sl-{job}-{}", c.net.hostname(2)));
    assert!(worker.contains("serving no HTTP"), "{worker}");
    // SGLang logs its server arguments, key included: the prelude turned it into <set>, and
    // no process of the head's container has it on its command line.
    assert!(
        !head.contains(&key),
        "the key is in the head's log:\n{head}"
    );
    assert!(head.contains("'api_key': '<set>'"), "{head}");
    let argv = exec_in(&c, 1, &head_name, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    assert!(
        stdout(&argv).contains("sglang.launch_server"),
        "{}",
        describe(&argv)
    );
    assert!(
        !stdout(&argv).contains(&key),
        "the key is on a command line"
    );
    // The stand-in enforces the key as SGLang does; /health and /metrics stay open.
    let code = |path: &str, auth: &[&str]| {
        let url = format!("http://127.0.0.1:30000{path}");
        let mut argv = vec!["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"];
        argv.extend_from_slice(auth);
        argv.push(&url);
        stdout(&c.net.exec_user(1, &argv, &[], None))
    };
    let right = format!("Authorization: Bearer {key}");
    assert_eq!(code("/v1/models", &[]), "401");
    assert_eq!(code("/v1/models", &["-H", &right]), "200");
    assert_eq!(code("/health", &[]), "200");
    let metrics = c.net.exec_user(
        1,
        &["curl", "-s", "http://127.0.0.1:30000/metrics"],
        &[],
        None,
    );
    assert!(
        stdout(&metrics).contains("sglang:num_running_reqs{model_name=\"spark-test/tiny\""),
        "{}",
        describe(&metrics)
    );
    // `bench JOB` finds SGLang's endpoint by the job's labels, sends the key, and measures
    // the stand-in's known rate through the two nodes' collective.
    let h = hosts(&c.net);
    let out = c.net.spark_launch(
        1,
        &[
            "bench",
            job,
            "--hosts",
            &h,
            "--concurrency",
            "1,4",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "16",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!describe(&out).contains(&key), "the key was printed");
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["report"]["url"], "http://127.0.0.1:30000/v1", "{v:#}");
    // Every request answered with its 16 tokens, at most the stand-in's known rate (the
    // figures' accuracy is the vLLM test's; a crowded machine only makes them lower here).
    let per_request = 0.1 + 15.0 * 0.02;
    for l in v["report"]["levels"].as_array().unwrap() {
        assert_eq!(l["failed"], 0, "{l}");
        assert_eq!(l["mean_output_tokens"], 16.0, "{l}");
        let conc = l["concurrency"].as_f64().unwrap();
        let tps = l["output_tokens_per_s"].as_f64().unwrap();
        let known = conc * 16.0 / per_request;
        assert!(
            tps <= known * 1.2 && tps >= known * 0.3,
            "c={conc}: {tps} vs {known}: {l}"
        );
    }
    remove_job(&c.net, job);
}

#[test]
fn an_sglang_profile_with_an_eagle_draft_stages_the_draft_everywhere_and_serves_through_sglang_serve()
 {
    const DRAFT: &str = "spark-test/draft";
    let c = cluster_with(2, "e", WithRay::No, vec![tiny_repo(DRAFT, 50_000)]);
    let job = "sl22eagle";
    // A user's profile file: SGLang started as `sglang serve`, an EAGLE head from its own repo.
    let file = c.net.home(1).join("eagle-sim.yaml");
    std::fs::write(
        &file,
        format!(
            "name: eagle-sim\ndescription: SGLang with an EAGLE draft on two simulated nodes\nengine: sglang\nimage: {}\nmodel: {{id: {MODEL}}}\ntp: 2\nnodes: 2\nsglang: {{launcher: serve}}\nspeculative: {{method: eagle, draft_model: {DRAFT}, tokens: 2}}\n",
            c.image
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&file, Some(4242), Some(4242)).unwrap();
    let h = hosts(&c.net);
    let path = file.display().to_string();
    let out = c.net.spark_launch_with(
        1,
        &[
            "up",
            &path,
            "--hosts",
            &h,
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
            "--job",
            job,
            "-d",
            "--timeout",
            "180",
        ],
        &[("HF_ENDPOINT", c.hub.url.as_str())],
        None,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let progress = stderr(&out);
    for step in [
        format!("✓ Stage {MODEL}"),
        format!("✓ Stage {DRAFT}"),
        "✓ Wait until http://127.0.0.1:30000 serves".to_string(),
    ] {
        assert!(progress.contains(&step), "no `{step}` in:\n{progress}");
    }
    // Both ranks ran `sglang serve` with the EAGLE flags and found the draft staged in their
    // own cache, at the commit the Hub named for main.
    for i in 1..=2 {
        let log = container_log(&c.net, i, &format!("sl-{job}-{}", c.net.hostname(i)));
        assert!(
            log.contains(&format!(
                "speculative draft {DRAFT}@main found at 3a5c0ffee0dd"
            )),
            "n{i}:\n{log}"
        );
        assert!(
            log.contains("'speculative_algorithm': 'EAGLE'")
                && log.contains("'speculative_num_draft_tokens': '3'"),
            "n{i}:\n{log}"
        );
    }
    let metrics = c.net.exec_user(
        1,
        &["curl", "-s", "http://127.0.0.1:30000/metrics"],
        &[],
        None,
    );
    assert!(
        stdout(&metrics).contains("sglang:spec_accept_rate{"),
        "{}",
        describe(&metrics)
    );
    remove_job(&c.net, job);
}

#[test]
fn no_stage_refuses_to_start_when_a_node_lacks_the_weights() {
    let c = cluster(2, "n", WithRay::No);
    let job = "sl7nostage";
    let out = c.launch(
        &["vllm", MODEL, "--tp", "2", "--job", job, "-d", "--no-stage"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--no-stage, but the model is not complete on every node"),
        "{err}"
    );
    assert!(
        err.contains("spark-launch model pull spark-test/tiny"),
        "{err}"
    );
    assert!(!err.contains("✓ Start on"), "{err}");
    c.gone(job);
}

#[test]
fn attached_the_job_serves_until_ctrl_c_then_every_node_is_stopped() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let c = cluster(2, "a", WithRay::No);
    let job = "sl7attach";
    let h = hosts(&c.net);
    let bin = c.net.binary().display().to_string();
    let errdir = tempfile::tempdir().unwrap();
    let errfile = errdir.path().join("stderr");
    let mut child = std::process::Command::new("bash")
        .arg(support::simnet_script())
        .args(["exec", c.net.prefix(), "1", "--user", support::USER])
        .args(["-e", &format!("HF_ENDPOINT={}", c.hub.url)])
        .args(["-e", "SPARK_LAUNCH_NO_PROGRESS=1", "--"])
        .arg(&bin)
        .args([
            "vllm", MODEL, "--tp", "2", "--job", job, "--hosts", &h, "--image", &c.image,
        ])
        .args([
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&errfile).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    let ready = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(line) if line.starts_with("ready: ") => break true,
            Ok(_) => {}
            Err(_) if std::time::Instant::now() > deadline => break false,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(_) => {}
        }
    };
    if !ready {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!(
            "spark-launch never said it was ready:\n{}",
            std::fs::read_to_string(&errfile).unwrap_or_default()
        );
    }
    // Still attached and serving.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "it did not stay attached"
    );
    for i in 1..=2 {
        assert_eq!(
            containers(&c.net, i, &format!("sl-{job}-")).len(),
            1,
            "n{i}"
        );
    }
    // Ctrl-C: every node's container goes.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no exit after Ctrl-C");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    // Ended by Ctrl-C: the exit of an interrupt, after a clean stop.
    assert_eq!(status.code(), Some(130), "{status:?}");
    c.gone(job);
}

#[test]
fn attached_the_watcher_reconnects_to_a_worker_whose_ssh_dropped_and_ctrl_c_still_stops_every_node()
{
    // Seen once: with the worker's SSH connection gone, the watcher said "cannot look …
    // trying again" forever (hidden under SPARK_LAUNCH_NO_PROGRESS=1) and never reconnected;
    // Ctrl-C then failed with a raw hyper error, exit 1, and left the worker's container.
    use std::os::unix::process::CommandExt;
    let c = cluster(2, "r", WithRay::No);
    let job = "sl24drop";
    let h = hosts(&c.net);
    let bin = c.net.binary().display().to_string();
    let errdir = tempfile::tempdir().unwrap();
    let errfile = errdir.path().join("stderr");
    let mut child = std::process::Command::new("bash")
        .arg(support::simnet_script())
        .args(["exec", c.net.prefix(), "1", "--user", support::USER])
        .args(["-e", &format!("HF_ENDPOINT={}", c.hub.url)])
        .args(["-e", "SPARK_LAUNCH_NO_PROGRESS=1", "--"])
        .arg(&bin)
        .args([
            "vllm", MODEL, "--tp", "2", "--job", job, "--hosts", &h, "--image", &c.image,
        ])
        .args([
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&errfile).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let err = || std::fs::read_to_string(&errfile).unwrap_or_default();
    let kill = |why: &str| -> ! {
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        panic!("{why}:\n{}", err());
    };
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(line) if line.starts_with("ready: ") => break,
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => kill("spark-launch ended before it was ready"),
        }
        if std::time::Instant::now() > deadline {
            kill("spark-launch never said it was ready");
        }
    }
    let worker = c.net.hostname(2);
    let wait_for = |what: &str, secs: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !err().contains(what) {
            if std::time::Instant::now() > deadline {
                kill(&format!("no `{what}` within {secs} s"));
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    };
    // The worker's sshd goes, and with it every connection to it.
    c.net.stop(2, "sshd-all");
    let lost = format!("{worker}: cannot look at sl-{job}-{worker}");
    wait_for(&lost, 30);
    // Said once, however long it lasts (a check every 5 s).
    std::thread::sleep(std::time::Duration::from_secs(12));
    assert_eq!(err().matches(&lost).count(), 1, "{}", err());
    assert!(child.try_wait().unwrap().is_none(), "it stopped: {}", err());
    // sshd is back: the watcher connects again, and says so once.
    c.net.start(2, "sshd");
    wait_for(
        &format!("{worker}: connected again; watching sl-{job}-{worker}"),
        40,
    );
    // Ctrl-C stops the job on every node, cleanly.
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            kill("no exit after Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let text = err();
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(
        text.contains(&format!("interrupted: job {job} was stopped on ")),
        "{text}"
    );
    assert!(!text.to_lowercase().contains("hyper"), "{text}");
    assert!(
        text.contains("✓ Stop") || !text.contains("✗ Stop"),
        "{text}"
    );
    c.gone(job);
}

#[test]
fn trtllm_serves_across_two_nodes_with_mpirun_between_their_containers() {
    // An `--env` secret: every rank gets it, no command line shows it.
    const TOKEN: &str = "hf_sl24livetoken";
    let net = SimNet::builder(2).services("sshd,dockerd").tag("l").up();
    trust_all(&net);
    let image = format!("{}trtllm:test", net.prefix());
    trtllm_standin_on_every_node(&net, &image);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(
        vec![tiny_repo(MODEL, 200_000)],
        &netns,
    ));
    let job = "sl7trt";
    let h = hosts(&net);
    let out = net.spark_launch_with(
        1,
        &[
            "trtllm",
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
            "--env",
            &format!("HF_TOKEN={TOKEN}"),
        ],
        &[("HF_ENDPOINT", hub.url.as_str())],
        None,
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains(&format!("ready: http://{}:8355/v1", net.mgmt_addr(1))),
        "{}",
        describe(&out)
    );
    // mpirun ran one rank in each node's container, each with its own node's variables.
    let log = container_log(&net, 1, &format!("sl-{job}-{}", net.hostname(1)));
    for i in 1..=2 {
        assert!(
            log.contains(&format!(
                "on {} NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1 NCCL_SOCKET_IFNAME=enp1s0f1np1 HF_HUB_OFFLINE=1 HF_TOKEN=set",
                net.hostname(i)
            )),
            "rank on n{i} missing:\n{log}"
        );
    }
    assert!(
        log.contains("Uvicorn running on http://0.0.0.0:8355"),
        "{log}"
    );

    // mpirun got there with the job's own keys only: no container mounts anything of ~/.ssh
    // or /etc/ssh; the host key is in every container, the client key in the head's only,
    // both 0600; and no private half shows in docker inspect or in spark-launch's output.
    let docker = |i: usize, args: &[&str]| -> String {
        let out = std::process::Command::new("docker")
            .args([
                "-H",
                &format!("unix://{}", docker_socket(&net, i).display()),
            ])
            .args(args)
            .output()
            .expect("docker");
        assert!(out.status.success(), "docker {args:?}: {}", describe(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let printed = format!("{}{}", stdout(&out), stderr(&out));
    let client = docker(
        1,
        &[
            "exec",
            &format!("sl-{job}-{}", net.hostname(1)),
            "cat",
            "/etc/spark-launch/job-ssh/id_ed25519",
        ],
    );
    assert!(client.contains("BEGIN OPENSSH PRIVATE KEY"), "{client}");
    let body = |k: &str| -> String { k.lines().filter(|l| !l.starts_with("-----")).collect() };
    for i in 1..=2 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        let inspect = docker(i, &["inspect", &name]);
        let v: serde_json::Value = serde_json::from_str(&inspect).unwrap();
        for m in v[0]["Mounts"].as_array().unwrap() {
            let source = m["Source"].as_str().unwrap_or_default();
            assert!(
                !source.contains("/.ssh") && !source.starts_with("/etc/ssh"),
                "n{i} mounts {source}"
            );
        }
        let modes = docker(
            i,
            &[
                "exec",
                &name,
                "sh",
                "-c",
                "stat -c '%a %n' /etc/spark-launch/job-ssh/* 2>&1",
            ],
        );
        assert!(
            modes.contains("600 /etc/spark-launch/job-ssh/ssh_host_ed25519_key"),
            "n{i}: {modes}"
        );
        assert_eq!(
            modes.contains("/etc/spark-launch/job-ssh/id_ed25519"),
            i == 1,
            "the client key is in the head's container only (n{i}): {modes}"
        );
        let host = docker(
            i,
            &[
                "exec",
                &name,
                "cat",
                "/etc/spark-launch/job-ssh/ssh_host_ed25519_key",
            ],
        );
        for key in [&client, &host] {
            let b = body(key);
            assert!(b.len() > 100, "{key}");
            assert!(
                !inspect.contains(&b[..60]),
                "a private key in docker inspect of n{i}"
            );
            assert!(
                !printed.contains(&b[..60]),
                "a private key in spark-launch's output"
            );
        }
    }
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
    // The --env token: in no container's Cmd or Args, in no process's command line on this
    // machine (every simulated node's processes are this kernel's), nowhere in the output.
    assert!(!printed.contains(TOKEN), "{printed}");
    for i in 1..=2 {
        let name = format!("sl-{job}-{}", net.hostname(i));
        let cmd = docker(
            i,
            &[
                "inspect",
                "--format",
                "{{json .Config.Cmd}} {{json .Args}}",
                &name,
            ],
        );
        assert!(!cmd.contains(TOKEN), "n{i}'s Cmd: {cmd}");
    }
    let mut shown = Vec::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(p.path().join("cmdline"))
            && String::from_utf8_lossy(&c).contains(TOKEN)
        {
            shown.push(String::from_utf8_lossy(&c).replace('\0', " "));
        }
    }
    assert!(shown.is_empty(), "the token in ps: {shown:?}");
    // Fails closed: with another host key pinned, the head's ssh refuses the worker; with the
    // job's, it gets in.
    let checked = docker(
        1,
        &[
            "exec",
            &format!("sl-{job}-{}", net.hostname(1)),
            "sh",
            "-c",
            "ssh-keygen -q -t ed25519 -N '' -f /tmp/other >/dev/null && \
             other=$(cut -d' ' -f1,2 /tmp/other.pub) && \
             awk -v k=\"$other\" '{print $1, k}' /etc/spark-launch/job-ssh/known_hosts > /tmp/kh && \
             for w in $SL_WORKERS; do \
               out=$(ssh -o UserKnownHostsFile=/tmp/kh \"$w\" true 2>&1); echo \"rc=$? $out\"; \
               ssh \"$w\" true && echo \"job key: in\"; \
             done",
        ],
    );
    assert!(
        checked.contains("rc=255") && checked.contains("Host key verification failed"),
        "{checked}"
    );
    assert!(checked.contains("job key: in"), "{checked}");
    remove_job(&net, job);
}
