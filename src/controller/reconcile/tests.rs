//! Tests of reconcile and cleanup against a scripted hub.

use super::*;
use crate::controller::fixtures::{Fixture, controller, deleted, finalized, release_record};
use kube::runtime::finalizer::Error as F;

const SPEC: &str = "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: deployment-example, releaseName: web}\n";

fn web() -> ReleaseKey {
    "hub/foo/web".parse().unwrap()
}

fn is_cleanup_pending(result: &Result<Action>) -> bool {
    matches!(result, Err(Error::Finalizer(inner)) if matches!(
        **inner,
        kube::runtime::finalizer::Error::CleanupFailed(Error::CleanupPending { .. })
    ))
}

#[tokio::test(start_paused = true)]
async fn a_new_controller_gets_the_finalizer_then_its_installs_are_queued_and_reported() {
    let mut f = Fixture::new();
    let spec = format!("{SPEC}      - {{chartName: no-such-chart, releaseName: ghost}}\n");
    let c = controller("app", "2026-01-01T00:00:00Z", &spec);
    f.store(&[&c]);

    // PATCH the Controller adding the finalizer, answered with the Controller holding it;
    // nothing else happens on this pass.
    let (result, c) = tokio::join!(
        reconcile(Arc::new(c.clone()), f.ctx.clone()),
        f.hub.finalizer_added(&c)
    );
    assert_eq!(result.unwrap(), Action::await_change());
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 0);
    assert!(
        f.ctx
            .out
            .writer
            .submitted(&ObjectRef::from_obj(&c))
            .is_none()
    );

    // POST an Event (ChartNotFound) for the chart that is not there, answered as created;
    // then no other request. The install of web is queued and the report submitted.
    let (result, _) = tokio::join!(
        reconcile(Arc::new(c.clone()), f.ctx.clone()),
        f.hub.event(&c, "ChartNotFound")
    );
    assert_eq!(
        result.unwrap(),
        Action::requeue(Duration::from_secs(30)),
        "a busy release is looked at again soon"
    );
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 1);
    assert!(f.ctx.out.queue.is_busy(&web()));
    assert!(!f.ctx.out.queue.is_busy(&"hub/foo/ghost".parse().unwrap()));
    let report = f
        .ctx
        .out
        .writer
        .submitted(&ObjectRef::from_obj(&c))
        .expect("a status report is submitted");
    assert_eq!(report.generation, Some(1));
    let text = format!("{report:?}");
    assert!(text.contains("no-such-chart"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_rollout_starts_its_first_cluster_tells_it_in_events_and_looks_again_soon() {
    let mut f = Fixture::new();
    let spec = format!("{SPEC}rollout: {{maxUnavailable: 1, progressDeadline: 1m}}\n");
    let c = finalized(controller("app", "2026-01-01T00:00:00Z", &spec));
    f.store(&[&c]);

    // POST the Events RolloutStarted and RolloutWaveStarted; the install is queued, the
    // resource looked at again within a second, and the rollout reported.
    let (result, _) = tokio::join!(reconcile(Arc::new(c.clone()), f.ctx.clone()), async {
        f.hub.event(&c, "RolloutStarted").await;
        f.hub.event(&c, "RolloutWaveStarted").await
    });
    assert_eq!(result.unwrap(), Action::requeue(ROLLOUT_POLL));
    f.hub.nothing().await;
    assert!(f.ctx.out.queue.is_busy(&web()));
    let report = submitted(&f, &c);
    let r = report.rollout.expect("the rollout is reported");
    assert_eq!(
        (r.generation, r.phase.as_str(), r.progress.as_str()),
        (1, "Progressing", "0/1")
    );
    assert_eq!(r.clusters[0].state, "Progressing");

    // The next pass changes nothing and tells nothing: the cluster is not healthy yet.
    let result = reconcile(Arc::new(c.clone()), f.ctx.clone()).await;
    assert_eq!(result.unwrap(), Action::requeue(ROLLOUT_POLL));
    f.hub.nothing().await;
}

#[tokio::test(start_paused = true)]
async fn under_enforce_an_ungoverned_release_is_forbidden_and_a_policy_lets_it_through() {
    let mut f = Fixture::with_policy_mode(crate::policy::Mode::Enforce);
    let c = finalized(controller("app", "2026-01-01T00:00:00Z", SPEC));
    f.store(&[&c]);

    // No policy governs hub namespace default: POST an Event with reason Forbidden, queue
    // nothing, and report the rule.
    let (result, event) = tokio::join!(
        reconcile(Arc::new(c.clone()), f.ctx.clone()),
        f.hub.event(&c, "Forbidden")
    );
    result.unwrap();
    f.hub.nothing().await;
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|n| n.contains("no TenancyPolicy governs hub namespace default")),
        "{event}"
    );
    assert_eq!(f.ctx.out.queue.depth(), 0);
    let report = submitted(&f, &c);
    assert!(format!("{report:?}").contains("Forbidden"), "{report:?}");

    // A policy allowing the hub, namespace foo and the chart home: the install is queued.
    let policy: crate::api::policy::TenancyPolicy = serde_yaml::from_str(
            "apiVersion: multitenancy.dev/v1alpha1\nkind: TenancyPolicy\nmetadata: {name: team}\nspec:\n  hubNamespaces: [default]\n  clusters: [hub]\n  namespaces: [foo]\n  chartSources: [chart-home]\n  impersonate: {user: team-deployer}\n",
        )
        .unwrap();
    f.policy(policy);
    let result = reconcile(Arc::new(c.clone()), f.ctx.clone()).await;
    result.unwrap();
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 1);
    assert!(f.ctx.out.queue.is_busy(&web()));
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_controller_queues_nothing_and_writes_nothing_to_the_hub() {
    let mut f = Fixture::new();
    let c = finalized(controller("app", "2026-01-01T00:00:00Z", SPEC));
    f.store(&[&c]);
    let hash = f.spec_hash(&c, &web()).await;
    f.records(vec![release_record(&web(), &c, "deployed", &hash)]);

    // No request at all: no finalizer patch, no Event, no status write.
    let result = reconcile(Arc::new(c.clone()), f.ctx.clone()).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 0);
    assert!(!f.ctx.out.queue.is_busy(&web()));
}

#[tokio::test(start_paused = true)]
async fn a_deleted_controller_keeps_its_finalizer_until_its_release_is_uninstalled() {
    let mut f = Fixture::new();
    let c = deleted(finalized(controller("app", "2026-01-01T00:00:00Z", SPEC)));
    f.store(&[&c]);
    f.records(vec![release_record(&web(), &c, "deployed", "0")]);

    // The release is there: its uninstall is queued, and no request is made (the finalizer
    // stays).
    let result = reconcile(Arc::new(c.clone()), f.ctx.clone()).await;
    assert!(is_cleanup_pending(&result), "{result:?}");
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 1);
    assert!(f.ctx.out.queue.is_busy(&web()));
    let report = submitted(&f, &c);
    assert!(
        report
            .deleting
            .as_deref()
            .is_some_and(|w| w.contains("hub/foo/web")),
        "{report:?}"
    );

    // The release is gone: PATCH the Controller removing the finalizer, answered with the
    // Controller holding none; then no other request.
    f.records(Vec::new());
    let (result, ()) = tokio::join!(
        reconcile(Arc::new(c.clone()), f.ctx.clone()),
        f.hub.finalizer_removed(&c)
    );
    assert_eq!(result.unwrap(), Action::await_change());
    f.hub.nothing().await;
}

#[tokio::test(start_paused = true)]
async fn a_newer_controller_asking_for_a_held_release_queues_nothing_and_reports_a_conflict() {
    let mut f = Fixture::new();
    let older = finalized(controller("older", "2026-01-01T00:00:00Z", SPEC));
    let newer = finalized(controller("newer", "2026-02-01T00:00:00Z", SPEC));
    f.store(&[&older, &newer]);
    let hash = f.spec_hash(&older, &web()).await;
    f.records(vec![release_record(&web(), &older, "deployed", &hash)]);

    // POST an Event with reason Conflict on the newer one, answered as created; then no
    // other request.
    let (result, event) = tokio::join!(
        reconcile(Arc::new(newer.clone()), f.ctx.clone()),
        f.hub.event(&newer, "Conflict")
    );
    result.unwrap();
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains("Controller default/older"), "{event}");
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 0);
    assert!(!f.ctx.out.queue.is_busy(&web()));
    let report = f
        .ctx
        .out
        .writer
        .submitted(&ObjectRef::from_obj(&newer))
        .unwrap();
    assert!(format!("{report:?}").contains("Conflict"), "{report:?}");
}

fn pending() -> Error {
    Error::CleanupPending {
        owner: OwnerId {
            namespace: "default".into(),
            name: "a".into(),
        },
        waiting: "waiting for jobs".into(),
    }
}

#[test]
fn a_failure_inside_the_finalizer_is_labelled_by_what_failed() {
    assert_eq!(pending().metric_label(), "cleanup_pending");
    let wrapped = Error::Finalizer(Box::new(F::CleanupFailed(pending())));
    assert_eq!(wrapped.metric_label(), "cleanup_pending");
    let own = Error::Finalizer(Box::new(F::UnnamedObject));
    assert_eq!(own.metric_label(), "finalizer");
}

/// The report last handed to the status writer for `c`.
fn submitted(f: &Fixture, c: &TenancyController) -> crate::status::report::ReleaseReport {
    f.ctx
        .out
        .writer
        .submitted(&ObjectRef::from_obj(c))
        .expect("a report was handed to the writer")
}

/// The delivery loop through the seam, with the hub's member a fake link: a reconcile queues
/// the install, the queue runs it on the link, the outcomes loop records it and wakes the
/// resource; the next reconcile, before the record shows the release, queues nothing and looks
/// again soon; once the record shows it, nothing is queued and it is reported deployed.
#[tokio::test(start_paused = true)]
async fn an_install_runs_through_the_member_link_once_and_is_reported_from_its_record() {
    use crate::controller::loops::{Outcomes, record_outcomes};
    use crate::member::{Links, MemberLink, fake::FakeLink};

    let fake = FakeLink::new("hub");
    let mut f = Fixture::linked(Links::fixed(vec![Arc::clone(&fake) as Arc<dyn MemberLink>]));
    let c = finalized(controller("app", "2026-01-01T00:00:00Z", SPEC));
    f.store(&[&c]);

    // The install is queued; nothing is asked of the hub.
    let result = reconcile(Arc::new(c.clone()), f.ctx.clone()).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(30)));
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 1);

    // The queue runs it on the link; the outcomes loop records it and wakes the resource.
    let cancel = tokio_util::sync::CancellationToken::new();
    let (done_tx, done_rx) = tokio::sync::mpsc::channel(4);
    let (wake_tx, mut wake_rx) = tokio::sync::mpsc::channel(4);
    let queue = f.ctx.out.queue.clone();
    let links = Arc::new(f.ctx.members.links.clone());
    let running = tokio::spawn({
        let cancel = cancel.clone();
        async move { queue.run(links, done_tx, cancel).await }
    });
    let outcomes = Outcomes {
        index: f.ctx.kept.index.clone(),
        controllers: kube::runtime::reflector::store().0,
        events: f.ctx.out.events.clone(),
        notifier: f.ctx.out.notifier.clone(),
        metrics: f.ctx.out.metrics.clone(),
    };
    tokio::spawn(record_outcomes(outcomes, done_rx, wake_tx));
    let woken = tokio::time::timeout(Duration::from_secs(30), wake_rx.recv())
        .await
        .expect("the resource is woken within 30s")
        .expect("the outcomes loop runs");
    assert_eq!(woken, ObjectRef::from_obj(&c));
    let jobs = fake.jobs();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].key(), &web());
    assert!(matches!(jobs[0], Job::Apply { .. }), "{jobs:?}");
    assert!(matches!(
        f.ctx.kept.index.outcome(&web()).map(|o| o.outcome),
        Some(crate::queue::Outcome::Applied { revision: 1, .. })
    ));

    // The record watch has not shown the release yet: the applied outcome stands for it, so
    // nothing is queued again, and the resource is looked at again within the catch-up time.
    let result = reconcile(Arc::new(c.clone()), f.ctx.clone()).await;
    assert_eq!(result.unwrap(), Action::requeue(CATCH_UP));
    assert_eq!(f.ctx.out.queue.depth(), 0);
    assert_eq!(fake.jobs().len(), 1);

    // The record shows it: still nothing queued, and the release is reported deployed.
    let hash = f.spec_hash(&c, &web()).await;
    f.records(vec![release_record(&web(), &c, "deployed", &hash)]);
    reconcile(Arc::new(c.clone()), f.ctx.clone())
        .await
        .expect("the reconcile succeeds");
    f.hub.nothing().await;
    assert_eq!(f.ctx.out.queue.depth(), 0);
    assert_eq!(fake.jobs().len(), 1, "the install ran once");
    let report = submitted(&f, &c);
    let web_message = &report.tenancies[0].chart_messages[0];
    assert_eq!(
        (
            web_message.release_name.as_str(),
            web_message.phase.as_str()
        ),
        ("web", "Deployed"),
        "{report:?}"
    );
    assert_eq!(web_message.revision, Some(1));
    cancel.cancel();
    running.await.expect("the queue stops when cancelled");
}
