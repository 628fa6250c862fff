//! Operator metrics on `prometheus-client`: one registry, encoded as OpenMetrics text.

use std::sync::{Mutex, PoisonError};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Metric, Registry, Unit},
};

/// Values sampled at scrape time rather than counted as they happen.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Gauges {
    /// Helm jobs waiting in the queue.
    pub(crate) queue_depth: usize,
    /// Helm jobs running now.
    pub(crate) jobs_running: usize,
    /// Every registered cluster's name and whether it is reachable.
    pub(crate) clusters: Vec<(String, bool)>,
    /// Cluster namespaces watched.
    pub(crate) watched_namespaces: usize,
    /// Messages waiting in each bounded channel between components, by channel name.
    pub(crate) channels: Vec<(&'static str, usize)>,
    /// Watch streams open to member clusters, by what they watch.
    pub(crate) streams: Vec<(&'static str, usize)>,
}

/// A bounded channel between components.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    channel: &'static str,
}

/// What a watch stream watches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

/// How a reconcile ended: `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Why something failed or was left over.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The cluster a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

/// A finished Helm job's cluster and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    cluster: String,
    outcome: String,
}

/// What was done about drift in a cluster: `found` or `repaired`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriftLabels {
    cluster: String,
    action: &'static str,
}

/// What a chart fetch brought: a repository `index` or a chart `archive`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The kinds of chart fetches, always exposed even at zero.
const FETCH_KINDS: [&str; 2] = ["index", "archive"];

/// A histogram family whose members share one set of buckets.
type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

/// Buckets for reconciles and queue waits: 5ms to about 41s.
fn short_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Buckets for Helm jobs and status propagation: 100ms to about 14 minutes.
fn long_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 14))
}

/// The orphaned-release reasons, always exposed even at zero.
const ORPHAN_REASONS: [&str; 2] = ["owner-gone", "cluster-unregistered"];

/// `metric`, registered as `name` with `help`; the registry keeps a handle on the same series.
fn registered<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    r.register(name, help, metric.clone());
    metric
}

/// `metric`, registered as `name` in `unit` with `help`.
fn registered_in<M: Metric + Clone>(
    r: &mut Registry,
    name: &str,
    help: &str,
    unit: Unit,
    metric: M,
) -> M {
    r.register_with_unit(name, help, unit, metric.clone());
    metric
}

/// Reconciles of `Controller` resources and the progressive rollouts they drive.
#[derive(Debug)]
struct Reconciles {
    runs: Family<ResultLabels, Counter>,
    errors: Family<ReasonLabels, Counter>,
    duration: Histogram,
    rollout_duration: Histogram,
}

impl Reconciles {
    fn register(r: &mut Registry) -> Self {
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

/// Helm jobs: how long they wait in the queue, how many wait and run, how they end.
#[derive(Debug)]
struct HelmJobs {
    finished: Family<JobLabels, Counter>,
    duration: Histograms<ClusterLabels>,
    queue_wait: Histogram,
    queue_depth: Gauge,
    running: Gauge,
}

impl HelmJobs {
    fn register(r: &mut Registry) -> Self {
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
    fn sample(&self, gauges: &Gauges) {
        self.queue_depth.set(gauge_value(gauges.queue_depth));
        self.running.set(gauge_value(gauges.jobs_running));
    }
}

/// What becomes of delivered releases: drift found or repaired, releases left without a manager.
#[derive(Debug)]
struct Releases {
    drift: Family<DriftLabels, Counter>,
    orphaned: Family<ReasonLabels, Gauge>,
}

impl Releases {
    fn register(r: &mut Registry) -> Self {
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

/// The watches of cluster namespaces: streams open, namespaces watched, events, restarts.
#[derive(Debug)]
struct Watches {
    restarts: Family<ClusterLabels, Counter>,
    events: Counter,
    streams: Family<SourceLabels, Gauge>,
    namespaces: Gauge,
}

impl Watches {
    fn register(r: &mut Registry) -> Self {
        Self {
            restarts: registered(
                r,
                "watch_restarts",
                "Watch streams restarted after breaking, by cluster",
                Family::default(),
            ),
            events: registered(
                r,
                "watch_events",
                "Events delivered by the watches of cluster namespaces",
                Counter::default(),
            ),
            streams: registered(
                r,
                "watch_streams",
                "Watch streams open to the clusters, by what they watch: a few per cluster, however many namespaces are watched",
                Family::default(),
            ),
            namespaces: registered(
                r,
                "watched_namespaces",
                "Cluster namespaces watched",
                Gauge::default(),
            ),
        }
    }

    /// Sets the watches' gauges from a scrape's sample.
    fn sample(&self, gauges: &Gauges) {
        self.namespaces.set(gauge_value(gauges.watched_namespaces));
        for (source, streams) in &gauges.streams {
            self.streams
                .get_or_create(&SourceLabels { source })
                .set(gauge_value(*streams));
        }
    }
}

/// Status writes to `Controller` resources and how long a change takes to reach one.
#[derive(Debug)]
struct StatusWrites {
    written: Counter,
    skipped: Counter,
    propagation: Histogram,
}

impl StatusWrites {
    fn register(r: &mut Registry) -> Self {
        Self {
            written: registered(
                r,
                "status_writes",
                "Status writes to Controller resources",
                Counter::default(),
            ),
            skipped: registered(
                r,
                "status_writes_skipped",
                "Status writes skipped because nothing had changed",
                Counter::default(),
            ),
            propagation: registered_in(
                r,
                "status_propagation",
                "Time from a change reaching a resource's report or the model to its status write",
                Unit::Seconds,
                long_buckets(),
            ),
        }
    }
}

/// The registered clusters: whether each answers, and reloads of the registration file.
#[derive(Debug)]
struct Clusters {
    reachable: Family<ClusterLabels, Gauge>,
    reloads: Counter,
    rejects: Counter,
}

impl Clusters {
    fn register(r: &mut Registry) -> Self {
        Self {
            reachable: registered(
                r,
                "cluster_reachable",
                "Whether a registered cluster is reachable (1) or not (0)",
                Family::default(),
            ),
            reloads: registered(
                r,
                "registry_reloads",
                "Edits of the registration file applied without a restart",
                Counter::default(),
            ),
            rejects: registered(
                r,
                "registry_rejects",
                "Edits of the registration file refused; the last good registry stayed in force",
                Counter::default(),
            ),
        }
    }

    /// Sets whether each cluster is reachable from a scrape's sample; a cluster no longer
    /// registered disappears.
    fn sample(&self, gauges: &Gauges) {
        self.reachable.clear();
        for (cluster, up) in &gauges.clusters {
            self.reachable
                .get_or_create(&ClusterLabels {
                    cluster: cluster.clone(),
                })
                .set(i64::from(*up));
        }
    }
}

/// The bounded channels between components.
#[derive(Debug)]
struct Channels {
    depth: Family<ChannelLabels, Gauge>,
}

impl Channels {
    fn register(r: &mut Registry) -> Self {
        Self {
            depth: registered(
                r,
                "channel_depth",
                "Messages waiting in a bounded channel between components; a full channel makes its senders wait, nothing is dropped",
                Family::default(),
            ),
        }
    }

    /// Sets each channel's depth from a scrape's sample.
    fn sample(&self, gauges: &Gauges) {
        for (channel, depth) in &gauges.channels {
            self.depth
                .get_or_create(&ChannelLabels { channel })
                .set(gauge_value(*depth));
        }
    }
}

/// The chart cache: archives found or fetched, bytes fetched, bytes kept.
#[derive(Debug)]
struct Charts {
    hits: Counter,
    misses: Counter,
    fetched: Family<KindLabels, Counter>,
    size: Gauge,
}

impl Charts {
    fn register(r: &mut Registry) -> Self {
        let m = Self {
            hits: registered(
                r,
                "chart_cache_hits",
                "Chart archives wanted (by a resolution or a helm call) and found in the chart cache",
                Counter::default(),
            ),
            misses: registered(
                r,
                "chart_cache_misses",
                "Chart archives wanted and not in the chart cache: fetched into it",
                Counter::default(),
            ),
            fetched: registered_in(
                r,
                "chart_fetched",
                "Bytes the chart cache fetched, by kind: repository index or chart archive",
                Unit::Bytes,
                Family::default(),
            ),
            size: registered_in(
                r,
                "chart_cache",
                "Size of the chart archives kept in the chart cache",
                Unit::Bytes,
                Gauge::default(),
            ),
        };
        for kind in FETCH_KINDS {
            m.fetched.get_or_create_owned(&KindLabels { kind });
        }
        m
    }
}

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
            registry: r,
            scrape: Mutex::new(()),
        }
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

/// A count as a gauge value, saturating at `i64::MAX`.
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The value of the sample written exactly as `series` (name and labels), if there is one.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .filter_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.parse().expect("a number"))
            .next()
    }

    /// The sample lines of the family `name`, sorted (series order within a family is not fixed).
    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        let mut lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .collect();
        lines.sort_unstable();
        lines
    }

    fn busy() -> Metrics {
        let m = Metrics::new();
        m.reconcile(0.5, None);
        m.reconcile(1.25, None);
        m.reconcile(2.0, Some("hub"));
        m.reconcile(0.25, Some("cleanup_pending"));
        m.helm_job("member-1", "applied", 3.0);
        m.helm_job("member-1", "applied", 1.0);
        m.helm_job("member-1", "failed", 0.5);
        m.helm_job("hub", "uninstalled", 2.5);
        m.queue_wait(0.25);
        m.queue_wait(0.75);
        m.status_propagation(1.5);
        m.watch_restart("member-2");
        m.watch_restart("member-2");
        m.watch_restart("hub");
        m.watch_event();
        m.watch_event();
        m.watch_event();
        m.status_write();
        m.status_write_skipped();
        m.status_write_skipped();
        m
    }

    fn gauges() -> Gauges {
        Gauges {
            queue_depth: 7,
            jobs_running: 2,
            clusters: vec![("member-1".into(), false), ("hub".into(), true)],
            watched_namespaces: 12,
            channels: vec![("outcomes", 3), ("triggers", 0)],
            streams: vec![("workloads", 8)],
        }
    }

    #[test]
    fn the_chart_cache_counts_hits_misses_and_bytes_fetched_by_kind() {
        let m = Metrics::new();
        let text = m.render(&gauges());
        assert_eq!(
            value(
                &text,
                "tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"
            ),
            Some(0.0),
            "both kinds show from the start"
        );
        m.chart_cache(false);
        m.chart_cache(true);
        m.chart_cache(true);
        m.chart_fetched("index", 1000);
        m.chart_fetched("archive", 300);
        m.chart_fetched("index", 24);
        m.chart_cache_size(300);
        let text = m.render(&gauges());
        assert_eq!(
            value(&text, "tenancy_hub_chart_cache_hits_total"),
            Some(2.0)
        );
        assert_eq!(
            value(&text, "tenancy_hub_chart_cache_misses_total"),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                "tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"
            ),
            Some(1024.0)
        );
        assert_eq!(
            value(
                &text,
                "tenancy_hub_chart_fetched_bytes_total{kind=\"archive\"}"
            ),
            Some(300.0)
        );
        assert_eq!(value(&text, "tenancy_hub_chart_cache_bytes"), Some(300.0));
    }

    #[test]
    fn reconciles_are_counted_by_result_and_failures_by_reason_with_a_duration_histogram() {
        let text = busy().render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_reconciles_total"),
            [
                "tenancy_hub_reconciles_total{result=\"error\"} 2",
                "tenancy_hub_reconciles_total{result=\"ok\"} 2",
            ]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_reconcile_errors_total"),
            [
                "tenancy_hub_reconcile_errors_total{reason=\"cleanup_pending\"} 1",
                "tenancy_hub_reconcile_errors_total{reason=\"hub\"} 1",
            ]
        );
        let name = "tenancy_hub_reconcile_duration_seconds";
        assert!(text.contains(&format!("# TYPE {name} histogram\n")));
        assert_eq!(value(&text, &format!("{name}_sum")), Some(4.0));
        assert_eq!(value(&text, &format!("{name}_count")), Some(4.0));
        assert_eq!(
            value(&text, &format!("{name}_bucket{{le=\"0.32\"}}")),
            Some(1.0)
        );
        assert_eq!(
            value(&text, &format!("{name}_bucket{{le=\"0.64\"}}")),
            Some(2.0)
        );
        assert_eq!(
            value(&text, &format!("{name}_bucket{{le=\"+Inf\"}}")),
            Some(4.0)
        );
    }

    #[test]
    fn helm_jobs_are_counted_by_cluster_and_outcome_and_timed_by_cluster() {
        let text = busy().render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_helm_jobs_total"),
            [
                "tenancy_hub_helm_jobs_total{cluster=\"hub\",outcome=\"uninstalled\"} 1",
                "tenancy_hub_helm_jobs_total{cluster=\"member-1\",outcome=\"applied\"} 2",
                "tenancy_hub_helm_jobs_total{cluster=\"member-1\",outcome=\"failed\"} 1",
            ]
        );
        let name = "tenancy_hub_helm_job_duration_seconds";
        assert!(text.contains(&format!("# TYPE {name} histogram\n")));
        for (cluster, sum, count) in [("hub", 2.5, 1.0), ("member-1", 4.5, 3.0)] {
            let labels = format!("{{cluster=\"{cluster}\"}}");
            assert_eq!(value(&text, &format!("{name}_sum{labels}")), Some(sum));
            assert_eq!(value(&text, &format!("{name}_count{labels}")), Some(count));
        }
        assert_eq!(
            value(
                &text,
                &format!("{name}_bucket{{le=\"0.8\",cluster=\"member-1\"}}")
            ),
            Some(1.0)
        );
    }

    #[test]
    fn queue_waits_and_status_propagation_are_histograms() {
        let text = busy().render(&Gauges::default());
        let wait = "tenancy_hub_queue_wait_seconds";
        assert!(text.contains(&format!("# TYPE {wait} histogram\n")));
        assert_eq!(value(&text, &format!("{wait}_sum")), Some(1.0));
        assert_eq!(value(&text, &format!("{wait}_count")), Some(2.0));
        let status = "tenancy_hub_status_propagation_seconds";
        assert!(text.contains(&format!("# TYPE {status} histogram\n")));
        assert_eq!(value(&text, &format!("{status}_count")), Some(1.0));
        assert_eq!(
            value(&text, &format!("{status}_bucket{{le=\"1.6\"}}")),
            Some(1.0)
        );
        assert_eq!(
            value(&text, &format!("{status}_bucket{{le=\"0.8\"}}")),
            Some(0.0)
        );
    }

    #[test]
    fn drift_is_counted_by_cluster_and_action() {
        let m = Metrics::new();
        m.drift("member-1", "found");
        m.drift("member-1", "found");
        m.drift("member-1", "repaired");
        let text = m.render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_drift_total"),
            [
                "tenancy_hub_drift_total{cluster=\"member-1\",action=\"found\"} 2",
                "tenancy_hub_drift_total{cluster=\"member-1\",action=\"repaired\"} 1",
            ]
        );
    }

    #[test]
    fn watch_restarts_events_and_status_writes_are_counted() {
        let text = busy().render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_watch_restarts_total"),
            [
                "tenancy_hub_watch_restarts_total{cluster=\"hub\"} 1",
                "tenancy_hub_watch_restarts_total{cluster=\"member-2\"} 2",
            ]
        );
        assert_eq!(value(&text, "tenancy_hub_watch_events_total"), Some(3.0));
        assert_eq!(value(&text, "tenancy_hub_status_writes_total"), Some(1.0));
        assert_eq!(
            value(&text, "tenancy_hub_status_writes_skipped_total"),
            Some(2.0)
        );
    }

    #[test]
    fn gauges_are_sampled_at_scrape_and_a_cluster_gone_from_the_registry_disappears() {
        let m = Metrics::new();
        let text = m.render(&gauges());
        assert_eq!(value(&text, "tenancy_hub_queue_depth"), Some(7.0));
        assert_eq!(value(&text, "tenancy_hub_jobs_running"), Some(2.0));
        assert_eq!(
            samples(&text, "tenancy_hub_cluster_reachable"),
            [
                "tenancy_hub_cluster_reachable{cluster=\"hub\"} 1",
                "tenancy_hub_cluster_reachable{cluster=\"member-1\"} 0",
            ]
        );
        assert_eq!(value(&text, "tenancy_hub_watched_namespaces"), Some(12.0));
        assert_eq!(
            value(&text, "tenancy_hub_watch_streams{source=\"workloads\"}"),
            Some(8.0)
        );
        assert_eq!(
            value(&text, "tenancy_hub_channel_depth{channel=\"outcomes\"}"),
            Some(3.0),
            "the depth of each bounded channel is exported"
        );
        assert!(text.contains("# TYPE tenancy_hub_queue_depth gauge\n"));
        let fewer = Gauges {
            clusters: vec![("hub".into(), true)],
            ..Gauges::default()
        };
        let text = m.render(&fewer);
        assert_eq!(
            samples(&text, "tenancy_hub_cluster_reachable"),
            ["tenancy_hub_cluster_reachable{cluster=\"hub\"} 1"]
        );
        assert_eq!(value(&text, "tenancy_hub_queue_depth"), Some(0.0));
    }

    #[test]
    fn orphaned_releases_are_gauges_by_reason() {
        let m = Metrics::new();
        m.orphaned(3, 1);
        let text = m.render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_orphaned_releases"),
            [
                "tenancy_hub_orphaned_releases{reason=\"cluster-unregistered\"} 1",
                "tenancy_hub_orphaned_releases{reason=\"owner-gone\"} 3",
            ]
        );
        m.orphaned(0, 0);
        let text = m.render(&Gauges::default());
        assert_eq!(
            value(
                &text,
                "tenancy_hub_orphaned_releases{reason=\"owner-gone\"}"
            ),
            Some(0.0)
        );
    }

    #[test]
    fn fresh_metrics_render_zeroes_and_empty_families() {
        let text = Metrics::new().render(&Gauges::default());
        assert_eq!(
            value(&text, "tenancy_hub_reconciles_total{result=\"error\"}"),
            Some(0.0)
        );
        assert_eq!(
            value(&text, "tenancy_hub_queue_wait_seconds_count"),
            Some(0.0)
        );
        assert!(
            !text.contains("tenancy_hub_helm_jobs"),
            "a family without series is left out"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn label_values_escape_backslashes_quotes_and_newlines() {
        let m = Metrics::new();
        m.helm_job("we\"ird\\\n", "fail\"ed", 1.0);
        let text = m.render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_helm_jobs_total"),
            ["tenancy_hub_helm_jobs_total{cluster=\"we\\\"ird\\\\\\n\",outcome=\"fail\\\"ed\"} 1"]
        );
    }

    #[test]
    fn every_family_is_declared_once_with_help_and_a_type() {
        let text = busy().render(&gauges());
        let mut declared: Vec<(&str, &str)> = Vec::new();
        for line in text.lines() {
            if let Some(ty) = line.strip_prefix("# TYPE ") {
                let (name, kind) = ty.split_once(' ').expect("name and type");
                assert!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "{line:?}"
                );
                assert!(
                    text.contains(&format!("# HELP {name} ")),
                    "{name} has no help"
                );
                assert!(
                    declared.iter().all(|(n, _)| *n != name),
                    "{name} declared twice"
                );
                declared.push((name, kind));
            }
        }
        let kinds = |kind: &str| declared.iter().filter(|(_, k)| *k == kind).count();
        assert_eq!(
            (kinds("counter"), kinds("histogram"), kinds("gauge")),
            (12, 5, 8),
            "{declared:?}"
        );
    }

    #[test]
    fn negative_durations_count_as_zero() {
        let m = Metrics::new();
        m.queue_wait(-1.0);
        let text = m.render(&Gauges::default());
        assert_eq!(
            value(&text, "tenancy_hub_queue_wait_seconds_sum"),
            Some(0.0)
        );
        assert_eq!(
            value(&text, "tenancy_hub_queue_wait_seconds_bucket{le=\"0.005\"}"),
            Some(1.0)
        );
    }

    /// The declarations (`# HELP`, `# TYPE`, `# UNIT`) of a rendering, then the shape of each of
    /// its series (name and label names) with the bucket bounds of a histogram's, sorted.
    fn declarations(text: &str) -> Vec<String> {
        let mut shapes: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let mut out: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| *l != "# EOF") {
            if line.starts_with('#') {
                out.push(line.to_owned());
                continue;
            }
            let series = line.split_once(' ').expect("a series and its value").0;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let pairs: Vec<(&str, &str)> = labels
                .trim_end_matches('}')
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .collect();
            let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
            let bounds = shapes
                .entry(format!("{name}{{{}}}", keys.join(",")))
                .or_default();
            for (_, le) in pairs.iter().filter(|(k, _)| *k == "le") {
                let le = le.trim_matches('"');
                if !bounds.contains(&le) {
                    bounds.push(le);
                }
            }
        }
        out.sort();
        out.extend(shapes.into_iter().map(|(shape, bounds)| match bounds[..] {
            [] => shape,
            _ => format!("{shape} le {}", bounds.join(" ")),
        }));
        out
    }

    /// What a scrape declares: each metric's help, type and unit, the label names of its series
    /// and a histogram's bucket bounds.
    const DECLARED: &[&str] = &[
        "# HELP tenancy_hub_channel_depth Messages waiting in a bounded channel between components; a full channel makes its senders wait, nothing is dropped.",
        "# HELP tenancy_hub_chart_cache_bytes Size of the chart archives kept in the chart cache.",
        "# HELP tenancy_hub_chart_cache_hits Chart archives wanted (by a resolution or a helm call) and found in the chart cache.",
        "# HELP tenancy_hub_chart_cache_misses Chart archives wanted and not in the chart cache: fetched into it.",
        "# HELP tenancy_hub_chart_fetched_bytes Bytes the chart cache fetched, by kind: repository index or chart archive.",
        "# HELP tenancy_hub_cluster_reachable Whether a registered cluster is reachable (1) or not (0).",
        "# HELP tenancy_hub_drift Drift between a release's manifest and its live objects, by cluster and action: found (each new or changed finding) or repaired.",
        "# HELP tenancy_hub_helm_job_duration_seconds Time Helm jobs took, by cluster.",
        "# HELP tenancy_hub_helm_jobs Helm jobs finished, by cluster and outcome.",
        "# HELP tenancy_hub_jobs_running Helm jobs running now.",
        "# HELP tenancy_hub_orphaned_releases Releases left without a manager, by reason: their Controller is gone, or their cluster is no longer registered.",
        "# HELP tenancy_hub_queue_depth Helm jobs waiting in the queue.",
        "# HELP tenancy_hub_queue_wait_seconds Time Helm jobs waited in the queue before they started.",
        "# HELP tenancy_hub_reconcile_duration_seconds Time spent reconciling a Controller resource.",
        "# HELP tenancy_hub_reconcile_errors Failed reconciles, by the kind of error.",
        "# HELP tenancy_hub_reconciles Reconciles of Controller resources, by result.",
        "# HELP tenancy_hub_registry_rejects Edits of the registration file refused; the last good registry stayed in force.",
        "# HELP tenancy_hub_registry_reloads Edits of the registration file applied without a restart.",
        "# HELP tenancy_hub_rollout_duration_seconds Time a progressive rollout took from its start until every cluster was healthy on the generation.",
        "# HELP tenancy_hub_status_propagation_seconds Time from a change reaching a resource's report or the model to its status write.",
        "# HELP tenancy_hub_status_writes Status writes to Controller resources.",
        "# HELP tenancy_hub_status_writes_skipped Status writes skipped because nothing had changed.",
        "# HELP tenancy_hub_watch_events Events delivered by the watches of cluster namespaces.",
        "# HELP tenancy_hub_watch_restarts Watch streams restarted after breaking, by cluster.",
        "# HELP tenancy_hub_watch_streams Watch streams open to the clusters, by what they watch: a few per cluster, however many namespaces are watched.",
        "# HELP tenancy_hub_watched_namespaces Cluster namespaces watched.",
        "# TYPE tenancy_hub_channel_depth gauge",
        "# TYPE tenancy_hub_chart_cache_bytes gauge",
        "# TYPE tenancy_hub_chart_cache_hits counter",
        "# TYPE tenancy_hub_chart_cache_misses counter",
        "# TYPE tenancy_hub_chart_fetched_bytes counter",
        "# TYPE tenancy_hub_cluster_reachable gauge",
        "# TYPE tenancy_hub_drift counter",
        "# TYPE tenancy_hub_helm_job_duration_seconds histogram",
        "# TYPE tenancy_hub_helm_jobs counter",
        "# TYPE tenancy_hub_jobs_running gauge",
        "# TYPE tenancy_hub_orphaned_releases gauge",
        "# TYPE tenancy_hub_queue_depth gauge",
        "# TYPE tenancy_hub_queue_wait_seconds histogram",
        "# TYPE tenancy_hub_reconcile_duration_seconds histogram",
        "# TYPE tenancy_hub_reconcile_errors counter",
        "# TYPE tenancy_hub_reconciles counter",
        "# TYPE tenancy_hub_registry_rejects counter",
        "# TYPE tenancy_hub_registry_reloads counter",
        "# TYPE tenancy_hub_rollout_duration_seconds histogram",
        "# TYPE tenancy_hub_status_propagation_seconds histogram",
        "# TYPE tenancy_hub_status_writes counter",
        "# TYPE tenancy_hub_status_writes_skipped counter",
        "# TYPE tenancy_hub_watch_events counter",
        "# TYPE tenancy_hub_watch_restarts counter",
        "# TYPE tenancy_hub_watch_streams gauge",
        "# TYPE tenancy_hub_watched_namespaces gauge",
        "# UNIT tenancy_hub_chart_cache_bytes bytes",
        "# UNIT tenancy_hub_chart_fetched_bytes bytes",
        "# UNIT tenancy_hub_helm_job_duration_seconds seconds",
        "# UNIT tenancy_hub_queue_wait_seconds seconds",
        "# UNIT tenancy_hub_reconcile_duration_seconds seconds",
        "# UNIT tenancy_hub_rollout_duration_seconds seconds",
        "# UNIT tenancy_hub_status_propagation_seconds seconds",
        "tenancy_hub_channel_depth{channel}",
        "tenancy_hub_chart_cache_bytes{}",
        "tenancy_hub_chart_cache_hits_total{}",
        "tenancy_hub_chart_cache_misses_total{}",
        "tenancy_hub_chart_fetched_bytes_total{kind}",
        "tenancy_hub_cluster_reachable{cluster}",
        "tenancy_hub_drift_total{cluster,action}",
        "tenancy_hub_helm_job_duration_seconds_bucket{le,cluster} le 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2 +Inf",
        "tenancy_hub_helm_job_duration_seconds_count{cluster}",
        "tenancy_hub_helm_job_duration_seconds_sum{cluster}",
        "tenancy_hub_helm_jobs_total{cluster,outcome}",
        "tenancy_hub_jobs_running{}",
        "tenancy_hub_orphaned_releases{reason}",
        "tenancy_hub_queue_depth{}",
        "tenancy_hub_queue_wait_seconds_bucket{le} le 0.005 0.01 0.02 0.04 0.08 0.16 0.32 0.64 1.28 2.56 5.12 10.24 20.48 40.96 +Inf",
        "tenancy_hub_queue_wait_seconds_count{}",
        "tenancy_hub_queue_wait_seconds_sum{}",
        "tenancy_hub_reconcile_duration_seconds_bucket{le} le 0.005 0.01 0.02 0.04 0.08 0.16 0.32 0.64 1.28 2.56 5.12 10.24 20.48 40.96 +Inf",
        "tenancy_hub_reconcile_duration_seconds_count{}",
        "tenancy_hub_reconcile_duration_seconds_sum{}",
        "tenancy_hub_reconcile_errors_total{reason}",
        "tenancy_hub_reconciles_total{result}",
        "tenancy_hub_registry_rejects_total{}",
        "tenancy_hub_registry_reloads_total{}",
        "tenancy_hub_rollout_duration_seconds_bucket{le} le 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2 +Inf",
        "tenancy_hub_rollout_duration_seconds_count{}",
        "tenancy_hub_rollout_duration_seconds_sum{}",
        "tenancy_hub_status_propagation_seconds_bucket{le} le 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2 +Inf",
        "tenancy_hub_status_propagation_seconds_count{}",
        "tenancy_hub_status_propagation_seconds_sum{}",
        "tenancy_hub_status_writes_skipped_total{}",
        "tenancy_hub_status_writes_total{}",
        "tenancy_hub_watch_events_total{}",
        "tenancy_hub_watch_restarts_total{cluster}",
        "tenancy_hub_watch_streams{source}",
        "tenancy_hub_watched_namespaces{}",
    ];

    #[test]
    fn every_metric_keeps_its_name_help_unit_type_and_labels() {
        let m = busy();
        m.drift("member-1", "found");
        assert_eq!(declarations(&m.render(&gauges())), DECLARED);
    }
}
