//! The `dependsOn` gate of a decision and of a deletion: the edges the spec names joined with
//! those remembered for releases it no longer names, each dependency judged by the `Ready` rule
//! (on the report the rollout gate judged), installs and upgrades held until what they depend on
//! is Ready, uninstalls until the releases depending on them are gone.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

use crate::{
    api::crd::TenancyController,
    api::key::{ClusterName, ReleaseKey},
    controller::observed::Live,
    plan::{self, Applied, OwnerId, Problem, depends},
    status::build::release_readiness,
    status::report::ReleaseReport,
};

/// How often a resource with Helm work held by `dependsOn` is reconciled: readiness changes
/// trigger no reconcile, so a held release looks again at this pace.
pub(crate) const DEPENDENCY_POLL: Duration = Duration::from_secs(5);

/// How long after it was deployed a release of which no workload has been seen yet is taken
/// for one without workloads: its record and its workloads come on separate watches, and the
/// record may come first.
const SETTLE_SECS: i64 = 10;

/// Holds back the plan's jobs that `dependsOn` orders after others: an install or upgrade until
/// every release it depends on is deployed from the current spec and Ready by the `Ready` rule
/// (judged on `judged`, the report with every job let through), an uninstall while a release of
/// this resource depending on it is still installed or has a job. The held ones leave the jobs
/// for `dependency_held`, with what each waits for. Returns the edges to remember: the spec's,
/// and those `remembered` for releases it no longer names.
pub(crate) fn gate_dependencies(
    owner: &OwnerId,
    plan: &mut plan::Plan,
    applied: &HashMap<ReleaseKey, Applied>,
    judged: &ReleaseReport,
    remembered: &depends::Edges,
    live: &Live,
    now: Timestamp,
) -> depends::Edges {
    let present = |k: &ReleaseKey| {
        applied
            .get(k)
            .is_some_and(|a| a.owner.as_ref() == Some(owner))
            || live.busy(k)
    };
    let named: HashSet<&ReleaseKey> = plan
        .desired
        .iter()
        .map(|r| &r.key)
        .chain(plan.problems.iter().filter_map(Problem::release))
        .collect();
    let edges = depends::remembered(
        &plan.depends_on,
        &|k| named.contains(k),
        remembered,
        &present,
    );
    let scope = |cluster: &str, namespace: &str| live.scope(cluster, namespace);
    let now = now.as_second();
    let not_ready = |d: &ReleaseKey| {
        let readiness = release_readiness(judged, d, &scope);
        let words = readiness.waiting.map(|(_, w)| w).unwrap_or_default();
        match (readiness.deployed, readiness.ready) {
            (_, true) => settling(live, d, applied, now),
            (true, false) => Some(format!("not ready: {words}")),
            (false, _) => Some(format!("not deployed: {words}")),
        }
    };
    let (go, held) = depends::gate(std::mem::take(&mut plan.jobs), &edges, &not_ready, &present);
    plan.jobs = go;
    plan.dependency_held = held;
    edges
}

/// Why a release judged Ready is not taken for Ready yet: nothing of it (no workload) has been
/// seen and it was deployed less than [`SETTLE_SECS`] ago, so its workloads may still be on
/// their way through the watches.
fn settling(
    live: &Live,
    key: &ReleaseKey,
    applied: &HashMap<ReleaseKey, Applied>,
    now: i64,
) -> Option<String> {
    let age = now - applied.get(key)?.modified_at?;
    if age >= SETTLE_SECS {
        return None;
    }
    let (cluster, namespace) = (key.scope.cluster.as_str(), key.scope.namespace.as_str());
    let state = live.scope(cluster, namespace)?;
    let seen = state
        .workloads
        .values()
        .any(|w| w.release.as_deref() == Some(key.release.as_str()));
    (!seen).then(|| format!("not ready: deployed {age}s ago, no workload of it seen yet"))
}

/// Of the releases a deleted resource uninstalls (`owned`), those that wait for releases
/// depending on them that are still to be uninstalled or have a job running, by the edges its
/// spec names and those `remembered` for releases it named before (not known after a restart).
pub(crate) fn removal_held(
    c: &TenancyController,
    remembered: &depends::Edges,
    registered: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    owned: &BTreeSet<ReleaseKey>,
    running: &[ReleaseKey],
) -> depends::Held {
    let edges = depends::remembered(
        &depends::edges(&c.spec, registered),
        &|_| false,
        remembered,
        &|_| true,
    );
    let present = |k: &ReleaseKey| owned.contains(k) || running.contains(k);
    depends::removal_order(owned, &edges, &present)
}
