//! What a Helm job came to where the operator, not helm's words, decides: a cluster no longer
//! registered, and an uninstall judged by the release records left in its namespace.

use k8s_openapi::{api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::{
    Api,
    api::{DeleteParams, ListParams},
};

use crate::{
    api::key::ReleaseKey,
    queue::{FailureKind, Outcome},
};

/// The newest of a release's records (their metadata) when it is `pending-…`: its name and
/// revision. Pure, for [`clear_orphaned_pending`].
pub(crate) fn newest_pending(records: &[ObjectMeta]) -> Option<(String, i64)> {
    let label = |r: &ObjectMeta, key: &str| {
        r.labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let newest = records
        .iter()
        .filter_map(|r| Some((label(r, "version").parse::<i64>().ok()?, r)))
        .max_by_key(|(revision, _)| *revision)?;
    let (revision, record) = newest;
    (label(record, "status").starts_with("pending-"))
        .then(|| Some((record.name.clone()?, revision)))
        .flatten()
}

/// Deletes the newest record of `key` when it is left `pending-…` by a Helm executor that
/// stopped before answering: no process works on it any more (the queue runs one job per release
/// at a time), so the job tried again need not wait out helm's timeout, as it must for a pending
/// revision of unknown origin. The revision cleared, if any.
pub(crate) async fn clear_orphaned_pending(
    client: kube::Client,
    key: &ReleaseKey,
) -> kube::Result<Option<i64>> {
    let secrets: Api<Secret> = Api::namespaced(client, &key.scope.namespace);
    let selector = format!("owner=helm,name={}", key.release);
    let list = secrets
        .list_metadata(&ListParams::default().labels(&selector))
        .await?;
    let records: Vec<ObjectMeta> = list.items.into_iter().map(|r| r.metadata).collect();
    let Some((name, revision)) = newest_pending(&records) else {
        return Ok(None);
    };
    match secrets.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(Some(revision)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

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

#[cfg(test)]
mod orphan_tests {
    use super::*;

    fn record(revision: &str, status: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("sh.helm.release.v1.web.v{revision}")),
            labels: Some(
                [
                    ("version".to_owned(), revision.to_owned()),
                    ("status".to_owned(), status.to_owned()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_a_newest_record_left_pending_is_cleared() {
        assert_eq!(newest_pending(&[]), None);
        let installing = [record("1", "pending-install")];
        assert_eq!(
            newest_pending(&installing),
            Some(("sh.helm.release.v1.web.v1".to_owned(), 1))
        );
        let upgrading = [record("9", "superseded"), record("10", "pending-upgrade")];
        assert_eq!(
            newest_pending(&upgrading),
            Some(("sh.helm.release.v1.web.v10".to_owned(), 10))
        );
        // Revision 10 sorts after 9 as a number, not as text.
        let deployed = [record("10", "deployed"), record("9", "pending-upgrade")];
        assert_eq!(newest_pending(&deployed), None);
        let failed = [record("2", "failed")];
        assert_eq!(newest_pending(&failed), None);
    }
}
