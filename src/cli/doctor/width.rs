//! The `hub-rbac-width` judgement of `doctor`, pure: whether the rights the operator's identity holds on the hub are wider than deploy/rbac.yaml documents.

use k8s_openapi::api::authorization::v1::ResourceRule;

use super::judge::{Finding, Identities, Verdict, hub_rights};

/// Rights Kubernetes gives every authenticated identity (ClusterRole system:basic-user): asking
/// what oneself may do.
const EVERYONE_MAY: [(&str, &str); 3] = [
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
];

/// How many of the rights wider than documented a finding lists by name.
const WIDER_LISTED: usize = 12;

/// Judges the rights the operator's identity holds in every namespace (`held`, a
/// SelfSubjectRulesReview's resource rules in a namespace with no binding of its own) against
/// the documented ones: ClusterRole tenancy-hub of deploy/rbac.yaml, with `impersonate` of
/// `identities` alone. `rolebinding_anywhere` says whether a dry-run RoleBinding in a namespace
/// the operator did not create was accepted (None: not known). Warns naming each wider right.
pub(crate) fn wider_rights(
    held: &[ResourceRule],
    identities: &Identities,
    rolebinding_anywhere: Option<bool>,
) -> Finding {
    let documented = hub_rights("", &[], identities);
    let covered = |group: &str, resource: &str, verb: &str, name: Option<&str>| {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (resource, None),
        };
        (verb == "create" && EVERYONE_MAY.contains(&(group, resource)))
            || documented.iter().any(|a| {
                a.namespace.is_none()
                    && a.group == group
                    && a.resource == resource
                    && a.subresource.as_deref() == subresource
                    && a.verb == verb
                    && (a.name.is_none() || a.name.as_deref() == name.filter(|n| !n.is_empty()))
            })
    };
    let mut wider = Vec::new();
    for rule in held {
        let names: Vec<Option<&str>> = match &rule.resource_names {
            Some(names) if !names.is_empty() => names.iter().map(|n| Some(n.as_str())).collect(),
            _ => vec![None],
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    for name in &names {
                        if !covered(group, resource, verb, *name) {
                            let group = if group.is_empty() {
                                String::new()
                            } else {
                                format!(".{group}")
                            };
                            wider.push(match name {
                                Some(name) => format!("{verb} {resource}{group} {name}"),
                                None => format!("{verb} {resource}{group} (any name)"),
                            });
                        }
                    }
                }
            }
        }
    }
    let mut fix = Vec::new();
    if !wider.is_empty() {
        fix.push(
            "keep in the ClusterRoles bound to the operator's identity only deploy/rbac.yaml's \
             ClusterRole tenancy-hub (kubectl get clusterrolebindings -o wide shows what is \
             bound), with `impersonate` limited by resourceNames to the users and groups the \
             TenancyPolicies name"
                .to_owned(),
        );
    }
    if rolebinding_anywhere == Some(true) {
        wider.push("create rolebindings in namespace default, which it did not create".into());
        fix.push(
            "apply deploy/rbac.yaml's ValidatingAdmissionPolicy tenancy-hub-rolebindings and its \
             binding, naming the operator's ServiceAccount"
                .to_owned(),
        );
    }
    if wider.is_empty() {
        return Finding::pass(
            "hub-rbac-width",
            "hub",
            "no right beyond deploy/rbac.yaml's, impersonating only what the policies name".into(),
        );
    }
    let count = wider.len();
    let mut listed: Vec<String> = wider.into_iter().take(WIDER_LISTED).collect();
    if count > WIDER_LISTED {
        listed.push(format!("and {} more", count - WIDER_LISTED));
    }
    Finding::not_passed(
        "hub-rbac-width",
        "hub",
        Verdict::Warn,
        format!(
            "wider than deploy/rbac.yaml by {count}: {}",
            listed.join(", ")
        ),
        fix.join("; "),
    )
}
