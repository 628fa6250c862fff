//! Tests of the Controller resource: the generated CRD, the example and validation.

use super::*;

const SEED_EXAMPLE: &str = include_str!("../../../config/example-controller.yaml");

#[test]
fn the_seed_example_parses_unchanged() {
    let c: TenancyController = serde_yaml::from_str(SEED_EXAMPLE).unwrap();
    assert_eq!(c.metadata.name.as_deref(), Some("example-controller"));
    let t = &c.spec.tenancies[0];
    assert_eq!(t.namespace, "foo");
    assert!(t.clusters.is_empty() && t.cluster_selector.is_none());
    assert_eq!(t.charts[0].chart_name, "deployment-example");
    assert_eq!(t.charts[0].release_name, None);
    assert_eq!(t.charts[1].release_name.as_deref(), Some("nginx"));
    assert_eq!(t.charts[1].settings[1].key, "service.internalPort");
    assert_eq!(t.charts[1].settings[1].value, "8080");
}

#[test]
fn the_crd_is_namespaced_with_a_status_subresource() {
    let crd = controller_crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("controllers.multitenancy.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
}

#[test]
fn the_schema_carries_the_cel_rules_with_messages() {
    let yaml = crd_yaml();
    for needle in [
        "must be a DNS-1123 label",
        "release names must be unique within a tenancy",
        "limited to 53 characters",
        "maxLength: 53",
        "x-kubernetes-preserve-unknown-fields: true",
        "at most 10000 charts over all its tenancies",
        "a chart comes from repo or from git, not both",
        "maxProperties: 1",
    ] {
        assert!(yaml.contains(needle), "CRD lacks {needle:?}");
    }
}

#[test]
fn the_committed_crd_matches_the_code() {
    let committed = include_str!("../../../crds/controllers.multitenancy.dev.yaml");
    assert!(
        committed.strip_prefix("---\n") == Some(crd_yaml().as_str()),
        "crds/controllers.multitenancy.dev.yaml is stale: run kind/crds.sh"
    );
}

#[test]
fn a_git_ref_names_exactly_one_thing_and_intervals_read_as_seconds() {
    let one = GitRef {
        tag: Some("v1".into()),
        ..GitRef::default()
    };
    assert_eq!(one.kind(), Ok(RefKind::Tag("v1".into())));
    assert!(GitRef::default().kind().is_err());
    let two = GitRef {
        branch: Some("main".into()),
        commit: Some("a".repeat(40)),
        ..GitRef::default()
    };
    assert!(two.kind().unwrap_err().contains("more than one"));
    let interval = |text: Option<&str>| git::interval_secs(text);
    assert_eq!(interval(None), 60);
    assert_eq!(interval(Some("1h30m")), 5400);
    assert_eq!(interval(Some("1s")), 10);
    assert_eq!(interval(Some("90000h")), 24 * 3600);
    assert_eq!(interval(Some("5x")), 60);
}
