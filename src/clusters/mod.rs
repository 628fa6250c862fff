//! Who the member clusters are, their clients, and whether they answer.

pub(crate) mod health;
pub(crate) mod identity;
pub mod registry;
