use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::{
    api::crd::{ChartOverride, ClusterSelector, Setting},
    api::policy::{TenancyPolicySpec, ValuesRule},
    policy::NamedPolicy,
};

fn owner() -> OwnerId {
    OwnerId {
        namespace: "tenants".into(),
        name: "dns".into(),
    }
}

fn key(cluster: &str) -> ReleaseKey {
    format!("{cluster}/team-a/external-dns").parse().unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A policy governing `tenants` that lets it read the Secrets labelled `values: "true"`, the
/// ConfigMap `shared` and the Secret `nope` (which does not exist).
fn admission() -> Admission {
    Admission {
        policies: vec![NamedPolicy {
            name: "tenants".into(),
            spec: TenancyPolicySpec {
                hub_namespaces: vec!["tenants".into()],
                values_from: vec![
                    ValuesRule {
                        kind: Some(ValuesKind::Secret),
                        match_labels: labels(&[("values", "true")]),
                        ..Default::default()
                    },
                    ValuesRule {
                        kind: Some(ValuesKind::ConfigMap),
                        names: vec!["shared".into()],
                        ..Default::default()
                    },
                    // Allowed by name before the platform writes it.
                    ValuesRule {
                        kind: Some(ValuesKind::Secret),
                        names: vec!["nope".into()],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        }],
        ..Admission::permissive()
    }
}

/// The hub as the lookups see it: `tenants/creds-east` (allowed), `tenants/creds-west` (not
/// labelled), the ConfigMap `tenants/shared`, and `other/creds-east`.
fn hub(source: &ValuesSource) -> ValuesLookup {
    let found = |key: &str, content: &str, labelled: bool| ValuesLookup::Found {
        data: BTreeMap::from([(key.to_owned(), content.to_owned())]),
        labels: if labelled {
            labels(&[("values", "true")])
        } else {
            BTreeMap::new()
        },
    };
    match (source.kind, source.namespace.as_str(), source.name.as_str()) {
        (ValuesKind::Secret, "tenants", "creds-east") => found(
            "values.yaml",
            "provider:\n  token: s3cr3t-east-token\nreplicaCount: 1\n",
            true,
        ),
        (ValuesKind::Secret, "tenants", "creds-west") => {
            found("values.yaml", "token: s3cr3t-west", false)
        }
        (ValuesKind::Secret, "tenants", "raw") => found("token", "s3cr3t-raw-token", true),
        (ValuesKind::Secret, "tenants", "broken") => {
            found("values.yaml", "key: [s3cr3t-unclosed", true)
        }
        (ValuesKind::ConfigMap, "tenants", "shared") => {
            found("values.yaml", "region: shared\nlogLevel: info\n", false)
        }
        (ValuesKind::Secret, "other", "creds-east") => found("values.yaml", "a: 1", true),
        _ => ValuesLookup::Missing,
    }
}

fn fleet<'a>(variables: &'a BTreeMap<ClusterName, BTreeMap<String, Value>>) -> Fleet<'a> {
    Fleet {
        variables,
        lookup: &hub,
        git_files: &|source| panic!("{source} was looked up"),
    }
}

fn chart() -> Chart {
    Chart {
        chart_name: "external-dns".into(),
        values: Some(json!({
            "txtOwnerId": "${cluster.name}",
            "domainFilters": ["${cluster.labels.region}.example.com"],
            "replicaCount": "${cluster.variables.replicas:=1}"
        })),
        settings: vec![Setting {
            key: "provider.name".into(),
            value: "${cluster.labels.cloud:=aws}".into(),
        }],
        ..Default::default()
    }
}

fn render_for(
    cluster: &str,
    cluster_labels: &[(&str, &str)],
    chart: &Chart,
) -> Result<Rendered, Unrendered> {
    let variables = BTreeMap::from([(
        "member-2".parse().unwrap(),
        BTreeMap::from([("replicas".to_owned(), json!(3))]),
    )]);
    render(
        &owner(),
        &key(cluster),
        chart,
        &labels(cluster_labels),
        &fleet(&variables),
        &admission(),
    )
}

#[test]
fn each_cluster_gets_values_rendered_from_its_own_registration() {
    let east = render_for("member-1", &[("region", "east")], &chart()).unwrap();
    let west = render_for(
        "member-2",
        &[("region", "west"), ("cloud", "gcp")],
        &chart(),
    )
    .unwrap();
    assert_eq!(
        east.values,
        Some(
            json!({"txtOwnerId": "member-1", "domainFilters": ["east.example.com"], "replicaCount": "1"})
        )
    );
    assert_eq!(
        west.values,
        Some(
            json!({"txtOwnerId": "member-2", "domainFilters": ["west.example.com"], "replicaCount": 3})
        )
    );
    assert_eq!(east.settings, vec![("provider.name".into(), "aws".into())]);
    assert_eq!(west.settings, vec![("provider.name".into(), "gcp".into())]);
}

#[test]
fn a_reference_that_does_not_render_is_a_problem_of_that_cluster_only() {
    let missing = render_for("member-1", &[], &chart()).unwrap_err();
    assert!(
        missing
            .why
            .contains("values: ${cluster.labels.region}: cluster member-1 has no label"),
        "{}",
        missing.why
    );
    assert!(render_for("member-3", &[("region", "north")], &chart()).is_ok());
}

#[test]
fn overrides_selecting_a_cluster_merge_in_order_over_the_charts_values() {
    let mut chart = chart();
    chart.overrides = vec![
        ChartOverride {
            values_files: Vec::new(),
            post_renderers: Vec::new(),
            cluster_selector: ClusterSelector {
                match_labels: labels(&[("env", "prod")]),
            },
            values: Some(json!({"replicaCount": 5, "resources": {"cpu": "1"}})),
            settings: vec![Setting {
                key: "provider.name".into(),
                value: "route53".into(),
            }],
        },
        ChartOverride {
            values_files: Vec::new(),
            post_renderers: Vec::new(),
            cluster_selector: ClusterSelector {
                match_labels: labels(&[("region", "east")]),
            },
            values: Some(json!({"resources": {"memory": "${cluster.labels.region}-1Gi"}})),
            settings: Vec::new(),
        },
    ];
    let prod_east = render_for("member-1", &[("region", "east"), ("env", "prod")], &chart).unwrap();
    assert_eq!(
        prod_east.values.unwrap(),
        json!({
            "txtOwnerId": "member-1",
            "domainFilters": ["east.example.com"],
            "replicaCount": 5,
            "resources": {"cpu": "1", "memory": "east-1Gi"}
        })
    );
    assert_eq!(
        prod_east.settings,
        vec![
            ("provider.name".into(), "aws".into()),
            ("provider.name".into(), "route53".into())
        ]
    );
    let dev_west = render_for("member-2", &[("region", "west")], &chart).unwrap();
    assert_eq!(dev_west.values.unwrap()["replicaCount"], json!(3));
    assert_eq!(dev_west.settings.len(), 1);
}

fn from(reference: ValuesReference) -> Chart {
    Chart {
        values_from: vec![reference],
        values: Some(json!({"replicaCount": 2})),
        ..chart()
    }
}

fn secret(name: &str) -> ValuesReference {
    ValuesReference {
        kind: ValuesKind::Secret,
        name: name.into(),
        ..Default::default()
    }
}

#[test]
fn values_from_an_allowed_secret_go_under_the_charts_values_and_are_masked() {
    let chart = from(secret("creds-${cluster.labels.region}"));
    let r = render_for("member-1", &[("region", "east")], &chart).unwrap();
    let values = r.values.clone().unwrap();
    assert_eq!(values["provider"]["token"], json!("s3cr3t-east-token"));
    assert_eq!(values["replicaCount"], json!(2), "the chart's values win");
    assert!(r.sources.contains(&ValuesSource {
        kind: ValuesKind::Secret,
        namespace: "tenants".into(),
        name: "creds-east".into(),
    }));
    let said = r
        .masked
        .redact("helm: bad value s3cr3t-east-token in provider.token");
    assert_eq!(said, "helm: bad value ****** in provider.token");
    assert!(!format!("{:?}", r.masked).contains("s3cr3t"));
}

#[test]
fn one_key_at_a_target_path_is_one_masked_string() {
    let chart = from(ValuesReference {
        values_key: Some("token".into()),
        target_path: Some("provider.credentials".into()),
        ..secret("raw")
    });
    let r = render_for("member-1", &[("region", "east")], &chart).unwrap();
    assert_eq!(
        r.values.unwrap()["provider"]["credentials"],
        json!("s3cr3t-raw-token")
    );
    assert_eq!(r.masked.redact("x s3cr3t-raw-token y"), "x ****** y");
}

#[test]
fn a_config_map_is_read_and_nothing_of_it_is_masked() {
    let chart = from(ValuesReference {
        kind: ValuesKind::ConfigMap,
        name: "shared".into(),
        ..Default::default()
    });
    let r = render_for("member-1", &[("region", "east")], &chart).unwrap();
    assert_eq!(r.values.unwrap()["logLevel"], json!("info"));
    assert!(r.masked.is_empty());
}

#[test]
fn a_secret_no_policy_allows_is_refused_naming_it_and_never_its_content() {
    let chart = from(secret("creds-west"));
    let e = render_for("member-1", &[("region", "east")], &chart).unwrap_err();
    assert!(
        e.why.contains("Secret tenants/creds-west may not be read"),
        "{}",
        e.why
    );
    assert!(!e.why.contains("s3cr3t"), "{}", e.why);
}

#[test]
fn only_the_controllers_own_hub_namespace_is_read() {
    // A name cannot leave the namespace: a '/' is no object name.
    let chart = from(secret("other/creds-east"));
    let e = render_for("member-1", &[("region", "east")], &chart).unwrap_err();
    assert!(e.why.contains("not a valid object name"), "{}", e.why);
    let chart = from(secret("creds-east"));
    let r = render_for(
        "member-1",
        &[],
        &Chart {
            values: None,
            settings: Vec::new(),
            ..chart
        },
    )
    .unwrap();
    assert!(r.sources.iter().all(|s| s.namespace == "tenants"));
}

#[test]
fn a_missing_object_or_key_holds_the_release_unless_optional() {
    let e = render_for("member-1", &[("region", "east")], &from(secret("nope"))).unwrap_err();
    assert!(
        e.why
            .contains("valuesFrom[0]: Secret tenants/nope does not exist"),
        "{}",
        e.why
    );
    assert!(e.why.contains("optional: true"), "{}", e.why);
    assert_eq!(
        e.sources.len(),
        1,
        "still watched, so creating it plans again"
    );
    let key_missing = from(ValuesReference {
        values_key: Some("other.yaml".into()),
        ..secret("creds-east")
    });
    let e = render_for("member-1", &[("region", "east")], &key_missing).unwrap_err();
    assert!(e.why.contains("has no key \"other.yaml\""), "{}", e.why);
    let optional = from(ValuesReference {
        optional: true,
        ..secret("nope")
    });
    let r = render_for("member-1", &[("region", "east")], &optional).unwrap();
    assert_eq!(r.values.unwrap()["replicaCount"], json!(2));
}

#[test]
fn a_missing_secret_no_rule_allows_is_refused_as_one_that_exists_optional_or_not() {
    let refusal = |name: &str, optional: bool| {
        let chart = from(ValuesReference {
            optional,
            ..secret(name)
        });
        render_for("member-1", &[("region", "east")], &chart)
            .unwrap_err()
            .why
    };
    let present = refusal("creds-west", false);
    for optional in [false, true] {
        let absent = refusal("ghost", optional);
        assert_eq!(
            absent,
            present.replace("creds-west", "ghost"),
            "whether it exists is not told"
        );
    }
}

#[test]
fn a_secret_that_is_not_yaml_says_where_never_what() {
    let e = render_for("member-1", &[("region", "east")], &from(secret("broken"))).unwrap_err();
    assert!(e.why.contains("is not YAML (line"), "{}", e.why);
    assert!(!e.why.contains("s3cr3t"), "{}", e.why);
}

#[test]
fn a_chart_without_the_new_fields_renders_to_exactly_its_spec() {
    let plain = Chart {
        chart_name: "web".into(),
        values: Some(json!({"a": {"b": [1, "x"]}})),
        settings: vec![Setting {
            key: "replicaCount".into(),
            value: "2".into(),
        }],
        ..Default::default()
    };
    let r = render_for("member-1", &[], &plain).unwrap();
    assert_eq!(r.values, plain.values);
    assert_eq!(r.settings, vec![("replicaCount".into(), "2".into())]);
    let bare = Chart {
        chart_name: "web".into(),
        ..Default::default()
    };
    assert_eq!(render_for("member-1", &[], &bare).unwrap().values, None);
}

#[test]
fn a_name_no_rule_could_allow_is_refused_before_it_is_looked_up_and_is_never_read() {
    // Rules by name only: nothing of another name is looked up, not even its labels.
    let mut by_name = admission();
    by_name.policies[0].spec.values_from.remove(0);
    let variables = BTreeMap::new();
    let fleet = Fleet {
        variables: &variables,
        lookup: &|source| panic!("{source} was looked up"),
        git_files: &|source| panic!("{source} was looked up"),
    };
    let labels = labels(&[("region", "east")]);
    let mut said = Vec::new();
    for name in ["creds-east", "creds-west", "absent"] {
        let chart = from(secret(name));
        let e = render(
            &owner(),
            &key("member-1"),
            &chart,
            &labels,
            &fleet,
            &by_name,
        )
        .unwrap_err();
        assert!(e.sources.is_empty(), "{name} is among the objects read");
        said.push(e.why.replace(name, "NAME"));
    }
    assert!(
        said[0].contains("Secret tenants/NAME may not be read"),
        "{}",
        said[0]
    );
    assert_eq!(said[0], said[1]);
    assert_eq!(said[0], said[2]);
}

#[test]
fn values_nested_too_deep_are_refused_naming_the_bound() {
    let mut deep = json!(1);
    for _ in 0..=crate::api::crd::free_form::MAX_VALUES_DEPTH {
        deep = json!({ "a": deep });
    }
    let text = serde_json::to_string(&json!({ "values": deep })).unwrap();
    #[derive(serde::Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "crate::api::crd::free_form::bounded")]
        values: Option<Value>,
    }
    let decoded: Holder = serde_json::from_str(&text).unwrap();
    for chart in [
        Chart {
            values: decoded.values.clone(),
            ..chart()
        },
        Chart {
            overrides: vec![ChartOverride {
                values: decoded.values.clone(),
                ..Default::default()
            }],
            ..chart()
        },
    ] {
        let e = render_for("member-1", &[("region", "east")], &chart).unwrap_err();
        assert!(e.why.contains("nest deeper than 64 levels"), "{}", e.why);
    }
}
