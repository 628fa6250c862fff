//! Tests of the pod and workload watches.

use super::*;

fn pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).unwrap()
}

fn named(ns: &str, name: &str) -> Pod {
    pod(&format!("metadata: {{name: {name}, namespace: {ns}}}\n"))
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn scopes(tagged: &[Tagged]) -> Vec<String> {
    tagged.iter().map(|(s, _)| s.to_string()).collect()
}

#[test]
fn a_relist_tells_every_wanted_namespace_what_it_holds_and_nothing_of_the_others() {
    let mut f = Fanout::new("member-1".parse().unwrap());
    let wanted = set(&["team-a", "team-b"]);
    assert!(f.on::<Pod>(Ok(watcher::Event::Init), &wanted).is_empty());
    for (ns, name) in [("team-a", "p1"), ("kube-system", "dns"), ("team-a", "p2")] {
        assert!(
            f.on(Ok(watcher::Event::InitApply(named(ns, name))), &wanted)
                .is_empty()
        );
    }
    let done = f.on::<Pod>(Ok(watcher::Event::InitDone), &wanted);
    assert_eq!(scopes(&done), ["member-1/team-a", "member-1/team-b"]);
    match &done[0].1 {
        Change::PodsListed(pods) => assert_eq!(pods.len(), 2),
        other => panic!("not a relist: {other:?}"),
    }
    assert_eq!(done[1].1, Change::PodsListed(Vec::new()));
    let later = f.on(Ok(watcher::Event::Apply(named("team-b", "p3"))), &wanted);
    assert_eq!(scopes(&later), ["member-1/team-b"]);
    let other = f.on(
        Ok(watcher::Event::Apply(named("kube-system", "x"))),
        &wanted,
    );
    assert!(other.is_empty());
}

#[test]
fn a_namespace_wanted_after_a_list_began_waits_for_the_next_list() {
    let mut f = Fanout::new("member-1".parse().unwrap());
    assert!(
        f.on::<Pod>(Ok(watcher::Event::Init), &set(&["a"]))
            .is_empty()
    );
    let wider = set(&["a", "b"]);
    f.on(Ok(watcher::Event::InitApply(named("b", "p"))), &wider);
    let done = f.on::<Pod>(Ok(watcher::Event::InitDone), &wider);
    assert_eq!(
        scopes(&done),
        ["member-1/a"],
        "b would be told it holds nothing"
    );
    assert!(
        f.on(Ok(watcher::Event::Apply(named("b", "q"))), &wider)
            .is_empty(),
        "a lone change would mark b live with half a picture"
    );
    f.on::<Pod>(Ok(watcher::Event::Init), &wider);
    f.on(Ok(watcher::Event::InitApply(named("b", "p"))), &wider);
    let again = f.on::<Pod>(Ok(watcher::Event::InitDone), &wider);
    assert_eq!(scopes(&again), ["member-1/a", "member-1/b"]);
}

#[test]
fn an_error_marks_every_listed_namespace_lost_until_the_next_list() {
    let mut f = Fanout::new("member-1".parse().unwrap());
    let wanted = set(&["a", "b"]);
    f.on::<Pod>(Ok(watcher::Event::Init), &wanted);
    f.on::<Pod>(Ok(watcher::Event::InitDone), &wanted);
    let lost = f.on::<Pod>(Err(watcher::Error::NoResourceVersion), &set(&["a"]));
    assert_eq!(scopes(&lost), ["member-1/a"]);
    assert!(matches!(lost[0].1, Change::Lost(_)));
    assert!(
        f.on(Ok(watcher::Event::Apply(named("a", "p"))), &wanted)
            .is_empty()
    );
}

#[test]
fn new_namespaces_widen_a_running_cluster_and_the_last_one_gone_stops_it() {
    let c = |s: &str| -> ClusterName { s.parse().unwrap() };
    let running = BTreeMap::from([(c("m1"), set(&["a", "b"])), (c("m2"), set(&["a"]))]);
    let target = BTreeMap::from([(c("m1"), set(&["b", "c"])), (c("m3"), set(&["x"]))]);
    let s = step(&running, &target);
    assert_eq!(s.start, BTreeMap::from([(c("m3"), set(&["x"]))]));
    assert_eq!(
        s.update,
        BTreeMap::from([(c("m1"), (set(&["b", "c"]), true))])
    );
    assert_eq!(s.stop, BTreeSet::from([c("m2")]));
    let gone: Vec<String> = s.gone.iter().map(ToString::to_string).collect();
    assert_eq!(gone, ["m1/a", "m2/a"]);
    let narrower = BTreeMap::from([(c("m1"), set(&["a"])), (c("m2"), set(&["a"]))]);
    let s = step(&running, &narrower);
    assert_eq!(s.update, BTreeMap::from([(c("m1"), (set(&["a"]), false))]));
    assert_eq!(step(&running, &running), Step::default());
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
