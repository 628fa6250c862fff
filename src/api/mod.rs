//! The `Controller` resource and the typed keys every other module speaks in.

pub mod crd;
pub mod key;

/// How long any one write to the hub (a status patch, an Event, the Lease) may take before it is
/// given up and tried again later, so a hub that stops answering holds up no loop.
pub const HUB_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
