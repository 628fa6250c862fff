//! Who the member clusters are (the registration file's and the joined ones), their clients, and whether they answer.

pub(crate) mod health;
pub(crate) mod identity;
pub(crate) mod joined;
pub mod registry;
