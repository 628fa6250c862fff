//! What one of a cluster's two release-record watches feeds into its records, and the news
//! (changed releases, a cluster listed in full) it makes.

use std::sync::{
    Arc, RwLock,
    atomic::{AtomicBool, Ordering},
};

use kube::runtime::watcher;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    helm::seal::SealKey,
    observe::records::{Record, applied_from},
    observe::revisions::{Change, Held, Records, Source, read_as},
    plan::OwnerId,
};

/// News from the release-record watches.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RecordChange {
    /// The newest record of this release changed, appeared or went away; with its owner, if managed.
    Release(ReleaseKey, Option<OwnerId>),
    /// A cluster's records were listed in full (at start, or after a watch failed).
    Listed(ClusterName),
}

/// The news of one release's change: it names the owner after the change, or before it when
/// the release is gone.
fn news((key, before, after): Change) -> RecordChange {
    let owner = after
        .and_then(|a| a.owner)
        .or_else(|| before.and_then(|a| a.owner));
    RecordChange::Release(key, owner)
}

/// What one of a cluster's two watches feeds into its records.
pub(crate) struct Feed {
    /// The cluster watched.
    pub(crate) cluster: ClusterName,
    /// Which of the cluster's two watches this is.
    pub(crate) source: Source,
    /// The key a managed record's seal must verify with (None: as its labels say).
    pub(crate) seal: Option<SealKey>,
    /// Unsealed records claiming an owner, already logged (bounded).
    pub(crate) warned: std::collections::HashSet<(ReleaseKey, i64)>,
    /// The cluster's records, shared by its two watches.
    pub(crate) records: Arc<RwLock<Records>>,
    /// Whether each of the two watches has listed in full since it last failed.
    pub(crate) synced: Arc<[AtomicBool; 2]>,
    /// What the list in progress found.
    pub(crate) listing: Vec<(ReleaseKey, i64, Held)>,
}

impl Feed {
    /// Applies one watch event to the records; returns the news it makes.
    pub(crate) fn apply(
        &mut self,
        event: Result<watcher::Event<Record>, watcher::Error>,
    ) -> Vec<RecordChange> {
        let source = self.source;
        if let Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) = &event {
            self.warn_if_unsealed(r);
        }
        let seal = self.seal.clone();
        let read = |cluster: &ClusterName, r: &Record| read_as(source, cluster, r, seal.as_ref());
        match event {
            Ok(watcher::Event::Apply(r)) => read(&self.cluster, &r)
                .and_then(|(key, rev, held)| self.write().set(source, &key, rev, Some(held)))
                .map(news)
                .into_iter()
                .collect(),
            Ok(watcher::Event::Delete(r)) => read(&self.cluster, &r)
                .and_then(|(key, rev, _)| self.write().set(source, &key, rev, None))
                .map(news)
                .into_iter()
                .collect(),
            Ok(watcher::Event::Init) => {
                self.listing.clear();
                Vec::new()
            }
            Ok(watcher::Event::InitApply(r)) => {
                if let Some(found) = read(&self.cluster, &r) {
                    self.listing.push(found);
                }
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let listed = std::mem::take(&mut self.listing);
                let mut out: Vec<RecordChange> = self
                    .write()
                    .relist(source, listed)
                    .into_iter()
                    .map(news)
                    .collect();
                self.synced[source as usize].store(true, Ordering::Release);
                if self.synced.iter().all(|s| s.load(Ordering::Acquire)) {
                    out.push(RecordChange::Listed(self.cluster.clone()));
                }
                out
            }
            Err(e) => {
                // Until the watch has relisted, what is held may be out of date.
                self.synced[source as usize].store(false, Ordering::Release);
                tracing::warn!(error = %e, "watching release records failed; relisting with backoff");
                Vec::new()
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Records> {
        self.records.write().expect("release records lock")
    }

    /// Logs, once per release and revision, a record whose labels claim a Controller but whose
    /// seal does not verify.
    fn warn_if_unsealed(&mut self, record: &Record) {
        const REMEMBERED: usize = 10_000;
        let Some(seal) = &self.seal else { return };
        let Some(claimed) = applied_from(&self.cluster, record, None) else {
            return;
        };
        let Some(owner) = claimed.owner else { return };
        let sealed = record.metadata.labels.as_ref().is_some_and(|labels| {
            seal.verifies(&self.cluster, &claimed.key.scope.namespace, labels)
        });
        if sealed || self.warned.len() >= REMEMBERED {
            return;
        }
        if self.warned.insert((claimed.key.clone(), claimed.revision)) {
            tracing::warn!(
                release = %claimed.key,
                revision = claimed.revision,
                claims = %owner,
                "a release record claims a Controller but is not sealed by this operator (forged, or written by another operator or an earlier version); it is held as foreign and never acted on"
            );
        }
    }
}
