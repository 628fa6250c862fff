//! What a TenancyPolicy lets its releases ask of Helm, and which hub Secrets and ConfigMaps its Controllers and Alerts may read.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a policy lets its releases ask of Helm.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HelmRule {
    /// Whether a chart may set `install.disableHooks` or `upgrade.disableHooks`: skipping the
    /// hooks a platform relies on (a migration, a registration Job). Default true; false makes
    /// such a release `Forbidden` under this policy. Uninstalls skip delete hooks by default
    /// whatever this says, as they always have.
    #[serde(default = "yes")]
    pub allow_disable_hooks: bool,

    /// The CRD policies (`install.crds`, `upgrade.crds`, with their defaults `Create` and
    /// `Skip` when unset) the governed charts may use. Default `[Skip, Create]`: a chart may
    /// create the CRDs a cluster lacks, as the release's identity, never change one there.
    /// `CreateReplace` changes a cluster-wide schema every tenant of the cluster shares: list it
    /// to let these charts replace their CRDs; a release using a policy not listed is
    /// `Forbidden`, with nothing run.
    #[serde(default = "create_and_skip")]
    #[schemars(length(max = 3))]
    pub crd_policies: Vec<crate::api::crd::CrdPolicy>,

    /// Whether a chart may set `postRenderers` or `commonMetadata` (its own or an override's):
    /// patches over what the chart renders. Default true; false makes such a release `Forbidden`
    /// under this policy.
    #[serde(default = "yes")]
    pub allow_post_renderers: bool,

    /// Whether post-render patches and `commonMetadata` may change objects of the sensitive
    /// kinds: RBAC (Role, ClusterRole, RoleBinding, ClusterRoleBinding), admission webhooks and
    /// policies, CustomResourceDefinitions. Default false: a patch naming one is `Forbidden`, and
    /// the Helm executor fails a release whose patched manifest changes one (a patch may retarget
    /// the object it aims at, so the result is judged, not the target).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_post_render_sensitive_kinds: bool,
}

impl Default for HelmRule {
    fn default() -> Self {
        Self {
            allow_disable_hooks: true,
            crd_policies: create_and_skip(),
            allow_post_renderers: true,
            allow_post_render_sensitive_kinds: false,
        }
    }
}

/// The CRD policies a policy allows unless it says otherwise: those that never change a CRD
/// that exists.
pub(crate) fn create_and_skip() -> Vec<crate::api::crd::CrdPolicy> {
    use crate::api::crd::CrdPolicy;
    vec![CrdPolicy::Skip, CrdPolicy::Create]
}

fn yes() -> bool {
    true
}

/// Secrets of a governed hub namespace a Controller may name for a source: those named here or
/// carrying every label here; every Secret of the namespace when neither is given.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantSecretRule {
    /// Secret names, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Labels every allowed Secret carries, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

impl TenantSecretRule {
    /// True when the rule allows the Secret `name` whatever its labels.
    pub fn allows_by_name(&self, name: &str) -> bool {
        (self.names.is_empty() && self.match_labels.is_empty())
            || self.names.iter().any(|n| n == name)
    }

    /// True when the rule allows the Secret `name` with `labels`.
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.allows_by_name(name)
            || (!self.match_labels.is_empty()
                && self
                    .match_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v)))
    }
}

/// Secrets an Alert of a governed hub namespace may send to: those named here or carrying
/// every label here; every Secret of the namespace when neither is given.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertSecretRule {
    /// Secret names, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Labels every allowed Secret carries, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

impl AlertSecretRule {
    /// The same rule as a `valuesFrom` rule of kind Secret, which decides alike.
    fn as_values_rule(&self) -> ValuesRule {
        ValuesRule {
            kind: Some(crate::api::crd::ValuesKind::Secret),
            names: self.names.clone(),
            match_labels: self.match_labels.clone(),
        }
    }

    /// True when the rule allows the Secret `name` with `labels`.
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.as_values_rule()
            .allows(crate::api::crd::ValuesKind::Secret, name, labels)
    }

    /// True when the rule may allow a Secret of that name only by its labels (so they must be
    /// looked at); false when it allows or refuses by name alone.
    pub fn needs_labels(&self, name: &str) -> bool {
        !self.match_labels.is_empty() && !self.allows(name, &BTreeMap::new())
    }
}

/// Hub objects a governed Controller may read values from: those of the kind (both when
/// omitted) named here or carrying every label here; every object of the kind when neither is
/// given.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValuesRule {
    /// `Secret` or `ConfigMap`; both when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::api::crd::ValuesKind>,
    /// Object names, exactly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// Labels every allowed object carries, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

impl ValuesRule {
    /// True when the rule allows the object of `kind`, `name` and `labels`.
    pub fn allows(
        &self,
        kind: crate::api::crd::ValuesKind,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let kind_ok = self.kind.is_none_or(|k| k == kind);
        let named = self.names.iter().any(|n| n == name);
        let labelled = !self.match_labels.is_empty()
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v));
        let any = self.names.is_empty() && self.match_labels.is_empty();
        kind_ok && (any || named || labelled)
    }
}
