//! The hub resource's status: release phases, the release side, conditions, the pure builder and the paced writer.

pub mod build;
pub(crate) mod conditions;
pub(crate) mod next;
pub(crate) mod phase;
pub(crate) mod report;
pub(crate) mod writer;
