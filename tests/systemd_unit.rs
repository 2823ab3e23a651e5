//! The systemd units `supervise::unit` writes, checked by the real `systemd-analyze verify`
//! (Debian's systemd; it parses a unit file offline, loads its dependencies and checks that the
//! command it runs is an executable file): a system unit and a user unit for this build's
//! binary, placed under a path with a space and a `%h` so the quoting and the `%%` escaping
//! are what systemd reads, with no warning at all. A unit naming a binary that is not there
//! fails the same check (the check bites).

use std::path::Path;
use std::process::{Command, Output};

use spark_launch::plan::JobName;
use spark_launch::supervise::unit::{UnitOptions, UnitScope, unit};

fn verify(file: &Path, user: bool, runtime_dir: &Path) -> Output {
    let mut c = Command::new("systemd-analyze");
    if user {
        // The user manager needs a runtime folder; verify runs none of the unit.
        c.arg("--user").env("XDG_RUNTIME_DIR", runtime_dir);
    }
    c.args(["verify", "--man=no"])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("systemd-analyze is needed (apt-get install systemd): {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// This build's binary, linked into a folder whose name systemd must quote and escape (`%h`
/// is a specifier systemd would expand to a home folder, were it not written `%%h`).
fn odd_binary(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("spark launch %h").join("spark-launch");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    let src = Path::new(env!("CARGO_BIN_EXE_spark-launch"));
    if std::fs::hard_link(src, &bin).is_err() {
        std::fs::copy(src, &bin).unwrap();
    }
    bin
}

fn options(scope: UnitScope, binary: &Path, dir: &Path) -> UnitOptions {
    UnitOptions {
        job: JobName::new("qwen-tp2").unwrap(),
        scope,
        binary: binary.to_path_buf(),
        cluster_file: dir.join("my cluster/cluster 50%.yaml"),
        supervise_args: vec!["--probe-every".into(), "5".into()],
        environment: vec![
            ("RUST_LOG".into(), "spark_launch=info".into()),
            (
                "SPARK_LAUNCH_STATE_DIR".into(),
                dir.join("state $HOME").display().to_string(),
            ),
        ],
        restart_sec: 10,
    }
}

#[test]
fn generated_system_and_user_units_pass_systemd_analyze_verify_without_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = odd_binary(tmp.path());
    let runtime = tmp.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    for (scope, user) in [
        (
            UnitScope::System {
                user: "sparkuser".into(),
            },
            false,
        ),
        (UnitScope::User, true),
    ] {
        let u = unit(&options(scope.clone(), &bin, tmp.path())).unwrap();
        let dir = tmp.path().join(if user { "user" } else { "system" });
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join(&u.name);
        std::fs::write(&file, &u.text).unwrap();
        let out = verify(&file, user, &runtime);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{scope:?}:\n{}\n--- the unit\n{}",
            text(&out),
            u.text
        );
        assert!(
            u.text.contains("ExecStart=\""),
            "the binary's path needs quotes: {}",
            u.text
        );
        assert!(u.text.contains("launch %%h/"), "{}", u.text);
    }
}

#[test]
fn a_unit_whose_binary_is_not_there_fails_the_same_check() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere/spark-launch");
    let u = unit(&options(
        UnitScope::System {
            user: "sparkuser".into(),
        },
        &missing,
        tmp.path(),
    ))
    .unwrap();
    let file = tmp.path().join(&u.name);
    std::fs::write(&file, &u.text).unwrap();
    let out = verify(&file, false, tmp.path());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("nowhere/spark-launch is not executable"),
        "{}",
        text(&out)
    );
}
