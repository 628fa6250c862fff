//! Tests of the compact forms of pods and workloads.

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
