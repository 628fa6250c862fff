//! A real-world chart's CRDs handled on purpose: Sealed Secrets' own chart (from its Go module, by `kind/real-chart.sh`) upgraded with `CreateReplace` on a push and a pull member, left alone by default, forbidden to a tenant whose policy does not list it, and refused when it would drop a stored version.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{
    agent::{deployed_revision, join},
    fixtures::{DEADLINE, message, ready, real_chart_home, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
    lab::Lab,
};
use serde_json::{Value, json};
use tenancy_hub::api::{
    crd::{Chart, ControllerSpec, CrdPolicy, Install, TenancyController, Upgrade},
    policy::HelmRule,
};

/// The chart's CRD.
const CRD: &str = "sealedsecrets.bitnami.com";
/// The older chart (module v0.24.0) and the newer (v0.27.0), whose CRD's schema has
/// `spec.template.immutable`.
const OLDER: &str = "sealed-secrets-2.12.0";
const NEWER: &str = "sealed-secrets-2.15.4";
/// The label that selects this file's Controllers for its operator.
const LABEL: &str = "crds-test";

/// The chart `name` as release `ss`, with a hook of its own (a ConfigMap made after each install
/// and upgrade, through the chart's `extraDeploy`), no cluster-wide RBAC, and these CRD policies.
fn sealed_secrets(name: &str, install: Option<CrdPolicy>, upgrade: Option<CrdPolicy>) -> Chart {
    let values = json!({
        "fullnameOverride": "ss",
        "rbac": {"create": false},
        "extraDeploy": [{
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "ss-hook",
                "annotations": {"helm.sh/hook": "post-install,post-upgrade"},
            },
            "data": {"chart": "{{ .Chart.Version }}"},
        }],
    });
    Chart {
        chart_name: name.into(),
        release_name: Some("ss".into()),
        values: Some(values),
        install: install.map(|crds| Install {
            crds: Some(crds),
            ..Install::default()
        }),
        upgrade: upgrade.map(|crds| Upgrade {
            crds: Some(crds),
            ..Upgrade::default()
        }),
        ..Chart::default()
    }
}

/// Hub namespace `namespace` may deliver anywhere, with every CRD policy, `CreateReplace` too.
async fn grant_create_replace(hub: &Hub, namespace: &str) {
    let mut policy = allow_all(namespace, &[]);
    policy.helm = Some(HelmRule {
        crd_policies: vec![CrdPolicy::Skip, CrdPolicy::Create, CrdPolicy::CreateReplace],
        ..HelmRule::default()
    });
    hub.policy(namespace, policy).await;
}

/// Controller `name` labelled for this file's operator.
fn labelled(name: &str, spec: ControllerSpec, id: &str) -> TenancyController {
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some(BTreeMap::from([(LABEL.into(), id.into())]));
    c
}

/// The CRD as the member serves it (a push member by context, or a pull member by name), None
/// when it has none.
fn served_crd(lab: &Lab, member: &str) -> Option<Value> {
    let args = ["get", "crd", CRD, "-o", "json"];
    let out = if member.starts_with("pull-") {
        lab.try_pull_kubectl(member, &args)
    } else {
        lab.try_kubectl(member, &args)
    };
    out.ok().and_then(|o| serde_json::from_str(&o).ok())
}

/// Whether the served CRD's schema has the newer chart's `spec.template.immutable`.
fn has_immutable(crd: &Value) -> bool {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["template"]["properties"]
        .get("immutable")
        .is_some()
}

/// Deletes the CRD from a member, so a run starts from none.
fn no_crd(lab: &Lab, member: &str) {
    let args = ["delete", "crd", CRD, "--ignore-not-found", "--wait"];
    let out = if member.starts_with("pull-") {
        lab.try_pull_kubectl(member, &args)
    } else {
        lab.try_kubectl(member, &args)
    };
    out.unwrap_or_else(|e| panic!("deleting {CRD} in {member}: {e}"));
}

/// The status entry's CRD report of release `ss` on `cluster` in Controller `name` of `ns`,
/// once it is deployed with chart `version`.
async fn deployed_reporting(
    hub: &Hub,
    ns: &str,
    name: &str,
    cluster: &str,
    version: &str,
) -> String {
    let api: kube::Api<TenancyController> = kube::Api::namespaced(hub.client.clone(), ns);
    wait_until(
        &format!("ss on {cluster} deployed at chart {version}"),
        Duration::from_secs(180),
        || async {
            let status = api.get(name).await.ok()?.status?;
            let m = message(&status, cluster, "ss")?;
            (m.phase == "Deployed" && m.chart_version == version).then(|| m.crds.clone())
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn create_replace_serves_the_new_crd_schema_on_push_and_pull_members_and_the_default_leaves_it()
 {
    let home = real_chart_home(&Lab::get(), NEWER);
    let id = unique("crds-upgrade");
    let (hub, _) = Hub::two_teams(&id, LABEL, &["--chart-home", home.to_str().unwrap()]).await;
    grant_create_replace(&hub, &hub.namespace).await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let _agent = join(&hub.lab, &edge, "pull-1", dir.path());
    for member in ["member-1", "member-2", "pull-1"] {
        no_crd(&hub.lab, member);
    }
    let (replacing, keeping) = (unique("crds-replace"), unique("crds-keep"));
    let spec = |chart: &str| ControllerSpec {
        tenancies: vec![
            tenancy(
                &replacing,
                &["member-1", &edge],
                vec![sealed_secrets(chart, None, Some(CrdPolicy::CreateReplace))],
            ),
            tenancy(
                &keeping,
                &["member-2"],
                vec![sealed_secrets(chart, None, None)],
            ),
        ],
        ..Default::default()
    };
    hub.apply_in(&hub.namespace, &labelled("ss", spec(OLDER), &id))
        .await;
    hub.status_until("ss", "the older chart deployed everywhere", ready)
        .await;
    for member in ["member-1", "member-2", "pull-1"] {
        let crd = served_crd(&hub.lab, member).unwrap_or_else(|| panic!("{member} has no {CRD}"));
        assert!(
            !has_immutable(&crd),
            "{member}: the older CRD has no immutable"
        );
    }
    let created = deployed_reporting(&hub, &hub.namespace, "ss", "member-2", "2.12.0").await;
    assert_eq!(
        created,
        format!("created 1 ({CRD}); replaced 0; unchanged 0")
    );

    // The newer chart: its CRD replaced where CreateReplace is asked, kept by the default.
    hub.apply_in(&hub.namespace, &labelled("ss", spec(NEWER), &id))
        .await;
    for cluster in ["member-1", edge.as_str()] {
        let report = deployed_reporting(&hub, &hub.namespace, "ss", cluster, "2.15.4").await;
        assert!(
            report.starts_with("created 0; replaced 1"),
            "{cluster}: {report}"
        );
    }
    let kept = deployed_reporting(&hub, &hub.namespace, "ss", "member-2", "2.15.4").await;
    assert_eq!(kept, format!("created 0; replaced 0; unchanged 1 ({CRD})"));
    for member in ["member-1", "pull-1"] {
        let crd = served_crd(&hub.lab, member).unwrap();
        assert!(
            has_immutable(&crd),
            "{member}: the new CRD schema is served"
        );
    }
    assert!(
        !has_immutable(&served_crd(&hub.lab, "member-2").unwrap()),
        "member-2: the default leaves the CRD as it was"
    );
    // The chart's hook ran with each version.
    let hook = hub.lab.kubectl(
        "member-1",
        &[
            "get",
            "configmap",
            "ss-hook",
            "-n",
            &replacing,
            "-o",
            "jsonpath={.data.chart}",
        ],
    );
    assert_eq!(hook, "2.15.4");
    assert_eq!(
        deployed_revision(&hub.lab, "pull-1", &replacing, "ss"),
        Some(2)
    );
    hub.delete_and_wait_gone("ss").await;
    common::agent::hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_tenant_not_granted_create_replace_is_forbidden_and_a_stored_version_is_never_dropped() {
    let home = real_chart_home(&Lab::get(), NEWER);
    let id = unique("crds-refused");
    let (hub, team_b) = Hub::two_teams(&id, LABEL, &["--chart-home", home.to_str().unwrap()]).await;
    grant_create_replace(&hub, &hub.namespace).await;
    hub.policy(&team_b, allow_all(&team_b, &[])).await;
    // member-3 has the CRD already, its objects stored in a version the chart does not list.
    no_crd(&hub.lab, "member-3");
    let older = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {"group": "bitnami.com", "scope": "Namespaced",
            "names": {"kind": "SealedSecret", "plural": "sealedsecrets", "singular": "sealedsecret", "listKind": "SealedSecretList"},
            "versions": [{"name": "v1alpha0", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), older.to_string()).unwrap();
    hub.lab
        .kubectl("member-3", &["create", "-f", file.path().to_str().unwrap()]);
    let stored =
        |lab: &Lab| served_crd(lab, "member-3").unwrap()["status"]["storedVersions"].clone();
    wait_until("the older CRD stores v1alpha0", DEADLINE, || async {
        (stored(&hub.lab) == json!(["v1alpha0"])).then_some(())
    })
    .await;

    let (ns_a, ns_b) = (unique("crds-stored"), unique("crds-forbidden"));
    let spec = |ns: &str| ControllerSpec {
        tenancies: vec![tenancy(
            ns,
            &["member-3"],
            vec![sealed_secrets(NEWER, Some(CrdPolicy::CreateReplace), None)],
        )],
        ..Default::default()
    };
    hub.apply_in(&team_b, &labelled("ss", spec(&ns_b), &id))
        .await;
    hub.apply_in(&hub.namespace, &labelled("ss", spec(&ns_a), &id))
        .await;
    let settled = |ns: String, phase: &'static str| {
        let api: kube::Api<TenancyController> = kube::Api::namespaced(hub.client.clone(), &ns);
        async move {
            wait_until(
                &format!("ss of {ns} {phase}"),
                Duration::from_secs(180),
                || async {
                    let status = api.get("ss").await.ok()?.status?;
                    let m = message(&status, "member-3", "ss")?;
                    (m.phase == phase).then(|| m.error_message.clone())
                },
            )
            .await
        }
    };
    let forbidden = settled(team_b.clone(), "Forbidden").await;
    assert!(
        forbidden.contains("install.crds is CreateReplace"),
        "{forbidden}"
    );
    assert!(
        forbidden.contains("helm.crdPolicies [Skip, Create]"),
        "{forbidden}"
    );
    let refused = settled(hub.namespace.clone(), "Failed").await;
    let named = format!("CRD {CRD}");
    for needle in [
        named.as_str(),
        "drops version v1alpha0",
        "status.storedVersions",
    ] {
        assert!(refused.contains(needle), "{refused}");
    }
    // Nothing applied for either: no release, the CRD as it was.
    for ns in [&ns_a, &ns_b] {
        let releases = hub
            .lab
            .try_helm("member-3", &["list", "-a", "-q", "-n", ns])
            .unwrap_or_default();
        assert!(releases.trim().is_empty(), "{ns}: {releases}");
    }
    let crd = served_crd(&hub.lab, "member-3").unwrap();
    assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha0");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1alpha0"]));
    for ns in [&hub.namespace, &team_b] {
        let api: kube::Api<TenancyController> = kube::Api::namespaced(hub.client.clone(), ns);
        let _ = api.delete("ss", &Default::default()).await;
    }
    common::hub::all_gone(&hub.api(), DEADLINE).await;
    no_crd(&hub.lab, "member-3");
}
