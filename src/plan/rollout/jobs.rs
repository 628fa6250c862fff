//! The rollout gate applied to the plan's Helm jobs: the work of clusters not reached is held
//! back, and a halt with `rollbackOnHalt` asks for rollbacks (pure).

use std::collections::{BTreeSet, HashMap};

use crate::{
    api::crd::RolloutStatus,
    api::key::{ClusterName, ReleaseKey},
    plan::{Applied, Job, Plan, Release},
};

use super::{settings::Settings, states::state};

/// Holds back the Helm work of clusters the rollout has not reached: their jobs (installs,
/// upgrades, uninstalls, drift repairs) leave the plan and their releases are listed as held, so
/// what runs there stays exactly as it is.
pub(crate) fn hold(plan: &mut Plan, allowed: &BTreeSet<ClusterName>, note: String) {
    let (go, wait): (Vec<Job>, Vec<Job>) = std::mem::take(&mut plan.jobs)
        .into_iter()
        .partition(|j| allowed.contains(&j.key().scope.cluster));
    plan.jobs = go;
    plan.rollout_held = wait.iter().map(|j| j.key().clone()).collect();
    if !plan.rollout_held.is_empty() {
        plan.rollout_note = Some(note);
    }
}

/// With `rollbackOnHalt`, the rollbacks a halted rollout asks for: every release of a failed
/// cluster that runs the new generation (its newest record is from the new spec) goes back to
/// the revision before it. A first install has no revision before it and is left as it is.
/// Asked for on every step while it holds, so the queue keeps it; once rolled back, the record
/// is from the old spec and nothing more is asked.
pub(crate) fn rollbacks(
    state: &RolloutStatus,
    settings: &Settings,
    desired: &[Release],
    applied: &HashMap<ReleaseKey, Applied>,
) -> Vec<Job> {
    if !settings.rollback_on_halt || state.halted.is_none() {
        return Vec::new();
    }
    let failed: BTreeSet<&str> = state
        .clusters
        .iter()
        .filter(|c| c.state == state::FAILED)
        .map(|c| c.name.as_str())
        .collect();
    desired
        .iter()
        .filter(|r| failed.contains(r.key.scope.cluster.as_str()))
        .filter_map(|r| {
            let a = applied.get(&r.key)?;
            (a.spec_hash.as_deref() == Some(&r.spec_hash) && a.revision >= 2 && !a.is_pending())
                .then(|| Job::Rollback {
                    key: r.key.clone(),
                    owner: r.owner.clone(),
                    from: a.revision,
                    identity: r.identity.clone(),
                    helm: Box::new(r.helm.clone()),
                })
        })
        .collect()
}

/// The line held releases show: where the rollout is, and what it waits for.
pub(crate) fn note(state: &RolloutStatus) -> String {
    match &state.halted {
        Some(h) => format!(
            "held back by the rollout, halted at cluster {}: {}",
            h.cluster, h.reason
        ),
        None => format!(
            "held back by the rollout: waiting for rollout wave {}/{} ({} of {} clusters healthy)",
            state.wave,
            state.waves,
            state.healthy,
            state.clusters.len()
        ),
    }
}
