//! End-to-end tests of the lab itself: real API servers, RBAC, schedulers, kwok, and the CRD.

mod common;

use std::time::Duration;

use common::{
    fixtures::{create_seed, seed_example, unique, wait_until},
    hub::install_crd,
    lab::Lab,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Pod},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, PostParams},
};
use tenancy_hub::api::crd::TenancyController;

fn controller_from_yaml(yaml: &str) -> TenancyController {
    serde_yaml::from_str(yaml).expect("test resource parses")
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn every_cluster_answers_readyz() {
    let lab = Lab::get();
    let contexts = lab.contexts();
    assert!(
        contexts.len() >= 3,
        "expected hub and at least two members, got {contexts:?}"
    );
    for context in contexts {
        let client = lab.client(&context).await;
        let body = client
            .request_text(http::Request::get("/readyz").body(vec![]).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{context}: /readyz failed: {e}"));
        assert_eq!(body, "ok", "{context}: /readyz said {body:?}");
        let version = client.apiserver_version().await.unwrap();
        assert!(
            version.git_version.starts_with("v1."),
            "{context}: version {}",
            version.git_version
        );
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn each_context_reaches_a_different_cluster() {
    let lab = Lab::get();
    let contexts = lab.contexts();
    let name = unique("whoami");
    for context in &contexts {
        let cms: Api<ConfigMap> = Api::namespaced(lab.client(context).await, "default");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("{name}-{context}"));
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    for context in &contexts {
        let cms: Api<ConfigMap> = Api::namespaced(lab.client(context).await, "default");
        for other in &contexts {
            let found = cms
                .get_opt(&format!("{name}-{other}"))
                .await
                .unwrap()
                .is_some();
            assert_eq!(
                found,
                context == other,
                "context {context} sees the object made in {other}: {found}"
            );
        }
    }
    for context in &contexts {
        let cms: Api<ConfigMap> = Api::namespaced(lab.client(context).await, "default");
        cms.delete(&format!("{name}-{context}"), &DeleteParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn rbac_is_enforced_for_unprivileged_identities() {
    let lab = Lab::get();
    let client = lab.client("member-1").await;
    let pods: Api<Pod> = Api::namespaced(client, "kube-system");
    let impersonated = {
        let options = kube::config::KubeConfigOptions {
            context: Some("member-1".into()),
            ..Default::default()
        };
        let mut config = kube::Config::from_custom_kubeconfig(lab.kubeconfig.clone(), &options)
            .await
            .unwrap();
        config.auth_info.impersonate = Some("system:serviceaccount:default:default".into());
        Client::try_from(config).unwrap()
    };
    pods.list(&ListParams::default())
        .await
        .expect("the admin may list pods");
    let denied = Api::<Pod>::namespaced(impersonated, "kube-system")
        .list(&ListParams::default())
        .await
        .expect_err("a service account without roles may not list pods");
    assert!(denied.to_string().contains("forbidden"), "{denied}");
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_crd_installs_and_accepts_the_seed_example() {
    let lab = Lab::get();
    let hub = lab.client("hub").await;
    install_crd(&hub).await;
    let ns = unique("seed");
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(ns.clone());
    namespaces.create(&PostParams::default(), &n).await.unwrap();

    let created = create_seed(&Api::namespaced(hub.clone(), &ns)).await;
    assert_eq!(
        created.spec,
        seed_example().spec,
        "the API server kept the seed's spec as written"
    );
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_api_server_rejects_invalid_controllers_with_readable_messages() {
    let lab = Lab::get();
    let hub = lab.client("hub").await;
    install_crd(&hub).await;
    let api: Api<TenancyController> = Api::namespaced(hub, "default");
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let long = "r".repeat(54);
    let long_ns = "n".repeat(60);
    let cases = [
        ("Foo_Bar", "- chartName: a", "must be a DNS-1123 label"),
        (
            "foo",
            "- {chartName: a, releaseName: x}\n        - {chartName: b, releaseName: x}",
            "release names must be unique within a tenancy",
        ),
        (
            "foo",
            "- {chartName: a}\n        - {chartName: b}",
            "release names must be unique within a tenancy",
        ),
        (
            "foo",
            "- {chartName: a, settings: [{key: '', value: v}]}",
            "spec.tenancies[0].charts[0].settings[0].key",
        ),
        (
            "foo",
            &format!("- {{chartName: a, releaseName: {long}}}"),
            "53",
        ),
        (
            &long_ns,
            "- {chartName: a}",
            "limited to 53 characters: set releaseName",
        ),
        (
            "foo",
            "- {chartName: a, releaseName: Bad_Name}",
            "must be a valid Helm release name",
        ),
    ];
    for (namespace, charts, expected) in cases {
        let yaml = format!(
            "apiVersion: multitenancy.dev/v1alpha1\nkind: Controller\nmetadata: {{name: bad}}\nspec:\n  tenancies:\n    - namespace: {namespace}\n      charts:\n        {charts}\n"
        );
        let err = api
            .create(&dry_run, &controller_from_yaml(&yaml))
            .await
            .expect_err(&format!(
                "the API server accepted an invalid resource:\n{yaml}"
            ));
        let msg = err.to_string();
        assert!(
            msg.contains(expected),
            "expected {expected:?} in the rejection of\n{yaml}\ngot: {msg}"
        );
        assert!(
            msg.contains("spec.tenancies[0]"),
            "the rejection names the field: {msg}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_deployment_on_member_2_gets_running_pods() {
    let lab = Lab::get();
    let client = lab.client("member-2").await;
    let ns = unique("lab-deploy");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(ns.clone());
    namespaces.create(&PostParams::default(), &n).await.unwrap();

    let deployment: Deployment = serde_yaml::from_str(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: nginx:1.27}]\n",
    )
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let running = wait_until(
        "2 running pods of the deployment on member-2",
        Duration::from_secs(90),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let running: Vec<String> = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            (running.len() == 2).then_some(running)
        },
    )
    .await;
    assert!(
        running
            .iter()
            .all(|node| node.starts_with("kwok-member-2-")),
        "scheduled on {running:?}"
    );
    wait_until(
        "the deployment to report 2 ready replicas",
        Duration::from_secs(60),
        || async {
            let d = deployments.get("web").await.ok()?;
            (d.status?.ready_replicas == Some(2)).then_some(())
        },
    )
    .await;
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// Asserts that `kubectl explain PATH` describes each of `fields` in more than a few words.
fn explains(lab: &Lab, path: &str, fields: &[&str]) {
    let explained = lab.kubectl("hub", &["explain", path]);
    for field in fields {
        let line = explained
            .lines()
            .position(|l| l.trim_start().starts_with(field))
            .unwrap_or_else(|| panic!("{path}.{field} is not explained:\n{explained}"));
        let description = explained.lines().nth(line + 1).unwrap_or_default();
        assert!(
            description.trim().len() > 10,
            "{path}.{field} has no description:\n{explained}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn kubectl_explains_every_chart_and_policy_field_and_lists_controllers_with_columns() {
    let lab = Lab::get();
    install_crd(&lab.client("hub").await).await;
    explains(
        &lab,
        "controllers.spec.tenancies.charts",
        &[
            "chartName",
            "releaseName",
            "version",
            "repo",
            "settings",
            "values",
        ],
    );
    explains(
        &lab,
        "tenancypolicies.spec",
        &[
            "hubNamespaces",
            "clusters",
            "clusterSelector",
            "namespaces",
            "chartSources",
            "impersonate",
        ],
    );
    let listed = lab.kubectl("hub", &["get", "tenctl", "-A"]);
    let header = listed.lines().next().unwrap_or_default();
    for column in ["READY", "CLUSTERS", "RELEASES", "PODS", "AGE"] {
        assert!(
            header.contains(column) || listed.is_empty(),
            "no {column} column in {header:?}"
        );
    }
}
