//! The reconciler's background loops: Helm outcomes, release-record news, watch changes, ownerless releases, charts, cluster health. Each takes the few handles it uses, named in a struct of its own where they are more than three.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    sync::Arc,
    time::Duration,
};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use kube::{
    ResourceExt,
    runtime::{
        events::EventType,
        reflector::{ObjectRef, Store},
    },
};
use tokio::sync::mpsc::{Receiver, Sender};

use crate::api::alert::AlertEvent;
use crate::controller::events::{notice, publish};
use crate::plan::owner_id;

use crate::charts::catalog as charts;
use crate::{
    api::crd::TenancyController,
    api::key::{ClusterNamespace, ReleaseKey},
    controller::context::{Settings, admission_of},
    controller::drift::DriftCheckRequest,
    controller::events::Events,
    controller::index::ControllerIndex,
    metrics::Metrics,
    notify::Notifier,
    observe::model::{Change, Model, Tagged},
    observe::releases::{RecordChange, ReleaseIndex},
    observe::supervisor::WatchSupervisor,
    plan::claims::Claims,
    plan::{Job, OwnerId},
    queue::handle::HelmQueue,
    queue::{Completed, FailureKind, Outcome},
    status::report::LastOutcome,
    status::writer::StatusWriter,
};

/// Wakes the owner of a changed release record and every resource asking for that release; after
/// a cluster is listed in full, the resources whose specs name a release there or that hold one
/// there (not every resource: a relist of one cluster costs what that cluster concerns).
pub(crate) async fn forward_record_changes(
    (claims, releases, index): (Arc<Claims>, Arc<ReleaseIndex>, Arc<ControllerIndex>),
    mut changes: Receiver<RecordChange>,
    trigger: Sender<ObjectRef<TenancyController>>,
) {
    while let Some(change) = changes.recv().await {
        match change {
            RecordChange::Release(key, owner) => {
                wake(&index, &key, owner.as_ref(), &trigger).await;
            }
            RecordChange::Listed(cluster) => {
                let concerned: BTreeSet<OwnerId> = claims
                    .targeting(&cluster)
                    .into_iter()
                    .chain(releases.owners_in(&cluster))
                    .collect();
                tracing::debug!(%cluster, resources = concerned.len(), "release records listed; reconciling the resources it concerns");
                for o in concerned {
                    let _ = trigger
                        .send(ObjectRef::new(&o.name).within(&o.namespace))
                        .await;
                }
            }
        }
    }
}

/// Plans again, at once, the Controllers waiting on a release key that its claimant let go (it
/// was deleted, its spec or a policy changed), so none stays in `Conflict` behind a holder that
/// is gone.
pub(crate) async fn wake_freed_claims(
    claims: Arc<Claims>,
    trigger: Sender<ObjectRef<TenancyController>>,
) {
    loop {
        for o in claims.woken().await {
            tracing::debug!(controller = %o, "a release key it asks for was let go; reconciling");
            let _ = trigger
                .send(ObjectRef::new(&o.name).within(&o.namespace))
                .await;
        }
    }
}

async fn wake(
    index: &ControllerIndex,
    key: &ReleaseKey,
    owner: Option<&OwnerId>,
    trigger: &Sender<ObjectRef<TenancyController>>,
) {
    let owner = owner.map(|o| ObjectRef::new(&o.name).within(&o.namespace));
    for object in owner.into_iter().chain(index.asking(key)) {
        let _ = trigger.send(object).await;
    }
}

/// What the ownerless-release report reads: the hub's Controllers, the release records, the
/// releases left in clusters no longer registered, which Controllers this operator works, and
/// the metric it keeps.
pub(crate) struct Ownerless {
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<TenancyController>,
    /// Helm's release records per cluster.
    pub(crate) releases: Arc<ReleaseIndex>,
    /// Releases left in clusters no longer registered.
    pub(crate) orphans: Arc<DashMap<ReleaseKey, OwnerId>>,
    /// The one hub namespace reconciled (`--namespace`), if any.
    pub(crate) scope: Option<String>,
    /// The label selector of the Controllers reconciled (`--selector`), if any.
    pub(crate) selector: Option<String>,
    /// Operator metrics.
    pub(crate) metrics: Arc<Metrics>,
}

/// How often releases are checked for an owner that no longer exists.
pub(crate) const OWNERLESS_EVERY: Duration = Duration::from_secs(30);

/// Reports releases whose owning `Controller` no longer exists (deleted with
/// `deletionPolicy: Orphan`, or while the operator was away): each is logged once, counted in
/// `tenancy_hub_orphaned_releases`, left in place and never adopted by another resource.
pub(crate) async fn report_ownerless(ctx: Ownerless, cancel: tokio_util::sync::CancellationToken) {
    let mut known: BTreeSet<ReleaseKey> = BTreeSet::new();
    let mut tick = tokio::time::interval(OWNERLESS_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = cancel.cancelled() => return,
        }
        // Until the hub's Controllers are listed, every release would look ownerless.
        let listed = tokio::time::timeout(
            Duration::from_millis(200),
            ctx.controllers.wait_until_ready(),
        );
        if listed.await.is_err() {
            continue;
        }
        let present: HashSet<OwnerId> = ctx
            .controllers
            .state()
            .iter()
            .map(|c| owner_id(c))
            .collect();
        let ownerless: BTreeMap<ReleaseKey, OwnerId> = ctx
            .releases
            .managed(None)
            .into_iter()
            .filter(|(_, o)| {
                // With a selector, a Controller not listed may be another operator's.
                ctx.selector.is_none()
                    && ctx.scope.as_ref().is_none_or(|ns| *ns == o.namespace)
                    && !present.contains(o)
            })
            .collect();
        for (key, owner) in &ownerless {
            if !known.contains(key) {
                tracing::warn!(release = %key, controller = %owner, "release left without its Controller: it is left in place and never adopted by another resource; uninstall it with helm, or create the Controller again to manage it");
            }
        }
        known = ownerless.keys().cloned().collect();
        ctx.metrics.orphaned(known.len(), ctx.orphans.len());
    }
}

/// What the aggregation of watch changes uses: which scopes are watched and by whom, the model,
/// the status writer, the drift board (through the index) and the metrics.
pub(crate) struct Aggregation {
    /// The pod and workload watchers.
    pub(crate) watches: Arc<WatchSupervisor>,
    /// What runs, per cluster/namespace.
    pub(crate) model: Arc<Model>,
    /// Paced status writes.
    pub(crate) writer: Arc<StatusWriter>,
    /// The per-Controller index, for its drift board.
    pub(crate) index: Arc<ControllerIndex>,
    /// Operator metrics.
    pub(crate) metrics: Arc<Metrics>,
}

/// Applies tagged pod and workload changes to the model and marks the resources that see them.
pub(crate) async fn aggregate(ctx: Aggregation, mut changes: Receiver<Tagged>) {
    while let Some((scope, change)) = changes.recv().await {
        if !ctx.watches.is_watched(&scope) {
            continue; // a late event from a watcher just stopped
        }
        ctx.metrics.watch_event();
        if let Change::Lost(why) = &change {
            tracing::debug!(cluster = %scope.cluster, namespace = %scope.namespace, %why, "watch lost; marking entries stale");
            ctx.metrics.watch_restart(scope.cluster.as_str());
        }
        nudge_drift(&ctx, &scope, &change);
        ctx.model.apply((scope.clone(), change), Timestamp::now());
        for owner in ctx.watches.owners_of(&scope) {
            ctx.writer.touch(owner);
        }
    }
}

/// Asks for a drift check of the release a changed or deleted workload belongs to, so a hand-made
/// change to a Deployment, StatefulSet or DaemonSet is found within seconds.
fn nudge_drift(ctx: &Aggregation, scope: &ClusterNamespace, change: &Change) {
    let release = match change {
        Change::Workload(info) => info.release.clone(),
        Change::WorkloadGone(id) => ctx
            .model
            .scope(scope)
            .and_then(|s| s.workloads.get(id).and_then(|w| w.release.clone())),
        _ => None,
    };
    if let Some(release) = release {
        let key = ReleaseKey {
            scope: scope.clone(),
            release,
        };
        if ctx.index.drift.is_watched(&key) {
            ctx.index.drift.nudge(DriftCheckRequest::Release(key));
        }
    }
}

/// What the Helm outcomes loop uses: the index (outcomes, drift nudges, who asks for a release),
/// the Controllers and their Events, the Alerts and the metrics.
pub(crate) struct Outcomes {
    /// The per-Controller index.
    pub(crate) index: Arc<ControllerIndex>,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<TenancyController>,
    /// Events on `Controller` resources.
    pub(crate) events: Arc<Events>,
    /// Tells the Alerts, never waiting.
    pub(crate) notifier: Notifier,
    /// Operator metrics.
    pub(crate) metrics: Arc<Metrics>,
}

/// Records each finished Helm job, publishes its Event, and wakes the resource that owns it.
pub(crate) async fn record_outcomes(
    ctx: Outcomes,
    mut done: Receiver<Completed>,
    trigger: Sender<ObjectRef<TenancyController>>,
) {
    while let Some(completed) = done.recv().await {
        let key = completed.job.key().clone();
        let owner = completed.job.owner().clone();
        let (type_, reason, note) = describe(&completed);
        account(&ctx.metrics, &completed);
        if let Outcome::Applied { .. } = completed.outcome {
            // What Helm just applied is compared with its manifest at once.
            ctx.index
                .drift
                .nudge(DriftCheckRequest::Release(key.clone()));
        }
        match type_ {
            EventType::Normal => {
                tracing::info!(release = %key, elapsed_ms = completed.elapsed.as_millis() as u64, "{note}")
            }
            EventType::Warning => {
                tracing::warn!(release = %key, attempt = completed.attempt, "{note}")
            }
        }
        let settled = completed.stalled
            || matches!(
                completed.outcome,
                Outcome::Failed {
                    kind: FailureKind::Permanent,
                    ..
                }
            );
        ctx.index.record_outcome(
            key.clone(),
            LastOutcome {
                fingerprint: completed.job.fingerprint(),
                outcome: completed.outcome.clone(),
                owner: owner.clone(),
                settled,
                at: std::time::Instant::now(),
            },
        );
        if reason == "DriftRepaired" {
            ctx.notifier.tell(notice(
                &owner,
                Some((key.scope.cluster.as_str(), &key.release)),
                AlertEvent::DriftRepaired,
                reason,
                note.clone(),
            ));
        }
        let object = ObjectRef::new(&owner.name).within(&owner.namespace);
        if let Some(c) = ctx.controllers.get(&object) {
            publish(&ctx.events, &c, type_, reason, "Helm", note).await;
        }
        wake(&ctx.index, &key, Some(&owner), &trigger).await;
    }
}

/// Counts a finished Helm job, once: its outcome, how long it ran and how long it waited.
fn account(metrics: &Metrics, completed: &Completed) {
    let outcome = match &completed.outcome {
        Outcome::Applied { .. } => "applied",
        Outcome::Uninstalled => "uninstalled",
        Outcome::Failed { .. } => "failed",
    };
    metrics.queue_wait(completed.waited.as_secs_f64());
    if let (
        Job::Apply {
            repair: Some(_), ..
        },
        Outcome::Applied { .. },
    ) = (&completed.job, &completed.outcome)
    {
        metrics.drift(completed.job.key().scope.cluster.as_str(), "repaired");
    }
    metrics.helm_job(
        completed.job.key().scope.cluster.as_str(),
        outcome,
        completed.elapsed.as_secs_f64(),
    );
}

fn describe(completed: &Completed) -> (EventType, &'static str, String) {
    let key = completed.job.key();
    if let (
        Job::Apply {
            repair: Some(drift),
            ..
        },
        Outcome::Applied { revision, .. },
    ) = (&completed.job, &completed.outcome)
    {
        return (
            EventType::Normal,
            "DriftRepaired",
            format!("repaired drift of {key} (revision {revision}): {drift}"),
        );
    }
    if let (Job::Rollback { from, .. }, Outcome::Applied { .. }) =
        (&completed.job, &completed.outcome)
    {
        return (
            EventType::Normal,
            "RolledBack",
            format!(
                "rolled {key} back to revision {} after the rollout halted",
                from - 1
            ),
        );
    }
    match &completed.outcome {
        Outcome::Applied {
            revision,
            chart_version,
            adopted_from: Some(previous),
            ..
        } => (
            EventType::Normal,
            "Adopted",
            format!(
                "adopted {key} (chart {chart_version}, revision {revision}), upgrading the release tenancy-hub did not own; its previous record carried the labels {previous}"
            ),
        ),
        Outcome::Applied {
            revision: 1,
            chart_version,
            tests,
            ..
        } => (
            EventType::Normal,
            "Installed",
            format!(
                "installed {key} (chart {chart_version}, revision 1){}",
                tests_passed(tests)
            ),
        ),
        Outcome::Applied {
            revision,
            chart_version,
            tests,
            ..
        } => (
            EventType::Normal,
            "Upgraded",
            format!(
                "upgraded {key} (chart {chart_version}, revision {revision}){}",
                tests_passed(tests)
            ),
        ),
        Outcome::Uninstalled => (
            EventType::Normal,
            "Uninstalled",
            format!("uninstalled {key}"),
        ),
        Outcome::Failed { message, .. } => {
            let retry = match completed.next_retry {
                Some(d) => format!("retrying in {}s", d.as_secs()),
                None if completed.stalled => format!(
                    "stalled after {} tries; not retried until the spec changes",
                    completed.attempt
                ),
                None => "not retried until the spec changes".to_owned(),
            };
            (
                EventType::Warning,
                "Failed",
                format!("{key} failed: {message}; {retry}"),
            )
        }
    }
}

/// What a change of a cluster's reachability sets off work in: the queue, the drift board
/// (through the index), and every Controller's status.
pub(crate) struct HealthChanges {
    /// The queue of Helm jobs.
    pub(crate) queue: HelmQueue,
    /// The per-Controller index, for its drift board.
    pub(crate) index: Arc<ControllerIndex>,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<TenancyController>,
    /// Paced status writes.
    pub(crate) writer: Arc<StatusWriter>,
}

/// What an Event says of the tests run after an install or upgrade: nothing when none ran.
fn tests_passed(tests: &[crate::queue::TestResult]) -> String {
    match tests.len() {
        0 => String::new(),
        1 => format!("; its test {} passed", tests[0].name),
        n => format!("; its {n} tests passed"),
    }
}

/// What a change of a cluster's reachability sets off: when it is back, its waiting jobs run at
/// once; either way every resource's status is recomputed.
pub(crate) fn cluster_health_changed(
    ctx: &HealthChanges,
    cluster: &crate::api::key::ClusterName,
    reachable: bool,
) {
    if reachable {
        let expedited = ctx.queue.expedite(cluster);
        tracing::debug!(%cluster, expedited, "jobs waiting for the cluster run now");
        // Whatever happened while it was away is looked for now.
        ctx.index
            .drift
            .nudge(DriftCheckRequest::Cluster(cluster.clone()));
    }
    for c in ctx.controllers.state() {
        ctx.writer.touch(ObjectRef::from_obj(&*c));
    }
}

/// What refreshing the charts reads: the catalog, the Controllers naming charts, and the
/// policies and settings that scope each fetch.
pub(crate) struct ChartRefresh {
    /// What is known of each chart.
    pub(crate) charts: Arc<charts::ChartCatalog>,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<TenancyController>,
    /// Every `TenancyPolicy` on the hub.
    pub(crate) policies: Store<crate::api::policy::TenancyPolicy>,
    /// The chart home and the policy settings.
    pub(crate) settings: Settings,
}

/// How often Git sources are looked at for a due resolution.
const GIT_TICK: std::time::Duration = std::time::Duration::from_secs(5);

/// Every interval, reads the chart-home directories and resolves the repository and OCI charts
/// the hub's Controllers name again, and wakes the Controllers whose charts changed.
pub(crate) async fn keep_fresh(
    ctx: ChartRefresh,
    trigger: Sender<ObjectRef<TenancyController>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let interval = ctx.charts.interval();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Git sources have intervals of their own (10s at the least): their refs are looked at
    // this often, the fetcher asked only of those whose interval has passed.
    let mut git_tick = tokio::time::interval_at(tokio::time::Instant::now() + GIT_TICK, GIT_TICK);
    git_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let git_only = tokio::select! {
            _ = tick.tick() => false,
            _ = git_tick.tick() => true,
            () = ctx.charts.git_woken() => true,
            () = cancel.cancelled() => return,
        };
        let controllers = ctx.controllers.state();
        let home = &ctx.settings.chart_home;
        let admission = admission_of(&ctx.policies, &ctx.settings);
        let wanted = |c: &TenancyController| {
            let namespace = c.namespace().unwrap_or_default();
            charts::wanted_by(&namespace, &c.spec, home, &|chart| {
                admission.fetch_scope(&namespace, chart)
            })
        };
        let all: HashSet<charts::Wanted> = controllers.iter().flat_map(|c| wanted(c)).collect();
        if git_only {
            let readers = tokio::select! {
                readers = ctx.charts.refresh_git_files() => readers,
                () = cancel.cancelled() => return,
            };
            for owner in readers {
                tracing::debug!(%owner, "a Git values file it reads changed; reconciling");
                let _ = trigger
                    .send(ObjectRef::new(&owner.name).within(&owner.namespace))
                    .await;
            }
        }
        let refresh = async {
            match git_only {
                true => ctx.charts.refresh_git(&all).await,
                false => ctx.charts.refresh(&all).await,
            }
        };
        let changed = tokio::select! {
            changed = refresh => changed,
            () = cancel.cancelled() => return,
        };
        if changed.is_empty() {
            continue;
        }
        for c in &controllers {
            if !wanted(c).is_disjoint(&changed) {
                tracing::debug!(controller = %ObjectRef::from_obj(&**c), "a chart it uses changed; reconciling");
                let _ = trigger.send(ObjectRef::from_obj(&**c)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{metrics::Gauges, plan::Job};

    #[test]
    fn a_finished_helm_job_is_counted_and_timed_exactly_once() {
        let metrics = Metrics::new();
        let completed = Completed {
            job: Job::Uninstall {
                key: "member-1/team-a/web".parse().unwrap(),
                owner: OwnerId {
                    namespace: "default".into(),
                    name: "a".into(),
                },
                identity: None,
                settings: Default::default(),
            },
            outcome: Outcome::Uninstalled,
            attempt: 1,
            waited: Duration::from_millis(250),
            elapsed: Duration::from_secs(2),
            next_retry: None,
            stalled: false,
        };
        account(&metrics, &completed);
        let text = metrics.render(&Gauges::default());
        let jobs: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tenancy_hub_helm_jobs_total"))
            .collect();
        assert_eq!(
            jobs,
            ["tenancy_hub_helm_jobs_total{cluster=\"member-1\",outcome=\"uninstalled\"} 1"]
        );
        for line in [
            "tenancy_hub_helm_job_duration_seconds_count{cluster=\"member-1\"} 1",
            "tenancy_hub_helm_job_duration_seconds_sum{cluster=\"member-1\"} 2.0",
            "tenancy_hub_queue_wait_seconds_count 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}
