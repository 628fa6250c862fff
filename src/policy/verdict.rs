//! Admission's verdicts on one release: the rules a policy's release breaks, whether it is allowed and as whom, adoption, removal, and policies that disagree on the identity.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    api::crd::{Chart, HUB_CLUSTER},
    api::key::{ClusterName, ReleaseKey},
    api::policy::{Impersonation, TenancyPolicySpec},
    policy::chart_source::describe_source,
    policy::{Admission, Mode, NamedPolicy, Verdict, git, helm, namespace_allowed},
};

impl Admission {
    /// Whether a policy allows a cluster: by name, or a member by its registration labels.
    fn cluster_allowed(
        policy: &TenancyPolicySpec,
        cluster: &ClusterName,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if policy.clusters.iter().any(|c| c == cluster.as_str()) {
            return true;
        }
        cluster.as_str() != HUB_CLUSTER
            && policy.cluster_selector.as_ref().is_some_and(|s| {
                labels.is_some_and(|labels| {
                    s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
            })
    }

    /// The first rule of `policy` the release breaks, or None when the policy allows it.
    fn broken_rule(
        &self,
        policy: &TenancyPolicySpec,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: Option<&Chart>,
    ) -> Option<String> {
        if let Err(why) = policy.identity() {
            return Some(why.to_owned());
        }
        let cluster = &key.scope.cluster;
        if !Self::cluster_allowed(policy, cluster, labels) {
            return Some(if cluster.as_str() == HUB_CLUSTER {
                "the hub cluster is allowed only when named in clusters".into()
            } else {
                format!("cluster {cluster} is not allowed")
            });
        }
        let namespace = &key.scope.namespace;
        let protected = self.protected();
        if !policy
            .namespaces
            .iter()
            .any(|p| namespace_allowed(p, namespace, &protected))
        {
            return Some(if protected.contains(&namespace.as_str()) {
                format!("namespace {namespace} is protected and not named exactly")
            } else {
                format!("namespace {namespace} is not allowed")
            });
        }
        if let Some(source) = chart.and_then(|c| c.git.as_ref())
            && let Some(rule) = git::rule(policy, source.into())
        {
            return Some(rule);
        }
        if let Some(chart) = chart
            && !Self::source_allowed(policy, chart)
        {
            return Some(format!(
                "chart source {} is not in chartSources",
                describe_source(chart)
            ));
        }
        chart.and_then(|chart| helm::broken_rule(policy, chart))
    }

    /// Whether the post-render of an allowed release may change objects of the sensitive kinds:
    /// as the policy its identity comes from says (see [`Admission::admit`]); true where no
    /// policy allows it and the mode is permissive, which enforces nothing.
    pub(crate) fn post_render_sensitive_allowed(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: &Chart,
    ) -> bool {
        let governing = self.governing(hub_namespace);
        let allowing = governing.iter().copied().filter(|p| {
            self.broken_rule(&p.spec, key, labels, Some(chart))
                .is_none()
        });
        match Self::chosen(allowing) {
            Some(policy) => policy
                .spec
                .helm
                .as_ref()
                .is_some_and(|h| h.allow_post_render_sensitive_kinds),
            None => self.mode == Mode::Permissive,
        }
    }

    /// What the policies say of one release of a `Controller` in `hub_namespace`: allowed (and as
    /// whom: the first allowing policy by name), or refused with the rules it breaks.
    pub(crate) fn admit(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: &Chart,
    ) -> Verdict {
        if let Err(rule) = self.check_source(hub_namespace, chart) {
            return Verdict::Refused(rule);
        }
        if let Err(rule) = self.credentials(hub_namespace, chart) {
            return Verdict::Refused(rule);
        }
        let governing = self.governing(hub_namespace);
        if let Some(allowing) = Self::chosen(governing.iter().copied().filter(|p| {
            self.broken_rule(&p.spec, key, labels, Some(chart))
                .is_none()
        })) {
            return Verdict::Allowed {
                identity: allowing.spec.impersonate.clone(),
                warning: None,
            };
        }
        let why = if governing.is_empty() {
            format!(
                "no TenancyPolicy governs hub namespace {hub_namespace}: a platform admin must list it in a policy's hubNamespaces"
            )
        } else {
            let each: Vec<String> = governing
                .iter()
                .map(|p| {
                    let rule = self
                        .broken_rule(&p.spec, key, labels, Some(chart))
                        .unwrap_or_default();
                    format!("TenancyPolicy {}: {rule}", p.name)
                })
                .collect();
            format!(
                "not allowed by the policies governing hub namespace {hub_namespace} ({})",
                each.join("; ")
            )
        };
        match self.mode {
            Mode::Enforce => Verdict::Refused(why),
            Mode::Permissive => Verdict::Allowed {
                identity: None,
                warning: Some(format!(
                    "would be refused under --tenancy-policy enforce: {why}"
                )),
            },
        }
    }

    /// Whether a Controller of `hub_namespace` may take over the existing release `key` that
    /// tenancy-hub does not own (its chart entry sets `adopt`): the policy whose identity acts for
    /// it (see [`Self::chosen`]) must set `allowAdoption`. In every mode: adoption is never taken
    /// with the operator's own rights for want of a policy. Err says why not and what to do.
    pub(crate) fn adoption(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: &Chart,
    ) -> Result<(), String> {
        let governing = self.governing(hub_namespace);
        let acting = Self::chosen(governing.iter().copied().filter(|p| {
            self.broken_rule(&p.spec, key, labels, Some(chart))
                .is_none()
        }));
        match acting {
            Some(p) if p.spec.allow_adoption => Ok(()),
            Some(p) => Err(format!(
                "TenancyPolicy {}, which allows this release, does not set allowAdoption: a platform admin must allow adoption there to take over a release tenancy-hub does not own",
                p.name
            )),
            None => Err(format!(
                "no TenancyPolicy governing hub namespace {hub_namespace} allows this release: adoption needs one that does and sets allowAdoption"
            )),
        }
    }

    /// The policy whose identity Helm acts as, of those allowing a release: impersonating
    /// policies before trusted ones (the narrower rights win), then the first by name. One rule
    /// for every action, so the identity never depends on which policy the store lists first.
    fn chosen<'a>(allowing: impl Iterator<Item = &'a NamedPolicy>) -> Option<&'a NamedPolicy> {
        allowing.min_by(|a, b| (a.spec.trusted, &a.name).cmp(&(b.spec.trusted, &b.name)))
    }

    /// Whom Helm acts as to uninstall a release: the identity of a governing policy that allows
    /// its cluster and namespace now, chosen by the same rule as for delivery. When none does,
    /// nothing may run (`Err`, the reason): the release is reported and left in place. In
    /// permissive mode such a release is removed with the operator's credentials, as it was
    /// delivered.
    pub(crate) fn identity_for_removal(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<Impersonation>, String> {
        let governing = self.governing(hub_namespace);
        if let Some(p) = Self::chosen(
            governing
                .iter()
                .copied()
                .filter(|p| self.broken_rule(&p.spec, key, labels, None).is_none()),
        ) {
            return Ok(p.spec.impersonate.clone());
        }
        match self.mode {
            Mode::Permissive => Ok(None),
            Mode::Enforce => Err(format!(
                "removing it is not allowed by the policies governing hub namespace {hub_namespace} ({}): nothing runs with the operator's own rights on a tenant's behalf; it is left in place until a policy allows its cluster and namespace again",
                if governing.is_empty() {
                    "none governs it".to_owned()
                } else {
                    governing
                        .iter()
                        .map(|p| {
                            format!(
                                "TenancyPolicy {}: {}",
                                p.name,
                                self.broken_rule(&p.spec, key, labels, None)
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                }
            )),
        }
    }

    /// Hub namespaces whose governing policies disagree on the identity Helm acts as (trusted
    /// against impersonated, or different users), each with a sentence for the log: which
    /// identity a release both allow gets, by the rule of [`Self::chosen`].
    pub(crate) fn disagreements(&self) -> Vec<String> {
        let namespaces: BTreeSet<&str> = self
            .policies
            .iter()
            .flat_map(|p| p.spec.hub_namespaces.iter().map(String::as_str))
            .collect();
        namespaces
            .into_iter()
            .filter_map(|ns| {
                let governing = self.governing(ns);
                let identities: BTreeSet<String> =
                    governing.iter().map(|p| describe_identity(&p.spec)).collect();
                (identities.len() > 1).then(|| {
                    let each: Vec<String> = governing
                        .iter()
                        .map(|p| format!("{} ({})", p.name, describe_identity(&p.spec)))
                        .collect();
                    format!(
                        "the TenancyPolicies governing hub namespace {ns} disagree on the identity Helm acts as: {}; a release several of them allow goes as an impersonating one before a trusted one, then the first by name",
                        each.join(", ")
                    )
                })
            })
            .collect()
    }
}

/// A policy's identity in words: `trusted`, `as user U`, or why it names none.
pub(crate) fn describe_identity(policy: &TenancyPolicySpec) -> String {
    match policy.identity() {
        Ok(None) => "trusted: the operator's credentials".to_owned(),
        Ok(Some(who)) => format!("as user {}", who.user),
        Err(_) => "no identity".to_owned(),
    }
}
