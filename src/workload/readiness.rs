//! When is a serving job ready, and what is it doing meanwhile? A state machine fed with what
//! the executor observes — head log lines, `/health` and `/v1/models` answers, containers that
//! exit — and the time (a number of milliseconds, so tests drive it with a fake clock).
//!
//! - Ready: the engine's health path (`/health`) answered 200, its models path
//!   (`/v1/models`) lists the model, and then one short streamed completion
//!   (`workload::token_probe`) brought a token back. Until the API lists the model no
//!   completion is asked for ([`Readiness::wants_token`]); a probe that gets no token within
//!   its bound is asked again at the next poll, until the deadline.
//! - Progress: the latest phase read from the head's log (loading weights 45%, compiling,
//!   capturing CUDA graphs, Ray 1/2 nodes, ...), with the time spent. Which lines announce
//!   what is the engine's to say (`engines::ReadySignals`).
//! - Failed: the deadline passed (naming the last phase and the last answer seen), or a
//!   container exited, or the API serves another model, or the first generation came back
//!   empty or failed. The first error line of each node's log comes with it (see
//!   [`first_error`]).
//! - Timings: when the port first answered, when the API was ready, when the first token
//!   came ([`Readiness::observe_at`] takes the time of each observation; [`StageTimes`]).
//!
//! Pure: no clock, no network, no logs of its own.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::node::NodeName;
use crate::workload::engines::{EngineKind, ReadySignals};
use crate::workload::token_probe::TokenProbe;

/// Something the executor saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A line of a node's log (the head's, followed live).
    Log { node: NodeName, line: String },
    /// `GET /health`: the status, or why there was none (`connection refused`).
    Health(Result<u16, String>),
    /// `GET /v1/models`: the status and body, or why there was none.
    Models(Result<(u16, String), String>),
    /// A container of the job stopped.
    Exited { node: NodeName, code: i64 },
    /// What one streamed completion brought back (`workload::token_probe`).
    Token(TokenProbe),
}

/// When each stage of the start-up was first seen, in the wait's milliseconds (the `now_ms` of
/// [`Readiness::observe_at`]); `None`: not seen (yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageTimes {
    /// `/health` or `/v1/models` gave any HTTP answer.
    pub port_open_ms: Option<u64>,
    /// `/health` answered 200 and `/v1/models` listed the model.
    pub http_ready_ms: Option<u64>,
    /// The first streamed token came back.
    pub first_token_ms: Option<u64>,
}

/// Why a job did not become ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum NotReady {
    Timeout {
        waited_s: u64,
        phase: String,
        last_answer: String,
    },
    Exited {
        node: NodeName,
        code: i64,
        phase: String,
    },
    WrongModel {
        expected: String,
        listed: Vec<String>,
    },
    /// The API answered, but its first generation came back empty or failed.
    Generation { probe: TokenProbe },
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotReady::Timeout {
                waited_s,
                phase,
                last_answer,
            } => write!(
                f,
                "not ready after {} (last phase: {phase}; the API's last answer: {last_answer})",
                duration(waited_s.saturating_mul(1000))
            ),
            NotReady::Exited { node, code, phase } => write!(
                f,
                "the container on {node} exited with code {code} while {phase}"
            ),
            NotReady::WrongModel { expected, listed } => write!(
                f,
                "the API serves {} instead of {expected}",
                listed.join(", ")
            ),
            NotReady::Generation { probe } => write!(
                f,
                "the API answers, but a first streamed completion gave {probe}"
            ),
        }
    }
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadyVerdict {
    /// Keep waiting; show this progress line.
    Waiting(String),
    Ready {
        models: Vec<String>,
    },
    Failed(NotReady),
}

/// The state of one readiness wait.
#[derive(Clone, Debug)]
pub struct Readiness {
    signals: &'static ReadySignals,
    model: String,
    started_ms: u64,
    timeout_ms: u64,
    phase: String,
    health: Option<u16>,
    last_answer: String,
    models: Option<Vec<String>>,
    exited: Option<(NodeName, i64)>,
    /// The last token probe's result.
    probe: Option<TokenProbe>,
    times: StageTimes,
}

impl Readiness {
    /// A wait for `model` on an engine that shows progress and readiness as `signals` say.
    pub fn new(
        signals: &'static ReadySignals,
        model: &str,
        started_ms: u64,
        timeout_s: u64,
    ) -> Self {
        Readiness {
            signals,
            model: model.to_string(),
            started_ms,
            timeout_ms: timeout_s.saturating_mul(1000),
            phase: "starting".to_string(),
            health: None,
            last_answer: "none yet".to_string(),
            models: None,
            exited: None,
            probe: None,
            times: StageTimes::default(),
        }
    }

    /// When each stage was first seen.
    pub fn times(&self) -> StageTimes {
        self.times
    }

    /// The id `/v1/models` lists for the model (what a completion is asked for), once listed.
    pub fn listed_model(&self) -> Option<&str> {
        self.models
            .as_ref()?
            .iter()
            .find(|m| same_model(m, &self.model))
            .map(String::as_str)
    }

    /// Whether a token probe is due: the API is healthy and lists the model, no token came
    /// yet, and no probe failed.
    pub fn wants_token(&self) -> bool {
        self.health == Some(200)
            && self.listed_model().is_some()
            && self.exited.is_none()
            && !matches!(
                self.probe,
                Some(TokenProbe::Token { .. } | TokenProbe::Empty | TokenProbe::Failed(_))
            )
    }

    /// [`observe`](Self::observe), noting at `now_ms` the stages it shows for the first time
    /// (for a token: `now_ms` is when it came).
    pub fn observe_at(&mut self, obs: Observation, now_ms: u64) {
        let answered = matches!(
            obs,
            Observation::Health(Ok(c)) if c != 0
        ) || matches!(obs, Observation::Models(Ok((c, _))) if c != 0);
        let token = matches!(obs, Observation::Token(TokenProbe::Token { .. }));
        self.observe(obs);
        let api_ready = self.health == Some(200) && self.listed_model().is_some();
        let t = &mut self.times;
        if answered && t.port_open_ms.is_none() {
            t.port_open_ms = Some(now_ms);
        }
        if api_ready && t.http_ready_ms.is_none() {
            t.http_ready_ms = Some(now_ms);
        }
        if token && self.times.first_token_ms.is_none() {
            self.times.first_token_ms = Some(now_ms);
        }
    }

    /// The phase the wait is in: the log's, or `generating a first token` once the API lists
    /// the model.
    pub fn phase(&self) -> &str {
        if self.wants_token() {
            "generating a first token"
        } else {
            &self.phase
        }
    }

    pub fn observe(&mut self, obs: Observation) {
        match obs {
            Observation::Log { line, .. } => {
                if let Some(p) = phase_of(self.signals, &line) {
                    self.phase = p;
                }
            }
            Observation::Health(r) => {
                self.health = r.as_ref().ok().copied();
                self.last_answer = match r {
                    Ok(s) => format!("/health {s}"),
                    Err(e) => format!("/health: {e}"),
                };
            }
            Observation::Models(Ok((200, body))) => match model_ids(&body) {
                Some(ids) => self.models = Some(ids),
                None => self.last_answer = format!("/v1/models: unreadable body {:.80}", body),
            },
            Observation::Models(Ok((status, _))) => {
                self.last_answer = format!("/v1/models {status}")
            }
            Observation::Models(Err(e)) => self.last_answer = format!("/v1/models: {e}"),
            Observation::Exited { node, code } => self.exited = Some((node, code)),
            Observation::Token(p) => {
                if let TokenProbe::NoAnswer { .. } = p {
                    self.last_answer = format!("/v1/completions: {p}");
                }
                self.probe = Some(p);
            }
        }
    }

    pub fn verdict(&self, now_ms: u64) -> ReadyVerdict {
        if let Some((node, code)) = &self.exited {
            return ReadyVerdict::Failed(NotReady::Exited {
                node: node.clone(),
                code: *code,
                phase: self.phase.clone(),
            });
        }
        if self.health == Some(200)
            && let Some(models) = &self.models
        {
            if models.iter().any(|m| same_model(m, &self.model)) {
                match &self.probe {
                    Some(TokenProbe::Token { .. }) => {
                        return ReadyVerdict::Ready {
                            models: models.clone(),
                        };
                    }
                    Some(p @ (TokenProbe::Empty | TokenProbe::Failed(_))) => {
                        return ReadyVerdict::Failed(NotReady::Generation { probe: p.clone() });
                    }
                    _ => {}
                }
            } else if !models.is_empty() {
                return ReadyVerdict::Failed(NotReady::WrongModel {
                    expected: self.model.clone(),
                    listed: models.clone(),
                });
            }
        }
        let waited = now_ms.saturating_sub(self.started_ms);
        if waited >= self.timeout_ms {
            return ReadyVerdict::Failed(NotReady::Timeout {
                waited_s: waited / 1000,
                phase: self.phase().to_string(),
                last_answer: self.last_answer.clone(),
            });
        }
        ReadyVerdict::Waiting(format!("{} · {}", self.phase(), duration(waited)))
    }
}

/// A model id matches when equal, or when one is a path ending in the other (TensorRT-LLM
/// lists the folder it was given).
fn same_model(listed: &str, expected: &str) -> bool {
    listed == expected
        || expected.ends_with(&format!("/{listed}"))
        || listed.ends_with(&format!("/{expected}"))
}

/// The ids listed by an OpenAI `/v1/models` body.
pub fn model_ids(body: &str) -> Option<Vec<String>> {
    #[derive(Deserialize)]
    struct List {
        data: Vec<Item>,
    }
    #[derive(Deserialize)]
    struct Item {
        id: String,
    }
    serde_json::from_str::<List>(body)
        .ok()
        .map(|l| l.data.into_iter().map(|i| i.id).collect())
}

/// `12s`, `3m05s`, `1h02m` from milliseconds.
pub fn duration(ms: u64) -> String {
    crate::progress::human_duration(std::time::Duration::from_millis(ms))
}

/// The phase a log line announces, if any: spark-launch's own lines, then the engine's
/// (`signals.progress`, from the seam).
pub fn phase_of(signals: &ReadySignals, line: &str) -> Option<String> {
    let l = line.trim();
    if let Some(rest) = l.split("spark-launch: ").nth(1) {
        return Some(rest.trim().to_string());
    }
    let lower = l.to_ascii_lowercase();
    signals
        .progress
        .iter()
        .find(|p| p.matches(&lower))
        .map(|p| {
            if p.percent {
                format!("{}{}", p.phase, percent(l))
            } else {
                p.phase.to_string()
            }
        })
}

/// ` 45%` for the first percentage in a line (tqdm bars print `45%|████`), or nothing.
fn percent(line: &str) -> String {
    let mut digits = String::new();
    for c in line.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else if c == '%' && !digits.is_empty() {
            return format!(" {digits}%");
        } else {
            digits.clear();
        }
    }
    String::new()
}

/// The first line of a log that reports an error, made readable: `ERROR` log lines, Python
/// exceptions (`FooError: ...`), NCCL failures, CUDA out-of-memory, spark-launch's own, and
/// what any engine's seam names fatal. Read on the logs of any job (nccl-tests too), so every
/// engine's markers count.
pub fn first_error(log: &str) -> Option<String> {
    log.lines().map(str::trim).find(|l| is_error(l)).map(|l| {
        let mut s: String = l.chars().take(300).collect();
        if l.chars().count() > 300 {
            s.push('…');
        }
        s
    })
}

fn is_error(l: &str) -> bool {
    if l.is_empty() || l.starts_with("Traceback") {
        return false;
    }
    let lower = l.to_ascii_lowercase();
    if lower.contains("spark-launch: error") {
        return true;
    }
    if l.split_whitespace()
        .any(|w| w == "ERROR" || w == "[E]" || w == "CRITICAL")
    {
        return true;
    }
    if lower.contains("cuda out of memory")
        || lower.contains("ncclinternalerror")
        || lower.contains("nccl error")
    {
        return true;
    }
    if EngineKind::ALL
        .iter()
        .any(|e| e.engine().ready().fatal.iter().any(|f| lower.contains(f)))
    {
        return true;
    }
    // `RuntimeError: ...`, `torch.OutOfMemoryError: ...` at the start of a line.
    let head = l.split(':').next().unwrap_or("");
    (head.ends_with("Error") || head.ends_with("Exception"))
        && !head.contains(' ')
        && l.contains(": ")
}

/// The errors of every node, first line each, for the failure report.
pub fn first_errors(logs: &[(NodeName, String)]) -> BTreeMap<NodeName, Option<String>> {
    logs.iter()
        .map(|(n, log)| (n.clone(), first_error(log)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::engines::GENERIC_SIGNALS;

    fn head() -> NodeName {
        NodeName::new("spark").unwrap()
    }

    const MODELS: &str =
        r#"{"object":"list","data":[{"id":"Qwen/Qwen2.5-0.5B-Instruct","object":"model"}]}"#;

    #[test]
    fn ready_needs_a_healthy_api_that_lists_the_model_and_then_a_token() {
        let mut r = Readiness::new(&GENERIC_SIGNALS, "Qwen/Qwen2.5-0.5B-Instruct", 0, 60);
        r.observe_at(Observation::Health(Err("connection refused".into())), 1_000);
        assert!(matches!(r.verdict(1_000), ReadyVerdict::Waiting(_)));
        assert!(!r.wants_token());
        r.observe_at(Observation::Health(Ok(200)), 2_000);
        assert!(matches!(r.verdict(2_000), ReadyVerdict::Waiting(_)));
        assert!(!r.wants_token(), "no probe before the model is listed");
        r.observe_at(Observation::Models(Ok((200, MODELS.into()))), 3_000);
        // Listed is not ready: a token is asked for first.
        assert!(r.wants_token());
        assert_eq!(r.listed_model(), Some("Qwen/Qwen2.5-0.5B-Instruct"));
        assert_eq!(
            r.verdict(3_000),
            ReadyVerdict::Waiting("generating a first token · 3s".into())
        );
        // No token within the probe's bound: asked again, still waiting.
        r.observe_at(
            Observation::Token(TokenProbe::NoAnswer { waited_s: 30 }),
            33_000,
        );
        assert!(r.wants_token());
        assert!(matches!(r.verdict(33_000), ReadyVerdict::Waiting(_)));
        r.observe_at(
            Observation::Token(TokenProbe::Token {
                after_ms: Some(120),
            }),
            33_500,
        );
        assert!(!r.wants_token());
        assert_eq!(
            r.verdict(34_000),
            ReadyVerdict::Ready {
                models: vec!["Qwen/Qwen2.5-0.5B-Instruct".into()]
            }
        );
        assert_eq!(
            r.times(),
            StageTimes {
                port_open_ms: Some(2_000),
                http_ready_ms: Some(3_000),
                first_token_ms: Some(33_500),
            }
        );
    }

    #[test]
    fn an_empty_or_failed_first_generation_is_a_failed_start() {
        for probe in [
            TokenProbe::Empty,
            TokenProbe::Failed("HTTP 500: CUDA error: an illegal memory access".into()),
        ] {
            let mut r = Readiness::new(&GENERIC_SIGNALS, "Qwen/Qwen2.5-0.5B-Instruct", 0, 60);
            r.observe_at(Observation::Health(Ok(200)), 1_000);
            r.observe_at(Observation::Models(Ok((200, MODELS.into()))), 1_000);
            r.observe_at(Observation::Token(probe.clone()), 2_000);
            assert!(!r.wants_token(), "a failed generation is not asked again");
            let v = r.verdict(2_000);
            assert_eq!(
                v,
                ReadyVerdict::Failed(NotReady::Generation {
                    probe: probe.clone()
                })
            );
            assert_eq!(r.times().first_token_ms, None);
            let ReadyVerdict::Failed(e) = v else {
                unreachable!()
            };
            assert!(
                e.to_string()
                    .starts_with("the API answers, but a first streamed completion gave "),
                "{e}"
            );
        }
    }

    #[test]
    fn a_deadline_while_no_token_comes_says_so() {
        let mut r = Readiness::new(&GENERIC_SIGNALS, "Qwen/Qwen2.5-0.5B-Instruct", 0, 60);
        r.observe_at(Observation::Health(Ok(200)), 1_000);
        r.observe_at(Observation::Models(Ok((200, MODELS.into()))), 1_000);
        r.observe_at(
            Observation::Token(TokenProbe::NoAnswer { waited_s: 30 }),
            31_000,
        );
        let v = r.verdict(60_000);
        let ReadyVerdict::Failed(e) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            e.to_string(),
            "not ready after 1m00s (last phase: generating a first token; the API's last answer: /v1/completions: no token within 30s)"
        );
    }

    #[test]
    fn the_progress_line_follows_the_head_log_with_the_time_spent() {
        let mut r = Readiness::new(&GENERIC_SIGNALS, "m", 0, 1200);
        for line in [
            "INFO 05-02 10:00:01 [api_server.py:1] vLLM API server version 0.19.0",
            "Loading safetensors checkpoint shards:  45% Completed | 9/20 [00:31<00:38,  3.51s/it]",
        ] {
            r.observe(Observation::Log {
                node: head(),
                line: line.into(),
            });
        }
        assert_eq!(
            r.verdict(192_000),
            ReadyVerdict::Waiting("loading weights 45% · 3m12s".into())
        );
        r.observe(Observation::Log {
            node: head(),
            line: "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67"
                .into(),
        });
        assert_eq!(r.phase(), "capturing CUDA graphs 100%");
        assert_eq!(percent("██45%|"), " 45%");
        assert_eq!(percent("no number %"), "");
    }

    #[test]
    fn the_deadline_is_an_error_naming_the_last_phase_and_answer() {
        let mut r = Readiness::new(&GENERIC_SIGNALS, "m", 10_000, 20 * 60);
        r.observe(Observation::Log {
            node: head(),
            line: "spark-launch: ray: 1/2 nodes: 10.0.0.1 (1 GPU)".into(),
        });
        r.observe(Observation::Health(Err("connection refused".into())));
        assert!(matches!(
            r.verdict(10_000 + 1_199_999),
            ReadyVerdict::Waiting(_)
        ));
        let v = r.verdict(10_000 + 1_200_000);
        let ReadyVerdict::Failed(e) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            e.to_string(),
            "not ready after 20m00s (last phase: ray: 1/2 nodes: 10.0.0.1 (1 GPU); the API's last answer: /health: connection refused)"
        );
    }

    #[test]
    fn an_exited_container_fails_at_once() {
        let mut r = Readiness::new(&GENERIC_SIGNALS, "m", 0, 600);
        r.observe(Observation::Exited {
            node: NodeName::new("spark2").unwrap(),
            code: 1,
        });
        assert!(matches!(
            r.verdict(1),
            ReadyVerdict::Failed(NotReady::Exited { code: 1, .. })
        ));
    }

    #[test]
    fn another_model_on_the_port_is_not_ours() {
        let mut r = Readiness::new(&GENERIC_SIGNALS, "org/other", 0, 600);
        r.observe(Observation::Health(Ok(200)));
        r.observe(Observation::Models(Ok((200, MODELS.into()))));
        assert!(matches!(
            r.verdict(1),
            ReadyVerdict::Failed(NotReady::WrongModel { .. })
        ));
        let mut r = Readiness::new(
            &GENERIC_SIGNALS,
            "/root/.cache/huggingface/hub/models--o--m/snapshots/abc",
            0,
            600,
        );
        r.observe(Observation::Health(Ok(200)));
        r.observe(Observation::Models(Ok((
            200,
            r#"{"data":[{"id":"abc"}]}"#.into(),
        ))));
        // The completion is asked for the id the API lists.
        assert_eq!(r.listed_model(), Some("abc"));
        r.observe(Observation::Token(TokenProbe::Token { after_ms: None }));
        assert!(matches!(r.verdict(1), ReadyVerdict::Ready { .. }));
    }

    #[test]
    fn the_first_error_line_skips_tracebacks_and_info() {
        let log = "INFO loading\nTraceback (most recent call last):\n  File \"x.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nERROR later\n";
        assert_eq!(
            first_error(log).as_deref(),
            Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        );
        assert_eq!(
            first_error("(EngineCore_DP0 pid=1) ERROR 05-02 10:00:01 [core.py:700] EngineCore failed to start.").as_deref(),
            Some("(EngineCore_DP0 pid=1) ERROR 05-02 10:00:01 [core.py:700] EngineCore failed to start.")
        );
        assert_eq!(
            first_error("spark-launch: ERROR cannot ssh from the head container to 10.0.0.2:2233")
                .as_deref(),
            Some("spark-launch: ERROR cannot ssh from the head container to 10.0.0.2:2233")
        );
        assert_eq!(first_error("all fine\nINFO ok"), None);
    }
}
