//! The release side of a resource's status: plan, applied releases and job outcomes become chart messages per cluster/namespace, built once per reconcile (pure).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::{
    api::crd::{ChartMessage, ControllerStatus, DriftStatus, HealthStatus, TenancyStatus},
    api::key::{ClusterName, ReleaseKey},
    plan::{Applied, ChartSource, Plan, Problem, Release},
    policy::source::redact,
    queue::Outcome,
};

use crate::{api::controller_status::held_by, status::phase};

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
    /// When the job finished.
    pub(crate) at: std::time::Instant,
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
    /// The health of the deployed revision's objects, of releases where one is not current.
    pub(crate) health: &'a HashMap<ReleaseKey, HealthStatus>,
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

pub(crate) fn message(
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
        values: shown_values(release),
        error_message: error,
        phase: phase.to_owned(),
        revision,
        chart_version,
        source: shown_source(&release.source, release.commit.as_deref()),
        chart_digest: match release.source {
            ChartSource::Directory(_) => String::new(),
            _ => release.chart_digest.clone().unwrap_or_default(),
        },
        verified_by: release
            .verified
            .as_ref()
            .map(|v| v.by.clone())
            .unwrap_or_default(),
        drift: None,
        health: None,
        tests: BTreeMap::new(),
        crds: String::new(),
        held_by: String::new(),
    }
}

/// How many test results a chart message shows: what one answer of the executor carries (a
/// pull member's agent may send more).
const SHOWN_TESTS: usize = 64;

/// Test results as a chart message shows them: at most [`SHOWN_TESTS`], each name at most 253
/// bytes (an object's name), each phase one Helm has (else `Unknown`).
fn shown_tests(tests: &[crate::queue::TestResult]) -> BTreeMap<String, String> {
    tests
        .iter()
        .take(SHOWN_TESTS)
        .map(|t| {
            let mut name = t.name.clone();
            let mut cut = name.len().min(253);
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name.truncate(cut);
            let phase = match t.phase.as_str() {
                "Succeeded" | "Failed" => t.phase.clone(),
                _ => "Unknown".to_owned(),
            };
            (name, phase)
        })
        .collect()
}

/// Where a remote chart comes from, as a chart message shows it: `<repository> <chart>`, the
/// `oci://` reference, or `git <repository> <path> @ <ref> commit <commit>`, without
/// credentials; empty for the chart home.
pub(crate) fn shown_source(source: &ChartSource, commit: Option<&str>) -> String {
    match source {
        ChartSource::Directory(_) => String::new(),
        ChartSource::Repository { url, chart } => redact(&format!("{url} {chart}")),
        ChartSource::Oci(reference) => redact(reference),
        ChartSource::Git {
            url,
            path,
            reference,
            ..
        } => redact(&match commit {
            Some(commit) => format!("git {url} {path} @ {reference} commit {commit}"),
            None => format!("git {url} {path} @ {reference}"),
        }),
    }
}

/// Bytes of a release's values a chart message shows at most.
pub(crate) const SHOWN_VALUES: usize = 2048;

/// A release's values as a chart message shows them: JSON, Secret-sourced text masked, cut at
/// [`SHOWN_VALUES`] bytes.
pub(crate) fn shown_values(release: &Release) -> String {
    let Some(values) = &release.values else {
        return String::new();
    };
    let text = serde_json::to_string(&release.masked.redact_value(values)).unwrap_or_default();
    if text.len() <= SHOWN_VALUES {
        return text;
    }
    let mut cut = SHOWN_VALUES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes more)", &text[..cut], text.len() - cut)
}

/// The releases of a plan whose Helm work is held back, by `suspend`, by the rollout or by
/// `dependsOn`, as sets: asked once per release.
pub(crate) struct HeldBack<'a> {
    suspended: HashSet<&'a ReleaseKey>,
    rollout: HashSet<&'a ReleaseKey>,
    depends: &'a BTreeMap<ReleaseKey, String>,
}

impl<'a> HeldBack<'a> {
    fn of(plan: &'a Plan) -> Self {
        Self {
            suspended: plan.suspended.iter().collect(),
            rollout: plan.rollout_held.iter().collect(),
            depends: &plan.dependency_held,
        }
    }
}

pub(crate) fn release_message(
    release: &Release,
    view: &ReleaseView<'_>,
    held: &HeldBack<'_>,
) -> ChartMessage {
    let message = plain_release_message(release, view, held);
    let tests = view
        .outcomes
        .get(&release.key)
        .filter(|l| l.fingerprint == release.apply_fingerprint())
        .filter(|_| message.phase == phase::DEPLOYED)
        .map(|l| match &l.outcome {
            Outcome::Applied { tests, .. } => shown_tests(tests),
            _ => BTreeMap::new(),
        })
        .unwrap_or_default();
    ChartMessage {
        drift: view.drift.get(&release.key).cloned(),
        health: view
            .health
            .get(&release.key)
            .filter(|h| message.revision == Some(h.revision))
            .cloned(),
        tests,
        crds: crds_reported(release, view),
        ..message
    }
}

/// What the last apply of the release's current spec did with its chart's CRDs, in words.
fn crds_reported(release: &Release, view: &ReleaseView<'_>) -> String {
    let current_job = release.apply_fingerprint();
    match view.outcomes.get(&release.key) {
        Some(last) if last.fingerprint == current_job => match &last.outcome {
            Outcome::Applied {
                crds: Some(crds), ..
            } => crds.summary(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

pub(crate) fn plain_release_message(
    release: &Release,
    view: &ReleaseView<'_>,
    held: &HeldBack<'_>,
) -> ChartMessage {
    let applied = view.applied.get(&release.key);
    // Only the outcome of a job for the current spec counts: after a revert to a good spec, an
    // old failure says nothing about the release.
    let current_job = release.apply_fingerprint();
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
        return ChartMessage {
            held_by: held_by::ROLLOUT.into(),
            ..message(
                release,
                phase::PENDING,
                view.plan.rollout_note.clone().unwrap_or_default(),
                applied.map(|a| a.revision),
                chart_version,
            )
        };
    }
    if let Some(waiting) = held.depends.get(&release.key) {
        return ChartMessage {
            held_by: held_by::DEPENDS_ON.into(),
            ..message(
                release,
                phase::PENDING,
                waiting.clone(),
                applied.map(|a| a.revision),
                chart_version,
            )
        };
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
    // A record deployed at this spec and sealed by the operator outranks a failure of the job
    // for the same spec: that job's end was not known (its executor stopped after helm deployed,
    // so the job is not tried again) or it was a redundant try; what runs is what was asked.
    if let Some(error) = failure.filter(|_| current.is_none()) {
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
pub(crate) fn held_removal(key: &ReleaseKey, view: &ReleaseView<'_>) -> ChartMessage {
    ChartMessage {
        release_name: key.release.clone(),
        phase: phase::PENDING.into(),
        error_message: format!(
            "no longer in the spec, uninstalled when the rollout reaches this cluster; {}",
            view.plan.rollout_note.as_deref().unwrap_or_default()
        ),
        revision: view.applied.get(key).map(|a| a.revision),
        held_by: held_by::ROLLOUT.into(),
        ..Default::default()
    }
}

/// The releases no longer in the spec whose uninstall a gate holds back, with their messages:
/// the rollout's, then those waiting for the releases that depend on them.
fn held_removals<'a>(view: &'a ReleaseView<'_>) -> Vec<(&'a ReleaseKey, ChartMessage)> {
    let desired: BTreeSet<&ReleaseKey> = view.plan.desired.iter().map(|r| &r.key).collect();
    let rollout = view
        .plan
        .rollout_held
        .iter()
        .filter(|k| !desired.contains(k))
        .map(|k| (k, held_removal(k, view)));
    let depends = view
        .plan
        .dependency_held
        .iter()
        .filter(|(k, _)| !desired.contains(k))
        .map(|(k, waiting)| {
            let message = ChartMessage {
                release_name: k.release.clone(),
                phase: phase::PENDING.into(),
                error_message: format!("no longer in the spec, {waiting}"),
                held_by: held_by::DEPENDS_ON.into(),
                revision: view.applied.get(k).map(|a| a.revision),
                ..Default::default()
            };
            (k, message)
        });
    rollout.chain(depends).collect()
}

pub(crate) fn problem_message(problem: &Problem, key: &ReleaseKey) -> ChartMessage {
    let phase = match problem {
        Problem::Conflict { .. } => phase::CONFLICT,
        Problem::Forbidden { .. } => phase::FORBIDDEN,
        Problem::Unverified { .. } => phase::UNVERIFIED,
        _ => phase::INVALID,
    };
    ChartMessage {
        chart_name: match problem {
            Problem::MissingChart { chart, .. }
            | Problem::Unverified { chart, .. }
            | Problem::Duplicate { chart, .. }
            | Problem::Forbidden { chart, .. }
            | Problem::UnknownDependency { chart, .. }
            | Problem::DependencyCycle { chart, .. } => chart.clone(),
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
    for (key, message) in held_removals(view) {
        entry(
            &mut tenancies,
            key.scope.cluster.as_str(),
            &key.scope.namespace,
        )
        .chart_messages
        .push(message);
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

/// The entry of one cluster/namespace, made when missing.
pub(crate) fn entry<'a>(
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
