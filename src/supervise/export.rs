//! `spark-launch export systemd JOB`: the unit of `unit` for a job this machine launched,
//! written where its service manager reads it (or to `--output FILE`, `-` for stdout), with
//! the commands that enable it. The job must have a kept plan (the supervisor needs it).
//!
//! File effects only; the unit's text is `unit`'s.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::records::{self, RecordError};
use super::unit::{UnitError, UnitOptions, UnitScope, unit, unit_dir};
use crate::plan::JobName;
use crate::report::shown::Shown;

/// `export systemd JOB`, as the CLI parsed it.
#[derive(Clone, Debug)]
pub struct ExportRequest {
    pub job: JobName,
    /// A system unit run as this user (`--system`), else a user unit.
    pub system_user: Option<String>,
    /// Where to write it (`-`: stdout); else the scope's unit folder.
    pub output: Option<PathBuf>,
    /// This spark-launch binary and the cluster file, absolute.
    pub binary: PathBuf,
    pub cluster_file: PathBuf,
    /// The state folder the job's records are in (passed on to the service).
    pub state_dir: PathBuf,
    pub home: PathBuf,
    /// More `supervise` arguments (the policy's flags).
    pub supervise_args: Vec<String>,
}

/// Why no unit was written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ExportError {
    /// 2 for what the user gave (an unknown job, a bad path or user), 1 for a failed write.
    pub fn exit_code(&self) -> u8 {
        match self {
            ExportError::Write { .. } | ExportError::Record(RecordError::Io { .. }) => 1,
            _ => 2,
        }
    }
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
    records::load_plan(&req.state_dir, &req.job)?;
    let scope = match &req.system_user {
        Some(user) => UnitScope::System { user: user.clone() },
        None => UnitScope::User,
    };
    let opts = UnitOptions {
        job: req.job.clone(),
        scope: scope.clone(),
        binary: absolute(&req.binary),
        cluster_file: absolute(&req.cluster_file),
        supervise_args: req.supervise_args.clone(),
        environment: vec![(
            "SPARK_LAUNCH_STATE_DIR".to_string(),
            absolute(&req.state_dir).display().to_string(),
        )],
        restart_sec: 30,
    };
    let file = unit(&opts)?;
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
        let write = |source| ExportError::Write {
            path: p.clone(),
            source,
        };
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(write)?;
        }
        std::fs::write(p, &file.text).map_err(write)?;
    }
    Ok(Exported {
        name: file.name,
        path,
        text: file.text,
        enable,
    })
}
