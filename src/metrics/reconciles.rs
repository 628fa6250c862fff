//! Reconciles of `Controller` resources and the progressive rollouts they drive: runs, errors, durations.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::{Registry, Unit},
};

use super::common::{
    ReasonLabels, ResultLabels, long_buckets, registered, registered_in, short_buckets,
};

/// Reconciles of `Controller` resources and the progressive rollouts they drive.
#[derive(Debug)]
pub(crate) struct Reconciles {
    pub(crate) runs: Family<ResultLabels, Counter>,
    pub(crate) errors: Family<ReasonLabels, Counter>,
    pub(crate) duration: Histogram,
    pub(crate) rollout_duration: Histogram,
}

impl Reconciles {
    pub(crate) fn register(r: &mut Registry) -> Self {
        let m = Self {
            runs: registered(
                r,
                "reconciles",
                "Reconciles of Controller resources, by result",
                Family::default(),
            ),
            errors: registered(
                r,
                "reconcile_errors",
                "Failed reconciles, by the kind of error",
                Family::default(),
            ),
            duration: registered_in(
                r,
                "reconcile_duration",
                "Time spent reconciling a Controller resource",
                Unit::Seconds,
                short_buckets(),
            ),
            rollout_duration: registered_in(
                r,
                "rollout_duration",
                "Time a progressive rollout took from its start until every cluster was healthy on the generation",
                Unit::Seconds,
                long_buckets(),
            ),
        };
        for result in ["ok", "error"] {
            m.runs.get_or_create_owned(&ResultLabels { result });
        }
        m
    }
}
