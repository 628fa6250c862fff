//! What a hostile tenant writes in its own namespace of a member: release records forged as Helm stores them, and the rights it has there.

use std::io::Write as _;

use k8s_openapi::api::{
    authorization::v1::SelfSubjectAccessReview, core::v1::Secret, rbac::v1::RoleBinding,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};

/// Every hook event Helm knows.
const EVENTS: &str = "pre-install,post-install,pre-delete,post-delete,pre-upgrade,post-upgrade,pre-rollback,post-rollback,test";

/// A release record as Helm stores it (base64 of gzipped JSON), with `labels`, whose hooks of
/// every event bind `user` to cluster-admin and whose manifest names an object in `elsewhere` and a
/// cluster-scoped one.
#[allow(dead_code)] // used by some test crates only
pub fn forged_record(
    release: &str,
    revision: i64,
    namespace: &str,
    elsewhere: &str,
    user: &str,
    labels: std::collections::BTreeMap<String, String>,
) -> Secret {
    use base64::Engine as _;
    let escalate = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: escalate-{user}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
    );
    let hooks: Vec<serde_json::Value> = EVENTS
        .split(',')
        .map(|event| {
            serde_json::json!({
                "name": format!("escalate-{user}"), "kind": "ClusterRoleBinding",
                "path": "evil/templates/hook.yaml", "manifest": escalate,
                "events": [event], "delete_policies": [],
            })
        })
        .collect();
    let manifest = format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: crown-jewel\n  namespace: {elsewhere}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: admin\n"
    );
    let json = serde_json::json!({
        "name": release, "namespace": namespace, "version": revision, "manifest": manifest,
        "hooks": hooks,
        "info": {"status": "deployed"},
        "chart": {"metadata": {"name": "evil", "version": "6.6.6", "apiVersion": "v2"}},
    });
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(json.to_string().as_bytes()).unwrap();
    let data = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
    let mut all = labels;
    for (k, v) in [
        ("owner", "helm".to_owned()),
        ("name", release.to_owned()),
        ("status", "deployed".to_owned()),
        ("version", revision.to_string()),
    ] {
        all.insert(k.to_owned(), v);
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("sh.helm.release.v1.{release}.v{revision}"), "namespace": namespace, "labels": all},
        "type": "helm.sh/release.v1",
        "data": {"release": base64::engine::general_purpose::STANDARD.encode(data)},
    }))
    .unwrap()
}

/// Makes `user` admin of `namespace` on the member of `admin`, and nothing else: a tenant's usual rights.
#[allow(dead_code)] // used by some test crates only
pub async fn namespace_admin(admin: &Client, namespace: &str, user: &str) {
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tenant-admin", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .patch(
            "tenant-admin",
            &PatchParams::apply("tenancy-hub-tests").force(),
            &Patch::Apply(&binding),
        )
        .await
        .unwrap();
}

/// Some(()) once the caller of `client` may create Secrets in `namespace`, by its own access review.
#[allow(dead_code)] // used by some test crates only
pub async fn may_create_secrets(client: &Client, namespace: &str) -> Option<()> {
    let review: SelfSubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {"resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "secrets"}},
    }))
    .unwrap();
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .ok()?;
    answer.status.is_some_and(|s| s.allowed).then_some(())
}
