//! Helm run against one member cluster: the `helm` binary per job or the long-lived executor on Helm's Go SDK (`helm-sdk/`), the release records they seal, and the target namespace they prepare.

pub(crate) mod args;
pub(crate) mod cli;
pub(crate) mod kubeconfig;
pub(crate) mod namespace;
pub(crate) mod outcome;
pub(crate) mod pipe;
pub(crate) mod preview;
pub(crate) mod process;
pub(crate) mod protocol;
pub(crate) mod sdk;
pub mod seal;
pub(crate) mod settings;
