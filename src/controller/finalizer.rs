//! The finalizer that holds a `Controller` until its releases are uninstalled, what a reconcile
//! under it fails with, and how failures are retried.

use std::{sync::Arc, time::Duration};

use kube::runtime::controller::Action;

use crate::{api::crd::TenancyController, controller::context::Context, plan::OwnerId};

/// Finalizer that holds a resource until its releases are uninstalled everywhere.
pub(crate) const FINALIZER: &str = "multitenancy.dev/cleanup";

/// Result alias for this module.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong reconciling one resource.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Deletion waits for releases to be uninstalled, jobs to finish or clusters to be reached.
    #[error("Controller {owner} is being deleted: {waiting}")]
    CleanupPending {
        /// The resource.
        owner: OwnerId,
        /// What it waits for.
        waiting: String,
    },
    /// The finalizer machinery failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// The `reason` label a failure is counted under in `tenancy_hub_reconcile_errors_total`:
    /// an apply or cleanup failing inside the finalizer counts as what it is.
    pub(crate) fn metric_label(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::CleanupPending { .. } => "cleanup_pending",
            Error::Finalizer(inner) => match &**inner {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
        }
    }
}

/// Retries failed reconciles: soon while deletion waits, with a longer pause otherwise.
pub(crate) fn error_policy(
    _obj: Arc<TenancyController>,
    error: &Error,
    _ctx: Arc<Context>,
) -> Action {
    match error {
        Error::Finalizer(inner)
            if matches!(
                **inner,
                kube::runtime::finalizer::Error::CleanupFailed(Error::CleanupPending { .. })
            ) =>
        {
            tracing::info!(%error);
            Action::requeue(Duration::from_secs(3))
        }
        _ => {
            tracing::warn!(%error, "reconcile failed; retrying in 15s");
            Action::requeue(Duration::from_secs(15))
        }
    }
}
