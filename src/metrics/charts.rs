//! The chart cache: archives found or fetched, bytes fetched, bytes kept.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::common::{FETCH_KINDS, KindLabels, registered, registered_in};

/// The chart cache: archives found or fetched, bytes fetched, bytes kept.
#[derive(Debug)]
pub(crate) struct Charts {
    pub(crate) hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) fetched: Family<KindLabels, Counter>,
    pub(crate) size: Gauge,
}

impl Charts {
    pub(crate) fn register(r: &mut Registry) -> Self {
        let m = Self {
            hits: registered(
                r,
                "chart_cache_hits",
                "Chart archives wanted (by a resolution or a helm call) and found in the chart cache",
                Counter::default(),
            ),
            misses: registered(
                r,
                "chart_cache_misses",
                "Chart archives wanted and not in the chart cache: fetched into it",
                Counter::default(),
            ),
            fetched: registered_in(
                r,
                "chart_fetched",
                "Bytes the chart cache fetched, by kind: repository index or chart archive",
                Unit::Bytes,
                Family::default(),
            ),
            size: registered_in(
                r,
                "chart_cache",
                "Size of the chart archives kept in the chart cache",
                Unit::Bytes,
                Gauge::default(),
            ),
        };
        for kind in FETCH_KINDS {
            m.fetched.get_or_create_owned(&KindLabels { kind });
        }
        m
    }
}
