//! Token buckets for the status API's reviews: per remote address, per caller, and in all.

use std::{collections::HashMap, hash::Hash, net::IpAddr, time::Duration};

use tokio::time::Instant;

use super::ADDRESSES;

/// A token bucket's size: how many at once, and how many more each second.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rate {
    /// Taken at once from a full bucket.
    pub(crate) burst: u32,
    /// Added back each second, up to the burst.
    pub(crate) per_second: u32,
}

/// One token bucket: what is left, as of when.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bucket {
    pub(super) left: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Self {
        Self {
            left: f64::from(rate.burst),
            at: now,
        }
    }

    /// Refills for the time since it was last looked at; returns what is left.
    fn refill(&mut self, rate: Rate, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.left = (self.left + elapsed * f64::from(rate.per_second)).min(f64::from(rate.burst));
        self.at = now;
        self.left
    }

    /// How long until one can be taken (zero when one can be now).
    fn wait(&self, rate: Rate) -> Duration {
        if self.left >= 1.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((1.0 - self.left) / f64::from(rate.per_second.max(1)))
    }
}

/// One token bucket per key, at most `capacity` of them remembered: when full, the full buckets
/// go first (they tell nothing), then the fullest.
pub(super) struct Buckets<K> {
    pub(super) rate: Rate,
    capacity: usize,
    pub(super) buckets: HashMap<K, Bucket>,
}

impl<K: Eq + Hash + Clone> Buckets<K> {
    pub(super) fn new(rate: Rate, capacity: usize) -> Self {
        Self {
            rate,
            capacity,
            buckets: HashMap::new(),
        }
    }

    /// The bucket of `key`, refilled as of `now` (a full one when new).
    fn of(&mut self, key: &K, now: Instant) -> &mut Bucket {
        let rate = self.rate;
        if !self.buckets.contains_key(key) && self.buckets.len() >= self.capacity {
            self.buckets
                .retain(|_, b| b.refill(rate, now) < f64::from(rate.burst));
            if self.buckets.len() >= self.capacity
                && let Some(fullest) = self
                    .buckets
                    .iter()
                    .max_by(|a, b| a.1.left.total_cmp(&b.1.left))
                    .map(|(k, _)| k.clone())
            {
                self.buckets.remove(&fullest);
            }
        }
        let bucket = self
            .buckets
            .entry(key.clone())
            .or_insert_with(|| Bucket::full(rate, now));
        bucket.refill(rate, now);
        bucket
    }

    /// Takes one from the bucket of `key`, or says how long until one can be taken.
    pub(super) fn take(&mut self, key: &K, now: Instant) -> Result<(), Duration> {
        let rate = self.rate;
        let bucket = self.of(key, now);
        let wait = bucket.wait(rate);
        if !wait.is_zero() {
            return Err(whole_seconds(wait));
        }
        bucket.left -= 1.0;
        Ok(())
    }
}

/// A wait in whole seconds, rounded up, as `Retry-After` says it.
fn whole_seconds(wait: Duration) -> Duration {
    Duration::from_secs(wait.as_secs_f64().ceil() as u64)
}

/// The budgets of reviews of new tokens: one bucket per remote address (at most [`ADDRESSES`]
/// remembered) and one for every caller together.
pub(super) struct Budgets {
    pub(super) per_address: Buckets<IpAddr>,
    all: (Rate, Bucket),
}

impl Budgets {
    pub(super) fn new(per_address: Rate, all: Rate, now: Instant) -> Self {
        Self {
            per_address: Buckets::new(per_address, ADDRESSES),
            all: (all, Bucket::full(all, now)),
        }
    }

    /// Takes one review from the budget of `from` (when known) and from the common one; when
    /// either is spent, takes nothing and says how long until both allow one.
    pub(super) fn take(&mut self, from: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let rate = self.per_address.rate;
        let mine = from.map(|a| self.per_address.of(&a, now));
        let (all_rate, all) = &mut self.all;
        all.refill(*all_rate, now);
        let wait = match mine {
            Some(bucket) => {
                let wait = bucket.wait(rate).max(all.wait(*all_rate));
                if wait.is_zero() {
                    bucket.left -= 1.0;
                }
                wait
            }
            None => all.wait(*all_rate),
        };
        if !wait.is_zero() {
            return Err(whole_seconds(wait));
        }
        all.left -= 1.0;
        Ok(())
    }
}
