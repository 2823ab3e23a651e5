//! How the core tells the user what it is doing: library code calls a [`Reporter`] and never
//!
//! Library code calls a [`Reporter`]; [`term`] implements it with indicatif on a TTY and plain
//! `•`/`✓`/`✗` lines otherwise. Progress always goes to stderr; stdout carries only
//! results. A step ends as failed unless it is explicitly finished as a success, so an early
//! return (`?`) shows ✗ (the kind habit).

pub mod term;

use std::sync::{Arc, Mutex};

use crate::node::NodeName;

/// Receives progress from the core. Every method must be cheap and must never fail.
pub trait Reporter: Send + Sync {
    /// A named step starts (one status line). The returned guard ends it: `ok()` shows ✓,
    /// dropping it without `ok()` shows ✗.
    fn step(&self, title: &str) -> ProgressStep;

    /// A byte-counted transfer on one node (image push, model copy). `total` when known.
    fn transfer(&self, node: &NodeName, label: &str, total: Option<u64>) -> Box<dyn Transfer>;

    /// A line about one node, prefixed with its name.
    fn node_line(&self, node: &NodeName, message: &str);

    /// Something the user should read even with `-q`.
    fn warn(&self, message: &str);

    /// A plain progress line that is not a step (`Finished in 4.2s`). Hidden like progress.
    fn info(&self, _message: &str) {}

    /// Called by [`ProgressStep`] when a step ends; `ok` is false for failures and drops.
    fn end_step(&self, title: &str, ok: bool, detail: Option<&str>);
}

/// A running byte-counted transfer.
pub trait Transfer: Send + Sync {
    fn advance(&self, bytes: u64);
    fn set_total(&self, total: u64);
    fn finish(&self, message: &str);
}

/// A step in progress. Ends as ✗ unless [`ProgressStep::ok`] is called.
pub struct ProgressStep {
    title: String,
    reporter: Option<Arc<dyn Reporter>>,
    done: bool,
}

impl ProgressStep {
    pub fn new(title: &str, reporter: Arc<dyn Reporter>) -> Self {
        ProgressStep {
            title: title.to_string(),
            reporter: Some(reporter),
            done: false,
        }
    }

    /// A step that reports nothing (for [`NullReporter`]).
    pub fn silent(title: &str) -> Self {
        ProgressStep {
            title: title.to_string(),
            reporter: None,
            done: false,
        }
    }

    pub fn title(&self) -> &str {
        &self.title
    }

    /// End the step as a success.
    pub fn ok(mut self) {
        self.finish(true, None);
    }

    /// End the step as a success with a short detail (`✓ pushed to 2 nodes (3 skipped)`).
    pub fn ok_with(mut self, detail: &str) {
        self.finish(true, Some(detail));
    }

    /// End the step as a failure with a short detail.
    pub fn fail(mut self, detail: &str) {
        self.finish(false, Some(detail));
    }

    fn finish(&mut self, ok: bool, detail: Option<&str>) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(r) = &self.reporter {
            r.end_step(&self.title, ok, detail);
        }
    }
}

impl Drop for ProgressStep {
    fn drop(&mut self) {
        self.finish(false, None);
    }
}

/// Reports nothing. For tests and `--json` paths that must keep stderr quiet.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullReporter;

struct NullTransfer;

impl Transfer for NullTransfer {
    fn advance(&self, _bytes: u64) {}
    fn set_total(&self, _total: u64) {}
    fn finish(&self, _message: &str) {}
}

impl Reporter for NullReporter {
    fn step(&self, title: &str) -> ProgressStep {
        ProgressStep::silent(title)
    }
    fn transfer(&self, _node: &NodeName, _label: &str, _total: Option<u64>) -> Box<dyn Transfer> {
        Box::new(NullTransfer)
    }
    fn node_line(&self, _node: &NodeName, _message: &str) {}
    fn warn(&self, _message: &str) {}
    fn end_step(&self, _title: &str, _ok: bool, _detail: Option<&str>) {}
}

/// Records every event in order. Tests use it to assert step titles and outcomes.
#[derive(Default)]
pub struct RecordingReporter {
    events: Mutex<Vec<String>>,
    me: Mutex<Option<std::sync::Weak<RecordingReporter>>>,
}

impl RecordingReporter {
    pub fn new() -> Arc<Self> {
        let r = Arc::new(RecordingReporter::default());
        if let Ok(mut me) = r.me.lock() {
            *me = Some(Arc::downgrade(&r));
        }
        r
    }

    /// Every event so far: `start:T`, `ok:T`, `fail:T`, `node:N:msg`, `warn:msg`, `info:msg`.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn push(&self, e: String) {
        if let Ok(mut events) = self.events.lock() {
            events.push(e);
        }
    }
}

impl Reporter for RecordingReporter {
    fn step(&self, title: &str) -> ProgressStep {
        self.push(format!("start:{title}"));
        let me = self.me.lock().ok().and_then(|m| m.as_ref()?.upgrade());
        match me {
            Some(me) => ProgressStep::new(title, me),
            None => ProgressStep::silent(title),
        }
    }
    fn transfer(&self, node: &NodeName, label: &str, _total: Option<u64>) -> Box<dyn Transfer> {
        self.push(format!("transfer:{node}:{label}"));
        Box::new(NullTransfer)
    }
    fn node_line(&self, node: &NodeName, message: &str) {
        self.push(format!("node:{node}:{message}"));
    }
    fn warn(&self, message: &str) {
        self.push(format!("warn:{message}"));
    }
    fn info(&self, message: &str) {
        self.push(format!("info:{message}"));
    }
    fn end_step(&self, title: &str, ok: bool, _detail: Option<&str>) {
        self.push(format!("{}:{title}", if ok { "ok" } else { "fail" }));
    }
}

/// `8 B`, `64 KiB`, `4 GiB`, `1.5 GiB`, `1.4 MiB`: a byte count as people write it (exact
/// units when it is a power-of-two multiple, else one decimal).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024 && v.is_multiple_of(1024) && u < UNITS.len() - 1 {
        v /= 1024;
        u += 1;
    }
    if v >= 1024 {
        // Not a power of two: one decimal in the largest fitting unit.
        let mut f = n as f64;
        let mut u = 0;
        while f >= 1024.0 && u < UNITS.len() - 1 {
            f /= 1024.0;
            u += 1;
        }
        return format!("{f:.1} {}", UNITS[u]);
    }
    format!("{v} {}", UNITS[u])
}

/// `12s`, `3m05s`, `1h02m`, `1d01h`: a duration as `docker ps` writes one.
pub fn human_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_docker_ps() {
        let d = std::time::Duration::from_secs;
        assert_eq!(human_duration(d(5)), "5s");
        assert_eq!(human_duration(d(125)), "2m05s");
        assert_eq!(human_duration(d(1200)), "20m00s");
        assert_eq!(human_duration(d(7260)), "2h01m");
        assert_eq!(human_duration(d(90_000)), "1d01h");
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(human_bytes(7), "7 B");
        assert_eq!(human_bytes(12 * 1024), "12 KiB");
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(4 << 30), "4 GiB");
        assert_eq!(human_bytes(1536 * 1024 * 1024), "1.5 GiB");
        assert_eq!(human_bytes(1_500_000), "1.4 MiB");
    }

    #[test]
    fn a_step_dropped_without_ok_is_reported_as_failed() {
        let r = RecordingReporter::new();
        {
            let _s = r.step("start containers");
        }
        r.step("stop containers").ok();
        assert_eq!(
            r.events(),
            vec![
                "start:start containers",
                "fail:start containers",
                "start:stop containers",
                "ok:stop containers"
            ]
        );
    }
}
