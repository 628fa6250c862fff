//! The rollout gate of a decision: each targeted cluster judged by the `Ready` rule, the gate
//! stepped, the jobs of clusters it has not reached held back; and, for the reconciler, what
//! happened told.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt, runtime::events::EventType};

use crate::{
    api::alert::AlertEvent,
    api::crd::TenancyController,
    api::key::{ClusterName, ReleaseKey},
    controller::events::{Telling, notice, publish},
    controller::observed::{Live, Seen},
    plan::rollout,
    plan::{self, OwnerId},
    status::build::cluster_readiness,
    status::report as status,
};

/// How often a resource whose rollout is in progress is reconciled.
pub(crate) const ROLLOUT_POLL: Duration = Duration::from_millis(500);

/// With `spec.rollout`: judges every targeted cluster by the `Ready` rule on `judged` (the
/// report of the plan with every job let through), steps the rollout gate from the state
/// remembered (or the status's), holds back the jobs of clusters it has not reached and adds the
/// rollbacks a halt asks for. Without it (or with one that cannot be read), None.
pub(crate) fn gate_rollout(
    c: &TenancyController,
    plan: &mut plan::Plan,
    seen: &Seen<'_>,
    judged: &status::ReleaseReport,
    busy: &BTreeSet<ReleaseKey>,
    live: &Live,
    now: Timestamp,
) -> Option<rollout::Step> {
    let spec = c.spec.rollout.as_ref()?;
    let settings = match rollout::Settings::of(spec) {
        Ok(s) => s,
        Err(e) => {
            // The schema admits only valid values; should one get through, nothing is held.
            tracing::warn!(controller = %seen.owner, error = %e, "spec.rollout cannot be read; delivering without a rollout");
            return None;
        }
    };
    let labels = seen.clusters;
    let targeted: BTreeSet<ClusterName> = plan
        .desired
        .iter()
        .map(|r| r.key.scope.cluster.clone())
        .chain(plan.jobs.iter().map(|j| j.key().scope.cluster.clone()))
        .filter(|c| labels.contains_key(c))
        .collect();
    let waves = rollout::waves(spec, &targeted, labels);
    let facts = cluster_facts(live, plan, judged, busy, &targeted);
    let previous = live
        .rollout
        .clone()
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
        now,
    });
    rollout::hold(plan, &step.allowed, rollout::note(&step.state));
    plan.jobs.extend(rollout::rollbacks(
        &step.state,
        &settings,
        &plan.desired,
        seen.applied,
    ));
    Some(step)
}

/// What each targeted cluster looks like with every job let through (`judged`), judged by the
/// status rule: updated when no job of it is planned or busy and it is deployed, healthy when
/// also ready.
fn cluster_facts(
    live: &Live,
    plan: &plan::Plan,
    judged: &status::ReleaseReport,
    busy: &BTreeSet<ReleaseKey>,
    targeted: &BTreeSet<ClusterName>,
) -> BTreeMap<ClusterName, rollout::Facts> {
    let lookup = |cluster: &str, namespace: &str| live.scope(cluster, namespace);
    targeted
        .iter()
        .map(|cluster| {
            let work = plan.jobs.iter().any(|j| j.key().scope.cluster == *cluster)
                || busy.iter().any(|k| k.scope.cluster == *cluster);
            let readiness = cluster_readiness(judged, cluster.as_str(), &lookup);
            let updated = !work && readiness.deployed;
            (
                cluster.clone(),
                rollout::Facts {
                    updated,
                    healthy: updated && readiness.ready,
                    reachable: live.reachable(cluster),
                    failed: readiness.failed,
                    waiting: readiness.waiting,
                },
            )
        })
        .collect()
}

/// Tells what a step of the gate did: a log line and an Event each (a Warning for a halt), and
/// a finished rollout's duration in the metric.
pub(crate) async fn tell_rollout(
    tell: &Telling<'_>,
    c: &TenancyController,
    owner: &OwnerId,
    happened: &[rollout::RolloutEvent],
) {
    for happened in happened {
        let (reason, note) = rollout::describe(happened);
        let kind = match happened {
            rollout::RolloutEvent::Halted(_) => EventType::Warning,
            _ => EventType::Normal,
        };
        tracing::info!(controller = %owner, reason, "{note}");
        match happened {
            rollout::RolloutEvent::Halted(h) => tell.notifier.tell(notice(
                owner,
                Some((&h.cluster, &h.release)),
                AlertEvent::RolloutHalted,
                reason,
                note.clone(),
            )),
            rollout::RolloutEvent::Resumed => tell.notifier.tell(notice(
                owner,
                None,
                AlertEvent::RolloutResumed,
                reason,
                note.clone(),
            )),
            _ => {}
        }
        publish(tell.events, c, kind, reason, "Rollout", note).await;
        if let rollout::RolloutEvent::Finished { duration_ms, .. } = happened {
            tell.metrics.rollout(*duration_ms as f64 / 1000.0);
        }
    }
}
