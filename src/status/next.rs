//! What the planner will do next for one Controller's releases (pure): the Helm action of every
//! job its plan holds, let through or held back by a gate, with what holds it. `diff` reports
//! these for a file; the reconciler keeps them for the fleet view, so a viewer reads the same
//! answer the operator acts on.

use std::{collections::HashMap, sync::Arc};

use serde::Serialize;

use crate::{
    api::key::ReleaseKey,
    plan::{Applied, Job, Plan, Release},
};

/// What would happen to one release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
    /// A first `helm install`.
    Install,
    /// A `helm upgrade` to a new revision.
    Upgrade,
    /// A `helm uninstall`.
    Uninstall,
    /// No Helm call.
    Unchanged,
    /// No Helm call because the release cannot be delivered as written: invalid, in conflict, or
    /// forbidden by the tenancy policies.
    Refused,
    /// Not known: the cluster's releases could not be read.
    Unknown,
}

impl Action {
    /// The action in a word.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Action::Install => "install",
            Action::Upgrade => "upgrade",
            Action::Uninstall => "uninstall",
            Action::Unchanged => "unchanged",
            Action::Refused => "refused",
            Action::Unknown => "unknown",
        }
    }
}

/// One job of a plan: its release, its Helm action, and what holds it back, if a gate does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Next {
    /// The release.
    pub(crate) key: ReleaseKey,
    /// Its Helm action.
    pub(crate) action: Action,
    /// Why the gates hold it back, in words; None when it is let through.
    pub(crate) held: Option<String>,
    /// The release as planned, for an install or upgrade: what its manifest diff renders.
    pub(crate) release: Option<Arc<Release>>,
    /// The revision deployed now, if any: what its manifest diff compares with.
    pub(crate) revision: Option<i64>,
}

/// The jobs of `plan` (let through) and `held` (held back by the rollout or `dependsOn`), each
/// with its action, given the releases `applied` now, in the plan's order.
pub(crate) fn next(plan: &Plan, held: &[Job], applied: &HashMap<ReleaseKey, Applied>) -> Vec<Next> {
    plan.jobs
        .iter()
        .chain(held)
        .map(|job| Next {
            key: job.key().clone(),
            action: match job {
                Job::Apply { .. } if applied.contains_key(job.key()) => Action::Upgrade,
                Job::Apply { .. } => Action::Install,
                Job::Uninstall { .. } => Action::Uninstall,
                Job::Rollback { .. } => Action::Upgrade,
            },
            held: held_back(plan, job.key()),
            release: match job {
                Job::Apply { release, .. } => Some(Arc::new((**release).clone())),
                _ => None,
            },
            revision: applied.get(job.key()).map(|a| a.revision),
        })
        .collect()
}

/// Why the gates hold back `key`'s Helm work, in words, when they do: the rollout has not
/// reached its cluster, or `dependsOn` orders it after a release that is not Ready.
fn held_back(plan: &Plan, key: &ReleaseKey) -> Option<String> {
    if plan.rollout_held.contains(key) {
        // The rollout's note says so itself ("held back by the rollout: waiting for …").
        return Some(match plan.rollout_note.as_deref() {
            Some(note) if note.starts_with("held back by the rollout") => note.to_owned(),
            Some(note) => format!("held back by the rollout: {note}"),
            None => "held back by the rollout: waiting for the rollout".to_owned(),
        });
    }
    plan.dependency_held
        .get(key)
        .map(|waits| format!("held back by dependsOn: {waits}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_held_by_the_rollout_says_so_once() {
        let key: ReleaseKey = "member-2/apps/web".parse().unwrap();
        let mut plan = Plan {
            rollout_held: vec![key.clone()],
            ..Plan::default()
        };
        plan.rollout_note = Some("held back by the rollout: waiting for rollout wave 1/2".into());
        assert_eq!(
            held_back(&plan, &key).as_deref(),
            Some("held back by the rollout: waiting for rollout wave 1/2")
        );
        plan.rollout_note = Some("waiting".into());
        assert_eq!(
            held_back(&plan, &key).as_deref(),
            Some("held back by the rollout: waiting")
        );
    }
}
