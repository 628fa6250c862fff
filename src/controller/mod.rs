//! The hub's reconcilers, every kube-runtime controller of the operator: `Controller`s
//! (`reconcile`, deciding through `pipeline`), pull members' `MemberCluster`s (`enroll`) and
//! `Alert`s (`alerts`); the state the `Controller` reconciler shares with its background loops,
//! those loops, and registration reload.

pub(crate) mod alerts;
pub(crate) mod cleanup;
pub(crate) mod context;
pub(crate) mod depends_gate;
pub(crate) mod drift;
pub(crate) mod drift_checks;
pub(crate) mod enroll;
pub(crate) mod events;
pub(crate) mod finalizer;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod hub_values;
pub(crate) mod index;
pub(crate) mod interest;
pub(crate) mod loops;
pub(crate) mod observed;
pub(crate) mod pipeline;
pub(crate) mod problems;
pub(crate) mod reconcile;
pub(crate) mod reload;
pub(crate) mod repairs;
pub(crate) mod rollout_gate;
pub(crate) mod vouch;
