//! Hub reconciler: observe, plan, gate, enqueue and report for each `Controller`.
//!
//! The finalizer and its errors are in `finalizer`, the deletion path in `cleanup`, the rollout
//! gate in `rollout_gate`, repair limiting in `repairs` and told problems in `problems`.

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
        finalizer::{Event, finalizer},
        reflector::ObjectRef,
    },
};

use crate::{
    api::crd::Controller,
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    controller::cleanup::cleanup,
    controller::context::Context,
    controller::depends_gate::{DEPENDENCY_POLL, gate_dependencies},
    controller::problems::report_new_problems,
    controller::repairs::limit_repairs,
    controller::rollout_gate::{ROLLOUT_POLL, gate_rollout},
    controller::vouch::Delivers,
    plan::fleet::Fleet,
    plan::rollout,
    plan::{self, Applied, Inputs, Job, OwnerId, owner_id},
    policy::Admission,
    queue::Outcome,
    status::report::{self as status, LastOutcome, ReleaseView},
};

pub(crate) use crate::controller::cleanup::forget;
pub(crate) use crate::controller::finalizer::{Error, FINALIZER, Result, error_policy};

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

/// What a reconcile reads before planning: the registered clusters, the releases the resource's
/// spec names or it holds, the clusters whose releases are known, the claims and the policies.
struct Observed {
    /// The resource.
    owner: OwnerId,
    /// Registered clusters and their labels.
    clusters: BTreeMap<ClusterName, BTreeMap<String, String>>,
    /// Releases in the clusters under the keys it names or holds.
    applied: HashMap<ReleaseKey, Applied>,
    /// Clusters whose applied releases are fully known.
    synced: BTreeSet<ClusterName>,
    /// Which resource holds each of its keys claimed by several.
    claims: HashMap<ReleaseKey, OwnerId>,
    /// What the tenancy policies allow.
    admission: Admission,
}

/// Reads what planning needs. Only the keys this spec names and the releases it holds are read:
/// the cost of a reconcile does not grow with the number of other resources.
fn observe(c: &Controller, ctx: &Context) -> Observed {
    let owner = owner_id(c);
    let basis = ctx.claim_basis();
    let clusters = basis.labels.clone();
    ctx.claims.update(c, &basis);
    let named = ctx.claims.keys_of(&owner);
    let delivers = Delivers::new(c, &owner, &named, &basis);
    let applied = ctx
        .releases
        .applied_for(&owner, &named, &|k| delivers.to(k));
    let synced = ctx.releases.synced();
    let claims = ctx.claims.holders(&named, &applied);
    Observed {
        owner,
        clusters,
        applied,
        synced,
        claims,
        admission: basis.admission,
    }
}

/// Plans the resource's Helm work: its charts prepared, the planner run (off the worker when
/// big), its releases tracked for drift, and the drift repairs the limiter refuses dropped.
async fn plan_work(c: &Controller, ctx: &Context, seen: &Observed) -> plan::Plan {
    let (owner, admission) = (&seen.owner, &seen.admission);
    ctx.charts
        .prepare(&c.spec, &ctx.settings.chart_home, &|chart| {
            admission.fetch_scope(&owner.namespace, chart)
        })
        .await;
    let lookup =
        |source: &plan::ChartSource, version: Option<&str>| ctx.charts.lookup(source, version);
    let drifted = ctx.index.drift.drifted(&seen.applied);
    let variables = ctx.registry.load().variables();
    let values = |source: &plan::ValuesSource| {
        ctx.values
            .lookup(source)
            .unwrap_or_else(|| plan::ValuesLookup::Unreadable("not read yet".into()))
    };
    let fleet = Fleet {
        variables: &variables,
        lookup: &values,
    };
    let run = || {
        crate::plan::offload(crate::plan::claims::named_charts(c), || {
            plan::plan(&Inputs {
                owner,
                spec: &c.spec,
                clusters: &seen.clusters,
                synced: &seen.synced,
                applied: &seen.applied,
                claims: &seen.claims,
                admission,
                chart_home: &ctx.settings.chart_home,
                chart_lookup: &lookup,
                now: Timestamp::now().as_second(),
                pending_timeout_secs: ctx.settings.pending_timeout.as_secs() as i64,
                drifted: &drifted,
                fleet: &fleet,
            })
        })
    };
    let mut plan = run();
    // The hub objects its values read, read once when first named (their names may depend on
    // the cluster, so only planning knows them), then planned with.
    if ctx.values.any_pending(&plan.sources, admission) {
        ctx.values.load(&plan.sources, admission).await;
        plan = run();
    }
    ctx.values
        .read_by(&ObjectRef::from_obj(c), plan.sources.clone());
    ctx.index.drift.track(owner, &plan.desired);
    limit_repairs(ctx, c, &mut plan.jobs, &drifted).await;
    plan
}

/// Observes, plans, gates and enqueues the resource's Helm work, then reports it, watches what
/// it names and looks again: soon while work settles or a rollout is in progress.
async fn apply(c: &Controller, ctx: &Context) -> Result<Action> {
    let seen = observe(c, ctx);
    let (owner, applied, synced) = (&seen.owner, &seen.applied, &seen.synced);
    let mut plan = plan_work(c, ctx, &seen).await;
    // The report is built once, from the plan before the gate (which judges the clusters by it),
    // and brought up to the plan the gate lets through once its jobs are queued.
    let drift = ctx.index.drift.statuses(applied);
    let (queued_before, outcomes) = jobs_of(ctx, &plan);
    let report = status::releases(&ReleaseView {
        plan: &plan,
        applied,
        outcomes: &outcomes,
        busy: &queued_before,
        synced,
        generation: c.meta().generation,
        drift: &drift,
    });
    let rollout = gate_rollout(ctx, c, &mut plan, applied, &report, &queued_before).await;
    gate_dependencies(ctx, owner, &mut plan, applied, &report);
    enqueue(ctx, owner, &plan, applied);
    let (busy, outcomes) = jobs_of(ctx, &plan);
    let view = ReleaseView {
        plan: &plan,
        applied,
        outcomes: &outcomes,
        busy: &busy,
        synced,
        generation: c.meta().generation,
        drift: &drift,
    };
    let mut report = status::after_gate(report, &view, &queued_before);
    let orphans: Vec<ReleaseKey> = ctx
        .orphans
        .iter()
        .filter(|o| *o.value() == *owner)
        .map(|o| o.key().clone())
        .collect();
    status::add_orphans(&mut report, &orphans);
    report.rollout = rollout.as_ref().map(|r| r.state.clone());
    report_new_problems(ctx, c, &plan.problems, &plan.warnings).await;
    let object = ObjectRef::from_obj(c);
    ctx.writer.submit(object.clone(), report);
    for gone in ctx
        .watches
        .set(&object, watched_scopes(&plan, &seen), &ctx.links)
    {
        ctx.model.forget(&gone);
    }
    let claimed = plan.desired.iter().map(|r| r.key.clone());
    ctx.index.ask(
        &ObjectRef::from_obj(c),
        claimed.chain(conflicts(&plan.problems)),
    );
    Ok(next_look(&plan, &busy, rollout.as_ref()))
}

/// Drops the queued jobs of `owner` the newest plan no longer asks for, and queues its jobs but
/// those that would repeat work.
fn enqueue(
    ctx: &Context,
    owner: &OwnerId,
    plan: &plan::Plan,
    applied: &HashMap<ReleaseKey, Applied>,
) {
    let planned: HashSet<&ReleaseKey> = plan.jobs.iter().map(Job::key).collect();
    let dropped = ctx.queue.retain_planned(owner, &planned);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "dropped queued Helm jobs the newest spec no longer asks for");
    }
    for job in plan.jobs.iter().filter(|j| !redundant(ctx, j, applied)) {
        ctx.queue.enqueue(job.clone());
    }
}

/// Every registered cluster/namespace the spec names, to be watched, so what runs under a
/// release that cannot be planned right now is still reported.
fn watched_scopes(plan: &plan::Plan, seen: &Observed) -> BTreeSet<ClusterNamespace> {
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
                        .is_some_and(|a| a.owner.as_ref() == Some(&seen.owner))
                })
                .map(|k| k.scope.clone()),
        )
        .filter(|s| seen.clusters.contains_key(&s.cluster))
        .collect()
}

/// When to reconcile again: soon while a rollout is in progress or `dependsOn` holds work back,
/// within 30s while jobs run or clusters are not synced, otherwise in 5 minutes; earlier when a
/// pending release is due.
fn next_look(
    plan: &plan::Plan,
    busy: &BTreeSet<ReleaseKey>,
    rollout: Option<&rollout::Step>,
) -> Action {
    let settling = !busy.is_empty() || !plan.waiting.is_empty();
    let mut next = if settling { 30 } else { 300 };
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

#[cfg(test)]
mod tests;
