//! Pull members: clusters the hub cannot open a connection to. Their agent connects out to the hub, reads the work the hub signed for its cluster and writes what it saw, all as objects in the member's own hub namespace.
//!
//! Two programs share this folder, each in a room of its own: [`hub`] is the hub's side (every
//! member's reports and Leases, the signed calls, one [`hub::link`] per member, what the hub holds
//! of each member in [`hub::held`]); [`agent`] is the member's (its login to the hub, what it
//! observes, its outbox). Neither uses the other. What both speak sits beside them: [`wire`] (the
//! calls the hub signs, the reports, the agent's configuration), [`messages`], [`pieces`] (the
//! release records in bounded pieces), [`charts`] (chart archives in chunks) and [`watching`]
//! (which namespaces an agent watches, one call per shard). Enrollment of pull members, a
//! reconciler of `MemberCluster`s, is in `controller::enroll`.

pub mod agent;
pub(crate) mod charts;
pub(crate) mod hub;
pub mod messages;
pub mod pieces;
pub mod watching;
pub mod wire;
