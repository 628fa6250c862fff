//! Pull members as the hub names them: the cluster-scoped `MemberCluster` resource that joins one, its hub namespace, where its work and its reports live, and the names inside it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::key::ClusterName;

/// A member cluster that joins the hub from inside: its agent connects out to the hub, so the hub
/// needs no credentials of it. The object's name is the cluster's name.
// The printer columns repeat `type_`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multitenancy.dev",
    version = "v1alpha1",
    kind = "MemberCluster",
    status = "MemberClusterStatus",
    shortname = "mc",
    category = "tenancy",
    doc = "A member cluster whose agent connects out to the hub (a pull member). The name is the cluster's name, as Controllers name it in `clusters`; its labels and variables are those of a registration entry.",
    validation = Rule::new("self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63")
        .message("a MemberCluster's name is its cluster's name: a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)"),
    validation = Rule::new("self.metadata.name != 'hub'")
        .message("the name hub is reserved for the hub cluster itself: choose another name"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Joined",
        type_ = "boolean",
        description = "Whether the agent has obtained its token",
        json_path = ".status.joined"
    ),
    printcolumn(
        name = "Last-Seen",
        type_ = "date",
        description = "When the agent last renewed its Lease",
        json_path = ".status.lastSeen"
    ),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        priority = 1,
        description = "The member's hub namespace",
        json_path = ".status.namespace"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// Labels matched by `clusterSelector` (in Controllers and TenancyPolicies), and read by values
    /// as `${cluster.labels.KEY}`, as a registration entry's labels are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub labels: BTreeMap<String, String>,

    /// Values of any type read by values as `${cluster.variables.KEY}` (a whole-string reference
    /// keeps the type: `replicas: 3` gives the number 3), as a registration entry's variables are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "free_form_map")]
    pub variables: BTreeMap<String, serde_json::Value>,
}

/// What the operator found of a pull member: where it lives on the hub, whether its agent has
/// joined and when it was last seen.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterStatus {
    /// The member's hub namespace: its work, its reports, its agent's identity and Lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// True once the agent has obtained its own token with a bootstrap token (it has written its
    /// Lease in the member's hub namespace).
    #[serde(default)]
    pub joined: bool,

    /// When the agent last renewed its Lease (RFC 3339), to within 30 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<String>,

    /// `Ready` (the agent is enrolled and renews its Lease) and `Stale` (its Lease has expired),
    /// with reasons and messages saying what to do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

fn free_form_map(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 256,
        "additionalProperties": {"x-kubernetes-preserve-unknown-fields": true},
        "description": "Values of any type read by values as `${cluster.variables.KEY}` (a whole-string reference keeps the type: `replicas: 3` gives the number 3), as a registration entry's variables are."
    })
}

/// The `MemberCluster` CustomResourceDefinition as YAML, exactly as `crds/` holds it.
pub fn member_cluster_crd_yaml() -> String {
    serde_yaml::to_string(&MemberCluster::crd())
        .expect("a CustomResourceDefinition always serializes")
}

/// Label on a pull member's hub namespace naming the member.
pub const MEMBER_LABEL: &str = "multitenancy.dev/member-cluster";
/// The agent's ServiceAccount in a pull member's hub namespace.
pub const AGENT_ACCOUNT: &str = "agent";
/// The ServiceAccount whose short-lived tokens join a member: it may only get a token of
/// [`AGENT_ACCOUNT`].
pub const BOOTSTRAP_ACCOUNT: &str = "bootstrap";
/// The Secret, written by the operator, that tells the agent who it is and how to check the hub.
pub const AGENT_CONFIG_SECRET: &str = "agent-config";
/// The Lease the agent renews while it runs.
pub const AGENT_LEASE: &str = "agent";
/// Prefix of every pull member's hub namespace.
const NAMESPACE_PREFIX: &str = "tenancy-hub-member-";

/// The hub namespace of the pull member `cluster`: `tenancy-hub-member-NAME`, or for a name too
/// long for that, its first 35 characters and 8 hex digits of its SHA-256.
pub fn pull_namespace(cluster: &ClusterName) -> String {
    let whole = format!("{NAMESPACE_PREFIX}{cluster}");
    if whole.len() <= 63 {
        return whole;
    }
    let digest = Sha256::digest(cluster.as_str().as_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let head = cluster.as_str()[..35].trim_end_matches('-');
    format!("{NAMESPACE_PREFIX}{head}-{short}")
}

/// The pull member whose hub namespace is `namespace`, when its name can be read back from it:
/// every name whose namespace is not shortened with a digest (names up to 44 characters); a
/// shortened namespace gives the name its text spells, whose namespace it also is.
pub fn member_of_pull_namespace(namespace: &str) -> Option<ClusterName> {
    let name: ClusterName = namespace.strip_prefix(NAMESPACE_PREFIX)?.parse().ok()?;
    (pull_namespace(&name) == namespace).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_cluster_crd_is_cluster_scoped_with_its_name_rules() {
        let crd = MemberCluster::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("memberclusters.multitenancy.dev")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["mc".to_owned()]));
        let yaml = member_cluster_crd_yaml();
        for needle in [
            "the name hub is reserved",
            "a DNS-1123 label",
            "x-kubernetes-preserve-unknown-fields: true",
            "status: {}",
        ] {
            assert!(yaml.contains(needle), "CRD lacks {needle:?}");
        }
    }

    #[test]
    fn the_committed_member_cluster_crd_matches_the_code() {
        let committed = include_str!("../../crds/memberclusters.multitenancy.dev.yaml");
        assert!(
            committed.strip_prefix("---\n") == Some(member_cluster_crd_yaml().as_str()),
            "crds/memberclusters.multitenancy.dev.yaml is stale: run kind/crds.sh"
        );
    }

    #[test]
    fn a_member_cluster_reads_with_labels_and_typed_variables() {
        let mc: MemberCluster = serde_yaml::from_str(
            "apiVersion: multitenancy.dev/v1alpha1\nkind: MemberCluster\nmetadata: {name: edge-1}\nspec:\n  labels: {region: east}\n  variables: {replicas: 3, zone: eu-1a}\n",
        )
        .unwrap();
        assert_eq!(mc.spec.labels["region"], "east");
        assert_eq!(mc.spec.variables["replicas"], serde_json::json!(3));
        assert_eq!(mc.status, None);
    }

    #[test]
    fn a_pull_namespace_names_its_member_back_unless_shortened() {
        let edge: ClusterName = "edge-1".parse().unwrap();
        assert_eq!(
            member_of_pull_namespace("tenancy-hub-member-edge-1"),
            Some(edge)
        );
        assert_eq!(member_of_pull_namespace("team-a"), None);
        assert_eq!(member_of_pull_namespace("tenancy-hub-member-"), None);
        let long: ClusterName = "a".repeat(60).parse().unwrap();
        assert_ne!(
            member_of_pull_namespace(&pull_namespace(&long)),
            Some(long),
            "a shortened namespace does not name its member back"
        );
    }

    #[test]
    fn a_pull_namespace_fits_a_label_whatever_the_cluster_name() {
        let short: ClusterName = "edge-7".parse().unwrap();
        assert_eq!(pull_namespace(&short), "tenancy-hub-member-edge-7");
        let long: ClusterName = "a".repeat(63).parse().unwrap();
        let ns = pull_namespace(&long);
        assert!(ns.len() <= 63, "{ns}");
        assert!(ns.starts_with("tenancy-hub-member-aaa"));
        let other: ClusterName = format!("{}b", "a".repeat(62)).parse().unwrap();
        assert_ne!(pull_namespace(&other), ns);
    }
}
