//! WaitServing: readiness of the serving API (the head's log followed for progress, `/health` and
//! `/v1/models` polled, every container watched, then one short streamed completion sent until
//! a token comes back: `workload::token_probe`), judged by `workload::readiness`. The times of
//! the stages go to the context's marks.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, first_errors, look_at_job, shell_for};
use crate::apply::phase::{Phase, PhaseError};
use crate::check;
use crate::model::script::quote;
use crate::plan::{StepPayload, WaitServing};
use crate::runtime::RuntimeError;
use crate::runtime::wait::{self, Probe};
use crate::workload::engines::ReadySignals;
use crate::workload::readiness::{Observation, Readiness, ReadyVerdict};
use crate::workload::token_probe::{self, TokenProbe};

/// How often the API is polled (and the containers looked at).
const POLL: Duration = Duration::from_secs(2);

/// The wait's own bound for a readiness timeout of `timeout_s`: 30 s past it, saturating (a
/// profile's `u64::MAX` once panicked here after the containers had started).
fn wait_bound(timeout_s: u64) -> Duration {
    Duration::from_secs(timeout_s).saturating_add(Duration::from_secs(30))
}

/// How long one token probe waits for its first token (`curl --max-time`); without one it is
/// sent again at the next poll, until the readiness deadline.
const TOKEN_BOUND_S: u64 = 30;

/// How long one of the check's questions may take on the head (`curl --max-time`): a reasoning
/// model's think section included.
const QUESTION_BOUND_S: u64 = 300;

/// Asks the served model the questions of `spark-launch check` from the head (where an API
/// bound to loopback answers too), one at a time, and judges the answers. `None` when
/// cancelled.
async fn ask_answers(
    shell: &dyn crate::runtime::NodeShell,
    url: &str,
    model: &str,
    key: Option<&str>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Option<check::AnswerReport> {
    let opts = check::AnswerOptions {
        model: model.to_string(),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default(),
        max_tokens: check::DEFAULT_MAX_TOKENS,
        context: None,
    };
    let asked = check::questions(&opts);
    let mut answered = Vec::with_capacity(asked.len());
    for q in &asked {
        let script = check::curl::script(url, &q.body(&opts), QUESTION_BOUND_S);
        let ran = tokio::select! {
            r = shell.run(&script, check::curl::header_stdin(key), None) => r,
            _ = cancel.cancelled() => return None,
        };
        answered.push(match ran {
            Ok(out) if out.success() => check::curl::parse(&out.stdout, QUESTION_BOUND_S),
            Ok(out) => Err(out.stderr_tail().trim().to_string()),
            Err(e) => Err(e.to_string()),
        });
    }
    Some(check::judge(url, &opts, &asked, &answered))
}

/// What the readiness wait keeps between polls.
struct Watch {
    readiness: Readiness,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    shown: String,
    shown_at: u64,
}

/// `curl` of the engine's health and models paths (`/health`, `/v1/models`) on the node:
/// prints `health CODE`, then `models CODE` and the body. The models path is asked with the
/// header lines on stdin (the API key's `Authorization`, or an empty line), written to a 0600
/// file for `curl -H @FILE`: the key is never on a command line.
pub fn poll_script(url: &str, signals: &ReadySignals) -> String {
    let base = url.trim_end_matches('/');
    let health = quote(&format!("{base}{}", signals.health_path));
    let models = quote(&format!("{base}{}", signals.models_path));
    format!(
        r#"command -v curl >/dev/null || {{ echo "curl is not installed on this node" >&2; exit 127; }}
T=$(umask 077; mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
IFS= read -r hdr || hdr=
: > "$T/h"
[ -n "$hdr" ] && printf '%s\n' "$hdr" > "$T/h"
printf 'health %s\n' "$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {health})"
b=$(curl -s --max-time 5 -H @"$T/h" -w '\n%{{http_code}}' {models})
printf 'models %s\n' "${{b##*$'\n'}}"
printf '%s\n' "${{b%$'\n'*}}"
"#
    )
}

/// Parses [`poll_script`]'s output into observations.
pub fn poll_observations(out: &str) -> Vec<Observation> {
    let mut lines = out.lines();
    let mut obs = Vec::new();
    let code = |s: Option<&str>, prefix: &str| -> Option<u16> {
        s?.strip_prefix(prefix)?.trim().parse().ok()
    };
    match code(lines.next(), "health ") {
        Some(0) | None => obs.push(Observation::Health(Err(
            "no answer (connection refused)".into()
        ))),
        Some(c) => obs.push(Observation::Health(Ok(c))),
    }
    match code(lines.next(), "models ") {
        Some(0) | None => obs.push(Observation::Models(Err("no answer".into()))),
        Some(c) => {
            let body: Vec<&str> = lines.collect();
            obs.push(Observation::Models(Ok((c, body.join("\n")))));
        }
    }
    obs
}

/// The head's log, line by line, from a task (the stream is 'static): the task, to abort when
/// the wait ends, and the lines.
fn follow_lines(
    mut logs: futures::stream::BoxStream<'static, Result<bytes::Bytes, RuntimeError>>,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let follower = tokio::spawn(async move {
        let mut pending = Vec::new();
        while let Some(Ok(chunk)) = logs.next().await {
            pending.extend_from_slice(&chunk);
            while let Some(i) = pending.iter().position(|b| *b == b'\n' || *b == b'\r') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                let text = String::from_utf8_lossy(&line).trim().to_string();
                if !text.is_empty() && tx.send(text).is_err() {
                    return;
                }
            }
        }
    });
    (follower, rx)
}

/// One token probe for `model` on the head: what it found, and when (the node's own time to
/// the first token added to when it was sent, else now). `None` for a dropped round trip,
/// which says nothing of the engine: asked again at the next poll, within the deadline.
async fn send_token_probe(
    shell: &dyn crate::runtime::NodeShell,
    url: &str,
    model: &str,
    header: &[u8],
    now: impl Fn() -> u64,
) -> Option<(TokenProbe, u64)> {
    let sent = now();
    let probe = token_probe::script(url, model, TOKEN_BOUND_S);
    let out = shell.run(&probe, header.to_vec(), None).await.ok()?;
    let got = token_probe::parse(&out.stdout, TOKEN_BOUND_S);
    let at = match &got {
        TokenProbe::Token { after_ms: Some(ms) } => sent + ms,
        _ => now(),
    };
    Some((got, at))
}

impl<'a> Phase<ApplyContext<'a>> for WaitServing {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let handle = ctx.node(&self.node)?;
            let shell = shell_for(handle)?;
            let name = ctx.plan.job.container_name(&self.node);
            let logs = handle
                .logs(ctx.plan.runtime, &name, true, false)
                .await
                .map_err(|e| PhaseError::node(&self.node, e))?;
            let (follower, rx) = follow_lines(logs);
            // The engine's signals, by the engine's name the step carries.
            let signals = ReadySignals::of_workload(&self.engine);
            let started = Instant::now();
            let now = || started.elapsed().as_millis() as u64;
            let watch = Mutex::new(Watch {
                readiness: Readiness::new(signals, &self.model, 0, self.timeout_s),
                lines: rx,
                shown: String::new(),
                shown_at: 0,
            });
            let script = poll_script(&self.url, signals);
            let header = token_probe::header_stdin(self.api_key.as_ref().map(|k| k.expose()));
            let what = format!("{} to serve {}", self.url, self.model);
            // The readiness verdict ends the wait at the timeout, with what it saw; the wait's
            // own deadline, a little later, only bounds a probe that hangs.
            let deadline = wait_bound(self.timeout_s);
            let waited = wait::until(&what, deadline, POLL, &ctx.cancel, || async {
                let look = look_at_job(ctx).await;
                let polled = shell.run(&script, header.clone(), None).await;
                let token_for = {
                    let Ok(mut w) = watch.lock() else {
                        return Probe::NotYet("(state lost)".into());
                    };
                    let w = &mut *w;
                    while let Ok(line) = w.lines.try_recv() {
                        w.readiness.observe(Observation::Log {
                            node: self.node.clone(),
                            line,
                        });
                    }
                    for e in &look.ended {
                        w.readiness.observe(Observation::Exited {
                            node: e.node.clone(),
                            code: e.exit_code,
                        });
                    }
                    let at = now();
                    match polled {
                        Ok(out) if out.success() => {
                            for o in poll_observations(&out.stdout) {
                                w.readiness.observe_at(o, at);
                            }
                        }
                        Ok(out) => w.readiness.observe(Observation::Health(Err(out
                            .stderr_tail()
                            .trim()
                            .to_string()))),
                        // A dropped round trip: retried at the next poll, within the deadline.
                        Err(e) => w.readiness.observe(Observation::Health(Err(e.to_string()))),
                    }
                    w.readiness
                        .wants_token()
                        .then(|| w.readiness.listed_model().map(str::to_string))
                        .flatten()
                };
                // The API lists the model: one streamed completion, for the id it lists.
                let token = match token_for {
                    Some(model) => {
                        send_token_probe(shell.as_ref(), &self.url, &model, &header, now).await
                    }
                    None => None,
                };
                let Ok(mut w) = watch.lock() else {
                    return Probe::NotYet("(state lost)".into());
                };
                let w = &mut *w;
                if let Some((got, at)) = token {
                    if let TokenProbe::Token { after_ms } = &got {
                        ctx.mark(|m| m.token_after_ms = *after_ms);
                    }
                    w.readiness.observe_at(Observation::Token(got), at);
                }
                match w.readiness.verdict(now()) {
                    ReadyVerdict::Waiting(line) => {
                        // A line when the phase changes, and every half minute.
                        if w.readiness.phase() != w.shown || now() >= w.shown_at + 30_000 {
                            ctx.reporter.node_line(&self.node, &line);
                            w.shown = w.readiness.phase().to_string();
                            w.shown_at = now();
                        }
                        Probe::NotYet(match look.unknown_text() {
                            Some(u) => format!("{line} ({u})"),
                            None => line,
                        })
                    }
                    ReadyVerdict::Ready { models } => Probe::Ready(models),
                    ReadyVerdict::Failed(why) => Probe::Abort(RuntimeError::Other(why.to_string())),
                }
            })
            .await;
            if let Ok(w) = watch.lock() {
                let times = w.readiness.times();
                let at = |ms: Option<u64>| ms.map(|ms| started + Duration::from_millis(ms));
                ctx.mark(|m| {
                    m.port_open = at(times.port_open_ms);
                    m.http_ready = at(times.http_ready_ms);
                    m.first_token = at(times.first_token_ms);
                });
            }
            let result = match waited {
                Ok(models) => {
                    let serving = format!(
                        "serving {} after {}, first token in {}",
                        models.join(", "),
                        crate::workload::readiness::duration(now()),
                        ctx.marks()
                            .token_after_ms
                            .map(|ms| format!("{ms} ms"))
                            .unwrap_or_else(|| "(not timed)".into())
                    );
                    // A first token says nothing of what the model answers: a model that
                    // answers garbage or thinks forever is a failed start (unless --no-check).
                    let model = models
                        .first()
                        .cloned()
                        .unwrap_or_else(|| self.model.clone());
                    let key = self.api_key.as_ref().map(|k| k.expose());
                    if self.no_check {
                        Ok(Some(format!("{serving}; answers not checked (--no-check)")))
                    } else {
                        match ask_answers(shell.as_ref(), &self.url, &model, key, &ctx.cancel).await
                        {
                            None => Err(PhaseError::Cancelled),
                            Some(r) if r.passed() => {
                                Ok(Some(format!("{serving}; answers right ({})", r.summary())))
                            }
                            Some(r) => Err(PhaseError::Other(format!(
                                "{} serves {model} but does not answer right ({}):\n  {}\nmore: spark-launch check {}; --no-check starts it anyway",
                                self.url,
                                r.summary(),
                                r.failures().join("\n  "),
                                ctx.plan.job
                            ))),
                        }
                    }
                }
                Err(RuntimeError::Cancelled { .. }) => Err(PhaseError::Cancelled),
                Err(e) => {
                    let why = match e {
                        RuntimeError::Other(why) => why,
                        e => e.to_string(),
                    };
                    let errors = first_errors(ctx).await;
                    Err(PhaseError::Other(format!(
                        "{why}\nfirst error line of each node's log:\n  {}\nmore: spark-launch logs {}",
                        errors.join("\n  "),
                        ctx.plan.job
                    )))
                }
            };
            follower.abort();
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeName;
    use crate::runtime::shell::{LocalShell, NodeShell};

    #[test]
    fn a_huge_readiness_timeout_bounds_the_wait_without_panicking() {
        assert_eq!(wait_bound(600), Duration::from_secs(630));
        assert_eq!(wait_bound(u64::MAX), Duration::MAX);
        let r = Readiness::new(&crate::workload::engines::GENERIC_SIGNALS, "m", 0, u64::MAX);
        // A year in, still waiting: the bound saturates, never wraps to "already late".
        assert!(matches!(
            r.verdict(365 * 24 * 3600 * 1000),
            ReadyVerdict::Waiting(_)
        ));
    }

    #[test]
    fn a_poll_answer_becomes_health_and_models_observations() {
        let obs = poll_observations("health 200\nmodels 200\n{\"data\":[{\"id\":\"m\"}]}\n");
        assert_eq!(obs[0], Observation::Health(Ok(200)));
        assert_eq!(
            obs[1],
            Observation::Models(Ok((200, "{\"data\":[{\"id\":\"m\"}]}".into())))
        );
        let obs = poll_observations("health 000\nmodels 000\n\n");
        assert!(matches!(obs[0], Observation::Health(Err(_))));
        assert!(matches!(obs[1], Observation::Models(Err(_))));
    }

    #[tokio::test]
    async fn the_poll_script_reads_a_real_http_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if req.starts_with("GET /v1/models") {
                    "{\"data\":[{\"id\":\"org/m\"}]}"
                } else {
                    ""
                };
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let shell = LocalShell::new(NodeName::new("local").unwrap());
        let out = shell
            .run(
                &poll_script(
                    &format!("http://127.0.0.1:{port}"),
                    &crate::workload::engines::GENERIC_SIGNALS,
                ),
                Vec::new(),
                None,
            )
            .await
            .unwrap();
        let obs = poll_observations(&out.stdout);
        assert_eq!(obs[0], Observation::Health(Ok(200)));
        assert_eq!(
            obs[1],
            Observation::Models(Ok((200, "{\"data\":[{\"id\":\"org/m\"}]}".into())))
        );
    }
}
