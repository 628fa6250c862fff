//! Pull members as the hub names them: the hub namespace of each, where its work and its reports live, and the names inside it.

use sha2::{Digest, Sha256};

use crate::api::key::ClusterName;

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

#[cfg(test)]
mod tests {
    use super::*;

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
