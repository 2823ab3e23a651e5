//! What a soak run measured (`bench --soak DURATION`): N streams kept busy for a long time, the
//! output tokens/s per window of time, the requests that finished, failed or were cut at the
//! end, and every **stall** — a span of at least `stall_after` seconds during which requests
//! were in flight and no token arrived (how a wedged multi-node group looks from outside:
//! `/health` answers, nothing is generated).
//!
//! [`SoakMeter`] takes the events as they happen (request sent, token, request finished) with
//! their times in seconds since the soak began, and a clock tick now and then so a stall is
//! noticed while it lasts, not only once the next token ends it. It keeps counts per window,
//! never every token, so an hour-long soak holds little. A token counts as one text chunk of
//! the stream (one token on the engines spark-launch starts).
//!
//! Pure: events and times in, a [`SoakReport`] out; no clock of its own (tests drive it with
//! made-up times). Running the streams is `bench::soak_load`'s job.

use serde::{Deserialize, Serialize};

use super::measure::{Percentiles, percentile};

/// How the soak is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoakSettings {
    /// Seconds per window of the tokens/s series.
    pub window_s: f64,
    /// A span with requests in flight and no token this long (seconds) is a stall.
    pub stall_after_s: f64,
}

/// One window of time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoakWindow {
    /// Seconds since the soak began.
    pub start_s: f64,
    pub end_s: f64,
    /// Text chunks that arrived in the window.
    pub tokens: u64,
    pub tokens_per_s: f64,
    /// Requests that finished well in the window.
    pub requests: u32,
    pub failed: u32,
    /// The most requests in flight at once during the window.
    pub in_flight_max: u32,
}

/// A span with requests in flight and no token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Seconds since the soak began: the last token (or the first request sent) before it.
    pub start_s: f64,
    /// The next token, the moment no request was left in flight, or the end of the soak.
    pub end_s: f64,
    pub duration_s: f64,
    /// The most requests in flight during it.
    pub in_flight: u32,
    /// Still going when the soak ended.
    pub ongoing_at_end: bool,
}

/// A whole soak run: what `--json` prints under `report.soak` and the result file keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoakReport {
    /// Streams kept busy.
    pub concurrency: u32,
    /// The duration asked for, seconds.
    pub duration_s: f64,
    /// How long it ran (shorter when interrupted; a little longer while the last requests
    /// were cut).
    pub elapsed_s: f64,
    pub window_s: f64,
    pub stall_after_s: f64,
    /// Requests that finished well.
    pub requests: u32,
    pub failed: u32,
    /// Times a request was refused before the server took it (a restart: no connection,
    /// 502/503) and sent again; it counts once, as finished or failed, by its last try.
    #[serde(default)]
    pub refused_and_resent: u32,
    /// Requests still in flight when the time was up (cut, not counted as failed).
    pub unfinished: u32,
    /// Text chunks received, over the whole run.
    pub output_tokens: u64,
    pub output_tokens_per_s: f64,
    /// Time to first token of the requests that finished well.
    pub ttft_ms: Option<Percentiles>,
    pub first_error: Option<String>,
    pub windows: Vec<SoakWindow>,
    pub stalls: Vec<Stall>,
}

impl SoakReport {
    /// A stall, a failed request, or no token at all: the soak did not hold up (exit 1). A
    /// soak that never saw a token measured nothing, and says so rather than "no stall".
    pub fn failed(&self) -> bool {
        !self.stalls.is_empty() || self.failed > 0 || self.no_token()
    }

    /// Not a single token came during the whole soak.
    pub fn no_token(&self) -> bool {
        self.output_tokens == 0
    }
}

/// `m:ss` (or `h:mm:ss`) since the soak began.
pub fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, (s % 3600) / 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Finish {
    /// It finished well; its first token came `ttft_s` after it was sent (if any came).
    Ok {
        ttft_s: Option<f64>,
    },
    Failed(String),
    /// Still in flight when the time was up.
    Cut,
}

/// A stall noticed while it lasts (for a live warning).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StallNotice {
    /// When the last token came (or the first request was sent).
    pub since_s: f64,
    pub in_flight: u32,
}

#[derive(Clone, Debug, Default)]
struct WindowCount {
    tokens: u64,
    requests: u32,
    failed: u32,
    in_flight_max: u32,
}

/// Counts a soak as it happens. Times are seconds since the soak began; events from several
/// streams may arrive slightly out of order.
#[derive(Debug)]
pub struct SoakMeter {
    settings: SoakSettings,
    in_flight: u32,
    /// While requests are in flight: since when no token came.
    quiet_since: Option<f64>,
    /// The most requests in flight since `quiet_since`.
    quiet_in_flight: u32,
    /// The current quiet span was already announced by [`SoakMeter::tick`].
    announced: bool,
    windows: Vec<WindowCount>,
    stalls: Vec<Stall>,
    ttfts: Vec<f64>,
    requests: u32,
    failed: u32,
    refused: u32,
    unfinished: u32,
    tokens: u64,
    first_error: Option<String>,
}

impl SoakMeter {
    pub fn new(settings: SoakSettings) -> SoakMeter {
        SoakMeter {
            settings,
            in_flight: 0,
            quiet_since: None,
            quiet_in_flight: 0,
            announced: false,
            windows: Vec::new(),
            stalls: Vec::new(),
            ttfts: Vec::new(),
            requests: 0,
            failed: 0,
            refused: 0,
            unfinished: 0,
            tokens: 0,
            first_error: None,
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    fn window(&mut self, t: f64) -> &mut WindowCount {
        let i = (t.max(0.0) / self.settings.window_s) as usize;
        while self.windows.len() <= i {
            let carried = self.in_flight;
            self.windows.push(WindowCount {
                in_flight_max: carried,
                ..WindowCount::default()
            });
        }
        &mut self.windows[i]
    }

    /// Ends the quiet span at `t`: a stall when it lasted long enough.
    fn close_quiet(&mut self, t: f64, ongoing: bool) {
        if let Some(q) = self.quiet_since
            && t - q >= self.settings.stall_after_s
        {
            self.stalls.push(Stall {
                start_s: q,
                end_s: t,
                duration_s: t - q,
                in_flight: self.quiet_in_flight,
                ongoing_at_end: ongoing,
            });
        }
        self.announced = false;
        self.quiet_in_flight = self.in_flight;
    }

    /// A request was sent at `t`.
    pub fn sent(&mut self, t: f64) {
        self.in_flight += 1;
        if self.quiet_since.is_none() {
            self.quiet_since = Some(t);
            self.quiet_in_flight = 0;
        }
        self.quiet_in_flight = self.quiet_in_flight.max(self.in_flight);
        let n = self.in_flight;
        let w = self.window(t);
        w.in_flight_max = w.in_flight_max.max(n);
    }

    /// A token arrived at `t`.
    pub fn token(&mut self, t: f64) {
        self.tokens += 1;
        self.window(t).tokens += 1;
        match self.quiet_since {
            Some(q) if t > q => {
                self.close_quiet(t, false);
                self.quiet_since = Some(t);
            }
            // Out of order (an earlier token reported late), or no request known in flight.
            _ => {}
        }
    }

    /// A request ended at `t`.
    /// A request in flight was refused before the server took it, and is sent again.
    pub fn refused(&mut self) {
        self.refused += 1;
    }

    pub fn finished(&mut self, t: f64, how: Finish) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match how {
            Finish::Ok { ttft_s } => {
                self.requests += 1;
                self.window(t).requests += 1;
                self.ttfts.extend(ttft_s);
            }
            Finish::Failed(e) => {
                self.failed += 1;
                self.window(t).failed += 1;
                self.first_error.get_or_insert(e);
            }
            Finish::Cut => self.unfinished += 1,
        }
        if self.in_flight == 0 {
            self.close_quiet(t, false);
            self.quiet_since = None;
        }
    }

    /// The clock says `now`: a stall that has just reached `stall_after`, once per stall.
    pub fn tick(&mut self, now: f64) -> Option<StallNotice> {
        let q = self.quiet_since?;
        if self.announced || self.in_flight == 0 || now - q < self.settings.stall_after_s {
            return None;
        }
        self.announced = true;
        Some(StallNotice {
            since_s: q,
            in_flight: self.quiet_in_flight,
        })
    }

    /// The figures of windows that ended by `now` and were not asked for yet (`from` is the
    /// count already taken), for live progress lines.
    pub fn closed_windows(&mut self, from: usize, now: f64) -> Vec<SoakWindow> {
        let done = (now.max(0.0) / self.settings.window_s) as usize;
        if done > 0 {
            self.window((done - 1) as f64 * self.settings.window_s);
        }
        (from..done.min(self.windows.len()))
            .map(|i| self.figures(i, self.settings.window_s * (i + 1) as f64))
            .collect()
    }

    fn figures(&self, i: usize, end: f64) -> SoakWindow {
        let w = &self.windows[i];
        let start = self.settings.window_s * i as f64;
        let end = end.min(start + self.settings.window_s).max(start);
        SoakWindow {
            start_s: start,
            end_s: end,
            tokens: w.tokens,
            tokens_per_s: if end > start {
                w.tokens as f64 / (end - start)
            } else {
                0.0
            },
            requests: w.requests,
            failed: w.failed,
            in_flight_max: w.in_flight_max,
        }
    }

    /// The soak ended at `end` (requests still in flight were cut just before: count them
    /// with [`Finish::Cut`] first, at the time the soak ended, or leave them in flight to
    /// mark a stall as ongoing). `concurrency` and `duration_s` are what was asked.
    pub fn finish(mut self, end: f64, concurrency: u32, duration_s: f64) -> SoakReport {
        if end > 0.0 {
            // Every window up to the end, also those where nothing happened; what happened at
            // the very end (a window that would start there) counts in the last one.
            let last = ((end / self.settings.window_s).ceil() as usize).max(1) - 1;
            self.window(last as f64 * self.settings.window_s);
            while self.windows.len() > last + 1 {
                if let Some(extra) = self.windows.pop()
                    && let Some(w) = self.windows.last_mut()
                {
                    w.tokens += extra.tokens;
                    w.requests += extra.requests;
                    w.failed += extra.failed;
                    w.in_flight_max = w.in_flight_max.max(extra.in_flight_max);
                }
            }
        }
        if self.in_flight > 0 {
            self.close_quiet(end, true);
            self.unfinished += self.in_flight;
            self.in_flight = 0;
        }
        let windows = (0..self.windows.len())
            .map(|i| self.figures(i, end))
            .collect();
        let mut ttfts = std::mem::take(&mut self.ttfts);
        ttfts.sort_by(f64::total_cmp);
        let ttft_ms = match (percentile(&ttfts, 0.5), percentile(&ttfts, 0.95)) {
            (Some(p50), Some(p95)) => Some(Percentiles {
                p50: p50 * 1000.0,
                p95: p95 * 1000.0,
            }),
            _ => None,
        };
        SoakReport {
            concurrency,
            duration_s,
            elapsed_s: end,
            window_s: self.settings.window_s,
            stall_after_s: self.settings.stall_after_s,
            requests: self.requests,
            failed: self.failed,
            refused_and_resent: self.refused,
            unfinished: self.unfinished,
            output_tokens: self.tokens,
            output_tokens_per_s: if end > 0.0 {
                self.tokens as f64 / end
            } else {
                0.0
            },
            ttft_ms,
            first_error: self.first_error,
            windows,
            stalls: self.stalls,
        }
    }
}

/// The longest soak: a week. Longer is a typo (or a number meant to break the clock), and
/// is refused before anything is sent.
pub const MAX_SOAK: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// `--soak DURATION`: `90` or `90s`, `30m`, `2h`, `1h30m`, `1h30m15s`; at most [`MAX_SOAK`].
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_any_duration(s)?;
    if d > MAX_SOAK {
        return Err(format!(
            "{s:?} is longer than a soak may run: at most 7 days (168h); a soak's windows and stalls are kept for the whole run"
        ));
    }
    Ok(d)
}

/// `90` or `90s`, `30m`, `2h`, `1h30m`, `1h30m15s`, unbounded (but no overflow).
fn parse_any_duration(s: &str) -> Result<std::time::Duration, String> {
    let text = s.trim();
    let bad = || format!("expected a duration like 90s, 30m, 2h or 1h30m, got {s:?}");
    if text.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    let (mut total, mut digits) = (0u64, String::new());
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_durations_read_as_people_write_them() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs());
        assert_eq!(secs("90"), Ok(90));
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("30m"), Ok(1800));
        assert_eq!(secs("2h"), Ok(7200));
        assert_eq!(secs("1h30m15s"), Ok(5415));
        for bad in ["", "m", "30x", "30m5", "1.5h", "-5m"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("like 90s, 30m, 2h or 1h30m"), "{bad:?}: {e}");
        }
        // A week at most: the largest number of seconds is no soak.
        assert_eq!(secs("168h"), Ok(7 * 24 * 3600));
        for long in [
            "168h1s",
            "18446744073709551615s",
            "18446744073709551615",
            "99999999h",
        ] {
            let e = parse_duration(long).unwrap_err();
            assert!(e.contains("at most 7 days"), "{long:?}: {e}");
        }
    }

    fn meter(stall_after_s: f64) -> SoakMeter {
        SoakMeter::new(SoakSettings {
            window_s: 10.0,
            stall_after_s,
        })
    }

    /// One stream, a request every second of 10 tokens 0.1 s apart (the first 0.05 s after it
    /// was sent), from `from` to `to` seconds.
    fn steady(m: &mut SoakMeter, from: f64, to: f64) {
        let mut t = from;
        while t + 1.0 <= to {
            m.sent(t);
            for i in 0..10 {
                m.token(t + 0.05 + 0.1 * f64::from(i));
            }
            m.finished(t + 1.0, Finish::Ok { ttft_s: Some(0.05) });
            // The next request goes out at once: no gap with nothing in flight.
            t += 1.0;
        }
    }

    #[test]
    fn a_steady_soak_has_no_stall_and_its_windows_give_back_the_rate() {
        let mut m = meter(5.0);
        steady(&mut m, 0.0, 30.0);
        for t in [5.0, 15.0, 29.9] {
            assert_eq!(m.tick(t), None);
        }
        let r = m.finish(30.0, 1, 30.0);
        assert!(r.stalls.is_empty(), "{:?}", r.stalls);
        assert!(!r.failed());
        assert_eq!((r.requests, r.failed, r.unfinished), (30, 0, 0));
        assert_eq!(r.output_tokens, 300);
        assert_eq!(r.windows.len(), 3);
        for w in &r.windows {
            assert_eq!(w.tokens, 100, "{w:?}");
            assert!((w.tokens_per_s - 10.0).abs() < 1e-9);
            assert_eq!(w.in_flight_max, 1);
        }
        let ttft = r.ttft_ms.unwrap();
        assert!((ttft.p50 - 50.0).abs() < 1e-6);
    }

    #[test]
    fn no_token_for_longer_than_the_bound_with_requests_in_flight_is_a_stall_with_its_span() {
        let mut m = meter(5.0);
        steady(&mut m, 0.0, 10.0);
        // A request goes out at 10 s; its first token only comes at 28 s (a wedge of 18 s).
        m.sent(10.0);
        m.sent(10.5);
        assert_eq!(m.tick(14.9), None, "not yet 5 s");
        let notice = m.tick(15.0).expect("announced once the bound is reached");
        assert_eq!(
            notice,
            StallNotice {
                since_s: 10.0,
                in_flight: 2
            }
        );
        assert_eq!(m.tick(20.0), None, "announced once");
        m.token(28.0);
        m.finished(28.5, Finish::Ok { ttft_s: Some(18.0) });
        m.token(29.0);
        m.finished(29.0, Finish::Ok { ttft_s: Some(18.5) });
        let r = m.finish(30.0, 2, 30.0);
        assert_eq!(
            r.stalls,
            vec![Stall {
                start_s: 10.0,
                end_s: 28.0,
                duration_s: 18.0,
                in_flight: 2,
                ongoing_at_end: false
            }]
        );
        assert!(r.failed());
        // The windows show the hole: 100 tokens, then none, then the two that came late.
        let tokens: Vec<u64> = r.windows.iter().map(|w| w.tokens).collect();
        assert_eq!(tokens, vec![100, 0, 2]);
        assert_eq!(r.windows[1].in_flight_max, 2);
    }

    #[test]
    fn a_quiet_gap_with_nothing_in_flight_is_no_stall() {
        let mut m = meter(5.0);
        steady(&mut m, 0.0, 3.0);
        // Nothing sent from 3 s to 20 s (the client paused): quiet, but nothing was waiting.
        assert_eq!(m.tick(12.0), None);
        steady(&mut m, 20.0, 23.0);
        let r = m.finish(23.0, 1, 23.0);
        assert!(r.stalls.is_empty(), "{:?}", r.stalls);
    }

    #[test]
    fn a_stall_still_going_at_the_end_is_kept_and_its_requests_count_as_unfinished() {
        let mut m = meter(5.0);
        steady(&mut m, 0.0, 4.0);
        m.sent(4.0);
        m.token(4.1);
        m.sent(4.2);
        assert_eq!(m.in_flight(), 2);
        let r = m.finish(60.0, 2, 60.0);
        assert_eq!(r.unfinished, 2);
        assert_eq!(r.failed, 0);
        let s = &r.stalls[0];
        assert_eq!((s.start_s, s.end_s, s.ongoing_at_end), (4.1, 60.0, true));
        // Windows up to the end, the empty ones included.
        assert_eq!(r.windows.len(), 6);
        assert_eq!(r.windows[5].tokens, 0);
        assert_eq!(r.windows[5].in_flight_max, 2);
    }

    #[test]
    fn requests_that_fail_end_the_quiet_span_and_keep_the_first_reason() {
        let mut m = meter(5.0);
        m.sent(0.0);
        m.finished(
            30.0,
            Finish::Failed("no end of the stream within 30s".into()),
        );
        m.sent(31.0);
        m.finished(31.0, Finish::Failed("HTTP 503".into()));
        let r = m.finish(32.0, 1, 32.0);
        assert_eq!(r.failed, 2);
        assert_eq!(
            r.first_error.as_deref(),
            Some("no end of the stream within 30s")
        );
        // 30 s with one request in flight and no token: a stall, ended when it failed.
        assert_eq!(r.stalls.len(), 1);
        assert_eq!((r.stalls[0].start_s, r.stalls[0].end_s), (0.0, 30.0));
        assert_eq!(r.ttft_ms, None);
    }

    #[test]
    fn a_token_reported_late_out_of_order_does_not_open_or_close_a_stall() {
        let mut m = meter(5.0);
        m.sent(0.0);
        m.token(1.0);
        m.token(0.9);
        m.token(2.0);
        m.finished(2.0, Finish::Ok { ttft_s: Some(0.9) });
        let r = m.finish(2.0, 1, 2.0);
        assert!(r.stalls.is_empty());
        assert_eq!(r.output_tokens, 3);
    }

    #[test]
    fn a_soak_that_got_no_token_at_all_failed_even_without_a_stall_or_a_failure() {
        // Requests in flight shorter than the stall bound, then cut at the end: nothing
        // failed, nothing stalled, nothing came.
        let mut m = meter(20.0);
        m.sent(0.0);
        m.sent(0.1);
        let r = m.finish(5.0, 2, 5.0);
        assert!(r.stalls.is_empty() && r.failed == 0, "{r:?}");
        assert!(r.no_token());
        assert!(r.failed());
    }

    #[test]
    fn times_read_as_a_clock_since_the_start() {
        assert_eq!(clock(0.0), "0:00");
        assert_eq!(clock(65.4), "1:05");
        assert_eq!(clock(3725.0), "1:02:05");
    }

    #[test]
    fn closed_windows_come_once_each_as_time_passes() {
        let mut m = meter(5.0);
        steady(&mut m, 0.0, 25.0);
        assert!(m.closed_windows(0, 9.0).is_empty());
        let first = m.closed_windows(0, 21.0);
        assert_eq!(first.len(), 2);
        assert_eq!((first[0].start_s, first[1].end_s), (0.0, 20.0));
        assert_eq!(first[1].tokens, 100);
        // A window where nothing happened at all still closes.
        let mut quiet = meter(5.0);
        assert_eq!(quiet.closed_windows(0, 10.5).len(), 1);
    }
}
