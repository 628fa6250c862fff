//! The release checks: the loop that compares watched releases with their manifests and judges their objects' health (every `--drift-interval`, and within a second of a nudge), reports what it finds and asks for repairs.

use std::{collections::BTreeSet, sync::Arc};

use futures::StreamExt as _;
use kube::runtime::{
    events::EventType,
    reflector::{ObjectRef, Store},
};
use tokio::sync::mpsc::{Sender, UnboundedReceiver};

use crate::{
    api::alert::AlertEvent,
    api::crd::{DriftMode, TenancyController},
    api::key::ReleaseKey,
    clusters::health::HealthBoard,
    controller::{
        drift::{CONCURRENT_CHECKS, DriftChange, DriftCheckRequest, GATHER, Watched},
        events::{Events, notice, publish},
        index::ControllerIndex,
    },
    member::{DriftCheck, Links},
    metrics::Metrics,
    notify::Notifier,
    observe::drift::{self, ObjectDrift},
    observe::releases::ReleaseIndex,
    queue::handle::HelmQueue,
};

/// What the drift checks use: the drift board (through the index), the member links that read
/// the live objects, the release records, the queue and the clusters' health that say whether a
/// release may be compared now, and the Controllers, their Events, the Alerts and the metrics they tell.
pub(crate) struct DriftChecks {
    /// The per-Controller index, for its drift board.
    pub(crate) index: Arc<ControllerIndex>,
    /// The member links.
    pub(crate) links: Links,
    /// Helm's release records per cluster.
    pub(crate) releases: Arc<ReleaseIndex>,
    /// The queue of Helm jobs (a release it works on is not compared).
    pub(crate) queue: HelmQueue,
    /// Reachability of every cluster.
    pub(crate) health: Arc<HealthBoard>,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<TenancyController>,
    /// Events on `Controller` resources.
    pub(crate) events: Arc<Events>,
    /// Tells the Alerts, never waiting.
    pub(crate) notifier: Notifier,
    /// Operator metrics.
    pub(crate) metrics: Arc<Metrics>,
}

/// Checks releases for drift: every watched release each `--drift-interval`, and the releases
/// nudged (a workload changed, a cluster is reachable again, Helm applied) within a second.
pub(crate) async fn detect(
    ctx: DriftChecks,
    mut nudges: UnboundedReceiver<DriftCheckRequest>,
    trigger: Sender<ObjectRef<TenancyController>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let interval = ctx.index.drift.interval;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut due: BTreeSet<ReleaseKey> = BTreeSet::new();
        let add = |nudge: DriftCheckRequest, due: &mut BTreeSet<ReleaseKey>| match nudge {
            DriftCheckRequest::Release(key) => {
                due.insert(key);
            }
            DriftCheckRequest::Cluster(cluster) => due.extend(
                ctx.index
                    .drift
                    .watched
                    .iter()
                    .filter(|w| w.key().scope.cluster == cluster)
                    .map(|w| w.key().clone()),
            ),
        };
        tokio::select! {
            _ = tick.tick() => due.extend(ctx.index.drift.watched.iter().map(|w| w.key().clone())),
            nudge = nudges.recv() => {
                let Some(nudge) = nudge else { return };
                add(nudge, &mut due);
                let until = tokio::time::Instant::now() + GATHER;
                while let Ok(Some(more)) = tokio::time::timeout_at(until, nudges.recv()).await {
                    add(more, &mut due);
                }
            }
            () = cancel.cancelled() => return,
        }
        tracing::debug!(releases = due.len(), "checking releases for drift");
        let checks = futures::stream::iter(due)
            .for_each_concurrent(CONCURRENT_CHECKS, |key| check(&ctx, key, &trigger));
        tokio::select! {
            () = checks => {}
            () = cancel.cancelled() => return,
        }
    }
}

/// Compares one release with the manifest of its deployed revision, and tells what is new.
async fn check(ctx: &DriftChecks, key: ReleaseKey, trigger: &Sender<ObjectRef<TenancyController>>) {
    let Some(watched) = ctx.index.drift.watched.get(&key).map(|w| w.clone()) else {
        return;
    };
    let object = ObjectRef::new(&watched.owner.name).within(&watched.owner.namespace);
    if !watched.reads() {
        let forgot = ctx.index.drift.forget_found(&key);
        if ctx.index.drift.forget_health(&key) || forgot {
            let _ = trigger.send(object).await;
        }
        return;
    }
    // A release Helm is working on, or not deployed as its owner's, is not compared: the next
    // nudge or interval does it. Nor is a revision whose record could not be compared.
    let Some(applied) = ctx.releases.get(&key) else {
        return;
    };
    if applied.status != "deployed"
        || applied.owner.as_ref() != Some(&watched.owner)
        || ctx.queue.is_busy(&key)
        || ctx.health.unreachable(&key.scope.cluster).is_some()
        || ctx
            .index
            .drift
            .unusable
            .get(&key)
            .is_some_and(|r| *r == applied.revision)
    {
        return;
    }
    let Some(link) = ctx.links.get(&key.scope.cluster) else {
        return;
    };
    let checked = link
        .check_drift(DriftCheck {
            key: key.clone(),
            revision: applied.revision,
            identity: watched.identity.clone(),
            ignore: watched.settings.ignore.clone(),
            compare: watched.settings.mode != DriftMode::Disabled,
            health: watched.health.clone(),
        })
        .await;
    let checked = match checked {
        Ok(checked) => checked,
        Err(error) if error.is_lasting() => {
            ctx.index
                .drift
                .unusable
                .insert(key.clone(), applied.revision);
            let note = format!(
                "drift of release {key} (revision {}) is not checked: {error}; it is checked again when the release changes",
                applied.revision
            );
            tracing::warn!(release = %key, revision = applied.revision, %error, "drift is not checked for this revision");
            if let Some(c) = ctx.controllers.get(&object) {
                publish(
                    &ctx.events,
                    &c,
                    EventType::Warning,
                    "DriftCheckFailed",
                    "Drift",
                    note,
                )
                .await;
            }
            return;
        }
        Err(error) => {
            tracing::warn!(release = %key, %error, "drift check failed; it is tried again at the next change or interval");
            return;
        }
    };
    let judged = checked.health;
    if !judged.objects.is_empty() {
        tracing::debug!(release = %key, revision = applied.revision, worst = %judged.worst(), "objects not current");
    }
    let health_changed = ctx
        .index
        .drift
        .record_health(&key, applied.revision, judged);
    let drift_told = tell(
        ctx,
        &key,
        &watched,
        applied.revision,
        checked.drift,
        &object,
    )
    .await;
    if drift_told || health_changed {
        let _ = trigger.send(object).await;
    }
}

/// Records what a check found and tells what is new: a log line, and for drift found, the
/// metric and a `DriftDetected` Event. False when nothing is new.
async fn tell(
    ctx: &DriftChecks,
    key: &ReleaseKey,
    watched: &Watched,
    revision: i64,
    objects: Vec<ObjectDrift>,
    object: &ObjectRef<TenancyController>,
) -> bool {
    let summary = drift::summary(&objects);
    match ctx.index.drift.record(key, revision, objects) {
        DriftChange::Same => return false,
        DriftChange::Gone => {
            tracing::info!(release = %key, "no drift any more");
        }
        DriftChange::Found => {
            ctx.metrics.drift(key.scope.cluster.as_str(), "found");
            let what = match watched.settings.mode {
                DriftMode::Enabled => "repairing it",
                _ => "reported only (driftDetection.mode warn)",
            };
            let note = format!(
                "release {key} (revision {revision}) differs from its manifest: {summary}; {what}"
            );
            tracing::warn!(release = %key, revision, drift = %summary, "drift found");
            ctx.notifier.tell(notice(
                &watched.owner,
                Some((key.scope.cluster.as_str(), &key.release)),
                AlertEvent::DriftDetected,
                "DriftDetected",
                note.clone(),
            ));
            if let Some(c) = ctx.controllers.get(object) {
                publish(
                    &ctx.events,
                    &c,
                    EventType::Warning,
                    "DriftDetected",
                    "Drift",
                    note,
                )
                .await;
            }
        }
    }
    true
}
