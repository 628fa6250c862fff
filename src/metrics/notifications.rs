//! Notifications to the Alerts' webhooks, by result: sent, failed, dropped (a full queue), rate_limited; and the reads of the Alerts' Secrets.

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::common::{ResultLabels, registered};

/// The results a notification is counted by, always exposed even at zero.
pub(crate) const NOTIFICATION_RESULTS: [&str; 4] = ["sent", "failed", "dropped", "rate_limited"];

/// Notifications to the Alerts' webhooks, by result.
#[derive(Debug)]
pub(crate) struct Notifications {
    pub(crate) total: Family<ResultLabels, Counter>,
    /// Reads of Alerts' Secrets from the hub.
    pub(crate) secret_reads: Counter,
    /// Bytes of data those reads returned.
    pub(crate) secret_read_bytes: Counter,
}

impl Notifications {
    pub(crate) fn register(r: &mut Registry) -> Self {
        let m = Self {
            total: registered(
                r,
                "notifications",
                "Messages to the Alerts' webhooks, by result: sent, failed (every attempt failed, or the Alert cannot send), dropped (the queue or the messages on their way were full), rate_limited (over the Alert's rate)",
                Family::default(),
            ),
            secret_reads: registered(
                r,
                "alert_secret_reads",
                "Reads of the Secrets Alerts name (whole Secrets; a Secret no alertSecrets rule allows is never read)",
                Counter::default(),
            ),
            secret_read_bytes: registered(
                r,
                "alert_secret_read_bytes",
                "Bytes of data the reads of Alerts' Secrets returned",
                Counter::default(),
            ),
        };
        for result in NOTIFICATION_RESULTS {
            m.total.get_or_create_owned(&ResultLabels { result });
        }
        m
    }
}
