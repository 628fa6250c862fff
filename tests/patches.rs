//! End-to-end tests of post-render patches: a patch, an image override and common metadata on the member's objects and in `diff`, on a pull member too, and the patches a policy refuses, on the hub or in the executor.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{
    agent::{hub_cli, join},
    fixtures::{chart, message, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
};
use tenancy_hub::api::{
    crd::{
        Chart, CommonMetadata, ControllerSpec, Image, Kustomize, Patch, PatchTarget, PostRenderer,
    },
    policy::{HelmRule, TenancyPolicySpec},
};

/// `deployment-example` as release `web`, with a strategic merge patch labelling its Deployment
/// with the cluster's name, its nginx image moved to another registry, and a common label.
fn patched_web() -> Chart {
    let patch = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    patched-on: ${cluster.name}\n";
    Chart {
        post_renderers: vec![PostRenderer {
            kustomize: Some(Kustomize {
                patches: vec![Patch {
                    patch: patch.into(),
                    target: None,
                }],
                images: vec![Image {
                    name: "nginx".into(),
                    new_name: Some("registry.example/nginx".into()),
                    new_tag: Some("1.28".into()),
                    digest: None,
                }],
            }),
        }],
        common_metadata: Some(CommonMetadata {
            labels: BTreeMap::from([("team".into(), "blue".into())]),
            annotations: BTreeMap::new(),
        }),
        ..chart("deployment-example", "web", &[])
    }
}

/// `deployment-example` as `release`, with one JSON6902 patch aimed at `kind`.
fn json_patched(release: &str, kind: &str, ops: &str) -> Chart {
    Chart {
        post_renderers: vec![PostRenderer {
            kustomize: Some(Kustomize {
                patches: vec![Patch {
                    patch: ops.into(),
                    target: Some(PatchTarget {
                        kind: Some(kind.into()),
                        ..PatchTarget::default()
                    }),
                }],
                images: Vec::new(),
            }),
        }],
        ..chart("deployment-example", release, &[])
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_patch_an_image_override_and_common_metadata_are_on_the_members_deployment_and_in_diff() {
    let hub = Hub::new("patches").await;
    let ns = unique("patches-tenant");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], vec![patched_web()])],
        ..Default::default()
    };
    // The preview patches with the executor's own post-renderer.
    let executor = hub.lab.executor();
    let out = hub.diff(
        &hub.lab.clusters_path(),
        "patched",
        &spec,
        &[
            "--tenancy-policy",
            "permissive",
            "--helm-executor",
            executor.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in [
        "patched-on: member-1",
        "registry.example/nginx:1.28",
        "team: blue",
    ] {
        assert!(
            stdout.contains(want),
            "diff lacks {want}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    hub.apply("patched", spec).await;
    let deployment = wait_until(
        "the patched Deployment on member-1",
        Duration::from_secs(120),
        || async {
            let json = hub
                .lab
                .try_kubectl(
                    "member-1",
                    &["get", "deployment", "web", "-n", &ns, "-o", "json"],
                )
                .ok()?;
            serde_json::from_str::<serde_json::Value>(&json).ok()
        },
    )
    .await;
    let labels = &deployment["metadata"]["labels"];
    assert_eq!(labels["patched-on"], "member-1", "{deployment}");
    assert_eq!(labels["team"], "blue", "{deployment}");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/nginx:1.28"
    );
    // The release record holds the patched manifest, and the Service got the common label too.
    let manifest = hub
        .lab
        .helm("member-1", &["get", "manifest", "web", "-n", &ns]);
    assert!(
        manifest.contains("registry.example/nginx:1.28"),
        "{manifest}"
    );
    let service = hub.lab.kubectl(
        "member-1",
        &[
            "get",
            "service",
            "web",
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.labels.team}",
        ],
    );
    assert_eq!(service, "blue");
    // Nothing changed: no second revision.
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    hub.delete_and_wait_gone("patched").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_patch_to_a_cluster_role_and_a_patch_moving_a_deployment_are_refused_with_the_reason() {
    let hub = Hub::with_args("patches-refused", &["--tenancy-policy", "enforce"]).await;
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[]))
        .await;
    let ns = unique("patches-refused-tenant");
    let rbac = json_patched(
        "rbac",
        "ClusterRole",
        r#"[{"op": "add", "path": "/rules/-", "value": {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}}]"#,
    );
    // The target is a harmless Deployment; the result is the Deployment in kube-system.
    let moved = json_patched(
        "moved",
        "Deployment",
        r#"[{"op": "add", "path": "/metadata/namespace", "value": "kube-system"}]"#,
    );
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], vec![rbac, moved])],
        ..Default::default()
    };
    hub.apply("refused", spec).await;
    let api = hub.api();
    let (rbac, moved) = wait_until(
        "both releases refused with their reasons",
        Duration::from_secs(120),
        || async {
            let status = api.get("refused").await.ok()?.status?;
            let rbac = message(&status, "member-1", "rbac")?.error_message.clone();
            let moved = message(&status, "member-1", "moved")?.error_message.clone();
            (rbac.contains("helm.allowPostRenderSensitiveKinds is false")
                && moved.contains("may not add, remove or rename"))
            .then_some((rbac, moved))
        },
    )
    .await;
    assert!(rbac.contains("names kind ClusterRole"), "{rbac}");
    assert!(
        moved.contains("postRenderers") || moved.contains("post-render"),
        "{moved}"
    );
    // Nothing reached the member: no release, no Deployment, in the tenant's namespace or in
    // kube-system.
    for release in ["rbac", "moved"] {
        assert!(
            hub.lab
                .try_helm("member-1", &["status", release, "-n", &ns])
                .is_err(),
            "release {release} exists"
        );
    }
    assert!(
        hub.lab
            .try_kubectl(
                "member-1",
                &["get", "deployment", "moved", "-n", "kube-system"]
            )
            .is_err()
    );
    hub.delete_and_wait_gone("refused").await;
}

/// The Deployment `web` of `namespace` in pull member `pull`, once its `patched-on` label is
/// there.
async fn patched_deployment(hub: &Hub, pull: &str, namespace: &str) -> serde_json::Value {
    wait_until(
        "the patched Deployment",
        Duration::from_secs(120),
        || async {
            let json = hub
                .lab
                .try_pull_kubectl(
                    pull,
                    &["get", "deployment", "web", "-n", namespace, "-o", "json"],
                )
                .ok()?;
            let deployment: serde_json::Value = serde_json::from_str(&json).ok()?;
            deployment["metadata"]["labels"]["patched-on"]
                .is_string()
                .then_some(deployment)
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_pull_members_agent_applies_the_patches_rendered_for_its_cluster() {
    let hub = Hub::new("patches-pull").await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("edge");
    let _agent = join(&hub.lab, &name, "pull-1", dir.path());
    let ns = unique("patches-pulled");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &[&name], vec![patched_web()])],
        ..Default::default()
    };
    hub.apply("patched", spec).await;
    let deployment = patched_deployment(&hub, "pull-1", &ns).await;
    // Rendered for the pull member's registered name, not its kubeconfig context.
    assert_eq!(
        deployment["metadata"]["labels"]["patched-on"],
        name.as_str()
    );
    assert_eq!(deployment["metadata"]["labels"]["team"], "blue");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/nginx:1.28"
    );
    hub.delete_and_wait_gone("patched").await;
    hub_cli(&hub.lab, &["cluster", "remove", &name]);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_policy_forbidding_post_renderers_refuses_a_patched_chart_and_deploys_its_neighbour() {
    let hub = Hub::with_args("patches-forbidden", &["--tenancy-policy", "enforce"]).await;
    let policy = TenancyPolicySpec {
        helm: Some(HelmRule {
            allow_post_renderers: false,
            ..HelmRule::default()
        }),
        ..allow_all(&hub.namespace, &[])
    };
    hub.policy(&hub.namespace, policy).await;
    let ns = unique("patches-forbidden-tenant");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![patched_web(), chart("deployment-example", "plain", &[])],
        )],
        ..Default::default()
    };
    hub.apply("forbidden", spec).await;
    let api = hub.api();
    let (phase, why) = wait_until(
        "the patched release refused, its neighbour deployed",
        Duration::from_secs(120),
        || async {
            let status = api.get("forbidden").await.ok()?.status?;
            let web = message(&status, "member-1", "web")?;
            let plain = message(&status, "member-1", "plain")?;
            (plain.phase == "Deployed" && web.error_message.contains("allowPostRenderers"))
                .then(|| (web.phase.clone(), web.error_message.clone()))
        },
    )
    .await;
    assert_eq!(phase, "Forbidden", "{why}");
    assert!(why.contains("helm.allowPostRenderers is false"), "{why}");
    assert!(
        hub.lab
            .try_helm("member-1", &["status", "web", "-n", &ns])
            .is_err(),
        "a forbidden release gets no Helm call"
    );
    hub.delete_and_wait_gone("forbidden").await;
}
