//! Post-render patches under the policies (pure): whether a chart entry asks for any, and the sensitive kinds (RBAC, admission webhooks and policies, CRDs) its patches name.

use crate::api::{crd::Chart, policy::TenancyPolicySpec};

/// True when a chart entry or any of its overrides asks for a post-render.
pub(crate) fn asked(chart: &Chart) -> bool {
    chart.common_metadata.is_some()
        || !chart.post_renderers.is_empty()
        || chart.overrides.iter().any(|o| !o.post_renderers.is_empty())
}

/// The kinds a post-render changes only where a policy allows it, by group and kind: RBAC,
/// admission webhooks and policies, CRDs (the executor judges the patched manifest by the same
/// list, `helm-sdk/postrender.go`).
pub(crate) const SENSITIVE_KINDS: &[(&str, &str)] = &[
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
];

/// A sensitive kind a chart entry's patches name, in a target or as a strategic merge patch's
/// own `kind`, or None. The hub's early word: the executor judges what the patches did.
pub(crate) fn sensitive_kind_named(chart: &Chart) -> Option<String> {
    let every = chart
        .post_renderers
        .iter()
        .chain(chart.overrides.iter().flat_map(|o| &o.post_renderers))
        .filter_map(|r| r.kustomize.as_ref())
        .flat_map(|k| &k.patches);
    every.into_iter().find_map(|p| {
        let from_target = p.target.as_ref().and_then(|t| t.kind.clone());
        let own = serde_yaml::from_str::<serde_json::Value>(&p.patch)
            .ok()
            .and_then(|v| v.get("kind")?.as_str().map(str::to_owned));
        [from_target, own]
            .into_iter()
            .flatten()
            .find(|kind| SENSITIVE_KINDS.iter().any(|(_, k)| k == kind))
    })
}

/// The first rule of `policy` a chart entry's post-render breaks, or None.
pub(crate) fn broken_rule(policy: &TenancyPolicySpec, chart: &Chart) -> Option<String> {
    if !asked(chart) {
        return None;
    }
    let rule = policy.helm.clone().unwrap_or_default();
    if !rule.allow_post_renderers {
        return Some(
            "postRenderers or commonMetadata is set, and helm.allowPostRenderers is false: the chart is deployed as it renders".into(),
        );
    }
    if rule.allow_post_render_sensitive_kinds {
        return None;
    }
    sensitive_kind_named(chart).map(|kind| {
        format!(
            "a post-render patch names kind {kind}, and helm.allowPostRenderSensitiveKinds is false: RBAC, admission webhooks and CRDs are deployed as the chart renders them"
        )
    })
}
