//! The hub's Secrets and ConfigMaps that `valuesFrom` reads: each read once when a Controller
//! first names it, kept while some Controller reads it, and read again (waking its readers) when
//! the metadata watches of the hub see it change.
//!
//! Two metadata watches (Secrets, ConfigMaps) serve every Controller, however many read one
//! object. Content is held only for objects some Controller reads, within a byte bound per hub
//! namespace, so one tenant's objects cannot crowd out another's. An object is read by listing
//! its namespace with a field selector on its name: the operator already lists Secrets to watch
//! release records, and is granted no `get` on them.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Mutex,
};

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
    api::crd::{Controller, ValuesKind},
    plan::{ValuesLookup, ValuesSource},
};

/// Bytes of values content held for the Controllers of one hub namespace at most.
pub(crate) const MAX_BYTES_PER_NAMESPACE: usize = 16 << 20;

/// One object as read: what planning is told, and its resource version (None when missing).
#[derive(Clone, Debug)]
struct Read {
    lookup: ValuesLookup,
    version: Option<String>,
    bytes: usize,
}

#[derive(Default)]
struct State {
    read: HashMap<ValuesSource, Read>,
    /// Who reads each object.
    readers: HashMap<ValuesSource, HashSet<ObjectRef<Controller>>>,
    /// What each Controller reads.
    reads: HashMap<ObjectRef<Controller>, BTreeSet<ValuesSource>>,
    /// Bytes held per hub namespace.
    bytes: HashMap<String, usize>,
}

/// The values objects read from the hub, and who reads them.
pub(crate) struct HubValues {
    hub: kube::Client,
    state: Mutex<State>,
    /// Taken while reading: Controllers planned at the same moment wait for one read of an
    /// object instead of each reading it.
    reading: tokio::sync::Mutex<()>,
}

impl HubValues {
    /// Reads through `hub`.
    pub(crate) fn new(hub: kube::Client) -> Self {
        Self {
            hub,
            state: Mutex::default(),
            reading: tokio::sync::Mutex::new(()),
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

    /// Reads every object of `sources` not read yet.
    pub(crate) async fn load(&self, sources: impl IntoIterator<Item = &ValuesSource>) {
        let _reading = self.reading.lock().await;
        let missing: Vec<ValuesSource> = {
            let state = self.state();
            sources
                .into_iter()
                .filter(|s| !state.read.contains_key(*s))
                .cloned()
                .collect()
        };
        for source in missing {
            let read = self.fetch(&source).await;
            let mut state = self.state();
            let held = state.bytes.get(&source.namespace).copied().unwrap_or(0);
            let read = if held + read.bytes > MAX_BYTES_PER_NAMESPACE {
                Read {
                    lookup: ValuesLookup::Unreadable(format!(
                        "the values read for hub namespace {} would pass {} MiB; read fewer or smaller objects",
                        source.namespace,
                        MAX_BYTES_PER_NAMESPACE >> 20
                    )),
                    version: read.version,
                    bytes: 0,
                }
            } else {
                read
            };
            *state.bytes.entry(source.namespace.clone()).or_default() += read.bytes;
            if let Some(old) = state.read.insert(source.clone(), read) {
                release_bytes(&mut state.bytes, &source.namespace, old.bytes);
            }
        }
    }

    /// Notes what `reader` reads now; objects no one reads any more are let go.
    pub(crate) fn read_by(&self, reader: &ObjectRef<Controller>, sources: BTreeSet<ValuesSource>) {
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
    pub(crate) fn forget(&self, reader: &ObjectRef<Controller>) {
        self.read_by(reader, BTreeSet::new());
    }

    /// How many objects are held, and their bytes.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let state = self.state();
        (state.read.len(), state.bytes.values().sum())
    }

    /// Reads one object; what cannot be read says why, never what it holds.
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
                }
            }
            Ok(None) => Read {
                lookup: ValuesLookup::Missing,
                version: None,
                bytes: 0,
            },
            Err(e) => Read {
                lookup: ValuesLookup::Unreadable(format!("the hub answered: {}", short(&e))),
                version: Some(String::new()),
                bytes: 0,
            },
        }
    }

    /// What an event of the object `source` at `version` (None: deleted) means: when the copy
    /// held is of another version, it is dropped and its readers returned, to plan again.
    fn changed(
        &self,
        source: &ValuesSource,
        version: Option<String>,
    ) -> Vec<ObjectRef<Controller>> {
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
        let mut readers: Vec<ObjectRef<Controller>> = state
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
        trigger: Sender<ObjectRef<Controller>>,
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
