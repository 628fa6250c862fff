//! What a decision reads: what was observed for one resource ([`Seen`]) and the fleet as it
//! runs ([`Live`]), answered by the running operator from its index and model, and by `diff` from
//! what it read.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::{
    api::crd::{DriftStatus, HealthStatus, RolloutStatus},
    api::key::{ClusterName, ReleaseKey},
    observe::drift::RepairVerdict,
    observe::model::ScopeState,
    plan::depends::Edges,
    plan::{Applied, OwnerId},
    policy::Admission,
    status::report::LastOutcome,
};

/// What was observed for one resource: the registered clusters, the releases in them under the
/// keys it names or holds, which clusters are known, who holds the keys several claim, what the
/// policies allow, and its releases left in clusters no longer registered.
pub(crate) struct Seen<'a> {
    /// The resource.
    pub(crate) owner: &'a OwnerId,
    /// Registered clusters and their labels.
    pub(crate) clusters: &'a BTreeMap<ClusterName, BTreeMap<String, String>>,
    /// Releases in the clusters.
    pub(crate) applied: &'a HashMap<ReleaseKey, Applied>,
    /// Clusters whose applied releases are fully known.
    pub(crate) synced: &'a BTreeSet<ClusterName>,
    /// Which resource holds each key claimed by several.
    pub(crate) claims: &'a HashMap<ReleaseKey, OwnerId>,
    /// What the tenancy policies allow.
    pub(crate) admission: &'a Admission,
    /// Its releases left in clusters no longer registered.
    pub(crate) orphans: &'a [ReleaseKey],
}

/// The fleet as it stood right before a decision, for the releases its plan concerns: what
/// the queue holds, the last outcomes, what runs per cluster/namespace (read only when a gate
/// needs it), which clusters are unreachable, and what is remembered for the resource. Owned,
/// so a decision reads plain data: the running operator takes it from its index, queue and
/// model; `diff` builds it from what it read; a test writes it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Live {
    /// Releases with a Helm job queued or running.
    pub(crate) busy: HashSet<ReleaseKey>,
    /// Releases with a Helm job running (or handed to a member), which a newer plan does not
    /// drop.
    pub(crate) running: HashSet<ReleaseKey>,
    /// The last outcome of each release's Helm job.
    pub(crate) outcomes: HashMap<ReleaseKey, LastOutcome>,
    /// What runs in each cluster/namespace (by cluster name and namespace), not live while its
    /// cluster is unreachable.
    pub(crate) scopes: HashMap<(String, String), ScopeState>,
    /// Clusters known to be unreachable.
    pub(crate) unreachable: BTreeSet<ClusterName>,
    /// The rollout state remembered for the resource.
    pub(crate) rollout: Option<RolloutStatus>,
    /// The `dependsOn` edges remembered for the resource (releases it no longer names among
    /// them).
    pub(crate) dependencies: Edges,
    /// Drift found in the deployed revisions of its releases.
    pub(crate) drift: HashMap<ReleaseKey, DriftStatus>,
    /// The health of the deployed revisions' objects, where one is not current or is not
    /// judged yet.
    pub(crate) health: HashMap<ReleaseKey, HealthStatus>,
}

impl Live {
    /// True when `key` has a Helm job queued or running.
    pub(crate) fn busy(&self, key: &ReleaseKey) -> bool {
        self.busy.contains(key)
    }

    /// True when `key` has a Helm job running.
    pub(crate) fn running(&self, key: &ReleaseKey) -> bool {
        self.running.contains(key)
    }

    /// The last outcome of `key`'s Helm job.
    pub(crate) fn outcome(&self, key: &ReleaseKey) -> Option<&LastOutcome> {
        self.outcomes.get(key)
    }

    /// What runs in one cluster/namespace.
    pub(crate) fn scope(&self, cluster: &str, namespace: &str) -> Option<ScopeState> {
        self.scopes
            .get(&(cluster.to_owned(), namespace.to_owned()))
            .cloned()
    }

    /// True unless `cluster` is known to be unreachable.
    pub(crate) fn reachable(&self, cluster: &ClusterName) -> bool {
        !self.unreachable.contains(cluster)
    }
}

/// Whether a repair of a release's drifted revision may run now, and whether this is the first
/// refusal for that revision: the drift repair limiter, the one thing a decision changes (an
/// allowed repair is counted).
pub(crate) type RepairLimiter<'a> = &'a (dyn Fn(&ReleaseKey, i64) -> (RepairVerdict, bool) + Sync);

/// What is observed for one resource, owned (a reconcile reads it from the index, a test builds
/// it): the registered clusters, the releases the resource's
/// spec names or it holds, the clusters whose releases are known, the claims, the policies and
/// its releases left in clusters no longer registered.
pub(crate) struct Observed {
    /// The resource.
    pub(crate) owner: OwnerId,
    /// Registered clusters and their labels.
    pub(crate) clusters: BTreeMap<ClusterName, BTreeMap<String, String>>,
    /// Releases in the clusters under the keys it names or holds.
    pub(crate) applied: HashMap<ReleaseKey, Applied>,
    /// Clusters whose applied releases are fully known.
    pub(crate) synced: BTreeSet<ClusterName>,
    /// Which resource holds each of its keys claimed by several.
    pub(crate) claims: HashMap<ReleaseKey, OwnerId>,
    /// What the tenancy policies allow.
    pub(crate) admission: Admission,
    /// Its releases left in clusters no longer registered.
    pub(crate) orphans: Vec<ReleaseKey>,
}

impl Observed {
    /// The decision's view of it.
    pub(crate) fn seen(&self) -> Seen<'_> {
        Seen {
            owner: &self.owner,
            clusters: &self.clusters,
            applied: &self.applied,
            synced: &self.synced,
            claims: &self.claims,
            admission: &self.admission,
            orphans: &self.orphans,
        }
    }
}
