//! Release phases shown in `chartMessages[].phase`, which of them tenancy-hub manages, and the counts summaries are made of (pure).

use crate::api::crd::TenancyStatus;

/// Installed or upgraded to the current spec.
pub(crate) const DEPLOYED: &str = "Deployed";
/// Waiting for or running a Helm job.
pub(crate) const PENDING: &str = "Pending";
/// The last Helm job failed.
pub(crate) const FAILED: &str = "Failed";
/// Held by someone else; left alone.
pub(crate) const CONFLICT: &str = "Conflict";
/// Not known: the cluster has not been reached yet.
pub(crate) const UNKNOWN: &str = "Unknown";
/// Cannot be planned as written.
pub(crate) const INVALID: &str = "Invalid";
/// Not allowed by the tenancy policies: no Helm call; what runs stays as it is.
pub(crate) const FORBIDDEN: &str = "Forbidden";
/// Its chart's signatures do not pass a rule of the tenancy policies: no Helm call; what runs
/// stays as it is.
pub(crate) const UNVERIFIED: &str = "Unverified";
/// Left in a cluster that is no longer registered.
pub(crate) const ORPHANED: &str = "Orphaned";
/// A change to it is held back by `suspend`: what runs stays as it is until resumed.
pub(crate) const SUSPENDED: &str = "Suspended";

/// Phases of releases tenancy-hub manages and watches (not refused, held elsewhere or orphaned).
pub(crate) fn is_managed(phase: &str) -> bool {
    [DEPLOYED, PENDING, FAILED, UNKNOWN, SUSPENDED].contains(&phase)
}

/// Deployed releases, releases, ready pods and pods of `entries`.
pub(crate) fn counts<'a>(
    entries: impl Iterator<Item = &'a TenancyStatus>,
) -> (usize, usize, i32, i32) {
    let (mut deployed, mut releases, mut pods_ready, mut pods) = (0, 0, 0, 0);
    for t in entries {
        releases += t
            .chart_messages
            .iter()
            .filter(|m| !m.release_name.is_empty())
            .count();
        deployed += t
            .chart_messages
            .iter()
            .filter(|m| m.phase == DEPLOYED)
            .count();
        pods += t.pods_total;
        pods_ready += t.pods_ready;
    }
    (deployed, releases, pods_ready, pods)
}
