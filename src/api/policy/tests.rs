//! Tests of the TenancyPolicy resource: its generated CRD and the documented example.

use super::*;
use kube::CustomResourceExt;

#[test]
fn the_policy_crd_is_cluster_scoped_and_carries_its_rules() {
    let crd = TenancyPolicy::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("tenancypolicies.multitenancy.dev")
    );
    assert_eq!(crd.spec.scope, "Cluster");
    let yaml = serde_yaml::to_string(&crd).unwrap();
    for needle in [
        "impersonating system:masters",
        "a policy without either allows no cluster",
        "pattern: ^([*]|",
        "pattern: ^(chart-home|",
        "set trusted: true to let Helm act",
    ] {
        assert!(yaml.contains(needle), "CRD lacks {needle:?}");
    }
}

#[test]
fn the_committed_policy_crd_matches_the_code() {
    let committed = include_str!("../../../crds/tenancypolicies.multitenancy.dev.yaml");
    assert!(
        committed.strip_prefix("---\n") == Some(crate::api::policy_crd_yaml().as_str()),
        "crds/tenancypolicies.multitenancy.dev.yaml is stale: run kind/crds.sh"
    );
}

#[test]
fn the_example_of_the_documentation_parses() {
    let p: TenancyPolicy = serde_yaml::from_str(
        "apiVersion: multitenancy.dev/v1alpha1\nkind: TenancyPolicy\nmetadata: {name: team-a}\nspec:\n  hubNamespaces: [team-a]\n  clusters: [member-1]\n  clusterSelector: {matchLabels: {env: dev}}\n  namespaces: [team-a, \"team-a-*\"]\n  chartSources: [chart-home, \"https://charts.example.com/\"]\n  impersonate: {user: team-a-deployer, groups: [team-a], namespaceRole: admin}\n",
    )
    .unwrap();
    assert_eq!(p.spec.namespaces, ["team-a", "team-a-*"]);
    let who = p.spec.impersonate.unwrap();
    assert_eq!(who.user, "team-a-deployer");
    assert_eq!(who.namespace_role.as_deref(), Some("admin"));
}
