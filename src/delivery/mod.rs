//! From desired releases to helm runs: planning (pure), the queue, the helm executor, release records, charts (with their cache and version constraints) and drift.

pub mod cache;
pub mod charts;
pub mod constraint;
pub mod drift;
pub mod helm;
pub mod plan;
pub mod policy;
pub mod queue;
pub mod releases;
pub mod rollout;
