//! Release-record seals: proof, kept on the record itself, that this operator wrote it, so ownership and content are never taken from what a tenant can write.
//!
//! A Helm release record is a Secret in the release's namespace: whoever may write Secrets there
//! (a tenant who is namespace admin) can forge one, labelled as any Controller's, with any
//! manifest and hooks. So every record the operator's Helm actions write carries two labels:
//!
//! - [`CONTENT_LABEL`]: a digest of what Helm acts on when it reads the record back (the
//!   manifest, and each hook's kind, name, path, events, delete policies and manifest), see
//!   [`content_digest`];
//! - [`SEAL_LABEL`]: an HMAC-SHA256, under a key only the operator holds (the hub Secret
//!   [`KEY_SECRET`] in the operator's namespace), of the cluster, namespace, release, revision,
//!   owning Controller, spec hash and that content digest.
//!
//! The planner takes a record's owner from its labels only when its seal verifies; any other
//! record is foreign (reported, never acted on). The Go executor seals records as Helm writes
//! them and, reading them back, hides every record whose seal or content digest does not verify,
//! so Helm never uninstalls, upgrades from or rolls back to content the operator did not write.
//! The CLI executor checks the records of a release before each helm call and seals what the
//! call wrote after it (see `helm::cli`).
//!
//! The exact bytes hashed are in [`message`] and [`content_digest`]; the Go executor computes
//! the same (`src/helm/helm-sdk/seal.go`), checked by shared vectors in both test suites.

use std::{collections::BTreeMap, fmt, sync::Arc};

use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, api::PostParams};
use sha2::{Digest, Sha256};

use crate::api::key::ClusterName;
use crate::plan::{
    MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, SPEC_HASH_LABEL,
};

/// Label holding the record's seal: 32 hex digits of an HMAC-SHA256.
pub(crate) const SEAL_LABEL: &str = "multitenancy.dev/seal";
/// Label holding the digest of what the record asks Helm to act on: 32 hex digits of SHA-256.
pub(crate) const CONTENT_LABEL: &str = "multitenancy.dev/content";
/// The hub Secret, in the operator's namespace, holding the sealing key (data key `key`).
pub(crate) const KEY_SECRET: &str = "tenancy-hub-seal";
/// Version tag at the head of every sealed message.
const VERSION: &str = "tenancy-hub-seal/v1";

/// Errors of loading the sealing key.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key Secret cannot be read or created on the hub.
    #[error(
        "the sealing key Secret {namespace}/{KEY_SECRET} cannot be read or created on the hub ({source}); let the operator get and create Secrets in its namespace (deploy/rbac.yaml)"
    )]
    Hub {
        /// The operator's namespace.
        namespace: String,
        /// The API error.
        source: kube::Error,
    },
    /// The key Secret holds no usable key.
    #[error(
        "the sealing key Secret {namespace}/{KEY_SECRET} holds no key of 32 to 64 bytes under data.key; delete it to have the operator make a new one (records sealed with the old key are then foreign)"
    )]
    Unusable {
        /// The operator's namespace.
        namespace: String,
    },
}

/// Whose key sealed a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sealer {
    /// The operator's own key: only the operator's Helm actions write it.
    Operator,
    /// The key derived for the record's cluster, which a pull member's agent holds: it vouches
    /// for the record's owner only where that owner delivers to the member.
    Member,
}

/// The operator's sealing key. Never printed: its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey(Arc<Vec<u8>>);

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealKey(***)")
    }
}

impl serde::Serialize for SealKey {
    /// As hex, for the executor's pipe only.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

/// What a seal binds: where the record is, whose it is, what spec it came from, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed<'a> {
    /// The registered cluster name.
    pub cluster: &'a str,
    /// The release's namespace.
    pub namespace: &'a str,
    /// The release name.
    pub release: &'a str,
    /// The Helm revision.
    pub revision: i64,
    /// The owning Controller's hub namespace.
    pub owner_namespace: &'a str,
    /// The owning Controller's name.
    pub owner_name: &'a str,
    /// The spec hash label.
    pub spec_hash: &'a str,
    /// The content digest label.
    pub content: &'a str,
}

/// The bytes a seal is the HMAC of: fields one per line after a version tag. No field may hold
/// a newline (names, numbers and hex digits never do; a label value cannot).
pub(crate) fn message(s: &Sealed<'_>) -> String {
    format!(
        "{VERSION}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}",
        s.cluster,
        s.namespace,
        s.release,
        s.revision,
        s.owner_namespace,
        s.owner_name,
        s.spec_hash,
        s.content
    )
}

/// One hook of a release as the content digest reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Hook {
    /// The hook's name.
    #[serde(default)]
    pub(crate) name: String,
    /// The hook's kind.
    #[serde(default)]
    pub(crate) kind: String,
    /// The template path.
    #[serde(default)]
    pub(crate) path: String,
    /// The manifest Helm applies for it.
    #[serde(default)]
    pub(crate) manifest: String,
    /// When it runs (`pre-delete`, …).
    #[serde(default)]
    pub(crate) events: Vec<String>,
    /// What Helm deletes after it.
    #[serde(default)]
    pub(crate) delete_policies: Vec<String>,
}

/// The digest of what a record asks Helm to act on: SHA-256 over the manifest and, for each hook
/// in order, its kind, name, path, events, delete policies and manifest, each field ended by a NUL
/// byte and each list by an extra one; 32 hex digits.
pub(crate) fn content_digest(manifest: &str, hooks: &[Hook]) -> String {
    let mut h = Sha256::new();
    let mut field = |s: &str| {
        h.update(s.as_bytes());
        h.update([0u8]);
    };
    field(VERSION);
    field(manifest);
    for hook in hooks {
        field(&hook.kind);
        field(&hook.name);
        field(&hook.path);
        for e in &hook.events {
            field(e);
        }
        field("");
        for p in &hook.delete_policies {
            field(p);
        }
        field("");
        field(&hook.manifest);
    }
    hex(&h.finalize()[..16])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SealKey {
    /// A key from its bytes: 32 to 64 of them.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        (32..=64)
            .contains(&bytes.len())
            .then(|| Self(Arc::new(bytes.to_vec())))
    }

    /// A new random key of 32 bytes from the operating system.
    pub(crate) fn generate() -> std::io::Result<Self> {
        use std::io::Read as _;
        let mut bytes = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(Self(Arc::new(bytes.to_vec())))
    }

    /// The key as hex, for the executor's pipe (never argv, never a log).
    pub(crate) fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The seal of `s`: 32 hex digits of HMAC-SHA256.
    pub(crate) fn seal(&self, s: &Sealed<'_>) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(message(s).as_bytes());
        hex(&mac.finalize().into_bytes()[..16])
    }

    /// The labels of the deployed record `s` sealed with this key, as Helm and the executor
    /// leave them: Helm's own (`owner`, `name`, `status`, `version`), the owner, spec hash and
    /// managed-by labels, the content digest and the seal.
    pub fn record_labels(&self, s: &Sealed<'_>) -> BTreeMap<String, String> {
        [
            ("owner", "helm"),
            ("name", s.release),
            ("status", "deployed"),
            ("version", &s.revision.to_string()),
            (MANAGED_BY_LABEL, MANAGED_BY),
            (OWNER_NAMESPACE_LABEL, s.owner_namespace),
            (OWNER_NAME_LABEL, s.owner_name),
            (SPEC_HASH_LABEL, s.spec_hash),
            (CONTENT_LABEL, s.content),
            (SEAL_LABEL, &self.seal(s)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// The key an agent seals the records of its own `cluster` with: derived from this one, so
    /// the agent of a pull member never holds the key of any other cluster's records.
    pub(crate) fn for_cluster(&self, cluster: &ClusterName) -> SealKey {
        Self(Arc::new(
            self.derive(&format!("{VERSION}/cluster\n{cluster}"))
                .to_vec(),
        ))
    }

    /// 32 bytes derived from this key for one `purpose`, which no other purpose shares.
    pub(crate) fn derive(&self, purpose: &str) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Whether a record's labels carry a seal for the record at `cluster` in `namespace` (its
    /// release, revision, owner, spec hash and content digest from its labels), of this key or of
    /// the key derived from it for `cluster` (what a pull member's agent seals with). Compared in
    /// constant time.
    pub(crate) fn verifies(
        &self,
        cluster: &ClusterName,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        self.sealed_by(cluster, namespace, labels).is_some()
    }

    /// Whose key sealed a record's labels (see [`SealKey::verifies`]), when one did.
    pub(crate) fn sealed_by(
        &self,
        cluster: &ClusterName,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<Sealer> {
        if self.verifies_exactly(cluster, namespace, labels) {
            Some(Sealer::Operator)
        } else if self
            .for_cluster(cluster)
            .verifies_exactly(cluster, namespace, labels)
        {
            Some(Sealer::Member)
        } else {
            None
        }
    }

    /// Whether a record's labels carry a seal of exactly this key.
    fn verifies_exactly(
        &self,
        cluster: &ClusterName,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let get = |k: &str| labels.get(k).map(String::as_str);
        let (Some(release), Some(revision), Some(content), Some(seal)) = (
            get("name"),
            get("version").and_then(|v| v.parse::<i64>().ok()),
            get(CONTENT_LABEL),
            get(SEAL_LABEL),
        ) else {
            return false;
        };
        let expected = self.seal(&Sealed {
            cluster: cluster.as_str(),
            namespace,
            release,
            revision,
            owner_namespace: get(OWNER_NAMESPACE_LABEL).unwrap_or_default(),
            owner_name: get(OWNER_NAME_LABEL).unwrap_or_default(),
            spec_hash: get(SPEC_HASH_LABEL).unwrap_or_default(),
            content,
        });
        constant_time_eq(expected.as_bytes(), seal.as_bytes())
    }

    /// Reads the key from the hub Secret [`KEY_SECRET`] of `api`'s namespace `namespace`, when
    /// it is there; creates nothing.
    pub(crate) async fn read(api: Api<Secret>, namespace: &str) -> Result<Option<Self>, Error> {
        let found = api.get_opt(KEY_SECRET).await.map_err(|source| Error::Hub {
            namespace: namespace.to_owned(),
            source,
        })?;
        found
            .map(|s| {
                s.data
                    .as_ref()
                    .and_then(|d| d.get("key"))
                    .and_then(|k| Self::from_bytes(&k.0))
                    .ok_or_else(|| Error::Unusable {
                        namespace: namespace.to_owned(),
                    })
            })
            .transpose()
    }

    /// Reads the key from the hub Secret [`KEY_SECRET`] in `namespace`, creating it with a new
    /// random key when it does not exist (replicas racing to create it all read the winner's).
    pub async fn load_or_create(hub: kube::Client, namespace: &str) -> Result<Self, Error> {
        let api: Api<Secret> = Api::namespaced(hub, namespace);
        let hub_error = |source| Error::Hub {
            namespace: namespace.to_owned(),
            source,
        };
        if let Some(found) = Self::read(api.clone(), namespace).await? {
            return Ok(found);
        }
        let key = Self::generate().map_err(|_| Error::Unusable {
            namespace: namespace.to_owned(),
        })?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(KEY_SECRET.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/name".to_owned(),
                    "tenancy-hub".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "key".to_owned(),
                k8s_openapi::ByteString(key.0.to_vec()),
            )])),
            type_: Some("Opaque".to_owned()),
            ..Secret::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(key),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                Self::read(api, namespace).await?.ok_or(Error::Unusable {
                    namespace: namespace.to_owned(),
                })
            }
            Err(e) => Err(hub_error(e)),
        }
    }
}

/// A record's data may hold at most this many bytes (a Secret holds at most 1 MiB).
pub(crate) const MAX_RECORD_BYTES: usize = 4 << 20;
/// A record's release may decompress to at most this many bytes.
pub(crate) const MAX_RELEASE_BYTES: u64 = 32 << 20;

/// What a decoded record asks Helm to act on.
#[derive(Debug, Default, serde::Deserialize)]
struct Opened {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    manifest: String,
    #[serde(default)]
    hooks: Vec<Option<Hook>>,
}

/// Decodes a release record's `release` field (base64 of gzipped JSON, as Helm writes it)
/// within [`MAX_RECORD_BYTES`] and [`MAX_RELEASE_BYTES`].
fn open(data: &[u8]) -> Result<Opened, String> {
    use base64::Engine as _;
    use std::io::Read as _;
    if data.len() > MAX_RECORD_BYTES {
        return Err(format!(
            "it holds {} bytes, more than {MAX_RECORD_BYTES}",
            data.len()
        ));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("not base64: {e}"))?;
    let json = if raw.starts_with(&[0x1f, 0x8b, 0x08]) {
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .take(MAX_RELEASE_BYTES + 1)
            .read_to_end(&mut json)
            .map_err(|e| format!("not gzip: {e}"))?;
        if json.len() as u64 > MAX_RELEASE_BYTES {
            return Err(format!(
                "it decompresses to more than {MAX_RELEASE_BYTES} bytes"
            ));
        }
        json
    } else {
        raw
    };
    serde_json::from_slice(&json).map_err(|e| format!("not a Helm release: {e}"))
}

/// Whether one record (a full Secret) is sealed by `key` at `cluster`, content included; Err says
/// why not.
pub(crate) fn check_record(
    key: &SealKey,
    cluster: &ClusterName,
    secret: &Secret,
) -> Result<(), String> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let namespace = secret.metadata.namespace.as_deref().unwrap_or_default();
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    if !key.verifies(cluster, namespace, &labels) {
        return Err(format!("{name}: not sealed by this operator"));
    }
    let data = secret.data.as_ref().and_then(|d| d.get("release"));
    let opened = open(data.map_or(&[][..], |d| &d.0)).map_err(|e| format!("{name}: {e}"))?;
    let hooks: Vec<Hook> = opened.hooks.into_iter().flatten().collect();
    let same = labels.get(CONTENT_LABEL) == Some(&content_digest(&opened.manifest, &hooks))
        && labels.get("name") == Some(&opened.name)
        && labels.get("version") == Some(&opened.version.to_string());
    if !same {
        return Err(format!("{name}: its content does not match its seal"));
    }
    Ok(())
}

/// The records of one release (Helm's Secrets `owner=helm,name=RELEASE` in its namespace), in full.
async fn records(
    client: kube::Client,
    namespace: &str,
    release: &str,
) -> kube::Result<Vec<Secret>> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let params = kube::api::ListParams::default().labels(&format!("owner=helm,name={release}"));
    Ok(api.list(&params).await?.items)
}

/// The revisions of `found` (release records) newer than `than`, at most the two newest: what one
/// helm process writes at most (a failed revision, and the rollback after it).
fn newest(found: &[Secret], than: i64) -> Vec<i64> {
    let mut newer: Vec<i64> = found
        .iter()
        .filter_map(|s| s.metadata.labels.as_ref()?.get("version")?.parse().ok())
        .filter(|r| *r > than)
        .collect();
    newer.sort_unstable_by(|a, b| b.cmp(a));
    newer.truncate(2);
    newer
}

/// The revisions of `release` written after revision `than`, newest first, at most two: those a
/// helm process that failed may have written.
pub(crate) async fn written_after(
    client: kube::Client,
    release: &crate::api::key::ReleaseKey,
    than: i64,
) -> kube::Result<Vec<i64>> {
    let found = records(client, &release.scope.namespace, &release.release).await?;
    Ok(newest(&found, than))
}

/// Before a helm process acts on a release: every record of it must be sealed by `key`, or
/// nothing runs (Err, naming the records and what to do). The helm binary reads records itself,
/// so a record forged after this check and before helm reads it is not caught: the executor
/// (`tenancy-hub-helm`) checks inside the read and leaves no such window.
/// Ok: the newest revision among them (0 when there is none).
pub(crate) async fn check_release(
    key: &SealKey,
    client: kube::Client,
    release: &crate::api::key::ReleaseKey,
) -> Result<i64, String> {
    let found = records(client, &release.scope.namespace, &release.release)
        .await
        .map_err(|e| format!("reading the release records of {release}: {e}"))?;
    let bad: Vec<String> = found
        .iter()
        .filter_map(|s| check_record(key, &release.scope.cluster, s).err())
        .collect();
    if bad.is_empty() {
        return Ok(newest(&found, 0).into_iter().max().unwrap_or(0));
    }
    Err(format!(
        "release {release} has records this operator did not seal ({}): nothing runs on content it did not write; a cluster admin should inspect and delete them",
        bad.join("; ")
    ))
}

/// After a helm process wrote `revision` of a release for `owner`: seals that record (content
/// digest and seal labels). A record whose owner labels name another owner is left unsealed.
pub async fn seal_revision(
    key: &SealKey,
    client: kube::Client,
    release: &crate::api::key::ReleaseKey,
    owner: &crate::plan::OwnerId,
    revision: i64,
) -> Result<(), String> {
    use kube::api::{Patch, PatchParams};
    let api: Api<Secret> = Api::namespaced(client, &release.scope.namespace);
    let name = format!("sh.helm.release.v1.{}.v{revision}", release.release);
    let fail = |e: String| format!("sealing release record {name} of {release}: {e}");
    let secret = api.get(&name).await.map_err(|e| fail(e.to_string()))?;
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or_default();
    if get(OWNER_NAMESPACE_LABEL) != owner.namespace || get(OWNER_NAME_LABEL) != owner.name {
        return Err(fail(format!("its labels name another owner than {owner}")));
    }
    let data = secret.data.as_ref().and_then(|d| d.get("release"));
    let opened = open(data.map_or(&[][..], |d| &d.0)).map_err(fail)?;
    if opened.version != revision || opened.name != release.release {
        return Err(fail("its content names another release or revision".into()));
    }
    let hooks: Vec<Hook> = opened.hooks.into_iter().flatten().collect();
    let content = content_digest(&opened.manifest, &hooks);
    let seal = key.seal(&Sealed {
        cluster: release.scope.cluster.as_str(),
        namespace: &release.scope.namespace,
        release: &release.release,
        revision,
        owner_namespace: &owner.namespace,
        owner_name: &owner.name,
        spec_hash: get(SPEC_HASH_LABEL),
        content: &content,
    });
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": secret.metadata.resource_version,
        "labels": {CONTENT_LABEL: content, SEAL_LABEL: seal},
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| fail(e.to_string()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
