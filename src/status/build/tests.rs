//! Unit tests of the status: the release side, conditions, readiness per cluster and the bound.

use super::*;
use crate::plan::{ChartSource, OwnerId};
use crate::status::{conditions::*, phase, report::*};
use crate::{
    api::crd::{ControllerStatus, DriftStatus},
    api::key::{ClusterName, ReleaseKey},
    observe::model::{PodInfo, ScopeState},
    plan::{Applied, Plan, Problem, Release},
    queue::Outcome,
};
use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use std::collections::{BTreeSet, HashMap};

fn release(key: &str) -> Release {
    Release {
        health: Vec::new(),
        adoption: Default::default(),
        commit: None,
        masked: Default::default(),
        post_render: None,
        credentials: Default::default(),
        verified: None,
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
        helm: Default::default(),
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
    health: HashMap<ReleaseKey, crate::api::crd::HealthStatus>,
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
            health: HashMap::new(),
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
            health: &self.health,
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
            at: std::time::Instant::now(),
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
fn a_record_deployed_at_the_spec_outranks_a_failure_of_the_job_for_that_spec() {
    // The executor stopped after helm deployed revision 1 and before it answered: the job
    // failed, the record says the release runs as asked, and no job is planned again.
    let mut f = Fixture::new(&["hub/foo/foo", "hub/foo/nginx"]);
    f.applied
        .extend([deployed("hub/foo/foo", 1), deployed("hub/foo/nginx", 1)]);
    let stopped = |fingerprint: &str| LastOutcome {
        fingerprint: fingerprint.into(),
        outcome: Outcome::Failed {
            kind: crate::queue::FailureKind::Transient,
            message: "the helm executor stopped before answering".into(),
        },
        owner: release("hub/foo/nginx").owner,
        settled: true,
        at: std::time::Instant::now(),
    };
    f.outcomes
        .insert("hub/foo/nginx".parse().unwrap(), stopped("apply:h1"));
    let s = f.build();
    let msgs = &s.updated_tenancies[0].chart_messages;
    assert_eq!(
        (msgs[1].phase.as_str(), msgs[1].revision),
        ("Deployed", Some(1))
    );
    assert_eq!(msgs[1].error_message, "");

    // A record of another spec (the failed upgrade left the old one) does not: Failed stands.
    let mut f = Fixture::new(&["hub/foo/nginx"]);
    let (key, mut old) = deployed("hub/foo/nginx", 1);
    old.spec_hash = Some("h0".into());
    f.applied.insert(key, old);
    f.outcomes
        .insert("hub/foo/nginx".parse().unwrap(), stopped("apply:h1"));
    let s = f.build();
    assert_eq!(s.updated_tenancies[0].chart_messages[0].phase, "Failed");
}

#[test]
fn a_failure_of_a_release_with_helm_settings_of_its_own_is_reported() {
    // Its job's fingerprint names the settings; the status reads that job's outcome.
    let mut f = Fixture::new(&["hub/foo/slow"]);
    f.plan.desired[0].helm.install.timeout = Some("20s".into());
    let fingerprint = crate::plan::Job::Apply {
        adopt: false,
        release: Box::new(f.plan.desired[0].clone()),
        stale_pending: None,
        repair: None,
        installing: false,
        attempt: 0,
    }
    .fingerprint();
    assert_ne!(
        fingerprint, "apply:h1",
        "the settings are in the job's fingerprint"
    );
    f.outcomes.insert(
        "hub/foo/slow".parse().unwrap(),
        LastOutcome {
            fingerprint,
            outcome: Outcome::Failed {
                kind: crate::queue::FailureKind::Transient,
                message: "context deadline exceeded".into(),
            },
            owner: release("hub/foo/slow").owner,
            settled: true,
            at: std::time::Instant::now(),
        },
    );
    let s = f.build();
    let m = &s.updated_tenancies[0].chart_messages[0];
    assert_eq!(
        (m.phase.as_str(), m.error_message.as_str()),
        ("Failed", "context deadline exceeded")
    );
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
            at: std::time::Instant::now(),
        },
    );
    let judged = cluster_readiness(&f.report(), "member-1", &|_, _| Some(running_scope(0, 0)));
    assert_eq!(judged.failed, Some(("web".into(), "template: boom".into())));
    assert!(!judged.ready);
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
    assert_eq!(m.held_by, "Rollout");
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
            at: std::time::Instant::now(),
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
        .find(|t| t.cluster == last.scope.cluster.as_str() && t.namespace == last.scope.namespace)
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

#[test]
fn a_chart_message_shows_the_values_made_with_what_came_from_secrets_masked_and_cut() {
    let mut r = release("member-1/team/web");
    r.values = Some(serde_json::json!({
        "owner": "member-1",
        "credentials": {"token": "s3cr3t-token", "pin": 987654, "url": "https://u:s3cr3t-token@h"}
    }));
    r.masked = crate::plan::Masked::new(vec!["s3cr3t-token".into(), "987654".into()]);
    let shown = crate::status::report::shown_values(&r);
    assert_eq!(
        shown,
        r#"{"credentials":{"pin":"******","token":"******","url":"https://u:******@h"},"owner":"member-1"}"#
    );
    r.values = Some(serde_json::json!({"big": "x".repeat(5000)}));
    let shown = crate::status::report::shown_values(&r);
    assert!(
        shown.len() < 2100 && shown.ends_with("bytes more)"),
        "{shown}"
    );
    r.values = None;
    assert_eq!(crate::status::report::shown_values(&r), "");
}

#[test]
fn one_release_is_judged_by_the_ready_rule_on_its_own_workloads_for_depends_on() {
    let mut f = Fixture::new(&["member-1/team/web", "member-1/team/db", "member-1/team/api"]);
    f.applied.extend([
        deployed("member-1/team/web", 1),
        deployed("member-1/team/db", 1),
    ]);
    let report = f.report();
    // web's Deployment has 1 of 2 pods ready; db has no workloads at all.
    let slow = running_scope(2, 1);
    let web = release_readiness(&report, &"member-1/team/web".parse().unwrap(), &|_, _| {
        Some(slow.clone())
    });
    assert!(web.deployed && !web.ready);
    assert_eq!(
        web.waiting.unwrap().1,
        "Deployment team/web not rolled out (1/2 ready)"
    );
    let db = release_readiness(&report, &"member-1/team/db".parse().unwrap(), &|_, _| {
        Some(slow.clone())
    });
    assert!(
        db.ready,
        "a deployed release without workloads is ready: {db:?}"
    );
    let api = release_readiness(&report, &"member-1/team/api".parse().unwrap(), &|_, _| {
        Some(slow.clone())
    });
    assert!(!api.deployed && !api.ready);
    assert_eq!(api.waiting.unwrap().1, "release team/api is Pending");
    let none = release_readiness(&report, &"member-1/team/nope".parse().unwrap(), &|_, _| {
        Some(slow.clone())
    });
    assert!(!none.ready && none.waiting.unwrap().1.contains("not planned"));
}

#[test]
fn releases_held_by_depends_on_are_pending_and_say_what_they_wait_for() {
    let mut f = Fixture::new(&["member-1/team/web"]);
    f.applied.extend([deployed("member-1/team/old", 2)]);
    f.plan.dependency_held = [
        (
            "member-1/team/web".parse().unwrap(),
            "waiting for dependency db (not ready: Deployment team/db not rolled out (0/1 ready))"
                .to_owned(),
        ),
        (
            "member-1/team/old".parse().unwrap(),
            "uninstalled after the releases that depend on it: waiting for web to be uninstalled first"
                .to_owned(),
        ),
    ]
    .into();
    let s = f.build();
    let messages = &s.updated_tenancies[0].chart_messages;
    assert_eq!(messages[0].phase, phase::PENDING);
    assert_eq!(
        messages[0].error_message,
        "waiting for dependency db (not ready: Deployment team/db not rolled out (0/1 ready))"
    );
    assert_eq!(
        (
            messages[1].release_name.as_str(),
            messages[1].phase.as_str()
        ),
        ("old", phase::PENDING)
    );
    assert!(
        messages[1]
            .error_message
            .starts_with("no longer in the spec, uninstalled after")
    );
    assert_eq!(
        (messages[0].held_by.as_str(), messages[1].held_by.as_str()),
        ("DependsOn", "DependsOn")
    );
    assert_eq!(ready(&s).0, "False");
}

fn unhealthy(state: &str, revision: i64, reason: &str) -> crate::api::crd::HealthStatus {
    crate::api::crd::HealthStatus {
        revision,
        state: state.into(),
        objects: vec![crate::api::crd::UnhealthyObject {
            api_version: "bitnami.com/v1alpha1".into(),
            kind: "SealedSecret".into(),
            name: "db".into(),
            namespace: "team".into(),
            health: state.into(),
            reason: reason.into(),
        }],
        more_objects: 0,
    }
}

#[test]
fn an_object_not_current_keeps_ready_false_and_gates_depends_on_and_the_rollout_by_one_rule() {
    let mut f = Fixture::new(&["member-1/team/db", "member-1/team/web"]);
    f.applied.extend([
        deployed("member-1/team/db", 2),
        deployed("member-1/team/web", 1),
    ]);
    let db: ReleaseKey = "member-1/team/db".parse().unwrap();
    let empty = |_: &str, _: &str| Some(running_scope(0, 0));
    f.health.insert(
        db.clone(),
        unhealthy("InProgress", 2, "current does not hold yet"),
    );
    let s = f.build();
    assert_eq!(ready(&s), ("False", "ObjectsInProgress"));
    let m = &s.updated_tenancies[0].chart_messages[0];
    assert_eq!(
        (
            m.release_name.as_str(),
            m.health.as_ref().unwrap().state.as_str()
        ),
        ("db", "InProgress")
    );
    let report = f.report();
    let waiting = release_readiness(&report, &db, &empty);
    assert!(waiting.deployed && !waiting.ready && waiting.failed.is_none());
    assert_eq!(
        waiting.waiting.unwrap().1,
        "SealedSecret team/db is InProgress: current does not hold yet"
    );
    let web = release_readiness(&report, &"member-1/team/web".parse().unwrap(), &empty);
    assert!(web.ready, "another release is not held by it: {web:?}");
    let cluster = cluster_readiness(&report, "member-1", &empty);
    assert!(!cluster.ready && cluster.failed.is_none());

    f.health.insert(
        db.clone(),
        unhealthy(
            "Failed",
            2,
            "failed holds; Synced=False no key could decrypt",
        ),
    );
    let s = f.build();
    assert_eq!(ready(&s), ("False", "ObjectsFailed"));
    let degraded = s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
    assert!(degraded.message.contains("SealedSecret db: failed holds"));
    let cluster = cluster_readiness(&f.report(), "member-1", &empty);
    assert_eq!(
        cluster.failed,
        Some((
            "db".into(),
            "SealedSecret team/db is Failed: failed holds; Synced=False no key could decrypt"
                .into()
        )),
        "a failed object halts a rollout at once"
    );

    f.health
        .insert(db.clone(), unhealthy("Failed", 1, "an older revision"));
    assert_eq!(
        ready(&f.build()),
        ("True", "Ready"),
        "health judged in another revision does not count"
    );
}

#[test]
fn a_revision_not_judged_yet_is_waited_for() {
    let mut f = Fixture::new(&["member-1/team/db"]);
    f.applied.extend([deployed("member-1/team/db", 3)]);
    f.health.insert(
        "member-1/team/db".parse().unwrap(),
        crate::api::crd::HealthStatus {
            revision: 3,
            state: "Unknown".into(),
            ..Default::default()
        },
    );
    let judged = release_readiness(
        &f.report(),
        &"member-1/team/db".parse().unwrap(),
        &|_, _| Some(running_scope(0, 0)),
    );
    assert!(!judged.ready);
    assert_eq!(
        judged.waiting.unwrap().1,
        "the objects of revision 3 are not judged yet"
    );
}
