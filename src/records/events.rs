//! `records/<JOB>/events.jsonl`: the supervisor's event log, one JSON object a line, appended
//! as events happen and read back by `status JOB`, `logs JOB --events` and the supervisor's own
//! lines on stderr. A line that is not an event (a torn write, a bad byte) is skipped and
//! counted, never the rest of the log with it.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{RecordError, events_path, io, open_0600, read_record};
use crate::input::InputLimit;
use crate::plan::JobName;

/// The most of an event log read: a line every few seconds for years is far less.
const EVENTS_LIMIT: InputLimit = InputLimit {
    max: 64 << 20,
    hint: "move the event log aside (spark-launch starts a new one)",
};

/// An event's kind, as the event log spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The supervisor started watching.
    Watching,
    ProbeFailed,
    /// Probes answer again before a wedge was named.
    ProbeRecovered,
    Wedge,
    NotServing,
    ContainerStopped,
    EngineError,
    Restart,
    RestartFailed,
    Ready,
    GaveUp,
    /// A rank's container was removed: the job is gone, supervising ends.
    Gone,
    /// The supervisor stopped (Ctrl-C); the job keeps running.
    Stopped,
    /// A node's `MemAvailable` fell below the floor: the job is stopped.
    MemoryFloor,
    /// Memory did not come back after the ranks stopped: the restarts end.
    MemoryLeak,
    /// A node stopped answering through its SSH connection, and connecting again failed.
    ConnectionLost,
    /// A node that did not answer answers again.
    ConnectedAgain,
}

/// One line of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// RFC 3339, UTC, with milliseconds.
    pub at: String,
    pub kind: EventKind,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

impl JobEvent {
    /// An event of `kind` at `now_ms` (milliseconds since the epoch).
    pub fn at(now_ms: i64, kind: EventKind, detail: String, seconds: Option<f64>) -> JobEvent {
        JobEvent {
            at: rfc3339_ms(now_ms),
            kind,
            detail,
            seconds,
        }
    }
}

/// `2026-11-26T18:02:03.456Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    let s = crate::clock::utc_stamp(ms.div_euclid(1000));
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

/// The job's event log as read: its events and how many lines were skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventLog {
    /// Oldest first.
    pub events: Vec<JobEvent>,
    /// Lines that are not an event (a torn write, a byte that is not UTF-8, an edit): each is
    /// skipped, never the rest of the log with it.
    pub skipped: usize,
}

/// The job's event log (the last `last` events when given); empty when there is no log.
pub fn read_log(state: &Path, job: &JobName, last: Option<usize>) -> Result<EventLog, RecordError> {
    let path = events_path(state, job);
    let Some(bytes) = read_record(&path, EVENTS_LIMIT)? else {
        return Ok(EventLog::default());
    };
    let mut log = parse_events(&bytes);
    if let Some(n) = last {
        let skip = log.events.len().saturating_sub(n);
        log.events.drain(..skip);
    }
    Ok(log)
}

/// The events of a log's bytes, line by line: a line that is not UTF-8 or not an event is
/// counted and skipped.
pub fn parse_events(bytes: &[u8]) -> EventLog {
    let mut log = EventLog::default();
    for line in bytes.split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match std::str::from_utf8(line)
            .ok()
            .and_then(|l| serde_json::from_str::<JobEvent>(l).ok())
        {
            Some(e) => log.events.push(e),
            None => log.skipped += 1,
        }
    }
    log
}

/// The job's events, oldest first (the last `last` when given); none when there is no log.
/// Lines that are not events are skipped ([`read_log`] counts them).
pub fn read_events(
    state: &Path,
    job: &JobName,
    last: Option<usize>,
) -> Result<Vec<JobEvent>, RecordError> {
    read_log(state, job, last).map(|l| l.events)
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
        EventKind::ProbeFailed => "a probe failed: ",
        EventKind::EngineError => "an error line in a rank's log: ",
        EventKind::RestartFailed => "the restart failed: ",
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
    /// Lines of the log that are not events, skipped.
    pub skipped_lines: usize,
}

impl EventsReport {
    /// The events of `job` kept under `state`.
    pub fn read(state: &Path, job: &JobName) -> Result<EventsReport, RecordError> {
        let log = read_log(state, job, None)?;
        Ok(EventsReport {
            job: job.clone(),
            path: events_path(state, job),
            events: log.events,
            skipped_lines: log.skipped,
        })
    }
}

impl crate::report::shown::Shown for EventsReport {
    fn text(&self) -> String {
        let skipped = match self.skipped_lines {
            0 => String::new(),
            n => format!(
                "\n({n} line{} of {} {} not an event (not UTF-8 or not JSON): skipped)",
                if n == 1 { "" } else { "s" },
                self.path.display(),
                if n == 1 { "is" } else { "are" },
            ),
        };
        if self.events.is_empty() {
            return format!(
                "no supervisor events for {} yet (they go to {}){skipped}",
                self.job,
                self.path.display()
            );
        }
        format!("{}{skipped}", render_events(&self.events))
    }
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// The kind as the log spells it (`probe_failed`).
pub fn kind_name(kind: EventKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervise::machine::Happened;
    use EventKind as Kind;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn events_are_appended_one_json_line_each_and_read_back_last_first_cut() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        let e = |kind, detail: &str, s| {
            Happened {
                kind,
                detail: detail.into(),
                seconds: s,
            }
            .stamped(1_795_000_000_123)
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
        let line = |h: Happened| said(&job, &h.stamped(0));
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
    fn a_line_of_the_event_log_that_is_not_utf8_is_skipped_and_counted_not_the_whole_log() {
        let dir = tempfile::tempdir().unwrap();
        let job = JobName::new("demo").unwrap();
        append(
            dir.path(),
            &job,
            &[Happened::stopped().stamped(1_795_000_000_123)],
        )
        .unwrap();
        let path = events_path(dir.path(), &job);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"at\":\"x\",\"kind\":\"ready\",\"detail\":\"\xff\"}\n")
            .unwrap();
        f.write_all(b"not json\n").unwrap();
        drop(f);
        append(
            dir.path(),
            &job,
            &[Happened::stopped().stamped(1_795_000_000_456)],
        )
        .unwrap();
        let log = read_log(dir.path(), &job, None).unwrap();
        assert_eq!(log.events.len(), 2);
        assert_eq!(log.skipped, 2);
        let shown =
            crate::report::shown::Shown::text(&EventsReport::read(dir.path(), &job).unwrap());
        assert!(shown.contains("supervising stopped"), "{shown}");
        assert!(
            shown.contains("(2 lines of ")
                && shown.contains("are not an event (not UTF-8 or not JSON): skipped)"),
            "{shown}"
        );
    }
}
