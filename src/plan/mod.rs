//! Planning: the releases a spec asks for, compared with those applied in the clusters, become Helm jobs (pure).

pub(crate) mod claims;
pub(crate) mod depends;
pub(crate) mod desired;
pub mod fleet;
pub(crate) mod health;
pub(crate) mod limits;
pub(crate) mod planner;
pub(crate) mod post_render;
pub(crate) mod release;
pub(crate) mod remediation;
pub(crate) mod rollout;
pub(crate) mod values;

pub(crate) use desired::*;
pub use planner::*;
pub use release::*;

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
