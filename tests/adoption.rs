//! End-to-end tests of adoption: a release installed by hand with the real helm taken over without an outage, only where a policy allows it, never across tenants.

mod common;

use std::{collections::BTreeMap, path::Path};

use common::{
    fixtures::{DEADLINE, chart, message, tenancy, unique, wait_until},
    hub::{Hub, impersonating},
};
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::{Api, api::ListParams};
use tenancy_hub::api::{
    crd::{Chart, ControllerSpec, ControllerStatus, TenancyController},
    policy::{Impersonation, TenancyPolicySpec},
};

/// The label the operator of [`Hub::two_teams`] selects its Controllers by.
const LABEL: &str = "adoption-test";

/// Controller `name` asking for `web` (one replica, as installed by hand) in `namespace` of
/// member-1, taking it over; labelled for the operator of `id`.
fn adopting(name: &str, namespace: &str, id: &str) -> TenancyController {
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            &["member-1"],
            vec![Chart {
                adopt: true,
                ..chart("deployment-example", "web", &[("replicaCount", "1")])
            }],
        )],
        ..Default::default()
    };
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some(BTreeMap::from([(LABEL.into(), id.into())]));
    c
}

/// The policy of a team's hub namespace `hub_namespace`: target namespaces `pattern` on the
/// members, as its own `deployer` (admin there), adoption allowed when `allow`.
fn team_policy(
    hub_namespace: &str,
    pattern: &[&str],
    deployer: &str,
    allow: bool,
) -> TenancyPolicySpec {
    let who = Impersonation {
        user: deployer.into(),
        groups: Vec::new(),
        namespace_role: Some("admin".into()),
    };
    TenancyPolicySpec {
        allow_adoption: allow,
        ..impersonating(hub_namespace, pattern, who)
    }
}

/// The message of `web` on member-1 for Controller `name` of `namespace`, once its phase is
/// `phase`; the last phase and message seen when it never is.
async fn phase_of(hub: &Hub, namespace: &str, name: &str, phase: &str) -> String {
    let api: Api<TenancyController> = Api::namespaced(hub.client.clone(), namespace);
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut last = None;
    while std::time::Instant::now() < deadline {
        let status: Option<ControllerStatus> = api.get(name).await.ok().and_then(|c| c.status);
        if let Some(m) = status.as_ref().and_then(|s| message(s, "member-1", "web")) {
            if m.phase == phase {
                return m.error_message.clone();
            }
            last = Some((m.phase.clone(), m.error_message.clone()));
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("{namespace}/{name}'s web never became {phase}; last seen: {last:?}");
}

/// The UIDs of the pods in `namespace` of member-1.
async fn pod_uids(hub: &Hub, namespace: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(hub.lab.client("member-1").await, namespace);
    let mut uids: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    uids.sort();
    uids
}

/// The labels of `web`'s release records in `namespace` of member-1, by revision.
async fn records(hub: &Hub, namespace: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let secrets: Api<Secret> = Api::namespaced(hub.lab.client("member-1").await, namespace);
    let found = secrets
        .list(&ListParams::default().labels("owner=helm,name=web"))
        .await
        .unwrap();
    found
        .items
        .into_iter()
        .map(|s| {
            let labels = s.metadata.labels.unwrap_or_default();
            (labels["version"].clone(), labels)
        })
        .collect()
}

/// Installs `web` (one replica) by hand with the real helm into `namespace` of member-1,
/// labelled as Flux labels the releases it installs, grants `deployer` admin there as the
/// namespace's admins would, and returns the UID of its pod once it runs.
async fn install_by_hand(hub: &Hub, ns: &str, deployer: &str) -> Vec<String> {
    let chart_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    let chart_dir = chart_dir.to_str().unwrap();
    hub.lab.helm(
        "member-1",
        &[
            "install",
            "web",
            chart_dir,
            "-n",
            ns,
            "--create-namespace",
            "--set",
            "replicaCount=1",
            "--labels",
            "helm.toolkit.fluxcd.io/name=web",
        ],
    );
    // The namespace existed before tenancy-hub: its admins grant the identity its rights.
    let binding = format!("--user={deployer}");
    hub.lab.kubectl(
        "member-1",
        &[
            "-n",
            ns,
            "create",
            "rolebinding",
            "team-admin",
            "--clusterrole=admin",
            &binding,
        ],
    );
    wait_until("the hand-installed pod", DEADLINE, || async {
        let uids = pod_uids(hub, ns).await;
        (uids.len() == 1).then_some(uids)
    })
    .await
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_hand_installed_release_is_adopted_without_an_outage_only_where_allowed_and_never_across_tenants()
 {
    let id = unique("adopt");
    let (hub, team_b) = Hub::two_teams(&id, LABEL, &[]).await;
    let (deployer_a, deployer_b) = (format!("{id}-a-deployer"), format!("{id}-b-deployer"));
    let (own_a, own_b) = (format!("{id}-a-*"), format!("{id}-b-*"));
    hub.policy(
        &hub.namespace,
        team_policy(&hub.namespace, &[&own_a], &deployer_a, false),
    )
    .await;
    hub.policy(&team_b, team_policy(&team_b, &[&own_b], &deployer_b, true))
        .await;

    let ns = format!("{id}-a-shop");
    let running = install_by_hand(&hub, &ns, &deployer_a).await;

    // Asked to adopt, but team a's policy does not allow adoption: a conflict saying why.
    hub.apply_in(&hub.namespace, &adopting("shop", &ns, &id))
        .await;
    let why = phase_of(&hub, &hub.namespace, "shop", "Conflict").await;
    assert!(why.contains("does not set allowAdoption"), "{why}");
    assert_eq!(
        hub.lab.releases("member-1", &ns)["web"],
        (1, "deployed".into())
    );

    // Allowed: one ordinary upgrade, sealed and owned, and the pod is the same pod.
    hub.policy(
        &hub.namespace,
        team_policy(&hub.namespace, &[&own_a], &deployer_a, true),
    )
    .await;
    phase_of(&hub, &hub.namespace, "shop", "Deployed").await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    let after = records(&hub, &ns).await;
    let newest = &after["2"];
    assert!(newest.contains_key("multitenancy.dev/seal"), "{newest:?}");
    assert_eq!(newest["multitenancy.dev/controller-name"], "shop");
    assert!(
        !newest.contains_key("helm.toolkit.fluxcd.io/name"),
        "{newest:?}"
    );
    assert_eq!(pod_uids(&hub, &ns).await, running, "no pod was replaced");
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let adopted = wait_until("the Adopted event", DEADLINE, || async {
        let all = events.list(&ListParams::default()).await.ok()?.items;
        all.into_iter()
            .find(|e| e.reason.as_deref() == Some("Adopted"))
            .and_then(|e| e.message)
    })
    .await;
    assert!(
        adopted.contains("helm.toolkit.fluxcd.io/name=web"),
        "{adopted}"
    );

    // Team b, adopting in a namespace its policy does not allow: forbidden.
    let grab = adopting("grab", &ns, &id);
    hub.apply_in(&team_b, &grab).await;
    let why = phase_of(&hub, &team_b, "grab", "Forbidden").await;
    assert!(why.contains("not allowed"), "{why}");
    // Even where a policy lets team b reach the namespace and adopt there, team a's sealed
    // release is never taken over.
    hub.policy(
        &team_b,
        team_policy(&team_b, &[&own_b, &ns], &deployer_b, true),
    )
    .await;
    let why = phase_of(&hub, &team_b, "grab", "Conflict").await;
    assert!(
        why.contains(&format!("Controller {}/shop", hub.namespace)),
        "{why}"
    );
    assert_eq!(
        records(&hub, &ns).await,
        after,
        "nothing changed on the member"
    );
    assert_eq!(pod_uids(&hub, &ns).await, running);

    let controllers: Api<TenancyController> = Api::namespaced(hub.client.clone(), &team_b);
    controllers
        .delete("grab", &Default::default())
        .await
        .unwrap();
    hub.delete_and_wait_gone("shop").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_helm_binary_path_refuses_an_adoption_with_the_reason_and_changes_nothing() {
    let id = unique("adoptcli");
    let (hub, _) = Hub::two_teams(&id, LABEL, &["--executor", "cli"]).await;
    let deployer = format!("{id}-a-deployer");
    let policy = team_policy(&hub.namespace, &[&format!("{id}-a-*")], &deployer, true);
    hub.policy(&hub.namespace, policy).await;
    let ns = format!("{id}-a-shop");
    let running = install_by_hand(&hub, &ns, &deployer).await;
    let before = records(&hub, &ns).await;

    hub.apply_in(&hub.namespace, &adopting("shop", &ns, &id))
        .await;
    let why = phase_of(&hub, &hub.namespace, "shop", "Failed").await;
    assert!(why.contains("needs the tenancy-hub-helm executor"), "{why}");
    assert_eq!(
        records(&hub, &ns).await,
        before,
        "nothing changed on the member"
    );
    assert_eq!(pod_uids(&hub, &ns).await, running);
    hub.delete_and_wait_gone("shop").await;
    assert_eq!(
        hub.lab.releases("member-1", &ns)["web"],
        (1, "deployed".into()),
        "never uninstalled: it was never the Controller's"
    );
}
