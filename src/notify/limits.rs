//! How often an Alert may send (a token bucket per Alert) and when a failed send is tried again (exponential backoff with jitter, a few attempts) (pure).

use std::time::{Duration, Instant};

/// Messages an Alert may send at once after a quiet time.
pub(crate) const BURST: f64 = 5.0;
/// Messages an Alert may send per minute, on average.
pub(crate) const PER_MINUTE: f64 = 10.0;
/// Attempts at one message, the first included.
pub(crate) const ATTEMPTS: u32 = 4;
/// The pause before the second attempt; each later pause doubles it.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);

/// A token bucket: `BURST` tokens, refilled at `PER_MINUTE`.
#[derive(Clone, Debug)]
pub(crate) struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            tokens: BURST,
            at: now,
        }
    }

    /// Takes a token when there is one at `now`.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * PER_MINUTE / 60.0;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        // A small allowance for the refill's rounding: six seconds make exactly one token.
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }
}

/// The pause before attempt `attempt` (2 for the first retry): `FIRST_RETRY` doubled per
/// attempt, lengthened by up to half of it by `jitter` (in `[0, 1)`); None past `ATTEMPTS`.
pub(crate) fn retry_after(attempt: u32, jitter: f64) -> Option<Duration> {
    if !(2..=ATTEMPTS).contains(&attempt) {
        return None;
    }
    let base = FIRST_RETRY * 2u32.pow(attempt - 2);
    Some(base.mul_f64(1.0 + jitter.clamp(0.0, 1.0) / 2.0))
}

/// A jitter in `[0, 1)` from the clock's nanoseconds: spreads retries of many senders apart,
/// no more.
pub(crate) fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_out_then_ten_a_minute() {
        let t = Instant::now();
        let mut bucket = TokenBucket::new(t);
        let burst = (0..20).filter(|_| bucket.take(t)).count();
        assert_eq!(burst, 5);
        assert!(!bucket.take(t + Duration::from_secs(5)), "6 s make a token");
        assert!(bucket.take(t + Duration::from_secs(6)));
        let minute = (1..=60)
            .filter(|s| bucket.take(t + Duration::from_secs(6 + s)))
            .count();
        assert_eq!(minute, 10);
        assert_eq!(
            (0..20)
                .filter(|_| bucket.take(t + Duration::from_secs(3600)))
                .count(),
            5,
            "a quiet hour refills the burst, no more"
        );
    }

    #[test]
    fn retries_double_with_jitter_within_a_bound() {
        assert_eq!(retry_after(1, 0.0), None);
        assert_eq!(retry_after(2, 0.0), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(3, 0.0), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(4, 0.999),
            Some(Duration::from_secs(4).mul_f64(1.4995))
        );
        assert_eq!(retry_after(ATTEMPTS + 1, 0.0), None);
        let total: Duration = (2..=ATTEMPTS).filter_map(|a| retry_after(a, 1.0)).sum();
        assert!(total <= Duration::from_secs(11), "{total:?}");
        assert!((0.0..1.0).contains(&jitter()));
    }
}
