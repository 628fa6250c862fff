//! What the agent sees in its own cluster, put into reports: the pods and workloads of the namespaces the hub asked for, and the release records, each coalesced to at most one write a second.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, RwLock},
    time::Duration,
};

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    api::key::ClusterName,
    helm::seal::SealKey,
    member::link::MemberLink,
    member::pull::messages::{Observed, observed_name},
    member::pull::outbox::Outbox,
    observe::model::ScopeState,
    observe::records::{FOREIGN_SELECTOR, MANAGED_SELECTOR},
    observe::watch::{ClusterWatch, Namespaces},
};

/// How long changes gather before they are reported.
const COALESCE: Duration = Duration::from_millis(300);

/// The namespaces the hub asked the agent to watch, and a tick when it asks for more.
pub(crate) struct Wanted {
    /// The namespaces.
    pub(crate) namespaces: Namespaces,
    /// Ticks when namespaces are added.
    pub(crate) grown: watch::Sender<u64>,
    /// Ticks on every change, for the reporter.
    pub(crate) changed: watch::Sender<u64>,
}

impl Wanted {
    /// None wanted yet.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            namespaces: Arc::new(RwLock::new(BTreeSet::new())),
            grown: watch::channel(0).0,
            changed: watch::channel(0).0,
        })
    }

    /// Takes the hub's newest list.
    pub(crate) fn set(&self, namespaces: BTreeSet<String>) {
        let grew = {
            let mut held = self.namespaces.write().expect("namespaces lock");
            if *held == namespaces {
                return;
            }
            let grew = namespaces.difference(&held).next().is_some();
            *held = namespaces;
            grew
        };
        if grew {
            self.grown.send_modify(|n| *n += 1);
        }
        self.changed.send_modify(|n| *n += 1);
    }
}

/// Watches the wanted namespaces of the agent's cluster through `local` and reports what runs
/// there, until `stop`.
pub(crate) async fn observe(
    cluster: ClusterName,
    local: Arc<dyn MemberLink>,
    wanted: Arc<Wanted>,
    outbox: Arc<Outbox>,
    stop: CancellationToken,
) {
    let (events, mut changes) = mpsc::channel(1024);
    let watch = ClusterWatch {
        cluster: cluster.clone(),
        namespaces: wanted.namespaces.clone(),
        grown: wanted.grown.subscribe(),
        shares: Default::default(),
        events,
        stop: stop.clone(),
    };
    tokio::spawn(local.watch_workloads(watch));
    let mut scopes: HashMap<String, ScopeState> = HashMap::new();
    let mut dirty: BTreeSet<String> = BTreeSet::new();
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let mut asked = wanted.changed.subscribe();
    let mut tick = tokio::time::interval(COALESCE);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            change = changes.recv() => {
                let Some((scope, change)) = change else { return };
                scopes
                    .entry(scope.namespace.clone())
                    .or_default()
                    .apply(change, k8s_openapi::jiff::Timestamp::now());
                dirty.insert(scope.namespace);
            }
            _ = asked.changed() => {}
            _ = tick.tick() => {
                let now = wanted.namespaces.read().expect("namespaces lock").clone();
                for gone in reported.difference(&now).cloned().collect::<Vec<_>>() {
                    outbox.delete(observed_name(&gone));
                    scopes.remove(&gone);
                    reported.remove(&gone);
                }
                for namespace in std::mem::take(&mut dirty) {
                    let (Some(scope), true) = (scopes.get(&namespace), now.contains(&namespace)) else {
                        continue;
                    };
                    let report = Observed {
                        cluster: cluster.clone(),
                        namespace: namespace.clone(),
                        pods: scope.pods.values().cloned().collect(),
                        workloads: scope.workloads.values().cloned().collect(),
                        problem: scope.problem.clone(),
                    };
                    outbox.put(observed_name(&namespace), "observed", &report);
                    reported.insert(namespace);
                }
            }
        }
    }
}

/// Follows the release records of `local`, managed or foreign, and reports them in pieces (each
/// cut to what the hub reads), at most once a second, until `stop`.
pub(crate) async fn records(
    cluster: ClusterName,
    local: Arc<dyn MemberLink>,
    managed: bool,
    seal: SealKey,
    outbox: Arc<Outbox>,
    stop: CancellationToken,
) {
    let selector = if managed {
        MANAGED_SELECTOR
    } else {
        FOREIGN_SELECTOR
    };
    let mut events = local.release_records(selector);
    let mut held: BTreeMap<(String, String), ObjectMeta> = BTreeMap::new();
    let mut listing: Option<BTreeMap<(String, String), ObjectMeta>> = None;
    let mut dirty = false;
    let mut written = BTreeSet::new();
    let mut tick = tokio::time::interval(COALESCE);
    let id = |m: &ObjectMeta| {
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    };
    let strip = crate::member::pull::pieces::slim;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
                    Ok(watcher::Event::InitApply(r)) => {
                        let m = strip(r.metadata);
                        listing.get_or_insert_with(BTreeMap::new).insert(id(&m), m);
                    }
                    Ok(watcher::Event::InitDone) => {
                        held = listing.take().unwrap_or_default();
                        dirty = true;
                    }
                    Ok(watcher::Event::Apply(r)) => {
                        let m = strip(r.metadata);
                        held.insert(id(&m), m);
                        dirty = true;
                    }
                    Ok(watcher::Event::Delete(r)) => {
                        held.remove(&id(&r.metadata));
                        dirty = true;
                    }
                    Err(e) => tracing::debug!(error = %e, "the release records watch broke; it lists again"),
                }
            }
            _ = tick.tick(), if dirty => {
                dirty = false;
                let sealed = |r: &ObjectMeta| {
                    let (Some(namespace), Some(labels)) = (&r.namespace, &r.labels) else {
                        return false;
                    };
                    seal.verifies(&cluster, namespace, labels)
                };
                outbox.put_records(&cluster, managed, held.values().cloned(), sealed, &mut written);
            }
        }
    }
}
