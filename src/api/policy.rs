//! The cluster-scoped `multitenancy.dev/v1alpha1` `TenancyPolicy`: where tenants may deliver, from which chart sources, as whom.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod rules;
mod source_access;

pub(crate) use rules::create_and_skip;
pub use rules::{AlertSecretRule, HelmRule, TenantSecretRule, ValuesRule};
pub use source_access::{
    GitAccess, GitWebhook, OidcIdentityMatch, SourceAccess, SourceVerify, TransparencyLog,
    VerifyProvider,
};

/// Where the `Controller` resources of some hub namespaces may deliver, and as whom.
///
/// Written by platform admins. A release is allowed when one policy that governs its
/// `Controller`'s hub namespace allows its cluster, its target namespace and its chart source
/// together; several policies may govern one hub namespace, and what any of them allows is allowed.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multitenancy.dev",
    version = "v1alpha1",
    kind = "TenancyPolicy",
    shortname = "tenpol",
    category = "tenancy",
    doc = "Allows the Controllers of some hub namespaces to deliver to some clusters and namespaces, from some chart sources, as an identity of their own.",
    printcolumn(
        name = "Hub-Namespaces",
        type_ = "string",
        json_path = ".spec.hubNamespaces"
    ),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(name = "User", type_ = "string", json_path = ".spec.impersonate.user"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.clusters) || has(self.clusterSelector)")
        .message("name the allowed clusters, select them by label, or both: a policy without either allows no cluster"),
    validation = Rule::new("has(self.impersonate) != (has(self.trusted) && self.trusted)")
        .message("say as whom Helm acts for this policy's releases: impersonate an identity of the tenants' own, or set trusted: true to let Helm act with the operator's own credentials (not both)")
)]
pub struct TenancyPolicySpec {
    /// Hub namespaces whose `Controller` resources this policy governs, by exact name.
    #[schemars(
        length(min = 1, max = 256),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub hub_namespaces: Vec<String>,

    /// Registered cluster names releases may go to. The hub cluster (`hub`) is allowed only when
    /// named here, never by `clusterSelector`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub clusters: Vec<String>,

    /// Allows the member clusters whose registration labels match (an empty selector matches
    /// every member). With neither `clusters` nor `clusterSelector`, no cluster is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<PolicyClusterSelector>,

    /// Target namespaces releases may go to: an exact name, a prefix ending in `*` (`team-a-*`),
    /// or `*` for any. `kube-system`, `kube-public`, `kube-node-lease` and the operator's own
    /// namespace are matched only by their exact name, never by a pattern.
    #[schemars(
        length(min = 1, max = 256),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^([*]|[a-z0-9]([-a-z0-9]*[a-z0-9])?|[a-z0-9][-a-z0-9]*[*])$")
        )
    )]
    pub namespaces: Vec<String>,

    /// Where charts may come from: `chart-home` (the operator's local chart directory), or a URL
    /// prefix: `https://charts.example.com/` for Helm repositories, `oci://registry.example.com/team-a/`
    /// for OCI charts. A prefix matches whole path segments. `http://` repositories are refused
    /// unless a prefix here names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 2048),
            regex(pattern = r"^(chart-home|https://[^/@]+.*|http://[^/@]+.*|oci://[^/@]+.*)$")
        )
    )]
    pub chart_sources: Vec<String>,

    /// Chart sources with what the hub fetches them with: each entry allows its prefix as a
    /// `chartSources` entry does, and may name a Secret of the operator's own namespace holding
    /// the source's credentials and CA (`secretRef`), and Secrets of the governed hub namespaces
    /// a Controller may name for it instead (`tenantSecrets`). Among the entries of the policies
    /// governing a Controller's hub namespace whose prefix holds a chart's source, the longest
    /// prefix applies (ties: the first policy by name). Credentials are sent to the source's own
    /// scheme, host and port only, and never reach argv, logs, status or a member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub sources: Vec<SourceAccess>,

    /// The identity Helm acts as in the target clusters for releases this policy allows, so the
    /// cluster's own RBAC decides what a chart may create. Exactly one of `impersonate` and
    /// `trusted: true` must be given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonate: Option<Impersonation>,

    /// Lets Helm act with the operator's own credentials for releases this policy allows: the
    /// platform admin's explicit choice to trust these hub namespaces with every right the
    /// operator holds in the allowed clusters. Exactly one of `impersonate` and `trusted: true`
    /// must be given; a policy with neither allows nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,

    /// Which Secrets and ConfigMaps of the governed hub namespaces their Controllers may read
    /// values from (`valuesFrom`), in every mode. None when empty: a Controller reads only
    /// what a rule here allows, and only in its own hub namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub values_from: Vec<ValuesRule>,

    /// Which Secrets of the governed hub namespaces their `Alert`s may send to (the Secret holds
    /// the webhook's URL and signing key). Separate from `valuesFrom`, which never allows an
    /// Alert's Secret, nor this a chart's values. None when empty: an Alert's Secret is read
    /// only when a rule here allows it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub alert_secrets: Vec<AlertSecretRule>,

    /// Addresses inside the cluster or a private network the governed namespaces' Alerts may
    /// send to, otherwise refused: a CIDR (`10.20.0.0/16`, `fd00:1::/64`, `127.0.0.1/32`) or a
    /// host name exactly (`alertmanager.monitoring.svc`). The hub's own API server is never
    /// allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 253),
            regex(pattern = r"^([0-9a-fA-F:.]+/[0-9]{1,3}|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")
        )
    )]
    pub alert_internal_addresses: Vec<String>,

    /// What the governed Controllers' charts may ask of Helm itself (their `install`,
    /// `upgrade` and `uninstall` settings). Absent: everything the chart entry offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmRule>,

    /// Lets the governed Controllers take over (`adopt: true` on a chart) an existing Helm
    /// release tenancy-hub does not own, in the clusters and namespaces this policy allows,
    /// as this policy's identity. Default false: such a release is a `Conflict`. A release
    /// another Controller owns (its records sealed by the operator) is never taken over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_adoption: bool,
}

impl TenancyPolicySpec {
    /// Whom Helm acts as for this policy's releases: `Ok(None)` for the operator's own
    /// credentials (`trusted: true`), `Ok(Some(..))` for an impersonated identity, or the reason
    /// the policy names no identity (neither field, or both).
    pub fn identity(&self) -> Result<Option<&Impersonation>, &'static str> {
        match (&self.impersonate, self.trusted) {
            (Some(who), false) => Ok(Some(who)),
            (None, true) => Ok(None),
            (None, false) => Err(
                "it names no identity: set impersonate, or trusted: true to let Helm act with the operator's own credentials",
            ),
            (Some(_), true) => Err(
                "it sets both impersonate and trusted: keep one, so the identity Helm acts as is unambiguous",
            ),
        }
    }
}

/// Selects registered member clusters by label.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyClusterSelector {
    /// Every label here must be present, with this value, on the cluster's registration entry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A user and groups Helm impersonates (`--kube-as-user`, `--kube-as-group`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Impersonation {
    /// User name, as the target clusters' RBAC knows it (for example `team-a-deployer`, or
    /// `system:serviceaccount:NAMESPACE:NAME`).
    #[schemars(length(min = 1, max = 253))]
    pub user: String,

    /// Groups of the user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = Rule::new("!self.exists(g, g == 'system:masters')")
        .message("impersonating system:masters would give tenants every right: use a group of their own"))]
    pub groups: Vec<String>,

    /// A ClusterRole the operator binds to this user in every target namespace it creates for
    /// the policy's releases (a RoleBinding `tenancy-hub-deployer`), so the identity holds those
    /// rights there and nowhere else. Without it, the target clusters' admins grant the rights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub namespace_role: Option<String>,
}

#[cfg(test)]
mod tests;
