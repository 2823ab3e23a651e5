//! How a benchmark run compares: with an earlier run (`bench --compare FILE`: the change of
//! every figure at every level both ran) and with the figures a launch profile expects
//! (`expect:` in the profile: meets, near, or below each one).
//!
//! Pure: reports and expectations in, comparisons out.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::measure::{BenchReport, LevelResult};

/// One figure of a level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    OutputTokensPerS,
    RequestsPerS,
    TtftP50Ms,
    TtftP95Ms,
    ItlP50Ms,
    ItlP95Ms,
}

impl Figure {
    pub const ALL: [Figure; 6] = [
        Figure::OutputTokensPerS,
        Figure::RequestsPerS,
        Figure::TtftP50Ms,
        Figure::TtftP95Ms,
        Figure::ItlP50Ms,
        Figure::ItlP95Ms,
    ];

    /// The field name (in `--json`, the result file and a profile's `expect:`).
    pub fn key(self) -> &'static str {
        match self {
            Figure::OutputTokensPerS => "output_tokens_per_s",
            Figure::RequestsPerS => "requests_per_s",
            Figure::TtftP50Ms => "ttft_p50_ms",
            Figure::TtftP95Ms => "ttft_p95_ms",
            Figure::ItlP50Ms => "itl_p50_ms",
            Figure::ItlP95Ms => "itl_p95_ms",
        }
    }

    /// Throughputs are better higher, latencies lower.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Figure::OutputTokensPerS | Figure::RequestsPerS)
    }

    /// The figure's value at `level`; `None` when it was not observed.
    pub fn of(self, level: &LevelResult) -> Option<f64> {
        match self {
            Figure::OutputTokensPerS => Some(level.output_tokens_per_s),
            Figure::RequestsPerS => Some(level.requests_per_s),
            Figure::TtftP50Ms => level.ttft_ms.map(|p| p.p50),
            Figure::TtftP95Ms => level.ttft_ms.map(|p| p.p95),
            Figure::ItlP50Ms => level.itl_ms.map(|p| p.p50),
            Figure::ItlP95Ms => level.itl_ms.map(|p| p.p95),
        }
    }
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Figure::OutputTokensPerS => "output tok/s",
            Figure::RequestsPerS => "req/s",
            Figure::TtftP50Ms => "TTFT p50 ms",
            Figure::TtftP95Ms => "TTFT p95 ms",
            Figure::ItlP50Ms => "ITL p50 ms",
            Figure::ItlP95Ms => "ITL p95 ms",
        })
    }
}

/// Relative change from `before` to `after`, in percent (`None` from 0).
pub fn change_pct(before: f64, after: f64) -> Option<f64> {
    (before != 0.0).then(|| (after - before) / before * 100.0)
}

/// One figure, then and now.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub figure: Figure,
    pub before: f64,
    pub after: f64,
    pub change_pct: Option<f64>,
    /// Whether the change is for the better (faster, or more per second).
    pub better: bool,
}

/// Every figure of one level both runs measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelChange {
    pub concurrency: u32,
    pub changes: Vec<Change>,
}

/// This run against an earlier one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// When the earlier run started.
    pub earlier_started_at: String,
    /// What differs between the two runs besides the figures (model, lengths, server).
    pub notes: Vec<String>,
    pub levels: Vec<LevelChange>,
    /// Levels only one of the runs measured.
    pub only_earlier: Vec<u32>,
    pub only_now: Vec<u32>,
}

/// Compares `now` with `earlier`, level by level (matched by concurrency).
pub fn compare(earlier: &BenchReport, now: &BenchReport) -> Comparison {
    let mut notes = Vec::new();
    if earlier.model != now.model {
        notes.push(format!(
            "the model differs: {} then, {} now",
            earlier.model, now.model
        ));
    }
    if earlier.url != now.url {
        notes.push(format!(
            "the server differs: {} then, {} now",
            earlier.url, now.url
        ));
    }
    if (earlier.prompt_tokens, earlier.output_tokens, earlier.api)
        != (now.prompt_tokens, now.output_tokens, now.api)
    {
        notes.push(format!(
            "the requests differ: {} prompt / {} output tokens ({}) then, {} / {} ({}) now: figures are not like for like",
            earlier.prompt_tokens,
            earlier.output_tokens,
            earlier.api,
            now.prompt_tokens,
            now.output_tokens,
            now.api
        ));
    }
    notes.extend(soak_notes(earlier, now));
    let mut levels = Vec::new();
    let mut only_now = Vec::new();
    for l in &now.levels {
        let Some(e) = earlier.level(l.concurrency) else {
            only_now.push(l.concurrency);
            continue;
        };
        let changes = Figure::ALL
            .iter()
            .filter_map(|&figure| {
                let (before, after) = (figure.of(e)?, figure.of(l)?);
                Some(Change {
                    figure,
                    before,
                    after,
                    change_pct: change_pct(before, after),
                    better: if figure.higher_is_better() {
                        after > before
                    } else {
                        after < before
                    },
                })
            })
            .collect();
        levels.push(LevelChange {
            concurrency: l.concurrency,
            changes,
        });
    }
    let only_earlier = earlier
        .levels
        .iter()
        .map(|l| l.concurrency)
        .filter(|c| now.level(*c).is_none())
        .collect();
    Comparison {
        earlier_started_at: earlier.started_at.clone(),
        notes,
        levels,
        only_earlier,
        only_now,
    }
}

/// Soak runs compare as a whole (their windows are moments in time, not levels): the
/// throughput over the run and the stalls; a soak against a sweep has nothing to match.
fn soak_notes(earlier: &BenchReport, now: &BenchReport) -> Vec<String> {
    match (&earlier.soak, &now.soak) {
        (None, None) => Vec::new(),
        (Some(e), Some(n)) => {
            let pct = change_pct(e.output_tokens_per_s, n.output_tokens_per_s)
                .map(|p| format!(" ({p:+.1}%)"))
                .unwrap_or_default();
            let mut out = vec![format!(
                "soak: {:.1} output tok/s with {} streams then, {:.1}{pct} with {} now; stalls {} then, {} now; failed requests {} then, {} now",
                e.output_tokens_per_s,
                e.concurrency,
                n.output_tokens_per_s,
                n.concurrency,
                e.stalls.len(),
                n.stalls.len(),
                e.failed,
                n.failed
            )];
            if e.concurrency != n.concurrency {
                out.push(format!(
                    "the soaks differ: {} streams then, {} now: throughput is not like for like",
                    e.concurrency, n.concurrency
                ));
            }
            out
        }
        (Some(_), None) => vec![
            "the earlier run was a soak and this one a sweep: there are no figures to set side by side"
                .to_string(),
        ],
        (None, Some(_)) => vec![
            "the earlier run was a sweep and this one a soak: there are no figures to set side by side"
                .to_string(),
        ],
    }
}

/// The figures a launch profile expects a run to reach (`expect:` in the profile).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// The prompt length the figures hold for; `bench` uses it unless told otherwise.
    pub prompt_tokens: Option<u32>,
    /// The output length the figures hold for; `bench` uses it unless told otherwise.
    pub output_tokens: Option<u32>,
    pub levels: Vec<ExpectedLevel>,
}

/// What one concurrency level should reach: throughputs at least, latencies at most.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedLevel {
    pub concurrency: u32,
    pub output_tokens_per_s: Option<f64>,
    pub requests_per_s: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
}

impl ExpectedLevel {
    /// The figures given, in [`Figure::ALL`]'s order.
    pub fn figures(&self) -> Vec<(Figure, f64)> {
        [
            (Figure::OutputTokensPerS, self.output_tokens_per_s),
            (Figure::RequestsPerS, self.requests_per_s),
            (Figure::TtftP50Ms, self.ttft_p50_ms),
            (Figure::TtftP95Ms, self.ttft_p95_ms),
            (Figure::ItlP50Ms, self.itl_p50_ms),
            (Figure::ItlP95Ms, self.itl_p95_ms),
        ]
        .into_iter()
        .filter_map(|(f, v)| v.map(|v| (f, v)))
        .collect()
    }
}

impl Expectations {
    /// `(field under expect, message)` for every problem.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (field, v) in [
            ("prompt_tokens", self.prompt_tokens),
            ("output_tokens", self.output_tokens),
        ] {
            if v == Some(0) {
                out.push((field.to_string(), "must be at least 1".to_string()));
            }
        }
        if self.levels.is_empty() {
            out.push((
                "levels".to_string(),
                "list at least one level: - {concurrency: 1, output_tokens_per_s: 40}".to_string(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, l) in self.levels.iter().enumerate() {
            if l.concurrency == 0 {
                out.push((
                    format!("levels[{i}].concurrency"),
                    "must be at least 1".to_string(),
                ));
            } else if !seen.insert(l.concurrency) {
                out.push((
                    format!("levels[{i}].concurrency"),
                    format!("concurrency {} is listed twice", l.concurrency),
                ));
            }
            let figures = l.figures();
            if figures.is_empty() {
                out.push((
                    format!("levels[{i}]"),
                    format!(
                        "give at least one figure: {}",
                        Figure::ALL.map(Figure::key).join(", ")
                    ),
                ));
            }
            for (f, v) in figures {
                if !(v > 0.0 && v.is_finite()) {
                    out.push((
                        format!("levels[{i}].{}", f.key()),
                        format!("{v} is not a positive number"),
                    ));
                }
            }
        }
        out
    }

    /// Concurrency levels the profile has figures for.
    pub fn concurrencies(&self) -> Vec<u32> {
        self.levels.iter().map(|l| l.concurrency).collect()
    }
}

/// How far worse than expected a figure may be and still be `near` (10%).
pub const NEAR: f64 = 0.10;

/// How one measured figure stands against its expectation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchVerdict {
    /// At least as good as expected.
    Meets,
    /// Worse, but within [`NEAR`].
    Near,
    /// Worse by more than [`NEAR`].
    Below,
    /// The run did not measure it (the level was not run, or nothing came back).
    NotMeasured,
}

impl fmt::Display for BenchVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BenchVerdict::Meets => "meets",
            BenchVerdict::Near => "near",
            BenchVerdict::Below => "BELOW",
            BenchVerdict::NotMeasured => "not measured",
        })
    }
}

/// One expected figure against the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExpectCheck {
    pub concurrency: u32,
    pub figure: Figure,
    pub expected: f64,
    pub measured: Option<f64>,
    pub change_pct: Option<f64>,
    pub verdict: BenchVerdict,
}

/// A run against a profile's expectations.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExpectReport {
    /// The profile the figures come from.
    pub profile: String,
    pub checks: Vec<ExpectCheck>,
    /// Why the comparison may not be like for like.
    pub notes: Vec<String>,
}

impl ExpectReport {
    /// No figure is worse than expected by more than [`NEAR`].
    pub fn passed(&self) -> bool {
        !self.checks.iter().any(|c| c.verdict == BenchVerdict::Below)
    }
}

/// Judges every expected figure against the run.
pub fn check(profile: &str, expect: &Expectations, run: &BenchReport) -> ExpectReport {
    let mut notes = Vec::new();
    for (what, want, got) in [
        ("prompt", expect.prompt_tokens, run.prompt_tokens),
        ("output", expect.output_tokens, run.output_tokens),
    ] {
        if let Some(want) = want
            && want != got
        {
            notes.push(format!(
                "the profile's figures are for {want} {what} tokens, this run used {got}: not like for like"
            ));
        }
    }
    let mut checks = Vec::new();
    for l in &expect.levels {
        let level = run.level(l.concurrency);
        for (figure, expected) in l.figures() {
            let measured = level
                .filter(|lv| lv.requests > 0)
                .and_then(|lv| figure.of(lv));
            let verdict = match measured {
                None => BenchVerdict::NotMeasured,
                Some(m) => {
                    let (good, near) = if figure.higher_is_better() {
                        (m >= expected, m >= expected * (1.0 - NEAR))
                    } else {
                        (m <= expected, m <= expected * (1.0 + NEAR))
                    };
                    match (good, near) {
                        (true, _) => BenchVerdict::Meets,
                        (false, true) => BenchVerdict::Near,
                        (false, false) => BenchVerdict::Below,
                    }
                }
            };
            checks.push(ExpectCheck {
                concurrency: l.concurrency,
                figure,
                expected,
                measured,
                change_pct: measured.and_then(|m| change_pct(expected, m)),
                verdict,
            });
        }
    }
    ExpectReport {
        profile: profile.to_string(),
        checks,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measure::{Percentiles, TokenCount};
    use crate::bench::request::Api;

    fn level(c: u32, tps: f64, ttft50: f64) -> LevelResult {
        LevelResult {
            concurrency: c,
            requests: 8,
            failed: 0,
            duration_s: 10.0,
            output_tokens: (tps * 10.0) as u64,
            output_tokens_per_s: tps,
            requests_per_s: 0.8,
            ttft_ms: Some(Percentiles {
                p50: ttft50,
                p95: ttft50 * 2.0,
            }),
            itl_ms: Some(Percentiles {
                p50: 20.0,
                p95: 25.0,
            }),
            mean_prompt_tokens: Some(512.0),
            mean_output_tokens: 128.0,
            tokens_counted_by: TokenCount::Usage,
            first_error: None,
        }
    }

    fn run(levels: Vec<LevelResult>) -> BenchReport {
        BenchReport {
            version: 1,
            started_at: "2026-11-23T20:00:00Z".into(),
            url: "http://10.0.0.1:8000/v1".into(),
            job: Some("demo".into()),
            model: "m".into(),
            api: Api::Completions,
            prompt_tokens: 512,
            output_tokens: 128,
            levels,
            soak: None,
            answer_check: None,
        }
    }

    #[test]
    fn a_comparison_gives_each_figures_change_and_whether_it_is_better() {
        let before = run(vec![level(1, 40.0, 100.0), level(4, 120.0, 150.0)]);
        let mut now = run(vec![level(1, 44.0, 120.0), level(16, 300.0, 300.0)]);
        now.output_tokens = 64;
        let c = compare(&before, &now);
        assert_eq!(c.levels.len(), 1);
        let tps = &c.levels[0].changes[0];
        assert_eq!(tps.figure, Figure::OutputTokensPerS);
        assert!((tps.change_pct.unwrap() - 10.0).abs() < 1e-9 && tps.better);
        let ttft = c.levels[0]
            .changes
            .iter()
            .find(|ch| ch.figure == Figure::TtftP50Ms)
            .unwrap();
        assert!((ttft.change_pct.unwrap() - 20.0).abs() < 1e-9 && !ttft.better);
        assert_eq!((c.only_earlier, c.only_now), (vec![4], vec![16]));
        assert!(c.notes[0].contains("not like for like"), "{:?}", c.notes);
    }

    #[test]
    fn expected_figures_are_met_near_or_below_and_unmeasured_levels_say_so() {
        let expect = Expectations {
            prompt_tokens: Some(512),
            output_tokens: Some(128),
            levels: vec![
                ExpectedLevel {
                    concurrency: 1,
                    output_tokens_per_s: Some(42.0),
                    ttft_p50_ms: Some(100.0),
                    ..ExpectedLevel::blank(1)
                },
                ExpectedLevel {
                    concurrency: 4,
                    output_tokens_per_s: Some(200.0),
                    ..ExpectedLevel::blank(4)
                },
                ExpectedLevel {
                    concurrency: 8,
                    output_tokens_per_s: Some(10.0),
                    ..ExpectedLevel::blank(8)
                },
            ],
        };
        let r = check(
            "demo",
            &expect,
            &run(vec![level(1, 40.0, 95.0), level(4, 120.0, 150.0)]),
        );
        let verdicts: Vec<(u32, Figure, BenchVerdict)> = r
            .checks
            .iter()
            .map(|c| (c.concurrency, c.figure, c.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                (1, Figure::OutputTokensPerS, BenchVerdict::Near),
                (1, Figure::TtftP50Ms, BenchVerdict::Meets),
                (4, Figure::OutputTokensPerS, BenchVerdict::Below),
                (8, Figure::OutputTokensPerS, BenchVerdict::NotMeasured),
            ]
        );
        assert!(!r.passed());
        assert!(r.notes.is_empty());
        assert!((r.checks[2].change_pct.unwrap() + 40.0).abs() < 1e-9);
    }

    #[test]
    fn expectations_with_mistakes_name_every_field() {
        let e = Expectations {
            prompt_tokens: Some(0),
            output_tokens: None,
            levels: vec![
                ExpectedLevel {
                    output_tokens_per_s: Some(-3.0),
                    ..ExpectedLevel::blank(1)
                },
                ExpectedLevel::blank(1),
            ],
        };
        let fields: Vec<String> = e.validate().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            vec![
                "prompt_tokens",
                "levels[0].output_tokens_per_s",
                "levels[1].concurrency",
                "levels[1]"
            ]
        );
    }

    impl ExpectedLevel {
        fn blank(concurrency: u32) -> Self {
            ExpectedLevel {
                concurrency,
                output_tokens_per_s: None,
                requests_per_s: None,
                ttft_p50_ms: None,
                ttft_p95_ms: None,
                itl_p50_ms: None,
                itl_p95_ms: None,
            }
        }
    }
}
