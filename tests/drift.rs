//! End-to-end tests of drift detection: hand-made changes in a member found, reported and repaired, within bounds.

mod common;

use std::time::Duration;

use common::{
    fixtures::{DEADLINE, message, unique, wait_until, web},
    hub::Hub,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Event, Service},
};
use kube::{Api, Client, api::ListParams};
use tenancy_hub::api::crd::{
    ControllerSpec, DriftDetection, DriftIgnore, DriftMode, DriftStatus, DriftTarget,
};

/// The drift interval the test operators run with.
const INTERVAL: &str = "5";
/// How long a deleted Service may stay deleted: the interval, plus a check and a helm run.
const SERVICE_BACK_WITHIN: Duration = Duration::from_secs(30);
/// How long a hand-scaled Deployment may stay scaled: seconds, plus a helm run.
const DEPLOYMENT_BACK_WITHIN: Duration = Duration::from_secs(20);

/// One `web` release of 2 replicas on member-1, with drift detection as given.
fn spec(namespace: &str, drift: Option<DriftDetection>) -> ControllerSpec {
    let mut spec = web(namespace, &["member-1"], "2");
    spec.tenancies[0].charts[0].drift_detection = drift;
    spec
}

fn mode(mode: DriftMode) -> Option<DriftDetection> {
    Some(DriftDetection {
        mode,
        ignore: Vec::new(),
    })
}

/// A hub with its own operator checking every release each five seconds, and a delivered `web`.
async fn delivered(prefix: &str, drift: Option<DriftDetection>) -> (Hub, String, Client) {
    let hub = Hub::with_args(prefix, &["--drift-interval", INTERVAL]).await;
    let namespace = unique(prefix);
    hub.apply("drift", spec(&namespace, drift)).await;
    hub.releases_become("member-1", &namespace, &[("web", 1)])
        .await;
    let member = hub.lab.client("member-1").await;
    wait_until("Deployment web with 2 replicas", DEADLINE, || async {
        let d: Api<Deployment> = Api::namespaced(member.clone(), &namespace);
        (d.get("web").await.ok()?.spec?.replicas == Some(2)).then_some(())
    })
    .await;
    (hub, namespace, member)
}

async fn replicas(member: &Client, namespace: &str) -> Option<i32> {
    let d: Api<Deployment> = Api::namespaced(member.clone(), namespace);
    d.get("web").await.ok()?.spec?.replicas
}

async fn service_exists(member: &Client, namespace: &str) -> bool {
    let s: Api<Service> = Api::namespaced(member.clone(), namespace);
    matches!(s.get_opt("web").await, Ok(Some(_)))
}

fn scale(hub: &Hub, namespace: &str, to: i32) {
    hub.lab.kubectl(
        "member-1",
        &[
            "-n",
            namespace,
            "scale",
            "deployment/web",
            &format!("--replicas={to}"),
        ],
    );
}

fn delete_service(hub: &Hub, namespace: &str) {
    hub.lab
        .kubectl("member-1", &["-n", namespace, "delete", "service", "web"]);
}

fn revision(hub: &Hub, namespace: &str) -> i64 {
    hub.lab.releases("member-1", namespace)["web"].0
}

async fn event_reasons(hub: &Hub) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// The drift status of `web`, once it satisfies `check`.
async fn drift_until(hub: &Hub, what: &str, check: impl Fn(&DriftStatus) -> bool) -> DriftStatus {
    let status = hub
        .status_until("drift", what, |s| {
            message(s, "member-1", "web")
                .and_then(|m| m.drift.as_ref())
                .is_some_and(&check)
        })
        .await;
    message(&status, "member-1", "web")
        .and_then(|m| m.drift.clone())
        .unwrap()
}

fn paths_of(drift: &DriftStatus, kind: &str) -> Vec<String> {
    drift
        .objects
        .iter()
        .filter(|o| o.kind == kind)
        .flat_map(|o| o.paths.clone())
        .collect()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_hand_scaled_deployment_and_a_deleted_service_are_repaired_in_enabled_mode() {
    let (hub, namespace, member) = delivered("drift-on", mode(DriftMode::Enabled)).await;

    scale(&hub, &namespace, 5);
    wait_until(
        "the Deployment back at 2 replicas",
        DEPLOYMENT_BACK_WITHIN,
        || async { (replicas(&member, &namespace).await == Some(2)).then_some(()) },
    )
    .await;
    hub.releases_become("member-1", &namespace, &[("web", 2)])
        .await;
    let history = hub.lab.helm(
        "member-1",
        &["history", "web", "-n", &namespace, "-o", "json"],
    );
    assert!(
        history.contains("drift repair: Deployment/web /spec/replicas"),
        "{history}"
    );

    delete_service(&hub, &namespace);
    wait_until("the Service back", SERVICE_BACK_WITHIN, || async {
        service_exists(&member, &namespace).await.then_some(())
    })
    .await;
    hub.releases_become("member-1", &namespace, &[("web", 3)])
        .await;

    let reasons = event_reasons(&hub).await;
    for reason in ["DriftDetected", "DriftRepaired"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} in {reasons:?}"
        );
    }
    let operator = hub.operator.as_ref().unwrap();
    assert!(
        operator.metric("tenancy_hub_drift_total{cluster=\"member-1\",action=\"repaired\"}") >= 2.0
    );
    hub.status_until("drift", "Ready again without drift", |s| {
        common::fixtures::ready(s)
            && message(s, "member-1", "web").is_some_and(|m| m.drift.is_none())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn in_warn_mode_drift_is_reported_in_status_and_nothing_is_changed() {
    // No driftDetection at all: warn is the default.
    let (hub, namespace, member) = delivered("drift-warn", None).await;

    scale(&hub, &namespace, 4);
    delete_service(&hub, &namespace);
    let drift = drift_until(&hub, "both objects reported as drift", |d| {
        d.objects.iter().any(|o| o.kind == "Service" && o.missing)
            && d.objects
                .iter()
                .any(|o| o.kind == "Deployment" && o.paths == ["/spec/replicas"])
    })
    .await;
    assert_eq!((drift.action.as_str(), drift.revision), ("Reported", 1));
    let status = hub.api().get("drift").await.unwrap().status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Drifted")
    );

    assert_eq!(revision(&hub, &namespace), 1);
    assert_eq!(replicas(&member, &namespace).await, Some(4));
    assert!(!service_exists(&member, &namespace).await);
    assert!(
        event_reasons(&hub)
            .await
            .iter()
            .any(|r| r == "DriftDetected")
    );
    let operator = hub.operator.as_ref().unwrap();
    assert!(
        operator.metric("tenancy_hub_drift_total{cluster=\"member-1\",action=\"found\"}") >= 1.0
    );

    // Switching to enabled is no spec change Helm sees: no revision for it, only the repair.
    hub.apply("drift", spec(&namespace, mode(DriftMode::Enabled)))
        .await;
    wait_until("the Service back", SERVICE_BACK_WITHIN, || async {
        service_exists(&member, &namespace).await.then_some(())
    })
    .await;
    hub.releases_become("member-1", &namespace, &[("web", 2)])
        .await;
    assert_eq!(replicas(&member, &namespace).await, Some(2));
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn an_ignored_path_is_neither_reported_nor_repaired() {
    let ignore = DriftDetection {
        mode: DriftMode::Warn,
        ignore: vec![DriftIgnore {
            paths: vec!["/spec/replicas".into()],
            target: Some(DriftTarget {
                kind: Some("Deployment".into()),
                name: Some("web".into()),
                namespace: None,
            }),
        }],
    };
    let (hub, namespace, member) = delivered("drift-ignore", Some(ignore.clone())).await;

    scale(&hub, &namespace, 3);
    // A change that is not ignored, in the same object, proves the object was compared.
    hub.lab.kubectl(
        "member-1",
        &[
            "-n",
            &namespace,
            "label",
            "deployment/web",
            "app.kubernetes.io/instance-",
        ],
    );
    let drift = drift_until(&hub, "the removed label reported", |d| {
        !paths_of(d, "Deployment").is_empty()
    })
    .await;
    assert_eq!(
        paths_of(&drift, "Deployment"),
        ["/metadata/labels/app.kubernetes.io~1instance"]
    );
    assert_eq!(revision(&hub, &namespace), 1);
    assert_eq!(replicas(&member, &namespace).await, Some(3));

    // Once the label is back, nothing is drift: the scaled replicas stay as they are.
    hub.lab.kubectl(
        "member-1",
        &[
            "-n",
            &namespace,
            "label",
            "deployment/web",
            "app.kubernetes.io/instance=web",
        ],
    );
    hub.status_until("drift", "no drift reported", |s| {
        message(s, "member-1", "web").is_some_and(|m| m.drift.is_none())
            && common::fixtures::ready(s)
    })
    .await;
    assert_eq!(revision(&hub, &namespace), 1);
    assert_eq!(replicas(&member, &namespace).await, Some(3));
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_fight_over_a_field_makes_a_bounded_number_of_revisions() {
    let (hub, namespace, member) = delivered("drift-fight", mode(DriftMode::Enabled)).await;

    // Another "controller" keeps the Deployment at 5 replicas for 30 seconds.
    let fight_until = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < fight_until {
        if replicas(&member, &namespace).await != Some(5) {
            scale(&hub, &namespace, 5);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drift = drift_until(&hub, "the repair suppressed", |d| {
        d.action == "RepairSuppressed"
    })
    .await;
    assert_eq!(paths_of(&drift, "Deployment"), ["/spec/replicas"]);
    // Three repairs at most within ten minutes: revisions 2, 3 and 4.
    assert_eq!(revision(&hub, &namespace), 4);
    assert_eq!(replicas(&member, &namespace).await, Some(5));
    let reasons = event_reasons(&hub).await;
    assert!(
        reasons.iter().any(|r| r == "DriftRepairSuppressed"),
        "{reasons:?}"
    );
}
