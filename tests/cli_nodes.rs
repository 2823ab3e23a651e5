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
