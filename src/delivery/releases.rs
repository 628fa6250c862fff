//! Helm's release records in every cluster, watched as Secret metadata, as the applied side of planning.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use dashmap::DashMap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::{
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    delivery::plan::{
        Applied, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, OwnerId,
        SPEC_HASH_LABEL,
    },
};

type Record = PartialObjectMeta<Secret>;

/// News from the release-record watches.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordChange {
    /// A record of this release changed, appeared or went away; with its owner, if managed.
    Release(ReleaseKey, Option<OwnerId>),
    /// A cluster's records were listed in full (at start, or after the watch failed).
    Listed(ClusterName),
}

struct Watched {
    store: Store<Record>,
    synced: Arc<AtomicBool>,
    stop: CancellationToken,
}

/// The release records of every watched cluster.
#[derive(Default)]
pub struct ReleaseIndex {
    clusters: DashMap<ClusterName, Watched>,
    tasks: TaskTracker,
}

impl ReleaseIndex {
    /// An empty index whose watch tasks are tracked by `tasks`.
    pub fn new(tasks: TaskTracker) -> Self {
        Self {
            clusters: DashMap::new(),
            tasks,
        }
    }

    /// Starts watching one cluster's release records; each change is sent on `changes`. The
    /// cluster counts as synced from its first complete listing until its watch fails, and again
    /// after the watch has relisted. Replaces any earlier watch of that cluster.
    pub fn watch(
        &self,
        cluster: ClusterName,
        client: kube::Client,
        changes: Sender<RecordChange>,
        parent: &CancellationToken,
    ) {
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let stop = parent.child_token();
        let api: Api<Record> = Api::all(client);
        let config = watcher::Config::default().labels("owner=helm");
        let stream = crate::observe::watch::relisting_watcher(api, config).reflect(writer);
        let span = tracing::info_span!("release_records", cluster = %cluster);
        let name = cluster.clone();
        let (flag, token) = (synced.clone(), stop.clone());
        self.tasks.spawn(
            async move {
                let forward = stream.for_each(|event| {
                    let news = match event {
                        Ok(watcher::Event::Apply(r) | watcher::Event::Delete(r) | watcher::Event::InitApply(r)) => {
                            applied_from(&name, &r).map(|a| RecordChange::Release(a.key, a.owner))
                        }
                        Ok(watcher::Event::Init) => None,
                        Ok(watcher::Event::InitDone) => {
                            flag.store(true, Ordering::Release);
                            Some(RecordChange::Listed(name.clone()))
                        }
                        Err(e) => {
                            // Until the watch has relisted, what the store holds may be out of date.
                            flag.store(false, Ordering::Release);
                            tracing::warn!(error = %e, "watching release records failed; retrying with backoff");
                            None
                        }
                    };
                    let changes = changes.clone();
                    async move {
                        // A full channel makes the watch wait: news is never dropped.
                        if let Some(news) = news {
                            let _ = changes.send(news).await;
                        }
                    }
                });
                tokio::select! {
                    () = forward => {}
                    () = token.cancelled() => {}
                }
            }
            .instrument(span),
        );
        if let Some(old) = self.clusters.insert(
            cluster,
            Watched {
                store,
                synced,
                stop,
            },
        ) {
            old.stop.cancel();
        }
    }

    /// Holds `records` as a cluster's fully listed release records, replacing what was held: for
    /// tests, in place of a watch.
    #[cfg(test)]
    pub(crate) fn seed(&self, cluster: ClusterName, records: Vec<Record>) {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for record in records {
            writer.apply_watcher_event(&watcher::Event::InitApply(record));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let watched = Watched {
            store,
            synced: Arc::new(AtomicBool::new(true)),
            stop: CancellationToken::new(),
        };
        self.clusters.insert(cluster, watched);
    }

    /// Watch streams open now: one per watched cluster.
    pub fn streams(&self) -> usize {
        self.clusters.len()
    }

    /// Stops watching a cluster and forgets its records.
    pub fn forget(&self, cluster: &ClusterName) {
        if let Some((_, old)) = self.clusters.remove(cluster) {
            old.stop.cancel();
        }
    }

    /// The newest record of one release, when its cluster's records hold it.
    pub fn get(&self, key: &ReleaseKey) -> Option<Applied> {
        let entry = self.clusters.get(&key.scope.cluster)?;
        entry
            .store
            .state()
            .iter()
            .filter_map(|record| applied_from(entry.key(), record))
            .filter(|a| a.key == *key)
            .reduce(|held, a| if held.revision >= a.revision { held } else { a })
    }

    /// Every release known, newest record per release, and the clusters whose records are fully listed.
    pub fn snapshot(&self) -> (HashMap<ReleaseKey, Applied>, BTreeSet<ClusterName>) {
        let mut applied = HashMap::new();
        let mut synced = BTreeSet::new();
        for entry in &self.clusters {
            if entry.synced.load(Ordering::Acquire) {
                synced.insert(entry.key().clone());
            }
            for record in entry.store.state() {
                keep_newest(&mut applied, applied_from(entry.key(), &record));
            }
        }
        (applied, synced)
    }
}

/// Keeps the newest record per release.
fn keep_newest(applied: &mut HashMap<ReleaseKey, Applied>, record: Option<Applied>) {
    if let Some(a) = record {
        match applied.get(&a.key) {
            Some(held) if held.revision >= a.revision => {}
            _ => {
                applied.insert(a.key.clone(), a);
            }
        }
    }
}

/// One cluster's releases, newest record per release, listed once (metadata only), as the
/// watches of `ReleaseIndex` hold them: for a one-off look such as `tenancy-hub diff`.
pub async fn list(
    cluster: &ClusterName,
    client: kube::Client,
) -> kube::Result<HashMap<ReleaseKey, Applied>> {
    let api: Api<Secret> = Api::all(client);
    let records = api
        .list_metadata(&kube::api::ListParams::default().labels("owner=helm"))
        .await?;
    let mut applied = HashMap::new();
    for record in &records.items {
        keep_newest(&mut applied, applied_from(cluster, record));
    }
    Ok(applied)
}

/// The manifest Helm deployed for one revision of a release, read from its release record;
/// None when the record is gone.
pub async fn manifest(
    client: kube::Client,
    key: &ReleaseKey,
    revision: i64,
) -> Result<Option<String>, String> {
    let api: Api<Secret> = Api::namespaced(client, &key.scope.namespace);
    let name = format!("sh.helm.release.v1.{}.v{revision}", key.release);
    let secret = api
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading release record {name} of {key}: {e}"))?;
    let Some(secret) = secret else {
        return Ok(None);
    };
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("release"))
        .ok_or_else(|| format!("release record {name} of {key} holds no release"))?;
    decode_manifest(&data.0)
        .map(Some)
        .map_err(|e| format!("release record {name} of {key}: {e}"))
}

/// The `manifest` of a Helm release record's `release` field: base64 of gzipped JSON.
pub fn decode_manifest(release: &[u8]) -> Result<String, String> {
    use base64::Engine as _;
    use std::io::Read as _;
    let zipped = base64::engine::general_purpose::STANDARD
        .decode(release)
        .map_err(|e| format!("not base64: {e}"))?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&zipped[..])
        .read_to_end(&mut json)
        .map_err(|e| format!("not gzip: {e}"))?;
    #[derive(serde::Deserialize)]
    struct HelmRelease {
        #[serde(default)]
        manifest: String,
    }
    serde_json::from_slice::<HelmRelease>(&json)
        .map(|r| r.manifest)
        .map_err(|e| format!("not a Helm release: {e}"))
}

fn owner_of(record: &Record) -> Option<OwnerId> {
    let labels = record.metadata.labels.as_ref()?;
    (labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)).then(|| OwnerId {
        namespace: labels
            .get(OWNER_NAMESPACE_LABEL)
            .cloned()
            .unwrap_or_default(),
        name: labels.get(OWNER_NAME_LABEL).cloned().unwrap_or_default(),
    })
}

/// Reads one Helm release record's labels; None for Secrets that are not release records.
pub fn applied_from(cluster: &ClusterName, record: &Record) -> Option<Applied> {
    let labels = record.metadata.labels.as_ref()?;
    let namespace = record.metadata.namespace.as_deref()?;
    let scope = ClusterNamespace::new(cluster.clone(), namespace).ok()?;
    Some(Applied {
        key: ReleaseKey {
            scope,
            release: labels.get("name")?.clone(),
        },
        owner: owner_of(record),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn record(ns: &str, labels: &[(&str, &str)]) -> Record {
        let mut r = Record::default();
        r.metadata.namespace = Some(ns.into());
        r.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        r
    }

    #[test]
    fn a_managed_release_record_reads_as_applied_with_its_owner_and_hash() {
        let r = record(
            "team",
            &[
                ("owner", "helm"),
                ("name", "web"),
                ("version", "3"),
                ("status", "deployed"),
                (MANAGED_BY_LABEL, MANAGED_BY),
                (OWNER_NAMESPACE_LABEL, "default"),
                (OWNER_NAME_LABEL, "example"),
                (SPEC_HASH_LABEL, "abc"),
            ],
        );
        let a = applied_from(&"member-1".parse().unwrap(), &r).unwrap();
        assert_eq!(a.key.to_string(), "member-1/team/web");
        assert_eq!(a.revision, 3);
        assert_eq!(a.status, "deployed");
        assert_eq!(a.owner.unwrap().to_string(), "default/example");
        assert_eq!(a.spec_hash.as_deref(), Some("abc"));
    }

    #[test]
    fn a_release_records_manifest_is_read_from_base64_gzipped_json() {
        use base64::Engine as _;
        use std::io::Write as _;
        let json = br#"{"name":"web","version":2,"manifest":"---\nkind: ConfigMap\n"}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(json).unwrap();
        let field = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        assert_eq!(
            decode_manifest(field.as_bytes()).unwrap(),
            "---\nkind: ConfigMap\n"
        );
        assert!(decode_manifest(b"%%").unwrap_err().contains("not base64"));
    }

    #[test]
    fn the_newest_record_of_a_release_is_kept() {
        let record = |v: &str| {
            applied_from(
                &"hub".parse().unwrap(),
                &record(
                    "team",
                    &[("owner", "helm"), ("name", "web"), ("version", v)],
                ),
            )
        };
        let mut applied = HashMap::new();
        for v in ["2", "3", "1"] {
            keep_newest(&mut applied, record(v));
        }
        assert_eq!(applied.len(), 1);
        assert_eq!(applied.values().next().unwrap().revision, 3);
    }

    #[test]
    fn a_release_installed_by_hand_has_no_owner() {
        let r = record(
            "team",
            &[
                ("owner", "helm"),
                ("name", "web"),
                ("version", "1"),
                ("status", "deployed"),
            ],
        );
        let a = applied_from(&"hub".parse().unwrap(), &r).unwrap();
        assert_eq!(a.owner, None);
    }

    #[test]
    fn a_secret_without_release_labels_is_ignored() {
        assert!(
            applied_from(
                &"hub".parse().unwrap(),
                &record("team", &[("owner", "helm")])
            )
            .is_none()
        );
    }
}
