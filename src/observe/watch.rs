//! Cluster-wide watches of Pods, Deployments, StatefulSets and DaemonSets, one set per cluster, passing on the targeted namespaces.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::Debug,
    sync::{Arc, Mutex, RwLock},
};

use futures::{Stream, StreamExt, future::BoxFuture};
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{reflector::ObjectRef, watcher},
};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc::Sender, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::{
    api::crd::Controller,
    api::key::{ClusterName, ClusterNamespace},
    observe::model::{Change, PodInfo, Tagged, WorkloadInfo, WorkloadKind, WorkloadRef},
};

/// Longest pause before a watch that failed lists again. Short, because a cluster has only a
/// handful of watches (not one set per namespace), so retrying an unreachable cluster costs
/// little, while a long pause delays seeing a cluster that came back (and a rollout waiting on it).
const RELIST_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A watcher that lists afresh after every error, after a capped exponential pause. kube's own
/// watcher resumes from its last resource version after an error and then says nothing until
/// something changes, so a consumer that stopped trusting its picture at the error would never
/// learn that it is in sync again; the `InitDone` of the new list tells it.
pub(crate) fn relisting_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    type Inner<K> = futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;
    futures::stream::unfold((None::<Inner<K>>, 0u32), move |(stream, failures)| {
        let (api, config) = (api.clone(), config.clone());
        async move {
            let mut stream = match stream {
                Some(s) => s,
                None => {
                    if failures > 0 {
                        let pause = std::time::Duration::from_millis(500)
                            .saturating_mul(2u32.saturating_pow(failures - 1))
                            .min(RELIST_BACKOFF_MAX);
                        tokio::time::sleep(pause).await;
                    }
                    watcher(api, config).boxed()
                }
            };
            match stream.next().await {
                Some(Ok(event)) => {
                    let failures = if matches!(event, watcher::Event::InitDone) {
                        0
                    } else {
                        failures
                    };
                    Some((Ok(event), (Some(stream), failures)))
                }
                Some(Err(e)) => Some((Err(e), (None, failures.saturating_add(1)))),
                None => Some((
                    Err(watcher::Error::NoResourceVersion),
                    (None, failures.saturating_add(1)),
                )),
            }
        }
    })
}

/// Annotation Helm puts on every object of a release.
pub(crate) const RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";

/// A kind of object watched per namespace, and how it becomes model changes.
trait Watched:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The compact form kept in the model.
    type Info: Send + 'static;
    /// The compact form of one object.
    fn info(&self) -> Self::Info;
    /// The change for an object that appeared or changed.
    fn upsert(info: Self::Info) -> Change;
    /// The change for an object that went away.
    fn gone(&self) -> Change;
    /// The change for a complete relist.
    fn listed(all: Vec<Self::Info>) -> Change;
}

fn owner_of(pod: &Pod) -> Option<WorkloadRef> {
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let (kind, name) = match owner.kind.as_str() {
        "ReplicaSet" => {
            let hash = pod.labels().get("pod-template-hash")?;
            let name = owner.name.strip_suffix(hash)?.strip_suffix('-')?;
            (WorkloadKind::Deployment, name.to_owned())
        }
        "StatefulSet" => (WorkloadKind::StatefulSet, owner.name.clone()),
        "DaemonSet" => (WorkloadKind::DaemonSet, owner.name.clone()),
        _ => return None,
    };
    Some(WorkloadRef { kind, name })
}

/// The compact form of a pod: phase, readiness, restarts, reason and owning workload.
pub fn pod_info(pod: &Pod) -> PodInfo {
    let status = pod.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let reason = containers
        .iter()
        .filter_map(|c| c.state.as_ref())
        .find_map(|s| {
            s.waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .or_else(|| s.terminated.as_ref().and_then(|t| t.reason.clone()))
        })
        .or_else(|| status.and_then(|s| s.reason.clone()))
        .or_else(|| {
            pod.metadata
                .deletion_timestamp
                .as_ref()
                .map(|_| "Terminating".to_owned())
        })
        .unwrap_or_default();
    PodInfo {
        name: pod.name_any(),
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into()),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        restarts: containers.iter().map(|c| c.restart_count).sum(),
        reason,
        owner: owner_of(pod),
    }
}

impl Watched for Pod {
    type Info = PodInfo;
    fn info(&self) -> PodInfo {
        pod_info(self)
    }
    fn upsert(info: PodInfo) -> Change {
        Change::Pod(info)
    }
    fn gone(&self) -> Change {
        Change::PodGone(self.name_any())
    }
    fn listed(all: Vec<PodInfo>) -> Change {
        Change::PodsListed(all)
    }
}

fn workload<K: Resource>(
    obj: &K,
    kind: WorkloadKind,
    (ready, desired, rolled_out): (Option<i32>, Option<i32>, bool),
) -> WorkloadInfo {
    WorkloadInfo {
        id: WorkloadRef {
            kind,
            name: obj.meta().name.clone().unwrap_or_default(),
        },
        release: obj
            .meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(RELEASE_ANNOTATION).cloned()),
        ready: ready.unwrap_or(0),
        desired: desired.unwrap_or(0),
        rolled_out,
    }
}

/// True when the controller has seen the newest spec (`observedGeneration >= generation`).
fn observed<K: Resource>(obj: &K, observed_generation: Option<i64>) -> bool {
    observed_generation.unwrap_or(0) >= obj.meta().generation.unwrap_or(0)
}

/// `kubectl rollout status` for a Deployment: the newest spec seen, every replica updated and
/// available, no old replica left.
fn deployment_state(d: &Deployment) -> (Option<i32>, Option<i32>, bool) {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = d.status.as_ref() else {
        return (None, Some(desired), false);
    };
    let updated = st.updated_replicas.unwrap_or(0);
    let rolled_out = observed(d, st.observed_generation)
        && updated == desired
        && st.replicas.unwrap_or(0) == updated
        && st.available_replicas.unwrap_or(0) == updated;
    (st.ready_replicas, Some(desired), rolled_out)
}

/// `kubectl rollout status` for a StatefulSet: the newest spec seen, every replica updated to
/// the update revision and ready.
fn stateful_set_state(s: &StatefulSet) -> (Option<i32>, Option<i32>, bool) {
    let desired = s.spec.as_ref().and_then(|sp| sp.replicas).unwrap_or(1);
    let Some(st) = s.status.as_ref() else {
        return (None, Some(desired), false);
    };
    let rolled_out = observed(s, st.observed_generation)
        && st.ready_replicas.unwrap_or(0) == desired
        && st.updated_replicas.unwrap_or(0) == desired
        && (st.update_revision.is_none() || st.current_revision == st.update_revision);
    (st.ready_replicas, Some(desired), rolled_out)
}

/// `kubectl rollout status` for a DaemonSet: the newest spec seen, every scheduled pod updated
/// and available.
fn daemon_set_state(d: &DaemonSet) -> (Option<i32>, Option<i32>, bool) {
    let Some(st) = d.status.as_ref() else {
        return (None, None, false);
    };
    let desired = st.desired_number_scheduled;
    let rolled_out = observed(d, st.observed_generation)
        && st.updated_number_scheduled.unwrap_or(0) == desired
        && st.number_available.unwrap_or(0) == desired;
    (Some(st.number_ready), Some(desired), rolled_out)
}

macro_rules! watched_workload {
    ($ty:ty, $kind:expr, $state:path) => {
        impl Watched for $ty {
            type Info = WorkloadInfo;
            fn info(&self) -> WorkloadInfo {
                workload(self, $kind, $state(self))
            }
            fn upsert(info: WorkloadInfo) -> Change {
                Change::Workload(info)
            }
            fn gone(&self) -> Change {
                Change::WorkloadGone(WorkloadRef {
                    kind: $kind,
                    name: self.name_any(),
                })
            }
            fn listed(all: Vec<WorkloadInfo>) -> Change {
                Change::WorkloadsListed($kind, all)
            }
        }
    };
}

watched_workload!(Deployment, WorkloadKind::Deployment, deployment_state);
watched_workload!(StatefulSet, WorkloadKind::StatefulSet, stateful_set_state);
watched_workload!(DaemonSet, WorkloadKind::DaemonSet, daemon_set_state);

/// How long a cluster's watches wait for more namespaces before they list again, so a burst of
/// new tenancies (an operator start, a large apply) costs one relist rather than one per namespace.
const RELIST_COALESCE: std::time::Duration = std::time::Duration::from_millis(300);

/// The namespaces of one cluster whose changes are wanted, shared with that cluster's streams.
pub(crate) type Namespaces = Arc<RwLock<BTreeSet<String>>>;

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
