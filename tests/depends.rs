//! End-to-end tests of `dependsOn`: a release waits for what it depends on to be Ready and says
//! so, a cycle is `Invalid` naming the chain, and dependents are uninstalled first.

mod common;

use std::collections::BTreeMap;

use common::{
    fixtures::{DEADLINE, chart, message, tenancy, unique, wait_until},
    hub::Hub,
    lab::Lab,
};
use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::ListParams};
use tenancy_hub::api::crd::{Chart, ControllerSpec, ControllerStatus};

/// Pods that never become ready: no kwok node has this label.
const UNSCHEDULABLE: (&str, &str) = ("nodeSelector.nowhere", "never");

/// The lab's first member.
fn member(lab: &Lab) -> String {
    lab.contexts()
        .into_iter()
        .find(|c| c != "hub")
        .expect("the lab has a member (kind/up.sh --members 1)")
}

/// A `deployment-example` release `release` with `settings`, depending on `depends_on`.
fn release(release: &str, settings: &[(&str, &str)], depends_on: &[&str]) -> Chart {
    Chart {
        depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
        ..chart("deployment-example", release, settings)
    }
}

/// One tenancy `namespace` on `cluster` with `charts`.
fn spec(namespace: &str, cluster: &str, charts: Vec<Chart>) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(namespace, &[cluster], charts)],
        ..Default::default()
    }
}

/// The phase and message of `release` on `cluster`.
fn said<'a>(status: &'a ControllerStatus, cluster: &str, release: &str) -> (&'a str, &'a str) {
    message(status, cluster, release)
        .map_or(("", ""), |m| (m.phase.as_str(), m.error_message.as_str()))
}

/// The Helm releases in `namespace` of `cluster`, by name.
fn releases(lab: &Lab, cluster: &str, namespace: &str) -> BTreeMap<String, (i64, String)> {
    lab.releases(cluster, namespace)
}

/// A hub namespace named after `prefix` with its operator, and Controller `app` applied there
/// with one tenancy of `charts` on the lab's first member: the hub, the member and the tenancy's
/// namespace.
async fn start(prefix: &str, charts: Vec<Chart>) -> (Hub, String, String) {
    let hub = Hub::new(&format!("depends-{prefix}")).await;
    let m = member(&hub.lab);
    let ns = unique(prefix);
    hub.apply("app", spec(&ns, &m, charts)).await;
    (hub, m, ns)
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_release_waits_for_its_dependency_to_be_ready_and_says_so() {
    let charts = vec![
        release("db", &[UNSCHEDULABLE], &[]),
        release("web", &[], &["db"]),
    ];
    let (hub, m, ns) = start("wait", charts).await;
    let status = hub
        .status_until("app", "web to wait for db, saying why", |s| {
            let (phase, text) = said(s, &m, "web");
            phase == "Pending"
                && text.starts_with("waiting for dependency db (not ready: Deployment")
        })
        .await;
    let (_, text) = said(&status, &m, "web");
    assert!(
        text.contains(&format!("{ns}/db not rolled out (0/1 ready)")),
        "{text}"
    );
    assert_eq!(said(&status, &m, "db").0, "Deployed");
    // db is installed, web is not, and stays so while db's pods are not ready.
    let installed = releases(&hub.lab, &m, &ns);
    assert_eq!(
        installed.keys().collect::<Vec<_>>(),
        ["db"],
        "only the dependency is installed: {installed:?}"
    );
    hub.status_until("app", "several reconciles still holding web", |s| {
        s.updated_tenancies.iter().any(|t| !t.pod_status.is_empty())
            && said(s, &m, "web").0 == "Pending"
    })
    .await;
    assert!(!releases(&hub.lab, &m, &ns).contains_key("web"));

    // Once db's pods can be ready, web follows.
    hub.apply(
        "app",
        spec(
            &ns,
            &m,
            vec![release("db", &[], &[]), release("web", &[], &["db"])],
        ),
    )
    .await;
    hub.releases_become(&m, &ns, &[("db", 2), ("web", 1)]).await;
    hub.status_until("app", "both to be deployed", |s| {
        said(s, &m, "web").0 == "Deployed" && said(s, &m, "db").0 == "Deployed"
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_cycle_makes_its_releases_invalid_naming_the_chain_and_the_rest_goes_on() {
    let charts = vec![
        release("web", &[], &["api"]),
        release("api", &[], &["web"]),
        release("db", &[], &[]),
    ];
    let (hub, m, ns) = start("cycle", charts).await;
    let status = hub
        .status_until("app", "the cycle to be reported and db deployed", |s| {
            said(s, &m, "web").0 == "Invalid"
                && said(s, &m, "api").0 == "Invalid"
                && said(s, &m, "db").0 == "Deployed"
        })
        .await;
    assert!(
        said(&status, &m, "web")
            .1
            .contains("dependsOn forms a cycle: web → api → web"),
        "{status:?}"
    );
    assert!(
        said(&status, &m, "api")
            .1
            .contains("dependsOn forms a cycle: api → web → api")
    );
    let installed = releases(&hub.lab, &m, &ns);
    assert_eq!(
        installed.keys().collect::<Vec<_>>(),
        ["db"],
        "{installed:?}"
    );
}

/// The note of the operator's first `Uninstalled` Event (Events of one reason are counted in one
/// series, which keeps the note of the first).
fn first_uninstalled(events: &[Event]) -> Option<String> {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Uninstalled"))
        .min_by_key(|e| e.event_time.as_ref().map(|t| t.0))
        .and_then(|e| e.message.clone())
}

/// Waits until `namespace` of `cluster` holds no release, checking at every look that db is
/// never gone while web, which depends on it, is still there; then checks that the operator's
/// first `Uninstalled` Event is web's.
async fn dependents_go_first(hub: &Hub, cluster: &str, namespace: &str) {
    wait_until("web, then db, to be uninstalled", DEADLINE, || async {
        let now = releases(&hub.lab, cluster, namespace);
        assert!(
            now.contains_key("db") || !now.contains_key("web"),
            "db was uninstalled while web, which depends on it, is still there: {now:?}"
        );
        now.is_empty().then_some(())
    })
    .await;
    let api: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let first = wait_until("an Uninstalled Event", DEADLINE, || async {
        first_uninstalled(&api.list(&ListParams::default()).await.ok()?.items)
    })
    .await;
    assert_eq!(first, format!("uninstalled {cluster}/{namespace}/web"));
}

/// Releases db and web, web depending on db.
fn db_and_web() -> Vec<Chart> {
    vec![release("db", &[], &[]), release("web", &[], &["db"])]
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn charts_dropped_from_the_spec_are_uninstalled_dependents_first() {
    let (hub, m, ns) = start("drop", db_and_web()).await;
    hub.releases_become(&m, &ns, &[("db", 1), ("web", 1)]).await;

    hub.apply("app", spec(&ns, &m, Vec::new())).await;
    dependents_go_first(&hub, &m, &ns).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_deleted_controller_uninstalls_dependents_first() {
    let (hub, m, ns) = start("delete", db_and_web()).await;
    hub.releases_become(&m, &ns, &[("db", 1), ("web", 1)]).await;

    let api = hub.api();
    api.delete("app", &Default::default()).await.unwrap();
    dependents_go_first(&hub, &m, &ns).await;
    wait_until("the Controller to be gone", DEADLINE, || async {
        api.get_opt("app").await.ok()?.is_none().then_some(())
    })
    .await;
}
