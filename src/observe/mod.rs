//! What runs in the members: pod and workload watchers and the model they feed.

pub mod drift;
pub mod model;
pub mod releases;
pub mod watch;
