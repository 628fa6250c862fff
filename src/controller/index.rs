//! What the hub keeps per Controller between reconciles, in one index with one `forget`: the release keys it asks for, the problems it was told, its rollout, the last `dependsOn` edges, what its newest plan does next, the last outcome of each of its releases, and its releases watched for drift.

use std::{collections::BTreeSet, sync::Arc};

use dashmap::DashMap;
use kube::runtime::reflector::ObjectRef;

use crate::{
    api::crd::{RolloutStatus, TenancyController},
    api::key::ReleaseKey,
    controller::{drift::DriftBoard, interest::Interest},
    plan::{OwnerId, depends::Edges},
    status::{next::Next, report::LastOutcome},
};

/// The per-Controller state of the reconciler and its loops. Service handles (queue, writer,
/// watches) live beside it in the context; this holds only what is kept for a Controller.
pub(crate) struct ControllerIndex {
    interest: Interest,
    reported: DashMap<OwnerId, BTreeSet<String>>,
    outcomes: DashMap<ReleaseKey, LastOutcome>,
    rollouts: DashMap<OwnerId, RolloutStatus>,
    /// The last `dependsOn` edges of each Controller's releases, so the releases it no longer
    /// names are still uninstalled after those that depend on them. Kept in memory only: after
    /// an operator restart, the edges of releases already dropped from the spec are not known,
    /// and those releases are uninstalled in no particular order.
    depends: DashMap<OwnerId, Edges>,
    /// What the newest plan of each Controller does next (its jobs, let through or held), for
    /// the fleet view; Controllers with nothing to do have no entry.
    next: DashMap<OwnerId, Arc<Vec<Next>>>,
    /// The last drift check each Controller asked for (its `multitenancy.dev/drift-check`
    /// annotation), so each value asks once.
    drift_asked: DashMap<OwnerId, String>,
    /// Releases watched for drift, what was found, and the repair limiter.
    pub(crate) drift: DriftBoard,
}

impl ControllerIndex {
    /// An empty index around the drift board.
    pub(crate) fn new(drift: DriftBoard) -> Self {
        Self {
            interest: Interest::default(),
            reported: DashMap::new(),
            outcomes: DashMap::new(),
            rollouts: DashMap::new(),
            depends: DashMap::new(),
            next: DashMap::new(),
            drift_asked: DashMap::new(),
            drift,
        }
    }

    /// Records the release keys `object` asks for, replacing what it asked for before.
    pub(crate) fn ask(
        &self,
        object: &ObjectRef<TenancyController>,
        keys: impl Iterator<Item = ReleaseKey>,
    ) {
        self.interest.set(object, keys);
    }

    /// The Controllers asking for `key`.
    pub(crate) fn asking(&self, key: &ReleaseKey) -> Vec<ObjectRef<TenancyController>> {
        self.interest.of(key)
    }

    /// Replaces the notes told for `owner` with `notes`; returns those told before.
    pub(crate) fn told(&self, owner: &OwnerId, notes: BTreeSet<String>) -> BTreeSet<String> {
        self.reported
            .insert(owner.clone(), notes)
            .unwrap_or_default()
    }

    /// True the first time `note` is told for `owner` (it is recorded then).
    pub(crate) fn tell_once(&self, owner: &OwnerId, note: &str) -> bool {
        let mut told = self.reported.entry(owner.clone()).or_default();
        told.insert(note.to_owned())
    }

    /// The last outcome of `key`'s Helm job.
    pub(crate) fn outcome(&self, key: &ReleaseKey) -> Option<LastOutcome> {
        self.outcomes.get(key).map(|o| o.clone())
    }

    /// Keeps the last outcome of `key`'s Helm job.
    pub(crate) fn record_outcome(&self, key: ReleaseKey, outcome: LastOutcome) {
        self.outcomes.insert(key, outcome);
    }

    /// The last outcome of every release of `owner`.
    pub(crate) fn outcomes_of(&self, owner: &OwnerId) -> Vec<(ReleaseKey, LastOutcome)> {
        self.outcomes
            .iter()
            .filter(|o| o.owner == *owner)
            .map(|o| (o.key().clone(), o.value().clone()))
            .collect()
    }

    /// The rollout state of `owner`, as last stepped here.
    pub(crate) fn rollout(&self, owner: &OwnerId) -> Option<RolloutStatus> {
        self.rollouts.get(owner).map(|r| r.clone())
    }

    /// Keeps `owner`'s rollout state; None forgets it (no rollout in the spec, or deleted).
    pub(crate) fn set_rollout(&self, owner: &OwnerId, state: Option<RolloutStatus>) {
        match state {
            Some(state) => self.rollouts.insert(owner.clone(), state),
            None => self.rollouts.remove(owner).map(|(_, r)| r),
        };
    }

    /// Keeps what `owner`'s newest plan does next; nothing to do forgets it.
    pub(crate) fn set_next(&self, owner: &OwnerId, next: Vec<Next>) {
        if next.is_empty() {
            self.next.remove(owner);
        } else {
            self.next.insert(owner.clone(), Arc::new(next));
        }
    }

    /// What `owner`'s newest plan does next: its jobs, let through or held (empty: nothing).
    pub(crate) fn next(&self, owner: &OwnerId) -> Arc<Vec<Next>> {
        self.next.get(owner).map(|n| n.clone()).unwrap_or_default()
    }

    /// True the first time `owner` asks for a drift check with annotation value `asked` (it is
    /// recorded then); false for the value already seen.
    pub(crate) fn drift_check_asked(&self, owner: &OwnerId, asked: &str) -> bool {
        // One entry guard for the look and the write: a read guard held over an insert into
        // the same shard would deadlock.
        let mut seen = self.drift_asked.entry(owner.clone()).or_default();
        if *seen == asked {
            return false;
        }
        asked.clone_into(&mut seen);
        true
    }

    /// The `dependsOn` edges last kept for `owner` (see the field's note on restarts).
    pub(crate) fn dependencies(&self, owner: &OwnerId) -> Edges {
        self.depends
            .get(owner)
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    /// Keeps `owner`'s `dependsOn` edges; none forgets them.
    pub(crate) fn set_dependencies(&self, owner: &OwnerId, edges: Edges) {
        if edges.is_empty() {
            self.depends.remove(owner);
        } else {
            self.depends.insert(owner.clone(), edges);
        }
    }

    /// Forgets everything kept for `object`: gone, or worked by another replica now.
    pub(crate) fn forget(&self, object: &ObjectRef<TenancyController>) {
        let owner = OwnerId {
            namespace: object.namespace.clone().unwrap_or_default(),
            name: object.name.clone(),
        };
        self.interest.set(object, std::iter::empty());
        self.drift.forget(&owner);
        self.reported.remove(&owner);
        self.rollouts.remove(&owner);
        self.depends.remove(&owner);
        self.next.remove(&owner);
        self.drift_asked.remove(&owner);
        self.outcomes.retain(|_, o| o.owner != owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Outcome;
    use std::time::Duration;

    fn owner() -> (OwnerId, ObjectRef<TenancyController>) {
        let owner = OwnerId {
            namespace: "team-a".into(),
            name: "web".into(),
        };
        (owner, ObjectRef::new("web").within("team-a"))
    }

    #[test]
    fn forget_is_one_call_that_leaves_nothing_of_the_controller() {
        let index = ControllerIndex::new(DriftBoard::new(Duration::from_secs(60)).0);
        let (owner, object) = owner();
        let key: ReleaseKey = "member-1/foo/web".parse().unwrap();
        index.ask(&object, [key.clone()].into_iter());
        assert!(index.tell_once(&owner, "a problem"));
        assert!(!index.tell_once(&owner, "a problem"));
        index.record_outcome(
            key.clone(),
            LastOutcome {
                fingerprint: "apply:x".into(),
                outcome: Outcome::Uninstalled,
                owner: owner.clone(),
                settled: false,
                at: std::time::Instant::now(),
            },
        );
        index.set_rollout(&owner, Some(RolloutStatus::default()));
        let edges = Edges::from([(key.clone(), [key.clone()].into())]);
        index.set_dependencies(&owner, edges.clone());
        assert_eq!(index.dependencies(&owner), edges);
        let next = crate::status::next::Next {
            key: key.clone(),
            action: crate::status::next::Action::Install,
            held: None,
            release: None,
            revision: None,
        };
        index.set_next(&owner, vec![next.clone()]);
        assert_eq!(*index.next(&owner), [next]);

        index.forget(&object);

        assert!(index.asking(&key).is_empty());
        assert!(index.outcome(&key).is_none());
        assert!(index.outcomes_of(&owner).is_empty());
        assert!(index.rollout(&owner).is_none());
        assert!(index.dependencies(&owner).is_empty());
        assert!(index.next(&owner).is_empty());
        assert!(
            index.drift_check_asked(&owner, "1"),
            "the drift check asked is forgotten too"
        );
        assert!(
            !index.drift_check_asked(&owner, "1"),
            "each value asks once"
        );
        assert!(index.drift_check_asked(&owner, "2"));
        assert!(
            index.tell_once(&owner, "a problem"),
            "told notes are forgotten too"
        );
    }

    #[test]
    fn told_returns_what_was_told_before_and_replaces_it() {
        let index = ControllerIndex::new(DriftBoard::new(Duration::from_secs(60)).0);
        let (owner, _) = owner();
        let first = BTreeSet::from(["one".to_owned()]);
        assert!(index.told(&owner, first.clone()).is_empty());
        assert_eq!(index.told(&owner, BTreeSet::new()), first);
    }
}
