use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

struct Fixture {
    cluster: ClusterName,
    labels: BTreeMap<String, String>,
    variables: BTreeMap<String, Value>,
}

fn fixture() -> Fixture {
    Fixture {
        cluster: "member-1".parse().unwrap(),
        labels: BTreeMap::from([
            ("region".into(), "east".into()),
            ("topology.kubernetes.io/zone".into(), "east-1a".into()),
        ]),
        variables: BTreeMap::from([
            ("replicas".into(), json!(3)),
            ("domains".into(), json!(["a.example.com", "b.example.com"])),
            ("prod".into(), json!(true)),
        ]),
    }
}

fn scope(f: &Fixture) -> Scope<'_> {
    Scope {
        cluster: &f.cluster,
        labels: &f.labels,
        variables: &f.variables,
        namespace: "team-a",
        controller_namespace: "tenants",
        controller_name: "dns",
    }
}

#[test]
fn references_to_the_registration_and_the_tenancy_are_replaced() {
    let f = fixture();
    let s = scope(&f);
    let text = "${cluster.name}.${cluster.labels.region}/${tenancy.namespace}/${controller.namespace}/${controller.name}";
    assert_eq!(
        render_str(text, &s).unwrap(),
        json!("member-1.east/team-a/tenants/dns")
    );
    assert_eq!(
        render_str("${cluster.labels.topology.kubernetes.io/zone}", &s).unwrap(),
        json!("east-1a")
    );
    assert_eq!(
        render_str("owner-${ cluster.name }", &s).unwrap(),
        json!("owner-member-1")
    );
}

#[test]
fn a_whole_string_reference_keeps_its_type_and_a_part_must_be_a_scalar() {
    let f = fixture();
    let s = scope(&f);
    assert_eq!(
        render_str("${cluster.variables.replicas}", &s).unwrap(),
        json!(3)
    );
    assert_eq!(
        render_str("${cluster.variables.domains}", &s).unwrap(),
        json!(["a.example.com", "b.example.com"])
    );
    assert_eq!(
        render_str("x${cluster.variables.replicas}", &s).unwrap(),
        json!("x3")
    );
    let e = render_str("list: ${cluster.variables.domains}", &s).unwrap_err();
    assert_eq!(e.expression, "${cluster.variables.domains}");
    assert!(e.why.contains("is a list"), "{e}");
    // A setting's value stays text.
    assert_eq!(
        render_text("${cluster.variables.prod}", &s).unwrap(),
        "true"
    );
    assert!(render_text("${cluster.labels}", &s).is_err());
}

#[test]
fn an_unknown_reference_or_a_missing_label_names_the_expression_and_what_to_do() {
    let f = fixture();
    let s = scope(&f);
    let e = render_str("${cluster.labels.tier}", &s).unwrap_err();
    assert_eq!(e.expression, "${cluster.labels.tier}");
    assert!(
        e.why.contains("cluster member-1 has no label \"tier\""),
        "{e}"
    );
    assert!(e.why.contains("default"), "{e}");
    let e = render_str("${cluster.secret}", &s).unwrap_err();
    assert!(e.why.contains("unknown reference"), "{e}");
    assert!(e.why.contains("cluster.labels.KEY"), "{e}");
    let e = render_str("a ${cluster.name", &s).unwrap_err();
    assert!(e.why.contains("not closed"), "{e}");
}

#[test]
fn a_default_stands_in_for_a_missing_value_only() {
    let f = fixture();
    let s = scope(&f);
    assert_eq!(
        render_str("${cluster.labels.tier:=dev}", &s).unwrap(),
        json!("dev")
    );
    assert_eq!(
        render_str("${cluster.labels.region:=west}", &s).unwrap(),
        json!("east")
    );
    assert_eq!(
        render_str("${cluster.labels.tier:=}", &s).unwrap(),
        json!("")
    );
}

#[test]
fn a_doubled_dollar_writes_a_literal_reference_and_nothing_else_is_touched() {
    let f = fixture();
    let s = scope(&f);
    assert_eq!(
        render_str("$${cluster.name} costs $5 {x}", &s).unwrap(),
        json!("${cluster.name} costs $5 {x}")
    );
    assert_eq!(render_str("plain", &s).unwrap(), json!("plain"));
}

#[test]
fn values_render_every_string_leaf_and_leave_keys_and_other_types() {
    let f = fixture();
    let s = scope(&f);
    let values = json!({
        "${cluster.name}": "${cluster.name}",
        "txtOwnerId": "${cluster.name}",
        "domainFilters": ["${cluster.labels.region}.example.com"],
        "replicaCount": "${cluster.variables.replicas}",
        "enabled": true,
        "n": 1
    });
    assert_eq!(
        render_value(&values, &s).unwrap(),
        json!({
            "${cluster.name}": "member-1",
            "txtOwnerId": "member-1",
            "domainFilters": ["east.example.com"],
            "replicaCount": 3,
            "enabled": true,
            "n": 1
        })
    );
}

#[test]
fn merging_goes_key_by_key_in_maps_and_replaces_anything_else() {
    let mut base = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
    merge(&mut base, &json!({"a": {"c": [3], "e": null}, "f": 2}));
    assert_eq!(
        base,
        json!({"a": {"b": 1, "c": [3], "e": null}, "d": "x", "f": 2})
    );
    let mut scalar = json!(1);
    merge(&mut scalar, &json!({"a": 1}));
    assert_eq!(scalar, json!({"a": 1}));
}

#[test]
fn a_target_path_makes_the_maps_on_the_way() {
    let mut values = json!({"provider": "aws", "keep": 1});
    set_path(&mut values, "provider.credentials", json!("secret")).unwrap();
    set_path(&mut values, "a.b.c", json!("x")).unwrap();
    assert_eq!(
        values,
        json!({"provider": {"credentials": "secret"}, "keep": 1, "a": {"b": {"c": "x"}}})
    );
    assert!(set_path(&mut values, "a..b", json!(1)).is_err());
}

#[test]
fn masked_leaves_are_the_strings_and_long_numbers_of_a_value() {
    let mut out = Vec::new();
    leaves(
        &json!({"token": "s3cr3t-token", "n": 123456, "short": "ab", "list": ["password1"]}),
        &mut out,
    );
    out.sort();
    assert_eq!(out, vec!["123456", "password1", "s3cr3t-token"]);
}
