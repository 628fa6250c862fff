//! Pods and the workloads that own them (Deployments, StatefulSets, DaemonSets) as watched:
//! their compact forms, rollout state and the model changes they make.

use std::fmt::Debug;

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::observe::model::{Change, PodInfo, WorkloadInfo, WorkloadKind, WorkloadRef};

/// Annotation Helm puts on every object of a release.
pub(crate) const RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";

/// A kind of object watched per namespace, and how it becomes model changes.
pub(crate) trait Watched:
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

#[cfg(test)]
mod tests;
