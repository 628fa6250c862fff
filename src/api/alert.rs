//! The namespaced `multitenancy.dev/v1alpha1` `Alert`: where the events of the Controllers of its own hub namespace are sent (a provider and its Secret) and which of them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Controller's name as the API server allows it (a DNS-1123 subdomain): what `controllers`
/// holds, so a `namespace/name` is refused when the Alert is written rather than never matched.
const CONTROLLER_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Sends the events of the Controllers of its own hub namespace to a webhook.
///
/// Written by tenants: an Alert sees only the Controllers of its namespace, and its Secret is
/// read only when a `TenancyPolicy` governing that namespace allows it (`alertSecrets`). The
/// operator follows the first 100 Alerts of a namespace (oldest first); later ones send nothing.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multitenancy.dev",
    version = "v1alpha1",
    kind = "Alert",
    namespaced,
    status = "AlertStatus",
    category = "tenancy",
    doc = "Sends the events of the Controllers of its own hub namespace (failures, recoveries, drift, rollout halts) to a webhook: generic JSON signed with HMAC-SHA256, Slack or Microsoft Teams.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider.type"),
    printcolumn(
        name = "Sent",
        type_ = "integer",
        description = "Messages delivered",
        json_path = ".status.sent"
    ),
    printcolumn(name = "Last-Sent", type_ = "date", json_path = ".status.lastSentTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AlertSpec {
    /// Where messages go and in which shape.
    pub provider: AlertProvider,

    /// The events sent; every event when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub events: Vec<AlertEvent>,

    /// Names of Controllers of this namespace whose events are sent; every Controller of the
    /// namespace when empty. A name only: another namespace's Controllers cannot be named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 1, max = 253), regex(pattern = CONTROLLER_NAME))
    )]
    pub controllers: Vec<String>,

    /// Sends nothing while true; events in the meantime are not sent later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

/// A webhook: its kind and the Secret holding its address (and, for `generic`, its signing key).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertProvider {
    /// `generic` (JSON, signed when the Secret has `hmacKey`), `slack` (an incoming webhook) or
    /// `msteams` (an incoming webhook or workflow taking a MessageCard).
    #[serde(rename = "type")]
    pub type_: ProviderType,

    /// A Secret of the Alert's own namespace with key `address` (the webhook's `http(s)` URL)
    /// and, for `generic`, optional key `hmacKey`. A TenancyPolicy governing the namespace must
    /// allow it (`alertSecrets`).
    pub secret_ref: SecretName,
}

/// The kinds of webhook an Alert sends to.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProviderType {
    /// JSON with every field of the event, signed with HMAC-SHA256 when a key is given.
    #[default]
    Generic,
    /// A Slack incoming webhook (`text` and `blocks`).
    Slack,
    /// A Microsoft Teams incoming webhook (a MessageCard).
    Msteams,
}

impl std::fmt::Display for ProviderType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Generic => "generic",
            Self::Slack => "slack",
            Self::Msteams => "msteams",
        })
    }
}

/// A Secret of the same namespace, by name.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SecretName {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What happened to a Controller, as an Alert filters and names it.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum AlertEvent {
    /// The Controller became `Stalled` (a release failed, the spec cannot be carried out, a
    /// conflict), or its reason for it changed.
    Stalled,
    /// The Controller became `Degraded` while nothing stalls it (pods failing, releases orphaned).
    Degraded,
    /// Releases became `Forbidden` by the tenancy policies.
    Forbidden,
    /// A release's live objects differ from its manifest (a new finding).
    DriftDetected,
    /// Drift was repaired by applying the release again.
    DriftRepaired,
    /// A progressive rollout halted.
    RolloutHalted,
    /// A halted rollout was resumed.
    RolloutResumed,
    /// The Controller is `Ready` again after it was stalled or degraded.
    Recovered,
}

impl AlertEvent {
    /// Every event, in the order the documentation lists them.
    pub const ALL: [AlertEvent; 8] = [
        Self::Stalled,
        Self::Degraded,
        Self::Forbidden,
        Self::DriftDetected,
        Self::DriftRepaired,
        Self::RolloutHalted,
        Self::RolloutResumed,
        Self::Recovered,
    ];

    /// The event's name, as in the spec and the payloads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stalled => "Stalled",
            Self::Degraded => "Degraded",
            Self::Forbidden => "Forbidden",
            Self::DriftDetected => "DriftDetected",
            Self::DriftRepaired => "DriftRepaired",
            Self::RolloutHalted => "RolloutHalted",
            Self::RolloutResumed => "RolloutResumed",
            Self::Recovered => "Recovered",
        }
    }

    /// True for the events that tell something went wrong.
    pub fn is_warning(self) -> bool {
        !matches!(
            self,
            Self::DriftRepaired | Self::RolloutResumed | Self::Recovered
        )
    }
}

impl std::fmt::Display for AlertEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the operator found of an Alert and what it sent.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AlertStatus {
    /// `Ready`: whether messages can be sent, and when not, what is wrong and what to do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The webhook's scheme and host (never its path, query or credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,

    /// When a message was last delivered (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sent_time: Option<String>,

    /// Messages delivered since the operator started.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub sent: u64,

    /// Messages given up after every attempt failed, since the operator started.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub failed: u64,

    /// Messages not sent, since the operator started: over the rate limit, or the operator's
    /// queue of messages was full.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub dropped: u64,

    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The `Alert` CustomResourceDefinition as YAML, exactly as `crds/` holds it.
pub fn alert_crd_yaml() -> String {
    serde_yaml::to_string(&Alert::crd()).expect("a CustomResourceDefinition always serializes")
}

/// A count in a status: an integer of a format the API server knows (`int64`), never negative.
fn count(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "format": "int64",
        "minimum": 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alert_crd_is_namespaced_with_a_status() {
        let crd = Alert::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("alerts.multitenancy.dev")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let yaml = alert_crd_yaml();
        for needle in ["DriftRepaired", "msteams", "secretRef", "subresources"] {
            assert!(yaml.contains(needle), "CRD lacks {needle:?}");
        }
    }

    #[test]
    fn controllers_are_names_of_the_alerts_own_namespace_never_namespace_slash_name() {
        let crd = serde_json::to_value(Alert::crd()).unwrap();
        let items = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["controllers"]["items"];
        let pattern = items["pattern"].as_str().unwrap_or_default();
        assert_eq!(pattern, CONTROLLER_NAME, "{items}");
    }

    #[test]
    fn the_committed_alert_crd_matches_the_code() {
        let committed = include_str!("../../crds/alerts.multitenancy.dev.yaml");
        assert!(
            committed == alert_crd_yaml(),
            "crds/alerts.multitenancy.dev.yaml is stale: run kind/crds.sh"
        );
    }

    #[test]
    fn the_example_of_the_documentation_parses() {
        let a: Alert = serde_yaml::from_str(
            "apiVersion: multitenancy.dev/v1alpha1\nkind: Alert\nmetadata: {name: on-call, namespace: team-a}\nspec:\n  provider: {type: slack, secretRef: {name: slack-webhook}}\n  events: [Stalled, Recovered, RolloutHalted]\n  controllers: [shop]\n",
        )
        .unwrap();
        assert_eq!(a.spec.provider.type_, ProviderType::Slack);
        assert_eq!(a.spec.events.len(), 3);
        assert!(!a.spec.suspend);
    }
}
