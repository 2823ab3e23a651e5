//! Phases and the one loop that runs them (a phase is one named
//! step with its own clean-up; the user sees one line per step): each phase prints exactly one status line (✗ unless it finished),
//! the run ends with `Finished in Ns`, and after a failure or Ctrl-C the phases that ran are
//! cleaned up in reverse order unless `--keep` was given. A clean-up failure is a warning; it
//! never hides the first error.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::node::NodeName;
use crate::node::fanout::NodeFailures;
use crate::progress::Reporter;
use crate::runtime::RuntimeError;

/// Why a phase failed.
#[derive(Debug, thiserror::Error)]
pub enum PhaseError {
    /// Some nodes failed; every one is listed.
    #[error("{0}")]
    Nodes(NodeFailures<RuntimeError>),
    /// One node's operation failed.
    #[error("{node}: {error}")]
    Node { node: NodeName, error: RuntimeError },
    /// The configuration is refused (a taken job name, a wrong-arch image): exit 2.
    #[error("{0}")]
    Refused(String),
    /// Staging the model's files failed.
    #[error(transparent)]
    Stage(#[from] crate::staging::StageError),
    /// The Hub did not answer what the model is (not a refusal: those are `Refused`).
    #[error(transparent)]
    Hub(#[from] crate::model::hub::HubError),
    /// The image could not be made present on every node.
    #[error(transparent)]
    Image(Box<crate::images::EnsureError>),
    /// A node's runtime gives no shell (a phase that runs commands on every node needs one).
    #[error("{source}; serving needs a shell on every node")]
    NoShell { source: RuntimeError },
    /// Anything else, already worded for the user.
    #[error("{0}")]
    Other(String),
    /// Ctrl-C.
    #[error("interrupted")]
    Cancelled,
}

impl PhaseError {
    pub fn node(node: &NodeName, error: RuntimeError) -> Self {
        if matches!(error, RuntimeError::Cancelled { .. }) {
            return PhaseError::Cancelled;
        }
        PhaseError::Node {
            node: node.clone(),
            error,
        }
    }
}

/// One named step of an apply. Only `title` and `run` are required.
pub trait Phase<C: ?Sized>: Send + Sync {
    /// The status line (`Start on spark-a, spark-b`).
    fn title(&self) -> String;

    /// Whether this phase has anything to do (skipped phases print nothing).
    fn should_run(&self, _ctx: &C) -> bool {
        true
    }

    /// Does the work. `Ok(Some(detail))` adds a detail to the ✓ line.
    fn run<'a>(&'a self, ctx: &'a C) -> BoxFuture<'a, Result<Option<String>, PhaseError>>;

    /// Undoes what `run` did (or the part of it that happened), after a later failure or an
    /// interrupt. `None`: nothing to undo.
    fn cleanup<'a>(&'a self, _ctx: &'a C) -> Option<BoxFuture<'a, Result<(), PhaseError>>> {
        None
    }
}

/// How a run of phases ended badly.
#[derive(Debug)]
pub struct PhaseFailure {
    /// The title of the phase that failed or was interrupted.
    pub phase: String,
    pub error: PhaseError,
    /// Ctrl-C (rather than a failure).
    pub interrupted: bool,
    /// Whether clean-up ran (false with `--keep`).
    pub cleaned_up: bool,
}

/// Runs phases in order.
pub struct Runner {
    pub reporter: Arc<dyn Reporter>,
    /// Fired by Ctrl-C. Checked before every phase; phases look at it at their safe points.
    pub cancel: CancellationToken,
    /// `--keep`: no clean-up after a failure.
    pub keep: bool,
    /// Printed when `keep` left things running (`stop it with: spark-launch stop JOB`).
    pub keep_hint: Option<String>,
}

impl Runner {
    /// Runs `phases` against `ctx`; returns the titles of the phases that ran, or the failure.
    pub async fn run<C: ?Sized>(
        &self,
        phases: &[Box<dyn Phase<C> + '_>],
        ctx: &C,
    ) -> Result<Vec<String>, PhaseFailure> {
        let started = Instant::now();
        let mut ran: Vec<usize> = Vec::new();
        let mut failure: Option<(String, PhaseError)> = None;
        for (i, phase) in phases.iter().enumerate() {
            if !phase.should_run(ctx) {
                continue;
            }
            let title = phase.title();
            if self.cancel.is_cancelled() {
                failure = Some((title, PhaseError::Cancelled));
                break;
            }
            let step = self.reporter.step(&title);
            ran.push(i);
            match phase.run(ctx).await {
                // Ctrl-C while the phase ran: what it did is undone with the rest, so a job is
                // either fully started or leaves nothing behind.
                Ok(_) if self.cancel.is_cancelled() => {
                    step.fail("interrupted");
                    failure = Some((title, PhaseError::Cancelled));
                    break;
                }
                Ok(None) => step.ok(),
                Ok(Some(detail)) => step.ok_with(&detail),
                Err(e) => {
                    let interrupted =
                        matches!(e, PhaseError::Cancelled) || self.cancel.is_cancelled();
                    step.fail(if interrupted { "interrupted" } else { "failed" });
                    let e = if interrupted {
                        PhaseError::Cancelled
                    } else {
                        e
                    };
                    failure = Some((title, e));
                    break;
                }
            }
        }
        let Some((phase, error)) = failure else {
            self.reporter.info(&format!(
                "Finished in {:.1}s",
                started.elapsed().as_secs_f64()
            ));
            return Ok(ran.iter().map(|&i| phases[i].title()).collect());
        };
        let interrupted = matches!(error, PhaseError::Cancelled);
        let cleaned_up = !self.keep;
        if self.keep {
            if let Some(hint) = &self.keep_hint {
                self.reporter
                    .warn(&format!("--keep: left what was started in place; {hint}"));
            }
        } else {
            for &i in ran.iter().rev() {
                let Some(cleanup) = phases[i].cleanup(ctx) else {
                    continue;
                };
                let step = self
                    .reporter
                    .step(&format!("Clean up: {}", phases[i].title()));
                match cleanup.await {
                    Ok(()) => step.ok(),
                    Err(e) => {
                        step.fail("failed");
                        self.reporter.warn(&format!(
                            "clean-up of \"{}\" failed: {e}",
                            phases[i].title()
                        ));
                    }
                }
            }
        }
        self.reporter.info(&format!(
            "{} after {:.1}s",
            if interrupted { "Interrupted" } else { "Failed" },
            started.elapsed().as_secs_f64()
        ));
        Err(PhaseFailure {
            phase,
            error,
            interrupted,
            cleaned_up,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::RecordingReporter;
    use std::sync::Mutex;

    struct Log(Mutex<Vec<String>>);

    struct P {
        name: &'static str,
        fail: bool,
        undo: bool,
        skip: bool,
    }

    impl Phase<Log> for P {
        fn title(&self) -> String {
            self.name.to_string()
        }
        fn should_run(&self, _ctx: &Log) -> bool {
            !self.skip
        }
        fn run<'a>(&'a self, ctx: &'a Log) -> BoxFuture<'a, Result<Option<String>, PhaseError>> {
            Box::pin(async move {
                ctx.0.lock().unwrap().push(format!("run {}", self.name));
                if self.fail {
                    Err(PhaseError::Refused("boom".into()))
                } else {
                    Ok(None)
                }
            })
        }
        fn cleanup<'a>(&'a self, ctx: &'a Log) -> Option<BoxFuture<'a, Result<(), PhaseError>>> {
            self.undo.then(|| -> BoxFuture<'a, Result<(), PhaseError>> {
                Box::pin(async move {
                    ctx.0.lock().unwrap().push(format!("undo {}", self.name));
                    Ok(())
                })
            })
        }
    }

    fn p(name: &'static str, fail: bool, undo: bool) -> Box<dyn Phase<Log>> {
        Box::new(P {
            name,
            fail,
            undo,
            skip: false,
        })
    }

    fn runner(r: Arc<RecordingReporter>, keep: bool) -> Runner {
        Runner {
            reporter: r,
            cancel: CancellationToken::new(),
            keep,
            keep_hint: Some("stop it with `spark-launch stop demo`".into()),
        }
    }

    #[tokio::test]
    async fn phases_run_in_order_with_one_status_line_each_and_a_finish_line() {
        let r = RecordingReporter::new();
        let log = Log(Mutex::new(Vec::new()));
        let phases = vec![
            p("a", false, true),
            Box::new(P {
                name: "skipped",
                fail: false,
                undo: false,
                skip: true,
            }) as Box<dyn Phase<Log>>,
            p("b", false, false),
        ];
        let ran = runner(r.clone(), false).run(&phases, &log).await.unwrap();
        assert_eq!(ran, vec!["a", "b"]);
        let events = r.events();
        assert_eq!(&events[..4], &["start:a", "ok:a", "start:b", "ok:b"]);
        assert!(events[4].starts_with("info:Finished in "), "{events:?}");
        assert_eq!(events.len(), 5);
    }

    #[tokio::test]
    async fn a_failure_cleans_up_the_phases_that_ran_in_reverse_order() {
        let r = RecordingReporter::new();
        let log = Log(Mutex::new(Vec::new()));
        let phases = vec![
            p("a", false, true),
            p("b", false, true),
            p("c", true, true),
            p("d", false, true),
        ];
        let err = runner(r.clone(), false)
            .run(&phases, &log)
            .await
            .unwrap_err();
        assert_eq!(err.phase, "c");
        assert!(!err.interrupted);
        assert!(err.cleaned_up);
        assert_eq!(
            *log.0.lock().unwrap(),
            vec!["run a", "run b", "run c", "undo c", "undo b", "undo a"]
        );
        let events = r.events();
        assert!(events.contains(&"fail:c".to_string()));
        assert!(events.contains(&"ok:Clean up: a".to_string()));
        assert!(!events.iter().any(|e| e.contains(":d")));
    }

    #[tokio::test]
    async fn keep_leaves_everything_in_place_and_says_how_to_stop_it() {
        let r = RecordingReporter::new();
        let log = Log(Mutex::new(Vec::new()));
        let phases = vec![p("a", false, true), p("b", true, true)];
        let err = runner(r.clone(), true)
            .run(&phases, &log)
            .await
            .unwrap_err();
        assert!(!err.cleaned_up);
        assert_eq!(*log.0.lock().unwrap(), vec!["run a", "run b"]);
        assert!(
            r.events()
                .iter()
                .any(|e| e.starts_with("warn:--keep") && e.contains("spark-launch stop demo"))
        );
    }

    #[tokio::test]
    async fn an_interrupt_before_a_phase_stops_the_run_and_cleans_up() {
        let r = RecordingReporter::new();
        let log = Log(Mutex::new(Vec::new()));
        let phases = vec![p("a", false, true), p("b", false, true)];
        let run = runner(r.clone(), false);
        run.cancel.cancel();
        let err = run.run(&phases, &log).await.unwrap_err();
        assert!(err.interrupted);
        assert_eq!(err.phase, "a");
        assert!(log.0.lock().unwrap().is_empty());
    }
}
