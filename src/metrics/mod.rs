//! Operator metrics on `prometheus-client`: one registry, encoded as OpenMetrics text; the
//! metrics are built and registered per concern, each in a file of its own.

use std::sync::{Mutex, PoisonError};

use prometheus_client::{encoding::text::encode, registry::Registry};

mod channels;
mod charts;
mod clusters;
mod common;
mod helm_jobs;
mod hub_reads;
mod notifications;
mod reconciles;
mod releases;
mod status_writes;
mod watches;

pub(crate) use common::Gauges;

use channels::Channels;
use charts::Charts;
use clusters::Clusters;
use common::{
    ClusterLabels, DriftLabels, JobLabels, KindLabels, ORPHAN_REASONS, ReasonLabels, ResultLabels,
    gauge_value,
};
use helm_jobs::HelmJobs;
use hub_reads::HubReads;
use notifications::Notifications;
use reconciles::Reconciles;
use releases::Releases;
use status_writes::StatusWrites;
use watches::Watches;

/// The operator's counters, histograms and gauges in one registry, by concern; share one
/// through an `Arc`.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    reconciles: Reconciles,
    jobs: HelmJobs,
    releases: Releases,
    watches: Watches,
    status: StatusWrites,
    clusters: Clusters,
    channels: Channels,
    charts: Charts,
    notifications: Notifications,
    hub_reads: HubReads,
    /// Held while the scrape-time gauges are set and encoded, so scrapes do not interleave.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Builds every metric and registers it, concern by concern. Counters are registered
    /// without `_total`: the encoder appends it.
    pub(crate) fn new() -> Self {
        let mut r = Registry::with_prefix("tenancy_hub");
        Metrics {
            reconciles: Reconciles::register(&mut r),
            jobs: HelmJobs::register(&mut r),
            releases: Releases::register(&mut r),
            watches: Watches::register(&mut r),
            status: StatusWrites::register(&mut r),
            clusters: Clusters::register(&mut r),
            channels: Channels::register(&mut r),
            charts: Charts::register(&mut r),
            notifications: Notifications::register(&mut r),
            hub_reads: HubReads::register(&mut r),
            registry: r,
            scrape: Mutex::new(()),
        }
    }

    /// Sets the bytes of pull member `cluster`'s reports held.
    pub(crate) fn pull_member_bytes(&self, cluster: &str, bytes: usize) {
        self.clusters
            .pull_bytes
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts one notification by its `result`: `sent`, `failed`, `dropped` or `rate_limited`.
    pub(crate) fn notification(&self, result: &'static str) {
        self.notifications
            .total
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts one read of an Alert's Secret returning `bytes` of data.
    pub(crate) fn alert_secret_read(&self, bytes: usize) {
        self.notifications.secret_reads.inc();
        self.notifications
            .secret_read_bytes
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// Counts one review the status API asked the hub: `TokenReview` or `SubjectAccessReview`.
    pub(crate) fn status_api_review(&self, kind: &'static str) {
        self.hub_reads
            .reviews
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Counts one values object whose content was read: `Secret` or `ConfigMap`.
    pub(crate) fn values_read(&self, kind: &'static str) {
        self.hub_reads
            .values
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Counts one chart archive wanted: found in the cache (`hit`) or not.
    pub(crate) fn chart_cache(&self, hit: bool) {
        if hit {
            self.charts.hits.inc();
        } else {
            self.charts.misses.inc();
        }
    }

    /// Counts `bytes` fetched by the chart cache: `index` or `archive`.
    pub(crate) fn chart_fetched(&self, kind: &'static str, bytes: u64) {
        self.charts
            .fetched
            .get_or_create(&KindLabels { kind })
            .inc_by(bytes);
    }

    /// Counts one remote chart resolution under source prefix `source`: `ok` or `error`.
    pub(crate) fn chart_resolved(&self, source: &str, ok: bool) {
        let source = self.charts.source_label(source);
        let outcome = if ok { "ok" } else { "error" };
        self.charts
            .resolutions
            .get_or_create(&charts::ResolutionLabels { source, outcome })
            .inc();
    }

    /// Counts one signature check under source prefix `source` by `provider`, with its
    /// `outcome`: `verified`, a refusal's label, or `error`.
    pub(crate) fn chart_verified(
        &self,
        source: &str,
        provider: &'static str,
        outcome: &'static str,
    ) {
        let source = self.charts.source_label(source);
        self.charts
            .verifications
            .get_or_create(&charts::VerificationLabels {
                source,
                provider,
                outcome,
            })
            .inc();
    }

    /// Records the size of the archives the chart cache keeps.
    pub(crate) fn chart_cache_size(&self, bytes: u64) {
        self.charts
            .size
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts one reconcile of a `Controller` that took `seconds`; `error` is the failure's
    /// label (its error's `metric_label()`), `None` when it succeeded.
    pub(crate) fn reconcile(&self, seconds: f64, error: Option<&'static str>) {
        let result = if error.is_some() { "error" } else { "ok" };
        self.reconciles
            .runs
            .get_or_create(&ResultLabels { result })
            .inc();
        if let Some(reason) = error {
            self.reconciles
                .errors
                .get_or_create(&ReasonLabels { reason })
                .inc();
        }
        self.reconciles.duration.observe(seconds.max(0.0));
    }

    /// Counts one finished Helm job on `cluster` with its `outcome` (such as `applied`, `failed`).
    pub(crate) fn helm_job(&self, cluster: &str, outcome: &str, seconds: f64) {
        self.jobs
            .finished
            .get_or_create(&JobLabels {
                cluster: cluster.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.jobs
            .duration
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .observe(seconds.max(0.0));
    }

    /// Counts drift `found` in, or `repaired` on, `cluster`.
    pub(crate) fn drift(&self, cluster: &str, action: &'static str) {
        self.releases
            .drift
            .get_or_create(&DriftLabels {
                cluster: cluster.to_owned(),
                action,
            })
            .inc();
    }

    /// Records how long a Helm job waited in the queue before it started.
    pub(crate) fn queue_wait(&self, seconds: f64) {
        self.jobs.queue_wait.observe(seconds.max(0.0));
    }

    /// Records how long a change took to reach a resource's status.
    pub(crate) fn status_propagation(&self, seconds: f64) {
        self.status.propagation.observe(seconds.max(0.0));
    }

    /// Records how long a finished rollout took.
    pub(crate) fn rollout(&self, seconds: f64) {
        self.reconciles.rollout_duration.observe(seconds.max(0.0));
    }

    /// Counts one restart of a broken watch stream on `cluster`.
    pub(crate) fn watch_restart(&self, cluster: &str) {
        self.watches
            .restarts
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .inc();
    }

    /// Counts one event delivered by a watch.
    pub(crate) fn watch_event(&self) {
        self.watches.events.inc();
    }

    /// Counts one status write to a `Controller`.
    pub(crate) fn status_write(&self) {
        self.status.written.inc();
    }

    /// Counts one status write skipped because nothing changed.
    pub(crate) fn status_write_skipped(&self) {
        self.status.skipped.inc();
    }

    /// Counts one reload of the registration file: applied (`ok`) or refused.
    pub(crate) fn registry_reload(&self, ok: bool) {
        if ok {
            self.clusters.reloads.inc();
        } else {
            self.clusters.rejects.inc();
        }
    }

    /// Records how many releases are left without a manager: their owner is gone, or their
    /// cluster is no longer registered.
    pub(crate) fn orphaned(&self, owner_gone: usize, unregistered: usize) {
        for (reason, n) in ORPHAN_REASONS.into_iter().zip([owner_gone, unregistered]) {
            self.releases
                .orphaned
                .get_or_create(&ReasonLabels { reason })
                .set(gauge_value(n));
        }
    }

    /// Sets the gauges sampled at scrape time and encodes every metric as OpenMetrics text.
    pub(crate) fn render(&self, gauges: &Gauges) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(PoisonError::into_inner);
        self.jobs.sample(gauges);
        self.watches.sample(gauges);
        self.clusters.sample(gauges);
        self.channels.sample(gauges);
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests;
