//! The watches of cluster namespaces: streams open, namespaces watched, events, restarts.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use super::common::{ClusterLabels, Gauges, SourceLabels, gauge_value, registered};

/// The watches of cluster namespaces: streams open, namespaces watched, events, restarts.
#[derive(Debug)]
pub(crate) struct Watches {
    pub(crate) restarts: Family<ClusterLabels, Counter>,
    pub(crate) events: Counter,
    pub(crate) streams: Family<SourceLabels, Gauge>,
    pub(crate) namespaces: Gauge,
}

impl Watches {
    pub(crate) fn register(r: &mut Registry) -> Self {
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
    pub(crate) fn sample(&self, gauges: &Gauges) {
        self.namespaces.set(gauge_value(gauges.watched_namespaces));
        for (source, streams) in &gauges.streams {
            self.streams
                .get_or_create(&SourceLabels { source })
                .set(gauge_value(*streams));
        }
    }
}
