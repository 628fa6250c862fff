//! Tests of the HTTP endpoints: health, readiness, metrics and the status API.

use std::{path::Path as FsPath, time::Duration};

use axum::body::Body;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::{
    clusters::registry::{ClusterEntry, ClusterRegistry, HubSource, RegistrationFile},
    observe::model::{Change, PodInfo, WorkloadInfo, WorkloadKind, WorkloadRef},
    queue::QueueConfig,
    runtime::auth::{Access, fake},
    runtime::status_api::*,
};

fn entry(name: &str, labels: &[(&str, &str)]) -> ClusterEntry {
    ClusterEntry {
        name: name.parse().unwrap(),
        context: format!("ctx-{name}"),
        kubeconfig: None,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        variables: Default::default(),
    }
}

fn pod(name: &str, ready: bool) -> PodInfo {
    PodInfo {
        name: name.into(),
        phase: "Running".into(),
        ready,
        restarts: 0,
        reason: String::new(),
        owner: None,
    }
}

fn workload(name: &str, ready: i32, desired: i32) -> WorkloadInfo {
    WorkloadInfo {
        id: WorkloadRef {
            kind: WorkloadKind::Deployment,
            name: name.into(),
        },
        release: Some("foo".into()),
        ready,
        desired,
        rolled_out: ready == desired,
    }
}

fn apply(model: &Model, scope: &str, change: Change) {
    model.apply((scope.parse().unwrap(), change), Timestamp::UNIX_EPOCH);
}

/// member-1: `foo` live (1 of 2 pods, 1 of 2 workloads ready) and `bar` lost;
/// member-2: `baz` lost; the hub watches nothing.
fn model() -> Model {
    let model = Model::default();
    apply(
        &model,
        "member-1/foo",
        Change::PodsListed(vec![pod("a", true), pod("b", false)]),
    );
    let workloads = vec![workload("web", 2, 2), workload("api", 0, 1)];
    apply(
        &model,
        "member-1/foo",
        Change::WorkloadsListed(WorkloadKind::Deployment, workloads),
    );
    apply(&model, "member-1/bar", Change::Pod(pod("c", true)));
    apply(
        &model,
        "member-1/bar",
        Change::Lost("connection refused".into()),
    );
    apply(
        &model,
        "member-2/baz",
        Change::Lost("no route to host".into()),
    );
    model
}

fn registered() -> Vec<ClusterEntry> {
    vec![
        entry("hub", &[]),
        entry("member-1", &[("region", "east")]),
        entry("member-2", &[]),
    ]
}

#[test]
fn the_cluster_list_counts_ready_pods_and_workloads_per_cluster_in_registry_order() {
    let list = serde_json::to_value(cluster_list(&model(), &registered(), &Visible::All)).unwrap();
    assert_eq!(
        list,
        json!([
            {"name": "hub", "context": "ctx-hub", "labels": {}, "namespaces": 0, "live": true,
             "pods": {"ready": 0, "total": 0}, "workloads": {"ready": 0, "total": 0}},
            {"name": "member-1", "context": "ctx-member-1", "labels": {"region": "east"},
             "namespaces": 2, "live": true,
             "pods": {"ready": 2, "total": 3}, "workloads": {"ready": 1, "total": 2}},
            {"name": "member-2", "context": "ctx-member-2", "labels": {}, "namespaces": 1,
             "live": false, "pods": {"ready": 0, "total": 0}, "workloads": {"ready": 0, "total": 0}},
        ])
    );
}

#[test]
fn a_cluster_is_reachable_when_any_namespace_is_live_or_none_is_watched() {
    let g = gauges(&model(), &registered());
    assert_eq!(
        g.clusters,
        [
            ("hub".to_owned(), true),
            ("member-1".to_owned(), true),
            ("member-2".to_owned(), false)
        ]
    );
    assert_eq!(g.watched_namespaces, 3);
}

#[test]
fn a_cluster_detail_has_a_line_per_watched_namespace() {
    let detail = cluster_detail(&model(), &registered(), "member-1", &Visible::All).unwrap();
    let detail = serde_json::to_value(detail).unwrap();
    assert_eq!(detail["labels"], json!({"region": "east"}));
    assert_eq!(
        detail["namespaces"],
        json!([
            {"namespace": "bar", "live": false, "lastSeen": "1970-01-01T00:00:00Z",
             "problem": "connection refused",
             "pods": {"ready": 1, "total": 1}, "workloads": {"ready": 0, "total": 0}},
            {"namespace": "foo", "live": true, "lastSeen": "1970-01-01T00:00:00Z",
             "problem": null,
             "pods": {"ready": 1, "total": 2}, "workloads": {"ready": 1, "total": 2}},
        ])
    );
}

/// The hub namespaces of the Controllers watching each scope of [`model`]: member-1/foo is
/// team-a's, member-1/bar team-b's, member-2/baz both teams', and member-2/qux (not watched
/// yet) team-a's.
fn owners() -> BTreeMap<ClusterNamespace, BTreeSet<String>> {
    [
        ("member-1/foo", &["team-a"][..]),
        ("member-1/bar", &["team-b"]),
        ("member-2/baz", &["team-a", "team-b"]),
        ("member-2/qux", &["team-a"]),
    ]
    .into_iter()
    .map(|(scope, hub)| {
        let hub = hub.iter().map(|ns| ns.to_string()).collect();
        (scope.parse().unwrap(), hub)
    })
    .collect()
}

fn allowed(namespaces: &[&str]) -> Access {
    Access::Namespaces(namespaces.iter().map(|ns| ns.to_string()).collect())
}

#[test]
fn a_caller_sees_the_scopes_with_a_controller_in_a_hub_namespace_it_may_read() {
    let only = |scopes: &[&str]| Visible::Only(scopes.iter().map(|s| s.parse().unwrap()).collect());
    assert_eq!(
        Visible::of(&allowed(&["team-a"]), &owners()),
        only(&["member-1/foo", "member-2/baz", "member-2/qux"])
    );
    assert_eq!(
        Visible::of(&allowed(&["team-b"]), &owners()),
        only(&["member-1/bar", "member-2/baz"])
    );
    assert_eq!(Visible::of(&allowed(&[]), &owners()), only(&[]));
    assert_eq!(Visible::of(&Access::Everywhere, &owners()), Visible::All);
    assert!(Visible::All.allows(&"member-9/anything".parse().unwrap()));
}

#[test]
fn the_cluster_list_of_a_tenant_shows_only_the_clusters_and_namespaces_it_may_see() {
    let visible = Visible::of(&allowed(&["team-b"]), &owners());
    let list = serde_json::to_value(cluster_list(&model(), &registered(), &visible)).unwrap();
    let counts: Vec<(&Value, &Value, &Value)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (&c["name"], &c["namespaces"], &c["pods"]))
        .collect();
    assert_eq!(
        counts,
        [
            (
                &json!("member-1"),
                &json!(1),
                &json!({"ready": 1, "total": 1})
            ),
            (
                &json!("member-2"),
                &json!(1),
                &json!({"ready": 0, "total": 0})
            ),
        ]
    );
    assert_eq!(list[1]["workloads"], json!({"ready": 0, "total": 0}));
    assert_eq!(list.as_array().unwrap().len(), 2);
    let nothing = cluster_list(
        &model(),
        &registered(),
        &Visible::of(&allowed(&[]), &owners()),
    );
    assert!(nothing.is_empty(), "no cluster is listed");
}

#[test]
fn a_cluster_detail_of_a_tenant_lists_only_the_namespaces_it_may_see() {
    let visible = Visible::of(&allowed(&["team-a"]), &owners());
    let detail = cluster_detail(&model(), &registered(), "member-1", &visible).unwrap();
    let namespaces: Vec<&str> = detail
        .namespaces
        .iter()
        .map(|n| n.namespace.as_str())
        .collect();
    assert_eq!(namespaces, ["foo"]);
    assert_eq!((detail.pods.total, detail.workloads.total), (2, 2));
}

#[test]
fn a_scope_a_tenant_may_not_see_is_not_watched_as_far_as_it_can_tell() {
    let visible = Visible::of(&allowed(&["team-a"]), &owners());
    let hidden = scope_view(&model(), &registered(), "member-1", "bar", &visible).unwrap_err();
    let unwatched = scope_view(&model(), &registered(), "member-1", "nope", &visible).unwrap_err();
    assert_eq!(
        (hidden.to_string(), unwatched.to_string()),
        (
            "namespace bar of cluster member-1 is not watched: no tenancy targets it".into(),
            "namespace nope of cluster member-1 is not watched: no tenancy targets it".into()
        )
    );
    let shown = scope_view(&model(), &registered(), "member-1", "foo", &visible).unwrap();
    assert_eq!(shown.pods.len(), 2);
}

#[test]
fn an_unregistered_cluster_is_named_with_the_registered_ones() {
    let err = cluster_detail(&model(), &registered(), "member-9", &Visible::All).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cluster \"member-9\" is not registered; registered: hub, member-1, member-2"
    );
    let err = scope_view(&model(), &registered(), "member-9", "foo", &Visible::All).unwrap_err();
    assert!(matches!(err, ApiError::UnknownCluster { .. }), "{err}");
}

#[test]
fn an_invalid_cluster_or_namespace_name_is_a_bad_request() {
    let err = cluster_detail(&model(), &registered(), "Member_1", &Visible::All).unwrap_err();
    assert!(matches!(err, ApiError::BadName(_)), "{err}");
    assert!(
        err.to_string()
            .contains("\"Member_1\" is not a DNS-1123 label"),
        "{err}"
    );
    let err = scope_view(&model(), &registered(), "member-1", "Foo", &Visible::All).unwrap_err();
    assert!(err.to_string().contains("namespace \"Foo\""), "{err}");
}

#[test]
fn a_namespace_view_has_every_pod_and_workload_with_its_cluster_and_namespace() {
    let view = scope_view(&model(), &registered(), "member-1", "foo", &Visible::All).unwrap();
    let view = serde_json::to_value(view).unwrap();
    assert_eq!(
        (&view["cluster"], &view["namespace"]),
        (&json!("member-1"), &json!("foo"))
    );
    assert_eq!(
        (&view["live"], &view["problem"]),
        (&json!(true), &Value::Null)
    );
    let pods = field_of_each(&view["pods"], "name");
    assert_eq!(pods, [&json!("a"), &json!("b")]);
    assert_eq!(
        view["workloads"][0],
        json!({"id": {"kind": "Deployment", "name": "api"}, "release": "foo", "ready": 0, "desired": 1, "rolled_out": false})
    );
}

#[test]
fn a_namespace_no_tenancy_targets_is_not_watched() {
    let err = scope_view(&model(), &registered(), "member-1", "other", &Visible::All).unwrap_err();
    assert_eq!(
        err.to_string(),
        "namespace other of cluster member-1 is not watched: no tenancy targets it"
    );
}

/// A registry of the hub, member-1 (labelled) and member-2, built from a kubeconfig in `dir`.
pub(crate) async fn registry(dir: &FsPath) -> SharedRegistry {
    let kc = dir.join("kubeconfig");
    std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts:\n  - {name: hub, context: {cluster: c, user: u}}\n  - {name: member-1, context: {cluster: c, user: u}}\n  - {name: member-2, context: {cluster: c, user: u}}\ncurrent-context: hub\n",
        )
        .unwrap();
    let file = RegistrationFile::parse(
            FsPath::new("clusters.yaml"),
            &format!(
                "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}, labels: {{region: east}}}}\n  - {{name: member-2, context: member-2, kubeconfig: {k}}}\n",
                k = kc.display()
            ),
        )
        .unwrap();
    let hub = HubSource {
        kubeconfig: Some(kc),
        context: None,
    };
    let registry = ClusterRegistry::connect(&hub, &file).await.unwrap();
    Arc::new(arc_swap::ArcSwap::from_pointee(registry))
}

/// A status API state over the fake hub, with the model and registry above.
pub(crate) async fn state() -> (ApiState, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Metrics::new();
    metrics.watch_event();
    let (hub, _) = fake::hub();
    let scope_owners = ScopeOwners::default();
    scope_owners.set(|scope| {
        let hub = owners().remove(scope).unwrap_or_default();
        hub.into_iter()
            .map(|ns| ObjectRef::new("ctl").within(&ns))
            .collect()
    });
    let state = ApiState {
        git_hooks: None,
        model: Arc::new(model()),
        registry: registry(dir.path()).await,
        metrics: Arc::new(metrics),
        queue: HelmQueue::new(QueueConfig::default()),
        ready: Arc::new(ArcSwap::from_pointee(Readiness::Ready)),
        channels: ChannelDepths::default(),
        reviewer: Arc::new(Reviewer::new(hub, Arc::default())),
        owners: scope_owners,
        streams: StreamCounts::default(),
        releases: scope_releases(),
        fleet: Default::default(),
    };
    (state, dir)
}

/// The `field` of each element of the array `list`.
fn field_of_each<'a>(list: &'a Value, field: &str) -> Vec<&'a Value> {
    list.as_array().unwrap().iter().map(|v| &v[field]).collect()
}

/// In member-2/baz, team-a's `web` and team-b's `db`; nothing elsewhere.
fn scope_releases() -> ScopeReleases {
    let releases = ScopeReleases::default();
    releases.set(|scope| {
        if scope.to_string() != "member-2/baz" {
            return Vec::new();
        }
        [("team-a", "web"), ("team-b", "db")]
            .into_iter()
            .map(|(hub, release)| ScopeRelease {
                hub_namespace: hub.into(),
                controller: "ctl".into(),
                message: crate::api::crd::ChartMessage {
                    release_name: release.into(),
                    values: r#"{"token":"******"}"#.into(),
                    ..Default::default()
                },
            })
            .collect()
    });
    releases
}

#[tokio::test]
async fn a_namespace_shows_the_releases_of_the_controllers_the_caller_may_read_with_their_values() {
    let (state, _dir) = state().await;
    let (status, view) = get_json(&state, "/api/v1/clusters/member-2/namespaces/baz").await;
    assert_eq!(status, StatusCode::OK);
    let names = field_of_each(&view["releases"], "releaseName");
    assert_eq!(names, [&json!("web"), &json!("db")]);
    assert_eq!(
        view["releases"][0]["values"],
        json!(r#"{"token":"******"}"#)
    );
    assert_eq!(view["releases"][0]["hubNamespace"], json!("team-a"));
    let (_, _, body) = get_as(
        &state,
        "/api/v1/clusters/member-2/namespaces/baz",
        Some(fake::TEAM_A),
    )
    .await;
    let view: Value = serde_json::from_str(&body).unwrap();
    let names = field_of_each(&view["releases"], "releaseName");
    assert_eq!(
        names,
        [&json!("web")],
        "team-b's release is not team-a's to see"
    );
}

/// GETs `uri` from the router as the fake hub's admin: status, content type and body.
async fn get(state: &ApiState, uri: &str) -> (StatusCode, String, String) {
    let (status, headers, body) = get_as(state, uri, Some(fake::ADMIN)).await;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, body)
}

/// GETs `uri` from the router with `token`, if any: status, headers and body.
async fn get_as(
    state: &ApiState,
    uri: &str,
    token: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut request = axum::http::Request::get(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = router(state.clone())
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

async fn get_json(state: &ApiState, uri: &str) -> (StatusCode, Value) {
    let (status, content_type, body) = get(state, uri).await;
    assert_eq!(content_type, "application/json", "{uri}");
    (status, serde_json::from_str(&body).unwrap())
}

#[tokio::test]
async fn the_status_api_answers_401_with_a_bearer_challenge_to_callers_without_a_valid_token() {
    let (state, _dir) = state().await;
    for uri in [
        "/api/v1/clusters",
        "/api/v1/clusters/member-1",
        "/api/v1/clusters/Not_A_Label",
        "/api/v1/clusters/member-1/namespaces/foo",
    ] {
        for token in [None, Some("garbage")] {
            let (status, headers, body) = get_as(&state, uri, token).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri} {token:?}");
            assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert!(body["error"].is_string(), "{body}");
        }
    }
    let request = axum::http::Request::get("/api/v1/clusters")
        .header(header::AUTHORIZATION, "Basic YWRtaW46YWRtaW4=")
        .body(Body::empty())
        .unwrap();
    let response = router(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_replica_working_no_controller_says_so_instead_of_showing_an_empty_picture() {
    let (state, _dir) = state().await;
    state.ready.store(Arc::new(Readiness::Standby {
        lease: "tenancy-hub/tenancy-hub-shard-*-of-3".into(),
        holder: "other replicas".into(),
    }));
    for uri in ["/api/v1/clusters", "/api/v1/clusters/member-1"] {
        let (status, body) = get_json(&state, uri).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        let error = body["error"].as_str().unwrap();
        assert!(
            error.starts_with("standby: this replica works no Controller"),
            "{error}"
        );
    }
    state.ready.store(Arc::new(Readiness::Starting));
    let (status, body) = get_json(&state, "/api/v1/clusters").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body["error"].as_str().unwrap().starts_with("starting"));
}

#[tokio::test]
async fn health_readiness_and_metrics_need_no_token() {
    let (state, _dir) = state().await;
    state.ready.store(Arc::new(Readiness::Ready));
    for uri in ["/healthz", "/readyz", "/metrics"] {
        let (status, _, _) = get_as(&state, uri, None).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
    }
}

#[tokio::test]
async fn a_hub_that_fails_the_review_makes_the_status_api_unavailable() {
    let (state, _dir) = state().await;
    let (status, headers, body) = get_as(&state, "/api/v1/clusters", Some(fake::BROKEN)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!headers.contains_key(header::WWW_AUTHENTICATE));
    let body: Value = serde_json::from_str(&body).unwrap();
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with("cannot check the caller with the hub (TokenReview): ")
            && error.contains("etcdserver: request timed out"),
        "{error}"
    );
}

#[tokio::test]
async fn a_tenant_sees_its_own_scopes_and_gets_404_for_the_others_like_for_unwatched_ones() {
    let (state, _dir) = state().await;
    let team_a = Some(fake::TEAM_A);
    let (status, _, list) = get_as(&state, "/api/v1/clusters", team_a).await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_str(&list).unwrap();
    let namespaces: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["namespaces"])
        .collect();
    assert_eq!(
        namespaces,
        [&json!(1), &json!(1)],
        "the hub is targeted by none of its Controllers"
    );
    let (_, _, detail) = get_as(&state, "/api/v1/clusters/member-1", team_a).await;
    let detail: Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(
        detail["namespaces"].as_array().unwrap().len(),
        1,
        "{detail}"
    );
    assert_eq!(detail["namespaces"][0]["namespace"], "foo");
    let (status, _, _) = get_as(&state, "/api/v1/clusters/member-1/namespaces/foo", team_a).await;
    assert_eq!(status, StatusCode::OK);
    let hidden = get_as(&state, "/api/v1/clusters/member-1/namespaces/bar", team_a).await;
    let unwatched = get_as(&state, "/api/v1/clusters/member-1/namespaces/bax", team_a).await;
    assert_eq!(hidden.0, StatusCode::NOT_FOUND);
    assert_eq!(hidden.0, unwatched.0);
    assert_eq!(hidden.2.replace("bar", "bax"), unwatched.2);
}

#[tokio::test]
async fn healthz_always_answers_ok() {
    let (state, _dir) = state().await;
    let (status, _, body) = get(&state, "/healthz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn readyz_answers_ok_only_once_the_controllers_are_listed() {
    let (state, _dir) = state().await;
    state.ready.store(Arc::new(Readiness::Starting));
    let (status, _, body) = get(&state, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, NOT_READY)
    );
    state.ready.store(Arc::new(Readiness::Ready));
    let (status, _, body) = get(&state, "/readyz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn a_standby_is_ready_and_says_which_lease_it_waits_for_and_who_holds_it() {
    let (state, _dir) = state().await;
    state.ready.store(Arc::new(Readiness::Standby {
        lease: "tenancy-hub/tenancy-hub".into(),
        holder: "host-42".into(),
    }));
    let (status, _, body) = get(&state, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::OK,
            "standby: waiting for Lease tenancy-hub/tenancy-hub held by host-42"
        )
    );
}

#[tokio::test]
async fn metrics_are_openmetrics_text_with_gauges_from_the_model_and_registry() {
    let (state, _dir) = state().await;
    let (status, content_type, body) = get(&state, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    for line in [
        "tenancy_hub_watch_events_total 1",
        "tenancy_hub_queue_depth 0",
        "tenancy_hub_jobs_running 0",
        "tenancy_hub_cluster_reachable{cluster=\"hub\"} 1",
        "tenancy_hub_cluster_reachable{cluster=\"member-1\"} 1",
        "tenancy_hub_cluster_reachable{cluster=\"member-2\"} 0",
        "tenancy_hub_watched_namespaces 3",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "{line} missing from\n{body}"
        );
    }
}

#[tokio::test]
async fn the_cluster_list_has_every_registered_cluster_hub_first() {
    let (state, _dir) = state().await;
    let (status, list) = get_json(&state, "/api/v1/clusters").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hub", "member-1", "member-2"]);
    assert_eq!(list[1]["context"], "member-1");
    assert_eq!(list[1]["labels"], json!({"region": "east"}));
    assert_eq!(list[1]["pods"], json!({"ready": 2, "total": 3}));
}

#[tokio::test]
async fn a_cluster_route_answers_its_namespaces_or_a_404_or_400() {
    let (state, _dir) = state().await;
    let (status, detail) = get_json(&state, "/api/v1/clusters/member-2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["namespaces"][0]["namespace"], "baz");
    assert_eq!(detail["namespaces"][0]["problem"], "no route to host");
    let (status, body) = get_json(&state, "/api/v1/clusters/x").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"error": "cluster \"x\" is not registered; registered: hub, member-1, member-2"})
    );
    let (status, body) = get_json(&state, "/api/v1/clusters/Not_A_Label").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("DNS-1123"),
        "{body}"
    );
}

#[tokio::test]
async fn a_namespace_route_answers_its_state_or_a_404() {
    let (state, _dir) = state().await;
    let (status, view) = get_json(&state, "/api/v1/clusters/member-1/namespaces/foo").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&view["cluster"], &view["namespace"]),
        (&json!("member-1"), &json!("foo"))
    );
    assert_eq!(view["pods"].as_array().unwrap().len(), 2);
    assert_eq!(view["workloads"].as_array().unwrap().len(), 2);
    let (status, body) = get_json(&state, "/api/v1/clusters/member-1/namespaces/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["error"],
        "namespace nope of cluster member-1 is not watched: no tenancy targets it"
    );
    let (status, _) = get_json(&state, "/api/v1/clusters/member-9/namespaces/foo").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn serve_answers_on_the_port_it_bound_and_stops_when_cancelled() {
    let (state, _dir) = state().await;
    let cancel = CancellationToken::new();
    let addr = serve(
        "127.0.0.1:0".parse().unwrap(),
        state,
        cancel.clone(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert_ne!(addr.port(), 0);
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .expect("an answer in time");
        answer
    })
    .await
    .unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("\r\n\r\nok"),
        "{answer}"
    );
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(30), async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener closes after cancellation");
}

#[tokio::test]
async fn serve_names_the_address_it_cannot_bind() {
    let (state, _dir) = state().await;
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let err = serve(addr, state, CancellationToken::new(), &Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(
        err.to_string()
            .contains(&format!("cannot listen on {addr}")),
        "{err}"
    );
}
