//! What spark-launch keeps about a job on this machine, under
//! `<state_dir>/records/<JOB>/` (`bench::store::state_dir`): the start-up timings of its last
//! launch (`startup.json`, written by the launch, read by `status JOB`). Effects only: the
//! shapes and paths are `workload::startup`'s.

use std::path::Path;
use std::time::Instant;

use crate::apply::context::Marks;
use crate::workload::startup::{Startup, record_path, tenths};

/// The timings of a launch that began at `began` (`launched_at`: the same moment, RFC 3339)
/// from the stages its phases marked.
pub fn startup_of(job: &str, launched_at: &str, began: Instant, marks: &Marks) -> Startup {
    let s = |t: Option<Instant>| t.map(|t| tenths(t.saturating_duration_since(began).as_millis()));
    Startup {
        job: job.to_string(),
        launched_at: launched_at.to_string(),
        containers_started_s: s(marks.containers_started),
        port_open_s: s(marks.port_open),
        http_ready_s: s(marks.http_ready),
        first_token_s: s(marks.first_token),
        token_after_ms: marks.token_after_ms,
    }
}

/// Writes `startup.json` of its job under `state_dir`, as every record is written (0600, its
/// folders 0700, never through a link: `supervise::records::write_record`).
pub fn save_startup(state_dir: &Path, s: &Startup) -> std::io::Result<()> {
    let job = crate::plan::JobName::new(s.job.as_str()).map_err(std::io::Error::other)?;
    let text = serde_json::to_string_pretty(s).map_err(std::io::Error::other)?;
    crate::records::write_record(state_dir, &job, "startup.json", (text + "\n").as_bytes())
        .map(|_| ())
        .map_err(std::io::Error::other)
}

/// Removes `startup.json` of `job` (a new launch under that name: the old timings are not its).
pub fn forget_startup(state_dir: &Path, job: &str) {
    let _ = std::fs::remove_file(record_path(state_dir, job));
}

/// `startup.json` of `job`, if there is a readable one (a regular file, read with a cap).
pub fn load_startup(state_dir: &Path, job: &str) -> Option<Startup> {
    let limit = crate::input::InputLimit {
        max: 1 << 20,
        hint: "a start-up record is a few hundred bytes",
    };
    let bytes = crate::input::read_bytes(&record_path(state_dir, job), limit).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn startup_timings_are_kept_per_job_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let began = Instant::now();
        let marks = Marks {
            containers_started: Some(began + Duration::from_millis(4_140)),
            port_open: Some(began + Duration::from_millis(9_800)),
            http_ready: Some(began + Duration::from_millis(12_000)),
            first_token: None,
            token_after_ms: None,
        };
        let s = startup_of("j", "2026-11-26T17:00:00Z", began, &marks);
        assert_eq!(s.containers_started_s, Some(4.1));
        assert_eq!(s.first_token_s, None);
        save_startup(dir.path(), &s).unwrap();
        assert!(dir.path().join("records/j/startup.json").is_file());
        assert_eq!(load_startup(dir.path(), "j"), Some(s));
        assert_eq!(load_startup(dir.path(), "other"), None);
        forget_startup(dir.path(), "j");
        assert_eq!(load_startup(dir.path(), "j"), None);
    }
}
