//! The hub's Secrets and ConfigMaps that `valuesFrom` reads: each read once when a Controller
//! first names it, kept while some Controller reads it, and read again (waking its readers) when
//! the metadata watches of the hub see it change.
//!
//! Two metadata watches (Secrets, ConfigMaps) serve every Controller, however many read one
//! object. Content is held only for objects some Controller reads, within a byte bound per hub
//! namespace, so one tenant's objects cannot crowd out another's. An object is read by listing
//! its namespace with a field selector on its name: the operator already lists Secrets to watch
//! release records, and is granted no `get` on them.
//!
//! Nothing is read of an object no policy rule could allow (planning refuses it first); of one
//! only a rule on labels could allow, its labels are read first and its content only when they
//! match. Objects are read concurrently, each once for every Controller wanting it at the moment.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex},
};

use dashmap::DashMap;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, ResourceExt,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{reflector::ObjectRef, watcher},
};
use tokio::sync::mpsc::Sender;

use crate::{
    api::crd::{TenancyController, ValuesKind},
    metrics::Metrics,
    plan::{ValuesLookup, ValuesSource},
    policy::{Admission, ValuesAccess},
};

/// Bytes of values content held for the Controllers of one hub namespace at most.
pub(crate) const MAX_BYTES_PER_NAMESPACE: usize = 16 << 20;
/// Objects one load reads at once.
const PARALLEL_READS: usize = 8;

/// One object as read: what planning is told, and its resource version (None when missing).
#[derive(Clone, Debug)]
struct Read {
    lookup: ValuesLookup,
    version: Option<String>,
    bytes: usize,
    /// The labels, when only they were read: no rule allowed the object with them, and
    /// planning is told it is missing, as it would be of an absent one.
    withheld: Option<BTreeMap<String, String>>,
}

impl Read {
    fn missing(version: Option<String>, withheld: Option<BTreeMap<String, String>>) -> Self {
        Self {
            lookup: ValuesLookup::Missing,
            version,
            bytes: 0,
            withheld,
        }
    }

    fn unreadable(why: String, version: Option<String>) -> Self {
        Self {
            lookup: ValuesLookup::Unreadable(why),
            version,
            bytes: 0,
            withheld: None,
        }
    }
}

#[derive(Default)]
struct State {
    read: HashMap<ValuesSource, Read>,
    /// Who reads each object.
    readers: HashMap<ValuesSource, HashSet<ObjectRef<TenancyController>>>,
    /// What each Controller reads.
    reads: HashMap<ObjectRef<TenancyController>, BTreeSet<ValuesSource>>,
    /// Bytes held per hub namespace.
    bytes: HashMap<String, usize>,
}

/// The values objects read from the hub, and who reads them.
pub(crate) struct HubValues {
    hub: kube::Client,
    state: Mutex<State>,
    /// Held while one object is read: Controllers planned at the same moment wait for that read
    /// instead of each reading it; reads of other objects go on meanwhile.
    reading: DashMap<ValuesSource, Arc<tokio::sync::Mutex<()>>>,
    /// Counts the objects whose content is read.
    metrics: Arc<Metrics>,
}

impl HubValues {
    /// Reads through `hub`, counting its reads in `metrics`.
    pub(crate) fn new(hub: kube::Client, metrics: Arc<Metrics>) -> Self {
        Self {
            hub,
            state: Mutex::default(),
            reading: DashMap::new(),
            metrics,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What planning is told of `source`: None when it has not been read yet.
    pub(crate) fn lookup(&self, source: &ValuesSource) -> Option<ValuesLookup> {
        self.state().read.get(source).map(|r| r.lookup.clone())
    }

    /// Whether `source` is to be read: not read yet, or only its labels were and `admission`
    /// now allows it with them.
    fn pending(&self, source: &ValuesSource, admission: &Admission) -> bool {
        match self.state().read.get(source) {
            None => true,
            Some(Read {
                withheld: Some(labels),
                ..
            }) => admission
                .may_read_values(&source.namespace, source.kind, &source.name, labels)
                .is_ok(),
            Some(_) => false,
        }
    }

    /// Whether any of `sources` is to be read.
    pub(crate) fn any_pending<'a>(
        &self,
        sources: impl IntoIterator<Item = &'a ValuesSource>,
        admission: &Admission,
    ) -> bool {
        sources.into_iter().any(|s| self.pending(s, admission))
    }

    /// Reads every object of `sources` that is to be read, as far as `admission` allows, a few
    /// at once.
    pub(crate) async fn load(
        &self,
        sources: impl IntoIterator<Item = &ValuesSource>,
        admission: &Admission,
    ) {
        let pending: Vec<ValuesSource> = sources
            .into_iter()
            .filter(|s| self.pending(s, admission))
            .cloned()
            .collect();
        futures::stream::iter(pending)
            .for_each_concurrent(PARALLEL_READS, |source| async move {
                let gate = self.reading.entry(source.clone()).or_default().clone();
                {
                    let _reading = gate.lock().await;
                    if self.pending(&source, admission) {
                        let read = self.read(&source, admission).await;
                        self.keep(source.clone(), read);
                    }
                }
                // The last reader done with the object lets its gate go (the map holds one more).
                self.reading
                    .remove_if(&source, |_, held| Arc::strong_count(held) <= 2);
            })
            .await;
    }

    /// Holds `read` of `source`, within the byte bound of its namespace.
    fn keep(&self, source: ValuesSource, read: Read) {
        let mut state = self.state();
        let held = state.bytes.get(&source.namespace).copied().unwrap_or(0);
        let read = if held + read.bytes > MAX_BYTES_PER_NAMESPACE {
            Read::unreadable(
                format!(
                    "the values read for hub namespace {} would pass {} MiB; read fewer or smaller objects",
                    source.namespace,
                    MAX_BYTES_PER_NAMESPACE >> 20
                ),
                read.version,
            )
        } else {
            read
        };
        *state.bytes.entry(source.namespace.clone()).or_default() += read.bytes;
        if let Some(old) = state.read.insert(source.clone(), read) {
            release_bytes(&mut state.bytes, &source.namespace, old.bytes);
        }
    }

    /// Reads what `admission` allows of one object: its content, or its labels first when only
    /// a rule on labels could allow it (and its content when they do).
    async fn read(&self, source: &ValuesSource, admission: &Admission) -> Read {
        let (namespace, kind, name) = (&source.namespace, source.kind, &source.name);
        match admission.values_access(namespace, kind, name) {
            Ok(ValuesAccess::Content) => self.fetch(source).await,
            Ok(ValuesAccess::LabelsFirst) => match self.labels(source).await {
                Ok(Some((labels, version))) => {
                    if admission
                        .may_read_values(namespace, kind, name, &labels)
                        .is_ok()
                    {
                        self.fetch(source).await
                    } else {
                        Read::missing(version, Some(labels))
                    }
                }
                Ok(None) => Read::missing(None, None),
                Err(e) => Read::unreadable(format!("the hub answered: {}", short(&e)), None),
            },
            // Planning refuses it before asking; nothing is read.
            Err(_) => Read::missing(None, Some(BTreeMap::new())),
        }
    }

    /// The labels and resource version of one object (None when missing), its content unread.
    async fn labels(
        &self,
        source: &ValuesSource,
    ) -> kube::Result<Option<(BTreeMap<String, String>, Option<String>)>> {
        let params = ListParams::default().fields(&format!("metadata.name={}", source.name));
        let (namespace, hub) = (&source.namespace, self.hub.clone());
        let listed = match source.kind {
            ValuesKind::Secret => first_metadata::<Secret>(hub, namespace, &params).await?,
            ValuesKind::ConfigMap => first_metadata::<ConfigMap>(hub, namespace, &params).await?,
        };
        Ok(listed.map(|m| (m.labels.unwrap_or_default(), m.resource_version)))
    }

    /// Notes what `reader` reads now; objects no one reads any more are let go.
    pub(crate) fn read_by(
        &self,
        reader: &ObjectRef<TenancyController>,
        sources: BTreeSet<ValuesSource>,
    ) {
        let mut state = self.state();
        let before = state.reads.remove(reader).unwrap_or_default();
        for gone in before.difference(&sources) {
            let unread = state.readers.get_mut(gone).is_some_and(|r| {
                r.remove(reader);
                r.is_empty()
            });
            if unread {
                state.readers.remove(gone);
                if let Some(old) = state.read.remove(gone) {
                    release_bytes(&mut state.bytes, &gone.namespace, old.bytes);
                }
            }
        }
        for source in &sources {
            state
                .readers
                .entry(source.clone())
                .or_default()
                .insert(reader.clone());
        }
        if !sources.is_empty() {
            state.reads.insert(reader.clone(), sources);
        }
    }

    /// Forgets what `reader` reads (it is gone, or another replica works it).
    pub(crate) fn forget(&self, reader: &ObjectRef<TenancyController>) {
        self.read_by(reader, BTreeSet::new());
    }

    /// How many objects are held, and their bytes.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let state = self.state();
        (state.read.len(), state.bytes.values().sum())
    }

    /// Reads one object's content; what cannot be read says why, never what it holds.
    async fn fetch(&self, source: &ValuesSource) -> Read {
        let params = ListParams::default().fields(&format!("metadata.name={}", source.name));
        let found = match source.kind {
            ValuesKind::Secret => {
                let api: Api<Secret> = Api::namespaced(self.hub.clone(), &source.namespace);
                api.list(&params).await.map(|l| {
                    l.items.into_iter().next().map(|s| {
                        let data = s
                            .data
                            .clone()
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|v| (k, v)))
                            .collect();
                        (s.labels().clone(), s.resource_version(), data)
                    })
                })
            }
            ValuesKind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(self.hub.clone(), &source.namespace);
                api.list(&params).await.map(|l| {
                    l.items.into_iter().next().map(|c| {
                        let data = c.data.clone().unwrap_or_default();
                        (c.labels().clone(), c.resource_version(), data)
                    })
                })
            }
        };
        self.metrics.values_read(match source.kind {
            ValuesKind::Secret => "Secret",
            ValuesKind::ConfigMap => "ConfigMap",
        });
        match found {
            Ok(Some((labels, version, data))) => {
                let bytes = data
                    .iter()
                    .map(|(k, v): (&String, &String)| k.len() + v.len())
                    .sum();
                Read {
                    lookup: ValuesLookup::Found { data, labels },
                    version,
                    bytes,
                    withheld: None,
                }
            }
            Ok(None) => Read::missing(None, None),
            Err(e) => Read::unreadable(
                format!("the hub answered: {}", short(&e)),
                Some(String::new()),
            ),
        }
    }

    /// What an event of the object `source` at `version` (None: deleted) means: when the copy
    /// held is of another version, it is dropped and its readers returned, to plan again.
    fn changed(
        &self,
        source: &ValuesSource,
        version: Option<String>,
    ) -> Vec<ObjectRef<TenancyController>> {
        let mut state = self.state();
        let Some(held) = state.read.get(source) else {
            return Vec::new();
        };
        if held.version == version {
            return Vec::new();
        }
        if let Some(old) = state.read.remove(source) {
            release_bytes(&mut state.bytes, &source.namespace, old.bytes);
        }
        let mut readers: Vec<ObjectRef<TenancyController>> = state
            .readers
            .get(source)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default();
        readers.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        readers
    }

    /// Watches the metadata of the hub's Secrets and ConfigMaps (in `scope`, or every namespace)
    /// and wakes the readers of what changed. Runs until cancelled.
    pub(crate) async fn watch(
        self: std::sync::Arc<Self>,
        scope: Option<String>,
        trigger: Sender<ObjectRef<TenancyController>>,
    ) {
        let secrets = watch_kind::<Secret>(scoped(&self.hub, &scope), ValuesKind::Secret);
        let config_maps = watch_kind::<ConfigMap>(scoped(&self.hub, &scope), ValuesKind::ConfigMap);
        let mut events = futures::stream::select(secrets, config_maps);
        while let Some((source, version)) = events.next().await {
            for reader in self.changed(&source, version) {
                tracing::debug!(controller = %reader, object = %source, "values it reads changed; reconciling");
                let _ = trigger.send(reader).await;
            }
        }
    }
}

/// The metadata of the first `K` of `namespace` that `params` lists, its content unread.
async fn first_metadata<K>(
    hub: kube::Client,
    namespace: &str,
    params: &ListParams,
) -> kube::Result<Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let list = Api::<K>::namespaced(hub, namespace)
        .list_metadata(params)
        .await?;
    Ok(list.items.into_iter().next().map(|o| o.metadata))
}

/// An API of `K`'s metadata in `scope`, or in every namespace.
fn scoped<K>(hub: &kube::Client, scope: &Option<String>) -> Api<PartialObjectMeta<K>>
where
    PartialObjectMeta<K>:
        kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match scope {
        Some(ns) => Api::namespaced(hub.clone(), ns),
        None => Api::all(hub.clone()),
    }
}

/// The (object, version) of every change a metadata watch of `kind` sees; None for a deletion.
fn watch_kind<K>(
    api: Api<PartialObjectMeta<K>>,
    kind: ValuesKind,
) -> futures::stream::BoxStream<'static, (ValuesSource, Option<String>)>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    PartialObjectMeta<K>: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    crate::observe::relist::relisting_watcher(api, watcher::Config::default())
        .filter_map(move |event| async move {
            let (object, deleted) = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                Ok(_) => return None,
                Err(e) => {
                    tracing::debug!(%kind, "the watch of values objects broke: {}", short(&e));
                    return None;
                }
            };
            let source = ValuesSource {
                kind,
                namespace: object.namespace().unwrap_or_default(),
                name: object.name_any(),
            };
            let version = (!deleted).then(|| object.resource_version()).flatten();
            Some((source, version))
        })
        .boxed()
}

fn release_bytes(bytes: &mut HashMap<String, usize>, namespace: &str, freed: usize) {
    if let Some(held) = bytes.get_mut(namespace) {
        *held = held.saturating_sub(freed);
    }
}

/// An error's first line, bounded.
fn short(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests;
