//! Debounced status writes to the hub: at most one per resource per interval, none when nothing changed.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::Duration,
};

use dashmap::DashMap;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::reflector::ObjectRef,
};
use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    api::crd::{ControllerStatus, TenancyController},
    api::key::ClusterNamespace,
    observe::model::ScopeState,
    status::build as status,
    status::report::ReleaseReport,
};

/// Status writes running at once.
const CONCURRENT_WRITES: usize = 8;

/// What the writer reads and writes through: narrow handles, not the reconciler's whole context.
#[derive(Clone)]
pub(crate) struct Sources {
    /// Client of the hub, for the status subresource.
    pub(crate) hub: kube::Client,
    /// The hub's Controllers, as the reconciler sees them.
    pub(crate) controllers: kube::runtime::reflector::Store<TenancyController>,
    /// What runs, per cluster/namespace.
    pub(crate) model: std::sync::Arc<crate::observe::model::Model>,
    /// Reachability of every cluster.
    pub(crate) health: std::sync::Arc<crate::clusters::health::HealthBoard>,
    /// Operator metrics.
    pub(crate) metrics: std::sync::Arc<crate::metrics::Metrics>,
}

/// Collects what each resource's status should say and writes it, paced.
#[derive(Default)]
pub(crate) struct StatusWriter {
    reports: DashMap<ObjectRef<TenancyController>, ReleaseReport>,
    written: DashMap<ObjectRef<TenancyController>, ControllerStatus>,
    dirty: Mutex<HashSet<ObjectRef<TenancyController>>>,
    /// When each resource's oldest change not yet written came in.
    pending_since: DashMap<ObjectRef<TenancyController>, Instant>,
    notify: Notify,
    /// Tells the transitions each write makes.
    notifier: crate::notify::Notifier,
    /// Whether each resource has failed since it was last Ready (a later Ready is a recovery).
    failing: DashMap<ObjectRef<TenancyController>, bool>,
}

impl StatusWriter {
    /// A writer that tells `notifier` the transitions of the statuses it writes.
    pub(crate) fn telling(notifier: crate::notify::Notifier) -> Self {
        Self {
            notifier,
            ..Self::default()
        }
    }

    /// Records the release side of a resource's status; it is written on the next pass if it changed.
    pub(crate) fn submit(&self, owner: ObjectRef<TenancyController>, report: ReleaseReport) {
        let changed = self.reports.get(&owner).is_none_or(|r| *r != report);
        if changed {
            self.reports.insert(owner.clone(), report);
            self.touch(owner);
        }
    }

    /// Marks a resource's status for recomputation, for example after its pods changed.
    pub(crate) fn touch(&self, owner: ObjectRef<TenancyController>) {
        self.pending_since
            .entry(owner.clone())
            .or_insert_with(Instant::now);
        self.dirty.lock().expect("status writer lock").insert(owner);
        self.notify.notify_one();
    }

    /// The release report last submitted for a resource: for tests.
    #[cfg(test)]
    pub(crate) fn submitted(&self, owner: &ObjectRef<TenancyController>) -> Option<ReleaseReport> {
        self.reports.get(owner).map(|r| r.clone())
    }

    /// Forgets a resource that is gone.
    pub(crate) fn forget(&self, owner: &ObjectRef<TenancyController>) {
        self.reports.remove(owner);
        self.written.remove(owner);
        self.pending_since.remove(owner);
        self.failing.remove(owner);
    }

    /// Writes marked statuses until cancelled. A resource not written within the last `interval`
    /// is written at once; one written more recently waits until its interval has passed, so each
    /// resource is written at most once per interval whatever the rate of changes.
    pub(crate) async fn run(&self, ctx: &Sources, interval: Duration, cancel: CancellationToken) {
        let mut last: HashMap<ObjectRef<TenancyController>, Instant> = HashMap::new();
        let mut next: Option<Instant> = None;
        loop {
            let wake = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.notify.notified() => {}
                () = wake => {}
                () = cancel.cancelled() => return,
            }
            let now = Instant::now();
            let (due, later) = self.take_due(&last, interval, now);
            next = later;
            for owner in &due {
                last.insert(owner.clone(), now);
            }
            last.retain(|_, at| now.duration_since(*at) < interval);
            futures::stream::iter(due)
                .for_each_concurrent(CONCURRENT_WRITES, |owner| async move {
                    self.write(ctx, owner).await
                })
                .await;
        }
    }

    /// Takes the marked resources whose interval has passed; the others stay marked, and the
    /// earliest time one of them falls due is returned.
    fn take_due(
        &self,
        last: &HashMap<ObjectRef<TenancyController>, Instant>,
        interval: Duration,
        now: Instant,
    ) -> (Vec<ObjectRef<TenancyController>>, Option<Instant>) {
        let mut dirty = self.dirty.lock().expect("status writer lock");
        let mut due = Vec::new();
        let mut later: Option<Instant> = None;
        dirty.retain(|owner| match last.get(owner).map(|at| *at + interval) {
            Some(at) if at > now => {
                later = Some(later.map_or(at, |l| l.min(at)));
                true
            }
            _ => {
                due.push(owner.clone());
                false
            }
        });
        (due, later)
    }

    async fn write(&self, ctx: &Sources, owner: ObjectRef<TenancyController>) {
        let since = self.pending_since.remove(&owner).map(|(_, at)| at);
        let Some(report) = self.reports.get(&owner).map(|r| r.clone()) else {
            return;
        };
        let Some(object) = ctx.controllers.get(&owner) else {
            self.forget(&owner);
            return;
        };
        let previous = match self.written.get(&owner) {
            Some(w) => w.clone(),
            None => object.status.clone().unwrap_or_default(),
        };
        let lookup = |cluster: &str, namespace: &str| -> Option<ScopeState> {
            let scope: ClusterNamespace = format!("{cluster}/{namespace}").parse().ok()?;
            let mut state = ctx.model.scope(&scope)?;
            if let Some(error) = ctx.health.unreachable(&scope.cluster) {
                state.live = false;
                state.problem = Some(format!("cluster unreachable: {error}"));
            }
            Some(state)
        };
        let reachable = |cluster: &str| {
            cluster
                .parse()
                .map_or(true, |c| ctx.health.unreachable(&c).is_none())
        };
        let status = status::assemble(
            &report,
            &lookup,
            &reachable,
            &previous.conditions,
            Timestamp::now(),
        );
        if status == previous {
            ctx.metrics.status_write_skipped();
            return;
        }
        let namespace = owner.namespace.clone().unwrap_or_default();
        let api: Api<TenancyController> = Api::namespaced(ctx.hub.clone(), &namespace);
        let patch = patch_of(&status);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let write = api.patch_status(&owner.name, &params, &patch);
        let written = tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, write)
            .await
            .unwrap_or_else(|_| {
                Err(kube::Error::Service(
                    format!("no answer within {:?}", crate::api::HUB_WRITE_TIMEOUT).into(),
                ))
            });
        match written {
            Ok(_) => {
                ctx.metrics.status_write();
                if let Some(since) = since {
                    ctx.metrics
                        .status_propagation(since.elapsed().as_secs_f64());
                }
                self.tell(&owner, &previous, &status);
                self.written.insert(owner, status);
            }
            Err(e) => {
                tracing::warn!(controller = %owner, error = %e, "writing status failed; retrying on the next pass");
                if let Some(since) = since {
                    self.pending_since.insert(owner.clone(), since);
                }
                self.touch(owner);
            }
        }
    }
}

impl StatusWriter {
    /// Tells the transitions from the status written before to the one just written, once each:
    /// only a write that succeeded tells, and a retried write compares with what was written.
    fn tell(
        &self,
        owner: &ObjectRef<TenancyController>,
        previous: &ControllerStatus,
        next: &ControllerStatus,
    ) {
        let was = self
            .failing
            .get(owner)
            .map(|f| *f)
            .unwrap_or_else(|| crate::notify::transitions::failing(&previous.conditions));
        let (told, failing) =
            crate::notify::transitions::transitions(&previous.conditions, &next.conditions, was);
        self.failing.insert(owner.clone(), failing);
        for t in told {
            let (cluster, release) = concerned(next, t.event);
            self.notifier.tell(crate::notify::Notice {
                controller: owner.name.clone(),
                namespace: owner.namespace.clone().unwrap_or_default(),
                cluster,
                release,
                event: t.event,
                reason: t.reason,
                message: t.message,
                time: Timestamp::now(),
            });
        }
    }
}

/// The first release a transition concerns, by the phase its event is about: a failed, invalid,
/// conflicting or forbidden release; none for a recovery.
fn concerned(
    status: &ControllerStatus,
    event: crate::api::alert::AlertEvent,
) -> (Option<String>, Option<String>) {
    use crate::{api::alert::AlertEvent, status::phase};
    let phases: &[&str] = match event {
        AlertEvent::Forbidden => &[phase::FORBIDDEN],
        AlertEvent::Stalled => &[
            phase::FAILED,
            phase::INVALID,
            phase::UNVERIFIED,
            phase::CONFLICT,
        ],
        _ => &[],
    };
    status
        .updated_tenancies
        .iter()
        .flat_map(|t| t.chart_messages.iter().map(move |m| (t, m)))
        .find(|(_, m)| phases.contains(&m.phase.as_str()))
        .map_or((None, None), |(t, m)| {
            (Some(t.cluster.clone()), Some(m.release_name.clone()))
        })
}

/// A merge patch that sets every status field, clearing those now empty.
pub(crate) fn patch_of(status: &ControllerStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).expect("status serializes");
    let fields = value.as_object_mut().expect("status is an object");
    for key in [
        "updatedTenancies",
        "clusters",
        "summary",
        "conditions",
        "observedGeneration",
        "rollout",
    ] {
        fields.entry(key).or_insert(serde_json::Value::Null);
    }
    // A merge patch merges objects key by key: the rollout's optional fields must be cleared
    // explicitly, or a finished or halted rollout's times would stay on the next one (and an
    // operator restarting from the status would take it for finished).
    if let Some(rollout) = fields
        .get_mut("rollout")
        .and_then(serde_json::Value::as_object_mut)
    {
        for key in ["finishedAt", "waveCompletedAt", "halted", "command"] {
            rollout.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_clears_fields_that_are_now_empty() {
        let patch = patch_of(&ControllerStatus::default());
        assert_eq!(patch["status"]["updatedTenancies"], serde_json::Value::Null);
        assert!(
            patch["status"]
                .as_object()
                .unwrap()
                .contains_key("conditions")
        );
    }

    #[test]
    fn the_patch_clears_what_a_new_rollout_no_longer_has() {
        let status = ControllerStatus {
            rollout: Some(crate::api::crd::RolloutStatus {
                generation: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let rollout = &patch_of(&status)["status"]["rollout"];
        for key in ["finishedAt", "waveCompletedAt", "halted", "command"] {
            assert_eq!(
                rollout.get(key),
                Some(&serde_json::Value::Null),
                "{key} is cleared"
            );
        }
        assert_eq!(rollout["generation"], 2);
    }

    #[test]
    fn a_written_transition_is_told_once_and_a_recovery_after_it() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
        let (notifier, mut notices) = crate::notify::Notifier::new(metrics);
        let writer = StatusWriter::telling(notifier);
        let owner = ObjectRef::new("shop").within("team-a");
        let status = |ready: bool, stalled: bool| ControllerStatus {
            conditions: [
                ("Ready", ready, "Ready"),
                ("Stalled", stalled, "ReleaseFailed"),
            ]
            .map(|(type_, ok, reason)| Condition {
                type_: type_.into(),
                status: if ok { "True" } else { "False" }.into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
                observed_generation: None,
            })
            .to_vec(),
            ..Default::default()
        };
        let (good, failed, waiting) = (
            status(true, false),
            status(false, true),
            status(false, false),
        );
        writer.tell(&owner, &good, &failed);
        writer.tell(&owner, &failed, &failed);
        writer.tell(&owner, &failed, &waiting);
        writer.tell(&owner, &waiting, &good);
        writer.tell(&owner, &good, &good);
        let mut told = Vec::new();
        while let Ok(n) = notices.try_recv() {
            assert_eq!(
                (n.namespace.as_str(), n.controller.as_str()),
                ("team-a", "shop")
            );
            told.push(n.event);
        }
        use crate::api::alert::AlertEvent;
        assert_eq!(told, [AlertEvent::Stalled, AlertEvent::Recovered]);
    }

    #[test]
    fn an_unchanged_report_marks_nothing() {
        let writer = StatusWriter::default();
        let owner = ObjectRef::new("x").within("default");
        writer.submit(owner.clone(), ReleaseReport::default());
        assert_eq!(writer.dirty.lock().unwrap().len(), 1);
        writer.dirty.lock().unwrap().clear();
        writer.submit(owner, ReleaseReport::default());
        assert!(writer.dirty.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_timed_from_the_first_touch_not_yet_written() {
        let writer = StatusWriter::default();
        let owner = ObjectRef::new("a").within("ns");
        writer.touch(owner.clone());
        let first = *writer.pending_since.get(&owner).unwrap();
        tokio::time::advance(Duration::from_secs(2)).await;
        writer.submit(owner.clone(), ReleaseReport::default());
        assert_eq!(*writer.pending_since.get(&owner).unwrap(), first);
        writer.forget(&owner);
        assert!(writer.pending_since.is_empty());
    }

    #[test]
    fn a_resource_written_within_its_interval_waits_and_others_go_at_once() {
        let writer = StatusWriter::default();
        let (a, b) = (
            ObjectRef::new("a").within("ns"),
            ObjectRef::new("b").within("ns"),
        );
        writer.touch(a.clone());
        writer.touch(b.clone());
        let now = Instant::now();
        let interval = Duration::from_millis(500);
        let last = HashMap::from([(a.clone(), now - Duration::from_millis(100))]);
        let (due, later) = writer.take_due(&last, interval, now);
        assert_eq!(due, [b]);
        assert_eq!(later, Some(now + Duration::from_millis(400)));
        let (due, later) = writer.take_due(&last, interval, now + Duration::from_millis(400));
        assert_eq!((due, later), (vec![a], None));
    }
}
