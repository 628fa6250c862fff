//! What a decision reads: what was observed for one resource ([`Seen`]) and the fleet as it
//! runs ([`Live`]), answered by the running operator from its index and model, and by `diff` from
//! what it read.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    api::crd::{DriftStatus, RolloutStatus},
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

/// What the gates and the report read of the fleet as it runs: the queue, the last outcomes,
/// what runs per cluster/namespace, reachability, and what is remembered per resource. The
/// running operator answers from its index and model; a preview, from what it read.
pub(crate) trait Live: Sync {
    /// True when `key` has a Helm job queued or running.
    fn busy(&self, key: &ReleaseKey) -> bool;
    /// True when `key` has a Helm job running (or handed to a member), which a newer plan does
    /// not drop.
    fn running(&self, key: &ReleaseKey) -> bool;
    /// The last outcome of `key`'s Helm job.
    fn outcome(&self, key: &ReleaseKey) -> Option<LastOutcome>;
    /// What runs in one cluster/namespace, not live while its cluster is unreachable.
    fn scope(&self, cluster: &str, namespace: &str) -> Option<ScopeState>;
    /// True unless `cluster` is known to be unreachable.
    fn reachable(&self, cluster: &ClusterName) -> bool;
    /// The rollout state remembered for `owner`.
    fn rollout(&self, owner: &OwnerId) -> Option<RolloutStatus>;
    /// The `dependsOn` edges remembered for `owner` (releases it no longer names among them).
    fn dependencies(&self, owner: &OwnerId) -> Edges;
    /// Drift found in the deployed revisions of `applied`.
    fn drift(&self, applied: &HashMap<ReleaseKey, Applied>) -> HashMap<ReleaseKey, DriftStatus>;
    /// Whether a repair of `key`'s drifted `revision` may run now, and whether this is the first
    /// refusal for that revision. The one call here that changes state: an allowed repair is
    /// counted by the limiter.
    fn allow_repair(&self, key: &ReleaseKey, revision: i64) -> (RepairVerdict, bool);
}

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
