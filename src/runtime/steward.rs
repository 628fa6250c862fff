//! The shard campaign of a replica and its steward, which starts and drains the work of the shards it takes and gives up.

use std::{sync::Arc, time::Duration};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::{
    api::shard::shard_of,
    controller::context::Context,
    controller::reconcile,
    runtime::config::RunConfig,
    runtime::http::Readiness,
    runtime::shards::{Steward, campaign},
    runtime::tasks::ready_store,
    runtime::wiring::Outboxes,
};

/// With shards: once the Controllers are listed, leads a fair share of the shards. Stopped only
/// after the Helm workers, so a shard is never given up while its jobs run.
pub(crate) fn campaign_for_shards(
    config: &RunConfig,
    ctx: &Arc<Context>,
    outboxes: &Outboxes,
    ready: &Arc<arc_swap::ArcSwap<Readiness>>,
    stop: &CancellationToken,
    lost: &CancellationToken,
) -> Option<tokio::task::JoinHandle<Result<(), crate::runtime::leader::Error>>> {
    let base = config.leader.clone().filter(|_| config.shards > 1)?;
    let lease = format!(
        "{}/{}-shard-*-of-{}",
        base.namespace, base.name, config.shards
    );
    ready.store(Arc::new(Readiness::Standby {
        lease: lease.clone(),
        holder: "other replicas (none is led here yet)".into(),
    }));
    let steward = ShardSteward {
        ctx: ctx.clone(),
        everything: outboxes.everything.clone(),
        ready: ready.clone(),
        lease,
        drain_limit: config.helm.timeout + config.queue.shutdown_grace,
    };
    let (hub, shards, stop, lost) = (
        ctx.hub.client.clone(),
        ctx.hub.shards.clone(),
        stop.clone(),
        lost.clone(),
    );
    let store = ctx.hub.controllers.clone();
    Some(tokio::spawn(
        async move {
            ready_store(&store).await;
            campaign(hub, base, shards, steward, stop, lost).await
        }
        .instrument(tracing::info_span!("shards")),
    ))
}

/// Starts and drains the work of the shards the campaign takes and gives up.
struct ShardSteward {
    ctx: Arc<Context>,
    everything: mpsc::Sender<()>,
    ready: Arc<arc_swap::ArcSwap<Readiness>>,
    lease: String,
    /// The longest a drain waits for running Helm jobs.
    drain_limit: Duration,
}

impl Steward for ShardSteward {
    fn gained(&self, _shard: u32) {
        self.ready.store(Arc::new(Readiness::Ready));
        // Full: a reconcile of everything is pending already.
        let _ = self.everything.try_send(());
    }

    async fn drain(&self, shard: u32) {
        let ctx = &self.ctx;
        let total = ctx.hub.shards.total();
        let owners: Vec<_> = ctx
            .hub
            .controllers
            .state()
            .iter()
            .filter(|c| {
                let ns = c.metadata.namespace.as_deref().unwrap_or_default();
                shard_of(ns, &kube::ResourceExt::name_any(c.as_ref()), total) == shard
            })
            .map(|c| (crate::plan::owner_id(c), ObjectRef::from_obj(c.as_ref())))
            .collect();
        for (owner, object) in &owners {
            ctx.out
                .queue
                .retain_planned(owner, &std::collections::HashSet::new());
            reconcile::forget(ctx, object);
        }
        let deadline = tokio::time::Instant::now() + self.drain_limit;
        while owners
            .iter()
            .any(|(owner, _)| !ctx.out.queue.running_for(owner).is_empty())
            && tokio::time::Instant::now() < deadline
        {
            // Polls the queue: running jobs finish within the helm timeout.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if ctx.hub.shards.led().is_empty() {
            self.ready.store(Arc::new(Readiness::Standby {
                lease: self.lease.clone(),
                holder: "other replicas (none is led here now)".into(),
            }));
        }
    }
}
