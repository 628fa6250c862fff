//! Tests of a pull member's link: how a job is awaited (the agent away, or renewing its Lease but never answering), how a reply is taken, and how a namespace's report is relisted.

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

#[test]
fn a_manifest_reply_is_taken_and_any_other_is_refused_naming_the_member() {
    let cluster: ClusterName = "edge-3".parse().unwrap();
    let deployed = records::Deployed {
        manifest: "kind: ConfigMap\n".into(),
        values: serde_json::Value::Null,
    };
    let found = manifest_of(cluster.clone(), Reply::Manifest(Ok(Some(deployed.clone()))));
    assert_eq!(found.unwrap(), Some(deployed));
    assert_eq!(
        manifest_of(cluster.clone(), Reply::Manifest(Ok(None))).unwrap(),
        None
    );

    let wrong = manifest_of(cluster.clone(), Reply::Drift(Ok(Default::default()))).unwrap_err();
    assert!(matches!(&wrong, LinkError::WrongReply { .. }), "{wrong:?}");
    assert!(wrong.to_string().contains("pull member edge-3"), "{wrong}");

    let said = "reading release record sh.helm.release.v1.web.v3: forbidden".to_owned();
    let failed = manifest_of(cluster, Reply::Manifest(Err(said.clone()))).unwrap_err();
    assert!(
        matches!(&failed, LinkError::Agent { reason, .. } if *reason == said),
        "{failed:?}"
    );
    assert!(
        failed
            .to_string()
            .starts_with("the agent of pull member edge-3: ")
    );
}

#[tokio::test]
async fn an_agent_is_away_until_it_renews_its_lease() {
    let (hub, cluster) = (hub(), "edge-4".parse::<ClusterName>().unwrap());
    let away_now = away(&cluster, &hub.member(&cluster));
    assert!(
        matches!(&away_now, Some(LinkError::NoAgent { cluster: c }) if *c == cluster),
        "{away_now:?}"
    );
    renewed(&hub, &cluster);
    assert!(away(&cluster, &hub.member(&cluster)).is_none());
}

#[test]
fn a_namespace_report_relists_its_pods_each_kind_of_workload_and_its_problem() {
    use crate::member::pull::messages::Observed;
    use crate::observe::model::{WorkloadInfo, WorkloadRef};
    let workload = |kind, name: &str| WorkloadInfo {
        id: WorkloadRef {
            kind,
            name: name.into(),
        },
        release: Some("web".into()),
        ready: 1,
        desired: 1,
        rolled_out: true,
    };
    let observed = Observed {
        cluster: "edge-1".parse().unwrap(),
        namespace: "team-a".into(),
        pods: Vec::new(),
        workloads: vec![
            workload(WorkloadKind::StatefulSet, "db"),
            workload(WorkloadKind::Deployment, "web"),
        ],
        problem: Some("pods cannot be listed: forbidden".into()),
    };
    let changes = relist(&observed);
    assert!(changes.iter().all(|(ns, _)| ns == "team-a"));
    let kinds: Vec<String> = changes
        .iter()
        .map(|(_, change)| match change {
            Change::PodsListed(pods) => format!("pods {}", pods.len()),
            Change::WorkloadsListed(kind, listed) => format!(
                "{kind:?} {}",
                listed
                    .iter()
                    .map(|w| w.id.name.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Change::Lost(why) => format!("lost: {why}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "pods 0",
            "Deployment web",
            "StatefulSet db",
            "DaemonSet ",
            "lost: pods cannot be listed: forbidden"
        ]
    );
}

#[tokio::test]
async fn an_adoption_asked_of_a_pull_member_is_refused_with_the_reason_and_nothing_is_published() {
    let (hub, cluster) = (hub(), "edge-3".parse::<ClusterName>().unwrap());
    renewed(&hub, &cluster);
    let link = PullLink::new(cluster, hub, None, ANSWER_WITHIN);
    let mut release = crate::helm::cli::tests::release(crate::plan::ChartSource::Directory(
        "/charts/deployment-example".into(),
    ));
    release.key = "edge-3/team-a/web".parse().unwrap();
    let job = Job::Apply {
        release: Box::new(release),
        stale_pending: None,
        repair: None,
        adopt: true,
        installing: false,
        attempt: 0,
    };
    // The hub's client has no API server behind it: a publish would fail as Transient.
    let outcome = link.execute(job).await;
    let Outcome::Failed { message, kind } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(kind, FailureKind::Permanent);
    assert!(
        message.contains("edge-3/team-a/web") && message.contains("not done on pull members"),
        "{message}"
    );
}

#[test]
fn a_hostile_health_report_is_cut_to_size_and_a_wrong_reply_refused() {
    use crate::plan::health::{Health, Judged, MAX_LISTED, MAX_REASON, ObjectHealth, Verdict};
    let cluster: ClusterName = "edge-5".parse().unwrap();
    let key: ReleaseKey = "edge-5/team-a/web".parse().unwrap();
    let object = |i: usize| ObjectHealth {
        id: crate::observe::drift::ObjectId {
            api_version: "v1".repeat(1000),
            kind: "SealedSecret".into(),
            namespace: Some("n".repeat(10_000)),
            name: format!("s{i}"),
        },
        verdict: Verdict {
            health: Health::InProgress,
            reason: "x".repeat(1 << 20),
        },
    };
    let hostile = Checked {
        drift: Vec::new(),
        health: Judged {
            objects: (0..10_000).map(object).collect(),
            more: usize::MAX - 5,
            judged: 3,
        },
    };
    let taken = checked_of(&key, cluster.clone(), Ok(Reply::Drift(Ok(hostile)))).unwrap();
    assert_eq!(taken.health.objects.len(), MAX_LISTED);
    assert_eq!(taken.health.more, usize::MAX, "counts saturate");
    for o in &taken.health.objects {
        assert!(o.verdict.reason.len() <= MAX_REASON);
        assert!(o.id.api_version.len() <= 253 && o.id.namespace.as_ref().unwrap().len() <= 63);
    }
    let wrong = checked_of(&key, cluster, Ok(Reply::Manifest(Ok(None)))).unwrap_err();
    assert!(wrong.to_string().contains("pull member edge-5"), "{wrong}");
}
