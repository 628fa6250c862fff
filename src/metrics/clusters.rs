//! The registered clusters: whether each answers, and reloads of the registration file.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use super::common::{ClusterLabels, Gauges, registered};

/// The registered clusters: whether each answers, and reloads of the registration file.
#[derive(Debug)]
pub(crate) struct Clusters {
    pub(crate) reachable: Family<ClusterLabels, Gauge>,
    pub(crate) reloads: Counter,
    pub(crate) rejects: Counter,
    pub(crate) pull_bytes: Family<ClusterLabels, Gauge>,
}

impl Clusters {
    pub(crate) fn register(r: &mut Registry) -> Self {
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
            pull_bytes: registered(
                r,
                "pull_member_bytes",
                "Bytes of a pull member's reports the operator holds (bounded per member)",
                Family::default(),
            ),
        }
    }

    /// Sets whether each cluster is reachable from a scrape's sample; a cluster no longer
    /// registered disappears.
    pub(crate) fn sample(&self, gauges: &Gauges) {
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
