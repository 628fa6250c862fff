//! What runs in the members: pod and workload watchers and the model they feed.

pub mod model;
pub mod watch;
