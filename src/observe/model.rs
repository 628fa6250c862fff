//! The in-memory model of what runs: pods and workloads per cluster/namespace, fed by tagged watch events.

use std::{collections::BTreeMap, fmt};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::api::key::{ClusterName, ClusterNamespace};

/// The kinds of workload tenancy-hub reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WorkloadKind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A workload, by kind and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkloadRef {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Its name.
    pub name: String,
}

/// What the status needs of one workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadInfo {
    /// Kind and name.
    pub id: WorkloadRef,
    /// Release that owns it (`meta.helm.sh/release-name`).
    pub release: Option<String>,
    /// Ready replicas (or scheduled pods for a DaemonSet).
    pub ready: i32,
    /// Desired replicas.
    pub desired: i32,
    /// Rolled out as `kubectl rollout status` means it: the newest spec everywhere, all ready.
    pub rolled_out: bool,
}

/// What the status needs of one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// Phase.
    pub phase: String,
    /// Whether every container is ready.
    pub ready: bool,
    /// Container restarts, summed.
    pub restarts: i32,
    /// Waiting or terminated reason, if any.
    pub reason: String,
    /// The workload it belongs to, through its owner chain.
    pub owner: Option<WorkloadRef>,
}

/// One change seen by a watcher, before it is tagged with its cluster/namespace.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Change {
    /// A pod appeared or changed.
    Pod(PodInfo),
    /// A pod went away.
    PodGone(String),
    /// A workload appeared or changed.
    Workload(WorkloadInfo),
    /// A workload went away.
    WorkloadGone(WorkloadRef),
    /// A full relist of pods replaces what was known.
    PodsListed(Vec<PodInfo>),
    /// A full relist of one kind of workload replaces what was known of that kind.
    WorkloadsListed(WorkloadKind, Vec<WorkloadInfo>),
    /// The watch stream broke; what is known may be stale.
    Lost(String),
}

/// A change tagged with the cluster/namespace it came from.
pub(crate) type Tagged = (ClusterNamespace, Change);

/// What is known of one namespace in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScopeState {
    /// Pods by name.
    pub(crate) pods: BTreeMap<String, PodInfo>,
    /// Workloads by kind and name (serialized as a list).
    #[serde(serialize_with = "values")]
    pub(crate) workloads: BTreeMap<WorkloadRef, WorkloadInfo>,
    /// True while every watch of the namespace is connected.
    pub(crate) live: bool,
    /// Why it is not live.
    pub(crate) problem: Option<String>,
    /// When a watch last delivered anything.
    #[serde(serialize_with = "timestamp")]
    pub(crate) last_seen: Option<Timestamp>,
}

fn values<S: serde::Serializer>(
    map: &BTreeMap<WorkloadRef, WorkloadInfo>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(map.values())
}

fn timestamp<S: serde::Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_some(&t.to_string()),
        None => s.serialize_none(),
    }
}

impl ScopeState {
    /// Applies one change seen at `now`.
    pub(crate) fn apply(&mut self, change: Change, now: Timestamp) {
        if !matches!(change, Change::Lost(_)) {
            self.live = true;
            self.problem = None;
            self.last_seen = Some(now);
        }
        match change {
            Change::Pod(p) => {
                self.pods.insert(p.name.clone(), p);
            }
            Change::PodGone(name) => {
                self.pods.remove(&name);
            }
            Change::Workload(w) => {
                self.workloads.insert(w.id.clone(), w);
            }
            Change::WorkloadGone(id) => {
                self.workloads.remove(&id);
            }
            Change::PodsListed(pods) => {
                self.pods = pods.into_iter().map(|p| (p.name.clone(), p)).collect()
            }
            Change::WorkloadsListed(kind, list) => {
                self.workloads.retain(|id, _| id.kind != kind);
                self.workloads
                    .extend(list.into_iter().map(|w| (w.id.clone(), w)));
            }
            Change::Lost(why) => {
                self.live = false;
                self.problem = Some(why);
            }
        }
    }

    /// The release a pod belongs to, through its workload.
    pub(crate) fn release_of(&self, pod: &PodInfo) -> Option<&str> {
        self.workloads.get(pod.owner.as_ref()?)?.release.as_deref()
    }
}

/// Every watched namespace of every cluster.
#[derive(Default)]
pub(crate) struct Model {
    scopes: DashMap<ClusterNamespace, ScopeState>,
    /// Bumped on every change, so a reader (the fleet view's live streams) can tell cheaply
    /// whether anything changed since it last looked.
    version: std::sync::atomic::AtomicU64,
}

impl Model {
    /// Applies a tagged change.
    pub(crate) fn apply(&self, (scope, change): Tagged, now: Timestamp) {
        self.scopes.entry(scope).or_default().apply(change, now);
        self.bump();
    }

    /// A number that changes whenever the model does.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    fn bump(&self) {
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Forgets a namespace no longer watched.
    pub(crate) fn forget(&self, scope: &ClusterNamespace) {
        self.scopes.remove(scope);
        self.bump();
    }

    /// What is known of one namespace.
    pub(crate) fn scope(&self, scope: &ClusterNamespace) -> Option<ScopeState> {
        self.scopes.get(scope).map(|s| s.clone())
    }

    /// Every watched namespace, in order.
    pub(crate) fn scopes(&self) -> Vec<ClusterNamespace> {
        let mut keys: Vec<ClusterNamespace> = self.scopes.iter().map(|e| e.key().clone()).collect();
        keys.sort();
        keys
    }

    /// Every watched namespace of one cluster, with what is known of it.
    pub(crate) fn cluster(&self, cluster: &ClusterName) -> BTreeMap<String, ScopeState> {
        self.scopes
            .iter()
            .filter(|e| &e.key().cluster == cluster)
            .map(|e| (e.key().namespace.clone(), e.value().clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool, owner: Option<(&str, WorkloadKind)>) -> PodInfo {
        PodInfo {
            name: name.into(),
            phase: "Running".into(),
            ready,
            restarts: 0,
            reason: String::new(),
            owner: owner.map(|(n, kind)| WorkloadRef {
                kind,
                name: n.into(),
            }),
        }
    }

    fn workload(name: &str, kind: WorkloadKind, release: &str) -> WorkloadInfo {
        WorkloadInfo {
            id: WorkloadRef {
                kind,
                name: name.into(),
            },
            release: Some(release.into()),
            ready: 1,
            desired: 2,
            rolled_out: false,
        }
    }

    #[test]
    fn tagged_changes_land_in_their_own_cluster_namespace() {
        let model = Model::default();
        let a: ClusterNamespace = "member-1/team".parse().unwrap();
        let b: ClusterNamespace = "member-2/team".parse().unwrap();
        model.apply(
            (a.clone(), Change::Pod(pod("p", true, None))),
            Timestamp::UNIX_EPOCH,
        );
        model.apply(
            (b.clone(), Change::Pod(pod("q", true, None))),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            model.scope(&a).unwrap().pods.keys().collect::<Vec<_>>(),
            ["p"]
        );
        assert_eq!(
            model.scope(&b).unwrap().pods.keys().collect::<Vec<_>>(),
            ["q"]
        );
        assert_eq!(model.cluster(&"member-2".parse().unwrap()).len(), 1);
        model.forget(&a);
        assert_eq!(model.scopes(), [b]);
    }

    #[test]
    fn a_relist_replaces_what_was_known_and_a_lost_stream_marks_the_scope_stale() {
        let mut s = ScopeState::default();
        s.apply(Change::Pod(pod("old", true, None)), Timestamp::UNIX_EPOCH);
        s.apply(
            Change::PodsListed(vec![pod("new", false, None)]),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(s.pods.keys().collect::<Vec<_>>(), ["new"]);
        assert!(s.live);
        s.apply(
            Change::Lost("connection refused".into()),
            Timestamp::from_second(5).unwrap(),
        );
        assert!(!s.live);
        assert_eq!(
            s.last_seen,
            Some(Timestamp::UNIX_EPOCH),
            "last seen stays at the last delivery"
        );
        s.apply(
            Change::PodGone("new".into()),
            Timestamp::from_second(9).unwrap(),
        );
        assert!(s.live && s.problem.is_none());
    }

    #[test]
    fn workloads_relist_per_kind_and_pods_find_their_release_through_them() {
        let mut s = ScopeState::default();
        s.apply(
            Change::Workload(workload("web", WorkloadKind::Deployment, "foo")),
            Timestamp::UNIX_EPOCH,
        );
        s.apply(
            Change::Workload(workload("db", WorkloadKind::StatefulSet, "nginx")),
            Timestamp::UNIX_EPOCH,
        );
        s.apply(
            Change::WorkloadsListed(WorkloadKind::StatefulSet, vec![]),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(s.workloads.len(), 1);
        let p = pod("web-1", true, Some(("web", WorkloadKind::Deployment)));
        assert_eq!(s.release_of(&p), Some("foo"));
        assert_eq!(s.release_of(&pod("x", true, None)), None);
    }
}
