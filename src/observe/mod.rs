//! What runs in the members: pod and workload watchers and the model they feed.

pub(crate) mod drift;
pub mod model;
pub(crate) mod record_feed;
pub mod records;
pub(crate) mod release_check;
pub mod releases;
pub(crate) mod relist;
pub(crate) mod revisions;
pub(crate) mod supervisor;
pub mod watch;
pub(crate) mod workloads;
