//! What a hostile tenant writes in its own namespace of a member: release records forged as Helm stores them, and the rights it has there.

use std::io::Write as _;

use super::fixtures::{DEADLINE, wait_until};

use k8s_openapi::api::{
    authorization::v1::SelfSubjectAccessReview,
    core::v1::{ConfigMap, Secret},
    rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding},
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

/// The tenant `mallory`, admin of `attacker` only, forges two records there with `as_mallory`
/// (her own identity): a release `ghost` the Controller `platform` of hub namespace
/// `hub_namespace` never named, labelled as its; and a newer revision of its release `agent`
/// with the labels of `genuine` (its record, seal included) on content of her own. Both bind her to
/// cluster-admin in every hook and name objects in `victim` and a cluster-scoped one.
#[allow(dead_code)] // used by some test crates only
pub async fn forge_two(
    as_mallory: &Client,
    attacker: &str,
    victim: &str,
    mallory: &str,
    hub_namespace: &str,
    genuine: &Secret,
) -> Api<Secret> {
    // The API server's authorizer learns of a new RoleBinding from its own watch: wait until it
    // lets her write Secrets there.
    wait_until("mallory's rights in her own namespace", DEADLINE, || {
        may_create_secrets(as_mallory, attacker)
    })
    .await;
    let secrets = Api::<Secret>::namespaced(as_mallory.clone(), attacker);
    let owner_labels: std::collections::BTreeMap<String, String> = [
        ("multitenancy.dev/managed-by", "tenancy-hub"),
        ("multitenancy.dev/controller-namespace", hub_namespace),
        ("multitenancy.dev/controller-name", "platform"),
        ("multitenancy.dev/spec-hash", "0123456789abcdef"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    // 1. A release the platform never named, labelled as the platform's: the old code planned
    //    its uninstall with the operator's credentials and ran its pre-delete hook.
    let ghost = forged_record("ghost", 1, attacker, victim, mallory, owner_labels);
    secrets
        .create(&PostParams::default(), &ghost)
        .await
        .unwrap();
    // 2. A newer revision of the agent the platform names, with the genuine record's labels
    //    (seal included) copied onto content of her own.
    let copied = genuine.metadata.labels.clone().unwrap_or_default();
    let newer = forged_record("agent", 2, attacker, victim, mallory, copied);
    secrets
        .create(&PostParams::default(), &newer)
        .await
        .unwrap();
    secrets
}

/// Asserts that nothing [`forge_two`]'s records ask for ran in the member of `admin`: no
/// binding of `mallory` to cluster-admin, the crown jewel in `victim` and the ClusterRole `admin`
/// still there, and both forged records left alone in `forged`.
#[allow(dead_code)] // used by some test crates only
pub async fn assert_forgeries_ran_nothing(
    admin: &Client,
    forged: &Api<Secret>,
    victim: &str,
    mallory: &str,
) {
    assert!(
        Api::<ClusterRoleBinding>::all(admin.clone())
            .get_opt(&format!("escalate-{mallory}"))
            .await
            .unwrap()
            .is_none(),
        "a forged hook ran: {mallory} was bound to cluster-admin"
    );
    assert!(
        Api::<ConfigMap>::namespaced(admin.clone(), victim)
            .get_opt("crown-jewel")
            .await
            .unwrap()
            .is_some(),
        "an object a forged manifest names in another namespace was deleted"
    );
    assert!(
        Api::<ClusterRole>::all(admin.clone())
            .get_opt("admin")
            .await
            .unwrap()
            .is_some(),
        "a cluster-scoped object a forged manifest names was deleted"
    );
    for record in ["sh.helm.release.v1.ghost.v1", "sh.helm.release.v1.agent.v2"] {
        assert!(
            forged.get_opt(record).await.unwrap().is_some(),
            "the forged record {record} is left alone, not acted on"
        );
    }
}
