//! The watch supervisor: one set of cluster-wide watches for every cluster some resource
//! targets, started, widened, narrowed and stopped to follow the targets.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, RwLock},
};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::{mpsc::Sender, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::{
    api::crd::Controller,
    api::key::{ClusterName, ClusterNamespace},
    observe::model::Tagged,
    observe::watch::{ClusterWatch, Namespaces, Observers},
};

/// Watch streams one watched cluster holds open (Pods, Deployments, StatefulSets, DaemonSets).
pub(crate) const STREAMS_PER_CLUSTER: usize = 4;

/// What changes in one cluster's watches to follow new targets.
#[derive(Debug, Default, PartialEq)]
struct Step {
    /// Clusters to start watching, with their namespaces.
    start: BTreeMap<ClusterName, BTreeSet<String>>,
    /// Clusters whose namespaces change, with the new set, and whether any was added (a relist).
    update: BTreeMap<ClusterName, (BTreeSet<String>, bool)>,
    /// Clusters to stop watching.
    stop: BTreeSet<ClusterName>,
    /// Namespaces no longer watched.
    gone: Vec<ClusterNamespace>,
}

/// Compares the namespaces watched per cluster with the targets.
fn step(
    running: &BTreeMap<ClusterName, BTreeSet<String>>,
    target: &BTreeMap<ClusterName, BTreeSet<String>>,
) -> Step {
    let mut step = Step::default();
    let scope = |c: &ClusterName, ns: &String| ClusterNamespace::new(c.clone(), ns).ok();
    for (cluster, now) in running {
        match target.get(cluster) {
            None => {
                step.stop.insert(cluster.clone());
                step.gone
                    .extend(now.iter().filter_map(|ns| scope(cluster, ns)));
            }
            Some(next) if next != now => {
                step.gone
                    .extend(now.difference(next).filter_map(|ns| scope(cluster, ns)));
                let grew = next.difference(now).next().is_some();
                step.update.insert(cluster.clone(), (next.clone(), grew));
            }
            Some(_) => {}
        }
    }
    for (cluster, next) in target {
        if !running.contains_key(cluster) {
            step.start.insert(cluster.clone(), next.clone());
        }
    }
    step
}

/// Keeps one set of cluster-wide watches running for every cluster some resource targets, each
/// passing on the changes of the namespaces targeted there. The number of streams per cluster is
/// `STREAMS_PER_CLUSTER` however many namespaces are targeted.
pub(crate) struct WatchSupervisor {
    events: Sender<Tagged>,
    parent: CancellationToken,
    tasks: TaskTracker,
    state: Mutex<State>,
}

struct Running {
    namespaces: Namespaces,
    grown: watch::Sender<u64>,
    stop: CancellationToken,
}

#[derive(Default)]
struct State {
    wanted: HashMap<ObjectRef<Controller>, BTreeSet<ClusterNamespace>>,
    /// The resources targeting each namespace.
    owners: HashMap<ClusterNamespace, std::collections::HashSet<ObjectRef<Controller>>>,
    running: HashMap<ClusterName, Running>,
}

impl WatchSupervisor {
    /// A supervisor sending tagged changes on `events`; its watchers stop with `parent`.
    pub(crate) fn new(
        events: Sender<Tagged>,
        parent: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            events,
            parent,
            tasks,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("watch supervisor lock")
    }

    /// Sets the namespaces one resource targets, then starts, narrows, widens and stops watches
    /// to match every resource's targets, for the clusters `observers` knows. Returns the namespaces no
    /// longer watched.
    pub(crate) fn set(
        &self,
        owner: &ObjectRef<Controller>,
        scopes: BTreeSet<ClusterNamespace>,
        observers: &dyn Observers,
    ) -> Vec<ClusterNamespace> {
        let mut state = self.lock();
        let old = if scopes.is_empty() {
            state.wanted.remove(owner)
        } else {
            state.wanted.insert(owner.clone(), scopes.clone())
        };
        if old.as_ref() == Some(&scopes) {
            return Vec::new();
        }
        for scope in old.unwrap_or_default() {
            if let Some(owners) = state.owners.get_mut(&scope) {
                owners.remove(owner);
                if owners.is_empty() {
                    state.owners.remove(&scope);
                }
            }
        }
        for scope in scopes {
            state.owners.entry(scope).or_default().insert(owner.clone());
        }
        self.converge(&mut state, observers)
    }

    fn converge(&self, state: &mut State, observers: &dyn Observers) -> Vec<ClusterNamespace> {
        let mut target: BTreeMap<ClusterName, BTreeSet<String>> = BTreeMap::new();
        for scope in state.owners.keys() {
            if observers.knows(&scope.cluster) {
                target
                    .entry(scope.cluster.clone())
                    .or_default()
                    .insert(scope.namespace.clone());
            }
        }
        let running: BTreeMap<ClusterName, BTreeSet<String>> = state
            .running
            .iter()
            .map(|(c, r)| {
                (
                    c.clone(),
                    r.namespaces.read().expect("namespaces lock").clone(),
                )
            })
            .collect();
        let step = step(&running, &target);
        for cluster in &step.stop {
            if let Some(r) = state.running.remove(cluster) {
                r.stop.cancel();
                tracing::info!(%cluster, "closed the cluster's pod and workload watches");
            }
        }
        for (cluster, (namespaces, grew)) in step.update {
            let Some(r) = state.running.get(&cluster) else {
                continue;
            };
            let count = namespaces.len();
            *r.namespaces.write().expect("namespaces lock") = namespaces;
            if grew {
                r.grown.send_modify(|n| *n += 1);
            }
            tracing::debug!(%cluster, namespaces = count, "watched namespaces changed");
        }
        for (cluster, namespaces) in step.start {
            let count = namespaces.len();
            let running = Running {
                namespaces: Arc::new(RwLock::new(namespaces)),
                grown: watch::Sender::new(0),
                stop: self.parent.child_token(),
            };
            let span = tracing::info_span!("watch", %cluster);
            let Some(task) = observers.watch(ClusterWatch {
                cluster: cluster.clone(),
                namespaces: running.namespaces.clone(),
                grown: running.grown.subscribe(),
                events: self.events.clone(),
                stop: running.stop.clone(),
            }) else {
                continue;
            };
            self.tasks.spawn(task.instrument(span));
            tracing::info!(%cluster, namespaces = count, "watching pods and workloads cluster-wide");
            state.running.insert(cluster, running);
        }
        for scope in &step.gone {
            tracing::info!(cluster = %scope.cluster, namespace = %scope.namespace, "stopped watching");
        }
        step.gone
    }

    /// Follows a new registry: watches of unregistered clusters stop, those of `changed` clusters
    /// restart with their new clients. Returns the namespaces no longer watched.
    pub(crate) fn refresh(
        &self,
        observers: &dyn Observers,
        changed: &BTreeSet<ClusterName>,
    ) -> Vec<ClusterNamespace> {
        let mut state = self.lock();
        for cluster in changed {
            if let Some(r) = state.running.remove(cluster) {
                r.stop.cancel();
            }
        }
        self.converge(&mut state, observers)
    }

    /// True while this namespace is watched.
    pub(crate) fn is_watched(&self, scope: &ClusterNamespace) -> bool {
        let state = self.lock();
        state.running.contains_key(&scope.cluster) && state.owners.contains_key(scope)
    }

    /// Watch streams open now.
    pub(crate) fn streams(&self) -> usize {
        self.lock().running.len() * STREAMS_PER_CLUSTER
    }

    /// The resources targeting a namespace.
    pub(crate) fn owners_of(&self, scope: &ClusterNamespace) -> Vec<ObjectRef<Controller>> {
        self.lock()
            .owners
            .get(scope)
            .map(|o| o.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
