//! How long a serving job took to start, stage by stage, in seconds since the launch began:
//! its containers started, its port answered, its API was ready (`/health` 200 and the model
//! listed), its first streamed token came back. Printed after `ready`, in `--json`, and kept in
//! `records/<JOB>/startup.json` for `status JOB` (`crate::records::startup`).
//!
//! Pure: the type and its text; the launch measures it and `records` keeps it.

use serde::{Deserialize, Serialize};

/// One launch's start-up timings. A stage not seen is `None` (shown as `not recorded`), never
/// a guess.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Startup {
    pub job: String,
    /// When the launch began (RFC 3339, UTC).
    pub launched_at: String,
    pub containers_started_s: Option<f64>,
    pub port_open_s: Option<f64>,
    pub http_ready_s: Option<f64>,
    pub first_token_s: Option<f64>,
    /// The token probe's own time from its request to the first token (the head's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_after_ms: Option<u64>,
}

/// Seconds with one decimal, as shown and kept.
pub fn tenths(ms: u128) -> f64 {
    (ms as f64 / 100.0).round() / 10.0
}

impl Startup {
    /// `start-up: containers started 4.1s · port open 9.8s · HTTP ready 12.0s · first token
    /// 12.2s (since the launch began)`.
    pub fn text(&self) -> String {
        let s = |v: Option<f64>| match v {
            Some(v) => format!("{v:.1}s"),
            None => "not recorded".to_string(),
        };
        format!(
            "start-up: containers started {} · port open {} · HTTP ready {} · first token {} (since the launch began)",
            s(self.containers_started_s),
            s(self.port_open_s),
            s(self.http_ready_s),
            s(self.first_token_s),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timings_read_as_one_line_and_a_missing_stage_is_not_recorded() {
        let s = Startup {
            job: "j".into(),
            launched_at: "2026-11-26T17:00:00Z".into(),
            containers_started_s: Some(tenths(4_140)),
            port_open_s: Some(9.8),
            http_ready_s: Some(12.0),
            first_token_s: None,
            token_after_ms: None,
        };
        assert_eq!(
            s.text(),
            "start-up: containers started 4.1s · port open 9.8s · HTTP ready 12.0s · first token not recorded (since the launch began)"
        );
    }
}
