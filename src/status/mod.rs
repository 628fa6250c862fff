//! The hub resource's status: the pure builder and the paced writer.

pub mod build;
pub(crate) mod writer;
