//! A release's target namespace, made ready by the operator: created and marked as its own, an identity's `namespaceRole` bound only where it created the namespace for that identity, and unbound with that identity's last release there.
//!
//! Trust. A Controller may name any namespace its policy's pattern matches, an existing one
//! included (`team-a-*` matches someone else's `team-a-prod`), and whoever may write in a
//! namespace may forge its release records. Neither decides. What decides is the Namespace object,
//! which rights inside the namespace (a `namespaceRole` such as `admin`) do not let anyone change:
//! the operator writes on it, when it creates it, that it did ([`CREATED_BY`]) and for which user
//! ([`CREATED_FOR`]), and one annotation per release it bound that user for
//! ([`RELEASE_PREFIX`]`<release>: <user>`). So:
//!
//! - the RoleBinding is made only in a namespace created for that user. In any other namespace
//!   Helm still runs as the identity, with whatever rights the namespace's admins granted, and a
//!   failure says why nothing was bound and who must grant what;
//! - a binding the operator made before these marks existed is kept (and applied again) as it is,
//!   and never removed by the operator: whether its namespace's other releases still need it is
//!   not known;
//! - once a release has no record left (uninstalled, or a first install that failed and left none),
//!   its mark goes, and with the user's last mark, the user's binding. Release records, forged or
//!   not, keep nothing bound.
//!
//! A release is marked before its binding is applied, and a mark is read before a binding is
//! removed, both under one lock per namespace (striped), so in one operator a binding is never
//! removed between another release's binding and its Helm call.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::{core::v1::Namespace, rbac::v1::RoleBinding};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};

use crate::{
    api::key::{ClusterNamespace, ReleaseKey},
    api::policy::Impersonation,
    plan::{MANAGED_BY, MANAGED_BY_LABEL},
};

/// Annotation of a Namespace the operator created: [`MANAGED_BY`].
pub(crate) const CREATED_BY: &str = "multitenancy.dev/created-by";
/// Annotation of a Namespace the operator created for an impersonated identity: its user.
pub(crate) const CREATED_FOR: &str = "multitenancy.dev/created-for";
/// Prefix of the annotation, one per release, naming the user a release had bound there.
pub(crate) const RELEASE_PREFIX: &str = "release.multitenancy.dev/";

/// Locks striped by namespace, so jobs of different namespaces rarely wait for each other.
const STRIPES: usize = 64;

/// Makes target namespaces ready for releases and unbinds identities after their last release.
pub(crate) struct Namespaces {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

impl Namespaces {
    pub(crate) fn new() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }

    async fn lock(&self, scope: &ClusterNamespace) -> tokio::sync::MutexGuard<'_, ()> {
        let mut hasher = DefaultHasher::new();
        scope.hash(&mut hasher);
        self.stripes[hasher.finish() as usize % STRIPES]
            .lock()
            .await
    }

    /// Makes `key`'s namespace ready: created when missing (marked as created for `who`, so
    /// tenants need no right to create namespaces) and, for an identity with a `namespaceRole`,
    /// that ClusterRole bound to it there when the namespace was created for it. Ok(Some(why)):
    /// the role was not bound, and why, for the release's status when Helm fails.
    pub(crate) async fn prepare(
        &self,
        client: &Client,
        key: &ReleaseKey,
        who: Option<&Impersonation>,
    ) -> Result<Option<String>, String> {
        let _held = self.lock(&key.scope).await;
        let name = &key.scope.namespace;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let role = who.and_then(|w| Some((w, w.namespace_role.as_deref()?)));
        let mark = role.map(|(w, _)| (key.release.as_str(), w.user.as_str()));
        let created = match namespaces
            .create(&PostParams::default(), &wanted(name, who, mark))
            .await
        {
            Ok(created) => {
                tracing::info!(namespace = %name, "created the target namespace");
                Some(created)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => None,
            // The operator may not create namespaces here (the hub, by default): an existing one
            // is fine, and for a missing one helm's own error says so.
            Err(kube::Error::Api(s)) if s.code == 403 => None,
            Err(e) => return Err(format!("creating namespace {name}: {e}")),
        };
        let Some((who, role)) = role else {
            return Ok(None);
        };
        let found = match created {
            Some(created) => Some(created),
            None => readable(namespaces.get_opt(name).await)
                .map_err(|e| format!("reading namespace {name}: {e}"))?,
        };
        match found.as_ref().map(|n| standing(n, &who.user, &key.release)) {
            Some(Standing::CreatedFor { marked: true }) => {}
            Some(Standing::CreatedFor { marked: false }) => {
                mark_release(&namespaces, name, &key.release, Some(&who.user)).await?;
            }
            _ if bound_before(client, name, who).await? => {}
            _ => {
                let why = not_bound(key, who, role);
                tracing::warn!(release = %key, "{why}");
                return Ok(Some(why));
            }
        }
        bind(client, name, who, role).await
    }

    /// Forgets a release that has no record left in its namespace: its mark goes, and when it
    /// was its user's last, so does that user's RoleBinding.
    pub(crate) async fn release_gone(
        &self,
        client: &Client,
        key: &ReleaseKey,
    ) -> Result<(), String> {
        let _held = self.lock(&key.scope).await;
        let name = &key.scope.namespace;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let found = readable(namespaces.get_opt(name).await)
            .map_err(|e| format!("reading namespace {name}: {e}"))?;
        let Some((user, last)) = found.as_ref().and_then(|n| marked_for(n, &key.release)) else {
            return Ok(());
        };
        if last {
            let binding = role_binding_name(&user);
            let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), name);
            match bindings.delete(&binding, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(release = %key, %user, %binding, "removed the RoleBinding of the identity's last release in the namespace")
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(format!(
                        "removing RoleBinding {binding} of {user} from namespace {name}: {e}"
                    ));
                }
            }
        }
        mark_release(&namespaces, name, &key.release, None).await
    }
}

/// A read that the operator may not make counts as nothing found.
fn readable<T>(read: kube::Result<Option<T>>) -> kube::Result<Option<T>> {
    match read {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
        other => other,
    }
}

/// The Namespace the operator creates for a release: labelled managed, annotated as created by
/// it, for `who` when there is one, and with `mark` (release, user) when the user is bound there.
fn wanted(name: &str, who: Option<&Impersonation>, mark: Option<(&str, &str)>) -> Namespace {
    let mut annotations = serde_json::Map::new();
    annotations.insert(CREATED_BY.into(), MANAGED_BY.into());
    if let Some(who) = who {
        annotations.insert(CREATED_FOR.into(), who.user.clone().into());
    }
    if let Some((release, user)) = mark {
        annotations.insert(format!("{RELEASE_PREFIX}{release}"), user.into());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}, "annotations": annotations}
    }))
    .expect("a valid Namespace")
}

/// What a Namespace says of the operator and one identity.
#[derive(Debug, PartialEq, Eq)]
enum Standing {
    /// The operator created it for this user; `marked`: the release is marked there already.
    CreatedFor { marked: bool },
    /// Someone else made it, or the operator made it for another identity or none.
    Other,
}

fn standing(namespace: &Namespace, user: &str, release: &str) -> Standing {
    let Some(annotations) = namespace.metadata.annotations.as_ref() else {
        return Standing::Other;
    };
    let says = |key: &str, value: &str| annotations.get(key).is_some_and(|v| v == value);
    if says(CREATED_BY, MANAGED_BY) && says(CREATED_FOR, user) {
        Standing::CreatedFor {
            marked: says(&format!("{RELEASE_PREFIX}{release}"), user),
        }
    } else {
        Standing::Other
    }
}

/// The user `release` is marked for in a namespace the operator created, and whether it is that
/// user's last marked release there.
fn marked_for(namespace: &Namespace, release: &str) -> Option<(String, bool)> {
    let annotations = namespace.metadata.annotations.as_ref()?;
    if annotations.get(CREATED_BY).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let user = annotations.get(&format!("{RELEASE_PREFIX}{release}"))?;
    let others = annotations
        .iter()
        .filter(|(k, v)| *v == user && k.strip_prefix(RELEASE_PREFIX).is_some_and(|r| r != release))
        .count();
    Some((user.clone(), others == 0))
}

/// Marks `release` as having `user` bound in the namespace, or (None) removes its mark.
async fn mark_release(
    namespaces: &Api<Namespace>,
    name: &str,
    release: &str,
    user: Option<&str>,
) -> Result<(), String> {
    let key = format!("{RELEASE_PREFIX}{release}");
    let patch = serde_json::json!({"metadata": {"annotations": {&key: user}}});
    namespaces
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| format!("writing annotation {key} of namespace {name}: {e}"))
}

/// True when the namespace holds a RoleBinding for `who` that the operator made before it marked
/// the namespaces it creates.
async fn bound_before(client: &Client, name: &str, who: &Impersonation) -> Result<bool, String> {
    let binding = role_binding_name(&who.user);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), name);
    let found = readable(bindings.get_opt(&binding).await)
        .map_err(|e| format!("reading RoleBinding {binding} in namespace {name}: {e}"))?;
    Ok(found.is_some_and(|b| {
        b.metadata
            .labels
            .is_some_and(|l| l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY))
    }))
}

/// Why `who`'s namespaceRole was not bound in `key`'s namespace, and who must do what.
fn not_bound(key: &ReleaseKey, who: &Impersonation, role: &str) -> String {
    let (cluster, namespace, user) = (&key.scope.cluster, &key.scope.namespace, &who.user);
    format!(
        "namespace {namespace} on cluster {cluster} was not created by tenancy-hub for {user} (it existed already), so namespaceRole {role} was not bound to {user} there: tenancy-hub binds it only in namespaces it creates for that identity. The namespace's admins must grant {user} the rights the release needs in {namespace} (for example a RoleBinding of ClusterRole {role}), or the Controller must deliver into a namespace that does not exist yet"
    )
}

/// Name of the RoleBinding that gives an impersonated user its `namespaceRole` in a target
/// namespace: one per user, so two policies delivering into one namespace do not fight over it.
pub(crate) fn role_binding_name(user: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(user.as_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("tenancy-hub-deployer-{short}")
}

/// Applies the RoleBinding giving `who` (its user and groups) ClusterRole `role` in the namespace.
async fn bind(
    client: &Client,
    name: &str,
    who: &Impersonation,
    role: &str,
) -> Result<Option<String>, String> {
    let mut subjects = vec![serde_json::json!({
        "kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": who.user
    })];
    subjects.extend(who.groups.iter().map(|g| {
        serde_json::json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g})
    }));
    let binding_name = role_binding_name(&who.user);
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": binding_name, "namespace": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }))
    .expect("a valid RoleBinding");
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), name);
    bindings
        .patch(
            &binding_name,
            &PatchParams::apply("tenancy-hub").force(),
            &Patch::Apply(&binding),
        )
        .await
        .map(|_| None)
        .map_err(|e| {
            format!(
                "binding ClusterRole {role} to {} in namespace {name}: {e}",
                who.user
            )
        })
}

#[cfg(test)]
mod tests;
