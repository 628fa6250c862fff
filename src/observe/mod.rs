//! What runs in the members: pod and workload watchers and the model they feed.

pub(crate) mod drift;
pub(crate) mod model;
pub mod records;
pub mod releases;
pub mod watch;
