//! Deadlines that saturate: `Instant + Duration` panics ("overflow when adding durations") when
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

#[cfg(test)]
mod tests {
    use super::*;

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
