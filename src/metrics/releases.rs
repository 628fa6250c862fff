//! What becomes of delivered releases: drift found or repaired, releases left without a manager.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use super::common::{DriftLabels, ORPHAN_REASONS, ReasonLabels, registered};

/// What becomes of delivered releases: drift found or repaired, releases left without a manager.
#[derive(Debug)]
pub(crate) struct Releases {
    pub(crate) drift: Family<DriftLabels, Counter>,
    pub(crate) orphaned: Family<ReasonLabels, Gauge>,
}

impl Releases {
    pub(crate) fn register(r: &mut Registry) -> Self {
        let m = Self {
            drift: registered(
                r,
                "drift",
                "Drift between a release's manifest and its live objects, by cluster and action: found (each new or changed finding) or repaired",
                Family::default(),
            ),
            orphaned: registered(
                r,
                "orphaned_releases",
                "Releases left without a manager, by reason: their Controller is gone, or their cluster is no longer registered",
                Family::default(),
            ),
        };
        for reason in ORPHAN_REASONS {
            m.orphaned.get_or_create_owned(&ReasonLabels { reason });
        }
        m
    }
}
