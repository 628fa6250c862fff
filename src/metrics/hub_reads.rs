//! What the operator asks of the hub on a tenant's behalf: the status API's reviews, the values objects read.

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::common::{KindLabels, registered};

/// The reviews the status API asks, always exposed even at zero.
pub(crate) const REVIEW_KINDS: [&str; 2] = ["TokenReview", "SubjectAccessReview"];
/// The kinds of values objects read, always exposed even at zero.
pub(crate) const VALUES_KINDS: [&str; 2] = ["Secret", "ConfigMap"];

/// The hub calls made on a tenant's behalf, by kind.
#[derive(Debug)]
pub(crate) struct HubReads {
    pub(crate) reviews: Family<KindLabels, Counter>,
    pub(crate) values: Family<KindLabels, Counter>,
}

impl HubReads {
    pub(crate) fn register(r: &mut Registry) -> Self {
        let m = Self {
            reviews: registered(
                r,
                "status_api_reviews",
                "Reviews the status API asked the hub, by kind: TokenReview or SubjectAccessReview (answers shared by concurrent callers and remembered are not counted again)",
                Family::default(),
            ),
            values: registered(
                r,
                "values_reads",
                "Secrets and ConfigMaps of hub namespaces whose content was read for valuesFrom, by kind (only objects a policy rule allows are read)",
                Family::default(),
            ),
        };
        for kind in REVIEW_KINDS {
            m.reviews.get_or_create_owned(&KindLabels { kind });
        }
        for kind in VALUES_KINDS {
            m.values.get_or_create_owned(&KindLabels { kind });
        }
        m
    }
}
