//! Namespace preparation and unbinding against a scripted member API server: the requests made, in order, and the answers given.

use super::*;
use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The member's API server as a test scripts it.
struct Member(Handle);

impl Member {
    fn new() -> (Client, Self) {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(service, "default"), Self(handle))
    }

    /// Awaits the next request, checks its method and path, answers `code` with `body`, and
    /// returns the request's body.
    async fn expect(&mut self, method: Method, path: &str, code: u16, body: Value) -> Value {
        let (request, send) =
            tokio::time::timeout(std::time::Duration::from_secs(5), self.0.next_request())
                .await
                .unwrap_or_else(|_| panic!("no {method} {path}"))
                .expect("the client is alive");
        assert_eq!(
            (request.method(), request.uri().path()),
            (&method, path),
            "the next request"
        );
        let bytes = request.into_body().collect_bytes().await.unwrap();
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(body.to_string().into_bytes()))
                .unwrap(),
        );
        if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        }
    }
}

const NAMESPACES: &str = "/api/v1/namespaces";

/// What a task came to, once it made no request beyond those scripted.
async fn finished<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("no request beyond those scripted")
        .unwrap()
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "code": code, "message": reason})
}

fn namespace(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "annotations": annotations}})
}

fn deployer() -> Impersonation {
    Impersonation {
        user: "team-a-deployer".into(),
        groups: vec!["team-a".into()],
        namespace_role: Some("admin".into()),
    }
}

fn key(namespace: &str, release: &str) -> ReleaseKey {
    format!("member-1/{namespace}/{release}").parse().unwrap()
}

/// `prepare` of release `release` into `namespace` as `who`, running against a scripted member.
fn preparing(
    namespace: &str,
    release: &str,
    who: Impersonation,
) -> (
    tokio::task::JoinHandle<Result<Option<String>, String>>,
    Member,
) {
    let (client, member) = Member::new();
    let key = key(namespace, release);
    let task =
        tokio::spawn(async move { Namespaces::new().prepare(&client, &key, Some(&who)).await });
    (task, member)
}

/// `release_gone` of release `release` of `namespace`, running against a scripted member.
fn forgetting(
    namespace: &str,
    release: &str,
) -> (tokio::task::JoinHandle<Result<(), String>>, Member) {
    let (client, member) = Member::new();
    let key = key(namespace, release);
    let task = tokio::spawn(async move { Namespaces::new().release_gone(&client, &key).await });
    (task, member)
}

impl Member {
    /// The namespace is created already.
    async fn exists_already(&mut self) {
        self.expect(Method::POST, NAMESPACES, 409, status(409, "AlreadyExists"))
            .await;
    }

    /// Namespace `name` is read: it has `annotations`.
    async fn read(&mut self, name: &str, annotations: Value) {
        let path = format!("{NAMESPACES}/{name}");
        self.expect(Method::GET, &path, 200, namespace(name, annotations))
            .await;
    }

    /// Namespace `name` is patched; returns the patch.
    async fn patched(&mut self, name: &str) -> Value {
        let path = format!("{NAMESPACES}/{name}");
        self.expect(Method::PATCH, &path, 200, namespace(name, json!({})))
            .await
    }

    /// The identity's RoleBinding in `namespace` is looked for and is not there.
    async fn no_binding(&mut self, namespace: &str) {
        self.expect(
            Method::GET,
            &binding_path(namespace),
            404,
            status(404, "NotFound"),
        )
        .await;
    }

    /// The identity's RoleBinding in `namespace` is applied; returns it.
    async fn bound(&mut self, namespace: &str) -> Value {
        self.expect(Method::PATCH, &binding_path(namespace), 200, json!({}))
            .await
    }
}

/// Annotations of a namespace the operator created for team-a-deployer, with release marks.
fn ours(marks: &[(&str, &str)]) -> Value {
    let mut annotations = json!({CREATED_BY: MANAGED_BY, CREATED_FOR: "team-a-deployer"});
    for (release, user) in marks {
        annotations[format!("{RELEASE_PREFIX}{release}")] = json!(user);
    }
    annotations
}

fn binding_path(namespace: &str) -> String {
    format!(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{}",
        role_binding_name("team-a-deployer")
    )
}

#[tokio::test]
async fn a_namespace_that_existed_gets_no_binding_and_the_release_is_told_who_must_grant_what() {
    let (task, mut member) = preparing("team-a-prod", "web", deployer());
    member.exists_already().await;
    member
        .read("team-a-prod", json!({"owner": "someone else"}))
        .await;
    member.no_binding("team-a-prod").await;
    let why = finished(task).await.unwrap().expect("told why");
    for needed in [
        "namespace team-a-prod on cluster member-1",
        "namespaceRole admin was not bound to team-a-deployer",
        "admins must grant team-a-deployer",
    ] {
        assert!(why.contains(needed), "{needed:?} in {why}");
    }
}

#[tokio::test]
async fn a_namespace_created_for_another_identity_or_for_none_gets_no_binding() {
    for annotations in [
        json!({CREATED_BY: MANAGED_BY, CREATED_FOR: "team-b-deployer"}),
        json!({CREATED_BY: MANAGED_BY}),
        json!({CREATED_FOR: "team-a-deployer"}),
    ] {
        let (task, mut member) = preparing("shared", "web", deployer());
        member.exists_already().await;
        member.read("shared", annotations).await;
        member.no_binding("shared").await;
        assert!(finished(task).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn a_namespace_the_operator_creates_is_marked_for_the_identity_and_its_release_then_bound() {
    let (task, mut member) = preparing("team-a-new", "web", deployer());
    let wanted = ours(&[("web", "team-a-deployer")]);
    let created = namespace("team-a-new", wanted.clone());
    let sent = member.expect(Method::POST, NAMESPACES, 201, created).await;
    assert_eq!(sent["metadata"]["annotations"], wanted);
    let binding = member.bound("team-a-new").await;
    assert_eq!(binding["roleRef"]["name"], "admin");
    assert_eq!(binding["subjects"][0]["name"], "team-a-deployer");
    assert_eq!(binding["subjects"][1]["name"], "team-a");
    assert_eq!(finished(task).await.unwrap(), None);
}

#[tokio::test]
async fn another_release_in_the_identitys_namespace_is_marked_before_it_is_bound() {
    let (task, mut member) = preparing("team-a-new", "api", deployer());
    member.exists_already().await;
    member
        .read("team-a-new", ours(&[("web", "team-a-deployer")]))
        .await;
    assert_eq!(
        member.patched("team-a-new").await,
        json!({"metadata": {"annotations": {"release.multitenancy.dev/api": "team-a-deployer"}}})
    );
    member.bound("team-a-new").await;
    assert_eq!(finished(task).await.unwrap(), None);
}

#[tokio::test]
async fn a_binding_made_before_namespaces_were_marked_is_kept() {
    let (task, mut member) = preparing("team-a-old", "web", deployer());
    member.exists_already().await;
    member.read("team-a-old", json!({})).await;
    let before = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": role_binding_name("team-a-deployer"), "namespace": "team-a-old",
                     "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}});
    member
        .expect(Method::GET, &binding_path("team-a-old"), 200, before)
        .await;
    member.bound("team-a-old").await;
    assert_eq!(finished(task).await.unwrap(), None);
}

#[tokio::test]
async fn an_identity_without_a_namespace_role_only_gets_its_namespace_created() {
    let who = Impersonation {
        namespace_role: None,
        ..deployer()
    };
    let (task, mut member) = preparing("team-a-prod", "web", who);
    member.exists_already().await;
    assert_eq!(finished(task).await.unwrap(), None);
}

#[tokio::test]
async fn the_identitys_last_release_takes_its_binding_along() {
    let (task, mut member) = forgetting("team-a-new", "web");
    let marks = ours(&[("web", "team-a-deployer"), ("other", "team-b-deployer")]);
    member.read("team-a-new", marks).await;
    member
        .expect(
            Method::DELETE,
            &binding_path("team-a-new"),
            200,
            status(200, "Success"),
        )
        .await;
    assert_eq!(
        member.patched("team-a-new").await,
        json!({"metadata": {"annotations": {"release.multitenancy.dev/web": null}}})
    );
    finished(task).await.unwrap();
}

#[tokio::test]
async fn a_binding_stays_while_another_release_of_its_identity_is_marked() {
    let (task, mut member) = forgetting("team-a-new", "web");
    let marks = ours(&[("web", "team-a-deployer"), ("api", "team-a-deployer")]);
    member.read("team-a-new", marks).await;
    member.patched("team-a-new").await;
    finished(task).await.unwrap();
}

#[tokio::test]
async fn a_release_in_a_namespace_the_operator_did_not_mark_unbinds_nothing() {
    for annotations in [
        json!({}),
        json!({"release.multitenancy.dev/web": "team-a-deployer"}),
    ] {
        let (task, mut member) = forgetting("team-a-prod", "web");
        member.read("team-a-prod", annotations).await;
        finished(task).await.unwrap();
    }
}

#[test]
fn each_impersonated_user_gets_its_own_role_binding() {
    assert_ne!(role_binding_name("a"), role_binding_name("b"));
    assert!(role_binding_name("a").starts_with("tenancy-hub-deployer-"));
}
