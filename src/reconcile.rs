//! Hub reconciler: observe, plan, enqueue and report for each `Controller`; the finalizer uninstalls.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType},
        finalizer::{Event, finalizer},
        reflector::ObjectRef,
    },
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::{
    Context,
    crd::{Controller, DeletionPolicy},
    key::{ClusterName, ReleaseKey},
    model::{Change, Tagged},
    plan::{self, Applied, Inputs, Job, OwnerId},
    queue::{Completed, FailureKind, Outcome},
    releases::RecordChange,
    status::{self, LastOutcome, ReleaseView},
};

/// Finalizer that holds a resource until its releases are uninstalled everywhere.
pub const FINALIZER: &str = "multitenancy.dev/cleanup";

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong reconciling one resource.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the hub failed.
    #[error("Controller {owner}: {action}: {source}")]
    Hub {
        /// The resource.
        owner: OwnerId,
        /// What was being done.
        action: &'static str,
        /// The error.
        source: Box<kube::Error>,
    },
    /// Deletion waits for releases to be uninstalled, jobs to finish or clusters to be reached.
    #[error("Controller {owner} is being deleted: {waiting}")]
    CleanupPending {
        /// The resource.
        owner: OwnerId,
        /// What it waits for.
        waiting: String,
    },
    /// The finalizer machinery failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

/// The owner id of a resource.
pub fn owner_id(c: &Controller) -> OwnerId {
    OwnerId {
        namespace: c.namespace().unwrap_or_default(),
        name: c.name_any(),
    }
}

/// Reconciles one `Controller`.
pub async fn reconcile(obj: Arc<Controller>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let api: Api<Controller> =
        Api::namespaced(ctx.hub.clone(), &obj.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Event::Apply(c) => apply(&c, &ctx).await,
            Event::Cleanup(c) => cleanup(&c, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics
        .reconcile(started.elapsed().as_secs_f64(), result.is_ok());
    result
}

/// Retries failed reconciles: soon while deletion waits, with a longer pause otherwise.
pub fn error_policy(_obj: Arc<Controller>, error: &Error, _ctx: Arc<Context>) -> Action {
    match error {
        Error::Finalizer(inner)
            if matches!(
                **inner,
                kube::runtime::finalizer::Error::CleanupFailed(Error::CleanupPending { .. })
            ) =>
        {
            tracing::info!(%error);
            Action::requeue(Duration::from_secs(3))
        }
        _ => {
            tracing::warn!(%error, "reconcile failed; retrying in 15s");
            Action::requeue(Duration::from_secs(15))
        }
    }
}

fn created_secs(c: &Controller) -> i64 {
    c.meta()
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second())
}

/// Which resource holds each release key, over every resource on the hub not being deleted.
fn claims(
    ctx: &Context,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    applied: &HashMap<ReleaseKey, Applied>,
) -> HashMap<ReleaseKey, OwnerId> {
    let all = ctx.controllers.state();
    let any_chart = |_: &plan::ChartSource, _: Option<&str>| plan::ChartLookup::Found {
        version: None,
        digest: None,
    };
    plan::claims(
        all.iter()
            .filter(|c| c.meta().deletion_timestamp.is_none())
            .map(|c| {
                let owner = owner_id(c);
                let named = plan::desired(
                    &owner,
                    &c.spec,
                    clusters,
                    &ctx.settings.chart_home,
                    &any_chart,
                )
                .named;
                (owner, created_secs(c), named.into_iter().collect())
            }),
        applied,
    )
}

/// True when enqueueing this job would repeat work: it already failed in a way retrying cannot
/// fix (or as often as allowed), or it was just applied and the release records have not caught
/// up with it yet.
fn redundant(ctx: &Context, job: &Job, applied: &HashMap<ReleaseKey, Applied>) -> bool {
    ctx.outcomes.get(job.key()).is_some_and(|last| {
        last.fingerprint == job.fingerprint()
            && match last.outcome {
                Outcome::Failed { .. } => last.settled,
                Outcome::Applied { revision, .. } => applied
                    .get(job.key())
                    .is_some_and(|a| a.revision < revision),
                Outcome::Uninstalled => false,
            }
    })
}

/// Releases of `owner` that a finished job installed and the release records do not show yet.
fn just_applied(
    ctx: &Context,
    owner: &OwnerId,
    applied: &HashMap<ReleaseKey, Applied>,
) -> Vec<ReleaseKey> {
    ctx.outcomes
        .iter()
        .filter(|o| o.owner == *owner)
        .filter(|o| match o.outcome {
            Outcome::Applied { revision, .. } => applied
                .get(o.key())
                .is_none_or(|a| a.owner.as_ref() != Some(owner) || a.revision < revision),
            _ => false,
        })
        .map(|o| o.key().clone())
        .collect()
}

async fn apply(c: &Controller, ctx: &Context) -> Result<Action> {
    let owner = owner_id(c);
    let clusters = ctx.registry.load().labels();
    let (applied, synced) = ctx.releases.snapshot();
    let claims = claims(ctx, &clusters, &applied);
    ctx.charts.prepare(&c.spec, &ctx.settings.chart_home).await;
    let lookup =
        |source: &plan::ChartSource, version: Option<&str>| ctx.charts.lookup(source, version);
    let plan = plan::plan(&Inputs {
        owner: &owner,
        spec: &c.spec,
        clusters: &clusters,
        synced: &synced,
        applied: &applied,
        claims: &claims,
        chart_home: &ctx.settings.chart_home,
        chart_lookup: &lookup,
        now: Timestamp::now().as_second(),
        pending_timeout_secs: ctx.settings.pending_timeout.as_secs() as i64,
    });
    let planned: HashSet<&ReleaseKey> = plan.jobs.iter().map(Job::key).collect();
    let dropped = ctx.queue.retain_planned(&owner, &planned);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "dropped queued Helm jobs the newest spec no longer asks for");
    }
    for job in plan.jobs.iter().filter(|j| !redundant(ctx, j, &applied)) {
        ctx.queue.enqueue(job.clone());
    }
    let keys: Vec<&ReleaseKey> = plan
        .desired
        .iter()
        .map(|r| &r.key)
        .chain(plan.jobs.iter().map(Job::key))
        .collect();
    let busy: BTreeSet<ReleaseKey> = keys
        .iter()
        .filter(|k| ctx.queue.is_busy(k))
        .map(|k| (*k).clone())
        .collect();
    let outcomes: HashMap<ReleaseKey, LastOutcome> = keys
        .iter()
        .filter_map(|k| ctx.outcomes.get(*k).map(|o| ((*k).clone(), o.clone())))
        .collect();
    let mut report = status::releases(&ReleaseView {
        plan: &plan,
        applied: &applied,
        outcomes: &outcomes,
        busy: &busy,
        synced: &synced,
        generation: c.meta().generation,
    });
    let orphans: Vec<ReleaseKey> = ctx
        .orphans
        .iter()
        .filter(|o| *o.value() == owner)
        .map(|o| o.key().clone())
        .collect();
    status::add_orphans(&mut report, &orphans);
    report_new_problems(ctx, c, &plan.problems).await;
    let object = ObjectRef::from_obj(c);
    ctx.writer.submit(object.clone(), report);
    // Watch every cluster/namespace the spec names, so what runs under a release that cannot be
    // planned right now is still reported.
    let scopes = plan
        .desired
        .iter()
        .map(|r| r.key.scope.clone())
        .chain(
            plan.problems
                .iter()
                .filter(|p| !matches!(p, plan::Problem::Conflict { .. }))
                .filter_map(plan::Problem::release)
                .filter(|k| {
                    applied
                        .get(*k)
                        .is_some_and(|a| a.owner.as_ref() == Some(&owner))
                })
                .map(|k| k.scope.clone()),
        )
        .filter(|s| clusters.contains_key(&s.cluster))
        .collect();
    for gone in ctx.watches.set(&object, scopes, &ctx.registry.load()) {
        ctx.model.forget(&gone);
    }
    let claimed = plan.desired.iter().map(|r| r.key.clone());
    ctx.interest.set(
        &ObjectRef::from_obj(c),
        claimed.chain(conflicts(&plan.problems)),
    );
    let settling = !busy.is_empty() || !plan.waiting.is_empty();
    let mut next = if settling { 30 } else { 300 };
    if let Some(recheck) = plan.recheck_in {
        next = next.min(recheck.max(1) as u64);
    }
    Ok(Action::requeue(Duration::from_secs(next)))
}

fn conflicts(problems: &[plan::Problem]) -> impl Iterator<Item = ReleaseKey> + '_ {
    problems.iter().filter_map(|p| match p {
        plan::Problem::Conflict { key, .. } => Some(key.clone()),
        _ => None,
    })
}

/// Which resources ask for each release key, so news about a release wakes all of them.
#[derive(Default)]
pub struct Interest {
    by_key: DashMap<ReleaseKey, HashSet<ObjectRef<Controller>>>,
    by_owner: DashMap<ObjectRef<Controller>, Vec<ReleaseKey>>,
}

impl Interest {
    /// Records the keys one resource asks for, replacing what it asked for before.
    pub fn set(&self, owner: &ObjectRef<Controller>, keys: impl Iterator<Item = ReleaseKey>) {
        let keys: Vec<ReleaseKey> = keys.collect();
        if let Some((_, old)) = self.by_owner.remove(owner) {
            for key in old {
                if let Some(mut set) = self.by_key.get_mut(&key) {
                    set.remove(owner);
                }
                self.by_key.remove_if(&key, |_, set| set.is_empty());
            }
        }
        for key in &keys {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(owner.clone());
        }
        self.by_owner.insert(owner.clone(), keys);
    }

    /// The resources asking for a key.
    pub fn of(&self, key: &ReleaseKey) -> Vec<ObjectRef<Controller>> {
        self.by_key
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Wakes the owner of a changed release record and every resource asking for that release; after
/// a cluster is listed in full, every resource.
pub async fn forward_record_changes(
    ctx: Arc<Context>,
    mut changes: UnboundedReceiver<RecordChange>,
    trigger: UnboundedSender<ObjectRef<Controller>>,
) {
    while let Some(change) = changes.recv().await {
        match change {
            RecordChange::Release(key, owner) => wake(&ctx, &key, owner.as_ref(), &trigger),
            RecordChange::Listed(cluster) => {
                tracing::debug!(%cluster, "release records listed; reconciling every resource");
                for c in ctx.controllers.state() {
                    let _ = trigger.send(ObjectRef::from_obj(&*c));
                }
            }
        }
    }
}

fn wake(
    ctx: &Context,
    key: &ReleaseKey,
    owner: Option<&OwnerId>,
    trigger: &UnboundedSender<ObjectRef<Controller>>,
) {
    let owner = owner.map(|o| ObjectRef::new(&o.name).within(&o.namespace));
    for object in owner.into_iter().chain(ctx.interest.of(key)) {
        let _ = trigger.send(object);
    }
}

/// Logs and publishes the problems that are new since the resource's last plan, so one problem
/// is told once per change of the spec or the world, not on every reconcile.
async fn report_new_problems(ctx: &Context, c: &Controller, problems: &[plan::Problem]) {
    let owner = owner_id(c);
    let notes: BTreeSet<String> = problems.iter().map(ToString::to_string).collect();
    let before = ctx
        .reported
        .insert(owner.clone(), notes)
        .unwrap_or_default();
    for problem in problems {
        let note = problem.to_string();
        if before.contains(&note) {
            continue;
        }
        tracing::warn!(controller = %owner, problem = %note, "spec cannot be carried out as written");
        publish(ctx, c, EventType::Warning, problem.reason(), "Plan", note).await;
    }
}

/// A repeat of one reason and note on one resource within this time is not published again.
pub const EVENT_REPEAT: Duration = Duration::from_secs(300);
/// Events one resource may get per minute.
pub const EVENT_BURST: u32 = 20;

/// Keeps a flapping release from flooding the hub with Events.
#[derive(Default)]
pub struct EventLimiter {
    windows: std::sync::Mutex<HashMap<ObjectRef<Controller>, EventWindow>>,
}

struct EventWindow {
    minute: std::time::Instant,
    count: u32,
    recent: HashMap<(String, String), std::time::Instant>,
}

impl EventLimiter {
    /// Whether an Event may be published now: not a recent repeat, and within the resource's burst.
    pub fn allow(
        &self,
        object: &ObjectRef<Controller>,
        reason: &str,
        note: &str,
        now: std::time::Instant,
    ) -> bool {
        let mut windows = self.windows.lock().expect("event limiter lock");
        let w = windows
            .entry(object.clone())
            .or_insert_with(|| EventWindow {
                minute: now,
                count: 0,
                recent: HashMap::new(),
            });
        w.recent
            .retain(|_, at| now.duration_since(*at) < EVENT_REPEAT);
        if now.duration_since(w.minute) >= Duration::from_secs(60) {
            w.minute = now;
            w.count = 0;
        }
        let key = (reason.to_owned(), note.to_owned());
        if w.recent.contains_key(&key) || w.count >= EVENT_BURST {
            return false;
        }
        w.recent.insert(key, now);
        w.count += 1;
        true
    }
}

/// Publishes an Event on a `Controller`, within the limiter's bounds; failures are logged, never fatal.
pub async fn publish(
    ctx: &Context,
    c: &Controller,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    if !ctx.events.allow(
        &ObjectRef::from_obj(c),
        reason,
        &note,
        std::time::Instant::now(),
    ) {
        tracing::debug!(reason, "event suppressed by the rate limit");
        return;
    }
    let event = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &c.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish an event");
    }
}

/// Deletion: uninstalls the resource's releases everywhere (or, with `deletionPolicy: Orphan`,
/// leaves them), waiting only for clusters that hold or may hold them, and for its running jobs.
async fn cleanup(c: &Controller, ctx: &Context) -> Result<Action> {
    let owner = owner_id(c);
    let object = ObjectRef::from_obj(c);
    let dropped = ctx.queue.drop_applies(&owner);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "being deleted: dropped its queued installs and upgrades");
    }
    let (applied, synced) = ctx.releases.snapshot();
    let mut owned: BTreeSet<ReleaseKey> = applied
        .values()
        .filter(|a| a.owner.as_ref() == Some(&owner))
        .map(|a| a.key.clone())
        .collect();
    owned.extend(just_applied(ctx, &owner, &applied));
    let running = ctx.queue.running_for(&owner);
    if c.spec.deletion_policy == DeletionPolicy::Orphan && running.is_empty() {
        let left: Vec<String> = owned.iter().map(ToString::to_string).collect();
        let note = if left.is_empty() {
            "deletionPolicy Orphan: no release to leave".to_owned()
        } else {
            format!(
                "deletionPolicy Orphan: releases left in place: {}",
                left.join(", ")
            )
        };
        tracing::warn!(controller = %owner, releases = ?left, "deleted with deletionPolicy Orphan; its releases are left in place");
        publish(ctx, c, EventType::Warning, "Orphaned", "Delete", note).await;
        forget(ctx, &object);
        return Ok(Action::await_change());
    }
    if c.spec.deletion_policy == DeletionPolicy::Delete {
        for key in owned.iter().filter(|k| !running.contains(k)) {
            ctx.queue.enqueue(Job::Uninstall {
                key: key.clone(),
                owner: owner.clone(),
            });
        }
    }
    // Clusters that may hold its releases: those the spec targets, those its status lists, and
    // those where its releases are known to be.
    let registered = ctx.registry.load().labels();
    let mut holding: BTreeSet<ClusterName> = c
        .spec
        .tenancies
        .iter()
        .flat_map(|t| plan::targets(t, &registered).0)
        .collect();
    holding.extend(owned.iter().map(|k| k.scope.cluster.clone()));
    holding.extend(
        c.status
            .iter()
            .flat_map(|s| &s.updated_tenancies)
            .filter_map(|t| t.cluster.parse::<ClusterName>().ok()),
    );
    let unreached: Vec<ClusterName> = holding
        .into_iter()
        .filter(|c| registered.contains_key(c) && !synced.contains(c))
        .collect();
    if owned.is_empty() && running.is_empty() && unreached.is_empty() {
        forget(ctx, &object);
        tracing::info!(controller = %owner, "every release uninstalled; removing the finalizer");
        return Ok(Action::await_change());
    }
    let waiting = describe_wait(ctx, &owned, &running, &unreached);
    ctx.writer.submit(
        object,
        status::deleting(c.status.as_ref(), c.meta().generation, waiting.clone()),
    );
    Err(Error::CleanupPending { owner, waiting })
}

/// What a deletion waits for, in words: releases, running jobs, and clusters with the time they
/// were last seen.
fn describe_wait(
    ctx: &Context,
    owned: &BTreeSet<ReleaseKey>,
    running: &[ReleaseKey],
    unreached: &[ClusterName],
) -> String {
    let mut parts = Vec::new();
    if !owned.is_empty() {
        let list: Vec<String> = owned.iter().take(10).map(ToString::to_string).collect();
        parts.push(format!(
            "{} release(s) to be uninstalled ({}{})",
            owned.len(),
            list.join(", "),
            if owned.len() > 10 { ", …" } else { "" }
        ));
    }
    if !running.is_empty() {
        parts.push(format!("{} running Helm job(s)", running.len()));
    }
    if !unreached.is_empty() {
        let clusters: Vec<String> = unreached
            .iter()
            .map(|c| match ctx.health.get(c).and_then(|h| h.last_seen) {
                Some(seen) => format!("{c} (unreachable, last seen {seen})"),
                None => format!("{c} (not reached since the operator started)"),
            })
            .collect();
        parts.push(format!(
            "clusters {} to be reached; if a cluster is gone for good, set spec.deletionPolicy: Orphan to let the resource go",
            clusters.join(", ")
        ));
    }
    format!("waiting for {}", parts.join(" and for "))
}

/// Forgets everything kept for a resource that is gone.
fn forget(ctx: &Context, object: &ObjectRef<Controller>) {
    for gone in ctx
        .watches
        .set(object, BTreeSet::new(), &ctx.registry.load())
    {
        ctx.model.forget(&gone);
    }
    ctx.interest.set(object, std::iter::empty());
    ctx.writer.forget(object);
    let owner = OwnerId {
        namespace: object.namespace.clone().unwrap_or_default(),
        name: object.name.clone(),
    };
    ctx.reported.remove(&owner);
    ctx.outcomes.retain(|_, o| o.owner != owner);
}

/// How often releases are checked for an owner that no longer exists.
pub const OWNERLESS_EVERY: Duration = Duration::from_secs(30);

/// Reports releases whose owning `Controller` no longer exists (deleted with
/// `deletionPolicy: Orphan`, or while the operator was away): each is logged once, counted in
/// `tenancy_hub_orphaned_releases`, left in place and never adopted by another resource.
pub async fn report_ownerless(ctx: Arc<Context>, cancel: tokio_util::sync::CancellationToken) {
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
        let (applied, _) = ctx.releases.snapshot();
        let ownerless: BTreeMap<ReleaseKey, OwnerId> = applied
            .into_values()
            .filter_map(|a| Some((a.key, a.owner?)))
            .filter(|(_, o)| {
                ctx.settings
                    .scope
                    .as_ref()
                    .is_none_or(|ns| *ns == o.namespace)
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

/// Applies tagged pod and workload changes to the model and marks the resources that see them.
pub async fn aggregate(ctx: Arc<Context>, mut changes: UnboundedReceiver<Tagged>) {
    while let Some((scope, change)) = changes.recv().await {
        if !ctx.watches.is_watched(&scope) {
            continue; // a late event from a watcher just stopped
        }
        ctx.metrics.watch_event();
        if let Change::Lost(why) = &change {
            tracing::debug!(cluster = %scope.cluster, namespace = %scope.namespace, %why, "watch lost; marking entries stale");
            ctx.metrics.watch_restart(scope.cluster.as_str());
        }
        ctx.model.apply((scope.clone(), change), Timestamp::now());
        for owner in ctx.watches.owners_of(&scope) {
            ctx.writer.touch(owner);
        }
    }
}

/// Records each finished Helm job, publishes its Event, and wakes the resource that owns it.
pub async fn record_outcomes(
    ctx: Arc<Context>,
    mut done: UnboundedReceiver<Completed>,
    trigger: UnboundedSender<ObjectRef<Controller>>,
) {
    while let Some(completed) = done.recv().await {
        let key = completed.job.key().clone();
        let owner = completed.job.owner().clone();
        let (type_, reason, note) = describe(&completed);
        let outcome = match &completed.outcome {
            Outcome::Applied { .. } => "applied",
            Outcome::Uninstalled => "uninstalled",
            Outcome::Failed { .. } => "failed",
        };
        ctx.metrics.queue_wait(completed.waited.as_secs_f64());
        ctx.metrics.helm_job(
            key.scope.cluster.as_str(),
            outcome,
            completed.elapsed.as_secs_f64(),
        );
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
        ctx.outcomes.insert(
            key.clone(),
            LastOutcome {
                fingerprint: completed.job.fingerprint(),
                outcome: completed.outcome.clone(),
                owner: owner.clone(),
                settled,
            },
        );
        let object = ObjectRef::new(&owner.name).within(&owner.namespace);
        if let Some(c) = ctx.controllers.get(&object) {
            publish(&ctx, &c, type_, reason, "Helm", note).await;
        }
        wake(&ctx, &key, Some(&owner), &trigger);
    }
}

fn describe(completed: &Completed) -> (EventType, &'static str, String) {
    let key = completed.job.key();
    match &completed.outcome {
        Outcome::Applied {
            revision: 1,
            chart_version,
        } => (
            EventType::Normal,
            "Installed",
            format!("installed {key} (chart {chart_version}, revision 1)"),
        ),
        Outcome::Applied {
            revision,
            chart_version,
        } => (
            EventType::Normal,
            "Upgraded",
            format!("upgraded {key} (chart {chart_version}, revision {revision})"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_and_bursts_of_events_are_held_back() {
        let limiter = EventLimiter::default();
        let (a, b) = (
            ObjectRef::new("a").within("ns"),
            ObjectRef::new("b").within("ns"),
        );
        let t = std::time::Instant::now();
        assert!(limiter.allow(&a, "Failed", "x failed", t));
        assert!(
            !limiter.allow(&a, "Failed", "x failed", t + Duration::from_secs(10)),
            "a repeat is held back"
        );
        assert!(
            limiter.allow(&b, "Failed", "x failed", t),
            "other resources are not affected"
        );
        assert!(
            limiter.allow(&a, "Failed", "x failed", t + EVENT_REPEAT),
            "a repeat after the window goes out"
        );
        let burst = (0..100)
            .filter(|i| limiter.allow(&a, "Upgraded", &format!("n{i}"), t + EVENT_REPEAT))
            .count();
        assert_eq!(
            burst as u32,
            EVENT_BURST - 1,
            "one resource gets at most the burst per minute"
        );
        assert!(limiter.allow(
            &a,
            "Upgraded",
            "later",
            t + EVENT_REPEAT + Duration::from_secs(60)
        ));
    }
}
