//! Tests of a release's post-render made for one cluster: order, references, bounds.

use std::collections::BTreeMap;

use super::*;
use crate::api::{
    crd::{ChartOverride, ClusterSelector, PostRenderer},
    key::ClusterName,
};

/// A post-render as the protocol's fixture shows it: a strategic merge patch, a JSON6902 patch
/// with a target, an image and common metadata.
pub(crate) fn example() -> PostRender {
    PostRender {
        renderers: vec![Kustomize {
            patches: vec![
                Patch {
                    patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    cluster: member-1\n".into(),
                    target: None,
                },
                Patch {
                    patch: r#"[{"op": "add", "path": "/spec/replicas", "value": 2}]"#.into(),
                    target: Some(PatchTarget {
                        kind: Some("Deployment".into()),
                        label_selector: Some("app=web".into()),
                        ..PatchTarget::default()
                    }),
                },
            ],
            images: vec![Image {
                name: "nginx".into(),
                new_name: Some("registry.example/nginx".into()),
                new_tag: Some("1.27".into()),
                digest: None,
            }],
        }],
        common_metadata: Some(CommonMetadata {
            labels: BTreeMap::from([("team".into(), "blue".into())]),
            annotations: BTreeMap::new(),
        }),
        allow_sensitive_kinds: false,
    }
}

fn renderer(patch: &str) -> PostRenderer {
    PostRenderer {
        kustomize: Some(Kustomize {
            patches: vec![Patch {
                patch: patch.into(),
                target: Some(PatchTarget {
                    kind: Some("Deployment".into()),
                    ..PatchTarget::default()
                }),
            }],
            images: Vec::new(),
        }),
    }
}

fn scope_for<'a>(
    cluster: &'a ClusterName,
    labels: &'a BTreeMap<String, String>,
    variables: &'a BTreeMap<String, serde_json::Value>,
) -> Scope<'a> {
    Scope {
        cluster,
        labels,
        variables,
        namespace: "team",
        controller_namespace: "tenants",
        controller_name: "web",
    }
}

fn made(chart: &Chart, labels: &BTreeMap<String, String>) -> Result<Option<PostRender>, String> {
    let cluster: ClusterName = "member-1".parse().unwrap();
    let variables = BTreeMap::new();
    let scope = scope_for(&cluster, labels, &variables);
    let selected = chart.overrides.iter().enumerate().filter(|(_, o)| {
        o.cluster_selector
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    });
    render(chart, selected, &scope)
}

#[test]
fn a_chart_without_post_renderers_has_no_post_render() {
    assert_eq!(made(&Chart::default(), &BTreeMap::new()), Ok(None));
}

#[test]
fn patches_refer_to_the_target_cluster_as_values_do() {
    let chart = Chart {
        post_renderers: vec![renderer(
            r#"[{"op": "add", "path": "/metadata/labels/cluster", "value": "${cluster.name}"}]"#,
        )],
        common_metadata: Some(CommonMetadata {
            labels: BTreeMap::from([("region".into(), "${cluster.labels.region}".into())]),
            annotations: BTreeMap::new(),
        }),
        ..Chart::default()
    };
    let labels = BTreeMap::from([("region".to_owned(), "east".to_owned())]);
    let made = made(&chart, &labels).unwrap().unwrap();
    assert!(made.renderers[0].patches[0].patch.contains("\"member-1\""));
    assert_eq!(made.common_metadata.unwrap().labels["region"], "east");
}

#[test]
fn the_overrides_selecting_the_cluster_add_their_post_renderers_after_the_charts() {
    let chart = Chart {
        post_renderers: vec![renderer("[]")],
        overrides: vec![
            ChartOverride {
                cluster_selector: ClusterSelector {
                    match_labels: BTreeMap::from([("region".into(), "east".into())]),
                },
                post_renderers: vec![renderer("[{\"op\": \"remove\", \"path\": \"/x\"}]")],
                ..ChartOverride::default()
            },
            ChartOverride {
                cluster_selector: ClusterSelector {
                    match_labels: BTreeMap::from([("region".into(), "west".into())]),
                },
                post_renderers: vec![renderer("west")],
                ..ChartOverride::default()
            },
        ],
        ..Chart::default()
    };
    let labels = BTreeMap::from([("region".to_owned(), "east".to_owned())]);
    let made = made(&chart, &labels).unwrap().unwrap();
    let patches: Vec<&str> = made
        .renderers
        .iter()
        .map(|r| r.patches[0].patch.as_str())
        .collect();
    assert_eq!(patches, ["[]", "[{\"op\": \"remove\", \"path\": \"/x\"}]"]);
}

#[test]
fn an_unknown_reference_in_a_patch_names_the_patch() {
    let chart = Chart {
        overrides: vec![ChartOverride {
            post_renderers: vec![renderer("${cluster.nope}")],
            ..ChartOverride::default()
        }],
        ..Chart::default()
    };
    let why = made(&chart, &BTreeMap::new()).unwrap_err();
    assert!(
        why.starts_with("overrides[0].postRenderers[0].kustomize.patches[0]: "),
        "{why}"
    );
}

#[test]
fn a_post_render_past_its_bound_is_refused() {
    let big = "x".repeat(16 * 1024);
    let chart = Chart {
        post_renderers: (0..5).map(|_| renderer(&big)).collect(),
        ..Chart::default()
    };
    let why = made(&chart, &BTreeMap::new()).unwrap_err();
    assert!(why.contains("more than the 65536"), "{why}");
}

#[test]
fn the_allowance_of_sensitive_kinds_is_not_what_is_deployed() {
    let allowed = PostRender {
        allow_sensitive_kinds: true,
        ..example()
    };
    assert_eq!(allowed.deployed(), example().deployed());
}
