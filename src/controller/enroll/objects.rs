//! The hub objects that enroll one pull member (pure): its namespace, the operator's own binding in it, the agent's and the bootstrap identities with their Roles and RoleBindings, and the agent's configuration Secret.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{Namespace, ResourceQuota, ResourceQuotaSpec, Secret, ServiceAccount},
        rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{ObjectMeta, OwnerReference},
    },
};

use crate::{
    api::{
        key::ClusterName,
        member_cluster::{
            AGENT_ACCOUNT, AGENT_CONFIG_SECRET, BOOTSTRAP_ACCOUNT, MEMBER_LABEL, pull_namespace,
        },
    },
    helm::seal::SealKey,
    member::pull::wire::AgentConfig,
};

/// The ClusterRole the operator binds to itself in each pull member's hub namespace (and nowhere
/// else): the rights it grants the agent there, which Kubernetes requires it to hold, and those of
/// writing the member's objects.
pub(crate) const NAMESPACE_ROLE: &str = "tenancy-hub-member-namespace";
/// The prefix of the operator's own RoleBindings in a pull member's hub namespace.
pub(crate) const OPERATOR_BINDING: &str = "tenancy-hub";

/// The name of the RoleBinding that gives the operator identity `subject` its rights in a
/// member's namespace: one per identity, so an operator reinstalled under another identity binds
/// itself beside the first (it may create a RoleBinding, never change one).
pub(crate) fn operator_binding(subject: &Subject) -> String {
    use sha2::Digest as _;
    let who = format!(
        "{}/{}/{}",
        subject.kind,
        subject.namespace.as_deref().unwrap_or_default(),
        subject.name
    );
    let digest = sha2::Sha256::digest(who.as_bytes());
    let short: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    format!("{OPERATOR_BINDING}-{short}")
}

/// Everything one pull member is enrolled with, in the order it is applied (the namespace first,
/// then the operator's rights in it).
pub(crate) struct Enrolled {
    /// The member's hub namespace, owned by its `MemberCluster`, so it goes with it.
    pub(crate) namespace: Namespace,
    /// The operator's own rights in it, when it knows who it is.
    pub(crate) operator: Option<RoleBinding>,
    /// The agent's and the bootstrap ServiceAccounts.
    pub(crate) accounts: [ServiceAccount; 2],
    /// What each of them may do.
    pub(crate) roles: [Role; 2],
    /// Each bound to its ServiceAccount.
    pub(crate) bindings: [RoleBinding; 2],
    /// The agent's configuration (its cluster, its sealing key, the hub's work key).
    pub(crate) config: Secret,
    /// What the namespace may hold: an agent may write Secrets there, and only this bounds how
    /// many.
    pub(crate) quota: ResourceQuota,
}

/// The name of the ResourceQuota of a member's hub namespace.
pub(crate) const QUOTA: &str = "tenancy-hub-member";
/// ConfigMaps a member's hub namespace may hold: the protocol writes none (Kubernetes writes its
/// CA bundle).
const MEMBER_CONFIGMAPS: u32 = 8;

/// The objects that enroll `cluster`, whose `MemberCluster` is `owner`, for the operator acting
/// as `operator` with the sealing key `seal`.
pub(crate) fn enrolled(
    cluster: &ClusterName,
    owner: OwnerReference,
    operator: Option<&Subject>,
    seal: &SealKey,
    secrets: u32,
) -> Enrolled {
    let ns = pull_namespace(cluster);
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.clone()),
            labels: Some(labels(cluster)),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let account = |name: &str| ServiceAccount {
        metadata: meta(cluster, &ns, name),
        ..ServiceAccount::default()
    };
    let config = Secret {
        metadata: meta(cluster, &ns, AGENT_CONFIG_SECRET),
        data: Some(AgentConfig::for_cluster(seal, cluster).to_data()),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    let operator = operator.map(|subject| RoleBinding {
        metadata: meta(cluster, &ns, &operator_binding(subject)),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: NAMESPACE_ROLE.into(),
        },
        subjects: Some(vec![subject.clone()]),
    });
    Enrolled {
        namespace,
        operator,
        accounts: [account(AGENT_ACCOUNT), account(BOOTSTRAP_ACCOUNT)],
        roles: [
            role(cluster, &ns, AGENT_ACCOUNT, agent_rules()),
            role(cluster, &ns, BOOTSTRAP_ACCOUNT, vec![own_token_rule()]),
        ],
        bindings: [
            binding(cluster, &ns, AGENT_ACCOUNT),
            binding(cluster, &ns, BOOTSTRAP_ACCOUNT),
        ],
        config,
        quota: ResourceQuota {
            metadata: meta(cluster, &ns, QUOTA),
            spec: Some(ResourceQuotaSpec {
                hard: Some(BTreeMap::from([
                    ("count/secrets".to_owned(), Quantity(secrets.to_string())),
                    (
                        "count/configmaps".to_owned(),
                        Quantity(MEMBER_CONFIGMAPS.to_string()),
                    ),
                ])),
                ..ResourceQuotaSpec::default()
            }),
            ..ResourceQuota::default()
        },
    }
}

/// What the agent may do in its own hub namespace, and nowhere else: read its work and its
/// configuration and write its reports (Secrets), renew its Lease, and renew its own token.
pub(crate) fn agent_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            "",
            "secrets",
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        rule(
            "coordination.k8s.io",
            "leases",
            &["get", "list", "watch", "create", "update", "patch"],
        ),
        own_token_rule(),
    ]
}

/// A token of the agent's ServiceAccount, and of no other: how the bootstrap identity joins, and
/// how the agent renews its own token.
fn own_token_rule() -> PolicyRule {
    PolicyRule {
        resource_names: Some(vec![AGENT_ACCOUNT.into()]),
        ..rule("", "serviceaccounts/token", &["create"])
    }
}

fn rule(group: &str, resource: &str, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

fn labels(cluster: &ClusterName) -> BTreeMap<String, String> {
    BTreeMap::from([(MEMBER_LABEL.to_owned(), cluster.to_string())])
}

fn meta(cluster: &ClusterName, namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some(labels(cluster)),
        ..ObjectMeta::default()
    }
}

fn role(cluster: &ClusterName, namespace: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: meta(cluster, namespace, name),
        rules: Some(rules),
    }
}

fn binding(cluster: &ClusterName, namespace: &str, name: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(cluster, namespace, name),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(namespace.into()),
            ..Subject::default()
        }]),
    }
}

/// The RBAC subject of the user named `username`: a ServiceAccount for
/// `system:serviceaccount:NAMESPACE:NAME`, a User otherwise.
pub(crate) fn subject_of(username: &str) -> Subject {
    let account = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match account {
        Some((namespace, name)) => Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(namespace.into()),
            ..Subject::default()
        },
        None => Subject {
            kind: "User".into(),
            name: username.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Subject::default()
        },
    }
}

/// True when the namespace `found` was made for `cluster` (it carries the member label naming
/// it), so enrolling may take it over and removing the member may delete it.
pub(crate) fn is_members(found: &Namespace, cluster: &ClusterName) -> bool {
    found
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MEMBER_LABEL))
        .is_some_and(|name| name == cluster.as_str())
}

/// Each Secret data value as text, for tests.
#[cfg(test)]
pub(crate) fn data_text(
    data: &BTreeMap<String, k8s_openapi::ByteString>,
) -> BTreeMap<&str, String> {
    data.iter()
        .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operator_identity_binds_itself_under_a_name_of_its_own() {
        let subject = |kind: &str, namespace: Option<&str>, name: &str| Subject {
            kind: kind.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
            ..Subject::default()
        };
        let first = operator_binding(&subject(
            "ServiceAccount",
            Some("tenancy-hub"),
            "tenancy-hub",
        ));
        let same = operator_binding(&subject(
            "ServiceAccount",
            Some("tenancy-hub"),
            "tenancy-hub",
        ));
        let other = operator_binding(&subject("ServiceAccount", Some("platform"), "tenancy-hub"));
        let user = operator_binding(&subject("User", None, "tenancy-hub"));
        assert_eq!(first, same);
        assert!(first != other && first != user && other != user);
        assert!(first.starts_with("tenancy-hub-") && first.len() == "tenancy-hub-".len() + 10);
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "multitenancy.dev/v1alpha1".into(),
            kind: "MemberCluster".into(),
            name: "edge-1".into(),
            uid: "u-1".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    fn edge1() -> ClusterName {
        "edge-1".parse().unwrap()
    }

    #[test]
    fn a_member_is_enrolled_in_its_own_labelled_namespace_owned_by_its_member_cluster() {
        let seal = SealKey::from_bytes(&[3u8; 32]).unwrap();
        let me = subject_of("system:serviceaccount:tenancy-hub:tenancy-hub");
        let e = enrolled(&edge1(), owner(), Some(&me), &seal, 6_000);
        let operator = e.operator.unwrap();
        assert_eq!(operator.role_ref.name, NAMESPACE_ROLE);
        assert_eq!(operator.subjects.unwrap(), [me]);
        assert_eq!(
            e.namespace.metadata.name.as_deref(),
            Some("tenancy-hub-member-edge-1")
        );
        assert!(is_members(&e.namespace, &edge1()));
        assert!(!is_members(&e.namespace, &"edge-2".parse().unwrap()));
        assert_eq!(e.namespace.metadata.owner_references, Some(vec![owner()]));
        let names: Vec<_> = e
            .accounts
            .iter()
            .map(|a| a.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["agent", "bootstrap"]);
        for binding in &e.bindings {
            let subject = &binding.subjects.as_ref().unwrap()[0];
            assert_eq!(
                binding.role_ref.name, subject.name,
                "each bound to its own account"
            );
            assert_eq!(
                subject.namespace.as_deref(),
                Some("tenancy-hub-member-edge-1")
            );
        }
        let data = data_text(e.config.data.as_ref().unwrap());
        assert_eq!(data["cluster"], "edge-1");
        assert_ne!(
            data["sealKey"],
            seal.to_hex(),
            "never the operator's own key"
        );
    }

    #[test]
    fn the_bootstrap_identity_may_only_get_a_token_of_the_agent() {
        let seal = SealKey::from_bytes(&[3u8; 32]).unwrap();
        let e = enrolled(&edge1(), owner(), None, &seal, 6_000);
        assert!(e.operator.is_none());
        let bootstrap = e.roles[1].rules.as_ref().unwrap();
        assert_eq!(bootstrap.len(), 1);
        assert_eq!(
            bootstrap[0].resources.as_deref(),
            Some(&["serviceaccounts/token".to_owned()][..])
        );
        assert_eq!(bootstrap[0].verbs, ["create"]);
        assert_eq!(
            bootstrap[0].resource_names.as_deref(),
            Some(&["agent".to_owned()][..])
        );
        let agent = e.roles[0].rules.as_ref().unwrap();
        assert!(agent.iter().all(|r| r.resource_names.is_none()
            || r.resource_names.as_deref() == Some(&["agent".to_owned()][..])));
        assert!(agent.iter().all(|r| {
            !r.verbs
                .iter()
                .any(|v| v == "*" || v == "escalate" || v == "bind")
        }));
    }

    #[test]
    fn the_operator_binds_itself_as_the_subject_its_name_says() {
        let account = subject_of("system:serviceaccount:tenancy-hub:operator");
        assert_eq!(
            (account.kind.as_str(), account.name.as_str()),
            ("ServiceAccount", "operator")
        );
        assert_eq!(account.namespace.as_deref(), Some("tenancy-hub"));
        let user = subject_of("admin");
        assert_eq!((user.kind.as_str(), user.name.as_str()), ("User", "admin"));
    }
}
