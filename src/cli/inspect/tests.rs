//! Tests of the inspecting commands' output.

use super::*;
use crate::api::crd::{ChartMessage, ControllerSpec, PodStatus, WorkloadStatus};
use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

fn ready(status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        observed_generation: Some(1),
    }
}

fn release(name: &str, phase: &str, error: &str) -> ChartMessage {
    ChartMessage {
        chart_name: "deployment-example".into(),
        release_name: name.into(),
        error_message: error.into(),
        phase: phase.into(),
        revision: (phase == "Deployed").then_some(2),
        chart_version: if phase == "Deployed" {
            "0.1.0".into()
        } else {
            String::new()
        },
        ..ChartMessage::default()
    }
}

fn pod(name: &str, ready: bool, reason: &str) -> PodStatus {
    PodStatus {
        pod_name: name.into(),
        phase: if ready { "Running" } else { "Pending" }.into(),
        ready,
        restarts: if ready { 0 } else { 3 },
        reason: reason.into(),
    }
}

fn tenancy(cluster: &str, fresh: bool) -> TenancyStatus {
    TenancyStatus {
        cluster: cluster.into(),
        namespace: "foo".into(),
        chart_messages: vec![release("foo", "Deployed", "")],
        replication_controller_status: vec![WorkloadStatus {
            replication_controller_name: "foo".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            ready: "2/2".into(),
            release_name: "foo".into(),
            rolled_out: true,
        }],
        pod_status: vec![pod("foo-1", true, ""), pod("foo-2", true, "")],
        pods_total: 2,
        pods_ready: 2,
        fresh,
        last_seen: (!fresh).then(|| "2025-01-02T03:04:05Z".into()),
    }
}

fn controller(name: &str, status: Option<ControllerStatus>) -> TenancyController {
    let mut c = TenancyController::new(name, ControllerSpec::default());
    c.metadata.namespace = Some("default".into());
    c.metadata.generation = Some(1);
    c.status = status.map(|s| ControllerStatus {
        observed_generation: Some(1),
        ..s
    });
    c
}

fn example() -> TenancyController {
    let mut failing = tenancy("member-2", false);
    failing.chart_messages = vec![release(
        "web",
        "Failed",
        "UPGRADE FAILED: template: web/templates/deployment.yaml:9:4: executing \"web/templates/deployment.yaml\" at <.Values.image>: nil pointer",
    )];
    failing.pod_status = vec![
        pod("web-1", true, ""),
        pod("web-2", false, "CrashLoopBackOff"),
    ];
    failing.pods_total = 7;
    failing.pods_ready = 5;
    controller(
        "example-controller",
        Some(ControllerStatus {
            updated_tenancies: vec![tenancy("member-1", true), failing],
            clusters: vec![
                ClusterStatus {
                    name: "member-1".into(),
                    reachable: true,
                    last_seen: Some("2025-01-02T03:04:05Z".into()),
                    releases: "1/1".into(),
                    pods: "2/2".into(),
                },
                ClusterStatus {
                    name: "member-2".into(),
                    reachable: false,
                    last_seen: Some("2025-01-02T03:04:05Z".into()),
                    releases: "0/1".into(),
                    pods: "5/7".into(),
                },
            ],
            summary: Some(Summary {
                clusters: "1/2".into(),
                releases: "1/2".into(),
                pods: "7/9".into(),
            }),
            conditions: vec![ready(
                "False",
                "ReleaseFailed",
                "1 release(s) failed; see chartMessages",
            )],
            observed_generation: Some(1),
            rollout: None,
        }),
    )
}

fn table_of(controllers: &[TenancyController], cluster: Option<&str>) -> String {
    render(controllers, cluster, Output::Table, false).unwrap()
}

#[test]
fn the_table_shows_a_header_and_aligned_rows_per_cluster_and_namespace() {
    let out = table_of(&[example()], None);
    for line in [
        "Controller default/example-controller  Ready=False (ReleaseFailed)  clusters 1/2  releases 1/2  pods 7/9",
        "  1 release(s) failed; see chartMessages",
        "  member-1/foo (fresh)",
        "    RELEASE   CHART                PHASE      REVISION   VERSION   MESSAGE",
        "    foo       deployment-example   Deployed   2          0.1.0",
        "    KIND         NAME   READY",
        "    Deployment   foo    2/2",
        "    NAME    PHASE     READY   RESTARTS   REASON",
        "    foo-1   Running   yes     0",
    ] {
        assert!(out.lines().any(|l| l == line), "no line {line:?} in\n{out}");
    }
}

#[test]
fn an_unreachable_cluster_is_marked_stale_with_its_last_sighting() {
    let out = table_of(&[example()], None);
    assert!(
        out.contains("  member-2/foo (STALE, last seen 2025-01-02T03:04:05Z)\n"),
        "{out}"
    );
}

#[test]
fn long_messages_are_cut_to_one_line_of_eighty_characters() {
    let out = table_of(&[example()], None);
    let row = out.lines().find(|l| l.starts_with("    web ")).unwrap();
    let message = &row[row.find("UPGRADE FAILED").unwrap()..];
    assert_eq!(message.chars().count(), MESSAGE_WIDTH, "{row}");
    assert!(message.ends_with('…'), "{row}");
    assert_eq!(trim_message("a\n  b", 80), "a b");
}

#[test]
fn listed_pods_fewer_than_counted_say_how_many_are_shown_not_ready_first() {
    let out = table_of(&[example()], Some("member-2"));
    assert!(
        out.contains("    showing 2 of 7 pods (not-ready first)\n"),
        "{out}"
    );
    let not_ready = out.find("web-2").unwrap();
    assert!(not_ready < out.find("web-1").unwrap(), "{out}");
    let all_listed = table_of(&[example()], Some("member-1"));
    assert!(!all_listed.contains("showing"), "{all_listed}");
    let mut none_listed = example();
    let status = none_listed.status.as_mut().unwrap();
    status.updated_tenancies[0].pod_status.clear();
    let out = table_of(&[none_listed], Some("member-1"));
    assert!(
        out.ends_with("    2/2\n    showing 0 of 2 pods (not-ready first)\n"),
        "{out}"
    );
}

#[test]
fn a_cluster_filter_keeps_only_that_clusters_entries() {
    let out = table_of(&[example()], Some("member-1"));
    assert!(
        out.contains("member-1/foo") && !out.contains("member-2/foo"),
        "{out}"
    );
    let none = table_of(&[example()], Some("member-9"));
    assert!(
        none.contains("  no entries for cluster member-9\n"),
        "{none}"
    );
    let json = render(&[example()], Some("member-2"), Output::Json, false).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let entry = &value[0];
    assert_eq!(entry["tenancies"].as_array().unwrap().len(), 1);
    assert_eq!(entry["tenancies"][0]["cluster"], "member-2");
    assert_eq!(entry["clusters"].as_array().unwrap().len(), 1);
    assert_eq!(entry["clusters"][0]["name"], "member-2");
    assert_eq!(entry["summary"]["pods"], "7/9");
}

#[test]
fn a_rollout_shows_where_it_stands_cluster_by_cluster_and_why_it_halted() {
    use crate::api::crd::{RolloutCluster, RolloutHalt, RolloutStatus};
    let mut c = example();
    let cluster = |name: &str, wave: i32, state: &str| RolloutCluster {
        name: name.into(),
        wave,
        state: state.into(),
        ..Default::default()
    };
    c.status.as_mut().unwrap().rollout = Some(RolloutStatus {
        generation: 2,
        phase: "Halted".into(),
        progress: "1/3".into(),
        wave: 2,
        waves: 2,
        updated: 1,
        healthy: 1,
        pending: 1,
        failed: 1,
        started_at: "2026-01-01T00:00:00Z".into(),
        halted: Some(RolloutHalt {
            cluster: "member-1".into(),
            release: "web".into(),
            reason: "release failed: boom".into(),
            at: "2026-01-01T00:01:00Z".into(),
        }),
        clusters: vec![
            cluster("member-3", 1, "Healthy"),
            cluster("member-1", 2, "Failed"),
            cluster("member-2", 2, "Pending"),
        ],
        ..Default::default()
    });
    let out = table_of(&[c.clone()], None);
    assert!(
            out.contains("  rollout of generation 2: Halted wave 2/2, 1/3 clusters healthy (updated 1, pending 1, failed 1), started 2026-01-01T00:00:00Z\n"),
            "{out}"
        );
    assert!(out.contains(
        "    member-3 (wave 1) Healthy, member-1 (wave 2) Failed, member-2 (wave 2) Pending\n"
    ));
    assert!(out.contains("rollout halted at cluster member-1 release web: release failed: boom"));
    let json = render(&[c], None, Output::Json, false).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value[0]["rollout"]["progress"], "1/3");
}

#[test]
fn json_is_valid_and_keeps_a_stable_shape() {
    let json = render(&[example()], None, Output::Json, false).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let keys: Vec<&str> = value[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = [
        "namespace",
        "name",
        "summary",
        "conditions",
        "clusters",
        "tenancies",
    ];
    expected.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(value[0]["conditions"][0]["reason"], "ReleaseFailed");
    assert_eq!(
        value[0]["tenancies"][1]["podStatus"][1]["reason"],
        "CrashLoopBackOff"
    );
    assert_eq!(
        json,
        render(&[example()], None, Output::Json, false).unwrap()
    );
    let bare = render(&[controller("new", None)], None, Output::Json, false).unwrap();
    assert_eq!(
        bare,
        "[\n  {\n    \"namespace\": \"default\",\n    \"name\": \"new\",\n    \"summary\": null,\n    \"conditions\": [],\n    \"clusters\": [],\n    \"tenancies\": []\n  }\n]\n"
    );
}

#[test]
fn yaml_carries_the_same_shape_as_json() {
    let yaml = render(&[example()], None, Output::Yaml, false).unwrap();
    let from_yaml: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let json = render(&[example()], None, Output::Json, false).unwrap();
    let from_json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(from_yaml, from_json);
}

#[test]
fn colors_appear_only_when_asked_and_keep_columns_aligned() {
    let plain = table_of(&[example()], None);
    assert!(!plain.contains('\x1b'), "{plain}");
    let colored = render(&[example()], None, Output::Table, true).unwrap();
    assert!(colored.contains("\x1b[32mDeployed\x1b[0m"), "{colored}");
    assert!(colored.contains("\x1b[31mFailed\x1b[0m"), "{colored}");
    assert!(colored.contains("\x1b[33mPending\x1b[0m"), "{colored}");
    assert!(
        colored.contains("\x1b[31mReady=False (ReleaseFailed)\x1b[0m"),
        "{colored}"
    );
    let stripped = colored
        .replace("\x1b[0m", "")
        .replace("\x1b[31m", "")
        .replace("\x1b[32m", "")
        .replace("\x1b[33m", "");
    assert_eq!(stripped, plain);
}

#[test]
fn color_is_wanted_only_for_tables_on_a_terminal_without_no_color() {
    assert!(color_wanted(Output::Table, true, None));
    assert!(color_wanted(Output::Table, true, Some(OsStr::new(""))));
    assert!(!color_wanted(Output::Table, true, Some(OsStr::new("1"))));
    assert!(!color_wanted(Output::Table, false, None));
    assert!(!color_wanted(Output::Json, true, None));
}

#[test]
fn a_resource_without_status_says_the_operator_may_not_be_running() {
    let out = table_of(&[controller("new", None)], None);
    assert_eq!(
        out,
        "Controller default/new  no status yet (is `tenancy-hub run` running?)\n"
    );
    assert!(!is_ready(&controller("new", None)));
}

#[test]
fn readiness_needs_a_true_ready_condition_for_the_current_generation() {
    let status = ControllerStatus {
        conditions: vec![ready(
            "True",
            "AllReleasesDeployed",
            "1 release(s) deployed",
        )],
        ..ControllerStatus::default()
    };
    let mut c = controller("web", Some(status));
    assert!(is_ready(&c));
    assert!(!is_ready(&example()));
    c.metadata.generation = Some(2);
    assert!(!is_ready(&c));
    let out = table_of(&[c], None);
    assert!(
        out.contains("  status is behind the spec: generation 2, observed 1\n"),
        "{out}"
    );
}

#[test]
fn a_missing_resource_is_named_with_its_namespace_and_a_way_to_list_them() {
    let err = Error::NotFound {
        namespace: "team-a".into(),
        name: "web".into(),
    };
    assert_eq!(
        err.to_string(),
        "no Controller \"web\" in namespace \"team-a\"; list them with `kubectl get controllers -A`"
    );
}
