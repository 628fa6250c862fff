//! The chart cache: archives found or fetched, bytes fetched, bytes kept.

use std::{collections::HashSet, sync::Mutex};

use prometheus_client::{
    encoding::EncodeLabelSet,
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
    pub(crate) resolutions: Family<ResolutionLabels, Counter>,
    pub(crate) verifications: Family<VerificationLabels, Counter>,
    /// The sources named in a label so far: beyond [`MAX_SOURCES`] others count as `other`.
    pub(crate) sources: Mutex<HashSet<String>>,
}

/// Sources named in labels at most, so a permissive hub's tenants cannot grow the series.
pub(crate) const MAX_SOURCES: usize = 64;

/// A chart resolution's source (the policy prefix it stays under) and outcome: `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResolutionLabels {
    pub(crate) source: String,
    pub(crate) outcome: &'static str,
}

/// A signature check's source, provider and outcome: `verified`, a refusal (`unsigned`,
/// `untrusted`, `mismatch`, `invalid`) or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VerificationLabels {
    pub(crate) source: String,
    pub(crate) provider: &'static str,
    pub(crate) outcome: &'static str,
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
            resolutions: registered(
                r,
                "chart_resolutions",
                "Remote chart resolutions (index or registry asked, archive fetched unless cached), by source prefix and outcome",
                Family::default(),
            ),
            verifications: registered(
                r,
                "chart_verifications",
                "Chart signature checks of resolved charts, by source prefix, provider and outcome (verified, unsigned, untrusted, mismatch, invalid, error)",
                Family::default(),
            ),
            sources: Mutex::default(),
        };
        for kind in FETCH_KINDS {
            m.fetched.get_or_create_owned(&KindLabels { kind });
        }
        m
    }

    /// The label of `source`: itself while fewer than [`MAX_SOURCES`] were named, else `other`.
    pub(crate) fn source_label(&self, source: &str) -> String {
        let mut named = self
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if named.contains(source) || named.len() < MAX_SOURCES {
            named.insert(source.to_owned());
            source.to_owned()
        } else {
            "other".to_owned()
        }
    }
}
