//! The rate windows of the Git webhook receiver: per policy, one for hooks that failed verification (large, checked before any hashing) and one for valid hooks (counted only once verified).
//!
//! A hook takes a failure slot before anything is read or hashed and gives it back once its
//! signature verified, so hooks being checked at once cannot overrun the failure bound. Names
//! that are no policy taking hooks are counted too, in one of [`UNKNOWN_BUCKETS`] windows picked
//! by a hash keyed per process, so they get the same answers as a policy's bad hooks while what
//! a stranger posts cannot grow the windows kept. Policies tracked are bounded by [`TRACKED`].

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::Mutex,
    time::Duration,
};

use tokio::time::Instant;

/// The rate window.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Valid hooks taken per policy per window.
pub(crate) const VALID_PER_WINDOW: u32 = 20;
/// Hooks of a policy that may fail verification per window; past it, none is looked at.
pub(crate) const FAILED_PER_WINDOW: u32 = 300;
/// Policies whose windows are tracked at once; past it, hooks of another are turned away.
const TRACKED: usize = 1024;
/// Windows shared by the names that are no policy taking hooks.
const UNKNOWN_BUCKETS: usize = 256;

/// Hooks counted since `start`.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    count: u32,
}

impl Window {
    fn new(now: Instant) -> Self {
        Self {
            start: now,
            count: 0,
        }
    }

    /// Starts again when the window passed; counts one more if under `bound`.
    fn take(&mut self, now: Instant, bound: u32) -> bool {
        if now.duration_since(self.start) >= WINDOW {
            *self = Self::new(now);
        }
        let taken = self.count < bound;
        self.count += u32::from(taken);
        taken
    }

    fn live(&self, now: Instant) -> bool {
        now.duration_since(self.start) < WINDOW
    }
}

/// A failure slot taken for a hook of a policy: given back if it verifies.
pub(crate) struct Attempt {
    policy: String,
    start: Instant,
}

/// The windows of every policy taking hooks and of the unknown names.
pub(crate) struct HookWindows {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Per policy: failed and valid hooks.
    policies: HashMap<String, (Window, Window)>,
    unknown: Vec<Window>,
    keyed: RandomState,
}

impl Default for HookWindows {
    fn default() -> Self {
        let now = Instant::now();
        Self {
            inner: Mutex::new(Inner {
                policies: HashMap::new(),
                unknown: vec![Window::new(now); UNKNOWN_BUCKETS],
                keyed: RandomState::new(),
            }),
        }
    }
}

impl HookWindows {
    /// Takes a failure slot for a hook of `policy`, before its signature is checked; None when
    /// `policy` is past [`FAILED_PER_WINDOW`] (or too many policies are tracked): answer 429.
    /// For a name that is no policy taking hooks (`known` false), Some means: answer 401.
    pub(crate) fn attempt(&self, policy: &str, known: bool) -> Option<Attempt> {
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !known {
            let bucket = inner.keyed.hash_one(policy) as usize % UNKNOWN_BUCKETS;
            let taken = inner.unknown[bucket].take(now, FAILED_PER_WINDOW);
            return taken.then(|| Attempt {
                policy: policy.to_owned(),
                start: now,
            });
        }
        let policies = &mut inner.policies;
        if policies.len() >= TRACKED && !policies.contains_key(policy) {
            policies.retain(|_, (failed, valid)| failed.live(now) || valid.live(now));
            if policies.len() >= TRACKED {
                return None;
            }
        }
        let (failed, _) = policies
            .entry(policy.to_owned())
            .or_insert((Window::new(now), Window::new(now)));
        failed.take(now, FAILED_PER_WINDOW).then_some(Attempt {
            policy: policy.to_owned(),
            start: failed.start,
        })
    }

    /// The hook of `attempt` verified: gives its failure slot back and counts it among the
    /// policy's valid hooks; false past [`VALID_PER_WINDOW`]: answer 429.
    pub(crate) fn verified(&self, attempt: Attempt) -> bool {
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (failed, valid) = inner
            .policies
            .entry(attempt.policy)
            .or_insert((Window::new(now), Window::new(now)));
        if failed.start == attempt.start {
            failed.count = failed.count.saturating_sub(1);
        }
        valid.take(now, VALID_PER_WINDOW)
    }

    /// How many policies' windows are tracked.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.inner.lock().unwrap().policies.len()
    }
}
