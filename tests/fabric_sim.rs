//! `spark-launch fabric` on simulated nodes (tests/harness/simnet): veth "cables" straight from
//! node to node, twin to twin, and no fabric address at all (fresh Sparks: carrier only).
//! spark-launch runs inside node 1 as the test user, reaches the nodes over the management
//! network with real sshd, and gets root through the real sudo with the user's password
//! (`--password-stdin`, the way a script would give it).
//!
//! What is simulated, and said so: a simulated node runs no systemd-networkd, so `netplan
//! apply` is simnet's stand-in (`tests/harness/netplan-standin`): it runs the real `netplan
//! generate` on the node's files and applies the generated addresses and MTU with `ip`, then
//! updates the fake RDMA GID tables as the kernel would. Everything spark-launch does around it
//! — the link probe, the plan, staging, the detached attempt with its deadline, the
//! confirmation, the verification, the rollback — is its real code path.

mod support;

use std::time::Instant;

use support::{Cabling, PASSWORD, SimNet, USER, describe, stderr, stdout};

const PW: &[u8] = b"spark-launch-test\n";

fn hosts(net: &SimNet) -> String {
    (1..=net.len())
        .map(|i| format!("n{i}={USER}@{}", net.mgmt_addr(i)))
        .collect::<Vec<_>>()
        .join(",")
}

/// `fabric SUB --hosts HOSTS --password-stdin EXTRA...`: the password goes on stdin (`PW`).
fn fabric_args<'a>(sub: &'a str, hosts: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["fabric", sub, "--hosts", hosts, "--password-stdin"];
    args.extend_from_slice(extra);
    args
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("no JSON on stdout ({e}): {}", describe(o)))
}

/// A node's interfaces and addresses as `ip -j addr` shows them, less the kernel's own passing
/// state of an address (IPv6 duplicate address detection marks a fresh link-local address
/// `tentative` for a second or two), which says nothing about what spark-launch changed.
fn ip_addr(net: &SimNet, i: usize) -> serde_json::Value {
    let out = net.exec_root(i, &["ip", "-j", "addr", "show"]);
    assert!(out.status.success(), "{}", describe(&out));
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for link in v.as_array_mut().into_iter().flatten() {
        for addr in link["addr_info"].as_array_mut().into_iter().flatten() {
            if let Some(addr) = addr.as_object_mut() {
                addr.remove("tentative");
            }
        }
    }
    v
}

fn root(net: &SimNet, i: usize, cmd: &str) -> String {
    let out = net.exec_root(i, &["sh", "-c", cmd]);
    assert!(out.status.success(), "n{i}: {cmd}: {}", describe(&out));
    stdout(&out)
}

fn links(v: &serde_json::Value) -> Vec<(String, String)> {
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["a"].as_str().unwrap().to_string(),
                l["b"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_link_probe_finds_a_direct_cable_twin_by_twin_and_leaves_the_unplugged_port_alone() {
    let net = SimNet::builder(2)
        .services("sshd")
        .cabling(Cabling::Direct)
        .no_fabric_addr()
        .admin()
        .tag("fa")
        .up();
    let h = hosts(&net);
    let out = net.spark_launch_with(1, &fabric_args("plan", &h, &["--json"]), &[], Some(PW));
    assert!(out.status.success(), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["topology"], "direct");
    assert_eq!(
        links(&v),
        vec![
            ("n1:enp1s0f1np1".into(), "n2:enp1s0f1np1".into()),
            ("n1:enP2p1s0f1np1".into(), "n2:enP2p1s0f1np1".into()),
        ]
    );
    assert_eq!(v["links"][0]["subnet"], "192.168.100.0/24");
    assert_eq!(v["links"][1]["subnet"], "192.168.101.0/24");
    let n2 = &v["nodes"]["n2"];
    assert_eq!(n2["addresses"]["enp1s0f1np1"], "192.168.100.2/24");
    assert_eq!(n2["addresses"]["enP2p1s0f1np1"], "192.168.101.2/24");
    // The unplugged port (enp1s0f0np0 and its twin: up, no carrier) is in no link and gets
    // nothing; the management interface neither.
    let mtu = n2["mtu"].as_object().unwrap();
    assert_eq!(
        mtu.keys().cloned().collect::<Vec<_>>(),
        vec!["enP2p1s0f1np1", "enp1s0f1np1"]
    );
    assert!(!n2["netplan"].as_str().unwrap().contains("enp1s0f0np0"));
    assert!(!n2["netplan"].as_str().unwrap().contains("enP7s7"));
    // The plan changed nothing.
    assert!(root(&net, 2, "ls /etc/netplan").trim().is_empty());
    // The password was never on a command line or in the output.
    assert!(!stdout(&out).contains(PASSWORD) && !stderr(&out).contains(PASSWORD));

    // A file that already configures a planned interface stops the apply, naming the fix.
    root(
        &net,
        2,
        "printf 'network:\\n  version: 2\\n  ethernets:\\n    enp1s0f1np1:\\n      dhcp4: no\\n      mtu: 1500\\n' > /etc/netplan/40-cx7.yaml && chmod 600 /etc/netplan/40-cx7.yaml",
    );
    let out = net.spark_launch_with(
        1,
        &["fabric", "apply", "--hosts", &h, "--password-stdin"],
        &[],
        Some(PW),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("n2: /etc/netplan/40-cx7.yaml configures enp1s0f1np1")
            && stderr(&out).contains("--replace"),
        "{}",
        describe(&out)
    );
    // --dry-run --replace: each node's file diff and the file that would move; still nothing
    // changed.
    let out = net.spark_launch_with(
        1,
        &fabric_args("apply", &h, &["--dry-run", "--replace"]),
        &[],
        Some(PW),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains("would move /etc/netplan/40-cx7.yaml"),
        "{text}"
    );
    assert!(
        text.contains("+++ /etc/netplan/40-spark-launch.yaml"),
        "{text}"
    );
    assert!(text.contains("+        - 192.168.100.2/24"), "{text}");
    assert_eq!(root(&net, 2, "ls /etc/netplan").trim(), "40-cx7.yaml");
}

#[test]
fn the_link_probe_finds_a_ring_of_three_and_plans_a_subnet_per_cable_per_twin() {
    let net = SimNet::builder(3)
        .services("sshd")
        .cabling(Cabling::Ring)
        .no_fabric_addr()
        .admin()
        .tag("fr")
        .up();
    let out = net.spark_launch_with(
        1,
        &fabric_args("plan", &hosts(&net), &["--json"]),
        &[],
        Some(PW),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["topology"], "ring");
    let l = links(&v);
    assert_eq!(l.len(), 6, "{v:#}");
    for (a, b) in [
        ("n1:enp1s0f1np1", "n2:enp1s0f0np0"),
        ("n1:enP2p1s0f1np1", "n2:enP2p1s0f0np0"),
        ("n2:enp1s0f1np1", "n3:enp1s0f0np0"),
        ("n1:enp1s0f0np0", "n3:enp1s0f1np1"),
    ] {
        assert!(
            l.contains(&(a.to_string(), b.to_string())),
            "{a} ↔ {b} in {l:?}"
        );
    }
    let mut subnets: Vec<&str> = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["subnet"].as_str().unwrap())
        .collect();
    subnets.sort();
    subnets.dedup();
    assert_eq!(subnets.len(), 6);
    for n in ["n1", "n2", "n3"] {
        assert_eq!(v["nodes"][n]["addresses"].as_object().unwrap().len(), 4);
    }
}

fn timed(
    net: &SimNet,
    what: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    times: &mut Vec<(String, f64)>,
) -> std::process::Output {
    let t = Instant::now();
    let out = net.spark_launch_with(1, args, &[], stdin);
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "journey: {what}: {secs:.1} s (exit {:?})",
        out.status.code()
    );
    times.push((what.to_string(), secs));
    out
}

/// `check node status: first finding` for every cell that is neither ok nor skipped.
fn problems(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in v["checks"].as_array().unwrap() {
        for (node, status) in c["nodes"].as_object().unwrap() {
            let s = status.as_str().unwrap();
            if s != "ok" && s != "skipped" {
                let finding = c["findings"]
                    .as_array()
                    .and_then(|f| f.iter().find(|f| f["node"] == node.as_str()))
                    .map(|f| f["problem"].to_string())
                    .unwrap_or_default();
                out.push(format!("{} {node} {s}: {finding}", c["id"]));
            }
        }
    }
    out
}

const SKIP: [&str; 4] = [
    "host.nvidia-driver",
    "host.memlock",
    "host.docker",
    "host.gpu-runtime",
];

#[test]
fn two_fresh_sparks_go_from_no_address_to_a_passing_doctor_and_rollback_restores_them_exactly() {
    let net = SimNet::builder(2)
        .services("sshd,avahi")
        .cabling(Cabling::Direct)
        .no_fabric_addr()
        .admin()
        .tag("fj")
        .up();
    let before = [ip_addr(&net, 1), ip_addr(&net, 2)];
    let h = hosts(&net);
    let mut times = Vec::new();

    // fabric apply: probe, plan, stage, apply with the safety net, confirm, verify.
    let out = timed(
        &net,
        "fabric apply",
        &["fabric", "apply", "--hosts", &h, "--password-stdin"],
        Some(PW),
        &mut times,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.contains("confirmed"), "{text}");
    for i in [1, 2] {
        let a = root(
            &net,
            i,
            "ip -br -4 addr show dev enp1s0f1np1; ip -br -4 addr show dev enP2p1s0f1np1",
        );
        assert!(a.contains(&format!("192.168.100.{i}/24")), "{a}");
        assert!(a.contains(&format!("192.168.101.{i}/24")), "{a}");
        assert_eq!(
            root(&net, i, "cat /sys/class/net/enp1s0f1np1/mtu").trim(),
            "9000"
        );
        assert_eq!(
            root(&net, i, "stat -c %a /etc/netplan/40-spark-launch.yaml").trim(),
            "600"
        );
        // The unplugged port and the management interface are untouched.
        assert_eq!(
            root(&net, i, "cat /sys/class/net/enp1s0f0np0/mtu").trim(),
            "1500"
        );
        assert!(root(&net, i, "ip -br -4 addr show dev enP7s7").contains("10.231.0."));
    }

    // A second apply finds everything in place: nothing to change, verified again.
    let out = timed(
        &net,
        "fabric apply (again)",
        &fabric_args("apply", &h, &["--json"]),
        Some(PW),
        &mut times,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["nothing_to_do"], true, "{v:#}");
    assert!(
        v["links"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["skipped"].is_null())
    );

    // discover finds the other node on the new fabric, trust sets up SSH, doctor passes.
    let out = timed(
        &net,
        "discover --save",
        &["discover", "--save"],
        None,
        &mut times,
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("192.168.10"), "{}", describe(&out));
    let out = timed(
        &net,
        "trust",
        &["trust", "--password-stdin"],
        Some(PW),
        &mut times,
    );
    assert!(out.status.success(), "{}", describe(&out));
    let mut args = vec!["doctor", "--json"];
    for s in SKIP {
        args.extend(["--skip", s]);
    }
    let out = timed(&net, "doctor", &args, None, &mut times);
    let v = json(&out);
    assert_eq!(problems(&v), Vec::<String>::new(), "{}", stderr(&out));
    assert!(out.status.success(), "{}", describe(&out));
    let check = |id: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id}"))["status"]
            .clone()
    };
    assert_eq!(check("fabric.mtu-path"), "ok");
    assert_eq!(check("fabric.twins-used"), "ok");
    assert_eq!(check("fabric.cabling-ports"), "ok");

    // fabric test: both twins of the cable at once. The simulated nodes have no RDMA, so
    // `ib_write_bw` is simnet's stand-in (perftest's port check and report format, the
    // figure measured over TCP on the fabric veths): the plan, the runs on both nodes, the
    // parser and the verdict are spark-launch's own.
    let out = timed(
        &net,
        "fabric test",
        &["fabric", "test", "--json", "--duration", "2"],
        None,
        &mut times,
    );
    let v = json(&out);
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{v:#}");
    assert!(
        pairs
            .iter()
            .all(|p| p["gbps"].as_f64().unwrap_or(0.0) > 0.0),
        "{v:#}"
    );
    assert_eq!(v["cables"][0]["twin_pairs"], 2);
    // The fake sysfs says 100 Gb/s per device, two twins per port: 50 Gb/s allowed each.
    assert_eq!(pairs[0]["allowed_gbps"], 50.0);
    assert_eq!(
        out.status.code(),
        Some(if v["verdict"] == "fail" { 1 } else { 0 }),
        "{}",
        describe(&out)
    );

    // rollback: spark-launch's file gone, every interface exactly as before the apply.
    let out = timed(
        &net,
        "fabric rollback",
        &["fabric", "rollback", "--hosts", &h, "--password-stdin"],
        Some(PW),
        &mut times,
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("the planned addresses are gone"),
        "{}",
        describe(&out)
    );
    assert_eq!([ip_addr(&net, 1), ip_addr(&net, 2)], before);
    assert!(root(&net, 1, "ls /etc/netplan").trim().is_empty());
    eprintln!("journey timings: {times:?}");
}

#[test]
fn a_plan_that_cuts_the_connection_is_undone_by_the_node_itself() {
    // The nodes carry link-local addresses on the fabric (169.254.100.i/16) and spark-launch
    // reaches node 2 there, as a cluster file written by `discover` does. The plan replaces
    // them with a subnet per twin, so applying it cuts that connection.
    let net = SimNet::builder(2)
        .services("sshd")
        .cabling(Cabling::Direct)
        .admin()
        .tag("fc")
        .up();
    let before = [ip_addr(&net, 1), ip_addr(&net, 2)];
    let h = format!(
        "n1={USER}@{},n2={USER}@{}",
        net.mgmt_addr(1),
        net.fabric_addr(2)
    );
    let t = Instant::now();
    let out = net.spark_launch_with(
        1,
        &fabric_args("apply", &h, &["--rollback-after", "8"]),
        &[],
        Some(PW),
    );
    eprintln!("cut: fabric apply took {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("reaches n2 at 169.254.100.2, on enp1s0f1np1, which this plan readdresses"),
        "{}",
        describe(&out)
    );
    let text = stdout(&out);
    assert!(text.contains("rolled back by itself"), "{}", describe(&out));
    assert!(err.contains("was not kept"), "{}", describe(&out));
    // Both nodes are exactly as they were, and spark-launch's file is gone.
    assert_eq!([ip_addr(&net, 1), ip_addr(&net, 2)], before);
    for i in [1, 2] {
        assert!(root(&net, i, "ls /etc/netplan").trim().is_empty());
    }
}
