//! Notifications to the Alerts' webhooks, by result: sent, failed, dropped (a full queue), rate_limited.

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
        };
        for result in NOTIFICATION_RESULTS {
            m.total.get_or_create_owned(&ResultLabels { result });
        }
        m
    }
}
