//! Drift repairs in a reconcile: those the repair limiter refuses leave the plan's jobs, and each
//! refusal is told once per drifted revision.

use std::collections::HashMap;

use kube::runtime::events::EventType;

use crate::{
    api::crd::Controller,
    api::key::ReleaseKey,
    controller::context::Context,
    controller::events::publish,
    observe::drift::RepairVerdict,
    plan::{self, Job},
};

/// Drops the drift repairs the limiter refuses, telling each refusal once per drifted revision.
pub(crate) async fn limit_repairs(
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
