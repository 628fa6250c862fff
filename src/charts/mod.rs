//! Charts: where they come from (repositories, OCI, the chart home), fetched once into a bounded cache, and the versions their constraints resolve to.

pub(crate) mod cache;
pub(crate) mod catalog;
pub(crate) mod common;
pub(crate) mod constraint;
pub(crate) mod credentials;
pub(crate) mod fetch;
pub(crate) mod index;
pub(crate) mod signed;
pub(crate) mod store;
pub mod verify;
