//! End-to-end fault tests: a member's API server stops and starts again while the operator runs.

mod common;

use std::time::Instant;

use common::{DEADLINE, Hub, chart, entry, lab_ctl, tenancy, unique};
use tenancy_hub::crd::ControllerSpec;

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_stopped_member_turns_unknown_while_the_other_stays_fresh() {
    let hub = Hub::new("stale").await;
    let ns = unique("stale");
    hub.apply(
        "stale",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-1", "member-2"],
                vec![chart("deployment-example", "web", &[("replicaCount", "2")])],
            )],
        },
    )
    .await;
    hub.status_until("stale", "both members fresh with 2 ready pods", |s| {
        ["member-1", "member-2"]
            .iter()
            .all(|c| entry(s, c, &ns).is_some_and(|t| t.fresh && t.pods_ready == 2))
    })
    .await;

    lab_ctl(&hub.lab, &["stop", "member-2-kube-apiserver"]);
    let stopped = Instant::now();
    let status = hub
        .status_until("stale", "member-2 to turn Unknown", |s| {
            entry(s, "member-2", &ns).is_some_and(|t| !t.fresh)
        })
        .await;
    let took = stopped.elapsed();
    let lab = &hub.lab;
    let restart = || lab_ctl(lab, &["start", "member-2-kube-apiserver"]);
    if took.as_secs() >= 30 {
        restart();
        panic!("member-2 took {took:?} to turn Unknown");
    }
    let m2 = entry(&status, "member-2", &ns).unwrap();
    let m1 = entry(&status, "member-1", &ns).unwrap();
    let checks = [
        (m1.fresh && m1.pods_ready == 2, "member-1 stays fresh"),
        (
            m2.pod_status
                .iter()
                .all(|p| p.phase == "Unknown" && !p.ready),
            "member-2's pods are Unknown",
        ),
        (
            m2.last_seen.is_some(),
            "member-2 says when it was last seen",
        ),
        (
            status
                .clusters
                .iter()
                .any(|c| c.name == "member-2" && !c.reachable),
            "member-2 is unreachable",
        ),
    ];
    restart();
    for (ok, what) in checks {
        assert!(ok, "{what}: {status:#?}");
    }
    let back = hub
        .status_until("stale", "member-2 to come back", |s| {
            entry(s, "member-2", &ns).is_some_and(|t| t.fresh && t.pods_ready == 2)
        })
        .await;
    assert!(back.clusters.iter().all(|c| c.reachable));
    eprintln!(
        "member-2 turned Unknown {took:?} after its API server stopped (deadline {DEADLINE:?})"
    );
    hub.delete_and_wait_gone("stale").await;
}
