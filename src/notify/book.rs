//! What every Alert sent, failed to send and dropped since the operator started, written to its
//! status at most once a second.

use std::{collections::HashSet, time::Duration};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::reflector::ObjectRef,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::alert::Alert;

/// The least time between two writes of the counts.
const COUNT_WRITES: Duration = Duration::from_secs(1);

/// What each Alert sent, failed to send and dropped since the operator started.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    /// Messages delivered.
    pub(crate) sent: u64,
    /// Messages given up.
    pub(crate) failed: u64,
    /// Messages dropped (rate limit, full queue).
    pub(crate) dropped: u64,
    /// When the last one was delivered.
    pub(crate) last_sent: Option<String>,
}

/// The counts of every Alert, and which changed since they were last written.
#[derive(Default)]
pub(crate) struct AlertBook {
    counts: DashMap<ObjectRef<Alert>, Counts>,
    dirty: std::sync::Mutex<HashSet<ObjectRef<Alert>>>,
    changed: Notify,
}

impl AlertBook {
    fn count(&self, alert: &ObjectRef<Alert>, add: impl FnOnce(&mut Counts)) {
        add(&mut self.counts.entry(alert.clone()).or_default());
        self.dirty
            .lock()
            .expect("alert book lock")
            .insert(alert.clone());
        self.changed.notify_one();
    }

    /// Counts a message delivered now.
    pub(crate) fn sent(&self, alert: &ObjectRef<Alert>) {
        self.count(alert, |c| {
            c.sent += 1;
            c.last_sent = Some(Timestamp::now().to_string());
        });
    }

    /// Counts a message given up.
    pub(crate) fn failed(&self, alert: &ObjectRef<Alert>) {
        self.count(alert, |c| c.failed += 1);
    }

    /// Counts a message dropped.
    pub(crate) fn dropped(&self, alert: &ObjectRef<Alert>) {
        self.count(alert, |c| c.dropped += 1);
    }

    /// The counts of one Alert.
    pub(crate) fn of(&self, alert: &ObjectRef<Alert>) -> Counts {
        self.counts
            .get(alert)
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Writes the counts that changed, at most once per second, until cancelled.
    pub(crate) async fn write(&self, hub: kube::Client, cancel: CancellationToken) {
        loop {
            tokio::select! {
                () = self.changed.notified() => {}
                () = cancel.cancelled() => return,
            }
            let due: Vec<ObjectRef<Alert>> = self
                .dirty
                .lock()
                .expect("alert book lock")
                .drain()
                .collect();
            for alert in due {
                let c = self.of(&alert);
                let patch = serde_json::json!({"status": {
                    "sent": c.sent, "failed": c.failed, "dropped": c.dropped,
                    "lastSentTime": c.last_sent,
                }});
                if let Err(why) = patch_status(&hub, &alert, &patch).await {
                    tracing::debug!(%alert, %why, "writing an Alert's counts failed");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(COUNT_WRITES) => {}
                () = cancel.cancelled() => return,
            }
        }
    }
}

pub(crate) async fn patch_status(
    hub: &kube::Client,
    alert: &ObjectRef<Alert>,
    patch: &serde_json::Value,
) -> Result<(), String> {
    let api: Api<Alert> =
        Api::namespaced(hub.clone(), alert.namespace.as_deref().unwrap_or_default());
    let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
    let write = api.patch_status(&alert.name, &params, &patch);
    match tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, write).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the hub did not answer in time".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_mark_their_alert_for_writing() {
        let book = AlertBook::default();
        let a = ObjectRef::new("on-call").within("team-a");
        book.sent(&a);
        book.dropped(&a);
        book.failed(&a);
        let c = book.of(&a);
        assert_eq!((c.sent, c.failed, c.dropped), (1, 1, 1));
        assert!(c.last_sent.is_some());
        assert_eq!(book.dirty.lock().unwrap().len(), 1);
    }
}
