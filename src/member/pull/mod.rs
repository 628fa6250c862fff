//! Pull members: clusters the hub cannot open a connection to. Their agent connects out to the hub, reads the work the hub signed for its cluster and writes what it saw, all as objects in the member's own hub namespace.
//!
//! [`wire`] is the protocol both sides share: the calls the hub publishes (signed), the reports
//! the agent writes, and the agent's configuration. [`enroll`] keeps each member's hub namespace,
//! identities and configuration; [`login`] is how the agent logs in to the hub and keeps its
//! token fresh; [`link`] is the hub's side of one member, [`agent`] the member's; [`watching`]
//! is which namespaces an agent watches, one call per shard.

pub(crate) mod agent;
pub(crate) mod charts;
pub(crate) mod enroll;
pub(crate) mod held;
pub(crate) mod hub;
pub(crate) mod link;
pub(crate) mod login;
pub mod messages;
pub(crate) mod observer;
pub mod outbox;
pub mod pieces;
pub mod watching;
pub mod wire;
