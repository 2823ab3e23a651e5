//! What spark-launch keeps about a job on the machine that launched it, under
//! `<state_dir>/records/<JOB>/`. This module is the one home of that folder: its layout, and
//! every read and write of it (the launch, `status`, `logs --events`, the supervisor and
//! `export` call it), so the rules below hold for every record (`records/` and every job's folder 0700, every file 0600, none
//! written through a link; `state_dir` as `crate::state::state_dir`). Every record is read as
//! a user's file is (`input`: a regular file, with a cap), so a FIFO in its place cannot hang
//! a command:
//!
//! - `plan.json`: the serving plan the job was started with, as `--dry-run --json` prints it
//!   (every secret shown as `<set>`), except that a file put into a container (a recipe's
//!   mod) is kept as its SHA-256 and size, never its bytes. The supervisor reads its nodes, the order of its start
//!   steps and the steps that follow them (the waits), the API's address and model, and where
//!   the API key is kept.
//! - `hosts.json`: for a job whose nodes were given with `--hosts`, those entries, each naming
//!   its node (`{"hosts": ["spark-a=nvidia@169.254.3.7", ...]}`), so that a supervisor started
//!   later (a systemd unit) reaches the same nodes; absent when they came from the cluster
//!   file.
//! - `events.jsonl` ([`events`]): the supervisor's event log, one JSON object a line:
//!   `{"at": RFC 3339, "kind": "wedge", "detail": "...", "seconds": 12.5}` (`seconds` only
//!   where a duration goes with the event). `status JOB` shows the last ones and
//!   `logs JOB --events` all of them.
//! - `startup.json`: the start-up timings of the job's last launch ([`startup`]).
//! - `supervise.lock`: held by the job's one supervisor ([`lock`]).
//!
//! File effects only; decides nothing.

pub mod events;
pub mod startup;

pub use events::{
    EventKind, EventLog, EventsReport, JobEvent, append, kind_name, now_ms, parse_events,
    read_events, read_log, render_events, rfc3339_ms, said,
};
pub use startup::{forget_startup, load_startup, save_startup, startup_path};

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::input::{InputError, InputLimit};
use crate::inventory::hosts::HostSpec;
use crate::plan::JobName;
use crate::workload::serve::ServePlan;

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no plan of job {job} is kept here ({}): the supervisor watches jobs started from this machine by spark-launch vllm, trtllm, sglang or up",
        path.display()
    )]
    NoPlan { job: JobName, path: PathBuf },
    #[error(
        "job {job} is already supervised here (pid {pid}, lock {}): one supervisor per job, or they would restart it twice",
        path.display()
    )]
    Supervised {
        job: JobName,
        pid: String,
        path: PathBuf,
    },
    #[error("{}: not a serving plan spark-launch wrote ({cause})", path.display())]
    BadPlan { path: PathBuf, cause: String },
    #[error("{}: not the nodes spark-launch kept ({cause})", path.display())]
    BadHosts { path: PathBuf, cause: String },
    #[error(transparent)]
    Input(#[from] InputError),
}

/// `<state>/records/<JOB>`.
pub fn job_dir(state: &Path, job: &JobName) -> PathBuf {
    state.join("records").join(job.as_str())
}

/// `<state>/records/<JOB>/plan.json`.
pub fn plan_path(state: &Path, job: &JobName) -> PathBuf {
    job_dir(state, job).join("plan.json")
}

/// `<state>/records/<JOB>/events.jsonl`.
pub fn events_path(state: &Path, job: &JobName) -> PathBuf {
    job_dir(state, job).join("events.jsonl")
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The folder of `path` (`records/<JOB>`) and `records/` above it, each made 0700: created so
/// when missing, and made so again when an older version left it 0755. A link in their place
/// is refused, never followed (a record written through it would land wherever it points).
fn ensure_dir(path: &Path) -> Result<(), RecordError> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    let Some(records) = dir.parent() else {
        return Ok(());
    };
    if let Some(state) = records.parent()
        && !state.as_os_str().is_empty()
    {
        std::fs::create_dir_all(state).map_err(io(state))?;
    }
    for d in [records, dir] {
        match std::fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(d)(e)),
        }
        let meta = std::fs::symlink_metadata(d).map_err(io(d))?;
        if !meta.is_dir() {
            return Err(io(d)(std::io::Error::other(
                "not a folder (a link or a file): records are written only into a folder of their own",
            )));
        }
        if meta.permissions().mode() & 0o777 != 0o700 {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).map_err(io(d))?;
        }
    }
    Ok(())
}

/// Opens a record file for writing, 0600, never through a link (`O_NOFOLLOW`).
pub(crate) fn open_0600(path: &Path, append: bool) -> Result<std::fs::File, RecordError> {
    ensure_dir(path)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io(path))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(path))?;
    Ok(f)
}

/// Writes `bytes` as the record `name` of `job` (`records/<JOB>/<name>`, 0600, the folders
/// 0700), replacing what was there.
pub fn write_record(
    state: &Path,
    job: &JobName,
    name: &str,
    bytes: &[u8],
) -> Result<PathBuf, RecordError> {
    let path = job_dir(state, job).join(name);
    let mut f = open_0600(&path, false)?;
    f.write_all(bytes).map_err(io(&path))?;
    Ok(path)
}

/// The most a kept plan may hold: a plan is tens of KiB (files put into containers are kept
/// as digests), so a larger one is not a plan spark-launch wrote.
const PLAN_LIMIT: InputLimit = InputLimit {
    max: 16 << 20,
    hint: "a kept plan is tens of KiB; this is not one spark-launch wrote",
};

/// A record's bytes through `input` (a regular file only: a FIFO or device in its place is
/// refused at once, never read forever), `None` when there is none.
pub(crate) fn read_record(path: &Path, limit: InputLimit) -> Result<Option<Vec<u8>>, RecordError> {
    match crate::input::read_bytes(path, limit) {
        Ok(b) => Ok(Some(b)),
        Err(InputError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(RecordError::Input(e)),
    }
}

/// Keeps the serving plan of a job that starts (secrets as `<set>`, the files put into its
/// containers — a recipe's mods — as their SHA-256 and size: a restart starts the same
/// containers and needs no file's bytes), replacing an older one.
pub fn save_plan(state: &Path, plan: &ServePlan) -> Result<PathBuf, RecordError> {
    let path = plan_path(state, &plan.job.job);
    let mut kept = plan.clone();
    for n in &mut kept.job.nodes {
        if let crate::plan::Launch::Container(c) = &mut n.launch {
            c.keep_digests_only();
        }
    }
    let text = serde_json::to_string_pretty(&kept)
        .map_err(|e| io(&path)(std::io::Error::other(e.to_string())))?;
    write_record(
        state,
        &plan.job.job,
        "plan.json",
        format!("{text}\n").as_bytes(),
    )
}

/// The serving plan kept for `job`: read as every record is ([`read_record`]), its job name
/// checked by the rule a name given on the command line meets, and it must be `job`'s.
pub fn load_plan(state: &Path, job: &JobName) -> Result<ServePlan, RecordError> {
    let path = plan_path(state, job);
    let Some(bytes) = read_record(&path, PLAN_LIMIT)? else {
        return Err(RecordError::NoPlan {
            job: job.clone(),
            path,
        });
    };
    let plan: ServePlan = serde_json::from_slice(&bytes).map_err(|e| RecordError::BadPlan {
        path: path.clone(),
        cause: e.to_string(),
    })?;
    if &plan.job.job != job {
        return Err(RecordError::BadPlan {
            path,
            cause: format!("it is the plan of job {}, not of {job}", plan.job.job),
        });
    }
    Ok(plan)
}

/// `<state>/records/<JOB>/hosts.json`.
pub fn hosts_path(state: &Path, job: &JobName) -> PathBuf {
    job_dir(state, job).join("hosts.json")
}

/// What `hosts.json` holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeptHosts {
    hosts: Vec<String>,
}

/// Keeps the `--hosts` entries a job was launched with (each naming its node), or forgets
/// those of an earlier launch under the name when its nodes came from the cluster file.
pub fn save_hosts(state: &Path, job: &JobName, hosts: &[HostSpec]) -> Result<(), RecordError> {
    let path = hosts_path(state, job);
    if hosts.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
            _ => Ok(()),
        };
    }
    let kept = KeptHosts {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
    };
    let text = serde_json::to_string_pretty(&kept)
        .map_err(|e| io(&path)(std::io::Error::other(e.to_string())))?;
    write_record(state, job, "hosts.json", format!("{text}\n").as_bytes()).map(|_| ())
}

/// The `--hosts` entries `job` was launched with; `None` when its nodes came from the cluster
/// file (or it was launched by a version that kept none). Each entry is checked as `--hosts`
/// checks it.
pub fn load_hosts(state: &Path, job: &JobName) -> Result<Option<Vec<HostSpec>>, RecordError> {
    const LIMIT: InputLimit = InputLimit {
        max: 1 << 20,
        hint: "it lists a few nodes; this is not one spark-launch wrote",
    };
    let path = hosts_path(state, job);
    let Some(bytes) = read_record(&path, LIMIT)? else {
        return Ok(None);
    };
    let bad = |cause: String| RecordError::BadHosts {
        path: path.clone(),
        cause,
    };
    let kept: KeptHosts = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let hosts = kept
        .hosts
        .iter()
        .map(|h| h.parse::<HostSpec>().map_err(|e| bad(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    if hosts.is_empty() {
        return Err(bad("no node".into()));
    }
    Ok(Some(hosts))
}

/// The one supervisor of a job on this machine: an exclusive lock on
/// `records/<JOB>/supervise.lock` (holding the supervisor's pid), released when dropped or
/// when the process ends, however it ends.
#[derive(Debug)]
pub struct SuperviseLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the lock of `job`'s supervisor, or says which process holds it.
pub fn lock(state: &Path, job: &JobName) -> Result<SuperviseLock, RecordError> {
    let path = job_dir(state, job).join("supervise.lock");
    ensure_dir(&path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io(&path))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            let _ = lock.set_len(0);
            let _ = (&*lock).write_all(std::process::id().to_string().as_bytes());
            Ok(SuperviseLock { _lock: lock })
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(RecordError::Supervised {
            job: job.clone(),
            pid: crate::input::read_bytes(
                &path,
                InputLimit {
                    max: 64,
                    hint: "a lock holds a process id",
                },
            )
            .map(|p| String::from_utf8_lossy(&p).trim().to_string())
            .unwrap_or_else(|_| "?".into()),
            path,
        }),
        Err((_, e)) => Err(io(&path)(std::io::Error::from(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervise::machine::Happened;

    #[test]
    fn records_are_0600_in_folders_of_0700_also_where_an_older_version_left_them_open() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        // As an older version left them: `records/` 0755, made with the umask.
        std::fs::create_dir_all(dir.path().join("records/demo")).unwrap();
        for d in ["records", "records/demo"] {
            std::fs::set_permissions(dir.path().join(d), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let path = write_record(dir.path(), &job, "startup.json", b"{}\n").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("records")), 0o700);
        assert_eq!(mode(&dir.path().join("records/demo")), 0o700);
        // A fresh state folder: the same.
        let fresh = tempfile::tempdir().unwrap();
        let state = fresh.path().join("state");
        append(&state, &job, &[Happened::stopped().stamped(0)]).unwrap();
        assert_eq!(mode(&state.join("records")), 0o700);
        assert_eq!(mode(&state.join("records/demo")), 0o700);
        assert_eq!(mode(&events_path(&state, &job)), 0o600);
    }

    #[test]
    fn a_record_is_never_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "theirs").unwrap();
        std::fs::create_dir_all(dir.path().join("records/demo")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("records/demo/startup.json"))
            .unwrap();
        assert!(write_record(dir.path(), &job, "startup.json", b"{}").is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "theirs");
        // Nor into a job folder that is a link.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(other.path().join("records")).unwrap();
        std::os::unix::fs::symlink(dir.path(), other.path().join("records/demo")).unwrap();
        assert!(write_record(other.path(), &job, "plan.json", b"{}").is_err());
        assert!(!dir.path().join("plan.json").exists());
    }

    #[test]
    fn a_fifo_in_place_of_a_record_is_refused_at_once_not_read_forever() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        std::fs::create_dir_all(job_dir(dir.path(), &job)).unwrap();
        for path in [plan_path(dir.path(), &job), events_path(dir.path(), &job)] {
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        }
        let e = load_plan(dir.path(), &job).unwrap_err().to_string();
        assert!(e.contains("plan.json is not a regular file (a FIFO"), "{e}");
        let e = read_log(dir.path(), &job, None).unwrap_err().to_string();
        assert!(
            e.contains("events.jsonl is not a regular file (a FIFO"),
            "{e}"
        );
    }

    #[test]
    fn a_job_has_one_supervisor_at_a_time_and_the_second_is_told_which_process_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        let first = lock(dir.path(), &job).unwrap();
        let e = lock(dir.path(), &job).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "already supervised here (pid {}",
                std::process::id()
            )),
            "{e}"
        );
        drop(first);
        assert!(lock(dir.path(), &job).is_ok());
    }

    #[test]
    fn a_job_without_a_kept_plan_is_named_with_where_it_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("gone").unwrap();
        let e = load_plan(dir.path(), &job).unwrap_err();
        assert!(matches!(e, RecordError::NoPlan { .. }));
        assert!(e.to_string().contains("records/gone/plan.json"), "{e}");
    }
}
