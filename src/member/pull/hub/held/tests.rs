use super::*;

fn edge() -> ClusterName {
    "edge-1".parse().unwrap()
}

fn reply(id: &str) -> Vec<u8> {
    serde_json::to_vec(&Replied {
        cluster: edge(),
        id: id.into(),
        reply: Reply::Drift(Ok(Default::default())),
    })
    .unwrap()
}

fn observed(namespace: &str) -> Vec<u8> {
    serde_json::to_vec(&Observed {
        cluster: edge(),
        namespace: namespace.into(),
        pods: Vec::new(),
        workloads: Vec::new(),
        problem: None,
    })
    .unwrap()
}

#[test]
fn replies_to_no_ask_waited_on_are_pruned_undecoded_and_hold_nothing() {
    let mut r = Reports::default();
    for i in 0..10_000 {
        let name = format!("reply-{i:032x}");
        assert_eq!(
            r.take(&edge(), "reply", &name, Some(b"not even json"), false),
            Taken::Prune
        );
    }
    assert!(r.replies.is_empty());
    assert_eq!(r.bytes(), 0);
    // The one waited on is held until its ask is done.
    let id = "a".repeat(32);
    let name = format!("reply-{id}");
    assert_eq!(
        r.take(&edge(), "reply", &name, Some(&reply(&id)), true),
        Taken::Held
    );
    assert!(r.replies.contains_key(&id));
    assert!(r.bytes() > 0);
    r.replied(&id);
    assert!(r.replies.is_empty());
    assert_eq!(r.bytes(), 0);
}

#[test]
fn a_reply_or_answer_under_another_name_or_cluster_is_not_held() {
    let mut r = Reports::default();
    let id = "b".repeat(32);
    assert_eq!(
        r.take(&edge(), "reply", "reply-other", Some(&reply(&id)), true),
        Taken::Dropped
    );
    let other: ClusterName = "edge-2".parse().unwrap();
    let name = format!("reply-{id}");
    assert_eq!(
        r.take(&other, "reply", &name, Some(&reply(&id)), true),
        Taken::Dropped
    );
    assert_eq!(
        r.take(&edge(), "answer", "answer-0123", Some(b"{}"), false),
        Taken::Dropped
    );
    assert!(r.replies.is_empty() && r.answers.is_empty());
}

#[test]
fn observations_are_held_for_a_bounded_count_of_namespaces_and_the_rest_said() {
    let mut r = Reports::default();
    for i in 0..MAX_OBSERVED + 50 {
        let namespace = format!("ns-{i}");
        r.take(
            &edge(),
            "observed",
            &format!("observed-{namespace}"),
            Some(&observed(&namespace)),
            false,
        );
    }
    assert_eq!(r.observed.len(), MAX_OBSERVED);
    let problems = r.problems();
    assert!(!problems.is_empty() && problems.len() <= MAX_REFUSALS);
    assert!(
        problems[0].contains(&format!(
            "observations of more than {MAX_OBSERVED} namespaces"
        )),
        "{problems:?}"
    );
    // An observation already held is still updated, and one deleted makes room.
    let held = "ns-0";
    assert_eq!(
        r.take(
            &edge(),
            "observed",
            "observed-ns-0",
            Some(&observed(held)),
            false
        ),
        Taken::Held
    );
    r.take(&edge(), "observed", "observed-ns-1", None, false);
    assert_eq!(r.observed.len(), MAX_OBSERVED - 1);
}

#[test]
fn the_bytes_held_for_a_member_stay_within_its_budget() {
    let mut r = Reports::default();
    let big = vec![b'x'; MAX_MESSAGE];
    for i in 0..200 {
        let name = pieces::piece_name(true, &format!("ns-{i}"), 0);
        r.take(&edge(), PIECE_KIND, &name, Some(&big), false);
    }
    assert!(r.bytes() <= MAX_MEMBER_BYTES, "{}", r.bytes());
    assert!(r.bytes() > MAX_MEMBER_BYTES - MAX_MESSAGE);
    assert!(
        r.problems()
            .iter()
            .any(|p| p.contains(&format!("would pass {} MiB", MAX_MEMBER_BYTES >> 20)))
    );
    // Past a message's size, nothing is held at all.
    let name = pieces::piece_name(true, "huge", 0);
    let mut fresh = Reports::default();
    let huge = vec![b'x'; MAX_MESSAGE + 1];
    assert_eq!(
        fresh.take(&edge(), PIECE_KIND, &name, Some(&huge), false),
        Taken::Dropped
    );
    assert_eq!(fresh.bytes(), 0);
}

#[test]
fn records_are_taken_once_the_manifest_and_its_pieces_agree_and_a_bad_piece_is_told() {
    let mut r = Reports::default();
    let record = |ns: &str, release: &str| ObjectMeta {
        name: Some(format!("sh.helm.release.v1.{release}.v1")),
        namespace: Some(ns.into()),
        ..ObjectMeta::default()
    };
    let (mut manifest, written) = pieces::split(
        &edge(),
        true,
        vec![record("team-a", "web"), record("team-b", "api")],
        pieces::MAX_NAMESPACE_RECORDS,
        |_| true,
    );
    let bad = pieces::piece_name(true, "mallory", 0);
    manifest.pieces.insert(bad.clone(), pieces::digest(b"[]"));
    let manifest = serde_json::to_vec(&manifest).unwrap();
    assert_eq!(
        r.take(
            &edge(),
            "records",
            "records-managed",
            Some(&manifest),
            false
        ),
        Taken::Held
    );
    for (name, bytes) in &written {
        r.take(&edge(), PIECE_KIND, name, Some(bytes), false);
    }
    assert!(r.records[0].is_none(), "a piece is still missing");
    r.take(&edge(), PIECE_KIND, &bad, Some(b"[]"), false);
    assert_eq!(r.records[0].as_ref().unwrap().len(), 2);
    let problems = r.problems();
    assert_eq!(problems.len(), 1);
    assert!(problems[0].contains(&bad), "{problems:?}");
}
