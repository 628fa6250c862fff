//! One decision for one `Controller`, shared by the reconciler and `diff`, in two steps:
//! [`plan_spec`] plans from what was observed (its charts prepared, the hub objects its values
//! read loaded as planning names them: the one step that waits); the caller then reads the
//! fleet as it stands ([`Live`], for the keys [`concerned_keys`] names) and [`decide`] gates the
//! plan (the drift repair limiter, the rollout, `dependsOn`) and gives the jobs to queue and the
//! release report of the gated plan. Nothing here writes to the hub, queues a job or tells
//! anyone: the caller does that with what [`Decision`] holds. The plan and the report come out
//! final; neither is changed after it is returned.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    path::Path,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::{
    api::crd::TenancyController,
    api::key::{ClusterName, ReleaseKey},
    charts::catalog::ChartCatalog,
    controller::depends_gate::gate_dependencies,
    controller::hub_values::HubValues,
    controller::observed::{Live, RepairLimiter, Seen},
    controller::repairs::limit_repairs,
    controller::rollout_gate::gate_rollout,
    plan::depends::Edges,
    plan::fleet::Fleet,
    plan::rollout,
    plan::{self, Applied, Inputs, Job},
    policy::access::{Credentials, Trust},
    queue::Outcome,
    status::report::{self as status, LastOutcome, ReleaseReport, ReleaseView},
};

/// What planning reads besides what was observed: charts, the hub objects values read, the
/// clusters' variables, drift found, the time and the settings.
pub(crate) struct Planning<'a> {
    /// What is known of each chart (prepared here for the resource's charts).
    pub(crate) charts: &'a ChartCatalog,
    /// Directory of local charts.
    pub(crate) chart_home: &'a Path,
    /// The hub's Secrets and ConfigMaps `valuesFrom` reads (read here when first named).
    pub(crate) values: &'a HubValues,
    /// Each cluster's registration variables.
    pub(crate) variables: &'a BTreeMap<ClusterName, BTreeMap<String, serde_json::Value>>,
    /// Releases whose deployed revision drifted, to be repaired.
    pub(crate) drifted: &'a HashMap<ReleaseKey, plan::Drifted>,
    /// Now.
    pub(crate) now: Timestamp,
    /// How long a release may stay `pending-*` before it is cleared.
    pub(crate) pending_timeout: Duration,
}

/// What one resource's decision comes to.
pub(crate) struct Decision {
    /// The plan with its gates applied: `jobs` are the ones let through.
    pub(crate) plan: plan::Plan,
    /// The jobs the rollout or `dependsOn` hold back (see `plan.rollout_held`,
    /// `plan.dependency_held`).
    pub(crate) held: Vec<Job>,
    /// The jobs to queue: those let through but the ones that would repeat work.
    pub(crate) enqueue: Vec<Job>,
    /// The release report of the gated plan, once `enqueue` is queued.
    pub(crate) report: ReleaseReport,
    /// The rollout's step, with `spec.rollout`.
    pub(crate) rollout: Option<rollout::Step>,
    /// The `dependsOn` edges to remember.
    pub(crate) edges: Edges,
    /// Drift repairs the limiter refused for the first time, with how long until the next may run.
    pub(crate) refused_repairs: Vec<(ReleaseKey, Duration)>,
    /// Releases with a job queued or running once `enqueue` is queued.
    pub(crate) busy: BTreeSet<ReleaseKey>,
    /// True when a job was left out because the release it just applied has no record seen yet:
    /// the resource is to be looked at again within [`CATCH_UP`], so a release uninstalled by hand
    /// meanwhile is installed again.
    pub(crate) catching_up: bool,
}

/// Gates and reports one resource's `plan` (from [`plan_spec`]) against the fleet as it stood
/// right before (`live`, taken after planning, so what ran meanwhile is seen): see the
/// module's words. Nothing here waits.
pub(crate) fn decide(
    c: &TenancyController,
    seen: &Seen<'_>,
    mut plan: plan::Plan,
    live: &Live,
    planning: &Planning<'_>,
    allow_repair: RepairLimiter<'_>,
) -> Decision {
    let refused = limit_repairs(&mut plan.jobs, planning.drifted, allow_repair);
    // The drift seen before the limiter judged: a repair it refused now is reported suppressed.
    let mut drift = live.drift.clone();
    for key in &refused.all {
        if let Some(status) = drift.get_mut(key) {
            crate::controller::drift::mark_suppressed(status);
        }
    }
    let refused_repairs = refused.first;
    let gated = gated(c, &plan, &live.dependencies);
    let asked = if gated { plan.jobs.clone() } else { Vec::new() };
    let mut rollout = None;
    let mut edges = live.dependencies.clone();
    if gated {
        // The gates judge clusters and releases as they would stand with every job let through.
        let (busy, outcomes) = jobs_of(live, &plan);
        let judged = report_of(c, seen, &plan, (&busy, &outcomes), (&drift, &live.health));
        rollout = gate_rollout(c, &mut plan, seen, &judged, &busy, live, planning.now);
        edges = gate_dependencies(
            seen.owner,
            &mut plan,
            seen.applied,
            &judged,
            &live.dependencies,
            live,
            planning.now,
        );
    }
    let let_through: HashSet<&ReleaseKey> = plan.jobs.iter().map(Job::key).collect();
    let held = asked
        .into_iter()
        .filter(|j| !let_through.contains(j.key()))
        .collect();
    let enqueue: Vec<Job> = plan
        .jobs
        .iter()
        .filter(|j| !redundant(live, j, seen.applied))
        .cloned()
        .collect();
    let catching_up = plan
        .jobs
        .iter()
        .any(|j| !seen.applied.contains_key(j.key()) && redundant(live, j, seen.applied));
    let (busy, outcomes) = busy_after(live, &plan, &enqueue);
    let mut report = report_of(c, seen, &plan, (&busy, &outcomes), (&drift, &live.health));
    status::add_orphans(&mut report, seen.orphans);
    report.rollout = rollout.as_ref().map(|r: &rollout::Step| r.state.clone());
    Decision {
        plan,
        held,
        enqueue,
        report,
        rollout,
        edges,
        refused_repairs,
        busy,
        catching_up,
    }
}

/// True when a gate judges `plan`: the spec has a rollout, or `dependsOn` edges are planned or
/// `remembered`. Only then does a decision read what runs ([`Live::scopes`]).
pub(crate) fn gated(c: &TenancyController, plan: &plan::Plan, remembered: &Edges) -> bool {
    c.spec.rollout.is_some() || !plan.depends_on.is_empty() || !remembered.is_empty()
}

/// Every release a decision on `plan` may ask [`Live`] about: those the plan concerns (desired
/// or with a job), the ones it holds in the clusters, and those the `remembered` edges name.
pub(crate) fn concerned_keys<'p>(
    plan: &'p plan::Plan,
    applied: &'p HashMap<ReleaseKey, Applied>,
    remembered: &'p Edges,
) -> BTreeSet<&'p ReleaseKey> {
    concerned(plan)
        .into_iter()
        .chain(applied.keys())
        .chain(
            remembered
                .iter()
                .flat_map(|(k, to)| std::iter::once(k).chain(to)),
        )
        .collect()
}

/// The release report of `plan` with the jobs `busy` and their last `outcomes`.
fn report_of(
    c: &TenancyController,
    seen: &Seen<'_>,
    plan: &plan::Plan,
    (busy, outcomes): (&BTreeSet<ReleaseKey>, &HashMap<ReleaseKey, LastOutcome>),
    (drift, health): (
        &HashMap<ReleaseKey, crate::api::crd::DriftStatus>,
        &HashMap<ReleaseKey, crate::api::crd::HealthStatus>,
    ),
) -> ReleaseReport {
    status::releases(&ReleaseView {
        plan,
        applied: seen.applied,
        outcomes,
        busy,
        synced: seen.synced,
        generation: c.meta().generation,
        drift,
        health,
    })
}

/// The resource's plan before its gates: its charts prepared, the planner run (off the worker
/// when big), and run again once the hub objects its values name are read.
pub(crate) async fn plan_spec(
    c: &TenancyController,
    seen: &Seen<'_>,
    planning: &Planning<'_>,
) -> plan::Plan {
    let (owner, admission) = (seen.owner, seen.admission);
    planning
        .charts
        .prepare(&owner.namespace, &c.spec, planning.chart_home, &|chart| {
            admission.fetch_scope(&owner.namespace, chart)
        })
        .await;
    let lookup = |source: &plan::ChartSource,
                  credentials: &Credentials,
                  trust: &Trust,
                  version: Option<&str>| {
        planning
            .charts
            .lookup(&owner.namespace, source, credentials, trust, version)
    };
    let values = |source: &plan::ValuesSource| {
        planning
            .values
            .lookup(source)
            .unwrap_or_else(|| plan::ValuesLookup::Unreadable("not read yet".into()))
    };
    let git_files = |source: &plan::GitFileSource| planning.charts.git_file(source);
    let fleet = Fleet {
        variables: planning.variables,
        lookup: &values,
        git_files: &git_files,
    };
    let run = || {
        plan::offload(plan::claims::named_charts(c), || {
            plan::plan(&Inputs {
                owner,
                spec: &c.spec,
                clusters: seen.clusters,
                synced: seen.synced,
                applied: seen.applied,
                claims: seen.claims,
                admission,
                chart_home: planning.chart_home,
                chart_lookup: &lookup,
                now: planning.now.as_second(),
                pending_timeout_secs: planning.pending_timeout.as_secs() as i64,
                drifted: planning.drifted,
                fleet: &fleet,
            })
        })
    };
    let mut plan = run();
    // The hub objects and Git values files its values read, read once when first named (their
    // names and paths may depend on the cluster, so only planning knows them), then planned
    // with; twice at most, for values read from what the first ones named.
    for _ in 0..2 {
        let hub = planning.values.any_pending(&plan.sources, admission);
        if hub {
            planning.values.load(&plan.sources, admission).await;
        }
        let git = planning.charts.load_git_files(owner, &plan.git_files).await;
        if !hub && !git {
            break;
        }
        plan = run();
    }
    plan
}

/// How long after a job applied a release its record may still be unseen (the record watch has
/// not caught up) before its absence is taken for an uninstall made by hand.
pub(crate) const CATCH_UP: Duration = Duration::from_secs(10);

/// True when queueing this job would repeat work: it already failed in a way retrying cannot
/// fix (or as often as allowed), or it was just applied and the release records have not caught
/// up with it yet: they show an older revision, or, within [`CATCH_UP`], none at all (queueing it
/// then would upgrade the release just installed to a second revision).
fn redundant(live: &Live, job: &Job, applied: &HashMap<ReleaseKey, Applied>) -> bool {
    live.outcome(job.key()).is_some_and(|last| {
        last.fingerprint == job.fingerprint()
            && match last.outcome {
                Outcome::Failed { .. } => last.settled,
                Outcome::Applied { revision, .. } => match applied.get(job.key()) {
                    Some(a) => a.revision < revision,
                    None => last.at.elapsed() < CATCH_UP,
                },
                Outcome::Uninstalled => false,
            }
    })
}

/// The releases a plan concerns: desired or with a job.
fn concerned(plan: &plan::Plan) -> Vec<&ReleaseKey> {
    plan.desired
        .iter()
        .map(|r| &r.key)
        .chain(plan.jobs.iter().map(Job::key))
        .collect()
}

/// Of the releases a plan concerns: those with a job queued or running now, and the last
/// outcome of each that has one.
fn jobs_of(
    live: &Live,
    plan: &plan::Plan,
) -> (BTreeSet<ReleaseKey>, HashMap<ReleaseKey, LastOutcome>) {
    let keys = concerned(plan);
    let busy = keys
        .iter()
        .filter(|k| live.busy(k))
        .map(|k| (*k).clone())
        .collect();
    (busy, outcomes(live, &keys))
}

/// Of the releases a plan concerns: those with a job queued or running once `enqueue` is
/// queued (the queue keeps a waiting job only while the plan still has it, and never drops a
/// running one), and the last outcome of each that has one.
fn busy_after(
    live: &Live,
    plan: &plan::Plan,
    enqueue: &[Job],
) -> (BTreeSet<ReleaseKey>, HashMap<ReleaseKey, LastOutcome>) {
    let keys = concerned(plan);
    let planned: HashSet<&ReleaseKey> = plan.jobs.iter().map(Job::key).collect();
    let queued: HashSet<&ReleaseKey> = enqueue.iter().map(Job::key).collect();
    let busy = keys
        .iter()
        .filter(|k| {
            queued.contains(*k) || live.running(k) || (planned.contains(*k) && live.busy(k))
        })
        .map(|k| (*k).clone())
        .collect();
    (busy, outcomes(live, &keys))
}

fn outcomes(live: &Live, keys: &[&ReleaseKey]) -> HashMap<ReleaseKey, LastOutcome> {
    keys.iter()
        .filter_map(|k| live.outcome(k).map(|o| ((*k).clone(), o.clone())))
        .collect()
}

#[cfg(test)]
mod tests;
