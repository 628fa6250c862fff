//! What is known of each chart: chart-home directories by content digest, repository and OCI charts by resolved version.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use dashmap::DashMap;
use futures::StreamExt;
use tokio::time::Instant;

use crate::{
    api::crd::{Chart, ControllerSpec},
    charts::cache::Resolved,
    plan::{ChartLookup, ChartSource, Verified},
    policy::Scope,
    policy::access::{Credentials, Trust},
    policy::source::{SourceUrl, redact},
};

/// Resolutions run at once by one refresh.
const RESOLVE_CONCURRENCY: usize = 4;

/// One remote chart and constraint: its last resolution.
struct Entry {
    /// Held while helm runs, so one entry is never resolved twice at once.
    flight: tokio::sync::Mutex<()>,
    slot: Mutex<Slot>,
}

struct Slot {
    /// The last successful resolution (verified, when its key has signature rules).
    good: Option<Resolved>,
    /// How `good` was verified, when its key has signature rules.
    verified: Option<Verified>,
    /// Why the last resolution was refused by a signature rule, when it was.
    refused: Option<String>,
    /// Why the last attempt failed, when it did.
    failure: Option<String>,
    /// When it was last attempted.
    tried: Option<Instant>,
    /// The prefix its fetches stayed under then: another one (the policies changed) makes the
    /// attempt stale.
    scope: Option<SourceUrl>,
    /// When a spec last named it.
    seen: Instant,
}

impl Entry {
    fn new(now: Instant) -> Self {
        Self {
            flight: tokio::sync::Mutex::new(()),
            slot: Mutex::new(Slot {
                good: None,
                verified: None,
                refused: None,
                failure: None,
                tried: None,
                scope: None,
                seen: now,
            }),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, key: &RemoteKey) -> ChartLookup {
        let slot = self.slot();
        if let Some(refused) = &slot.refused {
            return ChartLookup::Unverified(refused.clone());
        }
        // A Git chart whose dependency the policies refuse: nothing of it is planned.
        if let Some(refused) = slot
            .good
            .as_ref()
            .and_then(|g| g.git.as_ref()?.refused.as_ref())
        {
            return ChartLookup::Missing(refused.clone());
        }
        match (&slot.good, &slot.failure) {
            (Some(good), _) if key.trust.is_empty() => ChartLookup::Found {
                version: Some(good.version.clone()),
                digest: good.digest.clone(),
                verified: signed_dependencies(good),
                commit: good.git.as_ref().map(|g| g.commit.clone()),
            },
            (Some(good), _) => match &slot.verified {
                // A repository chart has no digest of its own: the archive checked is its.
                Some(verified) => ChartLookup::Found {
                    version: Some(good.version.clone()),
                    digest: Some(
                        good.digest
                            .clone()
                            .unwrap_or_else(|| format!("sha256:{}", verified.archive)),
                    ),
                    verified: Some(verified.clone()),
                    commit: good.git.as_ref().map(|g| g.commit.clone()),
                },
                None => ChartLookup::Unverified(format!(
                    "the signatures of {} are not checked yet",
                    key.describe()
                )),
            },
            (None, Some(failure)) => ChartLookup::Missing(failure.clone()),
            (None, None) => ChartLookup::Missing(format!("{} is not resolved yet", key.describe())),
        }
    }
}

/// A Git chart no rule asks signatures of, whose dependencies' sources did: who signed them,
/// with the archive they were packed into (the one installed).
fn signed_dependencies(good: &Resolved) -> Option<Verified> {
    let signed_by = &good.git.as_ref()?.signed_by;
    let archive = good.archive.clone()?;
    (!signed_by.is_empty()).then(|| Verified {
        by: signed_by.join("; "),
        archive,
    })
}

/// The chart catalog: looked up by the planner, filled before each plan and refreshed every
/// interval.
pub(crate) struct ChartCatalog {
    resolver: Box<dyn Resolve>,
    interval: Duration,
    directories: DashMap<PathBuf, Directory>,
    remote: DashMap<RemoteKey, Arc<Entry>>,
    git_values: git_values::GitValues,
    /// Woken when a push hook made Git sources due.
    git_due: tokio::sync::Notify,
}

impl ChartCatalog {
    /// A catalog resolving repository and OCI charts through `cache`, again when a resolution
    /// is older than `interval`; checking no signatures.
    #[cfg(test)]
    pub(crate) fn new(cache: Arc<crate::charts::cache::ChartCache>, interval: Duration) -> Self {
        Self::with_resolver(Box::new(cache), interval)
    }

    /// A catalog resolving and checking charts through `resolver`.
    pub(crate) fn with_resolver(resolver: Box<dyn Resolve>, interval: Duration) -> Self {
        Self {
            resolver,
            interval,
            directories: DashMap::new(),
            remote: DashMap::new(),
            git_values: Default::default(),
            git_due: tokio::sync::Notify::new(),
        }
    }

    /// Makes the Git sources of these repositories due at once and wakes whoever waits in
    /// [`ChartCatalog::git_woken`]; returns how many were known.
    pub(crate) fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        let made = self.resolver.make_due(repositories);
        if made > 0 {
            self.git_due.notify_one();
        }
        made
    }

    /// Returns once a push hook made Git sources due.
    pub(crate) async fn git_woken(&self) {
        self.git_due.notified().await;
    }

    /// How often charts are looked at again.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// Brings what is known of every chart `spec` names up to date: directories are read again
    /// when their files changed, remote charts resolved when never resolved or resolved longer
    /// than the interval ago; `tenant` is the namespace of the Controller of `spec`.
    pub(crate) async fn prepare(
        &self,
        tenant: &str,
        spec: &ControllerSpec,
        chart_home: &Path,
        allowed: &(dyn Fn(&Chart) -> Option<Scope> + Sync),
    ) {
        let now = Instant::now();
        let interval = self.interval;
        let fresh = move |tried: Instant| now.duration_since(tried) < interval;
        let wanted = wanted_by(tenant, spec, chart_home, allowed);
        futures::stream::iter(wanted)
            .for_each_concurrent(RESOLVE_CONCURRENCY, |w| async move {
                match w {
                    Wanted::Directory(path) => {
                        directory::refresh(&self.directories, &path, now);
                    }
                    Wanted::Remote(key, scope) => {
                        self.resolve(&key, &scope, now, now.checked_sub(interval), fresh)
                            .await;
                    }
                }
            })
            .await;
    }

    /// What is known of a chart fetched with `credentials` under the signature rules `trust`
    /// now, for the planner of a Controller of namespace `tenant`.
    pub(crate) fn lookup(
        &self,
        tenant: &str,
        source: &ChartSource,
        credentials: &Credentials,
        trust: &Trust,
        version: Option<&str>,
    ) -> ChartLookup {
        match RemoteKey::of(tenant, source, (credentials, trust), version) {
            Err(path) => match self.directories.get(path) {
                Some(entry) => ChartLookup::Found {
                    version: None,
                    digest: Some(entry.digest.clone()),
                    verified: None,
                    commit: None,
                },
                None => ChartLookup::Missing(format!(
                    "no chart (Chart.yaml) at {}; add it to the chart home (--chart-home), or set repo or an oci:// chartName",
                    path.display()
                )),
            },
            Ok(key) => match self.remote.get(&key) {
                Some(entry) => entry.lookup(&key),
                None => ChartLookup::Missing(format!("{} is not resolved yet", key.describe())),
            },
        }
    }

    /// Reads every wanted directory again and resolves every wanted remote chart again (one
    /// resolved while this waited counts); forgets charts no spec named for an interval.
    /// Returns the charts whose lookup changed.
    pub(crate) async fn refresh(&self, wanted: &HashSet<Wanted>) -> HashSet<Wanted> {
        let now = Instant::now();
        self.forget_unwanted(wanted, now);
        futures::stream::iter(wanted.clone())
            .map(|w| async move {
                let changed = match &w {
                    Wanted::Directory(path) => directory::refresh(&self.directories, path, now),
                    Wanted::Remote(key, scope) => {
                        self.resolve(key, scope, now, Some(now), |tried| tried > now)
                            .await
                    }
                };
                changed.then_some(w)
            })
            .buffer_unordered(RESOLVE_CONCURRENCY)
            .filter_map(futures::future::ready)
            .collect()
            .await
    }

    /// Resolves every wanted Git chart again: the cache asks the fetcher only of the sources
    /// whose interval has passed. Returns the charts whose lookup changed.
    pub(crate) async fn refresh_git(&self, wanted: &HashSet<Wanted>) -> HashSet<Wanted> {
        let now = Instant::now();
        let git: Vec<Wanted> = wanted
            .iter()
            .filter(|w| matches!(w, Wanted::Remote(key, _) if key.is_git()))
            .cloned()
            .collect();
        futures::stream::iter(git)
            .map(|w| async move {
                let Wanted::Remote(key, scope) = &w else {
                    return None;
                };
                self.resolve(key, scope, now, Some(now), |tried| tried > now)
                    .await
                    .then_some(w)
            })
            .buffer_unordered(RESOLVE_CONCURRENCY)
            .filter_map(futures::future::ready)
            .collect()
            .await
    }

    fn forget_unwanted(&self, wanted: &HashSet<Wanted>, now: Instant) {
        let unused = |seen: Instant| now.duration_since(seen) >= self.interval;
        self.directories
            .retain(|path, d| wanted.contains(&Wanted::Directory(path.clone())) || !unused(d.seen));
        let keys: HashSet<&RemoteKey> = wanted
            .iter()
            .filter_map(|w| match w {
                Wanted::Remote(key, _) => Some(&**key),
                Wanted::Directory(_) => None,
            })
            .collect();
        self.remote
            .retain(|key, e| keys.contains(key) || !unused(e.slot().seen));
        if let Some(before) = now.checked_sub(self.interval) {
            self.resolver.forget(before);
        }
    }

    /// Resolves a remote chart unless its last attempt, under the same `scope`, is `fresh`,
    /// with a repository index fetched at or after `since`; one resolution of an entry runs at
    /// a time, and who waited for it takes its result. What was resolved under another scope
    /// no longer counts. Returns whether the lookup changed.
    async fn resolve(
        &self,
        key: &RemoteKey,
        scope: &SourceUrl,
        now: Instant,
        since: Option<Instant>,
        fresh: impl Fn(Instant) -> bool,
    ) -> bool {
        let entry = self
            .remote
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Entry::new(now)))
            .clone();
        entry.slot().seen = now;
        let is_fresh = || {
            let slot = entry.slot();
            slot.scope.as_ref() == Some(scope) && slot.tried.is_some_and(&fresh)
        };
        if is_fresh() {
            return false;
        }
        let _flight = entry.flight.lock().await;
        if is_fresh() {
            return false;
        }
        let before = entry.lookup(key);
        let result = self.resolver.resolve(key, scope, since).await;
        let checked = match &result {
            Ok(resolved) if !key.trust.is_empty() => {
                Some(self.resolver.verify(key, scope, resolved).await)
            }
            _ => None,
        };
        {
            let mut slot = entry.slot();
            slot.tried = Some(Instant::now());
            if slot
                .scope
                .replace(scope.clone())
                .is_some_and(|old| old != *scope)
            {
                slot.good = None;
                slot.verified = None;
            }
            match result {
                Ok(resolved) => {
                    if slot.good.as_ref() != Some(&resolved) && slot.refused.is_none() {
                        tracing::info!(chart = %key.describe(), version = %resolved.version, digest = resolved.digest.as_deref().unwrap_or(""), "resolved chart");
                    }
                    slot.failure = None;
                    match checked {
                        None => {
                            slot.good = Some(resolved);
                            slot.refused = None;
                        }
                        Some(checked) => take_verdict(&mut slot, key, resolved, checked),
                    }
                }
                Err(error) => {
                    let message = key.missing(&error);
                    if let Some(good) = &slot.good
                        && slot.failure.as_ref() != Some(&message)
                    {
                        tracing::warn!(version = %good.version, "{message}; keeping the version resolved before");
                    }
                    slot.failure = Some(message);
                }
            }
        }
        entry.lookup(key) != before
    }
}

/// Takes the signature check of a resolution into its slot: verified, it is the one planned;
/// refused, nothing is (not even what was verified before: the source now serves this); not
/// checked (the registry or the verifier failed), what was verified before of the same content
/// stays, and anything else waits.
fn take_verdict(
    slot: &mut Slot,
    key: &RemoteKey,
    resolved: Resolved,
    checked: Result<Checked, String>,
) {
    let chart = key.describe();
    match checked {
        Ok(Checked::Verified(verified)) => {
            if slot.verified.as_ref() != Some(&verified) {
                tracing::info!(%chart, version = %resolved.version, by = %verified.by, "verified chart signatures");
            }
            slot.good = Some(resolved);
            slot.verified = Some(verified);
            slot.refused = None;
        }
        Ok(Checked::Refused(reason)) => {
            let refused = redact(&format!("{chart} {}: {reason}", resolved.version));
            if slot.refused.as_ref() != Some(&refused) {
                tracing::warn!(%chart, version = %resolved.version, %reason, "chart signatures refused; it reaches no member");
            }
            slot.good = None;
            slot.verified = None;
            slot.refused = Some(refused);
        }
        Err(error) => {
            if slot.good.as_ref() == Some(&resolved) && slot.verified.is_some() {
                tracing::warn!(%chart, %error, "cannot check chart signatures again; keeping the verdict reached before");
                return;
            }
            slot.good = None;
            slot.verified = None;
            slot.refused = Some(redact(&format!(
                "the signatures of {chart} {} cannot be checked: {error}",
                resolved.version
            )));
        }
    }
}

mod directory;
mod key;
mod resolve;

use directory::Directory;
pub(crate) use key::{RemoteKey, Wanted, wanted_by};
pub(crate) use resolve::{Checked, GitFiles, Resolve};
mod git_values;

#[cfg(test)]
mod tests;
