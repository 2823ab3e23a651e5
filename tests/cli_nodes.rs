//! The cluster-file commands and argument checks that need no simulated node: `nodes` list,
//! add, rm; line-accurate errors for a hand-edited file; refused arguments exit 2.

use std::process::{Command, Output};

fn run(cluster: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .arg("--cluster")
        .arg(cluster)
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .expect("run spark-launch")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn nodes_add_list_and_rm_edit_the_cluster_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c/cluster.yaml");
    let out = run(&file, &["nodes"]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("no nodes"),
        "{}",
        text(&out.stdout)
    );

    assert!(
        run(&file, &["nodes", "add", "spark-a=169.254.3.7"])
            .status
            .success()
    );
    let out = run(
        &file,
        &["nodes", "add", "spark-b=nvidia@169.254.3.8:2222", "--head"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&file, &["nodes", "add", "spark-a=169.254.3.7"]);
    assert!(text(&out.stdout).contains("nothing changed"));

    let out = run(&file, &["nodes", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[1]["name"], "spark-b");
    assert_eq!(v[1]["port"], 2222);
    assert_eq!(v[1]["role"], "head");
    let out = run(&file, &["nodes"]);
    let table = text(&out.stdout);
    let a = table.find("spark-a").unwrap();
    let b = table.find("spark-b").unwrap();
    assert!(b < a, "the head is listed first:\n{table}");

    let out = run(&file, &["nodes", "rm", "spark-x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no node named spark-x"),
        "{}",
        text(&out.stderr)
    );
    assert!(run(&file, &["nodes", "rm", "spark-a"]).status.success());
    let out = run(&file, &["nodes", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}

#[test]
fn a_hand_edited_cluster_file_with_mistakes_is_refused_at_the_right_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(
        &file,
        "# my cluster\nnodes:\n  - name: a\n    addresses: [169.254.0.1]\n  - name: b\n    addresses: [169.254.0.2]\n    port: 99999\n",
    )
    .unwrap();
    for args in [
        &["nodes"][..],
        &["env"],
        &["trust"],
        &["nodes", "add", "c=1.2.3.4"],
    ] {
        let out = run(&file, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(&format!(
                "{}:7: nodes[1].port: 99999 is not a port number (1-65535)",
                file.display()
            )),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn commands_without_nodes_say_how_to_get_some() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("none.yaml");
    let out = run(&file, &["env"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("spark-launch discover --save"), "{err}");
    assert!(err.contains("--hosts"), "{err}");
    let out = run(&file, &["trust", "--hosts", "169.254.9.9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("trust needs at least two nodes"));
}

#[test]
fn malformed_hosts_and_snapshot_mixtures_are_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    let out = run(&file, &["env", "--hosts", "a b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("[NAME=][user@]host[:port]"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&file, &["env", "--hosts", "a,a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("names node a twice"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&file, &["env", "--hosts", "a", "--snapshot", "x=/tmp"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&file, &["discover", "--interface", "no-such-if0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no interface named no-such-if0"));
    let out = run(&file, &["discover", "--timeout", "0"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A cluster file as a user edits it: comments above, beside and between nodes, a blank line,
/// flow and block lists, a key order of their own.
const COMMENTED: &str = include_str!("fixtures/cluster-files/hand-edited.yaml");

#[test]
fn nodes_add_and_rm_change_only_the_lines_of_that_node_byte_for_byte() {
    // Seen once: `nodes add`/`nodes remove` dropped every comment of a hand-edited file and
    // reformatted it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, COMMENTED).unwrap();

    let out = run(&file, &["nodes", "add", "spark-1b3b=nvidia@169.254.12.8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let added = COMMENTED.replace(
        "    port: 2222\n# end of list\n",
        "    port: 2222\n  - name: spark-1b3b\n    addresses:\n    - 169.254.12.8\n    user: nvidia\n# end of list\n",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), added);

    // A second address for a known node rewrites that node's lines, nothing else.
    let out = run(&file, &["nodes", "add", "ws=10.0.0.6"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged = added.replace(
        "  - name: ws\n    addresses:\n      - 10.0.0.5   # eno2np1\n    port: 2222\n",
        "  - name: ws\n    addresses:\n    - 10.0.0.5\n    - 10.0.0.6\n    port: 2222\n",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), merged);

    let out = run(&file, &["nodes", "rm", "spark-1b3b"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let removed = merged.replace(
        "  - name: spark-1b3b\n    addresses:\n    - 169.254.12.8\n    user: nvidia\n",
        "",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), removed);

    let out = run(&file, &["nodes", "rm", "spark-1d84"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        removed.replace(
            "  - name: spark-1d84        # head, rank 0\n    user: nvidia\n    addresses: [169.254.12.7, \"spark-1d84.local\"]\n",
            ""
        )
    );
}

#[test]
fn a_cluster_file_that_cannot_be_edited_line_by_line_and_has_comments_is_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    let flow = "# mine\nnodes: [{name: a, addresses: [169.254.1.1]}]\n";
    std::fs::write(&file, flow).unwrap();
    let out = run(&file, &["nodes", "add", "b=169.254.1.2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("holds comments"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), flow);
    // Without comments there is nothing to lose: it is rewritten in the writer's layout.
    std::fs::write(&file, "nodes: [{name: a, addresses: [169.254.1.1]}]\n").unwrap();
    let out = run(&file, &["nodes", "add", "b=169.254.1.2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("- name: b")
    );
}

#[test]
fn a_binary_cluster_yaml_exits_2_not_1() {
    // Seen once: a binary cluster.yaml exited 1, as if an operation had failed.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, [0xff, 0xfe, 0x00, 0x01, 0x80, b'\n']).unwrap();
    for args in [&["nodes"][..], &["nodes", "add", "a=169.254.1.1"], &["env"]] {
        let out = run(&file, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("is not text (UTF-8)"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_new_config_folder_is_0700_and_the_cluster_file_0600() {
    // Seen once: `~/.config/spark-launch` was created 0755.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config/spark-launch/cluster.yaml");
    let out = run(&file, &["nodes", "add", "a=169.254.1.1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("config/spark-launch")), 0o700);
    assert_eq!(mode(&dir.path().join("config")), 0o700);
    assert_eq!(mode(&file), 0o600);
}

#[test]
fn node_names_dot_dot_dot_and_address_999_1_1_1_are_refused_on_the_command_line() {
    // Seen once: node names `.`/`..` and the address `999.1.1.1` were accepted.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    for (arg, want) in [
        ("..=169.254.1.1", "starting with a letter or a digit"),
        (".=169.254.1.1", "starting with a letter or a digit"),
        ("999.1.1.1", "is not an IPv4 address"),
        ("a=999.1.1.1", "is not an IPv4 address"),
    ] {
        let out = run(&file, &["nodes", "add", arg]);
        assert_eq!(out.status.code(), Some(2), "{arg}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(want),
            "{arg}: {}",
            text(&out.stderr)
        );
    }
    assert!(!file.exists(), "nothing was written");
    let out = run(&file, &["env", "--snapshot", "..=/tmp"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
