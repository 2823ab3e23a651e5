//! The terminal side of progress: implements the core's `Reporter` with indicatif on a TTY and
//! plain `•`/`✓`/`✗` lines otherwise, and sets up `tracing` logs. Everything goes to stderr.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::node::NodeName;
use crate::progress::{NullReporter, ProgressStep, Reporter, Transfer};

/// Logs go to stderr; `RUST_LOG` overrides the level chosen by `-v`/`-q`.
pub fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (_, 0) => "warn",
        (_, 1) => "info",
        (_, 2) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("spark_launch={level}")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// The reporter for this run: silent with `-q`/`--no-progress`/`SPARK_LAUNCH_NO_PROGRESS`
/// (warnings still print), bars on a TTY, plain lines otherwise or with `-v`.
pub fn reporter(quiet: bool, no_progress: bool, verbose: u8) -> Arc<dyn Reporter> {
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

/// How long a read-only command may take to end by itself after a signal before it is ended.
const EXIT_GRACE: Duration = Duration::from_millis(200);

/// What a command does on Ctrl-C, SIGTERM or SIGHUP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnSignal {
    /// It only reads: the first signal ends it at once (exit 130), even in the middle of
    /// synchronous work that would not notice a token.
    Exit,
    /// It changes things but has nothing of its own to undo: it stops where it next waits; a
    /// second signal quits at once.
    Stop,
    /// It watches the token to stop and clean up; a second signal quits without clean-up
    /// (`starts_jobs`: what it started may still run, and `spark-launch status` shows it).
    CleanUp { starts_jobs: bool },
}

impl OnSignal {
    /// What the second signal prints before quitting (the first quits at once for `Exit`).
    fn quitting(self) -> &'static str {
        match self {
            OnSignal::Exit | OnSignal::Stop => "quitting at once",
            OnSignal::CleanUp { starts_jobs: false } => "quitting without clean-up",
            OnSignal::CleanUp { starts_jobs: true } => {
                "quitting without clean-up: check with `spark-launch status`"
            }
        }
    }
}

/// A token fired by Ctrl-C, SIGTERM or SIGHUP, installed once when the command starts; what
/// else a signal does is `on`'s to say (see [`OnSignal`]).
pub fn cancel_on_signals(
    reporter: Arc<dyn Reporter>,
    on: OnSignal,
) -> tokio_util::sync::CancellationToken {
    let token = tokio_util::sync::CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
        match on {
            // A command that waits ends at once with the token (its connections closed by
            // their owners); one busy with synchronous work would not notice it, so this task
            // (on a worker thread) ends the process after a moment.
            OnSignal::Exit => {
                t.cancel();
                tokio::time::sleep(EXIT_GRACE).await;
                eprintln!("error: interrupted");
                std::process::exit(130);
            }
            OnSignal::CleanUp { .. } => {
                reporter.warn("interrupted (Ctrl-C again to quit at once, without clean-up)");
                t.cancel();
            }
            OnSignal::Stop => t.cancel(),
        }
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("{}", on.quitting());
        std::process::exit(130);
    });
    token
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
