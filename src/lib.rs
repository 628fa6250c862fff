//! tenancy-hub: delivers Helm charts into tenant namespaces across clusters and reports what runs there.

pub mod cli;
pub mod crd;
pub mod key;
pub mod registry;
