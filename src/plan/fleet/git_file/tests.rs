//! Tests of Git values files in a chart's values: per-cluster paths, the policies' Git rules, the merge order, missing and optional files.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::{
    api::crd::{Chart, ChartOverride, ClusterSelector, GitRef, GitValuesFile, GitValuesSource},
    api::key::{ClusterName, ReleaseKey},
    api::policy::{GitAccess, Impersonation, SourceAccess, TenancyPolicySpec},
    plan::fleet::{Fleet, render},
    plan::release::{GitFileLookup, GitFileSource, OwnerId, ValuesLookup},
    policy::{Admission, Mode, NamedPolicy},
};

const REPO: &str = "https://git.example.com/team-a/fleet.git";

fn owner() -> OwnerId {
    OwnerId {
        namespace: "team-a".into(),
        name: "dns".into(),
    }
}

fn key(cluster: &str) -> ReleaseKey {
    format!("{cluster}/team-a/web").parse().unwrap()
}

fn admission(paths: &[&str]) -> Admission {
    Admission {
        mode: Mode::Enforce,
        policies: vec![NamedPolicy::new(
            "team-a",
            TenancyPolicySpec {
                hub_namespaces: vec!["team-a".into()],
                clusters: vec!["member-1".into()],
                namespaces: vec!["team-a".into()],
                sources: vec![SourceAccess {
                    url: "https://git.example.com/team-a/".into(),
                    git: Some(GitAccess {
                        paths: paths.iter().map(|s| s.to_string()).collect(),
                        branches: vec!["main".into()],
                        ..GitAccess::default()
                    }),
                    ..SourceAccess::default()
                }],
                impersonate: Some(Impersonation {
                    user: "u".into(),
                    ..Impersonation::default()
                }),
                ..TenancyPolicySpec::default()
            },
        )],
        operator_namespace: "tenancy-hub".into(),
    }
}

fn file(path: &str, optional: bool) -> GitValuesFile {
    GitValuesFile {
        git: GitValuesSource {
            url: REPO.into(),
            reference: GitRef {
                branch: Some("main".into()),
                ..GitRef::default()
            },
            interval: None,
        },
        path: path.into(),
        optional,
    }
}

/// The repository at commit `c0…`: a file per member, `values/common.yaml`, and `prod.yaml`.
fn repo(source: &GitFileSource) -> GitFileLookup {
    let commit = "c".repeat(40);
    let content = match source.path.as_str() {
        "values/member-1.yaml" => "replicas: 2\nname: one\n",
        "values/member-2.yaml" => "replicas: 3\nname: two\n",
        "values/common.yaml" => "replicas: 1\nlog: info\nname: common\n",
        "prod.yaml" => "log: warn\n",
        "values/list.yaml" => "- not\n- a map\n",
        _ => return GitFileLookup::Missing { commit },
    };
    GitFileLookup::Found {
        commit,
        content: content.into(),
    }
}

fn values_for(
    cluster: &str,
    chart: &Chart,
    admission: &Admission,
) -> Result<(Option<Value>, Vec<String>), String> {
    let variables: BTreeMap<ClusterName, BTreeMap<String, Value>> = BTreeMap::new();
    let fleet = Fleet {
        variables: &variables,
        lookup: &|_| ValuesLookup::Missing,
        git_files: &repo,
    };
    let labels = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
    render(&owner(), &key(cluster), chart, &labels, &fleet, admission)
        .map(|r| {
            let read = r.git_files.iter().map(|s| s.path.clone()).collect();
            (r.values, read)
        })
        .map_err(|u| u.why)
}

fn web(files: Vec<GitValuesFile>) -> Chart {
    Chart {
        chart_name: "web".into(),
        values_files: files,
        ..Chart::default()
    }
}

#[test]
fn each_cluster_reads_its_own_file_merged_in_order_under_the_charts_values() {
    let mut chart = web(vec![
        file("values/common.yaml", false),
        file("values/${cluster.name}.yaml", false),
    ]);
    chart.values = Some(json!({"name": "spec"}));
    chart.overrides = vec![ChartOverride {
        cluster_selector: ClusterSelector {
            match_labels: BTreeMap::from([("tier".into(), "prod".into())]),
        },
        values_files: vec![file("prod.yaml", false)],
        ..ChartOverride::default()
    }];
    let admission = admission(&["values", "prod.yaml"]);
    let (one, read) = values_for("member-1", &chart, &admission).unwrap();
    assert_eq!(
        one,
        Some(json!({"replicas": 2, "log": "warn", "name": "spec"}))
    );
    assert_eq!(
        read,
        ["prod.yaml", "values/common.yaml", "values/member-1.yaml"]
    );
    let (two, _) = values_for("member-2", &chart, &admission).unwrap();
    assert_eq!(two.unwrap()["replicas"], json!(3));
}

#[test]
fn a_missing_file_holds_the_release_naming_cluster_and_path_unless_optional() {
    let admission = admission(&[]);
    let why = values_for(
        "member-3",
        &web(vec![file("values/${cluster.name}.yaml", false)]),
        &admission,
    )
    .unwrap_err();
    assert!(
        why.contains("valuesFiles[0]")
            && why.contains("values/member-3.yaml")
            && why.contains("cluster member-3")
            && why.contains(&"c".repeat(40)),
        "{why}"
    );
    let (values, read) = values_for(
        "member-3",
        &web(vec![file("values/${cluster.name}.yaml", true)]),
        &admission,
    )
    .unwrap();
    assert_eq!(values, None);
    assert_eq!(read, ["values/member-3.yaml"]);
    let why = values_for(
        "member-1",
        &web(vec![file("values/list.yaml", false)]),
        &admission,
    )
    .unwrap_err();
    assert!(why.contains("not a YAML map"), "{why}");
}

#[test]
fn a_path_the_policy_does_not_allow_or_that_climbs_out_is_never_looked_up() {
    let admission = admission(&["values"]);
    for (path, needle) in [
        ("secrets/${cluster.name}.yaml", "none of the paths"),
        ("values/../secrets/x.yaml", "'..' segment"),
        ("values/${cluster.labels.tier}/../../x.yaml", "'..' segment"),
        ("/etc/passwd", "absolute"),
    ] {
        let chart = web(vec![file(path, false)]);
        let why = values_for("member-1", &chart, &admission).unwrap_err();
        assert!(why.contains(needle), "{path}: {why}");
    }
    let mut elsewhere = file("values/x.yaml", false);
    elsewhere.git.url = "https://git.example.com/team-b/fleet.git".into();
    let why = values_for("member-1", &web(vec![elsewhere]), &admission).unwrap_err();
    assert!(why.contains("under no Git sources entry"), "{why}");
    let mut tag = file("values/x.yaml", false);
    tag.git.reference = GitRef {
        tag: Some("v1".into()),
        ..GitRef::default()
    };
    let why = values_for("member-1", &web(vec![tag]), &admission).unwrap_err();
    assert!(why.contains("tag v1"), "{why}");
}
