//! The systemd unit that runs `spark-launch supervise JOB` for one job, as a user unit
//! (`~/.config/systemd/user/`, started at boot once lingering is on) or a system unit
//! (`/etc/systemd/system/`, run as the user whose SSH keys and state the job uses).
//!
//! What it says: the binary's absolute path and the cluster file's (a service has no working
//! directory or shell of the user's to resolve them), `Restart=on-failure` (the supervisor
//! itself crashed or gave up: start it again after a pause), a system unit ordered after
//! `network-online.target` and `docker.service` (a user unit cannot order itself against
//! system units: the supervisor waits for Docker itself), `SPARK_LAUNCH_NO_PROGRESS=1` (the
//! journal is no terminal), and whatever environment the caller adds. The nodes are those of
//! the job: the cluster file, or the `--hosts` entries the job was launched with. Every
//! argument and value is quoted as systemd reads it: `%` doubled (specifiers), double quotes
//! around anything with a space or a quote; `ExecStart=` starts with `:`, so systemd expands no
//! `$` variable anywhere in the line — it would not in the binary's path at all, where a `$$`
//! stays two characters, so no other spelling of a `$` works there and in the arguments alike. Secrets never go in: a unit file is readable by every user, so a variable named like
//! a key, token, secret or password is refused (the supervisor reads the API key from the 0600
//! file `--api-key auto` keeps).
//!
//! Pure: options in, the unit's name and text out. Nothing here writes the file or runs
//! `systemctl` (`export systemd JOB` does, in wave 2); the text is checked by the real
//! `systemd-analyze verify` in tests/systemd_unit.rs.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::plan::JobName;

/// Where the unit runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitScope {
    /// The user's own service manager (`systemctl --user`); at boot only with
    /// `loginctl enable-linger USER`.
    User,
    /// The system's service manager, the supervisor running as `user`.
    System { user: String },
}

/// What the unit runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitOptions {
    pub job: JobName,
    pub scope: UnitScope,
    /// The spark-launch binary, absolute.
    pub binary: PathBuf,
    /// Where the job's nodes come from.
    pub nodes: UnitNodes,
    /// More arguments for `supervise` (after the job's name).
    pub supervise_args: Vec<String>,
    /// More environment (`NAME`, `value`), e.g. `SPARK_LAUNCH_STATE_DIR`, `RUST_LOG`.
    pub environment: Vec<(String, String)>,
    /// Seconds systemd waits before starting a failed supervisor again.
    pub restart_sec: u32,
}

/// Where the supervisor the unit runs finds the job's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitNodes {
    /// The cluster file, absolute (`--cluster FILE`).
    ClusterFile(PathBuf),
    /// `--hosts` entries, each naming its node (`spark-a=nvidia@169.254.3.7`).
    Hosts(Vec<String>),
}

/// A unit file: its name and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitFile {
    /// `spark-launch-JOB.service`.
    pub name: String,
    pub text: String,
}

/// Why no unit could be written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    #[error(
        "the {what} {path:?} is not an absolute path: a service resolves no relative path; give the full path"
    )]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error("the {what} {path:?} is not valid UTF-8: systemd cannot be given it")]
    NotUtf8 { what: &'static str, path: PathBuf },
    #[error("the {what} holds a line break or a NUL: systemd reads unit files line by line")]
    ControlCharacter { what: String },
    #[error(
        "{0:?} is not an environment variable name (letters, digits and _, not starting with a digit)"
    )]
    BadName(String),
    #[error(
        "{0} looks like a secret, and a unit file is readable by every user: leave it out (the supervisor reads the API key from the 0600 file `--api-key auto` keeps)"
    )]
    Secret(String),
    #[error("{0:?} is not a user name for User= (e.g. sparkuser)")]
    BadUser(String),
}

/// The unit's file name for `job`.
pub fn unit_name(job: &JobName) -> String {
    format!("spark-launch-{job}.service")
}

/// Where the unit file goes: `~/.config/systemd/user` (under `home`) or `/etc/systemd/system`.
pub fn unit_dir(scope: &UnitScope, home: &Path) -> PathBuf {
    match scope {
        UnitScope::User => home.join(".config/systemd/user"),
        UnitScope::System { .. } => PathBuf::from("/etc/systemd/system"),
    }
}

/// Words in a variable's name that mark it as a secret.
const SECRET_WORDS: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"];

fn text_of<'a>(what: &'static str, path: &'a Path) -> Result<&'a str, UnitError> {
    if !path.is_absolute() {
        return Err(UnitError::NotAbsolute {
            what,
            path: path.to_path_buf(),
        });
    }
    let s = path.to_str().ok_or_else(|| UnitError::NotUtf8 {
        what,
        path: path.to_path_buf(),
    })?;
    plain_line(what, s)?;
    Ok(s)
}

fn plain_line(what: &str, s: &str) -> Result<(), UnitError> {
    if s.contains(['\n', '\r', '\0']) {
        return Err(UnitError::ControlCharacter {
            what: what.to_string(),
        });
    }
    Ok(())
}

/// `%` as systemd reads it in a command line: a specifier, doubled. A `$` is left alone: the
/// line is written with the `:` prefix, which turns variable expansion off ([`unit`]).
fn escape_specials(s: &str) -> String {
    s.replace('%', "%%")
}

/// One argument of `ExecStart=`: as is when it is plain, else in double quotes with `\` and
/// `"` escaped; `%` doubled either way.
pub fn exec_arg(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%$".contains(c));
    if plain {
        escape_specials(s)
    } else {
        let inner = s.replace('\\', "\\\\").replace('"', "\\\"");
        format!("\"{}\"", escape_specials(&inner))
    }
}

/// One `Environment=` line's value: `"NAME=value"`, quoted, `%` doubled (systemd expands
/// specifiers there, not variables).
fn environment_line(name: &str, value: &str) -> String {
    let inner = format!("{name}={value}")
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%");
    format!("Environment=\"{inner}\"")
}

fn check_name(name: &str) -> Result<(), UnitError> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(UnitError::BadName(name.to_string()));
    }
    let upper = name.to_ascii_uppercase();
    if SECRET_WORDS.iter().any(|w| upper.contains(w)) {
        return Err(UnitError::Secret(name.to_string()));
    }
    Ok(())
}

fn check_user(user: &str) -> Result<(), UnitError> {
    let ok = user
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && user.len() <= 32
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(UnitError::BadUser(user.to_string()))
    }
}

/// The unit for `opts`, or the first thing wrong with them.
pub fn unit(opts: &UnitOptions) -> Result<UnitFile, UnitError> {
    let binary = text_of("spark-launch binary", &opts.binary)?;
    let nodes = match &opts.nodes {
        UnitNodes::ClusterFile(f) => vec![
            "--cluster".to_string(),
            text_of("cluster file", f)?.to_string(),
        ],
        UnitNodes::Hosts(hosts) => {
            for h in hosts {
                plain_line("--hosts entry", h)?;
            }
            vec!["--hosts".to_string(), hosts.join(",")]
        }
    };
    for a in &opts.supervise_args {
        plain_line("supervise argument", a)?;
    }
    for (name, value) in &opts.environment {
        check_name(name)?;
        plain_line(&format!("value of {name}"), value)?;
    }
    if let UnitScope::System { user } = &opts.scope {
        check_user(user)?;
    }
    let job = &opts.job;
    let mut argv = vec![binary.to_string(), "supervise".to_string(), job.to_string()];
    argv.extend(nodes);
    argv.extend(opts.supervise_args.iter().cloned());
    let exec = argv
        .iter()
        .map(|a| exec_arg(a))
        .collect::<Vec<_>>()
        .join(" ");

    let mut t = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(t, "# Written by spark-launch: the supervisor of job {job}.");
    let _ = writeln!(
        t,
        "# It restarts the job's whole group when a rank stops or wedges; Docker's restart"
    );
    let _ = writeln!(
        t,
        "# policies are not used, as one rank restarted alone cannot rejoin its NCCL group."
    );
    if opts.scope == UnitScope::User {
        let _ = writeln!(
            t,
            "# A user unit starts at boot only with lingering on: loginctl enable-linger $USER"
        );
    }
    let _ = writeln!(t, "[Unit]");
    let _ = writeln!(t, "Description=spark-launch supervisor of job {job}");
    if let UnitScope::System { .. } = opts.scope {
        let _ = writeln!(t, "Wants=network-online.target");
        let _ = writeln!(t, "After=network-online.target docker.service");
    }
    let _ = writeln!(t);
    let _ = writeln!(t, "[Service]");
    let _ = writeln!(t, "Type=exec");
    if let UnitScope::System { user } = &opts.scope {
        let _ = writeln!(t, "User={user}");
    }
    let _ = writeln!(t, "{}", environment_line("SPARK_LAUNCH_NO_PROGRESS", "1"));
    for (name, value) in &opts.environment {
        let _ = writeln!(t, "{}", environment_line(name, value));
    }
    // `:`: no variable expansion in the line (a `$` in a path is a `$`).
    let _ = writeln!(t, "ExecStart=:{exec}");
    let _ = writeln!(t, "Restart=on-failure");
    let _ = writeln!(t, "RestartSec={}", opts.restart_sec);
    let _ = writeln!(t);
    let _ = writeln!(t, "[Install]");
    let _ = writeln!(
        t,
        "WantedBy={}",
        match opts.scope {
            UnitScope::User => "default.target",
            UnitScope::System { .. } => "multi-user.target",
        }
    );
    Ok(UnitFile {
        name: unit_name(job),
        text: t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(scope: UnitScope) -> UnitOptions {
        UnitOptions {
            job: JobName::new("qwen").unwrap(),
            scope,
            binary: "/usr/local/bin/spark-launch".into(),
            nodes: UnitNodes::ClusterFile(
                "/home/sparkuser/.config/spark-launch/cluster.yaml".into(),
            ),
            supervise_args: vec![],
            environment: vec![],
            restart_sec: 10,
        }
    }

    #[test]
    fn a_system_unit_runs_the_supervisor_as_the_user_after_the_network_and_docker() {
        let u = unit(&options(UnitScope::System {
            user: "sparkuser".into(),
        }))
        .unwrap();
        assert_eq!(u.name, "spark-launch-qwen.service");
        insta::assert_snapshot!("system_unit", u.text);
    }

    #[test]
    fn a_user_unit_says_how_it_starts_at_boot_and_orders_itself_against_nothing_it_cannot_see() {
        let u = unit(&options(UnitScope::User)).unwrap();
        insta::assert_snapshot!("user_unit", u.text);
        assert!(!u.text.contains("docker.service"));
    }

    #[test]
    fn arguments_are_quoted_as_systemd_reads_them() {
        assert_eq!(exec_arg("/usr/bin/x"), "/usr/bin/x");
        assert_eq!(exec_arg("/opt/my tools/x"), "\"/opt/my tools/x\"");
        assert_eq!(exec_arg("50%"), "50%%");
        assert_eq!(exec_arg("$HOME"), "$HOME");
        assert_eq!(exec_arg("/opt/a$b/x"), "/opt/a$b/x");
        assert_eq!(exec_arg(r#"a "b" \c"#), r#""a \"b\" \\c""#);
        assert_eq!(exec_arg(""), "\"\"");
        assert_eq!(
            environment_line("RUST_LOG", "info,x=50% \"y\""),
            r#"Environment="RUST_LOG=info,x=50%% \"y\"""#
        );
    }

    #[test]
    fn what_systemd_cannot_run_or_must_not_hold_is_refused_by_name() {
        let mut o = options(UnitScope::User);
        o.binary = "target/debug/spark-launch".into();
        let e = unit(&o).unwrap_err().to_string();
        assert!(
            e.contains("spark-launch binary") && e.contains("absolute"),
            "{e}"
        );
        let mut o = options(UnitScope::User);
        o.environment = vec![("OPENAI_API_KEY".into(), "sk-1".into())];
        let e = unit(&o).unwrap_err().to_string();
        assert!(e.starts_with("OPENAI_API_KEY looks like a secret"), "{e}");
        assert!(!e.contains("sk-1"));
        let mut o = options(UnitScope::User);
        o.environment = vec![("1BAD".into(), "x".into())];
        assert_eq!(unit(&o), Err(UnitError::BadName("1BAD".into())));
        let mut o = options(UnitScope::User);
        o.supervise_args = vec!["--x\nExecStartPre=/bin/evil".into()];
        assert!(matches!(unit(&o), Err(UnitError::ControlCharacter { .. })));
        let o = options(UnitScope::System {
            user: "spark user".into(),
        });
        assert_eq!(unit(&o), Err(UnitError::BadUser("spark user".into())));
        assert_eq!(
            unit_dir(&UnitScope::User, Path::new("/home/u")),
            PathBuf::from("/home/u/.config/systemd/user")
        );
    }
}
