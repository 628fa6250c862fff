//! Status model: plan, applied releases and job outcomes become the hub resource's bounded status (pure).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use crate::{
    crd::{ChartMessage, ClusterStatus, ControllerStatus, Summary, TenancyStatus},
    key::{ClusterName, ReleaseKey},
    plan::{Applied, Plan, Problem, Release},
    queue::Outcome,
};

/// Release phases shown in `chartMessages[].phase`.
pub mod phase {
    /// Installed or upgraded to the current spec.
    pub const DEPLOYED: &str = "Deployed";
    /// Waiting for or running a Helm job.
    pub const PENDING: &str = "Pending";
    /// The last Helm job failed.
    pub const FAILED: &str = "Failed";
    /// Held by someone else; left alone.
    pub const CONFLICT: &str = "Conflict";
    /// Not known: the cluster has not been reached yet.
    pub const UNKNOWN: &str = "Unknown";
    /// Cannot be planned as written.
    pub const INVALID: &str = "Invalid";
}

/// The last outcome of a release's Helm job, with the fingerprint of the job.
#[derive(Clone, Debug, PartialEq)]
pub struct LastOutcome {
    /// What the job was meant to reach (see `Job::fingerprint`).
    pub fingerprint: String,
    /// What it came to.
    pub outcome: Outcome,
}

/// Everything the release part of the status is built from.
pub struct ReleaseView<'a> {
    /// The plan just made.
    pub plan: &'a Plan,
    /// Releases in the clusters.
    pub applied: &'a HashMap<ReleaseKey, Applied>,
    /// Last outcome per release.
    pub outcomes: &'a HashMap<ReleaseKey, LastOutcome>,
    /// Releases with a job queued or running.
    pub busy: &'a BTreeSet<ReleaseKey>,
    /// Clusters whose release records are known.
    pub synced: &'a BTreeSet<ClusterName>,
    /// The resource's generation.
    pub generation: Option<i64>,
    /// The conditions now in status, to keep transition times.
    pub previous: &'a [Condition],
    /// Now.
    pub now: Timestamp,
}

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
    }
}

fn release_message(release: &Release, view: &ReleaseView<'_>) -> ChartMessage {
    let applied = view.applied.get(&release.key);
    let last = view.outcomes.get(&release.key);
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

fn problem_message(problem: &Problem, key: &ReleaseKey) -> ChartMessage {
    let phase = match problem {
        Problem::Conflict { .. } => phase::CONFLICT,
        _ => phase::INVALID,
    };
    ChartMessage {
        chart_name: match problem {
            Problem::MissingChart { chart, .. } => chart.clone(),
            _ => String::new(),
        },
        release_name: key.release.clone(),
        error_message: problem.to_string(),
        phase: phase.to_owned(),
        ..Default::default()
    }
}

/// Builds the status: one entry per cluster/namespace with its releases, cluster summaries,
/// totals and conditions. Pods and workloads are left empty here.
pub fn build(view: &ReleaseView<'_>) -> ControllerStatus {
    let mut tenancies: BTreeMap<(String, String), TenancyStatus> = BTreeMap::new();
    let mut general = Vec::new();
    for release in &view.plan.desired {
        let scope = &release.key.scope;
        entry(&mut tenancies, scope.cluster.as_str(), &scope.namespace)
            .chart_messages
            .push(release_message(release, view));
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
    for t in tenancies.values_mut() {
        t.fresh = view.synced.iter().any(|c| c.as_str() == t.cluster);
    }
    let updated_tenancies: Vec<TenancyStatus> = tenancies.into_values().collect();
    let clusters = cluster_summaries(&updated_tenancies, view.synced);
    let summary = totals(&updated_tenancies, &clusters);
    let conditions = conditions(&updated_tenancies, &general, view);
    ControllerStatus {
        updated_tenancies,
        clusters,
        summary: Some(summary),
        conditions,
        observed_generation: view.generation,
    }
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

fn cluster_summaries(
    tenancies: &[TenancyStatus],
    synced: &BTreeSet<ClusterName>,
) -> Vec<ClusterStatus> {
    let names: BTreeSet<&str> = tenancies.iter().map(|t| t.cluster.as_str()).collect();
    names
        .into_iter()
        .map(|name| {
            let (deployed, releases, pods_ready, pods) =
                counts(tenancies.iter().filter(|t| t.cluster == name));
            ClusterStatus {
                name: name.to_owned(),
                reachable: synced.iter().any(|c| c.as_str() == name),
                last_seen: None,
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

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    view: &ReleaseView<'_>,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = view
        .previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(view.now));
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: view.generation,
    }
}

fn conditions(
    tenancies: &[TenancyStatus],
    general: &[String],
    view: &ReleaseView<'_>,
) -> Vec<Condition> {
    let all: Vec<&ChartMessage> = tenancies.iter().flat_map(|t| &t.chart_messages).collect();
    let count = |p: &str| all.iter().filter(|m| m.phase == p).count();
    let (failed, conflict, invalid, pending, unknown) = (
        count(phase::FAILED),
        count(phase::CONFLICT),
        count(phase::INVALID) + general.len(),
        count(phase::PENDING),
        count(phase::UNKNOWN),
    );
    let deployed = count(phase::DEPLOYED);
    let (ready_reason, ready_message) = match () {
        _ if invalid > 0 => (
            "InvalidSpec",
            format!(
                "{invalid} part(s) of the spec cannot be carried out; see chartMessages. {}",
                general.join("; ")
            )
            .trim_end()
            .to_owned(),
        ),
        _ if conflict > 0 => (
            "Conflict",
            format!("{conflict} release(s) are held by another owner"),
        ),
        _ if failed > 0 => (
            "ReleaseFailed",
            format!("{failed} release(s) failed; see chartMessages"),
        ),
        _ if unknown > 0 => (
            "ClusterUnavailable",
            format!("{unknown} release(s) are on clusters not reached yet"),
        ),
        _ if pending > 0 => (
            "Progressing",
            format!("{pending} release(s) are being installed, upgraded or uninstalled"),
        ),
        _ => (
            "AllReleasesDeployed",
            format!("{deployed} release(s) deployed"),
        ),
    };
    let ready = ready_reason == "AllReleasesDeployed";
    let degraded = failed + conflict + invalid > 0;
    let degraded_reason = if degraded { ready_reason } else { "AsExpected" };
    let degraded_message = if degraded {
        ready_message.clone()
    } else {
        "no release has failed".into()
    };
    vec![
        condition("Ready", ready, ready_reason, ready_message, view),
        condition(
            "Degraded",
            degraded,
            degraded_reason,
            degraded_message,
            view,
        ),
    ]
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
            settings: vec![("replicaCount".into(), "2".into())],
            values: None,
            spec_hash: "h1".into(),
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
            }
        }

        fn build(&self) -> ControllerStatus {
            build(&ReleaseView {
                plan: &self.plan,
                applied: &self.applied,
                outcomes: &self.outcomes,
                busy: &self.busy,
                synced: &self.synced,
                generation: Some(4),
                previous: &[],
                now: Timestamp::UNIX_EPOCH,
            })
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
        assert_eq!(ready(&s), ("True", "AllReleasesDeployed"));
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
    fn a_failed_release_is_reported_on_itself_while_the_others_stay_deployed() {
        let mut f = Fixture::new(&["hub/foo/foo", "hub/foo/nginx"]);
        f.applied.extend([deployed("hub/foo/foo", 1)]);
        f.outcomes.insert(
            "hub/foo/nginx".parse().unwrap(),
            LastOutcome {
                fingerprint: "apply:h1".into(),
                outcome: Outcome::Failed {
                    message: "template: boom".into(),
                    retry: false,
                },
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
            known: vec!["hub".into(), "member-1".into()],
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
        let s = build(&ReleaseView {
            plan: &f.plan,
            applied: &f.applied,
            outcomes: &f.outcomes,
            busy: &f.busy,
            synced: &f.synced,
            generation: Some(4),
            previous: &previous,
            now: Timestamp::from_second(9_000).unwrap(),
        });
        assert_eq!(s.conditions[0].last_transition_time, earlier);
        assert_eq!(s.conditions[1].last_transition_time.0.as_second(), 9_000);
    }
}
