use std::{collections::BTreeMap, sync::Arc};

use super::*;

fn values() -> HubValues {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    HubValues::new(kube::Client::try_from(config).unwrap(), Default::default())
}

fn source(name: &str) -> ValuesSource {
    ValuesSource {
        kind: ValuesKind::Secret,
        namespace: "team-a".into(),
        name: name.into(),
    }
}

fn reader(name: &str) -> ObjectRef<TenancyController> {
    ObjectRef::new(name).within("team-a")
}

fn hold(v: &HubValues, s: &ValuesSource, version: &str, content: &str) {
    let mut state = v.state();
    state.read.insert(
        s.clone(),
        Read {
            lookup: ValuesLookup::Found {
                data: BTreeMap::from([("values.yaml".into(), content.into())]),
                labels: BTreeMap::new(),
            },
            version: Some(version.into()),
            bytes: content.len(),
            withheld: None,
        },
    );
    *state.bytes.entry(s.namespace.clone()).or_default() += content.len();
}

#[tokio::test]
async fn a_change_of_version_wakes_exactly_the_readers_of_that_object() {
    let v = values();
    let (creds, other) = (source("creds"), source("other"));
    hold(&v, &creds, "1", "a: 1");
    hold(&v, &other, "1", "b: 2");
    v.read_by(&reader("dns"), BTreeSet::from([creds.clone()]));
    v.read_by(
        &reader("web"),
        BTreeSet::from([creds.clone(), other.clone()]),
    );
    v.read_by(&reader("api"), BTreeSet::from([other.clone()]));
    // The version held: nothing to do (the watch's first list, or an event seen before).
    assert!(v.changed(&creds, Some("1".into())).is_empty());
    let woken = v.changed(&creds, Some("2".into()));
    assert_eq!(woken, vec![reader("dns"), reader("web")]);
    // Dropped until read again: planning asks for it once more.
    assert!(v.lookup(&creds).is_none());
    assert!(v.lookup(&other).is_some());
}

#[tokio::test]
async fn an_object_missing_when_read_wakes_its_readers_when_it_appears() {
    let v = values();
    let s = source("later");
    v.state().read.insert(s.clone(), Read::missing(None, None));
    v.read_by(&reader("dns"), BTreeSet::from([s.clone()]));
    assert!(
        v.changed(&s, None).is_empty(),
        "a deletion of what is missing"
    );
    assert_eq!(v.changed(&s, Some("7".into())), vec![reader("dns")]);
}

#[tokio::test]
async fn objects_no_one_reads_any_more_are_let_go_with_their_bytes() {
    let v = values();
    let s = source("creds");
    hold(&v, &s, "1", "token: abcdef");
    v.read_by(&reader("dns"), BTreeSet::from([s.clone()]));
    v.read_by(&reader("web"), BTreeSet::from([s.clone()]));
    v.forget(&reader("dns"));
    assert_eq!(v.held().0, 1, "web still reads it");
    v.read_by(&reader("web"), BTreeSet::new());
    assert_eq!(v.held(), (0, 0));
    assert!(v.changed(&s, Some("2".into())).is_empty());
}

type Handle =
    tower_test::mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;

/// Values read through a scripted hub.
fn scripted() -> (Arc<HubValues>, Handle) {
    let (service, handle) = tower_test::mock::pair();
    let client = kube::Client::new(service, "default");
    (Arc::new(HubValues::new(client, Arc::default())), handle)
}

/// Admission for hub namespace `team-a` with these `valuesFrom` rules.
fn allowing(rules: Vec<crate::api::policy::ValuesRule>) -> Arc<Admission> {
    Arc::new(Admission {
        policies: vec![crate::policy::NamedPolicy {
            name: "team-a".into(),
            spec: crate::api::policy::TenancyPolicySpec {
                hub_namespaces: vec!["team-a".into()],
                values_from: rules,
                ..Default::default()
            },
        }],
        ..Admission::permissive()
    })
}

fn by_name(name: &str) -> crate::api::policy::ValuesRule {
    crate::api::policy::ValuesRule {
        names: vec![name.into()],
        ..Default::default()
    }
}

/// Loads `sources` in a task of its own.
fn load(
    v: &Arc<HubValues>,
    sources: &[&ValuesSource],
    admission: &Arc<Admission>,
) -> tokio::task::JoinHandle<()> {
    let (v, admission) = (v.clone(), admission.clone());
    let sources: Vec<ValuesSource> = sources.iter().map(|s| (*s).clone()).collect();
    tokio::spawn(async move { v.load(&sources, &admission).await })
}

/// The hub's next request: whether it asks for metadata only, the object named, and how to answer.
async fn next(
    hub: &mut Handle,
) -> (
    bool,
    String,
    tower_test::mock::SendResponse<http::Response<kube::client::Body>>,
) {
    let (request, send) =
        tokio::time::timeout(std::time::Duration::from_secs(5), hub.next_request())
            .await
            .expect("a request to the hub")
            .unwrap();
    let metadata = request
        .headers()
        .get(http::header::ACCEPT)
        .is_some_and(|a| a.to_str().unwrap().contains("PartialObjectMetadataList"));
    let query = request.uri().query().unwrap_or_default().to_owned();
    let name = query
        .split("metadata.name%3D")
        .nth(1)
        .unwrap_or_default()
        .split('&')
        .next()
        .unwrap()
        .to_owned();
    (metadata, name, send)
}

/// Answers a list of one Secret `name` labelled `labels` (with its content unless `metadata`).
fn answer(
    send: tower_test::mock::SendResponse<http::Response<kube::client::Body>>,
    metadata: bool,
    name: &str,
    labels: serde_json::Value,
) {
    let meta = serde_json::json!({"name": name, "namespace": "team-a", "resourceVersion": "5", "labels": labels});
    let body = if metadata {
        serde_json::json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": {}, "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}]})
    } else {
        // "a: 1", base64
        serde_json::json!({"kind": "SecretList", "apiVersion": "v1", "metadata": {},
            "items": [{"metadata": meta, "data": {"values.yaml": "YTogMQ=="}}]})
    };
    send.send_response(
        http::Response::builder()
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

/// Holds that the hub is asked nothing more.
async fn nothing_more(hub: &mut Handle) {
    let more =
        tokio::time::timeout(std::time::Duration::from_millis(300), hub.next_request()).await;
    assert!(more.is_err(), "the hub was asked again");
}

#[tokio::test]
async fn an_object_only_a_label_rule_could_allow_has_its_content_read_only_when_its_labels_match() {
    let (v, mut hub) = scripted();
    let labelled = allowing(vec![crate::api::policy::ValuesRule {
        match_labels: BTreeMap::from([("values".into(), "true".into())]),
        ..Default::default()
    }]);
    let creds = source("creds");
    let loading = load(&v, &[&creds], &labelled);
    let (metadata, name, send) = next(&mut hub).await;
    assert_eq!(
        (metadata, name.as_str()),
        (true, "creds"),
        "its labels first"
    );
    answer(send, true, "creds", serde_json::json!({"team": "a"}));
    loading.await.unwrap();
    nothing_more(&mut hub).await;
    assert!(
        matches!(v.lookup(&creds), Some(ValuesLookup::Missing)),
        "told as an absent one"
    );
    assert!(!v.any_pending([&creds], &labelled));

    // A rule naming it now: its content is read.
    let named = allowing(vec![by_name("creds")]);
    assert!(v.any_pending([&creds], &named));
    let loading = load(&v, &[&creds], &named);
    let (metadata, _, send) = next(&mut hub).await;
    assert!(!metadata, "its content, at once");
    answer(send, false, "creds", serde_json::json!({}));
    loading.await.unwrap();
    let Some(ValuesLookup::Found { data, .. }) = v.lookup(&creds) else {
        panic!("{:?}", v.lookup(&creds));
    };
    assert_eq!(data["values.yaml"], "a: 1");
}

#[tokio::test]
async fn an_object_no_rule_could_allow_is_never_asked_for() {
    let (v, mut hub) = scripted();
    let other = allowing(vec![by_name("other")]);
    load(&v, &[&source("creds")], &other).await.unwrap();
    nothing_more(&mut hub).await;
    assert!(matches!(
        v.lookup(&source("creds")),
        Some(ValuesLookup::Missing)
    ));
}

#[tokio::test]
async fn loads_at_once_read_one_object_once_and_others_meanwhile() {
    let (v, mut hub) = scripted();
    let (slow, other) = (source("slow"), source("other"));
    let admission = allowing(vec![by_name("slow"), by_name("other")]);
    let loads: Vec<_> = (0..10).map(|_| load(&v, &[&slow], &admission)).collect();
    let (_, first, held) = next(&mut hub).await;
    assert_eq!(first, "slow");
    // While the read of `slow` is unanswered, another object's read goes ahead.
    let other_load = load(&v, &[&other, &slow], &admission);
    let (_, second, send) = next(&mut hub).await;
    assert_eq!(second, "other");
    answer(send, false, "other", serde_json::json!({}));
    answer(held, false, "slow", serde_json::json!({}));
    for l in loads {
        l.await.unwrap();
    }
    other_load.await.unwrap();
    nothing_more(&mut hub).await;
    assert!(v.reading.is_empty(), "no gate is left held");
    assert_eq!(v.held().0, 2);
}
