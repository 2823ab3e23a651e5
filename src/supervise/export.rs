//! `spark-launch export systemd JOB`: the unit of `unit` for a job this machine launched,
//! written where its service manager reads it (or to `--output FILE`, `-` for stdout), with
//! the commands that enable it. The job must have a kept plan (the supervisor needs it).
//!
//! - **The job's nodes** go into the unit as the job was launched with them: the `--hosts`
//!   entries kept at launch, else the cluster file — which must name every node of the job, or
//!   the unit is refused with the fix (a supervisor that cannot find its nodes exits 2 at every
//!   start, and systemd would start it again every 30 s forever).
//! - **A system unit's user** comes from `--run-as NAME`, else `$SUDO_USER` (under sudo), else
//!   `$USER`; none of them is refused saying so.
//! - **Never over a file it did not write**: an existing file is replaced only when it is a
//!   unit spark-launch wrote (its first line says so), or with `--force`; a link is never
//!   written through (the new unit is written beside it and renamed over its name), and
//!   anything but a regular file is refused.
//!
//! File effects only; the unit's text is `unit`'s.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::unit::{UnitError, UnitNodes, UnitOptions, UnitScope, unit, unit_dir};
use crate::inventory::HostSpec;
use crate::node::NodeName;
use crate::plan::JobName;
use crate::records::{self, RecordError};
use crate::report::shown::Shown;

/// `export systemd JOB`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct ExportRequest {
    pub job: JobName,
    /// A system unit (`--system`), run as the user this says; else a user unit.
    pub system_user: Option<RunAs>,
    /// Where to write it (`-`: stdout); else the scope's unit folder.
    pub output: Option<PathBuf>,
    /// Replace a file spark-launch did not write (`--force`).
    pub force: bool,
    /// This spark-launch binary and the cluster file, absolute.
    pub binary: PathBuf,
    pub cluster_file: PathBuf,
    /// The state folder the job's records are in (passed on to the service).
    pub state_dir: PathBuf,
    pub home: PathBuf,
    /// More `supervise` arguments (the policy's flags).
    pub supervise_args: Vec<String>,
}

/// Who a system unit runs as, and where the name came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// `--run-as NAME`.
    Given(String),
    /// An environment variable (`SUDO_USER`, `USER`) named this user.
    FromEnv { var: &'static str, name: String },
    /// `--run-as` not given, and `$SUDO_USER` and `$USER` empty or unset.
    Unknown,
}

/// Why no unit was written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("{source} (the name came from ${var}); fix: give the user with --run-as NAME")]
    UserFromEnv {
        var: &'static str,
        source: UnitError,
    },
    #[error(
        "a system unit runs the supervisor as a user, and none is known here: --run-as was not given, and $SUDO_USER (set by sudo) and $USER are empty; fix: add --run-as NAME (the user whose SSH keys and state folder the job uses)"
    )]
    NoUser,
    #[error(
        "the nodes of {job} ({nodes}) are not all in the cluster file {} ({why}), and the job was not launched with --hosts as this version keeps them: a supervisor could not find its nodes; fix: add them to the cluster file (`spark-launch nodes add HOST`), or launch the job again with --hosts",
        .cluster_file.display()
    )]
    NodesUnknown {
        job: JobName,
        nodes: String,
        cluster_file: PathBuf,
        why: String,
    },
    #[error(
        "{} {why}: spark-launch writes a unit only where none is or over one it wrote; fix: choose another --output{}",
        .path.display(),
        if *.forcible { ", or add --force to replace it" } else { "" }
    )]
    Refused {
        path: PathBuf,
        why: &'static str,
        forcible: bool,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ExportError {
    /// 2 for what the user gave (an unknown job, a bad path or user, a file in the way), 1
    /// for a failed write.
    pub fn exit_code(&self) -> u8 {
        match self {
            ExportError::Write { .. } | ExportError::Record(RecordError::Io { .. }) => 1,
            _ => 2,
        }
    }
}

/// The first line of every unit spark-launch writes (`unit`): how a file is known as its own.
const OURS: &str = "# Written by spark-launch: ";

/// Where the unit's supervisor finds the job's nodes: the `--hosts` entries kept at launch,
/// else the cluster file when it names every node of the job (`cluster`: the file read, or why
/// it could not be).
pub fn nodes_of(
    job: &JobName,
    plan_nodes: &[NodeName],
    kept_hosts: Option<Vec<HostSpec>>,
    cluster_file: &Path,
    cluster: Result<Vec<NodeName>, String>,
) -> Result<UnitNodes, ExportError> {
    if let Some(hosts) = kept_hosts {
        return Ok(UnitNodes::Hosts(
            hosts.iter().map(|h| h.to_string()).collect(),
        ));
    }
    let unknown = |why: String| ExportError::NodesUnknown {
        job: job.clone(),
        nodes: crate::node::join(plan_nodes),
        cluster_file: cluster_file.to_path_buf(),
        why,
    };
    let named = cluster.map_err(unknown)?;
    let missing: Vec<NodeName> = plan_nodes
        .iter()
        .filter(|n| !named.contains(n))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(unknown(format!(
            "it does not name {}",
            crate::node::join(&missing)
        )));
    }
    Ok(UnitNodes::ClusterFile(absolute(cluster_file)))
}

/// Writes `text` at `path` by the rule of the module docs.
fn write_unit(path: &Path, text: &str, force: bool) -> Result<(), ExportError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let write = |source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let refused = |why, forcible| ExportError::Refused {
        path: path.to_path_buf(),
        why,
        forcible,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write)?;
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A new file, never through a link put in its place meanwhile.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(write)?;
            return f.write_all(text.as_bytes()).map_err(write);
        }
        Err(e) => return Err(write(e)),
        Ok(m) if m.file_type().is_symlink() && !force => {
            return Err(refused("is a link (never written through)", true));
        }
        Ok(m) if m.file_type().is_symlink() => {}
        Ok(m) if !m.is_file() => return Err(refused("is not a regular file", false)),
        Ok(_) => {
            let limit = crate::input::InputLimit {
                max: 1 << 20,
                hint: "a unit is a few hundred bytes",
            };
            let ours =
                crate::input::read_bytes(path, limit).is_ok_and(|b| b.starts_with(OURS.as_bytes()));
            if !ours && !force {
                return Err(refused("exists and spark-launch did not write it", true));
            }
        }
    }
    // Replaced by a rename of a new file beside it: the old name's link, if any, is replaced
    // itself, never followed.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.new", std::process::id()));
    let made = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        std::fs::rename(&tmp, path)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made.map_err(write)
}

/// The unit written (or printed).
#[derive(Debug, Serialize)]
pub struct Exported {
    pub name: String,
    /// Where it was written; `None`: printed on stdout.
    pub path: Option<PathBuf>,
    pub text: String,
    /// What to run to start it now and at every boot.
    pub enable: Vec<String>,
}

impl Shown for Exported {
    fn text(&self) -> String {
        match &self.path {
            None => self.text.clone(),
            Some(p) => format!(
                "wrote {}\nto start it now and at every boot:\n  {}",
                p.display(),
                self.enable.join("\n  ")
            ),
        }
    }
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Writes (or prints) the unit that supervises `req.job` (see the module docs).
pub fn export_systemd(req: &ExportRequest) -> Result<Exported, ExportError> {
    let plan = records::load_plan(&req.state_dir, &req.job)?;
    let kept = records::load_hosts(&req.state_dir, &req.job)?;
    let cluster = if kept.is_some() {
        Err(String::new())
    } else {
        crate::resolve::cluster_file_nodes(&req.cluster_file).map_err(|e| e.to_string())
    };
    let nodes = nodes_of(&req.job, &plan.nodes, kept, &req.cluster_file, cluster)?;
    let (scope, from_env) = match &req.system_user {
        Some(RunAs::Given(user)) => (UnitScope::System { user: user.clone() }, None),
        Some(RunAs::FromEnv { var, name }) => {
            (UnitScope::System { user: name.clone() }, Some(*var))
        }
        Some(RunAs::Unknown) => return Err(ExportError::NoUser),
        None => (UnitScope::User, None),
    };
    let opts = UnitOptions {
        job: req.job.clone(),
        scope: scope.clone(),
        binary: absolute(&req.binary),
        nodes,
        supervise_args: req.supervise_args.clone(),
        environment: vec![(
            "SPARK_LAUNCH_STATE_DIR".to_string(),
            absolute(&req.state_dir).display().to_string(),
        )],
        restart_sec: 30,
    };
    let file = unit(&opts).map_err(|e| match (e, from_env) {
        (e @ UnitError::BadUser(_), Some(var)) => ExportError::UserFromEnv { var, source: e },
        (e, _) => ExportError::Unit(e),
    })?;
    let ctl = match scope {
        UnitScope::User => "systemctl --user",
        UnitScope::System { .. } => "sudo systemctl",
    };
    let mut enable = vec![format!(
        "{ctl} daemon-reload && {ctl} enable --now {}",
        file.name
    )];
    if scope == UnitScope::User {
        enable.push(
            "loginctl enable-linger \"$USER\"   # user units start at boot only with lingering"
                .into(),
        );
    }
    let path = match &req.output {
        Some(p) if p.as_os_str() == "-" => None,
        Some(p) => Some(p.clone()),
        None => Some(unit_dir(&scope, &req.home).join(&file.name)),
    };
    if let Some(p) = &path {
        write_unit(p, &file.text, req.force)?;
    }
    Ok(Exported {
        name: file.name,
        path,
        text: file.text,
        enable,
    })
}
