//! Drift repairs in a decision: those the repair limiter refuses leave the plan's jobs; each
//! refusal is told once per drifted revision, by the reconciler.

use std::{collections::HashMap, time::Duration};

use kube::runtime::events::EventType;

use crate::{
    api::crd::TenancyController,
    api::key::ReleaseKey,
    controller::events::{Events, publish},
    controller::observed::RepairLimiter,
    observe::drift::RepairVerdict,
    plan::{self, Job},
};

/// What the limiter refused: every release whose repair it dropped, and those refused for the
/// first time for their drifted revision, each with how long until a repair may run again.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    /// Every release whose repair was dropped.
    pub(crate) all: Vec<ReleaseKey>,
    /// Those refused for the first time, to be told.
    pub(crate) first: Vec<(ReleaseKey, Duration)>,
}

/// Drops the drift repairs the limiter refuses, and says which (see [`Refused`]).
pub(crate) fn limit_repairs(
    jobs: &mut Vec<Job>,
    drifted: &HashMap<ReleaseKey, plan::Drifted>,
    allow_repair: RepairLimiter<'_>,
) -> Refused {
    let mut refused = Refused::default();
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
        match allow_repair(&release.key, found.revision) {
            (RepairVerdict::Allowed, _) => true,
            (RepairVerdict::Suppressed(wait), first) => {
                refused.all.push(release.key.clone());
                if first {
                    refused.first.push((release.key.clone(), wait));
                }
                false
            }
        }
    });
    refused
}

/// Tells each repair refused for the first time: a log line and a Warning Event.
pub(crate) async fn tell_refused(
    events: &Events,
    c: &TenancyController,
    refused: &[(ReleaseKey, Duration)],
) {
    for (key, wait) in refused {
        let note = format!(
            "release {key} drifted again, but it was repaired {} times within {} minutes already; it is reported only, and repaired again in {}s at the earliest (another controller may be changing it)",
            crate::controller::drift::REPAIRS_PER_WINDOW,
            crate::controller::drift::REPAIR_WINDOW.as_secs() / 60,
            wait.as_secs()
        );
        tracing::warn!(release = %key, "{note}");
        publish(
            events,
            c,
            EventType::Warning,
            "DriftRepairSuppressed",
            "Drift",
            note,
        )
        .await;
    }
}
