//! `spark-launch model pull` on simulated nodes (tests/harness/simnet: network namespaces with
//! real sshd): spark-launch runs inside the head as the test user, downloads from a stand-in
//! Hub reachable only inside the head, and every other node pulls the files from the head over
//! SSH on its fabric address — the production path, with no test switch. Checks the HF cache
//! layout on every node, a second run that moves nothing, and a resume from the state an
//! interrupted copy leaves (finished ranges journaled, the rest missing).

mod hub_standin;
mod sim_serving;
mod support;

use std::path::{Path, PathBuf};

use hub_standin::{FakeRepo, HubStandin, gguf_repo, tiny_repo};
use sim_serving::{hosts, trust_all};
use support::{SimNet, describe};

fn repo_dir(net: &SimNet, i: usize, repo: &str) -> PathBuf {
    net.home(i)
        .join(".cache/huggingface/hub")
        .join(format!("models--{}", repo.replace('/', "--")))
}

fn assert_layout(dir: &Path, repo: &FakeRepo) {
    for f in &repo.files {
        let link = dir.join("snapshots").join(&repo.commit).join(&f.path);
        let target = std::fs::read_link(&link)
            .unwrap_or_else(|e| panic!("{} is not a symlink: {e}", link.display()));
        assert!(
            target.starts_with("../"),
            "{} -> {}",
            link.display(),
            target.display()
        );
        assert_eq!(std::fs::read(&link).unwrap(), f.content, "{}", f.path);
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("refs/main")).unwrap(),
        repo.commit
    );
}

fn pull(net: &SimNet, hub: &HubStandin, repo: &str, extra: &[&str]) -> serde_json::Value {
    let h = hosts(net);
    let mut args = vec![
        "model",
        "pull",
        repo,
        "--hosts",
        &h,
        "--json",
        "--streams",
        "3",
        "--range-mib",
        "1",
    ];
    args.extend_from_slice(extra);
    let out = net.spark_launch_with(1, &args, &[("HF_ENDPOINT", hub.url.as_str())], None);
    assert!(out.status.success(), "{}", describe(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(&out)))
}

fn fetched(report: &serde_json::Value) -> Vec<u64> {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["fetched_bytes"].as_u64().unwrap())
        .collect()
}

#[test]
fn model_pull_downloads_on_the_head_and_every_node_copies_it_over_ssh() {
    let net = SimNet::builder(3).services("sshd").tag("m").up();
    trust_all(&net);
    let repo = tiny_repo("spark-test/tiny", 3 * 1024 * 1024 + 17);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(vec![repo.clone()], &netns));
    let total: u64 = repo.files.iter().map(|f| f.content.len() as u64).sum();

    let report = pull(&net, &hub, &repo.id, &[]);
    assert_eq!(fetched(&report), vec![total, total, total], "{report}");
    for i in 1..=3 {
        assert_layout(&repo_dir(&net, i, &repo.id), &repo);
    }

    // A second run finds everything in place: nothing moves, the Hub serves no file.
    let ranges = hub.range_requests.load(std::sync::atomic::Ordering::SeqCst);
    let report = pull(&net, &hub, &repo.id, &[]);
    assert_eq!(fetched(&report), vec![0, 0, 0], "{report}");
    assert_eq!(
        hub.range_requests.load(std::sync::atomic::Ordering::SeqCst),
        ranges
    );

    // What an interrupted copy leaves on node 3: the first 1 MiB range written and journaled,
    // the blob itself not yet in place. The next run fetches only the rest.
    let weights = &repo.files[2];
    let blobs = repo_dir(&net, 3, &repo.id).join("blobs");
    let blob = blobs.join(weights.blob());
    std::fs::remove_file(&blob).unwrap();
    let partial = blobs.join(format!("{}.sl-partial", weights.blob()));
    std::fs::write(&partial, &weights.content[..1024 * 1024]).unwrap();
    let journal = blobs.join(format!("{}.sl-ranges", weights.blob()));
    std::fs::write(&journal, "0 1048576\n").unwrap();
    for p in [&partial, &journal] {
        std::os::unix::fs::chown(p, Some(4242), Some(4242)).unwrap();
    }
    let report = pull(&net, &hub, &repo.id, &[]);
    let n3 = &report["nodes"][2];
    assert_eq!(n3["resumed_bytes"], 1024 * 1024, "{report}");
    assert_eq!(
        n3["fetched_bytes"].as_u64().unwrap(),
        weights.content.len() as u64 - 1024 * 1024,
        "{report}"
    );
    assert_layout(&repo_dir(&net, 3, &repo.id), &repo);
}

#[test]
fn a_gated_model_without_a_token_stops_before_any_node_is_touched() {
    let net = SimNet::builder(2).services("sshd").tag("g").up();
    trust_all(&net);
    let mut repo = tiny_repo("spark-test/gated", 1000);
    repo.gated = true;
    repo.token = Some("hf_right".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(vec![repo.clone()], &netns));
    let h = hosts(&net);
    let out = net.spark_launch_with(
        1,
        &["model", "pull", &repo.id, "--hosts", &h],
        &[("HF_ENDPOINT", hub.url.as_str()), ("HF_TOKEN", "")],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is gated") && err.contains("export HF_TOKEN"),
        "{err}"
    );
    for i in 1..=2 {
        assert!(!repo_dir(&net, i, &repo.id).exists(), "n{i} was touched");
    }
    assert_eq!(
        hub.range_requests.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[test]
fn a_gguf_spec_is_pulled_onto_the_head_alone_and_only_the_files_it_picks() {
    let net = SimNet::builder(2).services("sshd").tag("q").up();
    trust_all(&net);
    let repo = gguf_repo("spark-test/m-GGUF");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(vec![repo.clone()], &netns));
    let spec = format!("{}:Q4_K_M", repo.id);
    let report = pull(&net, &hub, &spec, &[]);
    let picked: Vec<&hub_standin::FakeFile> = repo
        .files
        .iter()
        .filter(|f| ["m-Q4_K_M.gguf", "mmproj-F16.gguf"].contains(&f.path.as_str()))
        .collect();
    let bytes: u64 = picked.iter().map(|f| f.content.len() as u64).sum();
    assert_eq!(fetched(&report), vec![bytes], "{report}");
    let snap = repo_dir(&net, 1, &repo.id)
        .join("snapshots")
        .join(&repo.commit);
    for f in &repo.files {
        let on_head = snap.join(&f.path);
        assert_eq!(
            on_head.exists(),
            picked.iter().any(|p| p.path == f.path),
            "{}",
            f.path
        );
    }
    assert!(
        !repo_dir(&net, 2, &repo.id).exists(),
        "the RPC server's node got model files"
    );
}

/// Runs a command as root on this machine (the simulated nodes' plumbing).
fn sh(cmd: &str) {
    let out = std::process::Command::new("sh")
        .args(["-c", cmd])
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {}", describe(&out));
}

/// Turns 4 simulated nodes (all on one fabric bridge) into a ring of four cables, one /24 per
/// cable: node k's port 1 (`enp1s0f1np1`) to node k+1's port 0 (`enp1s0f0np0`), both ACTIVE
/// in the nodes' RDMA sysfs. Node 1 and node 3 share no cable.
fn make_ring(net: &SimNet) {
    let p = net.prefix();
    for k in 1..=4 {
        let next = k % 4 + 1;
        sh(&format!(
            "ip -n {p}br link set p{k}a nomaster && ip -n {p}br link add r{k} type bridge && \
             ip -n {p}br link set r{k} up && ip -n {p}br link set p{k}a master r{k} && \
             ip -n {p}br link set p{next}c master r{k} up && \
             ip -n {p}n{k} addr flush dev enp1s0f1np1 && \
             ip -n {p}n{k} addr add 169.254.1{k}.1/24 dev enp1s0f1np1 && \
             ip -n {p}n{next} link set enp1s0f0np0 up && \
             ip -n {p}n{next} addr add 169.254.1{k}.2/24 dev enp1s0f0np0"
        ));
        let out = net.exec_root(
            next,
            &[
                "sh",
                "-c",
                "d=/sys/class/infiniband/rocep1s0f0/ports/1; echo '4: ACTIVE' > $d/state && echo '5: LinkUp' > $d/phys_state",
            ],
        );
        assert!(out.status.success(), "{}", describe(&out));
    }
}

#[test]
fn in_a_ring_the_node_opposite_the_head_copies_through_a_node_between_them() {
    let net = SimNet::builder(4).services("sshd").tag("r").up();
    trust_all(&net);
    make_ring(&net);
    // The head's model: two files and a symlink, in the test user's home.
    let model = net.home(1).join("models/ring");
    std::fs::create_dir_all(model.join("sub")).unwrap();
    let weights = hub_standin::bytes(3, 3 * 1024 * 1024 + 5);
    std::fs::write(model.join("model.safetensors"), &weights).unwrap();
    std::fs::write(model.join("sub/config.json"), b"{\"ring\": true}").unwrap();
    std::os::unix::fs::symlink("../model.safetensors", model.join("sub/w")).unwrap();
    sh(&format!(
        "chown -R 4242:4242 {}",
        net.home(1).join("models").display()
    ));
    // spark-launch reaches the nodes over their management addresses; the copies go over the
    // ring's cables.
    let h = (1..=4)
        .map(|i| format!("{}={}", net.hostname(i), net.mgmt_addr(i)))
        .collect::<Vec<_>>()
        .join(",");
    let out = net.spark_launch_with(
        1,
        &[
            "model",
            "pull",
            "/home/sparkuser/models/ring",
            "--hosts",
            &h,
            "--json",
            "--streams",
            "2",
            "--range-mib",
            "1",
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let routes = report["routes"].as_array().unwrap();
    let route = |i: usize| {
        routes
            .iter()
            .find(|r| r[0] == net.hostname(i).as_str())
            .map(|r| r[1].clone())
            .unwrap()
    };
    assert_eq!(route(2)["route"], "direct", "{report}");
    assert_eq!(route(2)["head_addr"], "169.254.11.1", "{report}");
    assert_eq!(route(4)["route"], "direct", "{report}");
    assert_eq!(route(4)["head_addr"], "169.254.14.2", "{report}");
    // Node 3 shares no cable with the head: its copy goes through node 2, to the head's
    // address on the n1-n2 cable, which node 3 itself cannot reach.
    assert_eq!(route(3)["route"], "relay", "{report}");
    assert_eq!(route(3)["via"], net.hostname(2).as_str(), "{report}");
    assert_eq!(route(3)["via_addr"], "169.254.12.1", "{report}");
    assert_eq!(route(3)["head_addr"], "169.254.11.1", "{report}");
    let ping = net.exec_root(3, &["ping", "-c", "1", "-W", "1", "169.254.11.1"]);
    assert!(
        !ping.status.success(),
        "n3 reaches the head's n1-n2 address directly"
    );
    for i in 2..=4 {
        let dir = net.home(i).join("models/ring");
        assert_eq!(
            std::fs::read(dir.join("model.safetensors")).unwrap(),
            weights,
            "n{i}"
        );
        assert_eq!(
            std::fs::read_link(dir.join("sub/w")).unwrap(),
            PathBuf::from("../model.safetensors"),
            "n{i}"
        );
        assert_eq!(
            std::fs::read(dir.join("sub/config.json")).unwrap(),
            b"{\"ring\": true}",
            "n{i}"
        );
    }
    let fetched: Vec<u64> = fetched(&report);
    assert_eq!(fetched[0], 0, "the head had it: {report}");
    assert!(
        fetched[1..].iter().all(|b| *b == weights.len() as u64 + 14),
        "{report}"
    );
}

#[test]
fn under_stock_sshd_limits_many_commands_at_once_and_24_streams_per_node_all_get_through() {
    // Seen once: with OpenSSH's own MaxStartups (10:30:100) some of 20 commands started
    // at once failed with `kex_exchange_identification`, and `model pull --streams 24` failed
    // with "Session open refused by peer" (more than MaxSessions 10 on one connection). The
    // other tests raise both limits; these nodes keep sshd's defaults.
    let net = SimNet::builder(3)
        .services("sshd")
        .stock_sshd()
        .tag("k")
        .up();
    trust_all(&net);
    let h = hosts(&net);

    // 20 commands at once, each connecting to nodes 2 and 3 (node 1 runs them: local).
    let outs: Vec<std::process::Output> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..20)
            .map(|_| s.spawn(|| net.spark_launch(1, &["env", "--hosts", &h, "--json"])))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let failed: Vec<String> = outs
        .iter()
        .filter(|o| !o.status.success())
        .map(describe)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 20 failed: {failed:#?}",
        failed.len()
    );

    // 30 files over 24 streams per worker: 24 sessions at once on each worker's connection,
    // and 48 connections at once from the workers to the head.
    let repo = FakeRepo {
        id: "spark-test/wide".into(),
        commit: "3a5c0ffee0ddba11c0ffee0ddba11c0ffee0dd00".into(),
        gated: false,
        token: None,
        files: (0..30)
            .map(|i| hub_standin::FakeFile {
                path: format!("shard-{i:02}.safetensors"),
                content: hub_standin::bytes(i, 64 * 1024 + i as usize),
                lfs: true,
            })
            .collect(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(vec![repo.clone()], &netns));
    let total: u64 = repo.files.iter().map(|f| f.content.len() as u64).sum();
    let args = [
        "model",
        "pull",
        &repo.id,
        "--hosts",
        &h,
        "--json",
        "--streams",
        "24",
    ];
    let out = net.spark_launch_with(1, &args, &[("HF_ENDPOINT", hub.url.as_str())], None);
    assert!(out.status.success(), "{}", describe(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fetched(&report), vec![total, total, total], "{report}");
    for i in 2..=3 {
        assert_layout(&repo_dir(&net, i, &repo.id), &repo);
    }
}
