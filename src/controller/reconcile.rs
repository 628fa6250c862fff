//! Hub reconciler: observe, plan, enqueue and report for each `Controller`; the finalizer uninstalls.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{
        controller::Action,
        events::EventType,
        finalizer::{Event, finalizer},
        reflector::ObjectRef,
    },
};

use crate::controller::events::{EVENT_BURST, publish};

use crate::{
    api::crd::{Controller, DeletionPolicy},
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    controller::context::Context,
    observe::drift::RepairVerdict,
    plan::rollout,
    plan::{self, Applied, Inputs, Job, OwnerId, owner_id},
    queue::Outcome,
    status::build::cluster_readiness,
    status::report::{self as status, LastOutcome, ReleaseView},
};

/// Finalizer that holds a resource until its releases are uninstalled everywhere.
pub(crate) const FINALIZER: &str = "multitenancy.dev/cleanup";

/// Result alias for this module.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong reconciling one resource.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
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

impl Error {
    /// The `reason` label a failure is counted under in `tenancy_hub_reconcile_errors_total`:
    /// an apply or cleanup failing inside the finalizer counts as what it is.
    pub(crate) fn metric_label(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::CleanupPending { .. } => "cleanup_pending",
            Error::Finalizer(inner) => match &**inner {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
        }
    }
}

/// Reconciles one `Controller`.
pub(crate) async fn reconcile(obj: Arc<Controller>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = obj.namespace().unwrap_or_default();
    if !ctx.shards.owns(&namespace, &obj.name_any()) {
        // Another replica leads its shard; gaining the shard plans every resource again.
        forget(&ctx, &ObjectRef::from_obj(&*obj));
        return Ok(Action::await_change());
    }
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
    ctx.metrics.reconcile(
        started.elapsed().as_secs_f64(),
        result.as_ref().err().map(Error::metric_label),
    );
    result
}

/// Retries failed reconciles: soon while deletion waits, with a longer pause otherwise.
pub(crate) fn error_policy(_obj: Arc<Controller>, error: &Error, _ctx: Arc<Context>) -> Action {
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

/// True when enqueueing this job would repeat work: it already failed in a way retrying cannot
/// fix (or as often as allowed), or it was just applied and the release records have not caught
/// up with it yet.
fn redundant(ctx: &Context, job: &Job, applied: &HashMap<ReleaseKey, Applied>) -> bool {
    ctx.index.outcome(job.key()).is_some_and(|last| {
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
    ctx.index
        .outcomes_of(owner)
        .into_iter()
        .filter(|(key, o)| match o.outcome {
            Outcome::Applied { revision, .. } => applied
                .get(key)
                .is_none_or(|a| a.owner.as_ref() != Some(owner) || a.revision < revision),
            _ => false,
        })
        .map(|(key, _)| key)
        .collect()
}

async fn apply(c: &Controller, ctx: &Context) -> Result<Action> {
    let owner = owner_id(c);
    let basis = ctx.claim_basis();
    let clusters = basis.labels.clone();
    // Only the keys this spec names and the releases it holds are read: the cost of a reconcile
    // does not grow with the number of other resources.
    ctx.claims.update(c, &basis);
    let named = ctx.claims.keys_of(&owner);
    let applied = ctx.releases.applied_for(&owner, &named);
    let synced = ctx.releases.synced();
    let claims = ctx.claims.holders(&named, &applied);
    let admission = basis.admission;
    ctx.charts
        .prepare(&c.spec, &ctx.settings.chart_home, &|chart| {
            admission.fetch_scope(&owner.namespace, chart)
        })
        .await;
    let lookup =
        |source: &plan::ChartSource, version: Option<&str>| ctx.charts.lookup(source, version);
    let drifted = ctx.index.drift.drifted(&applied);
    let mut plan = crate::plan::offload(crate::plan::claims::named_charts(c), || {
        plan::plan(&Inputs {
            owner: &owner,
            spec: &c.spec,
            clusters: &clusters,
            synced: &synced,
            applied: &applied,
            claims: &claims,
            admission: &admission,
            chart_home: &ctx.settings.chart_home,
            chart_lookup: &lookup,
            now: Timestamp::now().as_second(),
            pending_timeout_secs: ctx.settings.pending_timeout.as_secs() as i64,
            drifted: &drifted,
        })
    });
    ctx.index.drift.track(&owner, &plan.desired);
    limit_repairs(ctx, c, &mut plan.jobs, &drifted).await;
    // The report is built once, from the plan before the gate (which judges the clusters by it),
    // and brought up to the plan the gate lets through once its jobs are queued.
    let drift = ctx.index.drift.statuses(&applied);
    let (queued_before, outcomes) = jobs_of(ctx, &plan);
    let report = status::releases(&ReleaseView {
        plan: &plan,
        applied: &applied,
        outcomes: &outcomes,
        busy: &queued_before,
        synced: &synced,
        generation: c.meta().generation,
        drift: &drift,
    });
    let rollout = gate_rollout(ctx, c, &mut plan, &applied, &report, &queued_before).await;
    let planned: HashSet<&ReleaseKey> = plan.jobs.iter().map(Job::key).collect();
    let dropped = ctx.queue.retain_planned(&owner, &planned);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "dropped queued Helm jobs the newest spec no longer asks for");
    }
    for job in plan.jobs.iter().filter(|j| !redundant(ctx, j, &applied)) {
        ctx.queue.enqueue(job.clone());
    }
    let (busy, outcomes) = jobs_of(ctx, &plan);
    let view = ReleaseView {
        plan: &plan,
        applied: &applied,
        outcomes: &outcomes,
        busy: &busy,
        synced: &synced,
        generation: c.meta().generation,
        drift: &drift,
    };
    let mut report = status::after_gate(report, &view, &queued_before);
    let orphans: Vec<ReleaseKey> = ctx
        .orphans
        .iter()
        .filter(|o| *o.value() == owner)
        .map(|o| o.key().clone())
        .collect();
    status::add_orphans(&mut report, &orphans);
    report.rollout = rollout.as_ref().map(|r| r.state.clone());
    report_new_problems(ctx, c, &plan.problems, &plan.warnings).await;
    let object = ObjectRef::from_obj(c);
    ctx.writer.submit(object.clone(), report);
    // Watch every cluster/namespace the spec names, so what runs under a release that cannot be
    // planned right now is still reported.
    let scopes = plan
        .desired
        .iter()
        .map(|r| r.key.scope.clone())
        .chain(plan.suspended.iter().map(|k| k.scope.clone()))
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
    for gone in ctx.watches.set(&object, scopes, &ctx.links) {
        ctx.model.forget(&gone);
    }
    let claimed = plan.desired.iter().map(|r| r.key.clone());
    ctx.index.ask(
        &ObjectRef::from_obj(c),
        claimed.chain(conflicts(&plan.problems)),
    );
    let settling = !busy.is_empty() || !plan.waiting.is_empty();
    let mut next = if settling { 30 } else { 300 };
    if let Some(recheck) = plan.recheck_in {
        next = next.min(recheck.max(1) as u64);
    }
    if rollout.as_ref().is_some_and(|r| r.active()) {
        // Health changes trigger no reconcile: a rollout in progress looks again soon, so each
        // step follows the health it waits for within this interval.
        return Ok(Action::requeue(ROLLOUT_POLL));
    }
    Ok(Action::requeue(Duration::from_secs(next)))
}

/// How often a resource whose rollout is in progress is reconciled.
const ROLLOUT_POLL: Duration = Duration::from_millis(500);

/// With `spec.rollout`: judges every targeted cluster by the `Ready` rule, steps the rollout
/// gate, holds back the jobs of clusters it has not reached, and tells what happened (Events,
/// the duration metric, rollbacks on a halt). Without it, forgets any rollout state.
async fn gate_rollout(
    ctx: &Context,
    c: &Controller,
    plan: &mut plan::Plan,
    applied: &HashMap<ReleaseKey, Applied>,
    report: &status::ReleaseReport,
    busy: &BTreeSet<ReleaseKey>,
) -> Option<rollout::Step> {
    let owner = owner_id(c);
    let Some(spec) = c.spec.rollout.as_ref() else {
        ctx.index.set_rollout(&owner, None);
        return None;
    };
    let settings = match rollout::Settings::of(spec) {
        Ok(s) => s,
        Err(e) => {
            // The schema admits only valid values; should one get through, nothing is held.
            tracing::warn!(controller = %owner, error = %e, "spec.rollout cannot be read; delivering without a rollout");
            return None;
        }
    };
    let labels = ctx.registry.load().labels();
    let targeted: BTreeSet<ClusterName> = plan
        .desired
        .iter()
        .map(|r| r.key.scope.cluster.clone())
        .chain(plan.jobs.iter().map(|j| j.key().scope.cluster.clone()))
        .filter(|c| labels.contains_key(c))
        .collect();
    let waves = rollout::waves(spec, &targeted, &labels);
    // What each cluster looks like with every job let through (`report`): the status rule
    // judges it.
    let lookup = |cluster: &str, namespace: &str| {
        let scope: crate::api::key::ClusterNamespace =
            format!("{cluster}/{namespace}").parse().ok()?;
        let mut state = ctx.model.scope(&scope)?;
        if ctx.health.unreachable(&scope.cluster).is_some() {
            state.live = false;
        }
        Some(state)
    };
    let facts: BTreeMap<ClusterName, rollout::Facts> = targeted
        .iter()
        .map(|cluster| {
            let work = plan.jobs.iter().any(|j| j.key().scope.cluster == *cluster)
                || busy.iter().any(|k| k.scope.cluster == *cluster);
            let judged = cluster_readiness(report, cluster.as_str(), &lookup);
            let updated = !work && judged.deployed;
            (
                cluster.clone(),
                rollout::Facts {
                    updated,
                    healthy: updated && judged.ready,
                    reachable: ctx.health.unreachable(cluster).is_none(),
                    failed: judged.failed,
                    waiting: judged.waiting,
                },
            )
        })
        .collect();
    let previous = ctx
        .index
        .rollout(&owner)
        .or_else(|| c.status.as_ref().and_then(|s| s.rollout.clone()));
    let command = c
        .annotations()
        .get(rollout::ROLLOUT_ANNOTATION)
        .and_then(|v| rollout::Command::parse(v));
    let step = rollout::step(&rollout::Input {
        generation: c.meta().generation.unwrap_or_default(),
        waves: &waves,
        facts: &facts,
        previous: previous.as_ref(),
        command: command.as_ref(),
        settings: &settings,
        now: Timestamp::now(),
    });
    ctx.index.set_rollout(&owner, Some(step.state.clone()));
    rollout::hold(plan, &step.allowed, rollout::note(&step.state));
    plan.jobs.extend(rollout::rollbacks(
        &step.state,
        &settings,
        &plan.desired,
        applied,
    ));
    for happened in &step.happened {
        let (reason, note) = rollout::describe(happened);
        let kind = match happened {
            rollout::RolloutEvent::Halted(_) => EventType::Warning,
            _ => EventType::Normal,
        };
        tracing::info!(controller = %owner, reason, "{note}");
        publish(&ctx.events, c, kind, reason, "Rollout", note).await;
        if let rollout::RolloutEvent::Finished { duration_ms, .. } = happened {
            ctx.metrics.rollout(*duration_ms as f64 / 1000.0);
        }
    }
    Some(step)
}

/// Drops the drift repairs the limiter refuses, telling each refusal once per drifted revision.
async fn limit_repairs(
    ctx: &Context,
    c: &Controller,
    jobs: &mut Vec<Job>,
    drifted: &HashMap<ReleaseKey, plan::Drifted>,
) {
    let mut refused = Vec::new();
    jobs.retain(|job| {
        let Job::Apply {
            release,
            repair: Some(_),
            ..
        } = job
        else {
            return true;
        };
        let Some(found) = drifted.get(&release.key) else {
            return true;
        };
        match ctx.index.drift.allow_repair(&release.key, found.revision) {
            (RepairVerdict::Allowed, _) => true,
            (RepairVerdict::Suppressed(wait), first) => {
                if first {
                    refused.push((release.key.clone(), wait));
                }
                false
            }
        }
    });
    for (key, wait) in refused {
        let note = format!(
            "release {key} drifted again, but it was repaired {} times within {} minutes already; it is reported only, and repaired again in {}s at the earliest (another controller may be changing it)",
            crate::controller::drift::REPAIRS_PER_WINDOW,
            crate::controller::drift::REPAIR_WINDOW.as_secs() / 60,
            wait.as_secs()
        );
        tracing::warn!(release = %key, "{note}");
        publish(
            &ctx.events,
            c,
            EventType::Warning,
            "DriftRepairSuppressed",
            "Drift",
            note,
        )
        .await;
    }
}

/// Of the releases a plan concerns: those with a job queued or running, and the last outcome of
/// each that has one.
fn jobs_of(
    ctx: &Context,
    plan: &plan::Plan,
) -> (BTreeSet<ReleaseKey>, HashMap<ReleaseKey, LastOutcome>) {
    let keys: Vec<&ReleaseKey> = plan
        .desired
        .iter()
        .map(|r| &r.key)
        .chain(plan.jobs.iter().map(Job::key))
        .collect();
    let busy = keys
        .iter()
        .filter(|k| ctx.queue.is_busy(k))
        .map(|k| (*k).clone())
        .collect();
    let outcomes = keys
        .iter()
        .filter_map(|k| ctx.index.outcome(k).map(|o| ((*k).clone(), o)))
        .collect();
    (busy, outcomes)
}

fn conflicts(problems: &[plan::Problem]) -> impl Iterator<Item = ReleaseKey> + '_ {
    problems.iter().filter_map(|p| match p {
        plan::Problem::Conflict { key, .. } => Some(key.clone()),
        _ => None,
    })
}

/// Logs and publishes the problems that are new since the resource's last plan (and logs what
/// enforcing the tenancy policies would refuse, in permissive mode), so each is told once per
/// change of the spec or the world, not on every reconcile.
async fn report_new_problems(
    ctx: &Context,
    c: &Controller,
    problems: &[plan::Problem],
    warnings: &[String],
) {
    let owner = owner_id(c);
    let told: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let notes: BTreeSet<String> = told.iter().chain(warnings).cloned().collect();
    let before = ctx.index.told(&owner, notes);
    // Told one by one up to the Events a resource may get in a burst, then counted: a spec with
    // thousands of problems makes a few log lines and Events, not thousands.
    let limit = EVENT_BURST as usize;
    let new = problems
        .iter()
        .zip(told)
        .filter(|(_, note)| !before.contains(note));
    let mut untold = 0;
    for (i, (problem, note)) in new.enumerate() {
        if i >= limit {
            untold += 1;
            continue;
        }
        tracing::warn!(controller = %owner, problem = %note, "spec cannot be carried out as written");
        publish(
            &ctx.events,
            c,
            EventType::Warning,
            problem.reason(),
            "Plan",
            note,
        )
        .await;
    }
    // Logged only: a hub migrating to policies would otherwise get an Event on every Controller.
    for (i, warning) in warnings.iter().filter(|w| !before.contains(*w)).enumerate() {
        if i >= limit {
            untold += 1;
            continue;
        }
        tracing::warn!(controller = %owner, %warning, "no tenancy policy allows this release (permissive mode: delivered anyway)");
    }
    if untold > 0 {
        tracing::warn!(controller = %owner, untold, "more new problems of this spec than are logged one by one; its status counts them");
    }
}

/// A Warning Event of a deletion: what it leaves, and why.
async fn deletion_warning(ctx: &Context, c: &Controller, reason: &str, note: String) {
    publish(&ctx.events, c, EventType::Warning, reason, "Delete", note).await;
}

/// Deletion: uninstalls the resource's releases everywhere (or, with `deletionPolicy: Orphan`,
/// leaves them), waiting only for clusters that hold or may hold them, and for its running jobs.
async fn cleanup(c: &Controller, ctx: &Context) -> Result<Action> {
    let owner = owner_id(c);
    ctx.claims.update(c, &ctx.claim_basis());
    // A resource created again under this name starts its rollouts afresh.
    ctx.index.set_rollout(&owner, None);
    let object = ObjectRef::from_obj(c);
    let dropped = ctx.queue.drop_applies(&owner);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "being deleted: dropped its queued installs and upgrades");
    }
    let synced = ctx.releases.synced();
    let mut applied: HashMap<ReleaseKey, Applied> = ctx
        .releases
        .owned_by(&owner)
        .into_iter()
        .map(|a| (a.key.clone(), a))
        .collect();
    let mut owned: BTreeSet<ReleaseKey> = applied.keys().cloned().collect();
    for (key, _) in ctx.index.outcomes_of(&owner) {
        if let Some(a) = ctx.releases.get(&key) {
            applied.entry(key).or_insert(a);
        }
    }
    owned.extend(just_applied(ctx, &owner, &applied));
    // Suspended releases get no Helm call, uninstall included: they are left in place.
    let registered = ctx.registry.load().labels();
    let held = plan::Held::of(&c.spec, &registered);
    let left: Vec<String> = owned
        .iter()
        .filter(|k| held.holds(k))
        .map(ToString::to_string)
        .collect();
    owned.retain(|k| !held.holds(k));
    // A release no governing policy allows acting on now is never removed with the operator's
    // own rights on the tenant's behalf: it is reported and left in place.
    let admission = ctx.admission();
    let mut removal: HashMap<ReleaseKey, Option<Impersonation>> = HashMap::new();
    let mut refused: Vec<String> = Vec::new();
    owned.retain(|key| {
        match admission.identity_for_removal(
            &owner.namespace,
            key,
            registered.get(&key.scope.cluster),
        ) {
            Ok(identity) => {
                removal.insert(key.clone(), identity);
                true
            }
            Err(why) => {
                refused.push(format!("{key}: {why}"));
                false
            }
        }
    });
    if !refused.is_empty() && c.spec.deletion_policy == DeletionPolicy::Delete && !c.spec.suspend {
        let note = format!("releases left in place: {}", refused.join("; "));
        if ctx.index.tell_once(&owner, &note) {
            tracing::warn!(controller = %owner, releases = ?refused, "deleted, but no policy allows removing these releases; they are left in place");
            deletion_warning(ctx, c, "RemovalForbidden", note.clone()).await;
        }
    }
    let orphan = c.spec.deletion_policy == DeletionPolicy::Orphan || c.spec.suspend;
    if orphan {
        // Nothing queued for it may run any more, uninstalls included.
        ctx.queue.retain_planned(&owner, &HashSet::new());
    } else if !left.is_empty() {
        ctx.queue.retain_planned(&owner, &owned.iter().collect());
    }
    let running = ctx.queue.running_for(&owner);
    if c.spec.suspend && running.is_empty() {
        let note = format!(
            "suspended: no Helm call is made, so its releases are left in place: {}",
            if left.is_empty() {
                "none".into()
            } else {
                left.join(", ")
            }
        );
        tracing::warn!(controller = %owner, releases = ?left, "deleted while suspended; its releases are left in place");
        deletion_warning(ctx, c, "Suspended", note).await;
        forget(ctx, &object);
        return Ok(Action::await_change());
    }
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
        deletion_warning(ctx, c, "Orphaned", note).await;
        forget(ctx, &object);
        return Ok(Action::await_change());
    }
    if c.spec.deletion_policy == DeletionPolicy::Delete {
        for key in owned.iter().filter(|k| !running.contains(k)) {
            ctx.queue.enqueue(Job::Uninstall {
                key: key.clone(),
                owner: owner.clone(),
                identity: removal.get(key).cloned().flatten(),
            });
        }
    }
    // Clusters that may hold its releases: those the spec targets, those its status lists, and
    // those where its releases are known to be.
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
        if !left.is_empty() {
            let note = format!(
                "releases of suspended tenancies are left in place: {}",
                left.join(", ")
            );
            tracing::warn!(controller = %owner, releases = ?left, "releases of suspended tenancies are left in place");
            deletion_warning(ctx, c, "Suspended", note).await;
        }
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

/// Forgets everything kept for a resource that is gone, or worked by another replica now.
pub(crate) fn forget(ctx: &Context, object: &ObjectRef<Controller>) {
    for gone in ctx.watches.set(object, BTreeSet::new(), &ctx.links) {
        ctx.model.forget(&gone);
    }
    ctx.writer.forget(object);
    ctx.index.forget(object);
}

#[cfg(test)]
mod tests;
