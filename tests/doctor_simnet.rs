//! `spark-launch doctor` on simulated nodes (tests/harness/simnet: real sshd, real network
//! namespaces joined by a bridge, fake RDMA sysfs), run from node 1 as the test user the way a
//! user runs it on the head, with broken setups made for real: MTU 1500 on one end, a port
//! taken, sshd down, a bridge port that drops jumbo frames, twins on one subnet, a worker
//! missing a model file.
//!
//! The simulated nodes have no GPU and no NVIDIA driver, run no Docker Engine unless a test
//! asks for one (`--services dockerd`: each node its own), and their test user keeps the host's
//! memlock limit: those checks are left out (`--skip`), so that a healthy simulated cluster
//! reports nothing and an injected fault is the only thing reported.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use support::{SimNet, USER, describe};

const SKIP: [&str; 4] = [
    "host.nvidia-driver",
    "host.memlock",
    "host.docker",
    "host.gpu-runtime",
];

fn chown_user(p: &Path) {
    std::os::unix::fs::chown(p, Some(4242), Some(4242)).unwrap();
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// What `spark-launch trust` leaves behind, written directly: every node has its own key, every
/// node's public key is authorised on every node, and every node knows every other node's host
/// key under the node's name.
fn trust(net: &SimNet) {
    let n = net.len();
    let mut publics = String::new();
    let mut known = String::new();
    for i in 1..=n {
        let ssh = net.home(i).join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let key = ssh.join("id_ed25519");
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C"])
            .arg(format!("{USER}@n{i}"))
            .arg("-f")
            .arg(&key)
            .status()
            .expect("ssh-keygen (apt-get install openssh-client)");
        assert!(st.success());
        publics.push_str(&std::fs::read_to_string(ssh.join("id_ed25519.pub")).unwrap());
        let host_key = support::simnet_root()
            .join(net.prefix())
            .join(format!("n{i}/state/ssh_host_ed25519_key.pub"));
        let host_key = std::fs::read_to_string(&host_key).unwrap();
        let mut parts = host_key.split_whitespace();
        known.push_str(&format!(
            "n{i} {} {}\n",
            parts.next().unwrap(),
            parts.next().unwrap()
        ));
    }
    for i in 1..=n {
        let ssh = net.home(i).join(".ssh");
        std::fs::write(ssh.join("authorized_keys"), &publics).unwrap();
        std::fs::write(ssh.join("known_hosts"), &known).unwrap();
        for f in [
            "",
            "id_ed25519",
            "id_ed25519.pub",
            "authorized_keys",
            "known_hosts",
        ] {
            chown_user(&ssh.join(f));
        }
        set_mode(&ssh, 0o700);
        set_mode(&ssh.join("id_ed25519"), 0o600);
    }
}

/// `--hosts n1=sparkuser@10.231.0.1,...`: every node by its management address (SSH goes
/// over the office network; the fabric is what the checks look at).
fn hosts(net: &SimNet) -> String {
    (1..=net.len())
        .map(|i| format!("n{i}={USER}@{}", net.mgmt_addr(i)))
        .collect::<Vec<_>>()
        .join(",")
}

fn root(net: &SimNet, i: usize, cmd: &str) {
    let out = net.exec_root(i, &["sh", "-c", cmd]);
    assert!(out.status.success(), "n{i}: {cmd}: {}", describe(&out));
}

/// Sets one bridge-side port (`p{i}a`: node i's `enp1s0f1np1`, `p{i}b`: its twin) to `mtu`.
fn bridge_port_mtu(net: &SimNet, port: &str, mtu: u32) {
    let st = Command::new("ip")
        .args([
            "-n",
            &format!("{}br", net.prefix()),
            "link",
            "set",
            port,
            "mtu",
        ])
        .arg(mtu.to_string())
        .status()
        .unwrap();
    assert!(st.success(), "ip link set {port} mtu {mtu}");
}

/// Jumbo frames everywhere: both fabric interfaces of every node and their bridge ports.
fn jumbo(net: &SimNet) {
    for i in 1..=net.len() {
        root(
            net,
            i,
            "ip link set enp1s0f1np1 mtu 9000 && ip link set enP2p1s0f1np1 mtu 9000",
        );
        bridge_port_mtu(net, &format!("p{i}a"), 9000);
        bridge_port_mtu(net, &format!("p{i}b"), 9000);
    }
}

/// A simulated cluster of three with SSH trust and jumbo frames: a healthy one.
fn cluster() -> SimNet {
    let net = SimNet::builder(3).services("sshd").tag("d").up();
    trust(&net);
    jumbo(&net);
    net
}

fn doctor(net: &SimNet, extra: &[&str]) -> serde_json::Value {
    doctor_skipping(net, &SKIP, extra)
}

fn doctor_skipping(net: &SimNet, skip: &[&str], extra: &[&str]) -> serde_json::Value {
    let hosts = hosts(net);
    let mut args = vec!["doctor", "--json", "--hosts", &hosts];
    for s in skip {
        args.extend(["--skip", s]);
    }
    args.extend_from_slice(extra);
    let out = net.spark_launch(1, &args);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor printed no JSON ({e}): {}", describe(&out)))
}

/// Every `(check, node, status)` that is not ok or skipped.
fn problems(v: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for c in v["checks"].as_array().unwrap() {
        for (node, status) in c["nodes"].as_object().unwrap() {
            let s = status.as_str().unwrap();
            if s != "ok" && s != "skipped" {
                out.push((
                    c["id"].as_str().unwrap().to_string(),
                    node.clone(),
                    s.to_string(),
                ));
            }
        }
    }
    out
}

fn p(check: &str, node: &str, status: &str) -> (String, String, String) {
    (check.into(), node.into(), status.into())
}

fn findings<'a>(v: &'a serde_json::Value, id: &str) -> &'a Vec<serde_json::Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}"))["findings"]
        .as_array()
        .unwrap()
}

/// A listener inside node `i`. Dropping it stops the `simnet exec` wrapper; the listener
/// itself lives in the node's namespaces until `simnet down` (the `SimNet` guard) kills
/// everything there.
struct Listener(Child);

impl Listener {
    fn on(net: &SimNet, i: usize, port: u16) -> Listener {
        let listener = Listener(
            Command::new("bash")
                .arg(support::simnet_script())
                .args(["exec", net.prefix(), &i.to_string(), "--", "socat"])
                .arg(format!("TCP-LISTEN:{port},reuseaddr,fork"))
                .arg("/dev/null")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("socat (apt-get install socat)"),
        );
        // Wait until it listens (the gather reads /proc/net/tcp once).
        for _ in 0..50 {
            let out = net.exec_root(i, &["sh", "-c", &format!("ss -Htln 'sport = :{port}'")]);
            if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                return listener;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("socat did not listen on {port} in n{i}");
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_healthy_simulated_cluster_reports_nothing_and_two_injected_faults_exactly_those_two() {
    let net = cluster();
    let v = doctor(&net, &[]);
    assert_eq!(problems(&v), vec![], "{v:#}");
    assert_eq!(v["nodes"], serde_json::json!(["n1", "n2", "n3"]));
    // The live checks really ran: every node pinged every other at 9000 bytes, SSH'd to it.
    let ran = |id: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()["nodes"]
            .as_object()
            .unwrap()
            .values()
            .all(|s| s == "ok")
    };
    for id in [
        "fabric.mtu-path",
        "reach.ssh",
        "reach.fabric",
        "reach.ports",
        // Each node's own NCCL was read: here through n1's own files, on n2 and n3 through
        // their shells over SSH (a failed read would be a skip).
        "host.nccl",
    ] {
        assert!(ran(id), "{id} did not run everywhere: {v:#}");
    }

    // Fault 1: n2 left at MTU 1500. Fault 2: something on n3 holds the containers' sshd port.
    root(
        &net,
        2,
        "ip link set enp1s0f1np1 mtu 1500 && ip link set enP2p1s0f1np1 mtu 1500",
    );
    let _taken = Listener::on(&net, 3, 2233);
    let v = doctor(&net, &[]);
    assert_eq!(
        problems(&v),
        vec![
            p("fabric.mtu-mismatch", "n2", "fail"),
            p("reach.ports", "n3", "fail")
        ],
        "{v:#}"
    );
    let mtu = &findings(&v, "fabric.mtu-mismatch")[0];
    assert_eq!(
        mtu["fix"]["commands"],
        serde_json::json!(["sudo ip link set dev enp1s0f1np1 mtu 9000"])
    );
    assert_eq!(
        findings(&v, "reach.ports")[0]["problem"],
        "port 2233 (container sshd (mpirun)) is already in use"
    );
}

#[test]
fn sshd_down_on_one_node_fails_reach_ssh_on_that_node_only() {
    let net = cluster();
    net.stop(3, "sshd");
    let v = doctor(&net, &[]);
    assert_eq!(problems(&v), vec![p("reach.ssh", "n3", "fail")], "{v:#}");
    let f = &findings(&v, "reach.ssh")[0];
    assert!(
        f["problem"]
            .as_str()
            .unwrap()
            .starts_with("this machine cannot reach the node over SSH"),
        "{f}"
    );
    // Nothing else is judged on n3: its row is skipped with the reason.
    let skipped = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] != "reach.ssh")
        .all(|c| c["nodes"]["n3"] == "skipped");
    assert!(skipped, "{v:#}");
}

#[test]
fn a_bridge_port_that_drops_jumbo_frames_fails_mtu_path_on_the_node_behind_it() {
    let net = cluster();
    // Both ends of every link say 9000; the hop in front of n3 does not.
    bridge_port_mtu(&net, "p3a", 1500);
    let v = doctor(&net, &[]);
    assert_eq!(
        problems(&v),
        vec![p("fabric.mtu-path", "n3", "fail")],
        "{v:#}"
    );
    let f = &findings(&v, "fabric.mtu-path")[0];
    assert_eq!(
        f["fix"]["commands"],
        serde_json::json!([format!(
            "ping -M do -s 8972 -c 3 -I {} {}",
            net.fabric_addr(1),
            net.fabric_addr(3)
        )])
    );
}

#[test]
fn twins_on_one_subnet_fail_on_the_node_that_has_them() {
    let net = cluster();
    root(&net, 2, "ip addr add 169.254.100.22/16 dev enP2p1s0f1np1");
    let v = doctor(&net, &["--check", "fabric.twins-same-subnet"]);
    assert_eq!(
        problems(&v),
        vec![p("fabric.twins-same-subnet", "n2", "fail")],
        "{v:#}"
    );
    // Both twins now hold 169.254/16 addresses: derive's fix for link-local twins.
    let f = &findings(&v, "fabric.twins-same-subnet")[0];
    assert!(
        f["fix"]["text"]
            .as_str()
            .unwrap()
            .contains("`link-local: []` for enP2p1s0f1np1"),
        "{f}"
    );
}

/// A model in the test user's Hugging Face cache on node `i`, laid out as the hub client
/// does (snapshot files link to content-addressed blobs).
fn hf_model(net: &SimNet, i: usize, files: &[(&str, &str)]) {
    let repo = net.home(i).join(".cache/huggingface/hub/models--sl--tiny");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    for (name, content) in files {
        let blob = format!(
            "{:x}",
            content.len() * 7919 + content.bytes().map(u64::from).sum::<u64>() as usize
        );
        std::fs::write(repo.join("blobs").join(&blob), content).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), snap.join(name)).unwrap();
    }
    let status = Command::new("chown")
        .args(["-R", "4242:4242"])
        .arg(net.home(i).join(".cache"))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_worker_missing_a_model_file_fails_cluster_model_on_that_worker() {
    let net = cluster();
    let full = [
        ("config.json", "{\"layers\": 2}"),
        ("model.safetensors", "weights"),
    ];
    hf_model(&net, 1, &full);
    hf_model(&net, 2, &full);
    hf_model(&net, 3, &full[..1]);
    let v = doctor(&net, &["--check", "cluster.model", "--model", "sl/tiny"]);
    assert_eq!(
        problems(&v),
        vec![p("cluster.model", "n3", "fail")],
        "{v:#}"
    );
    assert_eq!(
        findings(&v, "cluster.model")[0]["problem"],
        "sl/tiny differs from n1's copy: missing model.safetensors"
    );
}

#[test]
fn every_node_s_own_engine_is_checked_and_a_wrong_arch_or_missing_image_fails_on_its_node() {
    let net = SimNet::builder(3).services("sshd,dockerd").tag("k").up();
    trust(&net);
    let image = format!("sl6-{}-doctor:sim", std::process::id());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // n1 and n2 hold the same image (saved and loaded: same ID); n3 holds an arm64 build of
    // the tag; and before that, n3 has none.
    let s1 = net.docker_socket(1).display().to_string();
    rt.block_on(support::docker::import_busybox(&s1, &image));
    let save = Command::new("docker")
        .args(["-H", &format!("unix://{s1}"), "save", &image])
        .output()
        .unwrap();
    assert!(save.status.success());
    let mut load = Command::new("docker")
        .args([
            "-H",
            &format!("unix://{}", net.docker_socket(2).display()),
            "load",
            "-q",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        load.stdin.take().unwrap().write_all(&save.stdout).unwrap();
    }
    assert!(load.wait().unwrap().success());

    let checks = [
        "--check",
        "host.docker",
        "--check",
        "host.disk",
        "--check",
        "cluster.image-digest",
        "--check",
        "cluster.image-arch",
        "--image",
        &image,
    ];
    // With their own engines the nodes' Docker checks run too (no GPU runtime here).
    let skip = ["host.nvidia-driver", "host.memlock", "host.gpu-runtime"];
    let v = doctor_skipping(&net, &skip, &checks);
    assert_eq!(
        problems(&v),
        vec![p("cluster.image-digest", "n3", "fail")],
        "{v:#}"
    );
    let docker = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "host.docker")
        .unwrap();
    assert_eq!(docker["status"], "ok", "{docker}");

    assert_eq!(
        findings(&v, "cluster.image-digest")[0]["fix"]["commands"],
        serde_json::json!([format!("spark-launch image push {image} --to n3")])
    );

    // The test container, started on each node's own engine like every spark-launch GPU
    // container (memlock=-1): it runs where dockerd may raise the limit, and is refused with
    // the reason where it may not (this host has no CAP_SYS_RESOURCE). n3 has no image yet.
    let v = doctor_skipping(
        &net,
        &[],
        &["--check", "host.container-memlock", "--image", &image],
    );
    let cells = &v["checks"][0]["nodes"];
    let expected = if support::docker::has_cap_sys_resource(std::process::id()) {
        "ok"
    } else {
        "fail"
    };
    assert_eq!(cells["n1"], expected, "{v:#}");
    assert_eq!(cells["n2"], expected, "{v:#}");
    assert_eq!(cells["n3"], "skipped", "{v:#}");
    if expected == "fail" {
        let f = &findings(&v, "host.container-memlock")[0];
        assert!(f["problem"].as_str().unwrap().contains("rlimit"), "{f}");
    }

    let s3 = net.docker_socket(3).display().to_string();
    rt.block_on(support::docker::load_busybox_for_arch(&s3, &image, "arm64"));
    let v = doctor_skipping(&net, &skip, &checks);
    assert_eq!(
        problems(&v),
        vec![p("cluster.image-arch", "n3", "fail")],
        "{v:#}"
    );
    assert_eq!(
        findings(&v, "cluster.image-arch")[0]["problem"],
        format!("{image} here is built for arm64, but this node is amd64")
    );
}
