//! From desired releases to helm runs: planning (pure), the queue, the helm executors (one `helm` process per job, or the long-lived one on Helm's Go SDK), release records, charts (their sources, cache, fetches and version constraints) and drift.

pub mod cache;
pub mod charts;
pub mod constraint;
pub mod drift;
pub mod fetch;
pub mod helm;
pub mod helm_errors;
#[cfg(test)]
mod hostile;
pub mod limits;
pub mod namespace;
pub mod plan;
pub mod policy;
pub mod queue;
pub mod releases;
pub mod rollout;
pub mod sdk;
pub mod seal;
pub mod source;
