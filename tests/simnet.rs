//! The simulated-node harness itself: nodes have their own hostname, the production probe sees
//! Spark-like twins on them, sshd accepts the test user's password, avahi publishes `_ssh._tcp`,
//! and `down` leaves nothing behind.

mod support;

use support::{SimNet, describe, stdout};

#[test]
fn a_simulated_node_has_its_own_hostname_home_and_twins_that_the_real_probe_sees() {
    let net = SimNet::builder(2).services("sshd").up();
    let out = net.exec_user(2, &["hostname"], &[], None);
    assert_eq!(stdout(&out).trim(), net.hostname(2), "{}", describe(&out));

    let out = net.spark_launch(1, &["probe", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let facts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(facts["hostname"], net.hostname(1));
    let devices: Vec<(String, Vec<String>)> = facts["rdma_devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["netdevs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    assert!(devices.contains(&("rocep1s0f1".into(), vec!["enp1s0f1np1".into()])));
    assert!(devices.contains(&("roceP2p1s0f1".into(), vec!["enP2p1s0f1np1".into()])));
    let fabric = facts["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "enp1s0f1np1")
        .unwrap();
    assert_eq!(fabric["ipv4"][0]["addr"], net.fabric_addr(1).to_string());

    let out = net.exec_user(1, &["sh", "-c", "echo $HOME; id -un"], &[], None);
    assert_eq!(
        stdout(&out),
        format!("/home/{0}\n{0}\n", support::USER),
        "{}",
        describe(&out)
    );
    assert!(net.home(1).is_dir());
}

#[test]
fn sshd_on_a_node_takes_the_test_users_password_from_another_node() {
    let net = SimNet::builder(2).services("sshd").up();
    let script = format!(
        "printf '#!/bin/sh\\necho {pw}\\n' > ~/askpass && chmod 700 ~/askpass && \
         SSH_ASKPASS=$HOME/askpass SSH_ASKPASS_REQUIRE=force \
         ssh -o StrictHostKeyChecking=accept-new -o HostKeyAlias=n2 {addr} hostname",
        pw = support::PASSWORD,
        addr = net.fabric_addr(2)
    );
    let out = net.exec_user(1, &["sh", "-c", &script], &[], None);
    assert_eq!(stdout(&out).trim(), net.hostname(2), "{}", describe(&out));
}

#[test]
fn avahi_on_every_node_publishes_ssh_and_avahi_browse_sees_them_all() {
    let net = SimNet::builder(3).services("dbus,avahi").up();
    let out = net.exec_root(1, &["avahi-browse", "-p", "-r", "-f", "-t", "_ssh._tcp"]);
    let text = stdout(&out);
    for i in 1..=3 {
        let line = format!(
            ";enp1s0f1np1;IPv4;{};SSH Remote Terminal;local;{}.local;{};22;",
            net.hostname(i),
            net.hostname(i),
            net.fabric_addr(i)
        );
        assert!(text.contains(&line), "missing {line}\n{}", describe(&out));
    }
}

#[test]
fn down_removes_every_namespace_and_folder_of_the_prefix() {
    let mut net = SimNet::builder(2).services("sshd").up();
    let prefix = net.prefix().to_string();
    net.down();
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(&prefix),
        "namespaces left: {}",
        String::from_utf8_lossy(&list.stdout)
    );
    assert!(!support::simnet_root().join(&prefix).exists());
}
