//! Hub reconciler: for each `Controller`, observe, decide (`pipeline`: plan, gates, report), then
//! enqueue, write and tell.
//!
//! The finalizer and its errors are in `finalizer`, the deletion path in `cleanup`, the decision
//! in `pipeline` (with its gates in `rollout_gate`, `depends_gate` and `repairs`), told problems
//! in `problems`.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, ResourceExt,
    runtime::{
        controller::Action,
        finalizer::{Event, finalizer},
        reflector::ObjectRef,
    },
};

use crate::{
    api::crd::TenancyController,
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    controller::cleanup::cleanup,
    controller::context::Context,
    controller::depends_gate::DEPENDENCY_POLL,
    controller::drift::DRIFT_CHECK_ANNOTATION,
    controller::events::Telling,
    controller::observed::{Live, Observed, Seen},
    controller::pipeline::{CATCH_UP, Planning, concerned_keys, decide, gated, plan_spec},
    controller::problems::report_new_problems,
    controller::repairs::tell_refused,
    controller::rollout_gate::{ROLLOUT_POLL, tell_rollout},
    controller::vouch::Delivers,
    plan::rollout,
    plan::{self, Job, OwnerId, owner_id},
};

pub(crate) use crate::controller::cleanup::forget;
pub(crate) use crate::controller::finalizer::{Error, FINALIZER, Result, error_policy};

/// Reconciles one `Controller`.
pub(crate) async fn reconcile(obj: Arc<TenancyController>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = obj.namespace().unwrap_or_default();
    if !ctx.hub.shards.owns(&namespace, &obj.name_any()) {
        // Another replica leads its shard; gaining the shard plans every resource again.
        forget(&ctx, &ObjectRef::from_obj(&*obj));
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let api: Api<TenancyController> =
        Api::namespaced(ctx.hub.client.clone(), &obj.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Event::Apply(c) => apply(&c, &ctx).await,
            Event::Cleanup(c) => cleanup(&c, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.out.metrics.reconcile(
        started.elapsed().as_secs_f64(),
        result.as_ref().err().map(Error::metric_label),
    );
    result
}

/// Reads what planning needs. Only the keys this spec names and the releases it holds are read:
/// the cost of a reconcile does not grow with the number of other resources.
fn observe(c: &TenancyController, ctx: &Context) -> Observed {
    let owner = owner_id(c);
    let basis = ctx.claim_basis();
    let clusters = basis.labels.clone();
    ctx.kept.claims.update(c, &basis);
    let named = ctx.kept.claims.keys_of(&owner);
    let delivers = Delivers::new(c, &owner, &named, &basis);
    let applied = ctx
        .members
        .releases
        .applied_for(&owner, &named, &|k| delivers.to(k));
    let synced = ctx.members.releases.synced();
    let claims = ctx.kept.claims.holders(&named, &applied);
    let orphans = ctx
        .kept
        .orphans
        .iter()
        .filter(|o| *o.value() == owner)
        .map(|o| o.key().clone())
        .collect();
    Observed {
        owner,
        clusters,
        applied,
        synced,
        claims,
        admission: basis.admission,
        orphans,
    }
}

/// The fleet as it stands now, for the releases a decision on `plan` may ask about: read from
/// the queue, the index, health and (only when a gate will judge what runs) the model.
pub(crate) fn look(
    c: &TenancyController,
    ctx: &Context,
    seen: &Seen<'_>,
    plan: &plan::Plan,
) -> Live {
    let dependencies = ctx.kept.index.dependencies(seen.owner);
    let keys = concerned_keys(plan, seen.applied, &dependencies);
    let unreachable: BTreeSet<ClusterName> = seen
        .clusters
        .keys()
        .filter(|cluster| ctx.members.health.unreachable(cluster).is_some())
        .cloned()
        .collect();
    let mut scopes = HashMap::new();
    if gated(c, plan, &dependencies) {
        for scope in keys.iter().map(|k| &k.scope) {
            let at = (scope.cluster.to_string(), scope.namespace.clone());
            if scopes.contains_key(&at) {
                continue;
            }
            if let Some(mut state) = ctx.members.model.scope(scope) {
                state.live &= !unreachable.contains(&scope.cluster);
                scopes.insert(at, state);
            }
        }
    }
    Live {
        busy: keys
            .iter()
            .filter(|k| ctx.out.queue.is_busy(k))
            .map(|k| (*k).clone())
            .collect(),
        running: keys
            .iter()
            .filter(|k| ctx.out.queue.is_running(k))
            .map(|k| (*k).clone())
            .collect(),
        outcomes: keys
            .iter()
            .filter_map(|k| ctx.kept.index.outcome(k).map(|o| ((*k).clone(), o)))
            .collect(),
        scopes,
        unreachable,
        rollout: ctx.kept.index.rollout(seen.owner),
        drift: ctx.kept.index.drift.statuses(seen.applied),
        health: ctx.kept.index.drift.health(seen.applied),
        dependencies,
    }
}

/// Observes and decides, then carries the decision out: queues its jobs, remembers its rollout
/// and `dependsOn` edges, tells what happened, hands the report to the writer, watches what the
/// spec names, and looks again: soon while work settles or a rollout is in progress.
async fn apply(c: &TenancyController, ctx: &Context) -> Result<Action> {
    let observed = observe(c, ctx);
    let seen = observed.seen();
    let owner = seen.owner;
    let drifted = ctx.kept.index.drift.drifted(seen.applied);
    let variables = ctx.members.registry.load().variables();
    let planning = Planning {
        charts: &ctx.kept.charts,
        chart_home: &ctx.hub.settings.chart_home,
        values: &ctx.kept.values,
        variables: &variables,
        drifted: &drifted,
        now: Timestamp::now(),
        pending_timeout: ctx.hub.settings.pending_timeout,
    };
    let planned = plan_spec(c, &seen, &planning).await;
    let live = look(c, ctx, &seen, &planned);
    let allow_repair =
        |key: &ReleaseKey, revision| ctx.kept.index.drift.allow_repair(key, revision);
    let decision = decide(c, &seen, planned, &live, &planning, &allow_repair);
    let plan = &decision.plan;
    let object = ObjectRef::from_obj(c);
    ctx.kept.values.read_by(&object, plan.sources.clone());
    ctx.kept.index.drift.track(owner, &plan.desired);
    ctx.kept
        .index
        .set_rollout(owner, decision.rollout.as_ref().map(|r| r.state.clone()));
    ctx.kept
        .index
        .set_dependencies(owner, decision.edges.clone());
    ctx.kept.index.set_next(
        owner,
        crate::status::next::next(plan, &decision.held, seen.applied),
    );
    check_drift_if_asked(ctx, c, owner, plan);
    enqueue(ctx, owner, plan, &decision.enqueue);
    let telling = Telling {
        events: &ctx.out.events,
        notifier: &ctx.out.notifier,
        metrics: &ctx.out.metrics,
    };
    tell_refused(&ctx.out.events, c, &decision.refused_repairs).await;
    if let Some(step) = &decision.rollout {
        tell_rollout(&telling, c, owner, &step.happened).await;
    }
    report_new_problems(
        (&ctx.kept.index, &ctx.out.events),
        c,
        &plan.problems,
        &plan.warnings,
    )
    .await;
    ctx.out
        .writer
        .submit(object.clone(), decision.report.clone());
    for gone in ctx
        .members
        .watches
        .set(&object, watched_scopes(plan, &seen), &ctx.members.links)
    {
        ctx.members.model.forget(&gone);
    }
    let claimed = plan.desired.iter().map(|r| r.key.clone());
    ctx.kept
        .index
        .ask(&object, claimed.chain(conflicts(&plan.problems)));
    Ok(next_look(
        plan,
        &decision.busy,
        decision.rollout.as_ref(),
        decision.catching_up,
    ))
}

/// Checks every release of `c` for drift now when its `multitenancy.dev/drift-check`
/// annotation holds a value not seen before (the fleet view's "Check drift now", or
/// `kubectl annotate`): releases not watched for drift (`driftDetection: disabled`) are left.
fn check_drift_if_asked(ctx: &Context, c: &TenancyController, owner: &OwnerId, plan: &plan::Plan) {
    let Some(asked) = c.annotations().get(DRIFT_CHECK_ANNOTATION) else {
        return;
    };
    if !ctx.kept.index.drift_check_asked(owner, asked) {
        return;
    }
    let mut asked_for = 0;
    for r in plan
        .desired
        .iter()
        .filter(|r| ctx.kept.index.drift.is_watched(&r.key))
    {
        ctx.kept
            .index
            .drift
            .nudge(crate::controller::drift::DriftCheckRequest::Release(
                r.key.clone(),
            ));
        asked_for += 1;
    }
    tracing::info!(controller = %owner, releases = asked_for, "a drift check was asked for; checking now");
}

/// Drops the queued jobs of `owner` the newest plan no longer asks for, and queues `jobs`.
fn enqueue(ctx: &Context, owner: &OwnerId, plan: &plan::Plan, jobs: &[Job]) {
    let planned: HashSet<&ReleaseKey> = plan.jobs.iter().map(Job::key).collect();
    let dropped = ctx.out.queue.retain_planned(owner, &planned);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "dropped queued Helm jobs the newest spec no longer asks for");
    }
    for job in jobs {
        ctx.out.queue.enqueue(job.clone());
    }
}

/// Every registered cluster/namespace the spec names, to be watched, so what runs under a
/// release that cannot be planned right now is still reported.
fn watched_scopes(plan: &plan::Plan, seen: &Seen<'_>) -> BTreeSet<ClusterNamespace> {
    plan.desired
        .iter()
        .map(|r| r.key.scope.clone())
        .chain(plan.suspended.iter().map(|k| k.scope.clone()))
        .chain(
            plan.problems
                .iter()
                .filter(|p| !matches!(p, plan::Problem::Conflict { .. }))
                .filter_map(plan::Problem::release)
                .filter(|k| {
                    seen.applied
                        .get(*k)
                        .is_some_and(|a| a.owner.as_ref() == Some(seen.owner))
                })
                .map(|k| k.scope.clone()),
        )
        .filter(|s| seen.clusters.contains_key(&s.cluster))
        .collect()
}

/// When to reconcile again: soon while a rollout is in progress or `dependsOn` holds work back,
/// within 30s while jobs run or clusters are not synced, within [`CATCH_UP`] while a release just
/// applied has no record seen yet, otherwise in 5 minutes; earlier when a pending release is due.
fn next_look(
    plan: &plan::Plan,
    busy: &BTreeSet<ReleaseKey>,
    rollout: Option<&rollout::Step>,
    catching_up: bool,
) -> Action {
    let settling = !busy.is_empty() || !plan.waiting.is_empty();
    let mut next = if settling { 30 } else { 300 };
    if catching_up {
        next = next.min(CATCH_UP.as_secs());
    }
    if let Some(recheck) = plan.recheck_in {
        next = next.min(recheck.max(1) as u64);
    }
    if rollout.is_some_and(|r| r.active()) {
        // Health changes trigger no reconcile: a rollout in progress looks again soon, so each
        // step follows the health it waits for within this interval.
        return Action::requeue(ROLLOUT_POLL);
    }
    if !plan.dependency_held.is_empty() {
        // Likewise, readiness of a dependency triggers no reconcile.
        return Action::requeue(DEPENDENCY_POLL);
    }
    Action::requeue(Duration::from_secs(next))
}

fn conflicts(problems: &[plan::Problem]) -> impl Iterator<Item = ReleaseKey> + '_ {
    problems.iter().filter_map(|p| match p {
        plan::Problem::Conflict { key, .. } => Some(key.clone()),
        _ => None,
    })
}

#[cfg(test)]
mod tests;
