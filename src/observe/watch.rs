//! Watchers of Pods, Deployments, StatefulSets and DaemonSets, one set per cluster/namespace, cancellable.

use std::{
    collections::{BTreeSet, HashMap},
    fmt::Debug,
    sync::Mutex,
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{reflector::ObjectRef, watcher},
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::Sender;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::{
    api::crd::Controller,
    api::key::{ClusterName, ClusterNamespace},
    clusters::registry::ClusterRegistry,
    observe::model::{Change, PodInfo, Tagged, WorkloadInfo, WorkloadKind, WorkloadRef},
};

/// Longest pause before a watch that failed lists again.
const RELIST_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// A watcher that lists afresh after every error, after a capped exponential pause. kube's own
/// watcher resumes from its last resource version after an error and then says nothing until
/// something changes, so a consumer that stopped trusting its picture at the error would never
/// learn that it is in sync again; the `InitDone` of the new list tells it.
pub fn relisting_watcher<K>(
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
pub const RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";

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

/// The changes of one kind in one namespace: relists arrive whole, errors as `Lost`.
fn changes<K: Watched>(client: Client, namespace: &str) -> impl Stream<Item = Change> + Send {
    let api: Api<K> = Api::namespaced(client, namespace);
    let mut relist: Vec<K::Info> = Vec::new();
    relisting_watcher(api, watcher::Config::default()).filter_map(move |event| {
        let change = match event {
            Ok(watcher::Event::Apply(obj)) => Some(K::upsert(obj.info())),
            Ok(watcher::Event::Delete(obj)) => Some(obj.gone()),
            Ok(watcher::Event::Init) => {
                relist.clear();
                None
            }
            Ok(watcher::Event::InitApply(obj)) => {
                relist.push(obj.info());
                None
            }
            Ok(watcher::Event::InitDone) => Some(K::listed(std::mem::take(&mut relist))),
            Err(e) => Some(Change::Lost(e.to_string())),
        };
        futures::future::ready(change)
    })
}

/// Runs the watchers of one cluster/namespace until cancelled, tagging every change with it.
async fn watch_scope(
    scope: ClusterNamespace,
    client: Client,
    events: Sender<Tagged>,
    stop: CancellationToken,
) {
    let ns = scope.namespace.clone();
    let all = futures::stream::select_all([
        changes::<Pod>(client.clone(), &ns).boxed(),
        changes::<Deployment>(client.clone(), &ns).boxed(),
        changes::<StatefulSet>(client.clone(), &ns).boxed(),
        changes::<DaemonSet>(client, &ns).boxed(),
    ]);
    // A full channel makes the watchers wait: changes are never dropped.
    let forward = all.for_each(|change| {
        let (events, scope) = (events.clone(), scope.clone());
        async move {
            let _ = events.send((scope, change)).await;
        }
    });
    tokio::select! {
        () = forward => {}
        () = stop.cancelled() => {}
    }
}

/// Keeps exactly one watcher set running for every cluster/namespace some resource targets.
pub struct WatchSupervisor {
    events: Sender<Tagged>,
    parent: CancellationToken,
    tasks: TaskTracker,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    wanted: HashMap<ObjectRef<Controller>, BTreeSet<ClusterNamespace>>,
    running: HashMap<ClusterNamespace, CancellationToken>,
}

impl WatchSupervisor {
    /// A supervisor sending tagged changes on `events`; its watchers stop with `parent`.
    pub fn new(events: Sender<Tagged>, parent: CancellationToken, tasks: TaskTracker) -> Self {
        Self {
            events,
            parent,
            tasks,
            state: Mutex::default(),
        }
    }

    /// Sets the namespaces one resource targets, then starts and stops watchers to match every
    /// resource's targets, for clusters in `registry`. Returns the namespaces no longer watched.
    pub fn set(
        &self,
        owner: &ObjectRef<Controller>,
        scopes: BTreeSet<ClusterNamespace>,
        registry: &ClusterRegistry,
    ) -> Vec<ClusterNamespace> {
        let mut state = self.state.lock().expect("watch supervisor lock");
        if scopes.is_empty() {
            state.wanted.remove(owner);
        } else {
            state.wanted.insert(owner.clone(), scopes);
        }
        self.converge(&mut state, registry)
    }

    fn converge(&self, state: &mut State, registry: &ClusterRegistry) -> Vec<ClusterNamespace> {
        let wanted: BTreeSet<ClusterNamespace> = state
            .wanted
            .values()
            .flatten()
            .filter(|s| registry.get(&s.cluster).is_some())
            .cloned()
            .collect();
        let gone: Vec<ClusterNamespace> = state
            .running
            .keys()
            .filter(|s| !wanted.contains(s))
            .cloned()
            .collect();
        for scope in &gone {
            if let Some(token) = state.running.remove(scope) {
                token.cancel();
                tracing::info!(cluster = %scope.cluster, namespace = %scope.namespace, "stopped watching");
            }
        }
        for scope in wanted {
            if state.running.contains_key(&scope) {
                continue;
            }
            let member = registry.get(&scope.cluster).expect("filtered above");
            let token = self.parent.child_token();
            let span = tracing::info_span!("watch", cluster = %scope.cluster, namespace = %scope.namespace);
            self.tasks.spawn(
                watch_scope(
                    scope.clone(),
                    member.client.clone(),
                    self.events.clone(),
                    token.clone(),
                )
                .instrument(span),
            );
            tracing::info!(cluster = %scope.cluster, namespace = %scope.namespace, "watching pods and workloads");
            state.running.insert(scope, token);
        }
        gone
    }

    /// Follows a new registry: watchers of unregistered clusters stop, those of `changed` clusters
    /// restart with their new clients. Returns the namespaces no longer watched.
    pub fn refresh(
        &self,
        registry: &ClusterRegistry,
        changed: &BTreeSet<ClusterName>,
    ) -> Vec<ClusterNamespace> {
        let mut state = self.state.lock().expect("watch supervisor lock");
        let restart: Vec<ClusterNamespace> = state
            .running
            .keys()
            .filter(|s| changed.contains(&s.cluster))
            .cloned()
            .collect();
        for scope in restart {
            if let Some(token) = state.running.remove(&scope) {
                token.cancel();
            }
        }
        self.converge(&mut state, registry)
    }

    /// True while a watcher set runs for this namespace.
    pub fn is_watched(&self, scope: &ClusterNamespace) -> bool {
        self.state
            .lock()
            .expect("watch supervisor lock")
            .running
            .contains_key(scope)
    }

    /// Every namespace watched now.
    pub fn watched(&self) -> BTreeSet<ClusterNamespace> {
        self.state
            .lock()
            .expect("watch supervisor lock")
            .running
            .keys()
            .cloned()
            .collect()
    }

    /// The resources targeting a namespace.
    pub fn owners_of(&self, scope: &ClusterNamespace) -> Vec<ObjectRef<Controller>> {
        let state = self.state.lock().expect("watch supervisor lock");
        state
            .wanted
            .iter()
            .filter(|(_, scopes)| scopes.contains(scope))
            .map(|(owner, _)| owner.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn a_deployment_pod_belongs_to_its_deployment_through_the_replica_set() {
        let p = pod(
            "metadata:\n  name: web-7c74f7d4b-x6z88\n  labels: {pod-template-hash: 7c74f7d4b}\n  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-7c74f7d4b, uid: u, controller: true}]\nstatus:\n  phase: Running\n  conditions: [{type: Ready, status: 'True'}]\n  containerStatuses: [{name: c, image: i, imageID: '', ready: true, restartCount: 2}]\n",
        );
        let info = pod_info(&p);
        assert_eq!(
            info.owner,
            Some(WorkloadRef {
                kind: WorkloadKind::Deployment,
                name: "web".into()
            })
        );
        assert!(info.ready);
        assert_eq!((info.phase.as_str(), info.restarts), ("Running", 2));
    }

    #[test]
    fn stateful_and_daemon_set_pods_belong_to_their_owner_directly() {
        let p = pod(
            "metadata:\n  name: db-0\n  ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u, controller: true}]\n",
        );
        assert_eq!(pod_info(&p).owner.unwrap().kind, WorkloadKind::StatefulSet);
        let p = pod(
            "metadata:\n  name: agent-x\n  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: u, controller: true}]\n",
        );
        assert_eq!(pod_info(&p).owner.unwrap().name, "agent");
    }

    #[test]
    fn a_waiting_container_gives_the_pod_its_reason() {
        let p = pod(
            "metadata: {name: p}\nstatus:\n  phase: Pending\n  containerStatuses: [{name: c, image: i, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: ImagePullBackOff}}}]\n",
        );
        let info = pod_info(&p);
        assert_eq!(
            (info.reason.as_str(), info.ready, info.owner),
            ("ImagePullBackOff", false, None)
        );
    }

    #[test]
    fn workloads_carry_their_release_and_readiness() {
        let d: Deployment = serde_yaml::from_str(
            "metadata: {name: web, annotations: {meta.helm.sh/release-name: foo}}\nspec: {replicas: 3, selector: {}, template: {}}\nstatus: {readyReplicas: 2}\n",
        )
        .unwrap();
        let info = d.info();
        assert_eq!(
            (info.release.as_deref(), info.ready, info.desired),
            (Some("foo"), 2, 3)
        );
        let ds: DaemonSet = serde_yaml::from_str(
            "metadata: {name: agent}\nspec: {selector: {}, template: {}}\nstatus: {numberReady: 1, desiredNumberScheduled: 1, currentNumberScheduled: 1, numberMisscheduled: 0}\n",
        )
        .unwrap();
        assert_eq!(
            (ds.info().ready, ds.info().desired, ds.info().release),
            (1, 1, None)
        );
    }
}
