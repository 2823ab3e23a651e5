//! `spark-launch trust` against real sshd on simulated nodes, run on node 1 as the test user:
//! from zero with a password, idempotent, user files preserved byte for byte, a wrong password
//! writes nothing, a node with sshd down is reported while the others are still done. Then the
//! shared resolver (`env` on the live cluster) over the trust it set up.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::{PASSWORD, SimNet, describe, stderr, stdout};

/// `--hosts` naming every node by its hostname at its fabric address.
fn hosts(net: &SimNet, nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(|&i| format!("{}={}", net.hostname(i), net.fabric_addr(i)))
        .collect::<Vec<_>>()
        .join(",")
}

fn trust(net: &SimNet, args: &[&str], password: Option<&str>) -> std::process::Output {
    let mut a = vec!["trust", "--json"];
    a.extend_from_slice(args);
    let stdin = password.map(|p| format!("{p}\n"));
    if stdin.is_some() {
        a.push("--password-stdin");
    }
    net.spark_launch_with(1, &a, &[], stdin.as_deref().map(str::as_bytes))
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", describe(out)))
}

/// Every file under `dir` (relative path → bytes).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

fn matrix_ok(v: &serde_json::Value, net: &SimNet, nodes: &[usize]) {
    let m = v["matrix"].as_array().unwrap();
    assert_eq!(m.len(), nodes.len() * (nodes.len() - 1), "{v:#}");
    for cell in m {
        assert_eq!(cell["ok"], true, "{cell}");
        assert_eq!(cell["hostname"], cell["to"], "{cell}");
    }
    let names: Vec<String> = nodes.iter().map(|&i| net.hostname(i)).collect();
    for cell in m {
        assert!(names.contains(&cell["from"].as_str().unwrap().to_string()));
    }
}

#[test]
fn trust_from_zero_on_three_nodes_with_a_password_then_every_pair_can_ssh_with_keys_only() {
    let net = SimNet::builder(3).services("sshd,avahi").up();
    let out = net.spark_launch(1, &["discover", "--save"]);
    assert!(out.status.success(), "{}", describe(&out));

    let out = trust(&net, &[], Some(PASSWORD));
    assert!(out.status.success(), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["changed"], true);
    matrix_ok(&v, &net, &[1, 2, 3]);

    // Public keys only: every node has its own private key, and no other node's.
    let private: Vec<Vec<u8>> = (1..=3)
        .map(|i| std::fs::read(net.home(i).join(".ssh/id_ed25519")).unwrap())
        .collect();
    assert!(private[0] != private[1] && private[1] != private[2]);
    for i in 1..=3 {
        let all = files(&net.home(i));
        for (j, key) in private.iter().enumerate() {
            let holders = all.values().filter(|b| b == &key).count();
            assert_eq!(
                holders,
                usize::from(j + 1 == i),
                "node {i} holds node {}'s key",
                j + 1
            );
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(net.home(i).join(".ssh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o700,
            "~/.ssh on n{i} was created with mode 0700"
        );
        let auth = std::fs::read_to_string(net.home(i).join(".ssh/authorized_keys")).unwrap();
        assert_eq!(auth.lines().count(), 2, "{auth}");
        let config = std::fs::read_to_string(net.home(i).join(".ssh/config")).unwrap();
        assert!(!config.contains("Host *"), "{config}");
        assert_eq!(
            config.matches("\nHost ").count() + usize::from(config.starts_with("Host ")),
            2
        );
    }
    // And a password is never needed again: BatchMode from the test user to every node.
    for i in 2..=3 {
        let o = net.exec_user(
            1,
            &["ssh", "-o", "BatchMode=yes", &net.hostname(i), "hostname"],
            &[],
            None,
        );
        assert_eq!(stdout(&o).trim(), net.hostname(i), "{}", describe(&o));
    }
}

#[test]
fn a_second_trust_run_changes_nothing_and_says_so() {
    let net = SimNet::builder(3).services("sshd").up();
    let h = hosts(&net, &[1, 2, 3]);
    let out = trust(&net, &["--hosts", &h], Some(PASSWORD));
    assert!(out.status.success(), "{}", describe(&out));
    let before: Vec<_> = (1..=3).map(|i| files(&net.home(i))).collect();

    // No password this time: keys only.
    let out = net.spark_launch(1, &["trust", "--hosts", &h]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout(&out).contains("nothing to change: every node already trusts every other node"),
        "{}",
        describe(&out)
    );
    let after: Vec<_> = (1..=3).map(|i| files(&net.home(i))).collect();
    assert_eq!(before, after, "a second run must not write anything");
    let out = trust(&net, &["--hosts", &h], None);
    let v = json(&out);
    assert_eq!(v["changed"], false);
    matrix_ok(&v, &net, &[1, 2, 3]);
}

#[test]
fn existing_authorized_keys_and_ssh_config_are_preserved_byte_for_byte() {
    let net = SimNet::builder(2).services("sshd").up();
    let keys = "# my laptop\nfrom=\"10.0.0.0/8\",no-agent-forwarding ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHDL0oPcK8nd+5t7Xb0Wgp6qkE1jLwGeFVZ1AA0kEYBS me@laptop\n\n  ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDrVm me@old";
    let config = "Host *\n    ServerAliveInterval 30\n\nMatch host *.corp\n  User someone\n# last line, no newline";
    for i in 1..=2 {
        let ssh = net.home(i).join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        std::fs::write(ssh.join("authorized_keys"), keys).unwrap();
        std::fs::write(ssh.join("config"), config).unwrap();
        let o = net.exec_root(
            i,
            &["chown", "-R", "sparkuser:sparkuser", "/home/sparkuser/.ssh"],
        );
        assert!(o.status.success(), "{}", describe(&o));
        let o = net.exec_root(i, &["chmod", "-R", "go-rwx", "/home/sparkuser/.ssh"]);
        assert!(o.status.success(), "{}", describe(&o));
    }
    let out = trust(&net, &["--hosts", &hosts(&net, &[1, 2])], Some(PASSWORD));
    assert!(out.status.success(), "{}", describe(&out));
    matrix_ok(&json(&out), &net, &[1, 2]);
    for i in 1..=2 {
        let ssh = net.home(i).join(".ssh");
        let k = std::fs::read(ssh.join("authorized_keys")).unwrap();
        let c = std::fs::read(ssh.join("config")).unwrap();
        assert!(
            k.starts_with(keys.as_bytes()),
            "authorized_keys on n{i} changed its old bytes"
        );
        assert!(
            c.starts_with(config.as_bytes()),
            "config on n{i} changed its old bytes"
        );
        assert!(k.len() > keys.len() && c.len() > config.len());
    }
    // Running again keeps everything, old and new, byte for byte.
    let before: Vec<_> = (1..=2).map(|i| files(&net.home(i))).collect();
    let out = trust(&net, &["--hosts", &hosts(&net, &[1, 2])], None);
    assert!(out.status.success(), "{}", describe(&out));
    let after: Vec<_> = (1..=2).map(|i| files(&net.home(i))).collect();
    assert_eq!(before, after);
}

#[test]
fn a_wrong_password_is_a_clear_error_and_nothing_is_written_anywhere() {
    let net = SimNet::builder(3).services("sshd").up();
    let before: Vec<_> = (1..=3).map(|i| files(&net.home(i))).collect();
    let out = trust(
        &net,
        &["--hosts", &hosts(&net, &[1, 2, 3])],
        Some("not-the-password"),
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    for i in 2..=3 {
        assert!(
            err.contains(&format!(
                "{}: ssh {}: wrong password",
                net.hostname(i),
                net.fabric_addr(i)
            )),
            "{err}"
        );
    }
    assert!(err.contains("nothing was changed anywhere"), "{err}");
    let after: Vec<_> = (1..=3).map(|i| files(&net.home(i))).collect();
    assert_eq!(before, after, "a failed first contact must write nothing");
    for i in 1..=3 {
        assert!(!net.home(i).join(".ssh").exists(), "~/.ssh created on n{i}");
    }
}

#[test]
fn a_node_whose_sshd_is_down_is_reported_and_the_others_are_still_done() {
    let net = SimNet::builder(3).services("sshd").up();
    net.stop(3, "sshd");
    let out = trust(&net, &["--hosts", &hosts(&net, &[1, 2, 3])], Some(PASSWORD));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["ok"], false);
    let why = v["failed"][net.hostname(3)].as_str().unwrap();
    assert!(why.contains("connection refused"), "{why}");
    matrix_ok(&v, &net, &[1, 2]);
    assert!(
        stderr(&out).contains(&format!(
            "{}: ssh {}: connection refused",
            net.hostname(3),
            net.fabric_addr(3)
        )),
        "{}",
        describe(&out)
    );
    assert!(!net.home(3).join(".ssh").exists());
    // The text report shows the matrix with the failed node marked.
    let out = net.spark_launch(1, &["trust", "--hosts", &hosts(&net, &[1, 2, 3])]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stdout(&out).contains("✗ (node failed)"),
        "{}",
        describe(&out)
    );
}

#[test]
fn env_probes_a_live_cluster_over_the_trust_it_set_up() {
    let net = SimNet::builder(3).services("sshd").up();
    let h = hosts(&net, &[1, 2, 3]);
    let out = trust(&net, &["--hosts", &h], Some(PASSWORD));
    assert!(out.status.success(), "{}", describe(&out));
    for i in 1..=3 {
        let out = net.spark_launch(
            1,
            &[
                "nodes",
                "add",
                &format!("{}={}", net.hostname(i), net.fabric_addr(i)),
            ],
        );
        assert!(out.status.success(), "{}", describe(&out));
    }
    let out = net.spark_launch(1, &["env", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["head"], net.hostname(1));
    for i in 1..=3 {
        let env = &v["nodes"][net.hostname(i)]["env"];
        assert_eq!(env["VLLM_HOST_IP"], net.fabric_addr(i).to_string(), "{v:#}");
        assert_eq!(env["NCCL_IB_HCA"], "rocep1s0f1,roceP2p1s0f1", "{v:#}");
    }
    // --nodes picks a subset of the cluster file, --hosts bypasses it.
    let out = net.spark_launch(1, &["env", "--json", "--nodes", &net.hostname(3)]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(json(&out)["head"], net.hostname(3));
    let out = net.spark_launch(1, &["env", "--json", "--nodes", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("no node named nope"),
        "{}",
        describe(&out)
    );
    // A node that cannot be reached fails the command, naming it.
    net.stop(2, "sshd");
    let out = net.spark_launch(1, &["env", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains(&net.hostname(2)),
        "{}",
        describe(&out)
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn a_dry_run_lists_what_would_change_and_writes_nothing() {
    let net = SimNet::builder(2).services("sshd").up();
    let before: Vec<_> = (1..=2).map(|i| files(&net.home(i))).collect();
    let out = trust(
        &net,
        &["--dry-run", "--hosts", &hosts(&net, &[1, 2])],
        Some(PASSWORD),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v = json(&out);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["would_change"], true);
    assert_eq!(v["changed"], false);
    let c = v["changes"][net.hostname(2)].to_string();
    assert!(c.contains("would create its key"), "{c}");
    assert!(c.contains("authorized 1 key"), "{c}");
    let after: Vec<_> = (1..=2).map(|i| files(&net.home(i))).collect();
    assert_eq!(before, after);
    assert!(!net.home(2).join(".ssh").exists());
}

#[test]
fn on_a_terminal_trust_asks_each_node_that_wants_one_for_its_password_once() {
    let net = SimNet::builder(3).services("sshd").up();
    let h = hosts(&net, &[1, 2, 3]);
    let bin = net.binary().display().to_string();
    // `script` gives spark-launch a terminal; the two typed lines answer the two prompts.
    let typed = format!("{PASSWORD}\n{PASSWORD}\n");
    let out = net.exec_user(
        1,
        &[
            "script",
            "-qec",
            &format!("{bin} trust --hosts {h}"),
            "/dev/null",
        ],
        &[],
        Some(typed.as_bytes()),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    for i in [2, 3] {
        let prompt = format!(
            "{} ({}@{}) password: ",
            net.hostname(i),
            support::USER,
            net.fabric_addr(i)
        );
        assert_eq!(text.matches(&prompt).count(), 1, "{text}");
    }
    assert!(
        !text.contains(&format!("{} (", net.hostname(1))),
        "no prompt for this machine: {text}"
    );

    // With --same-password one prompt serves every node (here: after their keys were removed).
    for i in [2, 3] {
        std::fs::remove_file(net.home(i).join(".ssh/authorized_keys")).unwrap();
    }
    let out = net.exec_user(
        1,
        &[
            "script",
            "-qec",
            &format!("{bin} trust --same-password --hosts {h}"),
            "/dev/null",
        ],
        &[],
        Some(format!("{PASSWORD}\n").as_bytes()),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout(&out)
            .matches("password for every node that asks: ")
            .count(),
        1
    );
}

#[test]
fn without_a_terminal_or_password_stdin_a_node_that_wants_a_password_says_how_to_give_one() {
    let net = SimNet::builder(2).services("sshd").up();
    let out = net.spark_launch(1, &["trust", "--hosts", &hosts(&net, &[1, 2])]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the node asks for a password: run in a terminal, or pass --password-stdin"),
        "{err}"
    );
    assert!(!net.home(1).join(".ssh").exists() && !net.home(2).join(".ssh").exists());
}
