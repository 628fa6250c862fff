//! One Helm release record read: the metadata watches' events and selectors, a revision's manifest decoded within bounds, and what a record says was applied and by whom (its owner only when its seal verifies).

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, core::PartialObjectMeta, runtime::watcher};

use crate::{
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    helm::seal::SealKey,
    plan::{
        Applied, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, OwnerId,
        SPEC_HASH_LABEL,
    },
};

/// A release record as watched: the metadata of one of Helm's release Secrets.
pub(crate) type Record = PartialObjectMeta<Secret>;

/// The events of one watch of release records (one label selector, every namespace).
pub(crate) type RecordEvents =
    futures::stream::BoxStream<'static, Result<watcher::Event<Record>, watcher::Error>>;

/// Watches the release records `selector` matches in every namespace of the cluster `client`
/// reaches, metadata only, listing again after any error.
pub(crate) fn record_events(client: kube::Client, selector: &str) -> RecordEvents {
    let api: Api<Record> = Api::all(client);
    let config = watcher::Config::default().labels(selector);
    crate::observe::relist::relisting_watcher(api, config).boxed()
}

/// Label selector of the newest release records tenancy-hub manages. A release uninstalled with
/// its history kept (`uninstall.keepHistory`) leaves records marked `uninstalled`: it is gone,
/// and they are not read.
pub const MANAGED_SELECTOR: &str =
    "owner=helm,multitenancy.dev/managed-by=tenancy-hub,status!=superseded,status!=uninstalled";

/// Label selector of the newest records of every other Helm release (`!=` also selects records
/// without the label); one uninstalled with its history kept is gone, as above.
pub const FOREIGN_SELECTOR: &str =
    "owner=helm,multitenancy.dev/managed-by!=tenancy-hub,status!=superseded,status!=uninstalled";

/// What Helm deployed for one revision of a release: its manifest and the values it was given.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Deployed {
    /// The rendered manifest.
    pub(crate) manifest: String,
    /// The values the revision was given (Helm's `config`); null when none.
    pub(crate) values: serde_json::Value,
}

/// The name of the release record of `key`'s `revision`.
pub(crate) fn record_name(key: &ReleaseKey, revision: i64) -> String {
    format!("sh.helm.release.v1.{}.v{revision}", key.release)
}

/// What Helm deployed for one revision of a release, read from its release record `secret`
/// (named `name`); the error says what is wrong with the record.
pub(crate) fn deployed_of(name: &str, secret: &Secret) -> Result<Deployed, String> {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("release"))
        .ok_or_else(|| format!("release record {name} holds no release"))?;
    decode_release(&data.0).map_err(|e| format!("release record {name}: {e}"))
}

/// The most a release record's `release` field may expand to when it is decoded: 32 MiB. A
/// record is a Secret (at most 1 MiB), and Helm's own records, gzipped JSON of a chart and its
/// manifest, expand to a few MiB at most; anyone who may write in a release's namespace may write
/// a record that expands to gigabytes, so decoding stops at this bound instead.
pub(crate) const MAX_RECORD_BYTES: usize = 32 << 20;

/// The `manifest` of a Helm release record's `release` field: base64 of (gzipped, as Helm writes
/// it) JSON, decoded up to [`MAX_RECORD_BYTES`]; beyond that, an error and nothing more is read.
pub(crate) fn decode_manifest(release: &[u8]) -> Result<String, String> {
    decode_release(release).map(|d| d.manifest)
}

/// The manifest and values of a Helm release record's `release` field (see [`decode_manifest`]).
pub(crate) fn decode_release(release: &[u8]) -> Result<Deployed, String> {
    use base64::Engine as _;
    use std::io::Read as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(release.trim_ascii())
        .map_err(|e| format!("not base64: {e}"))?;
    let json = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut decoder = flate2::read::GzDecoder::new(&raw[..]);
        let mut json = Vec::new();
        (&mut decoder)
            .take(MAX_RECORD_BYTES as u64)
            .read_to_end(&mut json)
            .map_err(|e| format!("not gzip: {e}"))?;
        if decoder
            .read(&mut [0u8])
            .map_err(|e| format!("not gzip: {e}"))?
            > 0
        {
            return Err(format!(
                "it expands past {} MiB, the bound of a release record (Helm's own stay far below): not a record Helm wrote",
                MAX_RECORD_BYTES >> 20
            ));
        }
        json
    } else {
        raw
    };
    #[derive(serde::Deserialize)]
    struct HelmRelease {
        #[serde(default)]
        manifest: String,
        #[serde(default)]
        config: serde_json::Value,
    }
    serde_json::from_slice::<HelmRelease>(&json)
        .map(|r| Deployed {
            manifest: r.manifest,
            values: r.config,
        })
        .map_err(|e| format!("not a Helm release: {e}"))
}

fn owner_of(cluster: &ClusterName, record: &Record, seal: Option<&SealKey>) -> Option<OwnerId> {
    let labels = record.metadata.labels.as_ref()?;
    let sealed = seal.is_none_or(|seal| {
        record
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| seal.verifies(cluster, ns, labels))
    });
    (sealed && labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)).then(|| {
        OwnerId {
            namespace: labels
                .get(OWNER_NAMESPACE_LABEL)
                .cloned()
                .unwrap_or_default(),
            name: labels.get(OWNER_NAME_LABEL).cloned().unwrap_or_default(),
        }
    })
}

/// Reads one Helm release record's labels; None for Secrets that are not release records. With
/// `seal`, the owner is taken only from a record whose seal verifies.
pub(crate) fn applied_from(
    cluster: &ClusterName,
    record: &Record,
    seal: Option<&SealKey>,
) -> Option<Applied> {
    let labels = record.metadata.labels.as_ref()?;
    let namespace = record.metadata.namespace.as_deref()?;
    let scope = ClusterNamespace::new(cluster.clone(), namespace).ok()?;
    Some(Applied {
        key: ReleaseKey {
            scope,
            release: labels.get("name")?.clone(),
        },
        owner: owner_of(cluster, record, seal),
        spec_hash: labels.get(SPEC_HASH_LABEL).cloned(),
        revision: labels.get("version")?.parse().ok()?,
        status: labels.get("status").cloned().unwrap_or_default(),
        modified_at: record
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
    })
}
