//! The bounded channels between components: messages waiting in each.

use prometheus_client::{
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

use super::common::{ChannelLabels, Gauges, gauge_value, registered};

/// The bounded channels between components.
#[derive(Debug)]
pub(crate) struct Channels {
    pub(crate) depth: Family<ChannelLabels, Gauge>,
}

impl Channels {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Self {
            depth: registered(
                r,
                "channel_depth",
                "Messages waiting in a bounded channel between components; a full channel makes its senders wait, nothing is dropped",
                Family::default(),
            ),
        }
    }

    /// Sets each channel's depth from a scrape's sample.
    pub(crate) fn sample(&self, gauges: &Gauges) {
        for (channel, depth) in &gauges.channels {
            self.depth
                .get_or_create(&ChannelLabels { channel })
                .set(gauge_value(*depth));
        }
    }
}
