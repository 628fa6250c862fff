//! Running the operator: wiring, leader election, the HTTP endpoints (the status API and the fleet view) and who may read them.

pub(crate) mod agent;
pub(crate) mod auth;
pub(crate) mod config;
pub(crate) mod git_hooks;
pub(crate) mod http;
pub mod leader;
pub(crate) mod operator;
pub(crate) mod policy_watch;
pub(crate) mod shards;
pub(crate) mod status_api;
pub(crate) mod steward;
pub(crate) mod tasks;
pub(crate) mod web;
pub(crate) mod wiring;
