//! Status model: plan, applied releases and job outcomes become the hub resource's bounded status (pure).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use crate::{
    api::crd::{
        ChartMessage, ClusterStatus, ControllerStatus, DriftStatus, PodStatus, Summary,
        TenancyStatus, WorkloadStatus,
    },
    api::key::{ClusterName, ReleaseKey},
    observe::model::{PodInfo, ScopeState},
    plan::{Applied, Plan, Problem, Release},
    queue::Outcome,
};

/// Release phases shown in `chartMessages[].phase`.
pub(crate) mod phase {
    /// Installed or upgraded to the current spec.
    pub(crate) const DEPLOYED: &str = "Deployed";
    /// Waiting for or running a Helm job.
    pub(crate) const PENDING: &str = "Pending";
    /// The last Helm job failed.
    pub(crate) const FAILED: &str = "Failed";
    /// Held by someone else; left alone.
    pub(crate) const CONFLICT: &str = "Conflict";
    /// Not known: the cluster has not been reached yet.
    pub(crate) const UNKNOWN: &str = "Unknown";
    /// Cannot be planned as written.
    pub(crate) const INVALID: &str = "Invalid";
    /// Not allowed by the tenancy policies: no Helm call; what runs stays as it is.
    pub(crate) const FORBIDDEN: &str = "Forbidden";
    /// Left in a cluster that is no longer registered.
    pub(crate) const ORPHANED: &str = "Orphaned";
    /// A change to it is held back by `suspend`: what runs stays as it is until resumed.
    pub(crate) const SUSPENDED: &str = "Suspended";
}

/// The last outcome of a release's Helm job, with the fingerprint of the job.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LastOutcome {
    /// What the job was meant to reach (see `Job::fingerprint`).
    pub(crate) fingerprint: String,
    /// What it came to.
    pub(crate) outcome: Outcome,
    /// The resource the job was done for.
    pub(crate) owner: crate::plan::OwnerId,
    /// True when nothing more happens without a spec change (a permanent or stalled failure).
    pub(crate) settled: bool,
}

/// Everything the release part of the status is built from.
pub(crate) struct ReleaseView<'a> {
    /// The plan just made.
    pub(crate) plan: &'a Plan,
    /// Releases in the clusters.
    pub(crate) applied: &'a HashMap<ReleaseKey, Applied>,
    /// Last outcome per release.
    pub(crate) outcomes: &'a HashMap<ReleaseKey, LastOutcome>,
    /// Releases with a job queued or running.
    pub(crate) busy: &'a BTreeSet<ReleaseKey>,
    /// Clusters whose release records are known.
    pub(crate) synced: &'a BTreeSet<ClusterName>,
    /// The resource's generation.
    pub(crate) generation: Option<i64>,
    /// Drift found in the deployed revision of releases.
    pub(crate) drift: &'a HashMap<ReleaseKey, DriftStatus>,
}

/// The release side of a resource's status, waiting to be joined with what runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ReleaseReport {
    /// One entry per cluster/namespace with its chart messages.
    pub(crate) tenancies: Vec<TenancyStatus>,
    /// Problems that belong to no cluster/namespace.
    pub(crate) general: Vec<String>,
    /// Clusters whose release records are known.
    pub(crate) synced: BTreeSet<ClusterName>,
    /// The resource's generation.
    pub(crate) generation: Option<i64>,
    /// While the resource is being deleted: what the deletion waits for.
    pub(crate) deleting: Option<String>,
    /// What the spec suspends, in words, when it suspends anything.
    pub(crate) suspended: Option<String>,
    /// The rollout of the newest generation, when `spec.rollout` is set.
    pub(crate) rollout: Option<crate::api::crd::RolloutStatus>,
}

/// Pods listed per cluster/namespace entry before only pods that are not ready are listed.
pub const POD_LIST_LIMIT: usize = 50;

/// The serialized status stays below this many bytes.
pub(crate) const STATUS_BUDGET: usize = 200 * 1024;

fn message(
    release: &Release,
    phase: &str,
    error: String,
    revision: Option<i64>,
    chart_version: String,
) -> ChartMessage {
    ChartMessage {
        chart_name: release.chart_name.clone(),
        release_name: release.key.release.clone(),
        setting_map: release.settings.iter().cloned().collect(),
        error_message: error,
        phase: phase.to_owned(),
        revision,
        chart_version,
        drift: None,
    }
}

/// The releases of a plan whose Helm work is held back, by `suspend` or by the rollout, as sets:
/// asked once per release.
struct HeldBack<'a> {
    suspended: HashSet<&'a ReleaseKey>,
    rollout: HashSet<&'a ReleaseKey>,
}

impl<'a> HeldBack<'a> {
    fn of(plan: &'a Plan) -> Self {
        Self {
            suspended: plan.suspended.iter().collect(),
            rollout: plan.rollout_held.iter().collect(),
        }
    }
}

fn release_message(release: &Release, view: &ReleaseView<'_>, held: &HeldBack<'_>) -> ChartMessage {
    ChartMessage {
        drift: view.drift.get(&release.key).cloned(),
        ..plain_release_message(release, view, held)
    }
}

fn plain_release_message(
    release: &Release,
    view: &ReleaseView<'_>,
    held: &HeldBack<'_>,
) -> ChartMessage {
    let applied = view.applied.get(&release.key);
    // Only the outcome of a job for the current spec counts: after a revert to a good spec, an
    // old failure says nothing about the release.
    let current_job = format!("apply:{}", release.spec_hash);
    let last = view
        .outcomes
        .get(&release.key)
        .filter(|l| l.fingerprint == current_job);
    let failure = last.and_then(|l| match &l.outcome {
        Outcome::Failed { message, .. } => Some(message.clone()),
        _ => None,
    });
    let chart_version = last
        .and_then(|l| match &l.outcome {
            Outcome::Applied { chart_version, .. } => Some(chart_version.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let current = applied
        .filter(|a| a.status == "deployed" && a.spec_hash.as_deref() == Some(&release.spec_hash));
    if held.suspended.contains(&release.key) {
        return message(
            release,
            phase::SUSPENDED,
            "suspended: this change is applied once resumed".into(),
            applied.map(|a| a.revision),
            chart_version,
        );
    }
    if held.rollout.contains(&release.key) {
        return message(
            release,
            phase::PENDING,
            view.plan.rollout_note.clone().unwrap_or_default(),
            applied.map(|a| a.revision),
            chart_version,
        );
    }
    if view.busy.contains(&release.key) {
        return message(
            release,
            phase::PENDING,
            failure.unwrap_or_default(),
            applied.map(|a| a.revision),
            chart_version,
        );
    }
    if let Some(error) = failure {
        return message(
            release,
            phase::FAILED,
            error,
            applied.map(|a| a.revision),
            chart_version,
        );
    }
    if let Some(a) = current {
        return message(
            release,
            phase::DEPLOYED,
            String::new(),
            Some(a.revision),
            chart_version,
        );
    }
    if !view.synced.contains(&release.key.scope.cluster) {
        let note = format!(
            "cluster {} has not been reached yet",
            release.key.scope.cluster
        );
        return message(release, phase::UNKNOWN, note, None, chart_version);
    }
    message(
        release,
        phase::PENDING,
        String::new(),
        applied.map(|a| a.revision),
        chart_version,
    )
}

/// The message of a release no longer in the spec whose uninstall the rollout holds back.
fn held_removal(key: &ReleaseKey, view: &ReleaseView<'_>) -> ChartMessage {
    ChartMessage {
        release_name: key.release.clone(),
        phase: phase::PENDING.into(),
        error_message: format!(
            "no longer in the spec, uninstalled when the rollout reaches this cluster; {}",
            view.plan.rollout_note.as_deref().unwrap_or_default()
        ),
        revision: view.applied.get(key).map(|a| a.revision),
        ..Default::default()
    }
}

fn problem_message(problem: &Problem, key: &ReleaseKey) -> ChartMessage {
    let phase = match problem {
        Problem::Conflict { .. } => phase::CONFLICT,
        Problem::Forbidden { .. } => phase::FORBIDDEN,
        _ => phase::INVALID,
    };
    ChartMessage {
        chart_name: match problem {
            Problem::MissingChart { chart, .. }
            | Problem::Duplicate { chart, .. }
            | Problem::Forbidden { chart, .. } => chart.clone(),
            _ => String::new(),
        },
        release_name: key.release.clone(),
        error_message: problem.to_string(),
        phase: phase.to_owned(),
        ..Default::default()
    }
}

/// The release side of the status: one entry per cluster/namespace with its releases.
pub(crate) fn releases(view: &ReleaseView<'_>) -> ReleaseReport {
    let mut tenancies: BTreeMap<(String, String), TenancyStatus> = BTreeMap::new();
    let mut general = Vec::new();
    let held = HeldBack::of(view.plan);
    for release in &view.plan.desired {
        let scope = &release.key.scope;
        entry(&mut tenancies, scope.cluster.as_str(), &scope.namespace)
            .chart_messages
            .push(release_message(release, view, &held));
    }
    let desired: BTreeSet<&ReleaseKey> = view.plan.desired.iter().map(|r| &r.key).collect();
    for key in view.plan.suspended.iter().filter(|k| !desired.contains(k)) {
        entry(
            &mut tenancies,
            key.scope.cluster.as_str(),
            &key.scope.namespace,
        )
        .chart_messages
        .push(ChartMessage {
            release_name: key.release.clone(),
            phase: phase::SUSPENDED.into(),
            error_message: "suspended: no longer in the spec, uninstalled once resumed".into(),
            revision: view.applied.get(key).map(|a| a.revision),
            ..Default::default()
        });
    }
    for key in view
        .plan
        .rollout_held
        .iter()
        .filter(|k| !desired.contains(k))
    {
        entry(
            &mut tenancies,
            key.scope.cluster.as_str(),
            &key.scope.namespace,
        )
        .chart_messages
        .push(held_removal(key, view));
    }
    for problem in &view.plan.problems {
        match (problem.release(), problem) {
            (Some(key), _) => entry(
                &mut tenancies,
                key.scope.cluster.as_str(),
                &key.scope.namespace,
            )
            .chart_messages
            .push(problem_message(problem, key)),
            (
                None,
                Problem::UnknownCluster {
                    namespace, cluster, ..
                },
            ) => {
                entry(&mut tenancies, cluster, namespace)
                    .chart_messages
                    .push(ChartMessage {
                        error_message: problem.to_string(),
                        phase: phase::INVALID.into(),
                        ..Default::default()
                    });
            }
            (None, _) => general.push(problem.to_string()),
        }
    }
    ReleaseReport {
        tenancies: tenancies.into_values().collect(),
        general,
        synced: view.synced.clone(),
        generation: view.generation,
        deleting: None,
        suspended: view.plan.suspension.clone(),
        rollout: None,
    }
}

/// The report the rollout gate judged (built from the plan before the gate, with the jobs queued
/// before it), brought up to `view`: the plan the gate let through and the jobs queued now. Only
/// the releases the gate held back or this round queued get their message again, and the held
/// releases no longer in the spec are added where a build puts them; the result equals
/// `releases(view)`, so a reconcile builds its report once.
pub(crate) fn after_gate(
    mut report: ReleaseReport,
    view: &ReleaseView<'_>,
    queued_before: &BTreeSet<ReleaseKey>,
) -> ReleaseReport {
    let held = HeldBack::of(view.plan);
    let changed = |key: &ReleaseKey| {
        held.rollout.contains(key) || (view.busy.contains(key) && !queued_before.contains(key))
    };
    let mut at: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, t) in report.tenancies.iter().enumerate() {
        at.insert((t.cluster.as_str(), t.namespace.as_str()), i);
    }
    let mut fresh: Vec<(usize, usize, ChartMessage)> = Vec::new();
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for release in &view.plan.desired {
        let scope = &release.key.scope;
        let place = (scope.cluster.as_str(), scope.namespace.as_str());
        // The n-th desired release of a cluster/namespace is its n-th message, as built.
        let nth = seen.entry(place).or_default();
        let slot = *nth;
        *nth += 1;
        if changed(&release.key)
            && let Some(&t) = at.get(&place)
        {
            fresh.push((t, slot, release_message(release, view, &held)));
        }
    }
    for (t, slot, message) in fresh {
        report.tenancies[t].chart_messages[slot] = message;
    }
    let desired: BTreeSet<&ReleaseKey> = view.plan.desired.iter().map(|r| &r.key).collect();
    for key in view
        .plan
        .rollout_held
        .iter()
        .filter(|k| !desired.contains(k))
    {
        let message = held_removal(key, view);
        let (cluster, namespace) = (key.scope.cluster.as_str(), key.scope.namespace.as_str());
        let t = match report.tenancies.binary_search_by(|t| {
            (t.cluster.as_str(), t.namespace.as_str()).cmp(&(cluster, namespace))
        }) {
            Ok(t) => t,
            Err(t) => {
                report.tenancies.insert(
                    t,
                    TenancyStatus {
                        cluster: cluster.to_owned(),
                        namespace: namespace.to_owned(),
                        ..Default::default()
                    },
                );
                t
            }
        };
        let messages = &mut report.tenancies[t].chart_messages;
        // After the releases and the suspended ones, before the problems.
        let before = messages
            .iter()
            .position(|m| {
                [phase::CONFLICT, phase::FORBIDDEN, phase::INVALID].contains(&m.phase.as_str())
            })
            .unwrap_or(messages.len());
        messages.insert(before, message);
    }
    report
}

/// The release side of a resource being deleted: what its status last said of its releases, and
/// what the deletion waits for.
pub(crate) fn deleting(
    previous: Option<&ControllerStatus>,
    generation: Option<i64>,
    waiting: String,
) -> ReleaseReport {
    let tenancies = previous
        .map(|s| {
            s.updated_tenancies
                .iter()
                .map(|t| TenancyStatus {
                    cluster: t.cluster.clone(),
                    namespace: t.namespace.clone(),
                    chart_messages: t.chart_messages.clone(),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    ReleaseReport {
        tenancies,
        general: Vec::new(),
        synced: BTreeSet::new(),
        generation,
        deleting: Some(waiting),
        suspended: None,
        rollout: previous.and_then(|s| s.rollout.clone()),
    }
}

/// Adds releases left in clusters no longer registered, each to its cluster/namespace entry.
pub(crate) fn add_orphans<'a>(
    report: &mut ReleaseReport,
    orphans: impl IntoIterator<Item = &'a ReleaseKey>,
) {
    let mut tenancies: BTreeMap<(String, String), TenancyStatus> = report
        .tenancies
        .drain(..)
        .map(|t| ((t.cluster.clone(), t.namespace.clone()), t))
        .collect();
    for key in orphans {
        let cluster = key.scope.cluster.as_str();
        entry(&mut tenancies, cluster, &key.scope.namespace).chart_messages.push(ChartMessage {
            release_name: key.release.clone(),
            phase: phase::ORPHANED.into(),
            error_message: format!(
                "cluster {cluster} is no longer registered; release {key} is left in place, not uninstalled (register the cluster again to manage it)"
            ),
            ..Default::default()
        });
    }
    report.tenancies = tenancies.into_values().collect();
}

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

/// One cluster judged by the `Ready` rule, for the rollout gate.
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
    let synced = report.synced.iter().any(|c| c.as_str() == cluster);
    let mut out = ClusterReadiness {
        ready: true,
        deployed: true,
        ..ClusterReadiness::default()
    };
    for t in report.tenancies.iter().filter(|t| t.cluster == cluster) {
        let mut t = t.clone();
        // A change held back by `suspend` is not this rollout's to wait for: changing `suspend`
        // is a new generation, and so a new rollout, once it is let through.
        t.chart_messages
            .retain(|m| is_managed(&m.phase) && m.phase != phase::SUSPENDED);
        if t.chart_messages.is_empty() {
            continue;
        }
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

/// Phases of releases tenancy-hub manages and watches (not refused, held elsewhere or orphaned).
fn is_managed(phase: &str) -> bool {
    [
        phase::DEPLOYED,
        phase::PENDING,
        phase::FAILED,
        phase::UNKNOWN,
        phase::SUSPENDED,
    ]
    .contains(&phase)
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

/// Whether an entry shows nothing left to do: every release deployed, watched live, every
/// workload rolled out and every pod ready.
fn entry_ready(t: &TenancyStatus) -> bool {
    t.chart_messages.iter().all(|m| m.phase == phase::DEPLOYED)
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
        for t in &mut status.updated_tenancies {
            t.chart_messages.retain(|m| m.phase != phase::DEPLOYED);
            for m in &mut t.chart_messages {
                m.setting_map.clear();
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

fn entry<'a>(
    tenancies: &'a mut BTreeMap<(String, String), TenancyStatus>,
    cluster: &str,
    namespace: &str,
) -> &'a mut TenancyStatus {
    tenancies
        .entry((cluster.to_owned(), namespace.to_owned()))
        .or_insert_with(|| TenancyStatus {
            cluster: cluster.to_owned(),
            namespace: namespace.to_owned(),
            ..Default::default()
        })
}

fn ratio(ready: usize, total: usize) -> String {
    format!("{ready}/{total}")
}

fn counts<'a>(entries: impl Iterator<Item = &'a TenancyStatus>) -> (usize, usize, i32, i32) {
    let (mut deployed, mut releases, mut pods_ready, mut pods) = (0, 0, 0, 0);
    for t in entries {
        releases += t
            .chart_messages
            .iter()
            .filter(|m| !m.release_name.is_empty())
            .count();
        deployed += t
            .chart_messages
            .iter()
            .filter(|m| m.phase == phase::DEPLOYED)
            .count();
        pods += t.pods_total;
        pods_ready += t.pods_ready;
    }
    (deployed, releases, pods_ready, pods)
}

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

/// When a condition was last computed, to keep transition times while it holds.
struct Clock<'a> {
    previous: &'a [Condition],
    now: Timestamp,
    generation: Option<i64>,
}

fn condition(type_: &str, ok: bool, reason: &str, message: String, clock: &Clock<'_>) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = clock
        .previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(clock.now));
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: clock.generation,
    }
}

/// Names a few items and counts the rest: "a, b, c and 4 more".
fn some(items: &[String]) -> String {
    crate::plan::limits::few(items, items.len())
}

/// The first of `problems` and how many more, so a condition stays short whatever the spec.
fn first_of(problems: &[String]) -> String {
    match problems {
        [] => String::new(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// What the conditions are made of, the inputs of their rules: everything that stands between
/// the spec and "it runs".
#[derive(Default)]
struct ConditionInputs<'a> {
    generation: Option<i64>,
    deleting: Option<&'a str>,
    suspended: Option<&'a str>,
    /// Why the rollout halted, while it is halted.
    halted: Option<&'a crate::api::crd::RolloutHalt>,
    general: &'a [String],
    /// Releases (`cluster/namespace/release`) by phase.
    phases: BTreeMap<&'a str, Vec<String>>,
    /// First message of a failed, refused or conflicting release.
    first_error: Option<String>,
    /// Entries with releases to watch that are not watched live.
    stale: Vec<String>,
    /// Workloads not rolled out, as `cluster/namespace Kind/name`.
    rolling: Vec<String>,
    /// Pods not ready, as `cluster/namespace/pod`, and how many.
    pods_not_ready: i32,
    /// Pods that are failing (a waiting or terminated reason such as CrashLoopBackOff).
    failing_pods: Vec<String>,
    /// Releases whose live objects differ from their manifest, as `cluster/namespace/release`.
    drifted: Vec<String>,
}

impl<'a> ConditionInputs<'a> {
    fn of(tenancies: &'a [TenancyStatus], report: &'a ReleaseReport) -> Self {
        let mut f = ConditionInputs {
            generation: report.generation,
            deleting: report.deleting.as_deref(),
            suspended: report.suspended.as_deref(),
            halted: report.rollout.as_ref().and_then(|r| r.halted.as_ref()),
            general: &report.general,
            phases: BTreeMap::new(),
            first_error: None,
            stale: Vec::new(),
            rolling: Vec::new(),
            pods_not_ready: 0,
            failing_pods: Vec::new(),
            drifted: Vec::new(),
        };
        for t in tenancies {
            let here = format!("{}/{}", t.cluster, t.namespace);
            for m in &t.chart_messages {
                f.phases
                    .entry(m.phase.as_str())
                    .or_default()
                    .push(format!("{here}/{}", m.release_name));
                let bad = [
                    phase::FAILED,
                    phase::INVALID,
                    phase::FORBIDDEN,
                    phase::CONFLICT,
                ]
                .contains(&m.phase.as_str());
                if bad && f.first_error.is_none() {
                    f.first_error = Some(format!("{here}/{}: {}", m.release_name, m.error_message));
                }
                if m.drift.is_some() {
                    f.drifted.push(format!("{here}/{}", m.release_name));
                }
            }
            if !t.chart_messages.iter().any(|m| is_managed(&m.phase)) {
                continue;
            }
            if !t.fresh {
                f.stale.push(here.clone());
                continue;
            }
            f.rolling.extend(
                t.replication_controller_status
                    .iter()
                    .filter(|w| !w.rolled_out)
                    .map(|w| {
                        format!(
                            "{here} {}/{} ({} ready)",
                            w.kind, w.replication_controller_name, w.ready
                        )
                    }),
            );
            f.pods_not_ready += t.pods_total - t.pods_ready;
            f.failing_pods.extend(
                t.pod_status
                    .iter()
                    .filter(|p| !p.ready && !p.reason.is_empty() && p.phase != "Succeeded")
                    .map(|p| format!("{here}/{} ({})", p.pod_name, p.reason)),
            );
        }
        f
    }

    fn list(&self, phase: &str) -> &[String] {
        self.phases.get(phase).map_or(&[], Vec::as_slice)
    }

    /// Whether any release is in `phase`.
    fn has(&self, phase: &str) -> bool {
        !self.list(phase).is_empty()
    }
}

/// One rule of a condition: when it `holds` over the inputs, the condition takes its `reason`
/// and the `message` it writes. A condition's rules are ordered; the first that holds decides.
struct Rule {
    reason: &'static str,
    holds: fn(&ConditionInputs<'_>) -> bool,
    message: fn(&ConditionInputs<'_>) -> String,
}

/// The reason and message a rule gave a condition.
type Verdict = (&'static str, String);

/// The verdict of the first of `rules` that holds, if one does.
fn decide(rules: &[Rule], f: &ConditionInputs<'_>) -> Option<Verdict> {
    rules
        .iter()
        .find(|rule| (rule.holds)(f))
        .map(|rule| (rule.reason, (rule.message)(f)))
}

/// Why the resource cannot go on without a change (`Stalled`).
const STALLED: &[Rule] = &[
    Rule {
        reason: "RolloutHalted",
        holds: |f| f.halted.is_some(),
        message: |f| {
            f.halted
                .map(crate::plan::rollout::halt_message)
                .unwrap_or_default()
        },
    },
    Rule {
        reason: "InvalidSpec",
        holds: |f| f.has(phase::INVALID) || !f.general.is_empty(),
        message: |f| {
            let invalid = f.list(phase::INVALID);
            format!(
                "{} part(s) of the spec cannot be carried out ({}); what runs is left as it is. {}",
                invalid.len() + f.general.len(),
                some(invalid),
                first_of(f.general)
            )
            .trim_end()
            .to_owned()
        },
    },
    Rule {
        reason: "Forbidden",
        holds: |f| f.has(phase::FORBIDDEN),
        message: |f| {
            format!(
                "release(s) {} are not allowed by the tenancy policies; nothing is done for them and what runs is left as it is",
                some(f.list(phase::FORBIDDEN))
            )
        },
    },
    Rule {
        reason: "Conflict",
        holds: |f| f.has(phase::CONFLICT),
        message: |f| {
            format!(
                "release(s) {} are held by another owner",
                some(f.list(phase::CONFLICT))
            )
        },
    },
    Rule {
        reason: "ReleaseFailed",
        holds: |f| f.has(phase::FAILED),
        message: |f| {
            format!(
                "release(s) {} failed and wait for a spec change",
                some(f.list(phase::FAILED))
            )
        },
    },
];

/// What the resource waits for (`Reconciling`).
const RECONCILING: &[Rule] = &[
    Rule {
        reason: "Terminating",
        holds: |f| f.deleting.is_some(),
        message: |f| f.deleting.unwrap_or_default().to_owned(),
    },
    Rule {
        reason: "Progressing",
        holds: |f| f.has(phase::PENDING),
        message: |f| {
            format!(
                "waiting for release(s) {} to be installed, upgraded or uninstalled",
                some(f.list(phase::PENDING))
            )
        },
    },
    Rule {
        reason: "ClusterUnavailable",
        holds: |f| f.has(phase::UNKNOWN),
        message: |f| {
            format!(
                "waiting for the clusters of release(s) {} to be reached",
                some(f.list(phase::UNKNOWN))
            )
        },
    },
    Rule {
        reason: "ClusterUnavailable",
        holds: |f| !f.stale.is_empty(),
        message: |f| {
            format!(
                "waiting for {} to be watched live; their pods are Unknown",
                some(&f.stale)
            )
        },
    },
    Rule {
        reason: "WorkloadsRollingOut",
        holds: |f| !f.rolling.is_empty(),
        message: |f| format!("waiting for workload(s) {} to roll out", some(&f.rolling)),
    },
    Rule {
        reason: "PodsNotReady",
        holds: |f| f.pods_not_ready > 0,
        message: |f| format!("waiting for {} pod(s) to be ready", f.pods_not_ready),
    },
];

/// What has failed while nothing stalls (`Degraded`); a stalled resource is degraded by what
/// stalls it.
const DEGRADED: &[Rule] = &[
    Rule {
        reason: "PodsFailing",
        holds: |f| !f.failing_pods.is_empty(),
        message: |f| format!("pod(s) {} are failing", some(&f.failing_pods)),
    },
    Rule {
        reason: "Orphaned",
        holds: |f| f.has(phase::ORPHANED),
        message: |f| {
            format!(
                "{} release(s) are left in clusters no longer registered",
                f.list(phase::ORPHANED).len()
            )
        },
    },
];

/// Why the resource is not ready although nothing stalls it and it waits for nothing (`Ready`).
const NOT_READY: &[Rule] = &[
    Rule {
        reason: "Suspended",
        holds: |f| f.has(phase::SUSPENDED),
        message: held_back,
    },
    // Drift keeps Ready False (what runs is not what was asked for) without being stalled,
    // reconciling or degraded: in mode warn nothing changes it, in mode enabled a repair does.
    Rule {
        reason: "Drifted",
        holds: |f| !f.drifted.is_empty(),
        message: |f| {
            format!(
                "release(s) {} differ from their manifests (see chartMessages[].drift)",
                some(&f.drifted)
            )
        },
    },
];

/// What `suspend` holds back, while it is set (`Suspended`).
const SUSPENDED: &[Rule] = &[
    Rule {
        reason: "Suspended",
        holds: |f| f.suspended.is_some() && !f.has(phase::SUSPENDED),
        message: |f| {
            format!(
                "{}; no change is held back",
                f.suspended.unwrap_or_default()
            )
        },
    },
    Rule {
        reason: "Suspended",
        holds: |f| f.suspended.is_some(),
        message: held_back,
    },
];

/// Why the resource is suspended and the changes that holds back.
fn held_back(f: &ConditionInputs<'_>) -> String {
    let held = f.list(phase::SUSPENDED);
    format!(
        "{}; {} change(s) held back until resumed: {}",
        f.suspended.unwrap_or("suspended"),
        held.len(),
        some(held)
    )
}

/// kstatus-compatible conditions: `Ready` (True only when every release is deployed from this
/// generation and its workloads and pods are ready), `Reconciling` (what it waits for),
/// `Stalled` (what cannot go on without a change), `Degraded` (something that ran has failed)
/// and `Suspended` (what `suspend` holds back), each decided by its rules.
fn conditions(f: &ConditionInputs<'_>, previous: &[Condition], now: Timestamp) -> Vec<Condition> {
    let clock = Clock {
        previous,
        now,
        generation: f.generation,
    };
    let stalled = decide(STALLED, f);
    let reconciling = decide(RECONCILING, f);
    let degraded = match &stalled {
        Some((reason, message)) => Some((
            *reason,
            f.first_error.clone().unwrap_or_else(|| message.clone()),
        )),
        None => decide(DEGRADED, f),
    };
    // While the resource is deleted, what the deletion waits for comes before what stalls.
    let not_ready = match f.deleting {
        Some(_) => reconciling.clone(),
        None => stalled.clone().or_else(|| reconciling.clone()),
    }
    .or_else(|| decide(NOT_READY, f));
    let waiting = reconciling.is_some() && (stalled.is_none() || f.deleting.is_some());
    let deployed = f.list(phase::DEPLOYED).len();
    let suspended = decide(SUSPENDED, f);
    vec![
        decided(
            "Ready",
            not_ready.is_none(),
            not_ready,
            (
                "Ready",
                format!("{deployed} release(s) deployed and their workloads ready"),
            ),
            &clock,
        ),
        decided(
            "Reconciling",
            waiting,
            reconciling,
            ("Reconciled", "nothing to wait for".into()),
            &clock,
        ),
        decided(
            "Stalled",
            stalled.is_some(),
            stalled,
            ("AsExpected", "nothing is stalled".into()),
            &clock,
        ),
        decided(
            "Degraded",
            degraded.is_some(),
            degraded,
            ("AsExpected", "no release or pod has failed".into()),
            &clock,
        ),
        decided(
            "Suspended",
            suspended.is_some(),
            suspended,
            (
                "NotSuspended",
                "Helm calls are made as the spec asks".into(),
            ),
            &clock,
        ),
    ]
}

/// A condition with the reason and message of its `verdict`, or of `otherwise` when no rule
/// decided it.
fn decided(
    type_: &str,
    ok: bool,
    verdict: Option<Verdict>,
    otherwise: (&str, String),
    clock: &Clock<'_>,
) -> Condition {
    let (reason, message) = verdict.unwrap_or(otherwise);
    condition(type_, ok, reason, message, clock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ChartSource, OwnerId};

    fn release(key: &str) -> Release {
        Release {
            key: key.parse().unwrap(),
            owner: OwnerId {
                namespace: "default".into(),
                name: "x".into(),
            },
            chart_name: "deployment-example".into(),
            source: ChartSource::Directory("/c/deployment-example".into()),
            version: None,
            chart_digest: None,
            settings: vec![("replicaCount".into(), "2".into())],
            values: None,
            rollback_on_failure: false,
            spec_hash: "h1".into(),
            identity: None,
            drift: Default::default(),
        }
    }

    fn deployed(key: &str, revision: i64) -> (ReleaseKey, Applied) {
        let key: ReleaseKey = key.parse().unwrap();
        (
            key.clone(),
            Applied {
                key,
                owner: None,
                spec_hash: Some("h1".into()),
                revision,
                status: "deployed".into(),
                modified_at: None,
            },
        )
    }

    struct Fixture {
        plan: Plan,
        applied: HashMap<ReleaseKey, Applied>,
        outcomes: HashMap<ReleaseKey, LastOutcome>,
        busy: BTreeSet<ReleaseKey>,
        synced: BTreeSet<ClusterName>,
        drift: HashMap<ReleaseKey, DriftStatus>,
    }

    impl Fixture {
        fn new(keys: &[&str]) -> Self {
            Self {
                plan: Plan {
                    desired: keys.iter().map(|k| release(k)).collect(),
                    ..Default::default()
                },
                applied: HashMap::new(),
                outcomes: HashMap::new(),
                busy: BTreeSet::new(),
                synced: ["hub", "member-1", "member-2"]
                    .iter()
                    .map(|c| c.parse().unwrap())
                    .collect(),
                drift: HashMap::new(),
            }
        }

        fn report(&self) -> ReleaseReport {
            releases(&ReleaseView {
                plan: &self.plan,
                applied: &self.applied,
                outcomes: &self.outcomes,
                busy: &self.busy,
                synced: &self.synced,
                generation: Some(4),
                drift: &self.drift,
            })
        }

        /// The status with every watched namespace live and empty.
        fn build(&self) -> ControllerStatus {
            let live = ScopeState {
                live: true,
                ..Default::default()
            };
            assemble(
                &self.report(),
                &|_, _| Some(live.clone()),
                &|_| true,
                &[],
                Timestamp::UNIX_EPOCH,
            )
        }
    }

    fn ready(status: &ControllerStatus) -> (&str, &str) {
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn deployed_releases_make_the_resource_ready_with_one_entry_per_cluster_namespace() {
        let mut f = Fixture::new(&["member-1/team/web", "member-2/team/web", "member-1/team/db"]);
        f.applied.extend([
            deployed("member-1/team/web", 2),
            deployed("member-2/team/web", 1),
            deployed("member-1/team/db", 1),
        ]);
        let s = f.build();
        assert_eq!(ready(&s), ("True", "Ready"));
        assert_eq!(s.updated_tenancies.len(), 2);
        assert_eq!(s.updated_tenancies[0].cluster, "member-1");
        assert_eq!(s.updated_tenancies[0].chart_messages.len(), 2);
        assert_eq!(s.summary.as_ref().unwrap().releases, "3/3");
        assert_eq!(s.summary.as_ref().unwrap().clusters, "2/2");
        assert_eq!(s.observed_generation, Some(4));
        let web = &s.updated_tenancies[0].chart_messages[0];
        assert_eq!((web.phase.as_str(), web.revision), ("Deployed", Some(2)));
        assert_eq!(web.setting_map["replicaCount"], "2");
    }

    #[test]
    fn a_drifted_release_stays_deployed_shows_its_drift_and_keeps_ready_false() {
        let mut f = Fixture::new(&["member-1/team/web", "member-1/team/db"]);
        f.applied.extend([
            deployed("member-1/team/web", 2),
            deployed("member-1/team/db", 1),
        ]);
        let drift = DriftStatus {
            revision: 2,
            action: "Reported".into(),
            ..Default::default()
        };
        f.drift
            .insert("member-1/team/web".parse().unwrap(), drift.clone());
        let s = f.build();
        assert_eq!(ready(&s), ("False", "Drifted"));
        let messages = &s.updated_tenancies[0].chart_messages;
        let web = messages.iter().find(|m| m.release_name == "web").unwrap();
        assert_eq!(
            (web.phase.as_str(), web.drift.as_ref()),
            ("Deployed", Some(&drift))
        );
        let db = messages.iter().find(|m| m.release_name == "db").unwrap();
        assert_eq!(db.drift, None);
        let stalled = s.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
        assert_eq!(stalled.status, "False");
        assert_eq!(s.summary.as_ref().unwrap().releases, "2/2");
    }

    #[test]
    fn a_failed_release_is_reported_on_itself_while_the_others_stay_deployed() {
        let mut f = Fixture::new(&["hub/foo/foo", "hub/foo/nginx"]);
        f.applied.extend([deployed("hub/foo/foo", 1)]);
        f.outcomes.insert(
            "hub/foo/nginx".parse().unwrap(),
            LastOutcome {
                fingerprint: "apply:h1".into(),
                outcome: Outcome::Failed {
                    kind: crate::queue::FailureKind::Permanent,
                    message: "template: boom".into(),
                },
                owner: release("hub/foo/nginx").owner,
                settled: true,
            },
        );
        let s = f.build();
        let msgs = &s.updated_tenancies[0].chart_messages;
        assert_eq!(msgs[0].phase, "Deployed");
        assert_eq!(
            (msgs[1].phase.as_str(), msgs[1].error_message.as_str()),
            ("Failed", "template: boom")
        );
        assert_eq!(ready(&s), ("False", "ReleaseFailed"));
        let degraded = s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!(degraded.status, "True");
    }

    fn condition_of<'a>(status: &'a ControllerStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn a_suspended_resource_shows_the_changes_it_holds_back_and_is_not_ready() {
        let mut f = Fixture::new(&["hub/foo/foo"]);
        f.applied
            .extend([deployed("hub/foo/foo", 1), deployed("hub/foo/gone", 3)]);
        f.plan.suspended = vec![
            "hub/foo/foo".parse().unwrap(),
            "hub/foo/gone".parse().unwrap(),
        ];
        f.plan.suspension = Some("spec.suspend is true".into());
        let s = f.build();
        let msgs = &s.updated_tenancies[0].chart_messages;
        assert_eq!(
            (msgs[0].phase.as_str(), msgs[0].revision),
            ("Suspended", Some(1))
        );
        assert_eq!(
            (msgs[1].release_name.as_str(), msgs[1].phase.as_str()),
            ("gone", "Suspended")
        );
        assert!(msgs[1].error_message.contains("uninstalled once resumed"));
        assert_eq!(ready(&s), ("False", "Suspended"));
        let c = condition_of(&s, "Suspended");
        assert_eq!(c.status, "True");
        assert!(
            c.message
                .contains("2 change(s) held back until resumed: hub/foo/foo"),
            "{}",
            c.message
        );
        assert_eq!(condition_of(&s, "Reconciling").status, "False");
    }

    #[test]
    fn a_suspended_resource_with_nothing_held_back_stays_ready() {
        let mut f = Fixture::new(&["hub/foo/foo"]);
        f.applied.extend([deployed("hub/foo/foo", 1)]);
        f.plan.suspension = Some("spec.suspend is true".into());
        let s = f.build();
        assert_eq!(ready(&s), ("True", "Ready"));
        assert_eq!(condition_of(&s, "Suspended").status, "True");
        f.plan.suspension = None;
        assert_eq!(condition_of(&f.build(), "Suspended").reason, "NotSuspended");
    }

    #[test]
    fn a_release_with_a_job_in_the_queue_is_pending() {
        let mut f = Fixture::new(&["hub/foo/foo"]);
        f.busy.insert("hub/foo/foo".parse().unwrap());
        let s = f.build();
        assert_eq!(s.updated_tenancies[0].chart_messages[0].phase, "Pending");
        assert_eq!(ready(&s), ("False", "Progressing"));
    }

    #[test]
    fn an_unknown_cluster_gets_its_own_entry_naming_the_problem() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.applied.extend([deployed("member-1/team/web", 1)]);
        f.plan.problems.push(Problem::UnknownCluster {
            namespace: "team".into(),
            cluster: "member-9".into(),
            known: "hub, member-1".into(),
        });
        let s = f.build();
        let bad = s
            .updated_tenancies
            .iter()
            .find(|t| t.cluster == "member-9")
            .unwrap();
        assert!(
            bad.chart_messages[0]
                .error_message
                .contains("not registered")
        );
        assert!(!bad.fresh);
        let good = s
            .updated_tenancies
            .iter()
            .find(|t| t.cluster == "member-1")
            .unwrap();
        assert_eq!(good.chart_messages[0].phase, "Deployed");
        assert_eq!(ready(&s), ("False", "InvalidSpec"));
    }

    #[test]
    fn a_hostile_plan_makes_a_status_and_conditions_within_their_bounds() {
        // 20,000 releases, all suspended, 1,000 tenancies selecting nothing, 16 keys asked
        // for 400 times each: the status stays within its budget and every condition short.
        let keys: Vec<String> = (0..20_000)
            .map(|i| format!("member-1/t{}/r{}", i % 1000, i / 1000))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut f = Fixture::new(&keys);
        f.plan.suspended = f.plan.desired.iter().map(|r| r.key.clone()).collect();
        f.plan.suspension = Some("spec.suspend is true".into());
        f.plan
            .problems
            .extend((0..1000).map(|i| Problem::NoClusterSelected {
                namespace: format!("t{i}"),
            }));
        f.plan.problems.extend((0..16).map(|i| Problem::Duplicate {
            key: format!("hub/foo/r{i}").parse().unwrap(),
            chart: "web".into(),
            entries: vec!["tenancies[0] chart web".into(); 3],
            count: 400,
        }));
        let started = std::time::Instant::now();
        let s = f.build();
        assert!(serde_json::to_vec(&s).unwrap().len() <= STATUS_BUDGET);
        for c in &s.conditions {
            assert!(
                c.message.len() <= 2048,
                "{}: {} bytes",
                c.type_,
                c.message.len()
            );
        }
        assert!(
            condition_of(&s, "Stalled")
                .message
                .contains("(and 999 more)")
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn releases_on_clusters_not_reached_yet_are_unknown_not_deployed() {
        let mut f = Fixture::new(&["member-2/team/web"]);
        f.synced.clear();
        let s = f.build();
        assert_eq!(s.updated_tenancies[0].chart_messages[0].phase, "Unknown");
        assert!(!s.clusters[0].reachable);
    }

    #[test]
    fn transition_times_are_kept_while_a_condition_holds() {
        let mut f = Fixture::new(&["hub/foo/foo"]);
        f.applied.extend([deployed("hub/foo/foo", 1)]);
        let earlier = Time(Timestamp::from_second(1_000).unwrap());
        let previous = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "AllReleasesDeployed".into(),
            message: String::new(),
            last_transition_time: earlier.clone(),
            observed_generation: Some(3),
        }];
        let live = ScopeState {
            live: true,
            ..Default::default()
        };
        let now = Timestamp::from_second(9_000).unwrap();
        let s = assemble(
            &f.report(),
            &|_, _| Some(live.clone()),
            &|_| true,
            &previous,
            now,
        );
        assert_eq!(s.conditions[0].last_transition_time, earlier);
        assert_eq!(s.conditions[1].last_transition_time.0.as_second(), 9_000);
    }

    fn running_scope(pods: usize, ready: usize) -> ScopeState {
        use crate::observe::model::{WorkloadInfo, WorkloadKind, WorkloadRef};
        let web = WorkloadRef {
            kind: WorkloadKind::Deployment,
            name: "web".into(),
        };
        let mut s = ScopeState {
            live: true,
            last_seen: Some(Timestamp::from_second(100).unwrap()),
            ..Default::default()
        };
        s.workloads.insert(
            web.clone(),
            WorkloadInfo {
                id: web.clone(),
                release: Some("web".into()),
                ready: ready as i32,
                desired: pods as i32,
                rolled_out: ready == pods,
            },
        );
        for i in 0..pods {
            let name = format!("web-{i:04}");
            s.pods.insert(
                name.clone(),
                PodInfo {
                    name,
                    phase: "Running".into(),
                    ready: i < ready,
                    restarts: 0,
                    reason: String::new(),
                    owner: Some(web.clone()),
                },
            );
        }
        s
    }

    #[test]
    fn a_cluster_is_ready_for_the_rollout_by_the_ready_rule_on_its_own_releases_only() {
        let mut f = Fixture::new(&["member-1/team/web", "member-2/team/web"]);
        f.applied.extend([
            deployed("member-1/team/web", 1),
            deployed("member-2/team/web", 1),
        ]);
        f.plan.problems.push(Problem::Forbidden {
            key: "member-1/other/db".parse().unwrap(),
            chart: "db".into(),
            rule: "not allowed".into(),
        });
        let ready_scope = running_scope(2, 2);
        let slow_scope = running_scope(2, 1);
        let report = f.report();
        let one = cluster_readiness(&report, "member-1", &|_, _| Some(ready_scope.clone()));
        assert!(
            one.ready && one.deployed,
            "a refused release is not waited for"
        );
        let two = cluster_readiness(&report, "member-2", &|_, _| Some(slow_scope.clone()));
        assert!(two.deployed && !two.ready);
        assert_eq!(
            two.waiting,
            Some((
                "web".into(),
                "Deployment team/web not rolled out (1/2 ready)".into()
            ))
        );
        let gone = cluster_readiness(&report, "member-2", &|_, _| None);
        assert!(!gone.ready);
        assert!(gone.waiting.unwrap().1.contains("not watched live"));
    }

    #[test]
    fn a_suspended_release_is_not_waited_for_by_the_rollout() {
        let mut f = Fixture::new(&["member-1/team/web", "member-1/other/db"]);
        f.applied.extend([deployed("member-1/team/web", 1)]);
        f.plan.suspended = vec!["member-1/other/db".parse().unwrap()];
        let judged = cluster_readiness(&f.report(), "member-1", &|_, _| Some(running_scope(1, 1)));
        assert!(judged.ready && judged.deployed, "{judged:?}");
    }

    #[test]
    fn a_failed_release_makes_its_cluster_failed_for_the_rollout() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.outcomes.insert(
            "member-1/team/web".parse().unwrap(),
            LastOutcome {
                fingerprint: "apply:h1".into(),
                outcome: Outcome::failed("template: boom", crate::queue::FailureKind::Permanent),
                owner: crate::plan::OwnerId {
                    namespace: "default".into(),
                    name: "example".into(),
                },
                settled: true,
            },
        );
        let judged = cluster_readiness(&f.report(), "member-1", &|_, _| Some(running_scope(0, 0)));
        assert_eq!(judged.failed, Some(("web".into(), "template: boom".into())));
        assert!(!judged.ready);
    }

    #[test]
    fn the_report_brought_past_the_gate_equals_one_built_from_the_gated_plan() {
        let mut f = Fixture::new(&[
            "member-1/team/web",
            "member-1/team/api",
            "member-2/team/web",
        ]);
        f.applied.extend([
            deployed("member-2/team/web", 3),
            deployed("member-2/team/old", 2),
        ]);
        f.outcomes.insert(
            "member-1/team/api".parse().unwrap(),
            LastOutcome {
                fingerprint: "apply:h1".into(),
                outcome: Outcome::failed("timed out", crate::queue::FailureKind::Transient),
                owner: OwnerId {
                    namespace: "default".into(),
                    name: "x".into(),
                },
                settled: false,
            },
        );
        f.plan.problems.push(Problem::Conflict {
            key: "member-2/team/taken".parse().unwrap(),
            holder: "default/other".into(),
        });
        let before = f.report();

        // The gate holds member-2 back (its upgrade and an uninstall), the retry of api is queued.
        f.plan.rollout_held = vec![
            "member-2/team/web".parse().unwrap(),
            "member-2/team/old".parse().unwrap(),
            "member-3/team/gone".parse().unwrap(),
        ];
        f.plan.rollout_note = Some("waiting for rollout wave 2/2".into());
        let queued_before = std::mem::replace(
            &mut f.busy,
            BTreeSet::from(["member-1/team/api".parse().unwrap()]),
        );
        let view = ReleaseView {
            plan: &f.plan,
            applied: &f.applied,
            outcomes: &f.outcomes,
            busy: &f.busy,
            synced: &f.synced,
            generation: Some(4),
            drift: &f.drift,
        };

        assert_ne!(before, f.report(), "the gate changed what the report says");
        assert_eq!(after_gate(before, &view, &queued_before), f.report());
    }

    #[test]
    fn releases_held_by_the_rollout_are_pending_and_say_which_wave_they_wait_for() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.plan.rollout_held = vec!["member-1/team/web".parse().unwrap()];
        f.plan.rollout_note = Some("waiting for rollout wave 1/2".into());
        let s = f.build();
        let m = &s.updated_tenancies[0].chart_messages[0];
        assert_eq!(m.phase, phase::PENDING);
        assert_eq!(m.error_message, "waiting for rollout wave 1/2");
    }

    #[test]
    fn a_halted_rollout_stalls_the_resource_naming_cluster_release_and_reason() {
        let f = Fixture::new(&[]);
        let mut report = f.report();
        report.rollout = Some(crate::api::crd::RolloutStatus {
            halted: Some(crate::api::crd::RolloutHalt {
                cluster: "member-1".into(),
                release: "web".into(),
                reason: "release failed: boom".into(),
                at: "2026-01-01T00:00:00Z".into(),
            }),
            ..Default::default()
        });
        let s = assemble(&report, &|_, _| None, &|_| true, &[], Timestamp::UNIX_EPOCH);
        let stalled = condition_of(&s, "Stalled");
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", "RolloutHalted")
        );
        assert!(
            stalled
                .message
                .contains("cluster member-1 release web: release failed: boom")
        );
        assert_eq!(condition_of(&s, "Ready").status, "False");
        assert!(s.rollout.is_some());
    }

    #[test]
    fn a_rollout_over_a_huge_fleet_lists_only_its_clusters_not_yet_healthy_when_cut() {
        use crate::api::crd::{RolloutCluster, RolloutStatus};
        let cluster = |i: usize, state: &str| RolloutCluster {
            name: format!("cluster-{i:05}"),
            wave: 1,
            state: state.into(),
            started_at: Some("2026-01-01T00:00:00.000Z".into()),
            healthy_at: Some("2026-01-01T00:00:01.000Z".into()),
        };
        let mut status = ControllerStatus {
            rollout: Some(RolloutStatus {
                healthy: 3000,
                clusters: (0..3000)
                    .map(|i| cluster(i, "Healthy"))
                    .chain([cluster(3000, "Progressing")])
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        bound(&mut status, STATUS_BUDGET);
        let r = status.rollout.unwrap();
        assert_eq!(r.clusters.len(), 1);
        assert_eq!(r.clusters[0].state, "Progressing");
        assert_eq!(r.healthy, 3000, "counts stay");
    }

    #[test]
    fn pods_and_workloads_join_their_release_entry() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.applied.extend([deployed("member-1/team/web", 1)]);
        let scope = running_scope(3, 2);
        let s = assemble(
            &f.report(),
            &|_, _| Some(scope.clone()),
            &|_| true,
            &[],
            Timestamp::UNIX_EPOCH,
        );
        let t = &s.updated_tenancies[0];
        assert_eq!((t.pods_total, t.pods_ready), (3, 2));
        assert_eq!(t.replication_controller_status[0].ready, "2/3");
        assert_eq!(t.replication_controller_status[0].kind, "Deployment");
        assert_eq!(
            t.pod_status[0].pod_name, "web-0002",
            "pods that are not ready come first"
        );
        assert_eq!(s.summary.as_ref().unwrap().pods, "2/3");
        assert!(t.fresh);
    }

    #[test]
    fn a_namespace_whose_watch_is_lost_shows_unknown_pods_with_the_time_last_seen() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.applied.extend([deployed("member-1/team/web", 1)]);
        let mut scope = running_scope(2, 2);
        scope.live = false;
        let s = assemble(
            &f.report(),
            &|_, _| Some(scope.clone()),
            &|_| false,
            &[],
            Timestamp::UNIX_EPOCH,
        );
        let t = &s.updated_tenancies[0];
        assert!(!t.fresh);
        assert_eq!(t.last_seen.as_deref(), Some("1970-01-01T00:01:40Z"));
        assert!(
            t.pod_status
                .iter()
                .all(|p| p.phase == "Unknown" && !p.ready)
        );
        assert_eq!(t.replication_controller_status[0].ready, "?/2");
        assert!(!s.clusters[0].reachable);
        assert_eq!(ready(&s), ("False", "ClusterUnavailable"));
    }

    #[test]
    fn many_pods_list_only_up_to_the_limit_and_keep_their_counts() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.applied.extend([deployed("member-1/team/web", 1)]);
        let scope = running_scope(500, 480);
        let s = assemble(
            &f.report(),
            &|_, _| Some(scope.clone()),
            &|_| true,
            &[],
            Timestamp::UNIX_EPOCH,
        );
        let t = &s.updated_tenancies[0];
        assert_eq!((t.pods_total, t.pods_ready), (500, 480));
        assert_eq!(t.pod_status.len(), POD_LIST_LIMIT);
        assert!(t.pod_status[..20].iter().all(|p| !p.ready));
    }

    #[test]
    fn any_fleet_fits_the_status_budget() {
        let keys: Vec<String> = (0..3000)
            .map(|i| format!("member-{}/ns-{i}/release-{i}", i % 20))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut f = Fixture::new(&keys);
        f.synced = (0..20)
            .map(|i| format!("member-{i}").parse().unwrap())
            .collect();
        let scope = running_scope(60, 30);
        let s = assemble(
            &f.report(),
            &|_, _| Some(scope.clone()),
            &|_| true,
            &[],
            Timestamp::UNIX_EPOCH,
        );
        let size = serde_json::to_vec(&s).unwrap().len();
        assert!(size <= STATUS_BUDGET, "{size} bytes");
        assert_eq!(s.summary.as_ref().unwrap().releases, "0/3000");
    }

    #[test]
    fn when_entries_must_be_cut_ready_ones_go_first_and_a_failure_on_the_last_cluster_stays() {
        let keys: Vec<String> = (0..3000)
            .map(|i| format!("member-{:02}/ns-{i:04}/release-{i}", i % 20))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut f = Fixture::new(&keys);
        f.synced = (0..20)
            .map(|i| format!("member-{i:02}").parse().unwrap())
            .collect();
        for k in &keys {
            f.applied.extend([deployed(k, 1)]);
        }
        let last: ReleaseKey = keys[keys.len() - 1].parse().unwrap();
        f.applied.remove(&last);
        f.outcomes.insert(
            last.clone(),
            LastOutcome {
                fingerprint: "apply:h1".into(),
                outcome: Outcome::failed("boom", crate::queue::FailureKind::Permanent),
                owner: release(keys[0]).owner,
                settled: true,
            },
        );
        let mut scope = running_scope(60, 60);
        scope.workloads.clear();
        let s = assemble(
            &f.report(),
            &|_, _| Some(scope.clone()),
            &|_| true,
            &[],
            Timestamp::UNIX_EPOCH,
        );
        assert!(serde_json::to_vec(&s).unwrap().len() <= STATUS_BUDGET);
        assert!(s.updated_tenancies.len() < 3000, "entries were cut");
        let failing = s
            .updated_tenancies
            .iter()
            .find(|t| {
                t.cluster == last.scope.cluster.as_str() && t.namespace == last.scope.namespace
            })
            .expect("the failing entry is kept");
        assert_eq!(failing.chart_messages[0].phase, phase::FAILED);
        assert_eq!(s.summary.as_ref().unwrap().releases, "2999/3000");
    }

    #[test]
    fn orphaned_releases_are_listed_on_their_entry_and_degrade_the_resource() {
        let mut f = Fixture::new(&["member-1/team/web"]);
        f.applied.extend([deployed("member-1/team/web", 1)]);
        let mut report = f.report();
        let orphan: ReleaseKey = "gone/team/web".parse().unwrap();
        add_orphans(&mut report, [&orphan]);
        let live = ScopeState {
            live: true,
            ..Default::default()
        };
        let s = assemble(
            &report,
            &|_, _| Some(live.clone()),
            &|_| true,
            &[],
            Timestamp::UNIX_EPOCH,
        );
        let gone = s
            .updated_tenancies
            .iter()
            .find(|t| t.cluster == "gone")
            .unwrap();
        assert_eq!(gone.chart_messages[0].phase, "Orphaned");
        assert!(
            gone.chart_messages[0]
                .error_message
                .contains("left in place")
        );
        let degraded = s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "Orphaned")
        );
    }

    /// Inputs with nothing to report: every condition at rest.
    fn quiet() -> ConditionInputs<'static> {
        ConditionInputs {
            generation: Some(4),
            ..ConditionInputs::default()
        }
    }

    /// `releases` listed under `phase`, as `cluster/namespace/release`.
    fn with_phase<'a>(
        mut f: ConditionInputs<'a>,
        phase: &'a str,
        releases: &[&str],
    ) -> ConditionInputs<'a> {
        f.phases
            .insert(phase, releases.iter().map(|r| (*r).to_owned()).collect());
        f
    }

    fn names(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| (*i).to_owned()).collect()
    }

    /// Each condition as `Type=Status:Reason: message`, in the order they are written.
    fn written(f: &ConditionInputs<'_>) -> Vec<String> {
        conditions(f, &[], Timestamp::UNIX_EPOCH)
            .iter()
            .map(|c| format!("{}={}:{}: {}", c.type_, c.status, c.reason, c.message))
            .collect()
    }

    /// A change of the inputs, named.
    type Step<'s, 'a> = (&'s str, &'s dyn Fn(&mut ConditionInputs<'a>));

    /// The conditions of `f`, then after each step the conditions it changed, named by the step.
    fn walk<'a>(mut f: ConditionInputs<'a>, steps: &[Step<'_, 'a>]) -> Vec<String> {
        let mut before = written(&f);
        let mut seen = before.clone();
        for (what, step) in steps {
            step(&mut f);
            let now = written(&f);
            let changed = before.iter().zip(&now).filter(|(b, n)| b != n);
            seen.extend(changed.map(|(_, n)| format!("{what}: {n}")));
            before = now;
        }
        seen
    }

    fn halt() -> crate::api::crd::RolloutHalt {
        crate::api::crd::RolloutHalt {
            cluster: "member-1".into(),
            release: "web".into(),
            reason: "release failed: boom".into(),
            at: "2026-01-01T00:00:00Z".into(),
        }
    }

    /// Inputs where every rule of every condition holds.
    fn everything<'a>(
        halt: &'a crate::api::crd::RolloutHalt,
        general: &'a [String],
    ) -> ConditionInputs<'a> {
        let mut f = quiet();
        f.deleting = Some("deleting: 2 release(s) left to uninstall");
        f.suspended = Some("spec.suspend is true");
        f.halted = Some(halt);
        f.general = general;
        for (phase, release) in [
            (phase::INVALID, "m/a/invalid"),
            (phase::FORBIDDEN, "m/a/forbidden"),
            (phase::CONFLICT, "m/a/conflict"),
            (phase::FAILED, "m/a/failed"),
            (phase::PENDING, "m/a/pending"),
            (phase::UNKNOWN, "m/a/unknown"),
            (phase::ORPHANED, "m/a/orphaned"),
            (phase::SUSPENDED, "m/a/held"),
            (phase::DEPLOYED, "m/a/deployed"),
        ] {
            f = with_phase(f, phase, &[release]);
        }
        f.first_error = Some("m/a/invalid: the first error".into());
        f.stale = names(&["m/stale"]);
        f.rolling = names(&["m/a Deployment/web (1/2 ready)"]);
        f.pods_not_ready = 2;
        f.failing_pods = names(&["m/a/web-1 (CrashLoopBackOff)"]);
        f.drifted = names(&["m/a/deployed"]);
        f
    }

    /// The conditions of `everything`, then what each step of the walk changes.
    const WALKED: &[&str] = &[
        "Ready=False:Terminating: deleting: 2 release(s) left to uninstall",
        "Reconciling=True:Terminating: deleting: 2 release(s) left to uninstall",
        "Stalled=True:RolloutHalted: rollout halted at cluster member-1 release web: release failed: boom; clusters not reached keep the previous generation (change the spec, or resume with `tenancy-hub rollout resume`)",
        "Degraded=True:RolloutHalted: m/a/invalid: the first error",
        "Suspended=True:Suspended: spec.suspend is true; 1 change(s) held back until resumed: m/a/held",
        "not deleted: Ready=False:RolloutHalted: rollout halted at cluster member-1 release web: release failed: boom; clusters not reached keep the previous generation (change the spec, or resume with `tenancy-hub rollout resume`)",
        "not deleted: Reconciling=False:Progressing: waiting for release(s) m/a/pending to be installed, upgraded or uninstalled",
        "rollout resumed: Ready=False:InvalidSpec: 3 part(s) of the spec cannot be carried out (m/a/invalid); what runs is left as it is. spec.tenancies[1] selects no cluster (and 1 more)",
        "rollout resumed: Stalled=True:InvalidSpec: 3 part(s) of the spec cannot be carried out (m/a/invalid); what runs is left as it is. spec.tenancies[1] selects no cluster (and 1 more)",
        "rollout resumed: Degraded=True:InvalidSpec: m/a/invalid: the first error",
        "no first error: Degraded=True:InvalidSpec: 3 part(s) of the spec cannot be carried out (m/a/invalid); what runs is left as it is. spec.tenancies[1] selects no cluster (and 1 more)",
        "no general problem: Ready=False:InvalidSpec: 1 part(s) of the spec cannot be carried out (m/a/invalid); what runs is left as it is.",
        "no general problem: Stalled=True:InvalidSpec: 1 part(s) of the spec cannot be carried out (m/a/invalid); what runs is left as it is.",
        "no general problem: Degraded=True:InvalidSpec: 1 part(s) of the spec cannot be carried out (m/a/invalid); what runs is left as it is.",
        "general problems only: Ready=False:InvalidSpec: 2 part(s) of the spec cannot be carried out (); what runs is left as it is. spec.tenancies[1] selects no cluster (and 1 more)",
        "general problems only: Stalled=True:InvalidSpec: 2 part(s) of the spec cannot be carried out (); what runs is left as it is. spec.tenancies[1] selects no cluster (and 1 more)",
        "general problems only: Degraded=True:InvalidSpec: 2 part(s) of the spec cannot be carried out (); what runs is left as it is. spec.tenancies[1] selects no cluster (and 1 more)",
        "no general problem: Ready=False:Forbidden: release(s) m/a/forbidden are not allowed by the tenancy policies; nothing is done for them and what runs is left as it is",
        "no general problem: Stalled=True:Forbidden: release(s) m/a/forbidden are not allowed by the tenancy policies; nothing is done for them and what runs is left as it is",
        "no general problem: Degraded=True:Forbidden: release(s) m/a/forbidden are not allowed by the tenancy policies; nothing is done for them and what runs is left as it is",
        "allowed: Ready=False:Conflict: release(s) m/a/conflict are held by another owner",
        "allowed: Stalled=True:Conflict: release(s) m/a/conflict are held by another owner",
        "allowed: Degraded=True:Conflict: release(s) m/a/conflict are held by another owner",
        "no conflict: Ready=False:ReleaseFailed: release(s) m/a/failed failed and wait for a spec change",
        "no conflict: Stalled=True:ReleaseFailed: release(s) m/a/failed failed and wait for a spec change",
        "no conflict: Degraded=True:ReleaseFailed: release(s) m/a/failed failed and wait for a spec change",
        "no failure: Ready=False:Progressing: waiting for release(s) m/a/pending to be installed, upgraded or uninstalled",
        "no failure: Reconciling=True:Progressing: waiting for release(s) m/a/pending to be installed, upgraded or uninstalled",
        "no failure: Stalled=False:AsExpected: nothing is stalled",
        "no failure: Degraded=True:PodsFailing: pod(s) m/a/web-1 (CrashLoopBackOff) are failing",
        "none pending: Ready=False:ClusterUnavailable: waiting for the clusters of release(s) m/a/unknown to be reached",
        "none pending: Reconciling=True:ClusterUnavailable: waiting for the clusters of release(s) m/a/unknown to be reached",
        "every cluster read: Ready=False:ClusterUnavailable: waiting for m/stale to be watched live; their pods are Unknown",
        "every cluster read: Reconciling=True:ClusterUnavailable: waiting for m/stale to be watched live; their pods are Unknown",
        "watched live: Ready=False:WorkloadsRollingOut: waiting for workload(s) m/a Deployment/web (1/2 ready) to roll out",
        "watched live: Reconciling=True:WorkloadsRollingOut: waiting for workload(s) m/a Deployment/web (1/2 ready) to roll out",
        "rolled out: Ready=False:PodsNotReady: waiting for 2 pod(s) to be ready",
        "rolled out: Reconciling=True:PodsNotReady: waiting for 2 pod(s) to be ready",
        "pods ready: Ready=False:Suspended: spec.suspend is true; 1 change(s) held back until resumed: m/a/held",
        "pods ready: Reconciling=False:Reconciled: nothing to wait for",
        "no failing pod: Degraded=True:Orphaned: 1 release(s) are left in clusters no longer registered",
        "no orphan: Degraded=False:AsExpected: no release or pod has failed",
        "resumed: Ready=False:Suspended: suspended; 1 change(s) held back until resumed: m/a/held",
        "resumed: Suspended=False:NotSuspended: Helm calls are made as the spec asks",
        "nothing held back: Ready=False:Drifted: release(s) m/a/deployed differ from their manifests (see chartMessages[].drift)",
        "suspended again: Suspended=True:Suspended: spec.suspend is true; no change is held back",
        "no drift: Ready=True:Ready: 1 release(s) deployed and their workloads ready",
    ];

    #[test]
    fn the_first_rule_that_holds_decides_each_condition_and_writes_its_message() {
        let (halt, general) = (
            halt(),
            names(&["spec.tenancies[1] selects no cluster", "a second problem"]),
        );
        let f = everything(&halt, &general);
        let without =
            |phase: &'static str| move |f: &mut ConditionInputs<'_>| drop(f.phases.remove(phase));
        let seen = walk(
            f,
            &[
                ("not deleted", &|f| f.deleting = None),
                ("rollout resumed", &|f| f.halted = None),
                ("no first error", &|f| f.first_error = None),
                ("no general problem", &|f| f.general = &[]),
                ("general problems only", &|f| {
                    f.general = &general;
                    f.phases.remove(phase::INVALID);
                }),
                ("no general problem", &|f| f.general = &[]),
                ("allowed", &without(phase::FORBIDDEN)),
                ("no conflict", &without(phase::CONFLICT)),
                ("no failure", &without(phase::FAILED)),
                ("none pending", &without(phase::PENDING)),
                ("every cluster read", &without(phase::UNKNOWN)),
                ("watched live", &|f| f.stale.clear()),
                ("rolled out", &|f| f.rolling.clear()),
                ("pods ready", &|f| f.pods_not_ready = 0),
                ("no failing pod", &|f| f.failing_pods.clear()),
                ("no orphan", &without(phase::ORPHANED)),
                ("resumed", &|f| f.suspended = None),
                ("nothing held back", &without(phase::SUSPENDED)),
                ("suspended again", &|f| {
                    f.suspended = Some("spec.suspend is true")
                }),
                ("no drift", &|f| f.drifted.clear()),
            ],
        );
        assert_eq!(seen, WALKED);
    }
}
