//! Tests of the pod and workload watches.

use super::*;

fn pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).unwrap()
}

fn named(ns: &str, name: &str) -> Pod {
    pod(&format!("metadata: {{name: {name}, namespace: {ns}}}\n"))
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn scopes(tagged: &[Tagged]) -> Vec<String> {
    tagged.iter().map(|(s, _)| s.to_string()).collect()
}

#[test]
fn a_relist_tells_every_wanted_namespace_what_it_holds_and_nothing_of_the_others() {
    let mut f = Fanout::new("member-1".parse().unwrap());
    let wanted = set(&["team-a", "team-b"]);
    assert!(f.on::<Pod>(Ok(watcher::Event::Init), &wanted).is_empty());
    for (ns, name) in [("team-a", "p1"), ("kube-system", "dns"), ("team-a", "p2")] {
        assert!(
            f.on(Ok(watcher::Event::InitApply(named(ns, name))), &wanted)
                .is_empty()
        );
    }
    let done = f.on::<Pod>(Ok(watcher::Event::InitDone), &wanted);
    assert_eq!(scopes(&done), ["member-1/team-a", "member-1/team-b"]);
    match &done[0].1 {
        Change::PodsListed(pods) => assert_eq!(pods.len(), 2),
        other => panic!("not a relist: {other:?}"),
    }
    assert_eq!(done[1].1, Change::PodsListed(Vec::new()));
    let later = f.on(Ok(watcher::Event::Apply(named("team-b", "p3"))), &wanted);
    assert_eq!(scopes(&later), ["member-1/team-b"]);
    let other = f.on(
        Ok(watcher::Event::Apply(named("kube-system", "x"))),
        &wanted,
    );
    assert!(other.is_empty());
}

#[test]
fn a_namespace_wanted_after_a_list_began_waits_for_the_next_list() {
    let mut f = Fanout::new("member-1".parse().unwrap());
    assert!(
        f.on::<Pod>(Ok(watcher::Event::Init), &set(&["a"]))
            .is_empty()
    );
    let wider = set(&["a", "b"]);
    f.on(Ok(watcher::Event::InitApply(named("b", "p"))), &wider);
    let done = f.on::<Pod>(Ok(watcher::Event::InitDone), &wider);
    assert_eq!(
        scopes(&done),
        ["member-1/a"],
        "b would be told it holds nothing"
    );
    assert!(
        f.on(Ok(watcher::Event::Apply(named("b", "q"))), &wider)
            .is_empty(),
        "a lone change would mark b live with half a picture"
    );
    f.on::<Pod>(Ok(watcher::Event::Init), &wider);
    f.on(Ok(watcher::Event::InitApply(named("b", "p"))), &wider);
    let again = f.on::<Pod>(Ok(watcher::Event::InitDone), &wider);
    assert_eq!(scopes(&again), ["member-1/a", "member-1/b"]);
}

#[test]
fn an_error_marks_every_listed_namespace_lost_until_the_next_list() {
    let mut f = Fanout::new("member-1".parse().unwrap());
    let wanted = set(&["a", "b"]);
    f.on::<Pod>(Ok(watcher::Event::Init), &wanted);
    f.on::<Pod>(Ok(watcher::Event::InitDone), &wanted);
    let lost = f.on::<Pod>(Err(watcher::Error::NoResourceVersion), &set(&["a"]));
    assert_eq!(scopes(&lost), ["member-1/a"]);
    assert!(matches!(lost[0].1, Change::Lost(_)));
    assert!(
        f.on(Ok(watcher::Event::Apply(named("a", "p"))), &wanted)
            .is_empty()
    );
}
