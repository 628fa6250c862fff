//! Which Controllers claim each release key, kept from Controller events, so a reconcile reads only the keys its spec names.
//!
//! Computing a Controller's claimant resolves its whole spec against the registry's cluster
//! labels; doing it for every Controller on every reconcile made a reconcile O(K) and a relist of
//! K Controllers O(K²). Here each Controller's claimant is computed when its spec changes (its
//! uid, generation or deletion), or for all of them once when the cluster labels change, and held
//! in an inverted index key -> claimants and cluster -> claimants.
//!
//! A key claims only once admitted: a release the Controller's tenancy policies do not allow
//! holds nothing, so a Controller in another hub namespace cannot squat a key it may not deliver.
//! When a claimant lets a key go (deleted, its spec or a policy changed), the other claimants of
//! that key are handed to [`Claims::take_wakes`], so they are planned again at once.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::PathBuf,
    sync::{Arc, RwLock},
};

use kube::Resource;

use crate::{
    api::crd::TenancyController,
    api::key::{ClusterName, ReleaseKey},
    plan::{self, Applied, OwnerId, created_secs, owner_id},
    policy::Admission,
};

/// Cluster names and their labels, as the registry holds them.
pub(crate) type Labels = BTreeMap<ClusterName, BTreeMap<String, String>>;

/// What every claimant is computed from besides its own spec: the cluster labels and the
/// tenancy policies.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Basis {
    /// Cluster names and their labels.
    pub(crate) labels: Labels,
    /// The tenancy policies and their mode.
    pub(crate) admission: Admission,
}

/// What a claimant was computed from, besides the cluster labels.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClaimBasisVersion {
    uid: Option<String>,
    generation: Option<i64>,
    deleting: bool,
}

impl ClaimBasisVersion {
    fn of(c: &TenancyController) -> Self {
        Self {
            uid: c.meta().uid.clone(),
            generation: c.meta().generation,
            deleting: c.meta().deletion_timestamp.is_some(),
        }
    }
}

struct Entry {
    stamp: ClaimBasisVersion,
    object: Arc<TenancyController>,
    created: i64,
    /// Every key the spec names.
    keys: Vec<ReleaseKey>,
    /// The keys it claims: those its policies allow.
    claimed: BTreeSet<ReleaseKey>,
}

#[derive(Default)]
struct Inner {
    basis: Basis,
    entries: HashMap<OwnerId, Entry>,
    by_key: HashMap<ReleaseKey, BTreeSet<OwnerId>>,
    by_cluster: HashMap<ClusterName, BTreeSet<OwnerId>>,
    /// Claimants of keys another claimant let go, to be planned again.
    wakes: BTreeSet<OwnerId>,
}

impl Inner {
    fn unindex(&mut self, owner: &OwnerId) -> Option<Entry> {
        let entry = self.entries.remove(owner)?;
        for key in &entry.claimed {
            remove_from(&mut self.by_key, key, owner);
        }
        for key in &entry.keys {
            remove_from(&mut self.by_cluster, &key.scope.cluster, owner);
        }
        Some(entry)
    }

    fn index(&mut self, owner: OwnerId, entry: Entry) {
        for key in &entry.claimed {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(owner.clone());
        }
        for key in &entry.keys {
            self.by_cluster
                .entry(key.scope.cluster.clone())
                .or_default()
                .insert(owner.clone());
        }
        self.entries.insert(owner, entry);
    }

    /// Replaces `owner`'s entry (None: forgets it) and wakes the other claimants of every key it
    /// no longer claims.
    fn replace(&mut self, owner: &OwnerId, entry: Option<Entry>) {
        let before = self.unindex(owner).map(|e| e.claimed).unwrap_or_default();
        let after = entry.as_ref().map(|e| &e.claimed);
        for key in before
            .iter()
            .filter(|k| after.is_none_or(|a| !a.contains(*k)))
        {
            if let Some(others) = self.by_key.get(key) {
                self.wakes.extend(others.iter().cloned());
            }
        }
        if let Some(entry) = entry {
            self.index(owner.clone(), entry);
        }
    }
}

fn remove_from<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, BTreeSet<OwnerId>>,
    key: &K,
    owner: &OwnerId,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(owner);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// How many charts a spec names over all its tenancies: the size of the work of planning it.
pub(crate) fn named_charts(c: &TenancyController) -> usize {
    c.spec.tenancies.iter().map(|t| t.charts.len()).sum()
}

/// The release keys every Controller claims, by key and by cluster.
pub(crate) struct Claims {
    inner: RwLock<Inner>,
    chart_home: PathBuf,
    woken: tokio::sync::Notify,
}

impl Claims {
    /// An empty index whose claimants resolve local charts under `chart_home`.
    pub(crate) fn new(chart_home: PathBuf) -> Self {
        Self {
            inner: RwLock::default(),
            chart_home,
            woken: tokio::sync::Notify::new(),
        }
    }

    fn claimant(&self, c: &TenancyController, basis: &Basis) -> Entry {
        let stamp = ClaimBasisVersion::of(c);
        // A resource being deleted claims nothing: its keys are free for others.
        let (keys, claimed) = if stamp.deleting {
            (Vec::new(), BTreeSet::new())
        } else {
            let named = || {
                let (_, _, keys) = plan::claimant(
                    owner_id(c),
                    0,
                    &c.spec,
                    &basis.labels,
                    &self.chart_home,
                    &Admission::permissive(),
                );
                let (_, _, claimed) = plan::claimant(
                    owner_id(c),
                    0,
                    &c.spec,
                    &basis.labels,
                    &self.chart_home,
                    &basis.admission,
                );
                (keys, claimed.into_iter().collect())
            };
            crate::plan::offload(named_charts(c), named)
        };
        Entry {
            stamp,
            object: Arc::new(c.clone()),
            created: created_secs(c),
            keys,
            claimed,
        }
    }

    /// Computes every claimant afresh when the cluster labels or the policies are not those
    /// they were computed with.
    fn rebase(&self, basis: &Basis) {
        if self.inner.read().expect("claims lock").basis == *basis {
            return;
        }
        let mut inner = self.inner.write().expect("claims lock");
        if inner.basis == *basis {
            return;
        }
        let objects: Vec<Arc<TenancyController>> =
            inner.entries.values().map(|e| e.object.clone()).collect();
        let fresh: Vec<(OwnerId, Entry)> = crate::plan::offload(objects.len(), || {
            objects
                .iter()
                .map(|c| (owner_id(c), self.claimant(c, basis)))
                .collect()
        });
        inner.basis = basis.clone();
        for (owner, entry) in fresh {
            inner.replace(&owner, Some(entry));
        }
        self.notify(&inner);
    }

    fn notify(&self, inner: &Inner) {
        if !inner.wakes.is_empty() {
            self.woken.notify_one();
        }
    }

    /// Takes in a Controller as it is now (created, changed or being deleted), with the cluster
    /// labels and policies as they are now; nothing is computed when neither its spec nor the
    /// basis changed.
    pub(crate) fn update(&self, c: &TenancyController, basis: &Basis) {
        self.rebase(basis);
        let owner = owner_id(c);
        let stamp = ClaimBasisVersion::of(c);
        let held = self.inner.read().expect("claims lock");
        if held.entries.get(&owner).is_some_and(|e| e.stamp == stamp) {
            return;
        }
        drop(held);
        let entry = self.claimant(c, basis);
        let mut inner = self.inner.write().expect("claims lock");
        inner.replace(&owner, Some(entry));
        self.notify(&inner);
    }

    /// Forgets a Controller that is gone.
    pub(crate) fn remove(&self, owner: &OwnerId) {
        let mut inner = self.inner.write().expect("claims lock");
        inner.replace(owner, None);
        self.notify(&inner);
    }

    /// The Controllers waiting on keys a claimant let go since the last call: plan them again.
    pub(crate) fn take_wakes(&self) -> BTreeSet<OwnerId> {
        std::mem::take(&mut self.inner.write().expect("claims lock").wakes)
    }

    /// Waits until some claimant let a key go, then takes the Controllers waiting on it.
    pub(crate) async fn woken(&self) -> BTreeSet<OwnerId> {
        loop {
            let wakes = self.take_wakes();
            if !wakes.is_empty() {
                return wakes;
            }
            self.woken.notified().await;
        }
    }

    /// Keeps only the Controllers in `present` (after the hub's Controllers were listed afresh).
    pub(crate) fn retain(&self, present: &BTreeSet<OwnerId>) {
        let mut inner = self.inner.write().expect("claims lock");
        let gone: Vec<OwnerId> = inner
            .entries
            .keys()
            .filter(|o| !present.contains(*o))
            .cloned()
            .collect();
        for owner in gone {
            inner.replace(&owner, None);
        }
        self.notify(&inner);
    }

    /// The release keys a Controller's spec names.
    pub(crate) fn keys_of(&self, owner: &OwnerId) -> Vec<ReleaseKey> {
        let inner = self.inner.read().expect("claims lock");
        inner
            .entries
            .get(owner)
            .map(|e| e.keys.clone())
            .unwrap_or_default()
    }

    /// Who holds each of `keys` among the Controllers claiming it, by the one rule of
    /// [`plan::claims`]; `applied` needs to hold the newest record of each of `keys`.
    pub(crate) fn holders(
        &self,
        keys: &[ReleaseKey],
        applied: &HashMap<ReleaseKey, Applied>,
    ) -> HashMap<ReleaseKey, OwnerId> {
        let inner = self.inner.read().expect("claims lock");
        let claimants = keys.iter().flat_map(|key| {
            let inner = &inner;
            inner
                .by_key
                .get(key)
                .into_iter()
                .flatten()
                .filter_map(move |owner| {
                    let entry = inner.entries.get(owner)?;
                    Some((owner.clone(), entry.created, vec![key.clone()]))
                })
        });
        plan::claims(claimants.collect::<Vec<_>>(), applied)
    }

    /// The Controllers whose specs name a release in `cluster`.
    pub(crate) fn targeting(&self, cluster: &ClusterName) -> Vec<OwnerId> {
        let inner = self.inner.read().expect("claims lock");
        inner
            .by_cluster
            .get(cluster)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many Controllers are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.read().expect("claims lock").entries.len()
    }

    /// True when no Controller is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Feeds the hub's Controller watch into `claims` (`labels` reads the registry's cluster labels): each Controller seen is taken in, each
/// deleted one forgotten, and after a complete listing only those listed are kept.
pub(crate) fn follow(
    claims: &Claims,
    labels: &dyn Fn() -> Basis,
    listing: &mut BTreeSet<OwnerId>,
    event: &kube::runtime::watcher::Event<TenancyController>,
) {
    use kube::runtime::watcher::Event;
    match event {
        Event::Apply(c) => claims.update(c, &labels()),
        Event::InitApply(c) => {
            listing.insert(owner_id(c));
            claims.update(c, &labels());
        }
        Event::Delete(c) => claims.remove(&owner_id(c)),
        Event::Init => listing.clear(),
        Event::InitDone => claims.retain(&std::mem::take(listing)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{controller, deleted};

    const WEB: &str = "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: deployment-example, releaseName: web}\n";
    const DB: &str = "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: deployment-example, releaseName: db}\n";

    fn labels() -> Basis {
        Basis {
            labels: BTreeMap::from([("hub".parse().unwrap(), BTreeMap::new())]),
            admission: Admission::permissive(),
        }
    }

    fn claims() -> Claims {
        Claims::new(PathBuf::from("/charts"))
    }

    fn key(k: &str) -> ReleaseKey {
        k.parse().unwrap()
    }

    #[test]
    fn the_oldest_claimant_holds_a_key_and_a_later_spec_change_frees_it() {
        let claims = claims();
        let older = controller("older", "2026-01-01T00:00:00Z", WEB);
        let mut newer = controller("newer", "2026-02-01T00:00:00Z", WEB);
        claims.update(&older, &labels());
        claims.update(&newer, &labels());
        let held = claims.holders(&[key("hub/foo/web")], &HashMap::new());
        assert_eq!(held[&key("hub/foo/web")].name, "older");
        // The older one now asks for another release: the newer one holds web.
        let mut changed = controller("older", "2026-01-01T00:00:00Z", DB);
        changed.metadata.generation = Some(2);
        claims.update(&changed, &labels());
        let held = claims.holders(&[key("hub/foo/web")], &HashMap::new());
        assert_eq!(held[&key("hub/foo/web")].name, "newer");
        // Being deleted, the newer one claims nothing.
        newer = deleted(newer);
        claims.update(&newer, &labels());
        assert!(
            claims
                .holders(&[key("hub/foo/web")], &HashMap::new())
                .is_empty()
        );
    }

    #[test]
    fn an_unchanged_generation_is_not_computed_again() {
        let claims = claims();
        let c = controller("a", "2026-01-01T00:00:00Z", WEB);
        claims.update(&c, &labels());
        // Same uid and generation with another spec (a status write would look so): kept as it was.
        let same = controller("a", "2026-01-01T00:00:00Z", DB);
        claims.update(&same, &labels());
        assert_eq!(claims.keys_of(&owner_id(&c)), [key("hub/foo/web")]);
    }

    #[test]
    fn new_cluster_labels_compute_every_claimant_again() {
        let claims = claims();
        let spec = "tenancies:\n  - namespace: foo\n    clusterSelector: {matchLabels: {tier: edge}}\n    charts:\n      - {chartName: deployment-example, releaseName: web}\n";
        let c = controller("a", "2026-01-01T00:00:00Z", spec);
        claims.update(&c, &labels());
        assert!(claims.keys_of(&owner_id(&c)).is_empty());
        let mut relabelled = labels();
        relabelled.labels.insert(
            "member-1".parse().unwrap(),
            BTreeMap::from([("tier".into(), "edge".into())]),
        );
        let other = controller("b", "2026-01-01T00:00:00Z", DB);
        claims.update(&other, &relabelled);
        assert_eq!(claims.keys_of(&owner_id(&c)), [key("member-1/foo/web")]);
        assert_eq!(
            claims.targeting(&"member-1".parse().unwrap()),
            [owner_id(&c)]
        );
    }

    #[test]
    fn a_relist_forgets_the_controllers_no_longer_listed() {
        use kube::runtime::watcher::Event;
        let claims = claims();
        let (a, b) = (
            controller("a", "2026-01-01T00:00:00Z", WEB),
            controller("b", "2026-01-01T00:00:00Z", DB),
        );
        let mut listing = BTreeSet::new();
        for event in [
            Event::Init,
            Event::InitApply(a.clone()),
            Event::InitApply(b.clone()),
            Event::InitDone,
        ] {
            follow(&claims, &labels, &mut listing, &event);
        }
        assert_eq!(claims.len(), 2);
        for event in [Event::Init, Event::InitApply(a.clone()), Event::InitDone] {
            follow(&claims, &labels, &mut listing, &event);
        }
        assert_eq!(claims.len(), 1);
        follow(&claims, &labels, &mut listing, &Event::Delete(a));
        assert!(claims.is_empty());
    }

    /// Hub namespace `default` may deliver to `hub/foo` only, as a trusted policy.
    fn foo_only() -> Basis {
        let policy = crate::policy::NamedPolicy {
            name: "foo".into(),
            spec: crate::api::policy::TenancyPolicySpec {
                hub_namespaces: vec!["default".into()],
                clusters: vec!["hub".into()],
                namespaces: vec!["foo".into()],
                chart_sources: vec!["chart-home".into()],
                trusted: true,
                ..Default::default()
            },
        };
        Basis {
            admission: Admission {
                policies: vec![policy],
                ..Admission::default()
            },
            ..labels()
        }
    }

    #[test]
    fn a_key_the_policies_refuse_claims_nothing() {
        let claims = claims();
        let bar = "tenancies:\n  - namespace: bar\n    charts:\n      - {chartName: deployment-example, releaseName: web}\n";
        let squatter = controller("squatter", "2026-01-01T00:00:00Z", bar);
        let owner = controller("owner", "2026-02-01T00:00:00Z", WEB);
        claims.update(&squatter, &foo_only());
        claims.update(&owner, &foo_only());
        assert!(
            claims
                .holders(&[key("hub/bar/web")], &HashMap::new())
                .is_empty(),
            "a refused key must not be held"
        );
        assert_eq!(
            claims.holders(&[key("hub/foo/web")], &HashMap::new())[&key("hub/foo/web")].name,
            "owner"
        );
        // Still named, for planning and status.
        assert_eq!(claims.keys_of(&owner_id(&squatter)), [key("hub/bar/web")]);
    }

    #[tokio::test]
    async fn the_claimants_waiting_on_a_key_are_woken_when_its_holder_lets_it_go() {
        let claims = claims();
        let older = controller("older", "2026-01-01T00:00:00Z", WEB);
        let newer = controller("newer", "2026-02-01T00:00:00Z", WEB);
        claims.update(&older, &labels());
        claims.update(&newer, &labels());
        assert!(claims.take_wakes().is_empty(), "nothing was let go yet");
        claims.remove(&owner_id(&older));
        assert_eq!(claims.woken().await, BTreeSet::from([owner_id(&newer)]));
        // Being deleted, a holder frees its keys too.
        claims.update(&older, &labels());
        assert!(claims.take_wakes().is_empty());
        claims.update(&deleted(older), &labels());
        assert_eq!(claims.take_wakes(), BTreeSet::from([owner_id(&newer)]));
    }
}
