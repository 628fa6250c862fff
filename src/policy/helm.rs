//! What a policy lets a chart entry ask of Helm itself (pure): skipped hooks, CRD policies, post-render patches.

use crate::{
    api::{crd::Chart, policy::TenancyPolicySpec},
    policy::post_render,
};

/// The first of `policy`'s Helm rules `chart` breaks, or None.
pub(super) fn broken_rule(policy: &TenancyPolicySpec, chart: &Chart) -> Option<String> {
    if let Some(setting) = hooks_disabled(chart)
        && !policy.helm.as_ref().is_none_or(|h| h.allow_disable_hooks)
    {
        return Some(format!(
            "{setting} is set, and helm.allowDisableHooks is false: the chart's hooks must run"
        ));
    }
    crds_refused(policy, chart).or_else(|| post_render::broken_rule(policy, chart))
}

/// Why `policy` refuses the CRD policy of `chart`'s install or upgrade (their defaults when
/// unset: `Create` and `Skip`), if it does: one not in `helm.crdPolicies`.
fn crds_refused(policy: &TenancyPolicySpec, chart: &Chart) -> Option<String> {
    use crate::api::crd::CrdPolicy;
    let allowed = policy
        .helm
        .as_ref()
        .map_or_else(crate::api::policy::create_and_skip, |h| {
            h.crd_policies.clone()
        });
    let asked = [
        (
            "install.crds",
            chart.install.as_ref().and_then(|i| i.crds),
            CrdPolicy::Create,
        ),
        (
            "upgrade.crds",
            chart.upgrade.as_ref().and_then(|u| u.crds),
            CrdPolicy::Skip,
        ),
    ];
    let (setting, crds) = asked
        .into_iter()
        .map(|(setting, written, default)| (setting, written.unwrap_or(default)))
        .find(|(_, crds)| !allowed.contains(crds))?;
    let listed: Vec<String> = allowed.iter().map(ToString::to_string).collect();
    Some(format!(
        "{setting} is {crds}, which helm.crdPolicies [{}] does not list: CRDs are cluster-wide, shared by every tenant of the cluster; ask the platform team to list {crds}, or choose one listed",
        listed.join(", ")
    ))
}

/// The setting by which a chart entry skips its install or upgrade hooks, if it does.
fn hooks_disabled(chart: &Chart) -> Option<&'static str> {
    if chart.install.as_ref().is_some_and(|i| i.disable_hooks) {
        Some("install.disableHooks")
    } else if chart.upgrade.as_ref().is_some_and(|u| u.disable_hooks) {
        Some("upgrade.disableHooks")
    } else {
        None
    }
}
