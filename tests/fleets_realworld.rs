//! Fleets that differ, with a real-world chart no one here wrote: ExternalDNS's own Helm chart
//! (fetched by `kind/real-chart.sh` from the Go module `sigs.k8s.io/external-dns`, pinned there)
//! delivered to two members, each with values rendered from its own registration, a values
//! Secret of the hub read through `valuesFrom` under a TenancyPolicy's `valuesFrom` rule, and
//! that Secret's content kept out of everything the hub shows.

mod common;

use std::{collections::BTreeMap, path::PathBuf};

use common::{
    fixtures::{DEADLINE, message, real_chart_home, unique, wait_until},
    hub::{Hub, allow_all},
    lab::Lab,
};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{Event, Secret},
    },
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tenancy_hub::api::{
    crd::{
        Chart, ChartOverride, ClusterSelector, ControllerSpec, Tenancy, ValuesKind, ValuesReference,
    },
    policy::ValuesRule,
};

/// The chart's directory name under the chart home `kind/real-chart.sh` makes.
const CHART: &str = "external-dns";

/// The release that renders and runs.
const RELEASE: &str = "dns";

/// A release whose values from the Secret make an object the member's API server refuses, with
/// the Secret's value quoted in the refusal.
const REFUSED: &str = "dns-refused";

/// The hub Secret the releases read values from.
const SECRET: &str = "dns-credentials";

/// A registration file of the lab's two members with labels and variables of their own:
/// member-1 in region east with no variables (so defaults apply), member-2 in region west with
/// an `interval` variable.
fn registration(lab: &Lab, dir: &std::path::Path) -> PathBuf {
    let kubeconfig = lab.kubeconfig_path();
    let k = kubeconfig.display();
    let file = dir.join("clusters.yaml");
    std::fs::write(
        &file,
        format!(
            "clusters:
  - name: member-1
    context: member-1
    kubeconfig: {k}
    labels: {{region: east}}
  - name: member-2
    context: member-2
    kubeconfig: {k}
    labels: {{region: west}}
    variables: {{interval: 2m, provider: inmemory}}
"
        ),
    )
    .unwrap();
    file
}

/// The Secret's content: a values document for the chart (a provider token in the container's
/// environment) under `values.yaml`, and one giving the pods a label no API server accepts
/// under `refused.yaml`.
fn secret(token: &str, refused: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(SECRET.into());
    s.data = Some(BTreeMap::from([
        (
            "values.yaml".to_owned(),
            ByteString(format!("env:\n  - name: EXAMPLE_API_TOKEN\n    value: {token}\n").into()),
        ),
        (
            "refused.yaml".to_owned(),
            ByteString(format!("podLabels:\n  team: \"{refused} has spaces\"\n").into()),
        ),
    ]));
    s
}

/// The Controller: the chart twice in one tenancy on both members, values referring to each
/// cluster's registration and the tenancy, an override for region west, and the Secret.
fn spec(namespace: &str) -> ControllerSpec {
    let from = |key: &str| ValuesReference {
        kind: ValuesKind::Secret,
        name: SECRET.into(),
        values_key: Some(key.into()),
        ..Default::default()
    };
    let values = json!({
        "txtOwnerId": "${cluster.name}",
        "domainFilters": ["${cluster.labels.region}.example.com"],
        "provider": {"name": "${cluster.variables.provider:=inmemory}"},
        "interval": "${cluster.variables.interval:=1m}",
        "policy": "sync",
        // Watches only the tenancy's namespace, as a tenant's own ExternalDNS would.
        "namespaced": true,
        "sourceNamespace": "${tenancy.namespace}",
        "deploymentAnnotations": {"delivered-by": "${controller.namespace}/${controller.name}"},
        // The chart names its ClusterRole after this: one of the run's own.
        "fullnameOverride": "${tenancy.namespace}-dns",
    });
    let dns = Chart {
        chart_name: CHART.into(),
        release_name: Some(RELEASE.into()),
        values: Some(values.clone()),
        values_from: vec![from("values.yaml")],
        overrides: vec![ChartOverride {
            cluster_selector: ClusterSelector {
                match_labels: BTreeMap::from([("region".into(), "west".into())]),
            },
            values: Some(json!({"logLevel": "debug"})),
            ..Default::default()
        }],
        ..Default::default()
    };
    let refused = Chart {
        chart_name: CHART.into(),
        release_name: Some(REFUSED.into()),
        values: Some(json!({
            "policy": "sync",
            "txtOwnerId": "${cluster.name}",
            "fullnameOverride": "${tenancy.namespace}-refused",
        })),
        values_from: vec![from("refused.yaml")],
        ..Default::default()
    };
    ControllerSpec {
        tenancies: vec![Tenancy {
            namespace: namespace.into(),
            clusters: vec!["member-1".into(), "member-2".into()],
            charts: vec![dns, refused],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The user-supplied values of `release` in `namespace` of `cluster`, once helm lists it
/// deployed at `revision`.
async fn deployed_values(
    hub: &Hub,
    cluster: &str,
    namespace: &str,
    release: &str,
    revision: i64,
) -> Value {
    let what = format!("{release} deployed at revision {revision} on {cluster}");
    wait_until(&what, DEADLINE, || async {
        let listed = hub.lab.releases(cluster, namespace);
        (listed.get(release) == Some(&(revision, "deployed".to_owned()))).then_some(())
    })
    .await;
    hub.lab.values(cluster, namespace, release)
}

/// The `external-dns` container of the release's Deployment on `cluster`: its args and its
/// environment (name → value).
async fn container(
    hub: &Hub,
    cluster: &str,
    namespace: &str,
) -> (Vec<String>, BTreeMap<String, String>) {
    let deployments: Api<Deployment> = Api::namespaced(hub.lab.client(cluster).await, namespace);
    let name = format!("{namespace}-dns");
    let d = deployments.get(&name).await.unwrap();
    let c = d
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .find(|c| c.name == CHART)
        .expect("the Deployment has the external-dns container");
    let env = c
        .env
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    (c.args.unwrap_or_default(), env)
}

/// Everything the hub shows of the Controller and the namespace's Events, as text.
async fn shown_on_hub(hub: &Hub, name: &str) -> String {
    let controller = hub.api().get(name).await.unwrap();
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let events = events.list(&ListParams::default()).await.unwrap();
    format!(
        "{}\n{}",
        serde_json::to_string(&controller).unwrap(),
        serde_json::to_string(&events.items).unwrap()
    )
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_real_world_chart_is_delivered_with_each_clusters_own_values_and_a_masked_secret() {
    let lab = Lab::get();
    let home = real_chart_home(&lab, CHART);
    assert!(
        home.join(CHART).join("Chart.yaml").is_file(),
        "no {CHART} chart in {}",
        home.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let clusters = registration(&lab, dir.path());
    let hub = Hub::with_args(
        "fleet-real",
        &[
            "--chart-home",
            home.to_str().unwrap(),
            "--clusters",
            clusters.to_str().unwrap(),
            "--tenancy-policy",
            "enforce",
        ],
    )
    .await;
    let ns = unique("dns");
    let name = "external-dns";
    // Long and unique, so finding them anywhere means they leaked from here.
    let token = unique("tok-s3cr3t");
    let refused = unique("lbl-s3cr3t");

    // The admin lets this hub namespace deliver, and read values from this one Secret only.
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.values_from = vec![ValuesRule {
        kind: Some(ValuesKind::Secret),
        names: vec![SECRET.into()],
        ..Default::default()
    }];
    hub.policy(&hub.namespace, policy).await;
    let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let apply = PatchParams::apply("tenancy-hub-tests").force();
    secrets
        .patch(SECRET, &apply, &Patch::Apply(&secret(&token, &refused)))
        .await
        .expect("the values Secret applies");
    hub.apply(name, spec(&ns)).await;

    // Each member runs the chart with its own values and the Secret's.
    let expected = [
        ("member-1", "east", "1m", None),
        ("member-2", "west", "2m", Some("debug")),
    ];
    for (cluster, region, interval, log_level) in expected {
        let values = deployed_values(&hub, cluster, &ns, RELEASE, 1).await;
        assert_eq!(values["txtOwnerId"], cluster, "{cluster}: {values}");
        assert_eq!(
            values["domainFilters"],
            json!([format!("{region}.example.com")]),
            "{cluster}: {values}"
        );
        assert_eq!(values["interval"], interval, "{cluster}: {values}");
        assert_eq!(
            values["provider"]["name"], "inmemory",
            "{cluster}: {values}"
        );
        assert_eq!(
            values["sourceNamespace"],
            ns.as_str(),
            "{cluster}: {values}"
        );
        assert_eq!(
            values["deploymentAnnotations"]["delivered-by"],
            format!("{}/{name}", hub.namespace),
            "{cluster}: {values}"
        );
        assert_eq!(
            values.get("logLevel").and_then(Value::as_str),
            log_level,
            "{cluster}: the override selects region west only: {values}"
        );
        assert_eq!(
            values["env"],
            json!([{"name": "EXAMPLE_API_TOKEN", "value": token}]),
            "{cluster}: the Secret's values: {values}"
        );
        let (args, env) = container(&hub, cluster, &ns).await;
        for arg in [
            format!("--txt-owner-id={cluster}"),
            format!("--domain-filter={region}.example.com"),
            format!("--interval={interval}"),
            format!("--namespace={ns}"),
            "--provider=inmemory".to_owned(),
        ] {
            assert!(args.contains(&arg), "{cluster}: no {arg} in {args:?}");
        }
        assert_eq!(
            env.get("EXAMPLE_API_TOKEN"),
            Some(&token),
            "{cluster}: the Deployment's environment"
        );
    }

    // The release whose object the members refuse fails, and the refusal (which quotes the
    // Secret's value) is reported masked.
    let status = hub
        .status_until(name, "the refused release reported on both members", |s| {
            ["member-1", "member-2"].iter().all(|c| {
                message(s, c, REFUSED).is_some_and(|m| m.phase == "Failed")
                    && message(s, c, RELEASE).is_some_and(|m| m.phase == "Deployed")
            })
        })
        .await;
    for cluster in ["member-1", "member-2"] {
        let m = message(&status, cluster, REFUSED).unwrap();
        assert!(
            m.error_message.contains("******"),
            "{cluster}: the refusal is shown with the Secret's value masked: {}",
            m.error_message
        );
    }
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    wait_until(
        "a Failed Event for the refused release, masked",
        DEADLINE,
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("Failed")
                        && e.message.as_deref().is_some_and(|m| {
                            m.contains(&format!("/{REFUSED}")) && m.contains("******")
                        })
                })
                .then_some(())
        },
    )
    .await;
    let shown = shown_on_hub(&hub, name).await;
    for secret_value in [&token, &refused] {
        assert!(
            !shown.contains(secret_value.as_str()),
            "the Secret's value {secret_value} shows on the hub:\n{shown}"
        );
        assert!(
            !hub.log().contains(secret_value.as_str()),
            "the Secret's value {secret_value} is in the operator's log"
        );
    }

    // A new token in the Secret reaches both members: its metadata watch wakes the Controller.
    let rotated = unique("tok-s3cr3t-rotated");
    secrets
        .patch(SECRET, &apply, &Patch::Apply(&secret(&rotated, &refused)))
        .await
        .unwrap();
    for cluster in ["member-1", "member-2"] {
        let values = deployed_values(&hub, cluster, &ns, RELEASE, 2).await;
        assert_eq!(
            values["env"],
            json!([{"name": "EXAMPLE_API_TOKEN", "value": rotated}]),
            "{cluster}: the rotated Secret's values: {values}"
        );
        assert_eq!(values["txtOwnerId"], cluster, "{cluster}: {values}");
        let (_, env) = container(&hub, cluster, &ns).await;
        assert_eq!(env.get("EXAMPLE_API_TOKEN"), Some(&rotated), "{cluster}");
    }
    let shown = shown_on_hub(&hub, name).await;
    assert!(
        !shown.contains(rotated.as_str()) && !hub.log().contains(rotated.as_str()),
        "the rotated value shows on the hub or in the log"
    );

    hub.delete_and_wait_gone(name).await;
    for cluster in ["member-1", "member-2"] {
        assert!(
            hub.lab.releases(cluster, &ns).is_empty(),
            "{cluster}: releases left after the Controller's deletion"
        );
    }
}
