//! Helm's release records in every cluster, watched as metadata narrowed to what planning needs, held compactly and indexed by release and by owner.
//!
//! Each cluster has two metadata-only watches (kube 5's `watcher` on `Api<PartialObjectMeta<_>>`
//! sends the `as=PartialObjectMetadata` Accept header: it is what the deprecated
//! `metadata_watcher` became), both relisting after an error:
//!
//! - [`MANAGED_SELECTOR`](crate::observe::records::MANAGED_SELECTOR): the records tenancy-hub wrote, held as a few strings per revision
//!   (owner, spec hash, status, time) under their release key, with an index by owner;
//! - [`FOREIGN_SELECTOR`](crate::observe::records::FOREIGN_SELECTOR): every other Helm release, held as its key and revision numbers only,
//!   so the planner still reports "a Helm release not managed by tenancy-hub" and never takes it
//!   over. The trade-off: a second stream per cluster, and foreign records are still listed
//!   (metadata of their newest records), in exchange for a safety that needs no API call at
//!   planning time and no race between a check and the install.
//!
//! Both leave out `status=superseded`: the newest record of a release is never superseded (Helm
//! marks the older one when a newer one is deployed), so history, up to ten records per release,
//! is neither listed nor held. A release's applied state is its newest held revision; revisions
//! are kept per release, so the newest stays right whichever record arrives or leaves first.
//! A record counts as managed only when its seal verifies (`helm::seal`): one whose labels
//! name a Controller but that this operator did not seal (forged by whoever may write Secrets in
//! the namespace, or written by another operator) is held as foreign, so it is never taken as
//! anyone's, never uninstalled, upgraded or repaired, and logged once per revision.
//!
//! Holding compact records instead of a reflector store of `ObjectMeta` (labels, annotations,
//! managed fields) and looking releases up by key and owner makes a reconcile read only the
//! releases it concerns, not every release of every cluster.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use dashmap::DashMap;
use futures::StreamExt;
use kube::{Api, runtime::watcher};
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    helm::seal::SealKey,
    plan::{Applied, OwnerId},
};

use crate::observe::records::*;

/// News from the release-record watches.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RecordChange {
    /// The newest record of this release changed, appeared or went away; with its owner, if managed.
    Release(ReleaseKey, Option<OwnerId>),
    /// A cluster's records were listed in full (at start, or after a watch failed).
    Listed(ClusterName),
}

/// Which of a cluster's two watches a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Managed = 0,
    Foreign = 1,
}

impl Source {
    fn selector(self) -> &'static str {
        match self {
            Source::Managed => MANAGED_SELECTOR,
            Source::Foreign => FOREIGN_SELECTOR,
        }
    }
}

/// One managed revision as planning needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Revision {
    owner: OwnerId,
    spec_hash: Option<String>,
    status: String,
    modified_at: Option<i64>,
}

/// One record as held: a managed revision's details, or only that a foreign revision exists.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Held {
    Managed(Revision),
    Foreign,
}

/// Drops one revision of a release from `map`, and the release when none is left.
fn drop_revision(map: &mut HashMap<ReleaseKey, BTreeSet<i64>>, key: &ReleaseKey, revision: i64) {
    if let Some(revs) = map.get_mut(key) {
        revs.remove(&revision);
        if revs.is_empty() {
            map.remove(key);
        }
    }
}

/// A release's newest record before and after a change.
type Change = (ReleaseKey, Option<Applied>, Option<Applied>);

/// One cluster's release records, compact, by release and by owner.
#[derive(Debug, Default)]
struct Records {
    managed: HashMap<ReleaseKey, BTreeMap<i64, Revision>>,
    foreign: HashMap<ReleaseKey, BTreeSet<i64>>,
    /// Records of the managed watch whose seal does not verify (yet: the `helm` binary's are
    /// sealed right after it wrote them), held as foreign until a change seals them.
    unsealed: HashMap<ReleaseKey, BTreeSet<i64>>,
    by_owner: HashMap<OwnerId, BTreeSet<ReleaseKey>>,
}

impl Records {
    /// The newest record of a release, managed or not; a foreign one carries its revision only.
    fn newest(&self, key: &ReleaseKey) -> Option<Applied> {
        let managed = self.managed.get(key).and_then(|revs| revs.last_key_value());
        let foreign = [&self.foreign, &self.unsealed]
            .iter()
            .filter_map(|m| m.get(key).and_then(|revs| revs.last().copied()))
            .max();
        // On a tie (a record moving between the watches) the foreign one wins: never taken over.
        if let Some((rev, r)) = managed
            && foreign.is_none_or(|f| f < *rev)
        {
            return Some(Applied {
                key: key.clone(),
                owner: Some(r.owner.clone()),
                spec_hash: r.spec_hash.clone(),
                revision: *rev,
                status: r.status.clone(),
                modified_at: r.modified_at,
            });
        }
        foreign.map(|revision| Applied {
            key: key.clone(),
            owner: None,
            spec_hash: None,
            revision,
            status: String::new(),
            modified_at: None,
        })
    }

    fn insert(&mut self, source: Source, key: ReleaseKey, revision: i64, held: Held) {
        match (source, held) {
            (_, Held::Managed(r)) => {
                drop_revision(&mut self.unsealed, &key, revision);
                self.managed.entry(key).or_default().insert(revision, r);
            }
            (Source::Managed, Held::Foreign) => {
                if let Some(revs) = self.managed.get_mut(&key) {
                    revs.remove(&revision);
                    if revs.is_empty() {
                        self.managed.remove(&key);
                    }
                }
                self.unsealed.entry(key).or_default().insert(revision);
            }
            (Source::Foreign, Held::Foreign) => {
                self.foreign.entry(key).or_default().insert(revision);
            }
        }
    }

    fn remove(&mut self, source: Source, key: &ReleaseKey, revision: i64) {
        match source {
            Source::Managed => {
                if let Some(revs) = self.managed.get_mut(key) {
                    revs.remove(&revision);
                    if revs.is_empty() {
                        self.managed.remove(key);
                    }
                }
                drop_revision(&mut self.unsealed, key, revision);
            }
            Source::Foreign => drop_revision(&mut self.foreign, key, revision),
        }
    }

    /// Holds (`Some`) or drops (`None`, from `source`) one record, keeping the owner index
    /// true; returns the release's newest record before and after when it changed.
    fn set(
        &mut self,
        source: Source,
        key: &ReleaseKey,
        revision: i64,
        held: Option<Held>,
    ) -> Option<Change> {
        let before = self.newest(key);
        match held {
            Some(held) => self.insert(source, key.clone(), revision, held),
            None => self.remove(source, key, revision),
        }
        let after = self.newest(key);
        if before == after {
            return None;
        }
        self.reindex(key, before.as_ref(), after.as_ref());
        Some((key.clone(), before, after))
    }

    fn reindex(&mut self, key: &ReleaseKey, before: Option<&Applied>, after: Option<&Applied>) {
        let owner = |a: Option<&Applied>| a.and_then(|a| a.owner.clone());
        let (old, new) = (owner(before), owner(after));
        if old == new {
            return;
        }
        if let Some(old) = old
            && let Some(keys) = self.by_owner.get_mut(&old)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_owner.remove(&old);
            }
        }
        if let Some(new) = new {
            self.by_owner.entry(new).or_default().insert(key.clone());
        }
    }

    /// Replaces everything held from `source` with a complete listing; returns the releases whose
    /// newest record changed.
    fn relist(&mut self, source: Source, listed: Vec<(ReleaseKey, i64, Held)>) -> Vec<Change> {
        let mut touched: BTreeSet<ReleaseKey> = match source {
            Source::Managed => self
                .managed
                .keys()
                .chain(self.unsealed.keys())
                .cloned()
                .collect(),
            Source::Foreign => self.foreign.keys().cloned().collect(),
        };
        touched.extend(listed.iter().map(|(k, _, _)| k.clone()));
        let before: Vec<Option<Applied>> = touched.iter().map(|k| self.newest(k)).collect();
        match source {
            Source::Managed => {
                self.managed.clear();
                self.unsealed.clear();
            }
            Source::Foreign => self.foreign.clear(),
        }
        for (key, revision, held) in listed {
            self.insert(source, key, revision, held);
        }
        let mut changed = Vec::new();
        for (key, before) in touched.into_iter().zip(before) {
            let after = self.newest(&key);
            if before != after {
                self.reindex(&key, before.as_ref(), after.as_ref());
                changed.push((key, before, after));
            }
        }
        changed
    }
}

/// One record as held: its release, revision, and managed details (when its labels name an owner
/// and, with a key, its seal verifies).
fn read(
    cluster: &ClusterName,
    record: &Record,
    seal: Option<&SealKey>,
) -> Option<(ReleaseKey, i64, Held)> {
    let applied = applied_from(cluster, record, seal)?;
    let held = match applied.owner {
        Some(owner) => Held::Managed(Revision {
            owner,
            spec_hash: applied.spec_hash,
            status: applied.status,
            modified_at: applied.modified_at,
        }),
        None => Held::Foreign,
    };
    Some((applied.key, applied.revision, held))
}

/// One record as a watch of `source` holds it: what the managed watch yields is managed, and
/// whatever the foreign watch yields is foreign, whatever its labels say.
fn read_as(
    source: Source,
    cluster: &ClusterName,
    record: &Record,
    seal: Option<&SealKey>,
) -> Option<(ReleaseKey, i64, Held)> {
    read(cluster, record, seal).map(|(key, rev, held)| match (source, held) {
        (Source::Managed, h @ Held::Managed(_)) => (key, rev, h),
        _ => (key, rev, Held::Foreign),
    })
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
struct Feed {
    cluster: ClusterName,
    source: Source,
    seal: Option<SealKey>,
    /// Unsealed records claiming an owner, already logged (bounded).
    warned: std::collections::HashSet<(ReleaseKey, i64)>,
    records: Arc<RwLock<Records>>,
    synced: Arc<[AtomicBool; 2]>,
    listing: Vec<(ReleaseKey, i64, Held)>,
}

impl Feed {
    /// Applies one watch event to the records; returns the news it makes.
    fn apply(
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

struct Watched {
    records: Arc<RwLock<Records>>,
    synced: Arc<[AtomicBool; 2]>,
    stop: CancellationToken,
}

impl Watched {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Records> {
        self.records.read().expect("release records lock")
    }

    fn is_synced(&self) -> bool {
        self.synced.iter().all(|s| s.load(Ordering::Acquire))
    }
}

/// The release records of every watched cluster.
#[derive(Default)]
pub(crate) struct ReleaseIndex {
    clusters: DashMap<ClusterName, Watched>,
    tasks: TaskTracker,
    seal: Option<SealKey>,
}

impl ReleaseIndex {
    /// An empty index whose watch tasks are tracked by `tasks`, taking a record as managed only
    /// when `seal` verifies it (None: as its labels say, for read-only previews and tests).
    pub(crate) fn new(tasks: TaskTracker, seal: Option<SealKey>) -> Self {
        Self {
            clusters: DashMap::new(),
            tasks,
            seal,
        }
    }

    /// Starts watching one cluster's release records, from the watches `events` opens for a label
    /// selector (its member link); each change is sent on `changes`. The
    /// cluster counts as synced once both its watches have listed in full, until either fails,
    /// and again after it has relisted. Replaces any earlier watch of that cluster.
    pub(crate) fn watch(
        &self,
        cluster: ClusterName,
        events: impl Fn(&str) -> RecordEvents,
        changes: Sender<RecordChange>,
        parent: &CancellationToken,
    ) {
        let records = Arc::new(RwLock::new(Records::default()));
        let synced = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let stop = parent.child_token();
        for source in [Source::Managed, Source::Foreign] {
            let stream = events(source.selector());
            let span =
                tracing::info_span!("release_records", cluster = %cluster, records = ?source);
            let mut feed = Feed {
                cluster: cluster.clone(),
                source,
                seal: self.seal.clone(),
                warned: Default::default(),
                records: records.clone(),
                synced: synced.clone(),
                listing: Vec::new(),
            };
            let (changes, token) = (changes.clone(), stop.clone());
            self.tasks.spawn(
                async move {
                    let forward = stream.for_each(|event| {
                        let news = feed.apply(event);
                        let changes = changes.clone();
                        async move {
                            // A full channel makes the watch wait: news is never dropped.
                            for news in news {
                                let _ = changes.send(news).await;
                            }
                        }
                    });
                    tokio::select! {
                        () = forward => {}
                        () = token.cancelled() => {}
                    }
                }
                .instrument(span),
            );
        }
        let watched = Watched {
            records,
            synced,
            stop,
        };
        if let Some(old) = self.clusters.insert(cluster, watched) {
            old.stop.cancel();
        }
    }

    /// Holds `records` as a cluster's fully listed release records, replacing what was held: for
    /// tests, in place of a watch. Each record is held as its labels say (managed or foreign).
    #[cfg(test)]
    pub(crate) fn seed(&self, cluster: ClusterName, records: Vec<Record>) {
        let mut held = Records::default();
        for (key, revision, record) in records
            .iter()
            .filter_map(|r| read(&cluster, r, self.seal.as_ref()))
        {
            held.set(Source::Managed, &key, revision, Some(record));
        }
        let watched = Watched {
            records: Arc::new(RwLock::new(held)),
            synced: Arc::new([AtomicBool::new(true), AtomicBool::new(true)]),
            stop: CancellationToken::new(),
        };
        self.clusters.insert(cluster, watched);
    }

    /// Watch streams open now: two per watched cluster (ours, and the others' by name).
    pub(crate) fn streams(&self) -> usize {
        self.clusters.len() * 2
    }

    /// Stops watching a cluster and forgets its records.
    pub(crate) fn forget(&self, cluster: &ClusterName) {
        if let Some((_, old)) = self.clusters.remove(cluster) {
            old.stop.cancel();
        }
    }

    /// The newest record of one release, when its cluster's records hold it.
    pub(crate) fn get(&self, key: &ReleaseKey) -> Option<Applied> {
        self.clusters.get(&key.scope.cluster)?.read().newest(key)
    }

    /// The clusters whose records are fully listed.
    pub(crate) fn synced(&self) -> BTreeSet<ClusterName> {
        self.clusters
            .iter()
            .filter(|w| w.is_synced())
            .map(|w| w.key().clone())
            .collect()
    }

    /// The newest record of each release `owner` holds, in every cluster.
    pub(crate) fn owned_by(&self, owner: &OwnerId) -> Vec<Applied> {
        let mut owned = Vec::new();
        for watched in &self.clusters {
            let records = watched.read();
            if let Some(keys) = records.by_owner.get(owner) {
                owned.extend(keys.iter().filter_map(|k| records.newest(k)));
            }
        }
        owned
    }

    /// What planning `owner` needs: the newest record of each of `keys` and of each release
    /// `owner` holds, by key.
    pub(crate) fn applied_for<'a>(
        &self,
        owner: &OwnerId,
        keys: impl IntoIterator<Item = &'a ReleaseKey>,
    ) -> HashMap<ReleaseKey, Applied> {
        let mut applied: HashMap<ReleaseKey, Applied> = self
            .owned_by(owner)
            .into_iter()
            .map(|a| (a.key.clone(), a))
            .collect();
        for key in keys {
            if !applied.contains_key(key)
                && let Some(a) = self.get(key)
            {
                applied.insert(key.clone(), a);
            }
        }
        applied
    }

    /// Every managed release of one cluster (all clusters when None), with its owner.
    pub(crate) fn managed(&self, cluster: Option<&ClusterName>) -> Vec<(ReleaseKey, OwnerId)> {
        let mut all = Vec::new();
        for watched in self
            .clusters
            .iter()
            .filter(|w| cluster.is_none_or(|c| c == w.key()))
        {
            let records = watched.read();
            for (owner, keys) in &records.by_owner {
                all.extend(keys.iter().map(|k| (k.clone(), owner.clone())));
            }
        }
        all
    }

    /// The owners of the managed releases of one cluster.
    pub(crate) fn owners_in(&self, cluster: &ClusterName) -> Vec<OwnerId> {
        self.clusters
            .get(cluster)
            .map(|w| w.read().by_owner.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// One cluster's releases, newest record per release, listed once with the selectors the
/// watches of `ReleaseIndex` use: for a one-off look such as `tenancy-hub diff`, which acts on
/// nothing and so takes owners as the records' labels claim them.
pub(crate) async fn list(
    cluster: &ClusterName,
    client: kube::Client,
) -> kube::Result<HashMap<ReleaseKey, Applied>> {
    let api: Api<Record> = Api::all(client);
    let mut records = Records::default();
    for source in [Source::Managed, Source::Foreign] {
        let params = kube::api::ListParams::default().labels(source.selector());
        let listed = api.list(&params).await?;
        let held = listed
            .items
            .iter()
            .filter_map(|r| read_as(source, cluster, r, None))
            .collect();
        records.relist(source, held);
    }
    let keys: BTreeSet<ReleaseKey> = records
        .managed
        .keys()
        .chain(records.foreign.keys())
        .cloned()
        .collect();
    Ok(keys
        .into_iter()
        .filter_map(|k| Some((k.clone(), records.newest(&k)?)))
        .collect())
}

#[cfg(test)]
mod tests;
