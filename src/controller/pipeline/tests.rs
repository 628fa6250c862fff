//! Tests of the decision: one resource decided against a scripted picture of the fleet.

use std::collections::HashSet;

use super::*;
use crate::controller::observed::Observed as World;
use crate::{
    api::key::ClusterNamespace,
    controller::fixtures::{Fixture, controller},
    observe::drift::RepairVerdict,
    plan::OwnerId,
    plan::owner_id,
    queue::FailureKind,
    status::phase,
};

/// `db`, and `web` depending on it, in hub namespace `foo`.
const SPEC: &str = "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: statefulset-example, releaseName: db}\n      - {chartName: deployment-example, releaseName: web, dependsOn: [db]}\n";

fn key(k: &str) -> ReleaseKey {
    k.parse().unwrap()
}

/// The fleet as a test scripts it, and whether the repair limiter refuses.
#[derive(Default)]
struct Scripted {
    busy: HashSet<ReleaseKey>,
    running: HashSet<ReleaseKey>,
    outcomes: HashMap<ReleaseKey, LastOutcome>,
    drift: HashMap<ReleaseKey, crate::api::crd::DriftStatus>,
    repairs_refused: bool,
}

impl Scripted {
    /// The fleet as a decision reads it: a running job is also busy, as the queue says.
    fn live(&self) -> Live {
        Live {
            busy: self.busy.union(&self.running).cloned().collect(),
            running: self.running.clone(),
            outcomes: self.outcomes.clone(),
            drift: self.drift.clone(),
            ..Live::default()
        }
    }
}

/// What a decision is made from: the fixture's registry (the hub only, its releases known and
/// none installed), no claims, the fixture's policies.
fn world_of(f: &Fixture, c: &TenancyController) -> World {
    let clusters = f.ctx.members.registry.load().labels();
    World {
        owner: owner_id(c),
        synced: clusters.keys().cloned().collect(),
        clusters,
        applied: HashMap::new(),
        claims: HashMap::new(),
        admission: f.ctx.admission(),
        orphans: Vec::new(),
    }
}

async fn decide_with(
    f: &Fixture,
    c: &TenancyController,
    world: &World,
    live: &Scripted,
) -> Decision {
    decide_drifted(f, c, world, live, &HashMap::new()).await
}

async fn decide_drifted(
    f: &Fixture,
    c: &TenancyController,
    world: &World,
    live: &Scripted,
    drifted: &HashMap<ReleaseKey, plan::Drifted>,
) -> Decision {
    let variables = BTreeMap::new();
    let planning = Planning {
        charts: &f.ctx.kept.charts,
        chart_home: &f.ctx.hub.settings.chart_home,
        values: &f.ctx.kept.values,
        variables: &variables,
        drifted,
        now: Timestamp::now(),
        pending_timeout: Duration::from_secs(300),
    };
    let seen = world.seen();
    let planned = plan_spec(c, &seen, &planning).await;
    let refused = live.repairs_refused;
    let allow_repair = move |_: &ReleaseKey, _| {
        if refused {
            (RepairVerdict::Suppressed(Duration::from_secs(60)), true)
        } else {
            (RepairVerdict::Allowed, false)
        }
    };
    decide(c, &seen, planned, &live.live(), &planning, &allow_repair)
}

/// One release `web` of the chart home in hub namespace `foo`.
fn web_only() -> TenancyController {
    controller(
        "app",
        "2026-01-01T00:00:00Z",
        "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: deployment-example, releaseName: web}\n",
    )
}

/// A fleet whose last outcome for `web` is `outcome` of `job`, finished `at`.
fn web_finished(
    job: &Job,
    owner: &OwnerId,
    outcome: Outcome,
    settled: bool,
    at: std::time::Instant,
) -> Scripted {
    let mut live = Scripted::default();
    live.outcomes.insert(
        key("hub/foo/web"),
        LastOutcome {
            fingerprint: job.fingerprint(),
            outcome,
            owner: owner.clone(),
            settled,
            at,
        },
    );
    live
}

fn message<'a>(report: &'a ReleaseReport, release: &str) -> &'a crate::api::crd::ChartMessage {
    report
        .tenancies
        .iter()
        .flat_map(|t| &t.chart_messages)
        .find(|m| m.release_name == release)
        .unwrap_or_else(|| panic!("no message for {release} in {report:?}"))
}

#[tokio::test]
async fn a_release_waits_for_what_it_depends_on_held_not_queued_and_its_edge_remembered() {
    let f = Fixture::new();
    let c = controller("app", "2026-01-01T00:00:00Z", SPEC);
    let world = world_of(&f, &c);

    let d = decide_with(&f, &c, &world, &Scripted::default()).await;

    let queued: Vec<&ReleaseKey> = d.enqueue.iter().map(Job::key).collect();
    assert_eq!(queued, [&key("hub/foo/db")], "only db goes to the queue");
    let held: Vec<&ReleaseKey> = d.held.iter().map(Job::key).collect();
    assert_eq!(held, [&key("hub/foo/web")]);
    assert!(
        d.plan.dependency_held[&key("hub/foo/web")].contains("db"),
        "{:?}",
        d.plan.dependency_held
    );
    assert_eq!(
        d.edges.get(&key("hub/foo/web")),
        Some(&BTreeSet::from([key("hub/foo/db")])),
        "the edge is handed back to be remembered"
    );
    assert_eq!(d.busy, BTreeSet::from([key("hub/foo/db")]));
    let web = message(&d.report, "web");
    assert_eq!(web.phase, phase::PENDING);
    assert!(web.error_message.contains("db"), "{}", web.error_message);
}

#[tokio::test]
async fn a_job_that_failed_for_good_at_the_same_fingerprint_is_planned_but_not_queued_again() {
    let f = Fixture::new();
    let c = web_only();
    let world = world_of(&f, &c);
    let first = decide_with(&f, &c, &world, &Scripted::default()).await;
    let job = first.enqueue.first().expect("the install is queued");

    let failed = Outcome::failed("template: boom", FailureKind::Permanent);
    let live = web_finished(job, &world.owner, failed, true, std::time::Instant::now());
    let again = decide_with(&f, &c, &world, &live).await;

    assert_eq!(again.plan.jobs.len(), 1, "the plan still asks for it");
    assert!(again.enqueue.is_empty(), "but it is not queued again");
    assert!(again.busy.is_empty());
    assert_eq!(message(&again.report, "web").phase, phase::FAILED);
}

#[tokio::test]
async fn the_report_counts_as_busy_the_queued_and_running_jobs_not_a_waiting_job_the_plan_dropped()
{
    let f = Fixture::new();
    let c = controller("app", "2026-01-01T00:00:00Z", SPEC);
    let world = world_of(&f, &c);

    // web waits in the queue from an earlier plan; now dependsOn holds it, so the queue drops it.
    let mut live = Scripted::default();
    live.busy.insert(key("hub/foo/web"));
    let d = decide_with(&f, &c, &world, &live).await;
    assert_eq!(d.busy, BTreeSet::from([key("hub/foo/db")]));

    // A running job is never dropped: it stays busy.
    let mut live = Scripted::default();
    live.running.insert(key("hub/foo/web"));
    let d = decide_with(&f, &c, &world, &live).await;
    assert_eq!(
        d.busy,
        BTreeSet::from([key("hub/foo/db"), key("hub/foo/web")])
    );
}

#[tokio::test]
async fn a_refused_repair_leaves_the_jobs_and_is_handed_back_to_be_told() {
    let f = Fixture::new();
    let c = controller(
        "app",
        "2026-01-01T00:00:00Z",
        "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: deployment-example, releaseName: web, driftDetection: {mode: enabled}}\n",
    );
    let mut world = world_of(&f, &c);
    let installed = decide_with(&f, &c, &world, &Scripted::default()).await;
    let Job::Apply { release, .. } = &installed.enqueue[0] else {
        panic!("an install");
    };
    world.applied.insert(
        release.key.clone(),
        Applied {
            key: release.key.clone(),
            owner: Some(world.owner.clone()),
            spec_hash: Some(release.spec_hash.clone()),
            revision: 3,
            status: "deployed".into(),
            modified_at: Some(0),
        },
    );
    let drifted = HashMap::from([(
        release.key.clone(),
        plan::Drifted {
            revision: 3,
            summary: "Deployment web: spec.replicas".into(),
        },
    )]);
    // The drift as seen before the limiter judged: a repair planned.
    let seen_before =
        crate::observe::drift::status(3, "2026-01-01T00:00:00Z".into(), "Repairing", &[]);
    let live = Scripted {
        repairs_refused: true,
        drift: HashMap::from([(release.key.clone(), seen_before)]),
        ..Scripted::default()
    };

    let d = decide_drifted(&f, &c, &world, &live, &drifted).await;

    assert!(d.plan.jobs.is_empty(), "{:?}", d.plan.jobs);
    assert!(d.enqueue.is_empty());
    assert_eq!(
        d.refused_repairs,
        vec![(release.key.clone(), Duration::from_secs(60))]
    );
    // The report of this same decision says the repair is suppressed, not planned.
    let drift = message(&d.report, "web")
        .drift
        .as_ref()
        .expect("web's drift is reported");
    assert_eq!(drift.action, "RepairSuppressed");
}

#[tokio::test]
async fn the_report_carries_the_orphans_and_the_rollout_state() {
    let f = Fixture::new();
    let c = controller(
        "app",
        "2026-01-01T00:00:00Z",
        "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: deployment-example, releaseName: web}\nrollout:\n  maxUnavailable: 1\n",
    );
    let mut world = world_of(&f, &c);
    world.orphans = vec![key("gone/foo/web")];

    let d = decide_with(&f, &c, &world, &Scripted::default()).await;

    let step = d.rollout.as_ref().expect("spec.rollout makes a step");
    assert_eq!(d.report.rollout.as_ref(), Some(&step.state));
    let orphan = d
        .report
        .tenancies
        .iter()
        .find(|t| t.cluster == "gone")
        .expect("the orphan's cluster has an entry");
    assert_eq!(orphan.chart_messages[0].phase, phase::ORPHANED);
    let scope: ClusterNamespace = "hub/foo".parse().unwrap();
    assert!(
        step.allowed.contains(&scope.cluster),
        "the only cluster is in the first wave"
    );
}

#[tokio::test]
async fn a_release_just_installed_whose_record_is_not_seen_yet_is_not_installed_again() {
    let f = Fixture::new();
    let c = web_only();
    let world = world_of(&f, &c);
    let first = decide_with(&f, &c, &world, &Scripted::default()).await;
    let job = first.enqueue.first().expect("the install is queued");
    assert!(!first.catching_up);
    let applied = || Outcome::Applied {
        adopted_from: None,
        revision: 1,
        chart_version: "0.1.0".into(),
        tests: Vec::new(),
        crds: None,
    };
    let installed = |at| web_finished(job, &world.owner, applied(), false, at);

    // Helm installed it a moment ago; the record watch has not shown it yet.
    let again = decide_with(&f, &c, &world, &installed(std::time::Instant::now())).await;
    assert_eq!(
        again.plan.jobs.len(),
        1,
        "the plan, reading no record, asks again"
    );
    assert!(
        again.enqueue.is_empty(),
        "but a second install is not queued"
    );
    assert!(
        again.catching_up,
        "and the resource is looked at again soon"
    );

    // Long after, no record means the release is gone (uninstalled by hand): installed again.
    let long_ago = std::time::Instant::now()
        .checked_sub(CATCH_UP * 2)
        .expect("the machine has run longer than that");
    let later = decide_with(&f, &c, &world, &installed(long_ago)).await;
    assert_eq!(later.enqueue.len(), 1);
    assert!(!later.catching_up);
}
