//! One cluster's Helm release records as held: managed revisions compactly (owner, spec hash,
//! status, time), foreign ones by number only, indexed by release and by owner; a record read
//! into that form by the watch it came from.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    api::key::{ClusterName, ReleaseKey},
    helm::seal::{SealKey, Sealer},
    observe::records::{FOREIGN_SELECTOR, MANAGED_SELECTOR, Record, applied_from},
    plan::{Applied, OwnerId},
};

/// Which of a cluster's two watches a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Managed = 0,
    Foreign = 1,
}

impl Source {
    pub(crate) fn selector(self) -> &'static str {
        match self {
            Source::Managed => MANAGED_SELECTOR,
            Source::Foreign => FOREIGN_SELECTOR,
        }
    }
}

/// One managed revision as planning needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Revision {
    owner: OwnerId,
    spec_hash: Option<String>,
    status: String,
    modified_at: Option<i64>,
    /// Sealed with the key of a pull member's agent, not the operator's own.
    by_member: bool,
}

/// One record as held: a managed revision's details, or only that a foreign revision exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Held {
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
pub(crate) type Change = (ReleaseKey, Option<Applied>, Option<Applied>);

/// One cluster's release records, compact, by release and by owner.
#[derive(Debug, Default)]
pub(crate) struct Records {
    pub(crate) managed: HashMap<ReleaseKey, BTreeMap<i64, Revision>>,
    pub(crate) foreign: HashMap<ReleaseKey, BTreeSet<i64>>,
    /// Records of the managed watch whose seal does not verify (yet: the `helm` binary's are
    /// sealed right after it wrote them), held as foreign until a change seals them.
    pub(crate) unsealed: HashMap<ReleaseKey, BTreeSet<i64>>,
    pub(crate) by_owner: HashMap<OwnerId, BTreeSet<ReleaseKey>>,
}

impl Records {
    /// Whether the newest record of a release is managed and sealed by a pull member's agent
    /// (which vouches for its owner only where that owner delivers to the member).
    pub(crate) fn sealed_by_member(&self, key: &ReleaseKey) -> bool {
        let managed = self.managed.get(key).and_then(|revs| revs.last_key_value());
        managed.is_some_and(|(rev, r)| {
            r.by_member
                && self
                    .newest(key)
                    .is_some_and(|a| a.owner.is_some() && a.revision == *rev)
        })
    }

    /// The newest record of a release, managed or not; a foreign one carries its revision only.
    pub(crate) fn newest(&self, key: &ReleaseKey) -> Option<Applied> {
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
    pub(crate) fn set(
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
    pub(crate) fn relist(
        &mut self,
        source: Source,
        listed: Vec<(ReleaseKey, i64, Held)>,
    ) -> Vec<Change> {
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
pub(crate) fn read(
    cluster: &ClusterName,
    record: &Record,
    seal: Option<&SealKey>,
) -> Option<(ReleaseKey, i64, Held)> {
    let applied = applied_from(cluster, record, seal)?;
    let by_member = || {
        let labels = record.metadata.labels.as_ref();
        seal.zip(labels).is_some_and(|(seal, labels)| {
            seal.sealed_by(cluster, &applied.key.scope.namespace, labels) == Some(Sealer::Member)
        })
    };
    let held = match applied.owner.clone() {
        Some(owner) => Held::Managed(Revision {
            owner,
            by_member: by_member(),
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
pub(crate) fn read_as(
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
