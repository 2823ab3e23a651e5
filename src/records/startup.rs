//! `records/<JOB>/startup.json`: the start-up timings of a job's last launch (the shape is
//! `workload::startup::Startup`), written by the launch and read by `status JOB`. Written as
//! every record is (0600, its folders 0700, never through a link: [`super::write_record`]).

use std::path::{Path, PathBuf};

use super::{RecordError, job_dir, write_record};
use crate::plan::JobName;
use crate::workload::startup::Startup;

/// `<state>/records/<JOB>/startup.json`.
pub fn startup_path(state: &Path, job: &JobName) -> PathBuf {
    job_dir(state, job).join("startup.json")
}

/// Keeps the start-up timings of `job`'s launch, replacing an older launch's.
pub fn save_startup(state: &Path, job: &JobName, s: &Startup) -> Result<PathBuf, RecordError> {
    let path = startup_path(state, job);
    let text = serde_json::to_string_pretty(s).map_err(|e| RecordError::Io {
        path,
        source: std::io::Error::other(e.to_string()),
    })?;
    write_record(state, job, "startup.json", (text + "\n").as_bytes())
}

/// Forgets the timings of `job` (a new launch under that name: the old timings are not its).
pub fn forget_startup(state: &Path, job: &JobName) {
    let _ = std::fs::remove_file(startup_path(state, job));
}

/// The timings kept for `job`, if there is a readable record (a regular file, read with a cap).
pub fn load_startup(state: &Path, job: &JobName) -> Option<Startup> {
    let limit = crate::input::InputLimit {
        max: 1 << 20,
        hint: "a start-up record is a few hundred bytes",
    };
    let bytes = crate::input::read_bytes(&startup_path(state, job), limit).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_timings_are_kept_per_job_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let (j, other) = (JobName::new("j").unwrap(), JobName::new("other").unwrap());
        let s = Startup {
            job: "j".into(),
            launched_at: "2026-11-26T17:00:00Z".into(),
            containers_started_s: Some(4.1),
            first_token_s: None,
            ..Startup::default()
        };
        save_startup(dir.path(), &j, &s).unwrap();
        assert!(dir.path().join("records/j/startup.json").is_file());
        assert_eq!(load_startup(dir.path(), &j), Some(s));
        assert_eq!(load_startup(dir.path(), &other), None);
        forget_startup(dir.path(), &j);
        assert_eq!(load_startup(dir.path(), &j), None);
    }
}
