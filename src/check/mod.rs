//! `spark-launch check`: is the served model answering right? A model can pass every health
//! check, list itself at `/v1/models` and stream tokens while answering garbage or thinking
//! forever. The check asks, at temperature 0, questions whose answers spark-launch computes
//! itself ([`arithmetic`]), one question answered in prose, and with a context length a code
//! word hidden that deep ([`needle`]); it judges every answer's number, how each answer ended
//! ([`termination`]: a stop, not the token limit; a think section that closes) and whether the
//! prose is words or soup ([`soup`]). Each check gets a verdict — ok, FAIL, or skip with the
//! reason when nothing was observed to judge — and its evidence, the answer cut short.
//!
//! Pure: the questions ([`questions`]) and the judging ([`judge`]) are data in, data out; the
//! bodies are asked by a shell — `bench`'s HTTP client (`spark-launch check`, `bench`'s own
//! gate) or `curl` on the head node ([`curl`]: readiness, the supervisor).

pub mod arithmetic;
pub mod curl;
pub mod needle;
pub mod render;
pub mod reply;
pub mod soup;
pub mod termination;

use serde::Serialize;
use serde_json::{Value, json};

use reply::{Answered, Reply};
use termination::HowItEnded;

/// The tokens one answer may take by default: room for a reasoning model's think section on
/// a simple question, and then the answer.
pub const DEFAULT_MAX_TOKENS: u32 = 2048;

/// How the questions are asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnswerOptions {
    /// The model id to ask for.
    pub model: String,
    /// The numbers of the questions come from this seed.
    pub seed: u64,
    /// The most tokens one answer may take (its think section included).
    pub max_tokens: u32,
    /// `--context N`: a code word hidden N words deep; `None`: not asked.
    pub context: Option<u32>,
}

/// What a question is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuestionKind {
    Arithmetic(arithmetic::Sum),
    /// An open question: the prose the soup check reads.
    Prose,
    Needle(needle::Needle),
}

/// One question to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub kind: QuestionKind,
    pub prompt: String,
}

/// The open question, answered in a few sentences of prose.
pub const PROSE: &str = "In two or three sentences, explain why the sky is blue.";

/// The questions for `opts`, in the order they are asked.
pub fn questions(opts: &AnswerOptions) -> Vec<Question> {
    let mut out: Vec<Question> = arithmetic::questions(opts.seed)
        .into_iter()
        .map(|s| Question {
            prompt: s.prompt(),
            kind: QuestionKind::Arithmetic(s),
        })
        .collect();
    out.push(Question {
        kind: QuestionKind::Prose,
        prompt: PROSE.to_string(),
    });
    if let Some(words) = opts.context {
        let n = needle::needle(opts.seed, words);
        out.push(Question {
            prompt: n.prompt.clone(),
            kind: QuestionKind::Needle(n),
        });
    }
    out
}

impl Question {
    /// The body of its `/v1/chat/completions` request: greedy (temperature 0), not streamed,
    /// at most `max_tokens`, the model's own end of sequence honoured.
    pub fn body(&self, opts: &AnswerOptions) -> Value {
        json!({
            "model": opts.model,
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": opts.max_tokens,
            "temperature": 0.0,
            "stream": false,
        })
    }
}

/// The path the questions go to, under the API's base (`/v1`).
pub const PATH: &str = "chat/completions";

/// A check's verdict. `Skip` when nothing was observed to judge, never ok or FAIL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    Ok,
    Fail,
    Skip,
}

impl Mark {
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Fail => "FAIL",
            Mark::Skip => "skip",
        }
    }
}

/// One check's verdict, why, and what it saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnswerCheck {
    /// `arithmetic`, `termination`, `soup`, `needle`.
    pub check: String,
    /// What was asked (`417 + 286`, `8000 words deep`), if one question.
    pub subject: String,
    pub mark: Mark,
    pub reason: String,
    /// The answer it judged, cut to about 200 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// Every check of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnswerReport {
    pub url: String,
    pub model: String,
    pub seed: u64,
    pub max_tokens: u32,
    pub checks: Vec<AnswerCheck>,
}

impl AnswerReport {
    /// No check failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.mark != Mark::Fail)
    }

    /// The failed checks, one line each with its evidence (readiness and the supervisor
    /// print this).
    pub fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| c.mark == Mark::Fail)
            .map(|c| {
                let subject = if c.subject.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", c.subject)
                };
                match &c.evidence {
                    Some(e) => format!("{}{subject}: {}; it answered: {e}", c.check, c.reason),
                    None => format!("{}{subject}: {}", c.check, c.reason),
                }
            })
            .collect()
    }

    /// `4 ok, 1 skipped` as a short summary.
    pub fn summary(&self) -> String {
        let count = |m: Mark| self.checks.iter().filter(|c| c.mark == m).count();
        let mut parts = vec![format!("{} ok", count(Mark::Ok))];
        if count(Mark::Fail) > 0 {
            parts.push(format!("{} FAILED", count(Mark::Fail)));
        }
        if count(Mark::Skip) > 0 {
            parts.push(format!("{} skipped", count(Mark::Skip)));
        }
        parts.join(", ")
    }
}

/// Text cut to about 200 characters for evidence, on one line.
pub fn cut(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let one_line = crate::text::printable(&one_line).into_owned();
    match one_line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// The evidence of a reply: its answer, else its thinking (marked), else `(empty)`.
fn evidence(r: &Reply) -> String {
    if !r.answer.is_empty() {
        cut(&r.answer)
    } else if !r.thinking.is_empty() {
        format!("(thinking) {}", cut(&r.thinking))
    } else {
        "(empty)".into()
    }
}

/// Judges the answers (`answered[i]` to `asked[i]`) into the report's checks: one per
/// arithmetic question, then termination over every reply, soup over the prose answer, and
/// the needle (skipped when not asked).
pub fn judge(
    url: &str,
    opts: &AnswerOptions,
    asked: &[Question],
    answered: &[Answered],
) -> AnswerReport {
    let mut checks = Vec::new();
    let pairs: Vec<(&Question, &Answered)> = asked.iter().zip(answered).collect();
    for (q, a) in &pairs {
        let QuestionKind::Arithmetic(sum) = &q.kind else {
            continue;
        };
        let want = sum.value();
        let subject = format!("{} = {want}", sum.expression());
        checks.push(match a {
            Err(e) => fail("arithmetic", &subject, format!("no answer: {e}"), None),
            Ok(r) if r.answer.is_empty() => fail(
                "arithmetic",
                &subject,
                "no answer after its thinking".into(),
                Some(evidence(r)),
            ),
            Ok(r) => match arithmetic::read(&r.answer, want) {
                arithmetic::Reading::Right => {
                    ok("arithmetic", &subject, format!("answered {want}"), r)
                }
                arithmetic::Reading::Wrong(n) => fail(
                    "arithmetic",
                    &subject,
                    format!("answered {n}, not {want}"),
                    Some(evidence(r)),
                ),
                arithmetic::Reading::NoNumber => fail(
                    "arithmetic",
                    &subject,
                    "no number in the answer".into(),
                    Some(evidence(r)),
                ),
            },
        });
    }
    checks.push(termination_check(opts.max_tokens, &pairs));
    checks.push(soup_check(&pairs));
    checks.push(needle_check(opts, &pairs));
    AnswerReport {
        url: url.to_string(),
        model: opts.model.clone(),
        seed: opts.seed,
        max_tokens: opts.max_tokens,
        checks,
    }
}

fn ok(check: &str, subject: &str, reason: String, r: &Reply) -> AnswerCheck {
    AnswerCheck {
        check: check.into(),
        subject: subject.into(),
        mark: Mark::Ok,
        reason,
        evidence: Some(evidence(r)),
    }
}

fn fail(check: &str, subject: &str, reason: String, evidence: Option<String>) -> AnswerCheck {
    AnswerCheck {
        check: check.into(),
        subject: subject.into(),
        mark: Mark::Fail,
        reason,
        evidence,
    }
}

fn skip(check: &str, subject: &str, reason: String) -> AnswerCheck {
    AnswerCheck {
        check: check.into(),
        subject: subject.into(),
        mark: Mark::Skip,
        reason,
        evidence: None,
    }
}

/// Every reply that came back ended with a stop; the first that did not fails the check.
fn termination_check(budget: u32, pairs: &[(&Question, &Answered)]) -> AnswerCheck {
    let replies: Vec<&Reply> = pairs.iter().filter_map(|(_, a)| a.as_ref().ok()).collect();
    if let Some(bad) = replies
        .iter()
        .find(|r| matches!(termination::ending(r), HowItEnded::Limit { .. }))
    {
        return fail(
            "termination",
            "",
            termination::explain(bad, budget),
            Some(evidence(bad)),
        );
    }
    let stopped: Vec<&&Reply> = replies
        .iter()
        .filter(|r| termination::ending(r) == HowItEnded::Stopped)
        .collect();
    let Some(longest) = stopped
        .iter()
        .max_by_key(|r| (r.thinking.len(), r.completion_tokens))
    else {
        return match replies.first() {
            Some(r) => skip("termination", "", termination::explain(r, budget)),
            None => skip("termination", "", "no answer came back to judge".into()),
        };
    };
    let unknown = replies.len() - stopped.len();
    let mut reason = format!(
        "{} of {} answers ended with a stop within {budget} tokens; the longest {}",
        stopped.len(),
        replies.len(),
        termination::explain(longest, budget)
    );
    if unknown > 0 {
        reason.push_str(&format!(
            " ({unknown} ended in a way the server did not name)"
        ));
    }
    ok("termination", "", reason, longest)
}

/// The prose answer (with its thinking) reads as words.
fn soup_check(pairs: &[(&Question, &Answered)]) -> AnswerCheck {
    let Some((_, answered)) = pairs.iter().find(|(q, _)| q.kind == QuestionKind::Prose) else {
        return skip("soup", "", "no prose question was asked".into());
    };
    let r = match answered {
        Err(e) => return fail("soup", "prose", format!("no answer: {e}"), None),
        Ok(r) => r,
    };
    for (part, text) in [("the answer", &r.answer), ("the thinking", &r.thinking)] {
        if let Some(why) = soup::soup(text) {
            return fail(
                "soup",
                "prose",
                format!("{part} is soup: {why}"),
                Some(evidence(r)),
            );
        }
    }
    if r.answer.is_empty() && r.thinking.is_empty() {
        return fail("soup", "prose", "an empty answer".into(), Some(evidence(r)));
    }
    if r.answer.is_empty() {
        return skip(
            "soup",
            "prose",
            "no answer after its thinking to read (termination says why)".into(),
        );
    }
    ok(
        "soup",
        "prose",
        format!("{} words of prose", r.answer.split_whitespace().count()),
        r,
    )
}

/// The code word came back from `--context N` words deep.
fn needle_check(opts: &AnswerOptions, pairs: &[(&Question, &Answered)]) -> AnswerCheck {
    let Some((n, answered)) = pairs.iter().find_map(|(q, a)| match &q.kind {
        QuestionKind::Needle(n) => Some((n, a)),
        _ => None,
    }) else {
        return skip(
            "needle",
            "",
            match opts.context {
                Some(_) => "no answer came back to judge".into(),
                None => "not asked (--context N hides a code word N words deep)".into(),
            },
        );
    };
    let subject = format!("{} words deep", n.words);
    match answered {
        Err(e) => fail(
            "needle",
            &subject,
            format!("no answer with {} words of context: {e}", n.words),
            None,
        ),
        Ok(r) if needle::found(&r.answer, &n.code) => {
            ok("needle", &subject, format!("found {}", n.code), r)
        }
        Ok(r) => fail(
            "needle",
            &subject,
            format!("the code word {} is not in the answer", n.code),
            Some(evidence(r)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(context: Option<u32>) -> AnswerOptions {
        AnswerOptions {
            model: "m".into(),
            seed: 11,
            max_tokens: 64,
            context,
        }
    }

    fn said(answer: &str, finish: &str) -> Answered {
        Ok(Reply {
            answer: answer.into(),
            finish_reason: Some(finish.into()),
            completion_tokens: Some(3),
            ..Reply::default()
        })
    }

    /// Right answers to every question, as a working model gives them.
    fn right(asked: &[Question]) -> Vec<Answered> {
        asked
            .iter()
            .map(|q| match &q.kind {
                QuestionKind::Arithmetic(s) => said(&s.value().to_string(), "stop"),
                QuestionKind::Prose => said(
                    "Air scatters blue light more than red light, so the sky looks blue.",
                    "stop",
                ),
                QuestionKind::Needle(n) => said(&n.code, "stop"),
            })
            .collect()
    }

    #[test]
    fn right_answers_that_stop_pass_every_check_and_an_unasked_needle_is_skipped() {
        let o = opts(None);
        let asked = questions(&o);
        let report = judge("http://x/v1", &o, &asked, &right(&asked));
        assert!(report.passed(), "{report:#?}");
        let marks: Vec<(&str, Mark)> = report
            .checks
            .iter()
            .map(|c| (c.check.as_str(), c.mark))
            .collect();
        assert_eq!(
            marks,
            [
                ("arithmetic", Mark::Ok),
                ("arithmetic", Mark::Ok),
                ("arithmetic", Mark::Ok),
                ("termination", Mark::Ok),
                ("soup", Mark::Ok),
                ("needle", Mark::Skip),
            ]
        );
        assert_eq!(report.summary(), "5 ok, 1 skipped");
        let o = opts(Some(100));
        let asked = questions(&o);
        let report = judge("http://x/v1", &o, &asked, &right(&asked));
        assert_eq!(report.checks[5].mark, Mark::Ok);
        assert_eq!(report.checks[5].subject, "100 words deep");
    }

    #[test]
    fn a_wrong_number_fails_with_the_answer_as_evidence() {
        let o = opts(None);
        let asked = questions(&o);
        let mut answered = right(&asked);
        let QuestionKind::Arithmetic(s) = &asked[0].kind else {
            panic!()
        };
        answered[0] = said(&format!("It is {}.", s.value() + 1), "stop");
        let report = judge("u", &o, &asked, &answered);
        assert!(!report.passed());
        let c = &report.checks[0];
        assert_eq!(c.mark, Mark::Fail);
        assert_eq!(
            c.reason,
            format!("answered {}, not {}", s.value() + 1, s.value())
        );
        assert_eq!(
            c.evidence.as_deref(),
            Some(format!("It is {}.", s.value() + 1).as_str())
        );
        assert!(
            report.failures()[0].starts_with("arithmetic ("),
            "{:?}",
            report.failures()
        );
    }

    #[test]
    fn soup_fails_the_soup_check_and_the_token_limit_fails_termination() {
        let o = opts(None);
        let asked = questions(&o);
        let soup = "blue blue sky sky ".repeat(30);
        let answered: Vec<Answered> = asked.iter().map(|_| said(&soup, "length")).collect();
        let report = judge("u", &o, &asked, &answered);
        let by = |name: &str| report.checks.iter().find(|c| c.check == name).unwrap();
        assert_eq!(by("soup").mark, Mark::Fail);
        assert!(by("soup").reason.contains("soup"), "{}", by("soup").reason);
        assert!(by("soup").evidence.as_ref().unwrap().chars().count() <= 201);
        assert_eq!(by("termination").mark, Mark::Fail);
        assert!(by("termination").reason.contains("token limit (64)"));
        assert_eq!(by("arithmetic").mark, Mark::Fail);
    }

    #[test]
    fn thinking_forever_fails_termination_and_leaves_no_answer_to_read() {
        let o = opts(None);
        let asked = questions(&o);
        let forever: Answered = Ok(Reply {
            thinking: "Let us add the hundreds first, then the tens and the ones".into(),
            think_open: true,
            finish_reason: Some("length".into()),
            completion_tokens: Some(64),
            ..Reply::default()
        });
        let answered: Vec<Answered> = asked.iter().map(|_| forever.clone()).collect();
        let report = judge("u", &o, &asked, &answered);
        let by = |name: &str| report.checks.iter().find(|c| c.check == name).unwrap();
        assert_eq!(by("termination").mark, Mark::Fail);
        assert!(by("termination").reason.contains("never closed"));
        assert!(
            by("termination")
                .evidence
                .as_ref()
                .unwrap()
                .starts_with("(thinking) ")
        );
        assert_eq!(by("soup").mark, Mark::Skip);
        assert_eq!(by("arithmetic").reason, "no answer after its thinking");
    }

    #[test]
    fn nothing_observed_is_skipped_never_ok_and_a_failed_request_fails() {
        let o = opts(Some(10));
        let asked = questions(&o);
        let answered: Vec<Answered> = asked
            .iter()
            .map(|_| Err("HTTP 500: boom".to_string()))
            .collect();
        let report = judge("u", &o, &asked, &answered);
        let by = |name: &str| report.checks.iter().find(|c| c.check == name).unwrap();
        assert_eq!(by("termination").mark, Mark::Skip);
        assert_eq!(by("arithmetic").mark, Mark::Fail);
        assert_eq!(by("arithmetic").reason, "no answer: HTTP 500: boom");
        assert_eq!(by("needle").mark, Mark::Fail);
        // No finish_reason at all: termination is not known.
        let answered: Vec<Answered> = right(&asked)
            .into_iter()
            .map(|a| {
                a.map(|mut r| {
                    r.finish_reason = None;
                    r
                })
            })
            .collect();
        let report = judge("u", &o, &asked, &answered);
        let t = report
            .checks
            .iter()
            .find(|c| c.check == "termination")
            .unwrap();
        assert_eq!(t.mark, Mark::Skip);
        assert_eq!(t.reason, "the server gave no finish_reason");
    }

    #[test]
    fn the_body_is_greedy_and_bounded() {
        let o = opts(None);
        let b = questions(&o)[0].body(&o);
        assert_eq!(b["temperature"], 0.0);
        assert_eq!(b["max_tokens"], 64);
        assert_eq!(b["stream"], false);
        assert_eq!(b["messages"][0]["role"], "user");
    }
}
