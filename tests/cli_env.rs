//! `spark-launch env` as a user runs it: formats, exit codes and messages.

use std::path::Path;
use std::process::{Command, Output};

mod support;
use support::fixtures::snapshot_args;

fn run(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spark-launch"))
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

fn args(prefix: &[&str], fixture: &str) -> Vec<String> {
    let mut a: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    a.extend(snapshot_args(fixture));
    a
}

#[test]
fn env_json_prints_only_json_with_the_documented_shape() {
    let out = run(&args(&["env", "--json"], "seed-001-two-sparks-both-twins"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is pure JSON");
    assert_eq!(v["topology"], "direct");
    assert_eq!(v["head"], "spark");
    assert_eq!(
        v["nodes"]["spark2"]["env"]["NCCL_IB_HCA"],
        "rocep1s0f1,roceP2p1s0f1"
    );
    assert!(v["nodes"]["spark2"]["warnings"].is_array());
}

#[test]
fn a_refused_layout_exits_2_naming_the_node_the_interfaces_and_the_fix() {
    let out = run(&args(&["env"], "broken-twins-one-subnet"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: refusing this fabric layout: 1 problem"),
        "{err}"
    );
    assert!(
        err.contains(
            "spark: enp1s0f1np1 (192.168.177.11/24) and enP2p1s0f1np1 (192.168.177.13/24)"
        ),
        "{err}"
    );
    assert!(err.contains("fix: "), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_refused_layout_with_json_also_prints_the_violations_as_json() {
    let out = run(&args(&["env", "--json"], "broken-link-down"));
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["refused"][0]["node"], "spark2");
    assert_eq!(v["refused"][0]["kind"], "no-active-rdma");
}

#[test]
fn sh_format_can_be_evaluated_by_a_shell_for_one_node() {
    let out = run(&args(
        &["env", "--format", "sh", "--node", "spark2"],
        "seed-001-two-sparks-both-twins",
    ));
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(
        script
            .lines()
            .all(|l| l.starts_with("export ") || l.starts_with('#')),
        "{script}"
    );
    let sh = Command::new("sh")
        .arg("-c")
        .arg(format!("{script}\necho \"$NCCL_IB_HCA|$VLLM_HOST_IP\""))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sh.stdout).trim(),
        "rocep1s0f1,roceP2p1s0f1|192.168.177.12"
    );
}

#[test]
fn docker_format_prints_one_line_of_e_arguments_per_node() {
    let out = run(&args(
        &["env", "--format", "docker"],
        "seed-004-spark-and-workstation",
    ));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].contains("-e NCCL_IB_HCA=mlx5_0"), "{}", lines[1]);
}

#[test]
fn a_single_snapshot_root_is_a_single_node_cluster_named_by_its_hostname() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed-001-two-sparks-both-twins/spark");
    let out = run(&[
        "env".into(),
        "--json".into(),
        "--root".into(),
        root.display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["topology"], "single");
    assert_eq!(v["head"], "spark");
}

#[test]
fn a_missing_snapshot_folder_is_invalid_input_naming_the_node() {
    let out = run(&[
        "env".into(),
        "--snapshot".into(),
        "a=/nonexistent/snap".into(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a: snapshot folder /nonexistent/snap does not exist"),
        "{err}"
    );
}

#[test]
fn a_bad_snapshot_argument_is_a_usage_error() {
    let out = run(&["env".into(), "--snapshot".into(), "nodir".into()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NAME=DIR"));
}

#[test]
fn the_same_node_twice_is_refused() {
    let mut a = args(&["env"], "seed-001-two-sparks-both-twins");
    a.extend(snapshot_args("seed-001-two-sparks-both-twins"));
    let out = run(&a);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("node name spark is given twice"));
}

#[test]
fn a_folder_of_snapshots_given_as_one_is_refused_once_naming_the_node_folders_inside() {
    // Seen once: the error was said twice and did not name the node folders.
    let cluster = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed-001-two-sparks-both-twins")
        .display()
        .to_string();
    let out = run(&["env".into(), "--snapshot".into(), format!("a={cluster}")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("it holds spark, spark2"), "{err}");
    assert!(
        err.contains(&format!(
            "--snapshot spark={cluster}/spark --snapshot spark2={cluster}/spark2"
        )),
        "{err}"
    );
    // A folder that holds no snapshot at all: the reader's reason, said once.
    let empty = tempfile::tempdir().unwrap();
    let out = run(&[
        "env".into(),
        "--snapshot".into(),
        format!("a={}", empty.path().display()),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("has no `hostname` file").count(), 1, "{err}");
}

#[test]
fn a_commands_help_lists_the_global_flags_under_their_own_heading() {
    // Seen once: `--help` of a command mixed the global flags into its own.
    let out = run(&["env".into(), "--help".into()]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let (own, global) = help
        .split_once("Global options:")
        .unwrap_or_else(|| panic!("no global heading: {help}"));
    // The long flags a section defines (its lines that start with a flag).
    let defined = |section: &str| -> Vec<String> {
        section
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('-'))
            .flat_map(|l| l.split([' ', ',']))
            .filter(|w| w.starts_with("--"))
            .map(|w| w.trim_end_matches("...").to_string())
            .collect()
    };
    let (own, global) = (defined(own), defined(global));
    for flag in [
        "--json",
        "--verbose",
        "--quiet",
        "--no-progress",
        "--cluster",
    ] {
        assert!(global.iter().any(|f| f == flag), "{flag}: {global:?}");
        assert!(
            !own.iter().any(|f| f == flag),
            "{flag} among env's own: {own:?}"
        );
    }
    assert!(own.iter().any(|f| f == "--snapshot"), "{own:?}");
}

/// A copy of the bundled `seed-001-two-sparks-both-twins` with `old` renamed to `new` (raw
/// bytes) on the head `spark`: in every path and every file that names it.
fn renamed(old: &str, new: &[u8]) -> (tempfile::TempDir, Vec<String>) {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let tmp = tempfile::tempdir().unwrap();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-001-two-sparks-both-twins");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(tmp.path().join("pair"))
            .status()
            .unwrap()
            .success()
    );
    let replace = |bytes: &[u8]| -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i..].starts_with(old.as_bytes()) {
                out.extend_from_slice(new);
                i += old.len();
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    };
    // Deepest first, so a folder is renamed after what is inside it.
    let mut stack = vec![tmp.path().join("pair/spark")];
    let mut all = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p.clone());
            }
            all.push(p);
        }
    }
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in all {
        if p.is_file() && !p.is_symlink() {
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, replace(&b)).unwrap();
        }
        let name = p.file_name().unwrap().as_bytes();
        if name.windows(old.len()).any(|w| w == old.as_bytes()) {
            let to = p.with_file_name(std::ffi::OsString::from_vec(replace(name)));
            std::fs::rename(&p, to).unwrap();
        }
    }
    let pair = tmp.path().join("pair");
    let args = ["spark", "spark2"]
        .iter()
        .flat_map(|n| {
            [
                "--snapshot".to_string(),
                format!("{n}={}", pair.join(n).display()),
            ]
        })
        .collect();
    (tmp, args)
}

#[test]
fn names_nccl_reads_as_list_syntax_or_that_are_not_utf8_are_refused_naming_them() {
    // Seen once: `roce,p1s0f1` made NCCL_IB_HCA a list of other devices, and a
    // non-UTF-8 interface name became U+FFFD in the variables (naming no interface).
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "rocep1s0f1",
            b"roce,p1s0f1",
            "RDMA device roce,p1s0f1 (NCCL_IB_HCA) holds `,`",
        ),
        (
            "rocep1s0f1",
            b"^rocep1s0f1",
            "holds `^`, which NCCL reads as list syntax",
        ),
        ("rocep1s0f1", b"rocep1=s0f1", "holds `=`"),
        ("enp1s0f1np1", b"enp1s0f1\xffp1", "is not valid UTF-8"),
    ];
    for (old, new, want) in cases {
        let (_tmp, snaps) = renamed(old, new);
        let mut a = vec!["env".to_string()];
        a.extend(snaps);
        let out = run(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{old}: {err}");
        assert!(err.contains(want), "{old} -> {want}: {err}");
        assert!(err.contains("fix: rename the"), "{err}");
    }
}
