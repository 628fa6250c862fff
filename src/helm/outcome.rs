//! What a Helm job came to where the operator, not helm's words, decides: a cluster no longer
//! registered, and an uninstall judged by the release records left in its namespace.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::ListParams};

use crate::{
    api::key::ReleaseKey,
    queue::{FailureKind, Outcome},
};

/// How many of a release's records (helm's Secrets, `owner=helm,name=RELEASE`) its namespace holds.
pub(crate) async fn records_left(client: kube::Client, key: &ReleaseKey) -> kube::Result<usize> {
    let secrets: Api<Secret> = Api::namespaced(client, &key.scope.namespace);
    let selector = format!("owner=helm,name={}", key.release);
    let list = secrets
        .list_metadata(&ListParams::default().labels(&selector))
        .await?;
    Ok(list.items.len())
}

/// What a failed `helm uninstall` came to, given the release records left: none means the release
/// is gone, whatever helm said; otherwise helm's failure stands. When they could not be listed,
/// the failure is retried (it waits, when the cluster refuses the credentials).
pub(crate) fn uninstall_outcome(
    records_left: kube::Result<usize>,
    message: String,
    kind: FailureKind,
) -> Outcome {
    match records_left {
        Ok(0) => Outcome::Uninstalled,
        Ok(_) => Outcome::failed(message, kind),
        Err(e) => {
            let kind = match kind {
                FailureKind::Unavailable => FailureKind::Unavailable,
                _ => FailureKind::Transient,
            };
            let message =
                format!("{message} (listing its release records to check failed too: {e})");
            Outcome::failed(message, kind)
        }
    }
}

/// The outcome of a job for a cluster that is not registered (any more), without a helm call.
pub(crate) fn unregistered(key: &ReleaseKey) -> Outcome {
    Outcome::failed(
        format!(
            "cluster {} is not registered (any more); register it in the clusters file",
            key.scope.cluster
        ),
        FailureKind::Transient,
    )
}
