//! Helm jobs: how long they wait in the queue, how many wait and run, how they end.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Registry, Unit},
};

use super::common::{
    ClusterLabels, Gauges, Histograms, JobLabels, gauge_value, long_buckets, registered,
    registered_in, short_buckets,
};

/// Helm jobs: how long they wait in the queue, how many wait and run, how they end.
#[derive(Debug)]
pub(crate) struct HelmJobs {
    pub(crate) finished: Family<JobLabels, Counter>,
    pub(crate) duration: Histograms<ClusterLabels>,
    pub(crate) queue_wait: Histogram,
    pub(crate) queue_depth: Gauge,
    pub(crate) running: Gauge,
}

impl HelmJobs {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Self {
            finished: registered(
                r,
                "helm_jobs",
                "Helm jobs finished, by cluster and outcome",
                Family::default(),
            ),
            duration: registered_in(
                r,
                "helm_job_duration",
                "Time Helm jobs took, by cluster",
                Unit::Seconds,
                Family::new_with_constructor(long_buckets),
            ),
            queue_wait: registered_in(
                r,
                "queue_wait",
                "Time Helm jobs waited in the queue before they started",
                Unit::Seconds,
                short_buckets(),
            ),
            queue_depth: registered(
                r,
                "queue_depth",
                "Helm jobs waiting in the queue",
                Gauge::default(),
            ),
            running: registered(r, "jobs_running", "Helm jobs running now", Gauge::default()),
        }
    }

    /// Sets the queue's gauges from a scrape's sample.
    pub(crate) fn sample(&self, gauges: &Gauges) {
        self.queue_depth.set(gauge_value(gauges.queue_depth));
        self.running.set(gauge_value(gauges.jobs_running));
    }
}
