//! Time as the crate needs it: UTC stamps for what it keeps and shows ([`utc_stamp`]), and
//! deadlines that saturate: `Instant + Duration` panics ("overflow when adding durations") when
//! the sum is past what the clock holds, and a timeout the user controls (a profile's
//! `ready_timeout_s`, `bench --soak`) can be that long. Every deadline computed from such a
//! value goes through [`later`]. A leaf: imports nothing of the crate. Pure.

use std::time::{Duration, Instant};

/// `at + by`, saturating: a deadline too far for the clock becomes the farthest one it holds
/// (never the "overflow when adding durations" panic of `Instant + Duration`). Every deadline
/// computed from a value the user controls goes through here.
pub fn later(at: Instant, by: Duration) -> Instant {
    let mut by = by;
    loop {
        if let Some(t) = at.checked_add(by) {
            return t;
        }
        // Halving ends: `at + 0` always fits.
        by /= 2;
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn utc_stamp(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_read_like_rfc_3339() {
        assert_eq!(utc_stamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_stamp(1_714_564_800), "2024-05-01T12:00:00Z");
        assert_eq!(utc_stamp(951_827_696), "2000-02-29T12:34:56Z");
    }

    #[test]
    fn a_deadline_past_what_the_clock_holds_saturates_instead_of_panicking() {
        let now = Instant::now();
        let far = later(now, Duration::from_secs(u64::MAX));
        assert!(far > now + Duration::from_secs(30 * 24 * 3600));
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert!(later(far, Duration::MAX) >= far);
    }
}
