use super::*;

fn edge() -> ClusterName {
    "edge-1".parse().unwrap()
}

fn record(namespace: &str, release: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(format!("sh.helm.release.v1.{release}.v1")),
        namespace: Some(namespace.into()),
        labels: Some(
            [
                ("owner", "helm"),
                ("name", release),
                ("version", "1"),
                ("status", "deployed"),
                (SEAL_LABEL, &"s".repeat(63)),
                (CONTENT_LABEL, &"c".repeat(63)),
                (SPEC_HASH_LABEL, &"h".repeat(63)),
                ("team.example/extra", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        annotations: Some([("huge".to_owned(), "a".repeat(200_000))].into()),
        uid: Some("u".into()),
        ..ObjectMeta::default()
    }
}

/// Every piece of `written` as the hub takes it.
fn held(managed: bool, written: &BTreeMap<String, Vec<u8>>) -> HashMap<String, HeldPiece> {
    written
        .iter()
        .map(|(name, bytes)| (name.clone(), take_piece(&edge(), managed, name, bytes)))
        .collect()
}

fn names(records: &[ObjectMeta]) -> BTreeSet<(String, String)> {
    records
        .iter()
        .map(|r| (r.namespace.clone().unwrap(), r.name.clone().unwrap()))
        .collect()
}

#[test]
fn a_record_keeps_only_what_the_hub_reads() {
    let slimmed = slim(record("team-a", "web"));
    assert_eq!(slimmed.annotations, None);
    assert_eq!(slimmed.uid, None);
    let labels = slimmed.labels.unwrap();
    assert!(!labels.contains_key("team.example/extra"));
    assert_eq!(labels.get("name").map(String::as_str), Some("web"));
    assert!(labels.contains_key(SEAL_LABEL));
    assert!(
        serde_json::to_vec(&slim(record("team-a", "web")))
            .unwrap()
            .len()
            < 1024
    );
}

#[test]
fn a_thousand_releases_travel_in_bounded_pieces_and_assemble_whole() {
    // 1,000 releases in 10 namespaces, and one namespace holding 1,500 of them.
    let mut records: Vec<ObjectMeta> = (0..1_000)
        .map(|i| slim(record(&format!("team-{}", i % 10), &format!("r{i}"))))
        .collect();
    records.extend((0..1_500).map(|i| slim(record("big", &format!("b{i}")))));
    let (manifest, written) = split(
        &edge(),
        true,
        records.clone(),
        MAX_NAMESPACE_RECORDS,
        |_| false,
    );
    assert!(written.len() > 11, "the big namespace is paged");
    for (name, bytes) in &written {
        assert!(bytes.len() <= PIECE_BYTES + 2048, "{name}: {}", bytes.len());
        assert!(is_piece_name(name), "{name}");
    }
    assert!(serde_json::to_vec(&manifest).unwrap().len() < PIECE_BYTES);
    let set = assemble(&manifest, &held(true, &written), None).unwrap();
    assert!(set.unknown.is_empty());
    assert_eq!(names(&set.records), names(&records));
}

#[test]
fn a_set_is_taken_only_once_every_piece_matches_its_manifest() {
    let records = |rev: usize| {
        (0..20)
            .map(|i| slim(record(&format!("team-{}", i % 4), &format!("r{i}-{rev}"))))
            .collect::<Vec<_>>()
    };
    let (old_manifest, old) = split(&edge(), true, records(1), MAX_NAMESPACE_RECORDS, |_| false);
    let (manifest, new) = split(&edge(), true, records(2), MAX_NAMESPACE_RECORDS, |_| false);
    // The new manifest arrives with only some of its pieces: the old ones are still held.
    let mut mixed = held(true, &old);
    let first = new.keys().next().unwrap().clone();
    mixed.insert(
        first.clone(),
        take_piece(&edge(), true, &first, &new[&first]),
    );
    assert_eq!(assemble(&manifest, &mixed, None), None);
    // Nor is the old manifest whole any more: a half-written set is never taken.
    assert_eq!(assemble(&old_manifest, &mixed, None), None);
    let whole = assemble(&manifest, &held(true, &new), None).unwrap();
    assert_eq!(names(&whole.records), names(&records(2)));
}

#[test]
fn a_namespace_over_its_bound_reports_only_its_sealed_records_and_says_so() {
    let before: Vec<ObjectMeta> = vec![
        slim(record("mallory", "old")),
        slim(record("team-a", "web")),
    ];
    let mut now: Vec<ObjectMeta> = (0..=MAX_NAMESPACE_RECORDS)
        .map(|i| slim(record("mallory", &format!("fake{i}"))))
        .collect();
    now.push(slim(record("mallory", "agent")));
    now.push(slim(record("team-a", "web")));
    now.push(slim(record("team-b", "api")));
    let sealed = |r: &ObjectMeta| r.name.as_deref() == Some("sh.helm.release.v1.agent.v1");
    let (manifest, written) = split(&edge(), true, now, MAX_NAMESPACE_RECORDS, sealed);
    let set = assemble(&manifest, &held(true, &written), Some(&before)).unwrap();
    assert_eq!(set.unknown.len(), 1);
    let why = set.unknown.values().next().unwrap();
    assert!(why.contains("namespace mallory of cluster edge-1"), "{why}");
    assert!(why.contains("only those sealed by the operator"), "{why}");
    assert_eq!(
        names(&set.records),
        names(&[
            slim(record("mallory", "agent")),
            slim(record("team-a", "web")),
            slim(record("team-b", "api"))
        ])
    );
}

#[test]
fn a_piece_that_cannot_be_read_names_itself_and_leaves_its_namespace_as_it_was() {
    let before = vec![slim(record("team-a", "web")), slim(record("team-b", "api"))];
    let (manifest, mut written) = split(
        &edge(),
        true,
        vec![slim(record("team-a", "web")), slim(record("team-b", "new"))],
        MAX_NAMESPACE_RECORDS,
        |_| false,
    );
    let broken = piece_name(true, "team-b", 0);
    written.insert(broken.clone(), b"{not json".to_vec());
    let mut manifest = manifest;
    manifest.pieces.insert(broken.clone(), digest(b"{not json"));
    let set = assemble(&manifest, &held(true, &written), Some(&before)).unwrap();
    assert!(set.unknown[&broken].contains(&broken));
    assert_eq!(names(&set.records), names(&before));
}

#[test]
fn a_piece_naming_another_namespace_cluster_or_kind_is_refused() {
    let (_, written) = split(
        &edge(),
        true,
        vec![slim(record("team-a", "web"))],
        MAX_NAMESPACE_RECORDS,
        |_| false,
    );
    let (name, bytes) = written.into_iter().next().unwrap();
    assert!(take_piece(&edge(), true, &name, &bytes).read.is_ok());
    assert!(
        take_piece(&"edge-2".parse().unwrap(), true, &name, &bytes)
            .read
            .is_err()
    );
    assert!(take_piece(&edge(), false, &name, &bytes).read.is_err());
    let elsewhere = piece_name(true, "team-b", 0);
    assert!(take_piece(&edge(), true, &elsewhere, &bytes).read.is_err());
    // A piece whose records stray into another namespace.
    let mut piece: RecordsPiece = serde_json::from_slice(&bytes).unwrap();
    piece.records.push(slim(record("team-b", "api")));
    let stray = serde_json::to_vec(&piece).unwrap();
    let refused = take_piece(&edge(), true, &name, &stray).read.unwrap_err();
    assert!(
        refused.contains("holds a record of namespace team-b"),
        "{refused}"
    );
}

#[test]
fn piece_names_are_told_apart_from_other_reports_by_their_shape() {
    assert!(is_piece_name(&piece_name(false, "team-a", 12)));
    for other in [
        "records-managed",
        "records-m-123-0",
        "records-m-0123456789abcdef-",
        "records-m-0123456789abcdef-x",
        "records-x-0123456789abcdef-0",
        "reply-0123",
    ] {
        assert!(!is_piece_name(other), "{other}");
    }
}
