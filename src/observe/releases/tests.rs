//! Tests of the release-record index: parsing, verifying and watching records.

use super::*;
use crate::observe::records::*;
use crate::observe::revisions::{Held, read};
use crate::plan::{
    MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, SPEC_HASH_LABEL,
};
use kube::runtime::watcher;
use std::collections::BTreeMap;

fn record(ns: &str, labels: &[(&str, &str)]) -> Record {
    let mut r = Record::default();
    r.metadata.namespace = Some(ns.into());
    r.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    r
}

#[test]
fn a_managed_release_record_reads_as_applied_with_its_owner_and_hash() {
    let r = record(
        "team",
        &[
            ("owner", "helm"),
            ("name", "web"),
            ("version", "3"),
            ("status", "deployed"),
            (MANAGED_BY_LABEL, MANAGED_BY),
            (OWNER_NAMESPACE_LABEL, "default"),
            (OWNER_NAME_LABEL, "example"),
            (SPEC_HASH_LABEL, "abc"),
        ],
    );
    let a = applied_from(&"member-1".parse().unwrap(), &r, None).unwrap();
    assert_eq!(a.key.to_string(), "member-1/team/web");
    assert_eq!(a.revision, 3);
    assert_eq!(a.status, "deployed");
    assert_eq!(a.owner.unwrap().to_string(), "default/example");
    assert_eq!(a.spec_hash.as_deref(), Some("abc"));
}

#[test]
fn a_release_records_manifest_is_read_from_base64_gzipped_json() {
    use base64::Engine as _;
    use std::io::Write as _;
    let json = br#"{"name":"web","version":2,"manifest":"---\nkind: ConfigMap\n"}"#;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(json).unwrap();
    let field = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
    assert_eq!(
        decode_manifest(field.as_bytes()).unwrap(),
        "---\nkind: ConfigMap\n"
    );
    let plain = base64::engine::general_purpose::STANDARD.encode(json);
    assert_eq!(
        decode_manifest(plain.as_bytes()).unwrap(),
        "---\nkind: ConfigMap\n"
    );
    assert!(decode_manifest(b"%%").unwrap_err().contains("not base64"));
}

#[test]
fn a_record_that_expands_past_the_bound_is_refused_without_expanding_it() {
    use base64::Engine as _;
    use std::io::Write as _;
    // 256 MiB of zeros: about 250 KiB gzipped, a record any tenant may write.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        gz.write_all(&zeros).unwrap();
    }
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "fits in a Secret: {}", bomb.len());
    let field = base64::engine::general_purpose::STANDARD.encode(bomb);
    let error = decode_manifest(field.as_bytes()).unwrap_err();
    assert!(error.contains("expands past 32 MiB"), "{error}");
}

fn managed(rev: &str, owner: &str, status: &str) -> Record {
    let mut r = record(
        "team",
        &[
            ("owner", "helm"),
            ("name", "web"),
            ("version", rev),
            ("status", status),
            (MANAGED_BY_LABEL, MANAGED_BY),
            (OWNER_NAMESPACE_LABEL, "default"),
            (OWNER_NAME_LABEL, owner),
        ],
    );
    r.metadata.name = Some(format!("sh.helm.release.v1.web.v{rev}"));
    r
}

fn by_hand(rev: &str) -> Record {
    record(
        "team",
        &[
            ("owner", "helm"),
            ("name", "web"),
            ("version", rev),
            ("status", "deployed"),
        ],
    )
}

fn hub() -> ClusterName {
    "hub".parse().unwrap()
}

fn web() -> ReleaseKey {
    "hub/team/web".parse().unwrap()
}

fn owner(name: &str) -> OwnerId {
    OwnerId {
        namespace: "default".into(),
        name: name.into(),
    }
}

fn feed(source: Source, records: &Arc<RwLock<Records>>, synced: &Arc<[AtomicBool; 2]>) -> Feed {
    Feed {
        cluster: hub(),
        source,
        seal: None,
        warned: Default::default(),
        records: records.clone(),
        synced: synced.clone(),
        listing: Vec::new(),
    }
}

#[test]
fn the_newest_revision_is_kept_whichever_record_comes_or_goes_first() {
    let records = Arc::new(RwLock::new(Records::default()));
    let synced = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
    let mut f = feed(Source::Managed, &records, &synced);
    let newest = || {
        records
            .read()
            .unwrap()
            .newest(&web())
            .map(|a| (a.revision, a.status))
    };
    f.apply(Ok(watcher::Event::Apply(managed("2", "a", "deployed"))));
    f.apply(Ok(watcher::Event::Apply(managed(
        "3",
        "a",
        "pending-upgrade",
    ))));
    f.apply(Ok(watcher::Event::Apply(managed("1", "a", "failed"))));
    assert_eq!(newest(), Some((3, "pending-upgrade".into())));
    // The older record leaves the narrowed watch (superseded) before the newer is deployed.
    f.apply(Ok(watcher::Event::Delete(managed("2", "a", "superseded"))));
    f.apply(Ok(watcher::Event::Apply(managed("3", "a", "deployed"))));
    assert_eq!(newest(), Some((3, "deployed".into())));
    // The newest record goes (an upgrade rolled back by hand): the next one is newest again.
    f.apply(Ok(watcher::Event::Delete(managed("3", "a", "deployed"))));
    assert_eq!(newest(), Some((1, "failed".into())));
    f.apply(Ok(watcher::Event::Delete(managed("1", "a", "failed"))));
    assert_eq!(newest(), None);
    assert!(records.read().unwrap().managed.is_empty());
}

#[test]
fn a_change_is_told_only_when_the_newest_record_changes_and_names_its_owner() {
    let records = Arc::new(RwLock::new(Records::default()));
    let synced = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
    let mut f = feed(Source::Managed, &records, &synced);
    let told = f.apply(Ok(watcher::Event::Apply(managed("2", "a", "deployed"))));
    assert_eq!(told, [RecordChange::Release(web(), Some(owner("a")))]);
    assert!(
        f.apply(Ok(watcher::Event::Apply(managed("1", "a", "superseded"))))
            .is_empty()
    );
    let told = f.apply(Ok(watcher::Event::Delete(managed("2", "a", "deployed"))));
    assert_eq!(told, [RecordChange::Release(web(), Some(owner("a")))]);
    let told = f.apply(Ok(watcher::Event::Delete(managed("1", "a", "deployed"))));
    assert_eq!(
        told,
        [RecordChange::Release(web(), Some(owner("a")))],
        "the owner of a release gone is told"
    );
}

#[test]
fn the_owner_index_follows_the_newest_record() {
    let mut held = Records::default();
    let (key, revision, record) = read(&hub(), &managed("1", "a", "deployed"), None).unwrap();
    held.set(Source::Managed, &key, revision, Some(record));
    assert_eq!(held.by_owner.get(&owner("a")).map(|k| k.len()), Some(1));
    // A newer revision by hand: the release is no longer tenancy-hub's.
    held.set(Source::Foreign, &key, 2, Some(Held::Foreign));
    assert!(held.by_owner.is_empty());
    assert_eq!(held.newest(&key).unwrap().owner, None);
    held.set(Source::Foreign, &key, 2, None);
    assert_eq!(held.by_owner.get(&owner("a")).map(|k| k.len()), Some(1));
}

#[test]
fn a_record_written_by_helm_is_foreign_until_sealed_then_its_owners() {
    let mut held = Records::default();
    let (key, revision, record) = read(&hub(), &managed("1", "a", "deployed"), None).unwrap();
    // First seen unsealed (the helm binary wrote it a moment before the operator sealed it).
    held.set(Source::Managed, &key, revision, Some(Held::Foreign));
    assert_eq!(held.newest(&key).unwrap().owner, None);
    // Sealed: the same revision, now the owner's; nothing of the unsealed sighting is left.
    held.set(Source::Managed, &key, revision, Some(record));
    assert_eq!(held.newest(&key).unwrap().owner, Some(owner("a")));
    assert!(held.unsealed.is_empty());
    // A relist of the managed watch forgets unsealed sightings too.
    held.set(Source::Managed, &key, 2, Some(Held::Foreign));
    held.relist(Source::Managed, Vec::new());
    assert!(held.newest(&key).is_none() && held.unsealed.is_empty());
}

#[test]
fn a_relist_replaces_one_watchs_records_and_tells_only_what_changed() {
    let records = Arc::new(RwLock::new(Records::default()));
    let synced = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let mut ours = feed(Source::Managed, &records, &synced);
    let mut theirs = feed(Source::Foreign, &records, &synced);
    ours.apply(Ok(watcher::Event::Init));
    ours.apply(Ok(watcher::Event::InitApply(managed("1", "a", "deployed"))));
    let told = ours.apply(Ok(watcher::Event::InitDone));
    assert_eq!(
        told,
        [RecordChange::Release(web(), Some(owner("a")))],
        "not listed until both watches are"
    );
    theirs.apply(Ok(watcher::Event::Init));
    theirs.apply(Ok(watcher::Event::InitApply(named_db(by_hand("4")))));
    let told = theirs.apply(Ok(watcher::Event::InitDone));
    assert_eq!(
        told,
        [
            RecordChange::Release("hub/team/db".parse().unwrap(), None),
            RecordChange::Listed(hub())
        ]
    );
    // The watch fails: not synced until it has listed again, and the same listing tells
    // nothing but that.
    ours.apply(Err(watcher::Error::NoResourceVersion));
    assert!(!synced[0].load(Ordering::Acquire));
    ours.apply(Ok(watcher::Event::Init));
    ours.apply(Ok(watcher::Event::InitApply(managed("1", "a", "deployed"))));
    assert_eq!(
        ours.apply(Ok(watcher::Event::InitDone)),
        [RecordChange::Listed(hub())]
    );
    // Listed again without the release: it is gone.
    ours.apply(Ok(watcher::Event::Init));
    let told = ours.apply(Ok(watcher::Event::InitDone));
    assert_eq!(
        told,
        [
            RecordChange::Release(web(), Some(owner("a"))),
            RecordChange::Listed(hub())
        ]
    );
    assert!(records.read().unwrap().by_owner.is_empty());
}

/// The record of release `db` instead.
fn named_db(mut record: Record) -> Record {
    let labels = record.metadata.labels.get_or_insert_default();
    labels.insert("name".into(), "db".into());
    record
}

#[test]
fn a_release_installed_by_hand_is_held_without_owner_so_it_is_never_taken_over() {
    let index = ReleaseIndex::default();
    index.seed(hub(), vec![by_hand("2")]);
    let a = index.get(&web()).unwrap();
    assert_eq!((a.owner, a.revision), (None, 2));
    assert!(index.managed(None).is_empty());
    let applied = index.applied_for(&owner("a"), [&web()], &|_| false);
    assert_eq!(applied.get(&web()).map(|a| a.owner.clone()), Some(None));
}

#[test]
fn planning_reads_the_keys_it_names_and_the_releases_its_owner_holds() {
    let index = ReleaseIndex::default();
    let mut elsewhere = managed("1", "a", "deployed");
    elsewhere.metadata.namespace = Some("old".into());
    let other = named_db(by_hand("1"));
    index.seed(hub(), vec![managed("1", "a", "deployed"), elsewhere, other]);
    let applied = index.applied_for(&owner("a"), std::iter::empty(), &|_| false);
    let mut keys: Vec<String> = applied.keys().map(ToString::to_string).collect();
    keys.sort();
    assert_eq!(keys, ["hub/old/web", "hub/team/web"]);
    assert!(
        index
            .applied_for(&owner("b"), std::iter::empty(), &|_| false)
            .is_empty()
    );
    assert_eq!(index.synced(), BTreeSet::from([hub()]));
}

#[test]
fn a_release_installed_by_hand_has_no_owner() {
    let r = record(
        "team",
        &[
            ("owner", "helm"),
            ("name", "web"),
            ("version", "1"),
            ("status", "deployed"),
        ],
    );
    let a = applied_from(&"hub".parse().unwrap(), &r, None).unwrap();
    assert_eq!(a.owner, None);
}

#[test]
fn a_secret_without_release_labels_is_ignored() {
    assert!(
        applied_from(
            &"hub".parse().unwrap(),
            &record("team", &[("owner", "helm")]),
            None
        )
        .is_none()
    );
}

#[test]
fn a_record_claiming_an_owner_counts_as_managed_only_when_its_seal_verifies() {
    use crate::helm::seal::{CONTENT_LABEL, SEAL_LABEL, SealKey, Sealed};
    let key = SealKey::from_bytes(&[9u8; 32]).unwrap();
    let content = "0123456789abcdef0123456789abcdef";
    let seal = key.seal(&Sealed {
        cluster: "member-1",
        namespace: "team",
        release: "web",
        revision: 2,
        owner_namespace: "team-a",
        owner_name: "apps",
        spec_hash: "abc",
        content,
    });
    let labels = |owner: &'static str, seal: &str| {
        record(
            "team",
            &[
                ("owner", "helm"),
                ("name", "web"),
                ("version", "2"),
                ("status", "deployed"),
                (MANAGED_BY_LABEL, MANAGED_BY),
                (OWNER_NAMESPACE_LABEL, "team-a"),
                (OWNER_NAME_LABEL, owner),
                (SPEC_HASH_LABEL, "abc"),
                (CONTENT_LABEL, content),
                (SEAL_LABEL, seal),
            ],
        )
    };
    let cluster: ClusterName = "member-1".parse().unwrap();
    let genuine = applied_from(&cluster, &labels("apps", &seal), Some(&key)).unwrap();
    assert_eq!(genuine.owner.unwrap().name, "apps");
    // The genuine seal copied onto a record naming another owner, or on another cluster.
    let forged = applied_from(&cluster, &labels("victim", &seal), Some(&key)).unwrap();
    assert_eq!(forged.owner, None, "a forged owner is foreign");
    let moved = applied_from(
        &"member-2".parse().unwrap(),
        &labels("apps", &seal),
        Some(&key),
    );
    assert_eq!(moved.unwrap().owner, None);
    let (_, _, held) = read_as(
        Source::Managed,
        &cluster,
        &labels("victim", "00"),
        Some(&key),
    )
    .unwrap();
    assert_eq!(held, Held::Foreign, "the managed watch holds it as foreign");
}

#[test]
fn a_pull_members_seal_vouches_for_an_owner_only_where_it_delivers() {
    use crate::helm::seal::{SealKey, Sealed};
    let master = SealKey::from_bytes(&[9u8; 32]).unwrap();
    let edge: ClusterName = "edge-1".parse().unwrap();
    let sealed = |key: &SealKey, release: &str| {
        let mut r = Record::default();
        r.metadata.namespace = Some("team".into());
        r.metadata.labels = Some(key.record_labels(&Sealed {
            cluster: "edge-1",
            namespace: "team",
            release,
            revision: 1,
            owner_namespace: "default",
            owner_name: "a",
            spec_hash: "h",
            content: "00112233445566778899aabbccddeeff",
        }));
        r
    };
    let index = ReleaseIndex::new(TaskTracker::new(), Some(master.clone()));
    index.seed(
        edge.clone(),
        vec![
            sealed(&master, "by-operator"),
            sealed(&master.for_cluster(&edge), "by-agent"),
        ],
    );
    let owned = |vouch: Vouch<'_>| {
        let mut keys: Vec<String> = index
            .owned_by(&owner("a"), vouch)
            .iter()
            .map(|a| a.key.to_string())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        owned(&|_| true),
        ["edge-1/team/by-agent", "edge-1/team/by-operator"]
    );
    // Where the owner does not deliver, only the operator's own seal makes a record its own.
    assert_eq!(owned(&|_| false), ["edge-1/team/by-operator"]);
    let asked: std::cell::RefCell<Vec<String>> = Default::default();
    owned(&|k| {
        asked.borrow_mut().push(k.to_string());
        false
    });
    assert_eq!(
        *asked.borrow(),
        ["edge-1/team/by-agent"],
        "asked for agent-sealed records only"
    );
}

/// Receives the next change the index tells, with a deadline.
async fn told(changes: &mut tokio::sync::mpsc::Receiver<RecordChange>) -> RecordChange {
    tokio::time::timeout(std::time::Duration::from_secs(10), changes.recv())
        .await
        .expect("told in time")
        .expect("the index holds its sender")
}

/// Lists `records` on `fake`'s watch of `selector`, in full.
fn list(fake: &crate::member::fake::FakeLink, selector: &str, records: Vec<Record>) {
    fake.push_record(selector, watcher::Event::Init);
    for record in records {
        fake.push_record(selector, watcher::Event::InitApply(record));
    }
    fake.push_record(selector, watcher::Event::InitDone);
}

#[tokio::test]
async fn the_records_a_member_link_watches_become_its_applied_releases() {
    use crate::member::{MemberLink as _, fake::Call, fake::FakeLink};
    let fake = FakeLink::new("hub");
    let index = ReleaseIndex::new(TaskTracker::new(), None);
    let (changes_tx, mut changes) = tokio::sync::mpsc::channel(16);
    let stop = CancellationToken::new();
    index.watch(hub(), |s| fake.release_records(s), changes_tx, &stop);
    assert_eq!(
        fake.calls(),
        [
            Call::Records(MANAGED_SELECTOR.into()),
            Call::Records(FOREIGN_SELECTOR.into())
        ]
    );
    list(&fake, MANAGED_SELECTOR, vec![managed("2", "a", "deployed")]);
    assert_eq!(
        told(&mut changes).await,
        RecordChange::Release(web(), Some(owner("a")))
    );
    assert!(
        !index.synced().contains(&hub()),
        "the foreign watch has not listed"
    );
    list(&fake, FOREIGN_SELECTOR, vec![named_db(by_hand("4"))]);
    assert_eq!(
        told(&mut changes).await,
        RecordChange::Release("hub/team/db".parse().unwrap(), None)
    );
    assert_eq!(told(&mut changes).await, RecordChange::Listed(hub()));
    assert!(index.synced().contains(&hub()));
    let applied = index.get(&web()).expect("applied");
    assert_eq!(
        (applied.revision, applied.owner, applied.status.as_str()),
        (2, Some(owner("a")), "deployed")
    );
    assert_eq!(
        index.get(&"hub/team/db".parse().unwrap()).unwrap().owner,
        None
    );
    stop.cancel();
}

#[tokio::test]
async fn a_newer_record_from_a_member_link_raises_the_revision_and_a_deleted_one_goes() {
    use crate::member::{MemberLink as _, fake::FakeLink};
    let fake = FakeLink::new("hub");
    let index = ReleaseIndex::new(TaskTracker::new(), None);
    let (changes_tx, mut changes) = tokio::sync::mpsc::channel(16);
    let stop = CancellationToken::new();
    index.watch(hub(), |s| fake.release_records(s), changes_tx, &stop);
    list(&fake, FOREIGN_SELECTOR, vec![]);
    list(&fake, MANAGED_SELECTOR, vec![managed("1", "a", "deployed")]);
    while told(&mut changes).await != RecordChange::Listed(hub()) {}
    assert_eq!(index.get(&web()).unwrap().revision, 1);

    fake.push_record(
        MANAGED_SELECTOR,
        watcher::Event::Apply(managed("2", "a", "pending-upgrade")),
    );
    told(&mut changes).await;
    let applied = index.get(&web()).unwrap();
    assert_eq!((applied.revision, applied.is_pending()), (2, true));
    assert_eq!(index.owners_in(&hub()), [owner("a")]);

    for rev in ["2", "1"] {
        fake.push_record(
            MANAGED_SELECTOR,
            watcher::Event::Delete(managed(rev, "a", "deployed")),
        );
        told(&mut changes).await;
    }
    assert_eq!(index.get(&web()), None);
    assert!(index.owners_in(&hub()).is_empty());
    stop.cancel();
}
