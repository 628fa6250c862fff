//! The hub reconciler, the state it shares with its background loops, those loops, and registration reload.

pub mod context;
pub mod drift;
pub mod drift_checks;
pub mod events;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod index;
pub mod interest;
pub mod loops;
pub mod reconcile;
pub mod reload;
pub mod shard;
