//! Status model: plan, applied releases and job outcomes become the hub resource's bounded status (pure).

use std::collections::BTreeSet;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};

use crate::{
    api::crd::{
        ChartMessage, ClusterStatus, ControllerStatus, HealthStatus, PodStatus, Summary,
        TenancyStatus, WorkloadStatus,
    },
    api::key::{ClusterName, ReleaseKey},
    observe::model::{PodInfo, ScopeState},
};

use crate::status::{
    conditions::{ConditionInputs, conditions},
    phase::{self, counts, is_managed},
    report::ReleaseReport,
};

/// Pods listed per cluster/namespace entry before only pods that are not ready are listed.
pub const POD_LIST_LIMIT: usize = 50;

/// The serialized status stays below this many bytes.
pub(crate) const STATUS_BUDGET: usize = 200 * 1024;

/// Joins the release side with what runs (`scope` looks a cluster/namespace up in the model,
/// `reachable` tells whether a cluster answers): workloads and pods per entry, freshness,
/// per-cluster summaries, totals and conditions, bounded.
pub(crate) fn assemble(
    report: &ReleaseReport,
    scope: &dyn Fn(&str, &str) -> Option<ScopeState>,
    reachable: &dyn Fn(&str) -> bool,
    previous: &[Condition],
    now: Timestamp,
) -> ControllerStatus {
    let mut tenancies = report.tenancies.clone();
    for t in &mut tenancies {
        let synced = report.synced.iter().any(|c| c.as_str() == t.cluster);
        match scope(&t.cluster, &t.namespace) {
            Some(state) => fill(t, &state, synced),
            None => t.fresh = false,
        }
    }
    let clusters = cluster_summaries(&tenancies, &report.synced, reachable);
    let summary = totals(&tenancies, &clusters);
    let conditions = conditions(&ConditionInputs::of(&tenancies, report), previous, now);
    let mut status = ControllerStatus {
        updated_tenancies: tenancies,
        clusters,
        summary: Some(summary),
        conditions,
        observed_generation: report.generation,
        rollout: report.rollout.clone(),
    };
    bound(&mut status, STATUS_BUDGET);
    status
}

/// One cluster (or one release) judged by the `Ready` rule, for the rollout gate (and the
/// `dependsOn` gate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClusterReadiness {
    /// Every managed release deployed from the newest spec, watched live, workloads rolled
    /// out, pods ready.
    pub(crate) ready: bool,
    /// Every managed release deployed from the newest spec (whatever its pods do).
    pub(crate) deployed: bool,
    /// A release whose Helm job for the newest spec failed: release and message.
    pub(crate) failed: Option<(String, String)>,
    /// What it waits for when not ready: a release (may be empty) and words.
    pub(crate) waiting: Option<(String, String)>,
}

/// Judges one cluster of a release report by exactly the rule `Ready` applies to the whole
/// resource, on the releases tenancy-hub manages there (a release refused by the policies, held
/// by another owner, not plannable or suspended is not this cluster's health: it is reported,
/// not waited for).
pub(crate) fn cluster_readiness(
    report: &ReleaseReport,
    cluster: &str,
    scope: &dyn Fn(&str, &str) -> Option<ScopeState>,
) -> ClusterReadiness {
    // A change held back by `suspend` is not this rollout's to wait for: changing `suspend`
    // is a new generation, and so a new rollout, once it is let through.
    let judged = |_: &str, m: &ChartMessage| is_managed(&m.phase) && m.phase != phase::SUSPENDED;
    readiness(report, cluster, &judged, scope)
}

/// Judges one release of a report by the same rule as [`cluster_readiness`], on that release
/// alone (for `dependsOn`): deployed from the newest spec, its judged objects current (the
/// chart's `healthCheckExprs`, kstatus's rules), watched live, its workloads rolled out and its
/// pods ready; a release with no workloads is ready once deployed, judged and watched. A release
/// the report does not show, or shows with a problem, is not deployed.
pub(crate) fn release_readiness(
    report: &ReleaseReport,
    key: &ReleaseKey,
    scope: &dyn Fn(&str, &str) -> Option<ScopeState>,
) -> ClusterReadiness {
    let (namespace, release) = (key.scope.namespace.as_str(), key.release.as_str());
    let this = |ns: &str, m: &ChartMessage| ns == namespace && m.release_name == release;
    let shown = report
        .tenancies
        .iter()
        .filter(|t| t.cluster == key.scope.cluster.as_str())
        .any(|t| t.chart_messages.iter().any(|m| this(&t.namespace, m)));
    if !shown {
        return ClusterReadiness {
            waiting: Some((
                release.to_owned(),
                format!("release {namespace}/{release} is not planned"),
            )),
            ..ClusterReadiness::default()
        };
    }
    readiness(report, key.scope.cluster.as_str(), &this, scope)
}

/// The readiness rule over the chart messages of `cluster` that `judged` picks (given the
/// namespace of their entry).
fn readiness(
    report: &ReleaseReport,
    cluster: &str,
    judged: &dyn Fn(&str, &ChartMessage) -> bool,
    scope: &dyn Fn(&str, &str) -> Option<ScopeState>,
) -> ClusterReadiness {
    let synced = report.synced.iter().any(|c| c.as_str() == cluster);
    let mut out = ClusterReadiness {
        ready: true,
        deployed: true,
        ..ClusterReadiness::default()
    };
    for t in report.tenancies.iter().filter(|t| t.cluster == cluster) {
        if !t.chart_messages.iter().any(|m| judged(&t.namespace, m)) {
            continue;
        }
        let mut t = t.clone();
        t.chart_messages.retain(|m| judged(&t.namespace, m));
        match scope(&t.cluster, &t.namespace) {
            Some(state) => fill(&mut t, &state, synced),
            None => t.fresh = false,
        }
        let here = &t.namespace;
        if let Some(m) = t.chart_messages.iter().find(|m| m.phase == phase::FAILED) {
            out.failed = Some((m.release_name.clone(), m.error_message.clone()));
        }
        if let Some(m) = t.chart_messages.iter().find(|m| m.phase != phase::DEPLOYED) {
            out.deployed = false;
            out.waiting.get_or_insert_with(|| {
                (
                    m.release_name.clone(),
                    format!("release {here}/{} is {}", m.release_name, m.phase),
                )
            });
        }
        if let Some((m, health)) = t
            .chart_messages
            .iter()
            .find_map(|m| m.health.as_ref().map(|h| (m, h)))
        {
            let words = (m.release_name.clone(), health_words(here, health));
            if health.state == "Failed" {
                out.failed.get_or_insert(words);
            } else {
                out.waiting.get_or_insert(words);
            }
        }
        if entry_ready(&t) {
            continue;
        }
        out.ready = false;
        let release = |name: &str| name.to_owned();
        let why = if !t.fresh {
            (
                String::new(),
                format!("namespace {here} is not watched live"),
            )
        } else if let Some(w) = t
            .replication_controller_status
            .iter()
            .find(|w| !w.rolled_out)
        {
            (
                release(&w.release_name),
                format!(
                    "{} {here}/{} not rolled out ({} ready)",
                    w.kind, w.replication_controller_name, w.ready
                ),
            )
        } else {
            (
                String::new(),
                format!("{} pod(s) in {here} not ready", t.pods_total - t.pods_ready),
            )
        };
        out.waiting.get_or_insert(why);
    }
    out.ready &= out.deployed;
    out
}

fn fill(t: &mut TenancyStatus, state: &ScopeState, synced: bool) {
    // Releases held by another owner are not ours to report.
    let releases: BTreeSet<&str> = t
        .chart_messages
        .iter()
        .filter(|m| m.phase != phase::CONFLICT)
        .map(|m| m.release_name.as_str())
        .filter(|r| !r.is_empty())
        .collect();
    let ours = |release: Option<&str>| release.is_some_and(|r| releases.contains(r));
    t.fresh = synced && state.live;
    t.last_seen = state.last_seen.map(|s| s.to_string());
    t.replication_controller_status = state
        .workloads
        .values()
        .filter(|w| ours(w.release.as_deref()))
        .map(|w| WorkloadStatus {
            replication_controller_name: w.id.name.clone(),
            api_version: "apps/v1".into(),
            kind: w.id.kind.to_string(),
            ready: if t.fresh {
                format!("{}/{}", w.ready, w.desired)
            } else {
                format!("?/{}", w.desired)
            },
            release_name: w.release.clone().unwrap_or_default(),
            rolled_out: t.fresh && w.rolled_out,
        })
        .collect();
    let mut pods: Vec<&PodInfo> = state
        .pods
        .values()
        .filter(|p| ours(state.release_of(p)))
        .collect();
    pods.sort_by_key(|p| (p.ready, p.name.clone()));
    t.pods_total = pods.len() as i32;
    // A pod that ran to completion (a Job's) is as good as ready.
    t.pods_ready = if t.fresh {
        pods.iter()
            .filter(|p| p.ready || p.phase == "Succeeded")
            .count() as i32
    } else {
        0
    };
    t.pod_status = pods
        .iter()
        .take(POD_LIST_LIMIT)
        .map(|p| PodStatus {
            pod_name: p.name.clone(),
            phase: if t.fresh {
                p.phase.clone()
            } else {
                phase::UNKNOWN.into()
            },
            ready: t.fresh && p.ready,
            restarts: p.restarts,
            reason: p.reason.clone(),
        })
        .collect();
}

/// A release's objects not current, in words: the first of them and why.
fn health_words(namespace: &str, health: &HealthStatus) -> String {
    let Some(o) = health.objects.first() else {
        return format!(
            "the objects of revision {} are not judged yet",
            health.revision
        );
    };
    let at = if o.namespace.is_empty() {
        namespace
    } else {
        &o.namespace
    };
    let more = health.objects.len() - 1 + usize::try_from(health.more_objects).unwrap_or(0);
    let more = if more > 0 {
        format!(" (and {more} more not current)")
    } else {
        String::new()
    };
    let reason = if o.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", o.reason)
    };
    format!("{} {at}/{} is {}{reason}{more}", o.kind, o.name, o.health)
}

/// Whether an entry shows nothing left to do: every release deployed and its judged objects
/// current, watched live, every workload rolled out and every pod ready.
fn entry_ready(t: &TenancyStatus) -> bool {
    t.chart_messages
        .iter()
        .all(|m| m.phase == phase::DEPLOYED && m.health.is_none())
        && t.fresh
        && t.replication_controller_status.iter().all(|w| w.rolled_out)
        && t.pods_ready == t.pods_total
}

/// Shrinks a status until it serializes within `budget` bytes: ready pods go first, then ready
/// workloads, then deployed releases, then whole entries, ready ones before any that shows a
/// problem; counts stay.
pub(crate) fn bound(status: &mut ControllerStatus, budget: usize) {
    let size = |s: &ControllerStatus| serde_json::to_vec(s).map_or(0, |v| v.len());
    let mut limit = POD_LIST_LIMIT;
    while size(status) > budget && limit > 0 {
        limit /= 2;
        for t in &mut status.updated_tenancies {
            t.pod_status.retain(|p| !p.ready);
            t.pod_status.truncate(limit);
        }
    }
    if size(status) > budget {
        for t in &mut status.updated_tenancies {
            t.replication_controller_status.retain(|w| !w.rolled_out);
        }
    }
    if size(status) > budget {
        for m in status
            .updated_tenancies
            .iter_mut()
            .flat_map(|t| &mut t.chart_messages)
        {
            if let Some(h) = &mut m.health {
                let cut = h.objects.len().saturating_sub(1);
                h.objects.truncate(1);
                h.more_objects = h.more_objects.saturating_add(cut as i32);
            }
        }
    }
    if size(status) > budget {
        for t in &mut status.updated_tenancies {
            t.chart_messages
                .retain(|m| m.phase != phase::DEPLOYED || m.health.is_some());
            for m in &mut t.chart_messages {
                m.setting_map.clear();
                m.values.clear();
            }
        }
    }
    if size(status) > budget
        && let Some(r) = &mut status.rollout
    {
        // Counts stay; a restarted operator finds these clusters healthy again in one step.
        r.clusters
            .retain(|c| c.state != crate::plan::rollout::state::HEALTHY);
    }
    if size(status) <= budget {
        return;
    }
    // Entries in the order they are given up: ready ones first, the last listed first.
    let all = std::mem::take(&mut status.updated_tenancies);
    let mut order: Vec<usize> = (0..all.len()).rev().collect();
    order.sort_by_key(|i| !entry_ready(&all[*i]));
    let keeping = |dropped: usize| -> Vec<TenancyStatus> {
        let gone: BTreeSet<usize> = order[..dropped].iter().copied().collect();
        (0..all.len())
            .filter(|i| !gone.contains(i))
            .map(|i| all[i].clone())
            .collect()
    };
    // The fewest entries to drop, found by bisection: size falls as entries go.
    let (mut low, mut high) = (0, all.len());
    while low < high {
        let mid = (low + high) / 2;
        status.updated_tenancies = keeping(mid);
        if size(status) <= budget {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    status.updated_tenancies = keeping(low);
}

fn ratio(ready: usize, total: usize) -> String {
    format!("{ready}/{total}")
}

/// of an unreachable cluster).
/// One summary per cluster. A cluster is reachable when its API server answers and its release
/// records are listed, whatever its entries hold (an entry with nothing to watch is not a sign
/// of an unreachable cluster).
fn cluster_summaries(
    tenancies: &[TenancyStatus],
    synced: &BTreeSet<ClusterName>,
    reachable: &dyn Fn(&str) -> bool,
) -> Vec<ClusterStatus> {
    let names: BTreeSet<&str> = tenancies.iter().map(|t| t.cluster.as_str()).collect();
    names
        .into_iter()
        .map(|name| {
            let (deployed, releases, pods_ready, pods) =
                counts(tenancies.iter().filter(|t| t.cluster == name));
            ClusterStatus {
                name: name.to_owned(),
                reachable: synced.iter().any(|c| c.as_str() == name) && reachable(name),
                last_seen: tenancies
                    .iter()
                    .filter(|t| t.cluster == name)
                    .filter_map(|t| t.last_seen.clone())
                    .max(),
                releases: ratio(deployed, releases),
                pods: format!("{pods_ready}/{pods}"),
            }
        })
        .collect()
}

fn totals(tenancies: &[TenancyStatus], clusters: &[ClusterStatus]) -> Summary {
    let (deployed, releases, pods_ready, pods) = counts(tenancies.iter());
    Summary {
        clusters: ratio(
            clusters.iter().filter(|c| c.reachable).count(),
            clusters.len(),
        ),
        releases: ratio(deployed, releases),
        pods: format!("{pods_ready}/{pods}"),
    }
}

#[cfg(test)]
mod tests;
