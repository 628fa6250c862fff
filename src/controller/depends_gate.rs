//! The `dependsOn` gate in a reconcile and in a deletion: the edges the spec names joined with
//! those remembered for releases it no longer names, each dependency judged by the `Ready` rule
//! (on the report the rollout gate judged), installs and upgrades held until what they depend on
//! is Ready, uninstalls until the releases depending on them are gone.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;

use crate::{
    api::crd::Controller,
    api::key::{ClusterName, ReleaseKey},
    controller::context::Context,
    controller::rollout_gate::live_scope,
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
/// (judged on `report`, built before the gates), an uninstall while a release of this resource
/// depending on it is still installed or has a job. The held ones leave the jobs for
/// `dependency_held`, with what each waits for. The edges kept for releases the spec no longer
/// names are updated in the index.
pub(crate) fn gate_dependencies(
    ctx: &Context,
    owner: &OwnerId,
    plan: &mut plan::Plan,
    applied: &HashMap<ReleaseKey, Applied>,
    report: &ReleaseReport,
) {
    let present = |k: &ReleaseKey| {
        applied
            .get(k)
            .is_some_and(|a| a.owner.as_ref() == Some(owner))
            || ctx.queue.is_busy(k)
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
        &ctx.index.dependencies(owner),
        &present,
    );
    ctx.index.set_dependencies(owner, edges.clone());
    let scope = |cluster: &str, namespace: &str| live_scope(ctx, cluster, namespace);
    let now = Timestamp::now().as_second();
    let not_ready = |d: &ReleaseKey| {
        let judged = release_readiness(report, d, &scope);
        let words = judged.waiting.map(|(_, w)| w).unwrap_or_default();
        match (judged.deployed, judged.ready) {
            (_, true) => settling(ctx, d, applied, now),
            (true, false) => Some(format!("not ready: {words}")),
            (false, _) => Some(format!("not deployed: {words}")),
        }
    };
    let (go, held) = depends::gate(std::mem::take(&mut plan.jobs), &edges, &not_ready, &present);
    plan.jobs = go;
    plan.dependency_held = held;
}

/// Why a release judged Ready is not taken for Ready yet: nothing of it (no workload) has been
/// seen and it was deployed less than [`SETTLE_SECS`] ago, so its workloads may still be on
/// their way through the watches.
fn settling(
    ctx: &Context,
    key: &ReleaseKey,
    applied: &HashMap<ReleaseKey, Applied>,
    now: i64,
) -> Option<String> {
    let age = now - applied.get(key)?.modified_at?;
    if age >= SETTLE_SECS {
        return None;
    }
    let (cluster, namespace) = (key.scope.cluster.as_str(), key.scope.namespace.as_str());
    let state = live_scope(ctx, cluster, namespace)?;
    let seen = state
        .workloads
        .values()
        .any(|w| w.release.as_deref() == Some(key.release.as_str()));
    (!seen).then(|| format!("not ready: deployed {age}s ago, no workload of it seen yet"))
}

/// Of the releases a deleted resource uninstalls (`owned`), those that wait for releases
/// depending on them that are still to be uninstalled or have a job running, by the edges its
/// spec names and those kept for releases it named before (not known after a restart).
pub(crate) fn removal_held(
    ctx: &Context,
    c: &Controller,
    owner: &OwnerId,
    registered: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    owned: &BTreeSet<ReleaseKey>,
    running: &[ReleaseKey],
) -> depends::Held {
    let edges = depends::remembered(
        &depends::edges(&c.spec, registered),
        &|_| false,
        &ctx.index.dependencies(owner),
        &|_| true,
    );
    let present = |k: &ReleaseKey| owned.contains(k) || running.contains(k);
    depends::removal_order(owned, &edges, &present)
}
