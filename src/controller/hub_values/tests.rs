use std::collections::BTreeMap;

use super::*;

fn values() -> HubValues {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    HubValues::new(kube::Client::try_from(config).unwrap())
}

fn source(name: &str) -> ValuesSource {
    ValuesSource {
        kind: ValuesKind::Secret,
        namespace: "team-a".into(),
        name: name.into(),
    }
}

fn reader(name: &str) -> ObjectRef<Controller> {
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
    v.state().read.insert(
        s.clone(),
        Read {
            lookup: ValuesLookup::Missing,
            version: None,
            bytes: 0,
        },
    );
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
