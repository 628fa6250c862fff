//! Status writes to `Controller` resources and how long a change takes to reach one.

use prometheus_client::{
    metrics::{counter::Counter, histogram::Histogram},
    registry::{Registry, Unit},
};

use super::common::{long_buckets, registered, registered_in};

/// Status writes to `Controller` resources and how long a change takes to reach one.
#[derive(Debug)]
pub(crate) struct StatusWrites {
    pub(crate) written: Counter,
    pub(crate) skipped: Counter,
    pub(crate) propagation: Histogram,
}

impl StatusWrites {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Self {
            written: registered(
                r,
                "status_writes",
                "Status writes to Controller resources",
                Counter::default(),
            ),
            skipped: registered(
                r,
                "status_writes_skipped",
                "Status writes skipped because nothing had changed",
                Counter::default(),
            ),
            propagation: registered_in(
                r,
                "status_propagation",
                "Time from a change reaching a resource's report or the model to its status write",
                Unit::Seconds,
                long_buckets(),
            ),
        }
    }
}
