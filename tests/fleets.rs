//! Fleets that differ, against the lab: values rendered per cluster from its registration,
//! per-cluster overrides, `valuesFrom` hub Secrets allowed by a policy and masked everywhere, a
//! label change upgrading only its cluster, a Secret change upgrading only its readers.

mod common;

use std::{collections::BTreeMap, path::Path};

use common::{
    fixtures::{DEADLINE, chart, message, ready, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Event, Secret},
};
use kube::{
    Api,
    api::{ListParams, ObjectMeta, Patch, PatchParams},
};
use serde_json::json;
use tenancy_hub::api::{
    crd::{Chart, ChartOverride, ClusterSelector, ControllerSpec, ValuesKind, ValuesReference},
    policy::ValuesRule,
};

/// The registration file: member-1 in `east` (prod, with a `replicas` variable), member-2 in
/// `region2`.
fn registration(lab: &common::lab::Lab, region2: &str) -> String {
    let k = lab.kubeconfig_path();
    let k = k.display();
    format!(
        "clusters:
  - name: member-1
    context: member-1
    kubeconfig: {k}
    labels: {{region: east, tier: prod}}
    variables: {{replicas: 2, zone: east-1a}}
  - name: member-2
    context: member-2
    kubeconfig: {k}
    labels: {{region: {region2}}}
"
    )
}

/// Applies a hub Secret `name` holding `values.yaml`, labelled as the policy allows when `allowed`.
async fn secret(hub: &Hub, namespace: &str, name: &str, values: &str, allowed: bool) {
    let labels = allowed.then(|| BTreeMap::from([("values".to_owned(), "true".to_owned())]));
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels,
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "values.yaml".to_owned(),
            ByteString(values.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(hub.client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("tenancy-hub-tests").force(),
            &Patch::Apply(&s),
        )
        .await
        .unwrap();
}

/// The chart every cluster gets: values from its registration, its own credentials Secret, and
/// an override for the prod clusters.
fn fleet_chart() -> Chart {
    Chart {
        values: Some(json!({
            "podAnnotations": {
                "owner": "${cluster.name}",
                "region": "${cluster.labels.region}",
                "zone": "${cluster.variables.zone:=none}",
                "tenancy": "${tenancy.namespace}/${controller.name}"
            },
            "replicaCount": "${cluster.variables.replicas:=1}"
        })),
        values_from: vec![ValuesReference {
            kind: ValuesKind::Secret,
            name: "creds-${cluster.name}".into(),
            ..Default::default()
        }],
        overrides: vec![ChartOverride {
            cluster_selector: ClusterSelector {
                match_labels: BTreeMap::from([("tier".to_owned(), "prod".to_owned())]),
            },
            values: Some(json!({"podAnnotations": {"tier": "prod"}})),
            settings: Vec::new(),
            post_renderers: Vec::new(),
            values_files: Vec::new(),
        }],
        ..chart("deployment-example", "web", &[])
    }
}

fn spec(ns: &str, chart: Chart) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(ns, &["member-1", "member-2"], vec![chart])],
        ..Default::default()
    }
}

/// Everything a reader of the hub could see of the test: the Controllers' status, the hub
/// namespace's Events and the operator's log.
async fn visible(hub: &Hub) -> String {
    let controllers = hub.api().list(&ListParams::default()).await.unwrap();
    let events = Api::<Event>::namespaced(hub.client.clone(), &hub.namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    format!(
        "{}\n{}\n{}",
        serde_json::to_string(&controllers.items).unwrap(),
        serde_json::to_string(&events.items).unwrap(),
        hub.log()
    )
}

/// Runs `tenancy-hub diff -o json` against `registration`: its stdout and stderr.
fn diff(hub: &Hub, registration: &Path, name: &str, spec: &ControllerSpec) -> String {
    let out = hub.diff(registration, name, spec, &[]);
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn values_differ_per_cluster_and_change_only_where_their_source_changed() {
    let lab = common::lab::Lab::get();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clusters.yaml");
    std::fs::write(&file, registration(&lab, "west")).unwrap();
    let hub = Hub::with_args("fleets", &["--clusters", file.to_str().unwrap()]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.values_from = vec![ValuesRule {
        kind: Some(ValuesKind::Secret),
        match_labels: BTreeMap::from([("values".to_owned(), "true".to_owned())]),
        ..Default::default()
    }];
    hub.policy(&hub.namespace, policy).await;
    let (token1, token2) = (unique("s3cr3t-one"), unique("s3cr3t-two"));
    secret(
        &hub,
        &hub.namespace,
        "creds-member-1",
        &format!("podAnnotations:\n  token: {token1}\n"),
        true,
    )
    .await;
    secret(
        &hub,
        &hub.namespace,
        "creds-member-2",
        &format!("podAnnotations:\n  token: {token2}\n"),
        true,
    )
    .await;
    let ns = unique("fleet");
    hub.apply("dns", spec(&ns, fleet_chart())).await;
    let status = hub
        .status_until("dns", "the fleet to be Ready", ready)
        .await;
    // The status shows each cluster's values, the Secret's masked.
    let shown = &message(&status, "member-1", "web").unwrap().values;
    assert!(shown.contains(r#""owner":"member-1""#), "{shown}");
    assert!(shown.contains(r#""token":"******""#), "{shown}");
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    hub.releases_become("member-2", &ns, &[("web", 1)]).await;

    let one = lab.values("member-1", &ns, "web");
    let two = lab.values("member-2", &ns, "web");
    let tenancy = format!("{ns}/dns");
    assert_eq!(
        one["podAnnotations"],
        json!({"owner": "member-1", "region": "east", "zone": "east-1a", "tenancy": tenancy, "tier": "prod", "token": token1})
    );
    assert_eq!(one["replicaCount"], json!(2), "a variable keeps its type");
    assert_eq!(
        two["podAnnotations"],
        json!({"owner": "member-2", "region": "west", "zone": "none", "tenancy": tenancy, "token": token2})
    );

    // A label change on member-2 upgrades only member-2's release.
    std::fs::write(&file, registration(&lab, "north")).unwrap();
    hub.releases_become("member-2", &ns, &[("web", 2)]).await;
    assert_eq!(
        lab.values("member-2", &ns, "web")["podAnnotations"]["region"],
        json!("north")
    );
    // A Secret change upgrades only the release that reads it.
    let token1b = unique("s3cr3t-one-b");
    secret(
        &hub,
        &hub.namespace,
        "creds-member-1",
        &format!("podAnnotations:\n  token: {token1b}\n"),
        true,
    )
    .await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    assert_eq!(
        lab.values("member-1", &ns, "web")["podAnnotations"]["token"],
        json!(token1b)
    );
    hub.status_until("dns", "the fleet to be Ready again", ready)
        .await;
    assert_eq!(
        lab.releases("member-2", &ns)["web"].0,
        2,
        "member-2 read nothing that changed"
    );

    // A preview plans with the same values and shows none of the Secrets' content, though the
    // Deployments it shows carry it in their pods' annotations.
    let mut changed = fleet_chart();
    // Next to the Secret's annotation, so the diff's context shows that line.
    changed.values.as_mut().unwrap()["podAnnotations"]["tok"] = json!("yes");
    let preview = diff(&hub, &file, "dns", &spec(&ns, changed));
    assert!(
        preview.contains(r#"+        \"tok\": \"yes\""#),
        "the diff shows the change: {preview}"
    );
    assert!(
        preview.contains(r#"\"token\": \"******\""#),
        "the diff masks the Secret's value: {preview}"
    );
    assert!(
        preview.contains(r#"\"owner\":\"member-2\""#),
        "the diff shows each cluster's values: {preview}"
    );
    for token in [&token1, &token2, &token1b] {
        assert!(
            !preview.contains(token.as_str()),
            "diff shows a Secret's value: {preview}"
        );
        assert!(
            !visible(&hub).await.contains(token.as_str()),
            "a Secret's value is visible on the hub"
        );
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn values_are_read_only_where_a_policy_allows_and_a_missing_one_holds_the_release() {
    let lab = common::lab::Lab::get();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clusters.yaml");
    std::fs::write(&file, registration(&lab, "west")).unwrap();
    let hub = Hub::with_args("fleets-refused", &["--clusters", file.to_str().unwrap()]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.values_from = vec![ValuesRule {
        kind: Some(ValuesKind::Secret),
        names: vec!["allowed".into()],
        ..Default::default()
    }];
    hub.policy(&hub.namespace, policy).await;
    let hidden = unique("s3cr3t-hidden");
    secret(
        &hub,
        &hub.namespace,
        "not-allowed",
        &format!("token: {hidden}\n"),
        true,
    )
    .await;
    // Another hub namespace, with a Secret of the same name the policy would allow.
    let elsewhere = unique("fleets-elsewhere");
    common::hub::create_namespace(&hub.client, &elsewhere).await;
    secret(
        &hub,
        &elsewhere,
        "allowed",
        &format!("token: {hidden}\n"),
        true,
    )
    .await;
    let ns = unique("refused");
    // The tenant may write Controllers in its hub namespace and read nothing there: what the
    // operator reads for it, it reads only where a policy allows.
    let tenant = unique("tenant");
    hub.tenant_may_write_controllers(&tenant).await;
    let reading = |name: &str| Chart {
        values_from: vec![ValuesReference {
            kind: ValuesKind::Secret,
            name: name.into(),
            ..Default::default()
        }],
        ..chart("deployment-example", "web", &[])
    };
    hub.apply_as(&tenant, "refused", spec(&ns, reading("not-allowed")))
        .await;
    let status = hub
        .status_until(
            "refused",
            "the refusal to be reported on both clusters",
            |s| {
                ["member-1", "member-2"].iter().all(|c| {
                    message(s, c, "web").is_some_and(|m| {
                        m.phase == "Invalid" && m.error_message.contains("may not be read")
                    })
                })
            },
        )
        .await;
    assert!(
        lab.releases("member-1", &ns).is_empty(),
        "nothing was installed"
    );
    let said = &message(&status, "member-1", "web").unwrap().error_message;
    assert!(
        said.contains(&format!("Secret {}/not-allowed", hub.namespace)),
        "{said}"
    );

    // `allowed` exists only in the other namespace: in its own, it is missing, and waits.
    hub.apply_as(&tenant, "refused", spec(&ns, reading("allowed")))
        .await;
    hub.status_until("refused", "the missing Secret to be reported", |s| {
        message(s, "member-1", "web")
            .is_some_and(|m| m.phase == "Invalid" && m.error_message.contains("does not exist"))
    })
    .await;
    // Creating it in the Controller's namespace delivers, without another spec change.
    secret(
        &hub,
        &hub.namespace,
        "allowed",
        "token: now-present\n",
        false,
    )
    .await;
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    hub.releases_become("member-2", &ns, &[("web", 1)]).await;
    assert_eq!(
        lab.values("member-1", &ns, "web")["token"],
        json!("now-present")
    );
    wait_until("the refusal to clear", DEADLINE, || async {
        let c = hub.api().get("refused").await.ok()?;
        ready(c.status.as_ref()?).then_some(())
    })
    .await;
    assert!(
        !visible(&hub).await.contains(&hidden),
        "a refused Secret's value is visible"
    );
}
