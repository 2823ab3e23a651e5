//! Waiting for something on a node, always with a deadline, a sleep between tries and a way to
//! abort: a wait that can never end is a hang, not a feature. A probe answers "ready", "not yet, and here is what I saw" or "this
//! cannot become ready" (a permanent error stops the wait at once). A timeout is an error that
//! names what was awaited and the last state seen.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::error::RuntimeError;

/// One look at the thing being waited for.
pub enum Probe<T> {
    Ready(T),
    /// Not ready; what was seen (shown if the wait times out).
    NotYet(String),
    /// Will never become ready: stop now.
    Abort(RuntimeError),
}

/// Calls `probe` every `interval` until it is ready, aborts, `timeout` passes, or `cancel`
/// fires. Uses tokio's clock, so tests can run it on a paused (fake) clock.
pub async fn until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    cancel: &CancellationToken,
    mut probe: F,
) -> Result<T, RuntimeError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Probe<T>>,
{
    let now = tokio::time::Instant::now();
    // A timeout too long for the clock is as good as none (it never ends the wait).
    let deadline = tokio::time::Instant::from_std(crate::clock::later(now.into_std(), timeout));
    let mut last = "nothing yet".to_string();
    loop {
        let step = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(RuntimeError::Cancelled { what: what.to_string() }),
            step = tokio::time::timeout_at(deadline, probe()) => step,
        };
        match step {
            Ok(Probe::Ready(v)) => return Ok(v),
            Ok(Probe::Abort(e)) => return Err(e),
            Ok(Probe::NotYet(seen)) => last = seen,
            Err(_) => {
                return Err(RuntimeError::Timeout {
                    what: what.to_string(),
                    after: timeout,
                    last,
                });
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(RuntimeError::Timeout {
                what: what.to_string(),
                after: timeout,
                last,
            });
        }
        let next = tokio::time::Instant::from_std(crate::clock::later(now.into_std(), interval))
            .min(deadline);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(RuntimeError::Cancelled { what: what.to_string() }),
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_wait_returns_as_soon_as_the_probe_is_ready() {
        let tries = Arc::new(AtomicU32::new(0));
        let start = tokio::time::Instant::now();
        let t = tries.clone();
        let v = until(
            "the server",
            Duration::from_secs(60),
            Duration::from_secs(2),
            &CancellationToken::new(),
            move || {
                let t = t.clone();
                async move {
                    if t.fetch_add(1, Ordering::SeqCst) < 3 {
                        Probe::NotYet("connection refused".into())
                    } else {
                        Probe::Ready(7)
                    }
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(v, 7);
        assert_eq!(start.elapsed(), Duration::from_secs(6));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_an_error_naming_what_and_the_last_state_seen() {
        let err = until::<(), _, _>(
            "http://n1:8000/health",
            Duration::from_secs(10),
            Duration::from_secs(3),
            &CancellationToken::new(),
            || async { Probe::NotYet("HTTP 503".into()) },
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "http://n1:8000/health: no answer within 10s (last seen: HTTP 503)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_error_stops_the_wait_at_once() {
        let start = tokio::time::Instant::now();
        let err = until::<(), _, _>(
            "image",
            Duration::from_secs(600),
            Duration::from_secs(1),
            &CancellationToken::new(),
            || async { Probe::Abort(RuntimeError::Other("not found".into())) },
        )
        .await
        .unwrap_err();
        assert_eq!(err.to_string(), "not found");
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_ends_the_wait_with_an_interrupted_error() {
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            c.cancel();
        });
        let err = until::<(), _, _>(
            "the job",
            Duration::from_secs(600),
            Duration::from_secs(1),
            &cancel,
            || async { Probe::NotYet("running".into()) },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, RuntimeError::Cancelled { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bound_too_far_for_the_clock_waits_without_panicking() {
        // Seen once: `Instant + Duration` overflowed at u64::MAX seconds.
        for (timeout, interval) in [
            (Duration::MAX, Duration::from_secs(1)),
            (Duration::from_secs(u64::MAX), Duration::from_secs(2)),
        ] {
            let tries = Arc::new(AtomicU32::new(0));
            let t = tries.clone();
            let v = until(
                "the server",
                timeout,
                interval,
                &CancellationToken::new(),
                move || {
                    let t = t.clone();
                    async move {
                        if t.fetch_add(1, Ordering::SeqCst) < 2 {
                            Probe::NotYet("loading".into())
                        } else {
                            Probe::Ready(1)
                        }
                    }
                },
            )
            .await;
            assert!(matches!(v, Ok(1)), "{timeout:?} {interval:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_hangs_is_cut_off_at_the_deadline() {
        let err = until::<(), _, _>(
            "a hung engine",
            Duration::from_secs(30),
            Duration::from_secs(1),
            &CancellationToken::new(),
            || async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Probe::NotYet("never".into())
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    }
}
