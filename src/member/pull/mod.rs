//! Pull members: clusters the hub cannot open a connection to. Their agent connects out to the hub, reads the work the hub signed for its cluster and writes what it saw, all as objects in the member's own hub namespace.
//!
//! [`wire`] is the protocol both sides share: the calls the hub publishes (signed), the reports
//! the agent writes, and the agent's configuration. [`enroll`] keeps each member's hub namespace,
//! identities and configuration; [`credentials`] is how the agent logs in to the hub and keeps
//! its token fresh.

pub mod credentials;
pub(crate) mod enroll;
// The calls and their signatures are for the hub's link and the agent, which come next.
#[allow(dead_code)]
pub(crate) mod wire;
