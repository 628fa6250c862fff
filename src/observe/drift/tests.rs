//! Tests of drift comparison between manifests and live objects.

use super::*;
use crate::api::crd::DriftTarget;
use crate::observe::release_check::{Asked, Kinds, check};
use crate::plan::health::Rules;
use kube::Client;
use serde_json::json;

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": null},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": null},
                "spec": {"containers": [{
                    "name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": 0.5, "memory": "64Mi"}}
                }]}
            }
        }
    })
}

fn live_deployment(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "team", "uid": "1", "resourceVersion": "7",
            "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "web"}
        },
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}
                }], "restartPolicy": "Always"}
            }
        },
        "status": {"replicas": replicas}
    })
}

fn id(kind: &str, name: &str) -> ObjectId {
    ObjectId {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: Some("team".into()),
        name: name.into(),
    }
}

fn rule(paths: &[&str], target: Option<DriftTarget>) -> DriftIgnore {
    DriftIgnore {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        target,
    }
}

/// A Helm release record's `release` field holding `manifest`, as Helm writes it.
fn record_of(manifest: &str) -> String {
    use std::io::Write as _;
    let json = json!({"name": "web", "version": 3, "manifest": manifest}).to_string();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(json.as_bytes()).unwrap();
    base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap())
}

type Handle =
    tower_test::mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;

/// Awaits the next request, checks its path and as whom it is made, and answers it.
async fn answer(handle: &mut Handle, path: &str, user: Option<&str>, code: u16, body: Value) {
    let (request, send) = handle.next_request().await.expect("a request");
    assert_eq!(request.uri().path(), path);
    let asked_as = request
        .headers()
        .get("impersonate-user")
        .map(|v| v.to_str().unwrap());
    assert_eq!(asked_as, user, "as whom {path} is read");
    send.send_response(
        http::Response::builder()
            .status(code)
            .body(kube::client::Body::from(body.to_string().into_bytes()))
            .unwrap(),
    );
}

fn resources(group_version: &str, list: &[(&str, &str, bool)]) -> Value {
    let resources: Vec<Value> = list
        .iter()
        .map(|(name, kind, namespaced)| {
            json!({"name": name, "singularName": "", "kind": kind, "namespaced": namespaced,
                       "verbs": ["get", "list"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
               "resources": resources})
}

fn forbidden(what: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
               "code": 403, "message": format!("{what} is forbidden: User \"team-a-deployer\" cannot get it")})
}

#[tokio::test]
async fn an_impersonated_release_is_read_as_its_identity_and_what_it_may_not_read_is_not_looked_at()
{
    let (service, mut handle) = tower_test::mock::pair();
    let member = Client::new(service, "default");
    let who = crate::api::policy::Impersonation {
        user: "team-a-deployer".into(),
        ..Default::default()
    };
    let key: ReleaseKey = "member-1/team/web".parse().unwrap();
    let kinds = Kinds::default();
    let checked = tokio::spawn(async move {
        let health = Rules::compile(&[]).unwrap();
        let asked = Asked {
            compare: true,
            ignore: &[],
            health: &health,
        };
        check(&member, Some(&who), &kinds, (&key, 3), asked).await
    });
    let me = Some("team-a-deployer");
    // The manifest names an object of the release's namespace, a Secret of another
    // namespace and a cluster-scoped object, as a forged record would.
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: treasure, namespace: vault}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: admin}\n";
    let record = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "sh.helm.release.v1.web.v3", "namespace": "team"},
            "data": {"release": base64::engine::general_purpose::STANDARD.encode(record_of(manifest))}});
    answer(
        &mut handle,
        "/api/v1/namespaces/team/secrets/sh.helm.release.v1.web.v3",
        me,
        200,
        record,
    )
    .await;
    let core = resources(
        "v1",
        &[
            ("configmaps", "ConfigMap", true),
            ("secrets", "Secret", true),
        ],
    );
    answer(&mut handle, "/api/v1", None, 200, core.clone()).await;
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "team"}, "data": {"a": "b"}});
    answer(
        &mut handle,
        "/api/v1/namespaces/team/configmaps/web",
        me,
        200,
        live,
    )
    .await;
    answer(&mut handle, "/api/v1", None, 200, core).await;
    answer(
        &mut handle,
        "/api/v1/namespaces/vault/secrets/treasure",
        me,
        403,
        forbidden("secrets \"treasure\""),
    )
    .await;
    let rbac = resources(
        "rbac.authorization.k8s.io/v1",
        &[("clusterroles", "ClusterRole", false)],
    );
    answer(
        &mut handle,
        "/apis/rbac.authorization.k8s.io/v1",
        None,
        200,
        rbac,
    )
    .await;
    answer(
        &mut handle,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        me,
        403,
        forbidden("clusterroles.rbac.authorization.k8s.io \"admin\""),
    )
    .await;
    let found = checked.await.unwrap().unwrap().drift;
    let said: Vec<(String, bool, Option<&str>)> = found
        .iter()
        .map(|o| (o.id.name.clone(), o.missing, o.not_readable_by.as_deref()))
        .collect();
    assert_eq!(
        said,
        [
            ("admin".to_owned(), false, me),
            ("treasure".to_owned(), false, me),
        ],
        "neither found nor missing: not readable by the identity"
    );
    assert_eq!(
        summary(&found),
        "ClusterRole/admin not readable by team-a-deployer; Secret/treasure not readable by team-a-deployer"
    );
}

#[test]
fn a_manifest_naming_more_objects_than_a_check_reads_is_refused() {
    let one = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n";
    assert_eq!(
        manifest_objects(&one.repeat(MAX_MANIFEST_OBJECTS))
            .unwrap()
            .len(),
        1000
    );
    let error = manifest_objects(&one.repeat(MAX_MANIFEST_OBJECTS + 1)).unwrap_err();
    assert!(error.contains("more than 1000 objects"), "{error}");
}

#[test]
fn a_manifest_yields_its_named_objects_and_skips_empty_documents() {
    let manifest = "---\n# Source: c/templates/empty.yaml\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: other\n";
    let objects = manifest_objects(manifest).unwrap();
    let ids: Vec<ObjectId> = objects.iter().filter_map(ObjectId::of).collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0].kind, "Service");
    assert_eq!(ids[1].namespace.as_deref(), Some("other"));
}

#[test]
fn defaults_status_and_other_fields_the_server_adds_are_no_drift() {
    assert_eq!(
        differences(&deployment(), &live_deployment(2)),
        Vec::<String>::new()
    );
}

#[test]
fn a_changed_field_a_removed_label_and_a_shortened_list_are_drift() {
    assert_eq!(
        differences(&deployment(), &live_deployment(5)),
        ["/spec/replicas"]
    );
    let mut live = live_deployment(2);
    live["metadata"]["labels"] = json!({"other": "x"});
    live["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([]);
    live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    assert_eq!(
        differences(&deployment(), &live),
        [
            "/metadata/labels/app",
            "/spec/template/spec/containers/0/image",
            "/spec/template/spec/containers/0/ports",
        ]
    );
}

#[test]
fn quantities_compare_by_value_and_pointer_segments_are_escaped() {
    assert!(same_scalar(&json!(0.5), &json!("500m")));
    assert!(same_scalar(&json!("1Gi"), &json!("1024Mi")));
    assert!(!same_scalar(&json!("1Gi"), &json!("1G")));
    assert!(!same_scalar(&json!("nginx"), &json!("nginx:1")));
    let desired = json!({"kind": "ConfigMap", "metadata": {"annotations": {"a/b~c": "1"}}});
    let live = json!({"kind": "ConfigMap", "metadata": {"annotations": {"other": "1"}}});
    assert_eq!(
        differences(&desired, &live),
        ["/metadata/annotations/a~1b~0c"]
    );
}

#[test]
fn secret_string_data_compares_with_the_stored_data() {
    let desired =
        json!({"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"password": "hunter2"}});
    let same = json!({"kind": "Secret", "data": {"password": "aHVudGVyMg=="}});
    let changed = json!({"kind": "Secret", "data": {"password": "b3RoZXI="}});
    assert!(differences(&desired, &same).is_empty());
    let paths = differences(&desired, &changed);
    assert_eq!(paths, ["/data/password"]);
    assert!(!paths.concat().contains("hunter2"));
}

#[test]
fn ignore_rules_cover_their_paths_and_below_for_matching_targets_only() {
    let web = Some(DriftTarget {
        kind: Some("Deployment".into()),
        name: Some("web".into()),
        namespace: None,
    });
    let rules = [
        rule(&["/spec/replicas"], web),
        rule(&["/metadata/annotations"], None),
    ];
    assert!(ignored(&rules, &id("Deployment", "web"), "/spec/replicas"));
    assert!(!ignored(&rules, &id("Deployment", "api"), "/spec/replicas"));
    assert!(!ignored(
        &rules,
        &id("Deployment", "web"),
        "/spec/replicasX"
    ));
    assert!(ignored(
        &rules,
        &id("Service", "x"),
        "/metadata/annotations/a"
    ));
    let elsewhere = [rule(
        &["/spec"],
        Some(DriftTarget {
            namespace: Some("other".into()),
            ..Default::default()
        }),
    )];
    assert!(!ignored(&elsewhere, &id("Service", "x"), "/spec/ports"));
}

#[test]
fn an_ignored_path_is_no_drift_and_a_missing_object_always_is() {
    let rules = [rule(&["/spec/replicas"], None)];
    let web = id("Deployment", "web");
    assert_eq!(
        object_drift(
            web.clone(),
            &deployment(),
            Some(&live_deployment(5)),
            &rules
        ),
        None
    );
    let gone = object_drift(web, &deployment(), None, &rules).unwrap();
    assert!(gone.missing && gone.paths.is_empty());
}

#[test]
fn status_and_summary_list_at_most_ten_objects_of_five_paths_and_count_the_rest() {
    let objects: Vec<ObjectDrift> = (0..12)
        .map(|i| ObjectDrift {
            id: id("ConfigMap", &format!("c{i:02}")),
            missing: false,
            paths: (0..7).map(|p| format!("/data/k{p}")).collect(),
            not_readable_by: None,
        })
        .collect();
    let s = status(3, "now".into(), "Reported", &objects);
    assert_eq!((s.objects.len(), s.more_objects), (10, 2));
    assert_eq!((s.objects[0].paths.len(), s.objects[0].more_paths), (5, 2));
    let text = summary(&objects);
    assert!(
        text.starts_with("ConfigMap/c00 /data/k0 /data/k1 /data/k2 /data/k3 /data/k4 and 2 more")
    );
    assert!(text.ends_with("; 2 more object(s)"));
}

#[test]
fn repairs_are_limited_per_release_counted_once_per_revision_and_allowed_again_later() {
    let key: ReleaseKey = "member-1/team/web".parse().unwrap();
    let other: ReleaseKey = "member-1/team/api".parse().unwrap();
    let window = Duration::from_secs(600);
    let mut limiter = RepairLimiter::new(3, window);
    let t0 = Instant::now();
    for revision in 1..=3 {
        assert_eq!(limiter.allow(&key, revision, t0), RepairVerdict::Allowed);
        assert_eq!(limiter.allow(&key, revision, t0), RepairVerdict::Allowed);
    }
    let later = t0 + Duration::from_secs(60);
    assert_eq!(
        limiter.allow(&key, 4, later),
        RepairVerdict::Suppressed(Duration::from_secs(540))
    );
    assert_eq!(limiter.allow(&other, 1, later), RepairVerdict::Allowed);
    assert_eq!(limiter.allow(&key, 4, t0 + window), RepairVerdict::Allowed);
}

#[test]
fn a_zero_the_server_drops_is_no_drift_and_a_changed_or_removed_value_still_is() {
    let desired = json!({"spec": {"probe": {"initialDelaySeconds": 0, "periodSeconds": 10},
        "paused": false, "note": ""}});
    // The API server keeps no zero of a plain field: absent is the same.
    let live = json!({"spec": {"probe": {"periodSeconds": 10}}});
    assert_eq!(differences(&desired, &live), Vec::<String>::new());
    // A value that is not zero, removed or changed, is drift; so is a zero changed live.
    let changed = json!({"spec": {"probe": {"initialDelaySeconds": 5}, "paused": true}});
    assert_eq!(
        differences(&desired, &changed),
        [
            "/spec/paused",
            "/spec/probe/initialDelaySeconds",
            "/spec/probe/periodSeconds"
        ]
    );
}
