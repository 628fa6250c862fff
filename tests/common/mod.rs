//! Shared helpers of the end-to-end tests, one module per concern; tests import from the modules.

pub mod agent;
pub mod browser;
pub mod envelope;
pub mod fixtures;
pub mod forge;
pub mod git;
pub mod hostile;
pub mod hub;
pub mod lab;
pub mod manifests;
pub mod operator;
pub mod proxy;
pub mod repo;
pub mod signing;
pub mod simulated;
pub mod tokens;
