//! The words of `status.rollout`: rollout phases, per-cluster states, the facts a cluster is
//! judged on, timestamps as the status writes them, and the counts it shows (pure).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::{api::crd::RolloutStatus, api::key::ClusterName};

/// Rollout phases shown in `status.rollout.phase`.
pub(crate) mod phase {
    /// Clusters are being given the new generation.
    pub(crate) const PROGRESSING: &str = "Progressing";
    /// A wave is healthy; the next waits out `pauseBetweenWaves`.
    pub(crate) const PAUSED: &str = "Paused";
    /// A cluster failed or was not healthy in time; nothing more is started.
    pub(crate) const HALTED: &str = "Halted";
    /// Every cluster is healthy on the new generation.
    pub(crate) const COMPLETE: &str = "Complete";
}

/// States of one cluster in `status.rollout.clusters[].state`.
pub(crate) mod state {
    /// Not reached yet: keeps the previous generation.
    pub(crate) const PENDING: &str = "Pending";
    /// Given the new generation; not healthy on it yet.
    pub(crate) const PROGRESSING: &str = "Progressing";
    /// Healthy on the new generation.
    pub(crate) const HEALTHY: &str = "Healthy";
    /// Halted the rollout.
    pub(crate) const FAILED: &str = "Failed";
}

/// What is known of one targeted cluster now, for the newest generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// Every release of the cluster runs the newest spec, and no job for it is queued or running.
    pub(crate) updated: bool,
    /// Updated, and ready by the `Ready` rule: deployed from this generation, watched live,
    /// workloads rolled out, pods ready.
    pub(crate) healthy: bool,
    /// The cluster's API server answers.
    pub(crate) reachable: bool,
    /// A release of the cluster whose Helm job for the newest spec failed: release and message.
    pub(crate) failed: Option<(String, String)>,
    /// Why it is not healthy, in words: release (may be empty) and what it waits for.
    pub(crate) waiting: Option<(String, String)>,
}

/// A time as the status writes it: RFC 3339, to the millisecond.
pub(crate) fn stamp(t: Timestamp) -> String {
    t.round(k8s_openapi::jiff::Unit::Millisecond)
        .unwrap_or(t)
        .to_string()
}

/// A time the status wrote, in Unix milliseconds; None when it cannot be read.
pub(crate) fn millis(text: &str) -> Option<i64> {
    text.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

/// Brings the counts of `status.rollout` (healthy, pending, failed, updated, progress, waves) up
/// to its clusters, and shows a halt as the `Halted` phase.
pub(crate) fn count(s: &mut RolloutStatus, facts: &BTreeMap<ClusterName, Facts>) {
    let of = |st: &str| s.clusters.iter().filter(|c| c.state == st).count() as i32;
    s.healthy = of(state::HEALTHY);
    s.pending = of(state::PENDING);
    s.failed = of(state::FAILED);
    s.updated = s
        .clusters
        .iter()
        .filter(|c| facts.iter().any(|(k, f)| k.as_str() == c.name && f.updated))
        .count() as i32;
    s.progress = format!("{}/{}", s.healthy, s.clusters.len());
    s.waves = s
        .waves
        .max(s.clusters.iter().map(|c| c.wave).max().unwrap_or(1));
    if s.halted.is_some() {
        s.phase = phase::HALTED.into();
    }
}
