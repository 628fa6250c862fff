//! Kubernetes Events on `Controller` resources, rate-limited so a flapping release cannot flood the hub.

use std::{collections::HashMap, time::Duration};

use kube::{
    Resource,
    runtime::{
        events::{Event as KubeEvent, EventType},
        reflector::ObjectRef,
    },
};

use crate::api::crd::TenancyController;

/// A repeat of one reason and note on one resource within this time is not published again.
pub(crate) const EVENT_REPEAT: Duration = Duration::from_secs(300);
/// Events one resource may get per minute.
pub(crate) const EVENT_BURST: u32 = 20;

/// Keeps a flapping release from flooding the hub with Events.
#[derive(Default)]
pub(crate) struct EventLimiter {
    windows: std::sync::Mutex<HashMap<ObjectRef<TenancyController>, EventWindow>>,
}

struct EventWindow {
    minute: std::time::Instant,
    count: u32,
    recent: HashMap<(String, String), std::time::Instant>,
}

impl EventLimiter {
    /// Whether an Event may be published now: not a recent repeat, and within the resource's burst.
    pub(crate) fn allow(
        &self,
        object: &ObjectRef<TenancyController>,
        reason: &str,
        note: &str,
        now: std::time::Instant,
    ) -> bool {
        let mut windows = self.windows.lock().expect("event limiter lock");
        let w = windows
            .entry(object.clone())
            .or_insert_with(|| EventWindow {
                minute: now,
                count: 0,
                recent: HashMap::new(),
            });
        w.recent
            .retain(|_, at| now.duration_since(*at) < EVENT_REPEAT);
        if now.duration_since(w.minute) >= Duration::from_secs(60) {
            w.minute = now;
            w.count = 0;
        }
        let key = (reason.to_owned(), note.to_owned());
        if w.recent.contains_key(&key) || w.count >= EVENT_BURST {
            return false;
        }
        w.recent.insert(key, now);
        w.count += 1;
        true
    }
}

/// What publishing Events needs: the hub's recorder and the limiter.
pub(crate) struct Events {
    /// Publishes Kubernetes Events on `Controller` resources.
    pub(crate) recorder: kube::runtime::events::Recorder,
    /// Keeps Events from flooding the hub.
    pub(crate) limiter: EventLimiter,
}

impl Events {
    /// Events published by `recorder`, limited afresh.
    pub(crate) fn new(recorder: kube::runtime::events::Recorder) -> Self {
        Self {
            recorder,
            limiter: EventLimiter::default(),
        }
    }
}

/// How a reconcile tells what happened: Events on the resource, the Alerts, the metrics.
pub(crate) struct Telling<'a> {
    /// Events on `Controller` resources.
    pub(crate) events: &'a Events,
    /// The Alerts, told without waiting.
    pub(crate) notifier: &'a crate::notify::Notifier,
    /// Operator metrics.
    pub(crate) metrics: &'a crate::metrics::Metrics,
}

/// Publishes an Event on a `Controller`, within the limiter's bounds; failures are logged, never fatal.
pub(crate) async fn publish(
    events: &Events,
    c: &TenancyController,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    if !events.limiter.allow(
        &ObjectRef::from_obj(c),
        reason,
        &note,
        std::time::Instant::now(),
    ) {
        tracing::debug!(reason, "event suppressed by the rate limit");
        return;
    }
    let event = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: action.into(),
        secondary: None,
    };
    let reference = c.object_ref(&());
    let publish = events.recorder.publish(&event, &reference);
    match tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, publish).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not publish an event"),
        Err(_) => tracing::warn!("could not publish an event: the hub did not answer in time"),
    }
}

/// What happened to `owner`'s release `key` (or to the Controller as a whole), as a notice for
/// its Alerts.
pub(crate) fn notice(
    owner: &crate::plan::OwnerId,
    key: Option<(&str, &str)>,
    event: crate::api::alert::AlertEvent,
    reason: &str,
    message: String,
) -> crate::notify::Notice {
    crate::notify::Notice {
        controller: owner.name.clone(),
        namespace: owner.namespace.clone(),
        cluster: key.map(|(cluster, _)| cluster.to_owned()),
        release: key.map(|(_, release)| release.to_owned()),
        event,
        reason: reason.to_owned(),
        message,
        time: k8s_openapi::jiff::Timestamp::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_and_bursts_of_events_are_held_back() {
        let limiter = EventLimiter::default();
        let (a, b) = (
            ObjectRef::new("a").within("ns"),
            ObjectRef::new("b").within("ns"),
        );
        let t = std::time::Instant::now();
        assert!(limiter.allow(&a, "Failed", "x failed", t));
        assert!(
            !limiter.allow(&a, "Failed", "x failed", t + Duration::from_secs(10)),
            "a repeat is held back"
        );
        assert!(
            limiter.allow(&b, "Failed", "x failed", t),
            "other resources are not affected"
        );
        assert!(
            limiter.allow(&a, "Failed", "x failed", t + EVENT_REPEAT),
            "a repeat after the window goes out"
        );
        let burst = (0..100)
            .filter(|i| limiter.allow(&a, "Upgraded", &format!("n{i}"), t + EVENT_REPEAT))
            .count();
        assert_eq!(
            burst as u32,
            EVENT_BURST - 1,
            "one resource gets at most the burst per minute"
        );
        assert!(limiter.allow(
            &a,
            "Upgraded",
            "later",
            t + EVENT_REPEAT + Duration::from_secs(60)
        ));
    }
}
