//! The NCCL of serving images on simulated nodes that each run their own dockerd
//! (tests/harness/simnet `sshd,dockerd`), with real NCCL builds inside the images
//! (tests/standin/fetch-nccl-wheels: 2.28.9 and 2.30.7 from PyPI, unpacked, never loaded):
//! the stand-in serving image carries 2.28.9 where NGC images keep theirs (a system folder in
//! its ld.so.cache), the stand-in of `nccl-build`'s image 2.30.7 in /opt/nccl/lib. spark-launch
//! runs inside the head as the test user: a live dry run and `doctor --image` read what the
//! containers load, then `vllm --nccl-from IMAGE` and `--nccl-from PATH` start the job for real
//! and the running containers see the mounted library first on their loader path.

mod hub_standin;
mod sim_serving;
mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use hub_standin::{HubStandin, tiny_repo};
use sim_serving::{docker_socket, hosts, remove_job, trust_all};
use support::standin::{nccl_wheels, run_script};
use support::{SimNet, describe, stderr, stdout};

const MODEL: &str = "spark-test/tiny";

/// Node 1's image on every other node (`docker save | docker load`: the same ID).
fn copy_image(net: &SimNet, tag: &str) {
    for i in 2..=net.len() {
        let line = format!(
            "docker -H unix://{} save {tag} | docker -H unix://{} load -q",
            docker_socket(net, 1).display(),
            docker_socket(net, i).display()
        );
        let out = Command::new("bash")
            .args(["-o", "pipefail", "-c", &line])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "load {tag} on n{i}: {}",
            describe(&out)
        );
    }
}

/// `docker exec` in a container on node `i`.
fn exec(net: &SimNet, i: usize, container: &str, sh: &str) -> String {
    let out = Command::new("docker")
        .args(["-H", &format!("unix://{}", docker_socket(net, i).display())])
        .args(["exec", container, "sh", "-c", sh])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exec in {container}: {}",
        describe(&out)
    );
    stdout(&out)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", describe(out)))
}

#[test]
fn serving_reads_the_images_nccl_on_the_nodes_and_nccl_from_comes_first_in_the_running_containers()
{
    let lib = nccl_wheels();
    let old_lib = lib.join("nvidia-nccl-cu12-2.28.9/libnccl.so.2");
    let new_lib = lib.join("nvidia-nccl-cu13-2.30.7/libnccl.so.2");
    let net = SimNet::builder(2).services("sshd,dockerd").tag("l").up();
    trust_all(&net);
    let serving = format!("{}standin-nccl2.28:test", net.prefix());
    let nccl_build = format!("{}nccl-build-2.30.7:test", net.prefix());
    let sock1 = format!("unix://{}", docker_socket(&net, 1).display());
    run_script(
        "tests/standin/build-image",
        &[
            "--no-ray",
            "--nccl",
            old_lib.to_str().unwrap(),
            &serving,
            &sock1,
        ],
    );
    run_script(
        "tests/standin/build-nccl-image",
        &[&nccl_build, new_lib.to_str().unwrap(), &sock1],
    );
    copy_image(&net, &serving);
    copy_image(&net, &nccl_build);
    // --nccl-from PATH: the same library in a folder of every node.
    for i in 1..=net.len() {
        let dir = net.home(i).join("nccl-2.30.7");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::hard_link(&new_lib, dir.join("libnccl.so.2"))
            .or_else(|_| std::fs::copy(&new_lib, dir.join("libnccl.so.2")).map(|_| ()))
            .unwrap();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let netns = PathBuf::from("/var/run/netns").join(format!("{}n1", net.prefix()));
    let hub = rt.block_on(HubStandin::start_in_netns(
        vec![tiny_repo(MODEL, 200_000)],
        &netns,
    ));
    let h = hosts(&net);
    let sl = |args: &[&str]| -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--hosts",
            &h,
            "--image",
            &serving,
            "--gpus",
            "none",
            "--ulimit",
            "memlock=8388608",
            "--ulimit",
            "nofile=16384",
        ]);
        net.spark_launch_with(1, &all, &[("HF_ENDPOINT", hub.url.as_str())], None)
    };

    // A live dry run reads what each node's container would load: the image's own 2.28.9.
    let out = sl(&["--json", "vllm", MODEL, "--tp", "2", "--dry-run"]);
    assert!(out.status.success(), "{}", describe(&out));
    let plan = json(&out);
    for n in plan["nccl"]["nodes"].as_array().unwrap() {
        assert_eq!(n["state"], "known", "{n}");
        assert_eq!(n["version"], "2.28.9+cuda12.9", "{n}");
        assert_eq!(n["via"], "ld-so-cache", "{n}");
        assert_eq!(n["origin"], "image", "{n}");
    }

    // doctor reads the same through every node's engine.
    let out = net.spark_launch(
        1,
        &[
            "doctor",
            "--json",
            "--hosts",
            &h,
            "--check",
            "cluster.image-nccl",
            "--image",
            &serving,
        ],
    );
    let v = json(&out);
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "cluster.image-nccl")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(check["status"], "ok", "{check}");
    let notes = check["notes"].to_string();
    assert!(
        notes.contains("NCCL 2.28.9+cuda12.9 from /usr/lib/x86_64-linux-gnu/libnccl.so.2"),
        "{check}"
    );

    // --nccl-from IMAGE, for real: staged into a volume, checked, first on the loader path.
    let job = "sl17from";
    let out = sl(&[
        "vllm",
        MODEL,
        "--tp",
        "2",
        "--job",
        job,
        "-d",
        "--timeout",
        "180",
        "--nccl-from",
        &nccl_build,
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let progress = stderr(&out);
    for step in [
        "Read the NCCL of",
        "✓ Stage the NCCL of",
        "✓ Check the NCCL each container loads",
        "NCCL 2.30.7+cuda13.3 on",
    ] {
        assert!(progress.contains(step), "no `{step}` in:\n{progress}");
    }
    for i in 1..=net.len() {
        let name = format!("sl-{job}-{}", net.hostname(i));
        let seen = exec(
            &net,
            i,
            &name,
            "echo \"$LD_LIBRARY_PATH\"; for d in $(echo \"$LD_LIBRARY_PATH\" | tr : ' '); do [ -e \"$d/libnccl.so.2\" ] && { echo \"$d/libnccl.so.2\"; grep -a -o -m1 -E 'NCCL version [0-9.]+[+]cuda[0-9.]+' \"$d/libnccl.so.2\"; break; }; done; grep -a -o -m1 -E 'NCCL version [0-9.]+[+]cuda[0-9.]+' /usr/lib/x86_64-linux-gnu/libnccl.so.2",
        );
        let lines: Vec<&str> = seen.lines().collect();
        assert_eq!(
            lines,
            vec![
                "/opt/spark-launch/nccl",
                "/opt/spark-launch/nccl/libnccl.so.2",
                "NCCL version 2.30.7+cuda13.3",
                "NCCL version 2.28.9+cuda12.9",
            ],
            "n{i}: the first libnccl.so.2 on the loader path is the mounted 2.30.7; the image's 2.28.9 stays behind it"
        );
    }
    remove_job(&net, job);

    // --nccl-from PATH: a folder of every node, bind-mounted.
    let job = "sl17path";
    let out = sl(&[
        "vllm",
        MODEL,
        "--tp",
        "2",
        "--job",
        job,
        "-d",
        "--timeout",
        "180",
        "--nccl-from",
        "/home/sparkuser/nccl-2.30.7",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    for i in 1..=net.len() {
        let name = format!("sl-{job}-{}", net.hostname(i));
        let seen = exec(
            &net,
            i,
            &name,
            "grep -a -o -m1 -E 'NCCL version [0-9.]+[+]cuda[0-9.]+' /opt/spark-launch/nccl/libnccl.so.2",
        );
        assert_eq!(seen.trim(), "NCCL version 2.30.7+cuda13.3");
    }
    remove_job(&net, job);
    drop(hub);
}
