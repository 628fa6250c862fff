//! Who the member clusters are, their clients, and whether they answer.

pub mod health;
pub mod identity;
pub mod registry;
