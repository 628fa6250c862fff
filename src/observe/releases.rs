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
//! anyone's, never uninstalled, upgraded or repaired, and logged once per revision. A pull
//! member's agent seals the records of its cluster with a key of its own, so its seal vouches
//! for an owner only where that owner delivers to the member: the planner and the cleanup read
//! an owner's releases through [`ReleaseIndex::owned_by`] with a test of that (see
//! `controller::vouch`), and one that fails it is held as foreign for that owner, logged once.
//!
//! Holding compact records instead of a reflector store of `ObjectMeta` (labels, annotations,
//! managed fields) and looking releases up by key and owner makes a reconcile read only the
//! releases it concerns, not every release of every cluster.
use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use dashmap::DashMap;
use futures::StreamExt;
use kube::Api;
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    helm::seal::SealKey,
    observe::record_feed::Feed,
    observe::records::{Record, RecordEvents},
    observe::revisions::{Records, Source, read_as},
    plan::{Applied, OwnerId},
};

pub(crate) use crate::observe::record_feed::RecordChange;

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
    /// Records sealed by a pull member for an owner that does not deliver there, already
    /// logged (bounded).
    disowned: std::sync::Mutex<std::collections::HashSet<(ReleaseKey, i64)>>,
}

/// Whether an owner delivers to the cluster of a release (so a pull member's seal there vouches
/// for it).
pub(crate) type Vouch<'a> = &'a dyn Fn(&ReleaseKey) -> bool;

impl ReleaseIndex {
    /// An empty index whose watch tasks are tracked by `tasks`, taking a record as managed only
    /// when `seal` verifies it (None: as its labels say, for read-only previews and tests).
    pub(crate) fn new(tasks: TaskTracker, seal: Option<SealKey>) -> Self {
        Self {
            clusters: DashMap::new(),
            tasks,
            seal,
            disowned: Default::default(),
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
            .filter_map(|r| crate::observe::revisions::read(&cluster, r, self.seal.as_ref()))
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

    /// The newest record of each release `owner` holds, in every cluster; a record sealed by a
    /// pull member's agent only where `vouch` says the owner delivers (else it is the owner's
    /// in no way: left out, and logged once).
    pub(crate) fn owned_by(&self, owner: &OwnerId, vouch: Vouch<'_>) -> Vec<Applied> {
        let mut owned = Vec::new();
        for watched in &self.clusters {
            let records = watched.read();
            let Some(keys) = records.by_owner.get(owner) else {
                continue;
            };
            for key in keys {
                let Some(applied) = records.newest(key) else {
                    continue;
                };
                if records.sealed_by_member(key) && !vouch(key) {
                    self.disown(owner, &applied);
                } else {
                    owned.push(applied);
                }
            }
        }
        owned
    }

    /// Logs, once per release and revision, a record a pull member sealed for an owner that
    /// does not deliver there.
    fn disown(&self, owner: &OwnerId, applied: &Applied) {
        const REMEMBERED: usize = 10_000;
        let mut disowned = self.disowned.lock().expect("disowned lock");
        if disowned.len() < REMEMBERED && disowned.insert((applied.key.clone(), applied.revision)) {
            tracing::warn!(
                release = %applied.key,
                revision = applied.revision,
                claims = %owner,
                "a release record sealed by pull member {}'s agent claims a Controller that does not deliver there; it is held as foreign for that Controller and never acted on",
                applied.key.scope.cluster
            );
        }
    }

    /// What planning `owner` needs: the newest record of each of `keys` and of each release
    /// `owner` holds (as [`ReleaseIndex::owned_by`] with `vouch` reads them), by key.
    pub(crate) fn applied_for<'a>(
        &self,
        owner: &OwnerId,
        keys: impl IntoIterator<Item = &'a ReleaseKey>,
        vouch: Vouch<'_>,
    ) -> HashMap<ReleaseKey, Applied> {
        let mut applied: HashMap<ReleaseKey, Applied> = self
            .owned_by(owner, vouch)
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
    let mut listed = Vec::new();
    for source in [Source::Managed, Source::Foreign] {
        let params = kube::api::ListParams::default().labels(source.selector());
        listed.push(api.list(&params).await?.items);
    }
    Ok(newest_of(cluster, &listed[0], &listed[1]))
}

/// The newest record of each release among a cluster's `managed` and `foreign` records, as
/// [`list`] reads them (owners only where seals verify under none: a look that acts on nothing).
pub(crate) fn newest_of(
    cluster: &ClusterName,
    managed: &[Record],
    foreign: &[Record],
) -> HashMap<ReleaseKey, Applied> {
    let mut records = Records::default();
    for (source, listed) in [(Source::Managed, managed), (Source::Foreign, foreign)] {
        let held = listed
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
    keys.into_iter()
        .filter_map(|k| Some((k.clone(), records.newest(&k)?)))
        .collect()
}

#[cfg(test)]
mod tests;
