//! The core's [`Reporter`] on a terminal: indicatif bars and spinners when stderr is a TTY,
//! plain `•`/`✓`/`✗` lines otherwise (or with `-v`), warnings only when progress is off.
//! Everything goes to stderr; stdout carries only results.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{NullReporter, ProgressStep, Reporter, Transfer};
use crate::node::NodeName;

/// The reporter for this run: silent with `-q`/`--no-progress`/`SPARK_LAUNCH_NO_PROGRESS`
/// (warnings still print), bars on a TTY, plain lines otherwise or with `-v`.
pub fn for_stderr(quiet: bool, no_progress: bool, verbose: u8) -> Arc<dyn Reporter> {
    let env_off = std::env::var_os("SPARK_LAUNCH_NO_PROGRESS").is_some_and(|v| v != "0");
    if quiet || no_progress || env_off {
        return Arc::new(WarningsOnly);
    }
    if std::io::stderr().is_terminal() && verbose == 0 {
        TtyReporter::shared()
    } else {
        PlainReporter::shared()
    }
}

/// Prints warnings and nothing else.
struct WarningsOnly;

impl Reporter for WarningsOnly {
    fn step(&self, title: &str) -> ProgressStep {
        NullReporter.step(title)
    }
    fn transfer(&self, node: &NodeName, label: &str, total: Option<u64>) -> Box<dyn Transfer> {
        NullReporter.transfer(node, label, total)
    }
    fn node_line(&self, _node: &NodeName, _message: &str) {}
    fn warn(&self, message: &str) {
        eprintln!("warning: {}", crate::text::printable_lines(message));
    }
    fn end_step(&self, _title: &str, _ok: bool, _detail: Option<&str>) {}
}

/// `• title` when a step starts, `✓ title (1.2s)` / `✗ title` when it ends.
struct PlainReporter {
    me: std::sync::Weak<PlainReporter>,
    started: Mutex<Vec<(String, Instant)>>,
}

impl PlainReporter {
    fn shared() -> Arc<dyn Reporter> {
        Arc::new_cyclic(|me| PlainReporter {
            me: me.clone(),
            started: Mutex::new(Vec::new()),
        })
    }
}

fn line(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{}", crate::text::printable_lines(text));
}

fn elapsed(started: &Mutex<Vec<(String, Instant)>>, title: &str) -> Option<Duration> {
    let mut s = started.lock().ok()?;
    let pos = s.iter().rposition(|(t, _)| t == title)?;
    Some(s.remove(pos).1.elapsed())
}

fn end_text(title: &str, ok: bool, detail: Option<&str>, took: Option<Duration>) -> String {
    let mark = if ok { "✓" } else { "✗" };
    let detail = detail.map(|d| format!(": {d}")).unwrap_or_default();
    let took = took
        .filter(|d| d.as_millis() >= 100)
        .map(|d| format!(" ({:.1}s)", d.as_secs_f64()))
        .unwrap_or_default();
    format!("{mark} {title}{detail}{took}")
}

impl Reporter for PlainReporter {
    fn step(&self, title: &str) -> ProgressStep {
        line(&format!("• {title}"));
        if let Ok(mut s) = self.started.lock() {
            s.push((title.to_string(), Instant::now()));
        }
        match self.me.upgrade() {
            Some(me) => ProgressStep::new(title, me),
            None => ProgressStep::silent(title),
        }
    }
    fn transfer(&self, node: &NodeName, label: &str, total: Option<u64>) -> Box<dyn Transfer> {
        Box::new(PlainTransfer {
            prefix: format!("{node}: {label}"),
            total: Mutex::new(total),
            done: Mutex::new(0),
            started: Instant::now(),
        })
    }
    fn node_line(&self, node: &NodeName, message: &str) {
        line(&format!("  {node}: {message}"));
    }
    fn warn(&self, message: &str) {
        line(&format!("warning: {message}"));
    }
    fn info(&self, message: &str) {
        line(message);
    }
    fn end_step(&self, title: &str, ok: bool, detail: Option<&str>) {
        let took = elapsed(&self.started, title);
        line(&end_text(title, ok, detail, took));
    }
}

struct PlainTransfer {
    prefix: String,
    total: Mutex<Option<u64>>,
    done: Mutex<u64>,
    started: Instant,
}

impl Transfer for PlainTransfer {
    fn advance(&self, bytes: u64) {
        if let Ok(mut d) = self.done.lock() {
            *d += bytes;
        }
    }
    fn set_total(&self, total: u64) {
        if let Ok(mut t) = self.total.lock() {
            *t = Some(total);
        }
    }
    fn finish(&self, message: &str) {
        let done = self.done.lock().map(|d| *d).unwrap_or(0);
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        line(&format!(
            "  {}: {message} ({}, {}/s)",
            self.prefix,
            indicatif::HumanBytes(done),
            indicatif::HumanBytes((done as f64 / secs) as u64)
        ));
    }
}

/// Spinners per step and byte bars per transfer, on a TTY.
struct TtyReporter {
    me: std::sync::Weak<TtyReporter>,
    multi: MultiProgress,
    bars: Mutex<Vec<(String, ProgressBar, Instant)>>,
}

impl TtyReporter {
    fn shared() -> Arc<dyn Reporter> {
        Arc::new_cyclic(|me| TtyReporter {
            me: me.clone(),
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            bars: Mutex::new(Vec::new()),
        })
    }
}

impl Reporter for TtyReporter {
    fn step(&self, title: &str) -> ProgressStep {
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed:.dim}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(title.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        if let Ok(mut b) = self.bars.lock() {
            b.push((title.to_string(), bar, Instant::now()));
        }
        match self.me.upgrade() {
            Some(me) => ProgressStep::new(title, me),
            None => ProgressStep::silent(title),
        }
    }
    fn transfer(&self, node: &NodeName, label: &str, total: Option<u64>) -> Box<dyn Transfer> {
        let bar = self.multi.add(ProgressBar::new(total.unwrap_or(0)));
        bar.set_style(
            ProgressStyle::with_template(
                "  {prefix} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(node.to_string());
        bar.set_message(label.to_string());
        Box::new(TtyTransfer { bar })
    }
    fn node_line(&self, node: &NodeName, message: &str) {
        let _ = self.multi.println(format!(
            "  {node}: {}",
            crate::text::printable_lines(message)
        ));
    }
    fn warn(&self, message: &str) {
        let _ = self.multi.println(format!(
            "warning: {}",
            crate::text::printable_lines(message)
        ));
    }
    fn info(&self, message: &str) {
        let _ = self.multi.println(crate::text::printable_lines(message));
    }
    fn end_step(&self, title: &str, ok: bool, detail: Option<&str>) {
        let found = self.bars.lock().ok().and_then(|mut b| {
            let pos = b.iter().rposition(|(t, _, _)| t == title)?;
            Some(b.remove(pos))
        });
        let (took, bar) = match found {
            Some((_, bar, started)) => (Some(started.elapsed()), Some(bar)),
            None => (None, None),
        };
        let text = end_text(title, ok, detail, took);
        match bar {
            Some(bar) => {
                bar.finish_and_clear();
                let _ = self.multi.println(text);
            }
            None => line(&text),
        }
    }
}

struct TtyTransfer {
    bar: ProgressBar,
}

impl Transfer for TtyTransfer {
    fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }
    fn set_total(&self, total: u64) {
        self.bar.set_length(total);
    }
    fn finish(&self, message: &str) {
        self.bar.finish_with_message(message.to_string());
    }
}
