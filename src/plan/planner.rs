//! The planner: desired releases compared with those applied become install, upgrade, uninstall and repair jobs, with the claims that decide conflicts (pure).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
};

use crate::{
    api::crd::{ControllerSpec, DriftMode},
    api::key::{ClusterName, ReleaseKey},
    policy::{
        Admission,
        access::{Credentials, Trust},
    },
};

use crate::plan::{depends, desired::*, fleet::Fleet, release::*};

/// Everything planning needs to know, gathered by the reconciler.
pub struct Inputs<'a> {
    /// The resource planned for.
    pub owner: &'a OwnerId,
    /// Its spec.
    pub spec: &'a ControllerSpec,
    /// Registered clusters (the hub included) and their labels.
    pub clusters: &'a BTreeMap<ClusterName, BTreeMap<String, String>>,
    /// Clusters whose applied releases are fully known; others are not planned for yet.
    pub synced: &'a BTreeSet<ClusterName>,
    /// Releases in the clusters, by key.
    pub applied: &'a HashMap<ReleaseKey, Applied>,
    /// Which resource holds each release key claimed by several.
    pub claims: &'a HashMap<ReleaseKey, OwnerId>,
    /// What the tenancy policies allow.
    pub admission: &'a Admission,
    /// Chart directory root.
    pub chart_home: &'a Path,
    /// What is known of a chart (a parameter so planning stays pure): its exact version and
    /// content digest, or why it cannot be found.
    pub chart_lookup: &'a ChartLookupFn<'a>,
    /// Now, in Unix seconds.
    pub now: i64,
    /// How long a pending release may stay pending before it is cleared.
    pub pending_timeout_secs: i64,
    /// Releases whose live objects differ from their manifest.
    pub drifted: &'a HashMap<ReleaseKey, Drifted>,
    /// Each cluster's variables and the hub objects `valuesFrom` reads.
    pub fleet: &'a Fleet<'a>,
}

/// The outcome of planning.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Releases the spec asks for and this resource holds.
    pub(crate) desired: Vec<Release>,
    /// Helm work to do.
    pub(crate) jobs: Vec<Job>,
    /// Parts of the spec that wait for a change.
    pub(crate) problems: Vec<Problem>,
    /// Releases on clusters whose state is not known yet.
    pub(crate) waiting: Vec<ReleaseKey>,
    /// Seconds until a release now pending counts as stuck, when one is pending.
    pub(crate) recheck_in: Option<i64>,
    /// What enforcing the tenancy policies would refuse, in permissive mode.
    pub(crate) warnings: Vec<String>,
    /// Releases whose Helm work (an install, upgrade or uninstall) is held back by `suspend`.
    pub(crate) suspended: Vec<ReleaseKey>,
    /// What the spec suspends, in words, when it suspends anything.
    pub(crate) suspension: Option<String>,
    /// Releases whose Helm work waits for the rollout to reach their cluster.
    pub(crate) rollout_held: Vec<ReleaseKey>,
    /// Where the rollout stands, in words, when it holds anything back.
    pub(crate) rollout_note: Option<String>,
    /// The hub objects `valuesFrom` read for this plan (found or not), to be watched.
    pub(crate) sources: BTreeSet<ValuesSource>,
    /// The Git values files `valuesFiles` read for this plan (found or not), to be loaded.
    pub(crate) git_files: BTreeSet<crate::plan::release::GitFileSource>,
    /// The `dependsOn` of the releases the spec names, as release keys (see [`depends`]).
    pub(crate) depends_on: depends::Edges,
    /// Releases whose Helm work waits for a release it depends on to be Ready (an install or
    /// upgrade) or for the releases depending on it to be uninstalled first (an uninstall), each
    /// with what it waits for, in words.
    pub(crate) dependency_held: depends::Held,
}

/// A resource asking for release keys: who, when it was created, and the keys.
pub(crate) type Claimant = (OwnerId, i64, Vec<ReleaseKey>);

/// A resource as a claimant: the release keys its spec names that `admission` lets it claim,
/// whatever its charts say (so an unresolved release still holds its key). A key the policies
/// refuse claims nothing: refused for its source, or no governing policy allows its cluster and
/// namespace. With [`Admission::permissive`], every key the spec names.
pub(crate) fn claimant(
    owner: OwnerId,
    created: i64,
    spec: &ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    chart_home: &Path,
    admission: &Admission,
) -> Claimant {
    let any_chart =
        |_: &ChartSource, _: &Credentials, _: &Trust, _: Option<&str>| ChartLookup::Found {
            commit: None,
            version: None,
            digest: None,
            verified: None,
        };
    let desired = desired(
        &owner,
        spec,
        clusters,
        chart_home,
        &any_chart,
        admission,
        &Fleet::none(),
    );
    let refused: BTreeSet<&ReleaseKey> = desired
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::Forbidden { .. }))
        .filter_map(Problem::release)
        .collect();
    let claimed = desired
        .named
        .iter()
        .filter(|k| !refused.contains(k))
        .filter(|k| {
            admission
                .identity_for_removal(&owner.namespace, k, clusters.get(&k.scope.cluster))
                .is_ok()
        })
        .cloned()
        .collect();
    (owner, created, claimed)
}

/// Who holds each release key asked for by several resources: one rule, used by every planner.
/// The resource whose release is installed there holds it, if it still asks for it; otherwise
/// the oldest resource asking (then the smallest namespace/name). So one of them always wins.
pub(crate) fn claims(
    claimants: impl IntoIterator<Item = Claimant>,
    applied: &HashMap<ReleaseKey, Applied>,
) -> HashMap<ReleaseKey, OwnerId> {
    let mut best: HashMap<ReleaseKey, (bool, i64, OwnerId)> = HashMap::new();
    for (owner, created, keys) in claimants {
        for key in keys {
            let installed = applied
                .get(&key)
                .is_some_and(|a| a.owner.as_ref() == Some(&owner));
            // Smaller wins: installed first, then older, then by name.
            let candidate = (!installed, created, owner.clone());
            best.entry(key)
                .and_modify(|held| {
                    if candidate < *held {
                        *held = candidate.clone();
                    }
                })
                .or_insert(candidate);
        }
    }
    best.into_iter().map(|(k, (_, _, o))| (k, o)).collect()
}

/// Compares what the spec asks for with what the clusters hold and decides the Helm work.
/// Only a release the spec no longer names is uninstalled: one that cannot be planned (a missing
/// chart, a refused setting, a duplicate) keeps running as it is and is reported. A suspended
/// release gets no job at all; it is listed in `suspended` when it would have had one.
pub fn plan(inputs: &Inputs<'_>) -> Plan {
    let Desired {
        mut releases,
        mut problems,
        named,
        warnings,
        too_large,
        sources,
        git_files,
    } = desired(
        inputs.owner,
        inputs.spec,
        inputs.clusters,
        inputs.chart_home,
        inputs.chart_lookup,
        inputs.admission,
        inputs.fleet,
    );
    let mut plan = Plan {
        warnings,
        sources,
        git_files,
        suspension: suspension(inputs.spec),
        ..Plan::default()
    };
    if !too_large {
        let (spec, clusters) = (inputs.spec, inputs.clusters);
        plan.depends_on = depends::check(spec, clusters, &named, &mut releases, &mut problems);
    }
    let held = Held::of(inputs.spec, inputs.clusters);
    for release in &releases {
        let adopt = match holding(inputs, release) {
            Holding::Ours => false,
            Holding::Adoptable => true,
            Holding::Other(holder) => {
                problems.push(Problem::Conflict {
                    key: release.key.clone(),
                    holder,
                });
                continue;
            }
        };
        plan.desired.push(release.clone());
        if !inputs.synced.contains(&release.key.scope.cluster) {
            plan.waiting.push(release.key.clone());
            continue;
        }
        plan_apply(inputs, release, adopt, &held, &mut plan);
    }
    // A spec too large to plan names no key, and uninstalls nothing either.
    if !too_large {
        plan_removals(inputs, &named, &held, &mut plan, &mut problems);
    }
    plan.problems = problems;
    plan
}

/// Who holds the key of a release this resource asks for.
enum Holding {
    /// This resource, or nobody yet.
    Ours,
    /// A Helm release tenancy-hub does not own, which this release may take over (`adopt`).
    Adoptable,
    /// Somebody else, in words: the Controller the claims give it to, the one whose sealed
    /// release is installed there, or the Helm user (no verified owner) with why it stays theirs.
    Other(String),
}

/// Who holds the key of `release`. A release another Controller owns (its record sealed for
/// that Controller) is never adoptable; one no seal vouches for is, where `release.adoption`
/// allows it.
fn holding(inputs: &Inputs<'_>, release: &Release) -> Holding {
    let key = &release.key;
    match inputs.claims.get(key) {
        Some(h) if h != inputs.owner => Holding::Other(format!("Controller {h}")),
        _ => match inputs.applied.get(key).map(|a| &a.owner) {
            Some(Some(o)) if o != inputs.owner => Holding::Other(format!("Controller {o}")),
            Some(None) => match &release.adoption {
                Adoption::Allowed => Holding::Adoptable,
                Adoption::Refused(why) => Holding::Other(format!(
                    "a Helm release not managed by tenancy-hub, which adopt: true may not take over ({why})"
                )),
                Adoption::NotAsked => Holding::Other(
                    "a Helm release not managed by tenancy-hub (to take it over without an outage, set adopt: true on its chart entry, where a TenancyPolicy sets allowAdoption)"
                        .into(),
                ),
            },
            _ => Holding::Ours,
        },
    }
}

/// The Helm work for one release this resource holds on a synced cluster: an apply when it is
/// not installed, differs from the spec, has been pending past the timeout (noting when to look
/// again while it is not), or drifted in its deployed revision with repair enabled. A release
/// `suspend` holds is listed as suspended instead.
fn plan_apply(inputs: &Inputs<'_>, release: &Release, adopt: bool, held: &Held, plan: &mut Plan) {
    let mut repair = None;
    let job = match inputs.applied.get(&release.key) {
        None => Some(None),
        Some(a) if a.is_pending() => {
            // A release whose own timeout is longer is left pending that long, and a minute.
            let limit = release
                .helm
                .apply_timeout_secs()
                .map_or(inputs.pending_timeout_secs, |t| {
                    inputs.pending_timeout_secs.max(t.saturating_add(60))
                });
            let age = a.modified_at.map_or(i64::MAX, |t| inputs.now - t);
            let left = limit.saturating_sub(age) + 1;
            if left > 0 {
                plan.recheck_in = Some(plan.recheck_in.map_or(left, |r| r.min(left)));
            }
            (age > limit).then_some(Some(a.revision))
        }
        Some(a) if a.status == "deployed" && a.spec_hash.as_deref() == Some(&release.spec_hash) => {
            // Deployed as asked: applied again, unchanged, only to repair drift found in
            // this very revision (a repair makes a new one, which is compared afresh).
            repair = inputs
                .drifted
                .get(&release.key)
                .filter(|d| d.revision == a.revision && release.drift.mode == DriftMode::Enabled)
                .map(|d| d.summary.clone());
            repair.is_some().then_some(None)
        }
        Some(_) => Some(None),
    };
    if job.is_some() && held.holds(&release.key) {
        plan.suspended.push(release.key.clone());
    } else if let Some(stale_pending) = job {
        let installing = inputs
            .applied
            .get(&release.key)
            .is_none_or(|a| a.status == "uninstalled");
        plan.jobs.push(Job::Apply {
            adopt,
            release: Box::new(release.clone()),
            stale_pending,
            repair,
            installing,
            attempt: 0,
        });
    }
}

/// Uninstalls, by key, the releases this resource holds on synced clusters that its spec no
/// longer names (and that are not being uninstalled already). One `suspend` holds is listed as
/// suspended; one no governing policy lets be removed is left in place and reported.
fn plan_removals(
    inputs: &Inputs<'_>,
    named: &BTreeSet<ReleaseKey>,
    held: &Held,
    plan: &mut Plan,
    problems: &mut Vec<Problem>,
) {
    let mut removals: Vec<&Applied> = inputs
        .applied
        .values()
        .filter(|a| a.owner.as_ref() == Some(inputs.owner))
        .filter(|a| !named.contains(&a.key) && inputs.synced.contains(&a.key.scope.cluster))
        .filter(|a| a.status != "uninstalling")
        .collect();
    removals.sort_by(|a, b| a.key.cmp(&b.key));
    let (kept, removals): (Vec<&Applied>, Vec<&Applied>) =
        removals.into_iter().partition(|a| held.holds(&a.key));
    plan.suspended
        .extend(kept.into_iter().map(|a| a.key.clone()));
    for a in removals {
        match inputs.admission.identity_for_removal(
            &inputs.owner.namespace,
            &a.key,
            inputs.clusters.get(&a.key.scope.cluster),
        ) {
            // Its chart entry is gone: uninstalled with the executor's defaults.
            Ok(identity) => plan.jobs.push(Job::Uninstall {
                key: a.key.clone(),
                owner: inputs.owner.clone(),
                identity,
                settings: Default::default(),
            }),
            // Nothing runs with the operator's rights on the tenant's behalf: left in place.
            Err(rule) => problems.push(Problem::Forbidden {
                key: a.key.clone(),
                chart: a.key.release.clone(),
                rule,
            }),
        }
    }
}

/// Runs CPU-heavy work of `size` units (charts named, Controllers) with `block_in_place` when it
/// is big and the runtime is multi-threaded, so the worker's other tasks (lease renewal among
/// them) move to another thread meanwhile; in place otherwise (tests use current-thread runtimes,
/// where `block_in_place` is not allowed).
pub(crate) fn offload<T>(size: usize, work: impl FnOnce() -> T) -> T {
    const BIG: usize = 64;
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if size >= BIG && multi {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}
