//! What the metrics of every concern share: the label sets, the histogram buckets, the
//! registration helpers and the values sampled at scrape time.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        family::Family,
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
pub(crate) struct ChannelLabels {
    pub(crate) channel: &'static str,
}

/// What a watch stream watches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SourceLabels {
    pub(crate) source: &'static str,
}

/// How a reconcile ended: `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: &'static str,
}

/// Why something failed or was left over.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: &'static str,
}

/// The cluster a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterLabels {
    pub(crate) cluster: String,
}

/// A finished Helm job's cluster and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct JobLabels {
    pub(crate) cluster: String,
    pub(crate) outcome: String,
}

/// What was done about drift in a cluster: `found` or `repaired`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DriftLabels {
    pub(crate) cluster: String,
    pub(crate) action: &'static str,
}

/// What a chart fetch brought: a repository `index` or a chart `archive`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    pub(crate) kind: &'static str,
}

/// The kinds of chart fetches, always exposed even at zero.
pub(crate) const FETCH_KINDS: [&str; 2] = ["index", "archive"];

/// A histogram family whose members share one set of buckets.
pub(crate) type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

/// Buckets for reconciles and queue waits: 5ms to about 41s.
pub(crate) fn short_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Buckets for Helm jobs and status propagation: 100ms to about 14 minutes.
pub(crate) fn long_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 14))
}

/// The orphaned-release reasons, always exposed even at zero.
pub(crate) const ORPHAN_REASONS: [&str; 2] = ["owner-gone", "cluster-unregistered"];

/// `metric`, registered as `name` with `help`; the registry keeps a handle on the same series.
pub(crate) fn registered<M: Metric + Clone>(
    r: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    r.register(name, help, metric.clone());
    metric
}

/// `metric`, registered as `name` in `unit` with `help`.
pub(crate) fn registered_in<M: Metric + Clone>(
    r: &mut Registry,
    name: &str,
    help: &str,
    unit: Unit,
    metric: M,
) -> M {
    r.register_with_unit(name, help, unit, metric.clone());
    metric
}

/// A count as a gauge value, saturating at `i64::MAX`.
pub(crate) fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
