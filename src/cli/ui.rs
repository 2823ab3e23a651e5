//! The binary's edge: `tracing` logs, and what a signal does to a command. The terminal
//! reporters are the library's (`progress::term`). Everything goes to stderr.

use std::sync::Arc;
use std::time::Duration;

use crate::progress::Reporter;

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
