//! What a plan cannot carry out, told once: its new problems in logs and Events, and what
//! enforcing the tenancy policies would refuse (permissive mode) in logs.

use std::collections::BTreeSet;

use kube::runtime::events::EventType;

use crate::{
    api::crd::TenancyController,
    controller::events::{EVENT_BURST, Events, publish},
    controller::index::ControllerIndex,
    plan::{self, owner_id},
};

/// Logs and publishes the problems that are new since the resource's last plan (and logs what
/// enforcing the tenancy policies would refuse, in permissive mode), so each is told once per
/// change of the spec or the world, not on every reconcile.
pub(crate) async fn report_new_problems(
    (index, events): (&ControllerIndex, &Events),
    c: &TenancyController,
    problems: &[plan::Problem],
    warnings: &[String],
) {
    let owner = owner_id(c);
    let told: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let notes: BTreeSet<String> = told.iter().chain(warnings).cloned().collect();
    let before = index.told(&owner, notes);
    // Told one by one up to the Events a resource may get in a burst, then counted: a spec with
    // thousands of problems makes a few log lines and Events, not thousands.
    let limit = EVENT_BURST as usize;
    let new = problems
        .iter()
        .zip(told)
        .filter(|(_, note)| !before.contains(note));
    let mut untold = 0;
    for (i, (problem, note)) in new.enumerate() {
        if i >= limit {
            untold += 1;
            continue;
        }
        tracing::warn!(controller = %owner, problem = %note, "spec cannot be carried out as written");
        publish(
            events,
            c,
            EventType::Warning,
            problem.reason(),
            "Plan",
            note,
        )
        .await;
    }
    // Logged only: a hub migrating to policies would otherwise get an Event on every Controller.
    for (i, warning) in warnings.iter().filter(|w| !before.contains(*w)).enumerate() {
        if i >= limit {
            untold += 1;
            continue;
        }
        tracing::warn!(controller = %owner, %warning, "no tenancy policy allows this release (permissive mode: delivered anyway)");
    }
    if untold > 0 {
        tracing::warn!(controller = %owner, untold, "more new problems of this spec than are logged one by one; its status counts them");
    }
}
