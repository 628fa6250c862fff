//! Tests of how a pull member's job is awaited: the agent away, and an agent that renews its Lease but never answers.

use std::{sync::Arc, time::Duration};

use http::{Request, Response};
use kube::{client::Body, runtime::watcher};

use super::*;
use crate::{api::member_cluster::pull_namespace, member::pull::messages::lease};

/// The hub's side with no API server behind it (these tests make no request).
fn hub() -> Arc<PullHub> {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    PullHub::new(kube::Client::new(service, "default"), None, None)
}

/// `hub` sees `cluster`'s agent renew its Lease now, for an hour.
fn renewed(hub: &PullHub, cluster: &ClusterName) {
    let mut lease = lease(cluster, 3600);
    lease.metadata.namespace = Some(pull_namespace(cluster));
    hub.on_lease(watcher::Event::Apply(lease));
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_renews_its_lease_but_never_answers_fails_the_job_at_the_deadline() {
    let (hub, cluster) = (hub(), "edge-1".parse::<ClusterName>().unwrap());
    renewed(&hub, &cluster);
    let key: ReleaseKey = "edge-1/team-a/web".parse().unwrap();
    let within = Duration::from_secs(90);
    let started = Instant::now();
    let outcome = wait_answer(&hub, &cluster, &key, "work-1", within).await;
    let waited = Instant::now() - started;
    assert!(
        waited >= within && waited < within + LOOK_EVERY + Duration::from_millis(1),
        "{waited:?}"
    );
    let Outcome::Failed { message, kind } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(kind, FailureKind::Transient);
    for named in [
        "pull member edge-1",
        "edge-1/team-a/web",
        "within 90 s",
        "agent's log",
    ] {
        assert!(message.contains(named), "{named}: {message}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_agent_never_connected_makes_the_job_wait_for_its_cluster_at_once() {
    let (hub, cluster) = (hub(), "edge-2".parse::<ClusterName>().unwrap());
    let key: ReleaseKey = "edge-2/team-a/web".parse().unwrap();
    let started = Instant::now();
    let outcome = wait_answer(&hub, &cluster, &key, "work-1", ANSWER_WITHIN).await;
    assert_eq!(Instant::now(), started);
    assert!(
        matches!(&outcome, Outcome::Failed { kind: FailureKind::Unavailable, message } if message.contains("no agent connected")),
        "{outcome:?}"
    );
}
