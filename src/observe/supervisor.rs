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
    api::crd::TenancyController,
    api::key::{ClusterName, ClusterNamespace},
    api::shard::{Shards, shard_of},
    observe::model::Tagged,
    observe::watch::{ClusterWatch, Namespaces, Observers, ShardShares},
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
    /// The shards of the Controllers, and those led here.
    shards: Arc<Shards>,
    state: Mutex<State>,
}

struct Running {
    namespaces: Namespaces,
    grown: watch::Sender<u64>,
    shares: ShardShares,
    stop: CancellationToken,
}

#[derive(Default)]
struct State {
    wanted: HashMap<ObjectRef<TenancyController>, BTreeSet<ClusterNamespace>>,
    /// The resources targeting each namespace.
    owners: HashMap<ClusterNamespace, std::collections::HashSet<ObjectRef<TenancyController>>>,
    running: HashMap<ClusterName, Running>,
}

impl WatchSupervisor {
    /// A supervisor sending tagged changes on `events`, telling each watch the namespaces of
    /// each of `shards`; its watchers stop with `parent`.
    pub(crate) fn new(
        events: Sender<Tagged>,
        parent: CancellationToken,
        tasks: TaskTracker,
        shards: Arc<Shards>,
    ) -> Self {
        Self {
            events,
            parent,
            tasks,
            shards,
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
        owner: &ObjectRef<TenancyController>,
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
        let mut by_shard = self.by_shard(state, observers);
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
                shares: ShardShares {
                    by_shard: Default::default(),
                    shards: self.shards.clone(),
                },
                stop: self.parent.child_token(),
            };
            let span = tracing::info_span!("watch", %cluster);
            let Some(task) = observers.watch(ClusterWatch {
                cluster: cluster.clone(),
                namespaces: running.namespaces.clone(),
                grown: running.grown.subscribe(),
                shares: running.shares.clone(),
                events: self.events.clone(),
                stop: running.stop.clone(),
            }) else {
                continue;
            };
            self.tasks.spawn(task.instrument(span));
            tracing::info!(%cluster, namespaces = count, "watching pods and workloads cluster-wide");
            state.running.insert(cluster, running);
        }
        for (cluster, r) in &state.running {
            let shares = by_shard.remove(cluster).unwrap_or_default();
            let mut now = r.shares.by_shard.write().expect("shares lock");
            if *now != shares {
                *now = shares;
            }
        }
        for scope in &step.gone {
            tracing::info!(cluster = %scope.cluster, namespace = %scope.namespace, "stopped watching");
        }
        step.gone
    }

    /// The namespaces targeted in each cluster `observers` knows, by the shard of the
    /// Controllers targeting them.
    fn by_shard(
        &self,
        state: &State,
        observers: &dyn Observers,
    ) -> BTreeMap<ClusterName, BTreeMap<u32, BTreeSet<String>>> {
        let total = self.shards.total();
        let mut shard_of_owner: HashMap<&ObjectRef<TenancyController>, u32> = HashMap::new();
        let mut by_shard: BTreeMap<ClusterName, BTreeMap<u32, BTreeSet<String>>> = BTreeMap::new();
        for (scope, owners) in &state.owners {
            if !observers.knows(&scope.cluster) {
                continue;
            }
            let shares = by_shard.entry(scope.cluster.clone()).or_default();
            for owner in owners {
                let shard = *shard_of_owner.entry(owner).or_insert_with(|| {
                    shard_of(
                        owner.namespace.as_deref().unwrap_or_default(),
                        &owner.name,
                        total,
                    )
                });
                shares
                    .entry(shard)
                    .or_default()
                    .insert(scope.namespace.clone());
            }
        }
        by_shard
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
    pub(crate) fn owners_of(&self, scope: &ClusterNamespace) -> Vec<ObjectRef<TenancyController>> {
        self.lock()
            .owners
            .get(scope)
            .map(|o| o.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
