//! Cluster-wide watches of Pods, Deployments, StatefulSets and DaemonSets, one set per cluster, passing on the targeted namespaces.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, RwLock},
};

use futures::{Stream, StreamExt, future::BoxFuture};
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{Api, Client, ResourceExt, runtime::watcher};
use tokio::sync::{mpsc::Sender, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    api::key::{ClusterName, ClusterNamespace},
    api::shard::Shards,
    observe::model::{Change, Tagged},
    observe::relist::relisting_watcher,
    observe::workloads::Watched,
};

pub use crate::observe::workloads::pod_info;

/// How long a cluster's watches wait for more namespaces before they list again, so a burst of
/// new tenancies (an operator start, a large apply) costs one relist rather than one per namespace.
const RELIST_COALESCE: std::time::Duration = std::time::Duration::from_millis(300);

/// The namespaces of one cluster whose changes are wanted, shared with that cluster's streams.
pub(crate) type Namespaces = Arc<RwLock<BTreeSet<String>>>;

/// The namespaces of one cluster by the shard of the Controllers that target them, with the
/// shards led here: what a pull member's watch calls say, one per shard led here (a watch in
/// the cluster itself needs only the union).
#[derive(Clone, Debug, Default)]
pub(crate) struct ShardShares {
    /// Shard → the namespaces its Controllers target in the cluster (shards targeting none left out).
    pub(crate) by_shard: Arc<RwLock<BTreeMap<u32, BTreeSet<String>>>>,
    /// The shards, and those led here.
    pub(crate) shards: Arc<Shards>,
}

/// What watching one cluster's pods and workloads is asked for: the namespaces wanted (they
/// change while it runs), a tick each time some are added (a relist), where the tagged changes go,
/// and when to stop. A member link carries it out, wherever the watches run.
pub(crate) struct ClusterWatch {
    /// The cluster watched.
    pub(crate) cluster: ClusterName,
    /// The namespaces whose changes are wanted.
    pub(crate) namespaces: Namespaces,
    /// Ticks when namespaces are added.
    pub(crate) grown: watch::Receiver<u64>,
    /// The same namespaces by shard.
    pub(crate) shares: ShardShares,
    /// Where the tagged changes go; a full channel makes the watches wait.
    pub(crate) events: Sender<Tagged>,
    /// Stops the watches.
    pub(crate) stop: CancellationToken,
}

/// The clusters whose pods and workloads can be watched, and how: the member links.
pub(crate) trait Observers {
    /// True when `cluster` is registered (its scopes are watched).
    fn knows(&self, cluster: &ClusterName) -> bool;
    /// The task that carries out `watch`, or None when its cluster is not registered.
    fn watch(&self, watch: ClusterWatch) -> Option<BoxFuture<'static, ()>>;
}

/// Turns the events of one cluster-wide watch of one kind into changes tagged with their
/// cluster/namespace, for the wanted namespaces only. A namespace counts from the list that
/// included it: one wanted only after a list began gets nothing from that list (not even an empty
/// relist, which would claim it holds nothing) and waits for the next, which adding it causes.
struct Fanout<I> {
    cluster: ClusterName,
    /// The wanted namespaces when the list in progress began.
    listing: BTreeSet<String>,
    /// What the list in progress found, per namespace.
    found: BTreeMap<String, Vec<I>>,
    /// The namespaces the last complete list covered.
    listed: BTreeSet<String>,
}

impl<I> Fanout<I> {
    fn new(cluster: ClusterName) -> Self {
        Self {
            cluster,
            listing: BTreeSet::new(),
            found: BTreeMap::new(),
            listed: BTreeSet::new(),
        }
    }

    fn tag(&self, namespace: &str, change: Change) -> Option<Tagged> {
        let scope = ClusterNamespace::new(self.cluster.clone(), namespace).ok()?;
        Some((scope, change))
    }

    /// The tagged changes one watch event makes, given the namespaces wanted now.
    fn on<K: Watched<Info = I>>(
        &mut self,
        event: Result<watcher::Event<K>, watcher::Error>,
        wanted: &BTreeSet<String>,
    ) -> Vec<Tagged> {
        match event {
            Ok(watcher::Event::Apply(obj)) => counted(&obj.namespace(), &self.listed, wanted)
                .and_then(|ns| self.tag(ns, K::upsert(obj.info())))
                .into_iter()
                .collect(),
            Ok(watcher::Event::Delete(obj)) => counted(&obj.namespace(), &self.listed, wanted)
                .and_then(|ns| self.tag(ns, obj.gone()))
                .into_iter()
                .collect(),
            Ok(watcher::Event::Init) => {
                self.listing = wanted.clone();
                self.found.clear();
                Vec::new()
            }
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some(ns) = counted(&obj.namespace(), &self.listing, wanted) {
                    self.found.entry(ns.clone()).or_default().push(obj.info());
                }
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let mut found = std::mem::take(&mut self.found);
                self.listed = self.listing.intersection(wanted).cloned().collect();
                self.listed
                    .iter()
                    .filter_map(|ns| self.tag(ns, K::listed(found.remove(ns).unwrap_or_default())))
                    .collect()
            }
            Err(e) => {
                let why = e.to_string();
                let lost: Vec<Tagged> = self
                    .listed
                    .iter()
                    .filter(|ns| wanted.contains(*ns))
                    .filter_map(|ns| self.tag(ns, Change::Lost(why.clone())))
                    .collect();
                // The watch lists afresh next; until then nothing counts.
                self.listed.clear();
                lost
            }
        }
    }
}

/// The namespace of an object, when it is among `these` and still wanted.
fn counted<'a>(
    namespace: &'a Option<String>,
    these: &BTreeSet<String>,
    wanted: &BTreeSet<String>,
) -> Option<&'a String> {
    namespace
        .as_ref()
        .filter(|ns| these.contains(*ns) && wanted.contains(*ns))
}

/// The changes of one kind in the wanted namespaces of a cluster, from one cluster-wide watch:
/// relists arrive whole per namespace, errors as `Lost` for every namespace.
fn changes<K: Watched>(
    client: Client,
    cluster: ClusterName,
    wanted: Namespaces,
) -> impl Stream<Item = Tagged> + Send {
    let api: Api<K> = Api::all(client);
    let mut fanout = Fanout::<K::Info>::new(cluster);
    relisting_watcher(api, watcher::Config::default())
        .map(move |event| {
            let tagged = fanout.on(event, &wanted.read().expect("namespaces lock"));
            futures::stream::iter(tagged)
        })
        .flatten()
}

/// Runs the four watches of one cluster until cancelled, listing again (after a short pause that
/// gathers a burst) whenever namespaces are added.
pub(crate) async fn watch_cluster(client: Client, watch: ClusterWatch) {
    let ClusterWatch {
        cluster,
        namespaces: wanted,
        mut grown,
        events,
        stop,
        ..
    } = watch;
    loop {
        tokio::select! {
            () = tokio::time::sleep(RELIST_COALESCE) => {}
            () = stop.cancelled() => return,
        }
        grown.borrow_and_update();
        let all = futures::stream::select_all([
            changes::<Pod>(client.clone(), cluster.clone(), wanted.clone()).boxed(),
            changes::<Deployment>(client.clone(), cluster.clone(), wanted.clone()).boxed(),
            changes::<StatefulSet>(client.clone(), cluster.clone(), wanted.clone()).boxed(),
            changes::<DaemonSet>(client.clone(), cluster.clone(), wanted.clone()).boxed(),
        ]);
        // A full channel makes the watchers wait: changes are never dropped.
        let forward = all.for_each(|tagged| {
            let events = events.clone();
            async move {
                let _ = events.send(tagged).await;
            }
        });
        tokio::select! {
            () = forward => return,
            () = stop.cancelled() => return,
            changed = grown.changed() => {
                if changed.is_err() {
                    return;
                }
                tracing::debug!("namespaces added; listing the cluster again");
            }
        }
    }
}

#[cfg(test)]
mod tests;
