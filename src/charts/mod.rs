//! Charts: where they come from (repositories, OCI, the chart home), fetched once into a bounded cache, and the versions their constraints resolve to.

pub mod cache;
pub mod catalog;
pub mod constraint;
pub mod fetch;
