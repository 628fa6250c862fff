//! From desired releases to helm runs: planning (pure), the queue, the helm executor, release records, charts and drift.

pub mod charts;
pub mod drift;
pub mod helm;
pub mod plan;
pub mod policy;
pub mod queue;
pub mod releases;
pub mod rollout;
