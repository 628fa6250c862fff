//! Notifications: what happened to a Controller (a condition transition, drift, a rollout halt) told to the webhooks of the `Alert`s of its hub namespace.
//!
//! The places that decide a transition (the status writer, the drift checks, the Helm outcomes,
//! the rollout gate) hand a [`Notice`] to a [`Notifier`], which never waits: a bounded channel
//! takes it or it is dropped and counted. The dispatcher (`dispatch`) matches it against the
//! Alerts, limits each Alert's rate, and sends from tasks of its own with retries; `book`
//! counts what each Alert sent and writes it (the Alerts' `Ready` is the reconciler's,
//! `controller::alerts`). The pure parts are `transitions`, `filter`,
//! `payload`, `limits`, `budget` (what one tenant may take) and `address` (where a webhook may
//! lead); the Secret an Alert names is read in `provider`, own namespace only, once a policy's
//! `alertSecrets` rule allows it.

pub(crate) mod address;
pub(crate) mod book;
pub(crate) mod budget;
pub(crate) mod dispatch;
pub(crate) mod filter;
pub(crate) mod limits;
pub(crate) mod payload;
pub(crate) mod provider;
pub(crate) mod transitions;

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;

use crate::api::alert::AlertEvent;

/// Notices waiting for the dispatcher; beyond this, new ones are dropped and counted.
pub(crate) const QUEUE: usize = 256;

/// What happened to one Controller, told once.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Notice {
    /// The Controller's name.
    pub(crate) controller: String,
    /// Its hub namespace.
    pub(crate) namespace: String,
    /// The cluster concerned, when one is.
    pub(crate) cluster: Option<String>,
    /// The release concerned, when one is.
    pub(crate) release: Option<String>,
    /// What happened.
    pub(crate) event: AlertEvent,
    /// The reason of the condition or Event it came with.
    pub(crate) reason: String,
    /// The operator's words for it (as in the Controller's status or Events).
    pub(crate) message: String,
    /// When it was decided.
    pub(crate) time: Timestamp,
}

/// Hands notices to the dispatcher without waiting; a handle that sends nowhere when none runs.
#[derive(Clone, Default)]
pub(crate) struct Notifier {
    to: Option<(mpsc::Sender<Notice>, Arc<crate::metrics::Metrics>)>,
}

impl Notifier {
    /// A notifier and the receiving end the dispatcher reads.
    pub(crate) fn new(metrics: Arc<crate::metrics::Metrics>) -> (Self, mpsc::Receiver<Notice>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (
            Self {
                to: Some((tx, metrics)),
            },
            rx,
        )
    }

    /// Hands a notice on, or drops and counts it when the dispatcher's queue is full.
    pub(crate) fn tell(&self, notice: Notice) {
        let Some((tx, metrics)) = &self.to else {
            return;
        };
        if tx.try_send(notice).is_err() {
            metrics.notification("dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let (notifier, mut rx) = Notifier::new(metrics.clone());
        let notice = Notice {
            controller: "shop".into(),
            namespace: "team-a".into(),
            cluster: None,
            release: None,
            event: AlertEvent::Stalled,
            reason: "ReleaseFailed".into(),
            message: String::new(),
            time: Timestamp::UNIX_EPOCH,
        };
        for _ in 0..QUEUE + 3 {
            notifier.tell(notice.clone());
        }
        let text = metrics.render(&crate::metrics::Gauges::default());
        assert!(
            text.contains("tenancy_hub_notifications_total{result=\"dropped\"} 3"),
            "{text}"
        );
        assert_eq!(std::iter::from_fn(|| rx.try_recv().ok()).count(), QUEUE);
        Notifier::default().tell(notice);
    }
}
