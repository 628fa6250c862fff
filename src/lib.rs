//! tenancy-hub: delivers Helm charts into tenant namespaces across clusters and reports what runs there.
//!
//! The modules, from the pure core up to the binary's edge: `api` (the resources and typed keys),
//! `delivery` (planning, the queue, helm, release records, charts), `observe` (what runs in the
//! members), `status` (the hub resource's status), `clusters` (who the members are and whether they
//! answer), `controller` (the reconciler and its loops), `runtime` (wiring, leader election, HTTP)
//! and `cli`.

pub mod api;
pub mod cli;
pub mod clusters;
pub mod controller;
pub mod delivery;
pub mod metrics;
pub mod observe;
pub mod runtime;
pub mod status;
