//! Cluster health: every registered cluster is probed periodically; status and the executor read the board.

use std::{sync::Arc, time::Duration};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use crate::{api::key::ClusterName, clusters::registry};

/// How often every cluster is probed.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(5);

/// What the last probe of one cluster found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClusterHealth {
    /// Whether its API server answered.
    pub(crate) reachable: bool,
    /// Why not, when it did not.
    pub(crate) error: Option<String>,
    /// When it last answered.
    pub(crate) last_seen: Option<Timestamp>,
}

/// The health of every probed cluster, shared between the prober, the status writer and the executor.
#[derive(Default)]
pub(crate) struct HealthBoard {
    clusters: DashMap<ClusterName, ClusterHealth>,
}

impl HealthBoard {
    /// Records a probe; returns the new reachability when it changed (a first probe that fails counts as a change).
    pub(crate) fn record(
        &self,
        cluster: &ClusterName,
        outcome: Result<(), String>,
        now: Timestamp,
    ) -> Option<bool> {
        let mut entry = self
            .clusters
            .entry(cluster.clone())
            .or_insert(ClusterHealth {
                reachable: true,
                error: None,
                last_seen: None,
            });
        let was = entry.reachable;
        match outcome {
            Ok(()) => {
                entry.reachable = true;
                entry.error = None;
                entry.last_seen = Some(now);
            }
            Err(e) => {
                entry.reachable = false;
                entry.error = Some(e);
            }
        }
        (entry.reachable != was).then_some(entry.reachable)
    }

    /// Why a cluster is unreachable, if its last probe failed.
    pub(crate) fn unreachable(&self, cluster: &ClusterName) -> Option<String> {
        let h = self.clusters.get(cluster)?;
        (!h.reachable).then(|| h.error.clone().unwrap_or_default())
    }

    /// What the last probe of a cluster found.
    pub(crate) fn get(&self, cluster: &ClusterName) -> Option<ClusterHealth> {
        self.clusters.get(cluster).map(|h| h.clone())
    }

    /// Forgets a cluster no longer registered.
    pub(crate) fn forget(&self, cluster: &ClusterName) {
        self.clusters.remove(cluster);
    }
}

/// Probes every registered cluster every [`PROBE_EVERY`] until cancelled, recording each probe on
/// `board`; on a change it logs and tells `changed` (the cluster, and whether it is reachable now).
pub(crate) async fn monitor<P>(
    probe_all: impl Fn() -> P + Send + 'static,
    board: Arc<HealthBoard>,
    changed: impl Fn(&ClusterName, bool) + Send + 'static,
    cancel: CancellationToken,
) where
    P: std::future::Future<Output = Vec<registry::Health>> + Send,
{
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = cancel.cancelled() => return,
        }
        let probes = probe_all().await;
        for probe in probes {
            let Ok(cluster) = probe.cluster.parse::<ClusterName>() else {
                continue;
            };
            let outcome = if probe.reachable {
                Ok(())
            } else {
                Err(probe.error.unwrap_or_default())
            };
            match board.record(&cluster, outcome, Timestamp::now()) {
                Some(true) => {
                    tracing::info!(%cluster, "cluster is reachable again");
                    changed(&cluster, true);
                }
                Some(false) => {
                    let error = board.unreachable(&cluster).unwrap_or_default();
                    tracing::warn!(%cluster, %error, "cluster is unreachable; its jobs wait and its status turns Unknown");
                    changed(&cluster, false);
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_are_reported_once_and_the_last_sighting_is_kept() {
        let board = HealthBoard::default();
        let c: ClusterName = "member-2".parse().unwrap();
        let t = |s| Timestamp::from_second(s).unwrap();
        assert_eq!(
            board.record(&c, Ok(()), t(1)),
            None,
            "a first good probe changes nothing"
        );
        assert_eq!(board.record(&c, Err("refused".into()), t(2)), Some(false));
        assert_eq!(board.record(&c, Err("refused".into()), t(3)), None);
        assert_eq!(board.unreachable(&c).as_deref(), Some("refused"));
        assert_eq!(board.get(&c).unwrap().last_seen, Some(t(1)));
        assert_eq!(board.record(&c, Ok(()), t(4)), Some(true));
        assert_eq!(board.unreachable(&c), None);
    }

    #[test]
    fn a_cluster_never_probed_is_not_called_unreachable() {
        assert_eq!(
            HealthBoard::default().unreachable(&"hub".parse().unwrap()),
            None
        );
    }
}
