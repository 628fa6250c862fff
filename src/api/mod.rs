//! The `Controller` resource and the typed keys every other module speaks in.

pub mod crd;
pub mod key;
