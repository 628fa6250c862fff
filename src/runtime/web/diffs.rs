//! Manifest diffs made for the fleet view, on demand and bounded, so no number of viewers makes
//! the hub render without end: one render per (release, action, deployed revision, planned
//! fingerprint) whatever the number of viewers and reloads, shared while it runs (single
//! flight) and kept after in a small least-recently-used cache; at most [`RENDERS`] renders at
//! once and [`QUEUED`] started in all, [`PER_VIEWER`] of them by one viewer; a render given
//! [`RENDER_WITHIN`]; a failure tried again after [`FAILED_FRESH`]; the text cut at [`SHOWN`]
//! bytes.
//!
//! The cache is hand-written: a few dozen entries evicted by last use need no crate, and none of
//! the dependencies has one.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::{
    FutureExt as _,
    future::{BoxFuture, Shared},
};
use tokio::{sync::Semaphore, time::Instant};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    api::key::ReleaseKey,
    status::next::{Action, Next},
};

/// Renders at once, at most: each runs `helm template` (and the post-renderer), so the hub's
/// Helm work for viewers stays one or two processes.
pub(crate) const RENDERS: usize = 2;
/// Renders started and not finished (running or waiting for their turn), at most; past it a
/// viewer is asked to try again.
pub(crate) const QUEUED: usize = 16;
/// Renders one viewer may have started and not finished, at most: one viewer (one tenant's
/// token) cannot take the whole queue from the others.
pub(crate) const PER_VIEWER: usize = 4;
/// Diffs kept, at most (each at most [`SHOWN`] bytes: 8 MiB in all).
pub(crate) const CACHED: usize = 32;
/// The most of a diff's text shown, in bytes; the rest is left out, and the page says so.
pub(crate) const SHOWN: usize = 256 * 1024;
/// How long one diff may take to make (reading the deployed revision, rendering).
pub(crate) const RENDER_WITHIN: Duration = Duration::from_secs(90);
/// How long a diff that could not be made is kept before it is tried again.
pub(crate) const FAILED_FRESH: Duration = Duration::from_secs(30);

/// What makes one release's diff: None when nothing changes, Err saying why it cannot be made
/// (words that never hold what came from a Secret).
pub(crate) type MakeDiff =
    Arc<dyn Fn(Next) -> BoxFuture<'static, Result<Option<String>, String>> + Send + Sync>;

/// What one diff is made of: the release, its action, the revision deployed and the planned
/// release's fingerprint (its spec hash: chart, version, digest, values).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DiffKey {
    key: ReleaseKey,
    action: Action,
    revision: Option<i64>,
    fingerprint: String,
}

impl DiffKey {
    /// The key of `next`'s diff.
    pub(crate) fn of(next: &Next) -> Self {
        Self {
            key: next.key.clone(),
            action: next.action,
            revision: next.revision,
            fingerprint: next
                .release
                .as_ref()
                .map(|r| r.spec_hash.clone())
                .unwrap_or_default(),
        }
    }
}

/// A diff as made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Made {
    /// The unified diff, cut at [`SHOWN`] bytes, and how many of its lines were left out.
    Diff {
        /// The diff's text (whole lines).
        text: String,
        /// Lines left out past [`SHOWN`].
        left_out: usize,
    },
    /// The change leaves the manifest as it is.
    Same,
    /// Why it cannot be made.
    Unmade(String),
}

impl Made {
    /// `made` as kept: a diff cut at [`SHOWN`] bytes on a line's end.
    pub(crate) fn of(made: Result<Option<String>, String>) -> Self {
        match made {
            Ok(None) => Self::Same,
            Err(why) => Self::Unmade(why),
            Ok(Some(text)) if text.len() <= SHOWN => Self::Diff { text, left_out: 0 },
            Ok(Some(text)) => {
                // A tenant's chart may hold characters of several bytes: cut between them.
                let mut within = SHOWN;
                while !text.is_char_boundary(within) {
                    within -= 1;
                }
                let end = text[..within].rfind('\n').map_or(0, |at| at + 1);
                Self::Diff {
                    left_out: text[end..].lines().count(),
                    text: text[..end].to_owned(),
                }
            }
        }
    }
}

/// What asking for a diff gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Got {
    /// The diff, made now or before.
    Ready(Arc<Made>),
    /// Being made; ask again shortly.
    Pending,
    /// Too many renders started: try again later.
    Busy,
}

/// One diff: its render, shared by every viewer asking, and when it was started and last asked.
struct Kept {
    made: Shared<BoxFuture<'static, Arc<Made>>>,
    started: Instant,
    used: u64,
}

/// The diffs made and being made, and the bounds on making them.
pub(crate) struct Diffs {
    kept: std::sync::Mutex<(u64, HashMap<DiffKey, Kept>)>,
    renders: Arc<Semaphore>,
    queued: Arc<Semaphore>,
    started: Arc<std::sync::Mutex<HashMap<String, usize>>>,
    per_viewer: usize,
    cached: usize,
}

impl Default for Diffs {
    fn default() -> Self {
        Self::new(RENDERS, QUEUED, PER_VIEWER, CACHED)
    }
}

/// One render a viewer started, counted against it until the render ends.
struct StartedBy {
    who: String,
    started: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

impl StartedBy {
    /// Counts one more render of `who` in `started`, unless it has `most` under way.
    fn take(
        who: &str,
        started: &Arc<std::sync::Mutex<HashMap<String, usize>>>,
        most: usize,
    ) -> Option<Self> {
        let mut counts = started
            .lock()
            .expect("the render counts are never poisoned");
        let count = counts.entry(who.to_owned()).or_default();
        (*count < most).then(|| {
            *count += 1;
            Self {
                who: who.to_owned(),
                started: started.clone(),
            }
        })
    }
}

impl Drop for StartedBy {
    fn drop(&mut self) {
        let mut counts = self
            .started
            .lock()
            .expect("the render counts are never poisoned");
        if let Some(count) = counts.get_mut(&self.who) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.who);
            }
        }
    }
}

impl Diffs {
    /// Diffs made `renders` at once, at most `queued` started (`per_viewer` by one viewer), at
    /// most `cached` kept.
    pub(crate) fn new(renders: usize, queued: usize, per_viewer: usize, cached: usize) -> Self {
        Self {
            kept: std::sync::Mutex::default(),
            renders: Arc::new(Semaphore::new(renders)),
            queued: Arc::new(Semaphore::new(queued)),
            started: Arc::default(),
            per_viewer,
            cached,
        }
    }

    /// `next`'s diff for viewer `who`, made with `make` (a task of `tasks`, ended by `cancel`)
    /// unless it is kept or being made; waits for it at most `wait`.
    pub(crate) async fn get(
        &self,
        who: &str,
        next: &Next,
        make: &MakeDiff,
        (tasks, cancel): (&TaskTracker, &CancellationToken),
        wait: Duration,
    ) -> Got {
        let Some(made) = self.find_or_start(who, next, make, (tasks, cancel)) else {
            return Got::Busy;
        };
        match tokio::time::timeout(wait, made).await {
            Ok(made) => Got::Ready(made),
            Err(_) => Got::Pending,
        }
    }

    /// The render of `next`'s diff: the one kept or under way, or a new one when one may start.
    fn find_or_start(
        &self,
        who: &str,
        next: &Next,
        make: &MakeDiff,
        (tasks, cancel): (&TaskTracker, &CancellationToken),
    ) -> Option<Shared<BoxFuture<'static, Arc<Made>>>> {
        let key = DiffKey::of(next);
        let mut kept = self.kept.lock().expect("the diff cache is never poisoned");
        let (tick, entries) = &mut *kept;
        *tick += 1;
        if let Some(entry) = entries.get_mut(&key) {
            let failed_long_ago = matches!(entry.made.peek().map(|m| &**m), Some(Made::Unmade(_)))
                && entry.started.elapsed() >= FAILED_FRESH;
            if !failed_long_ago {
                entry.used = *tick;
                return Some(entry.made.clone());
            }
        }
        let by = StartedBy::take(who, &self.started, self.per_viewer)?;
        let slot = self.queued.clone().try_acquire_owned().ok()?;
        let (renders, cancel) = (self.renders.clone(), cancel.clone());
        let work = make(next.clone());
        let release = next.key.clone();
        let task = tasks.spawn(async move {
            let _slot = (slot, by);
            let made = tokio::select! {
                () = cancel.cancelled() => Err("the operator is stopping".to_owned()),
                made = async {
                    let _turn = renders.acquire_owned().await;
                    let started = Instant::now();
                    let made = tokio::time::timeout(RENDER_WITHIN, work).await.unwrap_or_else(|_| {
                        Err(format!("it was not made within {} s; try again later", RENDER_WITHIN.as_secs()))
                    });
                    tracing::info!(%release, ms = started.elapsed().as_millis() as u64, made = made.is_ok(), "made a manifest diff for the fleet view");
                    made
                } => made,
            };
            Arc::new(Made::of(made))
        });
        let made = task
            .map(|joined| {
                joined.unwrap_or_else(|_| Arc::new(Made::Unmade("its render failed".into())))
            })
            .boxed()
            .shared();
        entries.insert(
            key,
            Kept {
                made: made.clone(),
                started: Instant::now(),
                used: *tick,
            },
        );
        if entries.len() > self.cached
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(k, _)| k.clone())
        {
            entries.remove(&oldest);
        }
        Some(made)
    }
}
