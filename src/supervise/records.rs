//! What spark-launch keeps about a serving job on the machine that launched it, under
//! `<state_dir>/records/<JOB>/` (0700, files 0600; `state_dir` as `bench::store::state_dir`):
//!
//! - `plan.json`: the serving plan the job was started with, as `--dry-run --json` prints it
//!   (every secret shown as `<set>`), except that a file put into a container (a recipe's
//!   mod) is kept as its SHA-256 and size, never its bytes. The supervisor reads its nodes, the order of its start
//!   steps and the steps that follow them (the waits), the API's address and model, and where
//!   the API key is kept.
//! - `events.jsonl`: the supervisor's event log, one JSON object a line:
//!   `{"at": RFC 3339, "kind": "wedge", "detail": "...", "seconds": 12.5}` (`seconds` only
//!   where a duration goes with the event). `status JOB` shows the last ones and
//!   `logs JOB --events` all of them.
//!
//! File effects only; decides nothing.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::machine::{Happened, Kind};
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

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The folder of `path`, made 0700 (with its parents) when missing.
fn ensure_dir(path: &Path) -> Result<(), RecordError> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    Ok(())
}

fn open_0600(path: &Path, append: bool) -> Result<std::fs::File, RecordError> {
    ensure_dir(path)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(path))?;
    Ok(f)
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
    let mut f = open_0600(&path, false)?;
    f.write_all(text.as_bytes()).map_err(io(&path))?;
    f.write_all(b"\n").map_err(io(&path))?;
    Ok(path)
}

/// The serving plan kept for `job`.
pub fn load_plan(state: &Path, job: &JobName) -> Result<ServePlan, RecordError> {
    let path = plan_path(state, job);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RecordError::NoPlan {
                job: job.clone(),
                path,
            });
        }
        Err(e) => return Err(io(&path)(e)),
    };
    serde_json::from_str(&text).map_err(|e| RecordError::BadPlan {
        path,
        cause: e.to_string(),
    })
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
            pid: std::fs::read_to_string(&path)
                .map(|p| p.trim().to_string())
                .unwrap_or_else(|_| "?".into()),
            path,
        }),
        Err((_, e)) => Err(io(&path)(std::io::Error::from(e))),
    }
}

/// One line of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// RFC 3339, UTC, with milliseconds.
    pub at: String,
    pub kind: Kind,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

impl JobEvent {
    /// `happened`, stamped with the time `now` (milliseconds since the epoch).
    pub fn stamped(happened: Happened, now_ms: i64) -> JobEvent {
        JobEvent {
            at: rfc3339_ms(now_ms),
            kind: happened.kind,
            detail: happened.detail,
            seconds: happened.seconds,
        }
    }
}

/// `2026-11-26T18:02:03.456Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let s = crate::bench::measure::utc_stamp(ms.div_euclid(1000));
    format!("{}.{:03}Z", s.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Appends events to the job's log, one line each.
pub fn append(state: &Path, job: &JobName, events: &[JobEvent]) -> Result<(), RecordError> {
    if events.is_empty() {
        return Ok(());
    }
    let path = events_path(state, job);
    let mut text = String::new();
    for e in events {
        let line = serde_json::to_string(e)
            .map_err(|err| io(&path)(std::io::Error::other(err.to_string())))?;
        text.push_str(&line);
        text.push('\n');
    }
    let mut f = open_0600(&path, true)?;
    f.write_all(text.as_bytes()).map_err(io(&path))
}

/// The job's events, oldest first (the last `last` when given); none when there is no log.
/// Lines that do not parse (a torn write) are skipped.
pub fn read_events(
    state: &Path,
    job: &JobName,
    last: Option<usize>,
) -> Result<Vec<JobEvent>, RecordError> {
    let path = events_path(state, job);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&path)(e)),
    };
    let mut all: Vec<JobEvent> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if let Some(n) = last {
        let skip = all.len().saturating_sub(n);
        all.drain(..skip);
    }
    Ok(all)
}

/// Events as text lines: `AT  KIND  DETAIL (N s)`.
pub fn render_events(events: &[JobEvent]) -> String {
    let width = events
        .iter()
        .map(|e| kind_name(e.kind).len())
        .max()
        .unwrap_or(0);
    events
        .iter()
        .map(|e| {
            let secs = e
                .seconds
                .map(|s| format!(" ({s:.1} s)"))
                .unwrap_or_default();
            format!("{}  {:width$}  {}{secs}", e.at, kind_name(e.kind), e.detail)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An event as the supervisor says it on stderr: `JOB: DETAIL`. A detail is a sentence of its
/// own (`watching 2 rank(s) of JOB: ...`, `supervising stopped (Ctrl-C); ...`), so the kind
/// is not put before it again; the few whose detail does not say what happened get the words
/// that do.
pub fn said(job: &JobName, e: &JobEvent) -> String {
    let lead = match e.kind {
        Kind::ProbeFailed => "a probe failed: ",
        Kind::EngineError => "an error line in a rank's log: ",
        Kind::RestartFailed => "the restart failed: ",
        _ => "",
    };
    format!("{job}: {lead}{}", e.detail)
}

/// `logs JOB --events`: every event of the job's log.
#[derive(Debug, Serialize)]
pub struct EventsReport {
    pub job: JobName,
    pub path: PathBuf,
    pub events: Vec<JobEvent>,
}

impl EventsReport {
    /// The events of `job` kept under `state`.
    pub fn read(state: &Path, job: &JobName) -> Result<EventsReport, RecordError> {
        Ok(EventsReport {
            job: job.clone(),
            path: events_path(state, job),
            events: read_events(state, job, None)?,
        })
    }
}

impl crate::report::shown::Shown for EventsReport {
    fn text(&self) -> String {
        if self.events.is_empty() {
            return format!(
                "no supervisor events for {} yet (they go to {})",
                self.job,
                self.path.display()
            );
        }
        render_events(&self.events)
    }
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// The kind as the log spells it (`probe_failed`).
pub fn kind_name(kind: Kind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_appended_one_json_line_each_and_read_back_last_first_cut() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        let e = |kind, detail: &str, s| {
            JobEvent::stamped(
                Happened {
                    kind,
                    detail: detail.into(),
                    seconds: s,
                },
                1_795_000_000_123,
            )
        };
        append(dir.path(), &job, &[e(Kind::Wedge, "no token", None)]).unwrap();
        append(
            dir.path(),
            &job,
            &[
                e(Kind::Restart, "every rank", Some(0.0)),
                e(Kind::Ready, "again", Some(21.5)),
            ],
        )
        .unwrap();
        let path = events_path(dir.path(), &job);
        let text = std::fs::read_to_string(&path).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["kind"], "wedge");
        assert_eq!(first["detail"], "no token");
        assert_eq!(first["at"], "2026-11-18T11:06:40.123Z");
        assert!(first.get("seconds").is_none());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let last = read_events(dir.path(), &job, Some(2)).unwrap();
        assert_eq!(
            last.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [Kind::Restart, Kind::Ready]
        );
        let text = render_events(&last);
        assert!(text.contains("ready    again (21.5 s)"), "{text}");
        // No log yet: no events, no error.
        let other = JobName::new("other").unwrap();
        assert!(read_events(dir.path(), &other, None).unwrap().is_empty());
    }

    #[test]
    fn the_supervisor_says_each_event_on_stderr_without_doubled_words() {
        let job = JobName::new("sup").unwrap();
        let policy = crate::supervise::Policy::default();
        let line = |h: Happened| said(&job, &JobEvent::stamped(h, 0));
        assert_eq!(
            line(Happened::watching(&job, 2, &policy)),
            "sup: watching 2 rank(s) of sup: a token probe every 5 s (Ctrl-C stops supervising, not the job)"
        );
        assert_eq!(
            line(Happened::stopped()),
            "sup: supervising stopped (Ctrl-C); the job keeps running"
        );
        let failed = Happened {
            kind: Kind::RestartFailed,
            detail: "spark-2: no answer".into(),
            seconds: Some(0.1),
        };
        assert_eq!(line(failed), "sup: the restart failed: spark-2: no answer");
        // No word twice in a row, whatever the kind.
        for h in [Happened::watching(&job, 1, &policy), Happened::stopped()] {
            let l = line(h);
            let words: Vec<&str> = l.split_whitespace().collect();
            assert!(words.windows(2).all(|w| w[0] != w[1]), "{l}");
        }
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
