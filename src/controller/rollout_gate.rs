//! The rollout gate in a reconcile: each targeted cluster judged by the `Ready` rule, the gate
//! stepped, the jobs of clusters it has not reached held back, and what happened told.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt, runtime::events::EventType};

use crate::{
    api::alert::AlertEvent,
    api::crd::Controller,
    api::key::{ClusterName, ReleaseKey},
    controller::context::Context,
    controller::events::{notice, publish},
    observe::model::ScopeState,
    plan::rollout,
    plan::{self, Applied, OwnerId, owner_id},
    status::build::cluster_readiness,
    status::report as status,
};

/// How often a resource whose rollout is in progress is reconciled.
pub(crate) const ROLLOUT_POLL: Duration = Duration::from_millis(500);

/// With `spec.rollout`: judges every targeted cluster by the `Ready` rule, steps the rollout
/// gate, holds back the jobs of clusters it has not reached, and tells what happened (Events,
/// the duration metric, rollbacks on a halt). Without it, forgets any rollout state.
pub(crate) async fn gate_rollout(
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
    let facts = cluster_facts(ctx, plan, report, busy, &targeted);
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
    tell(ctx, c, &owner, &step.happened).await;
    Some(step)
}

/// What each targeted cluster looks like with every job let through (`report`), judged by the
/// status rule: updated when no job of it is planned or busy and it is deployed, healthy when
/// also ready.
fn cluster_facts(
    ctx: &Context,
    plan: &plan::Plan,
    report: &status::ReleaseReport,
    busy: &BTreeSet<ReleaseKey>,
    targeted: &BTreeSet<ClusterName>,
) -> BTreeMap<ClusterName, rollout::Facts> {
    let lookup = |cluster: &str, namespace: &str| live_scope(ctx, cluster, namespace);
    targeted
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
        .collect()
}

/// What runs in one cluster/namespace as the `Ready` rule sees it: the model's state, not live
/// while its cluster is unreachable.
pub(crate) fn live_scope(ctx: &Context, cluster: &str, namespace: &str) -> Option<ScopeState> {
    let scope: crate::api::key::ClusterNamespace = format!("{cluster}/{namespace}").parse().ok()?;
    let mut state = ctx.model.scope(&scope)?;
    if ctx.health.unreachable(&scope.cluster).is_some() {
        state.live = false;
    }
    Some(state)
}

/// Tells what a step of the gate did: a log line and an Event each (a Warning for a halt), and
/// a finished rollout's duration in the metric.
async fn tell(ctx: &Context, c: &Controller, owner: &OwnerId, happened: &[rollout::RolloutEvent]) {
    for happened in happened {
        let (reason, note) = rollout::describe(happened);
        let kind = match happened {
            rollout::RolloutEvent::Halted(_) => EventType::Warning,
            _ => EventType::Normal,
        };
        tracing::info!(controller = %owner, reason, "{note}");
        match happened {
            rollout::RolloutEvent::Halted(h) => ctx.notifier.tell(notice(
                owner,
                Some((&h.cluster, &h.release)),
                AlertEvent::RolloutHalted,
                reason,
                note.clone(),
            )),
            rollout::RolloutEvent::Resumed => ctx.notifier.tell(notice(
                owner,
                None,
                AlertEvent::RolloutResumed,
                reason,
                note.clone(),
            )),
            _ => {}
        }
        publish(&ctx.events, c, kind, reason, "Rollout", note).await;
        if let rollout::RolloutEvent::Finished { duration_ms, .. } = happened {
            ctx.metrics.rollout(*duration_ms as f64 / 1000.0);
        }
    }
}
