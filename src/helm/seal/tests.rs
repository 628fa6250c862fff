//! Unit tests of release-record seals: the vectors shared with the Go executor, and records moved, relabelled or sealed with another key refused.

use super::*;

/// The vectors the Go executor's tests check too (`src/helm/helm-sdk/seal_test.go`).
const VECTORS: &str = include_str!("../helm-sdk/testdata/seal-vectors.json");

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Vector {
    key: String,
    cluster: String,
    namespace: String,
    release: String,
    revision: i64,
    owner_namespace: String,
    owner_name: String,
    spec_hash: String,
    manifest: String,
    hooks: Vec<Hook>,
    content: String,
    seal: String,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> Vec<Vector> {
    serde_json::from_str(VECTORS).unwrap()
}

fn labels(v: &Vector) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("name".to_owned(), v.release.clone()),
        ("version".to_owned(), v.revision.to_string()),
        (OWNER_NAMESPACE_LABEL.to_owned(), v.owner_namespace.clone()),
        (OWNER_NAME_LABEL.to_owned(), v.owner_name.clone()),
        (SPEC_HASH_LABEL.to_owned(), v.spec_hash.clone()),
        (CONTENT_LABEL.to_owned(), v.content.clone()),
        (SEAL_LABEL.to_owned(), v.seal.clone()),
    ])
}

#[test]
fn the_shared_vectors_give_the_same_digests_and_seals() {
    for v in vectors() {
        let key = SealKey::from_bytes(&unhex(&v.key)).unwrap();
        assert_eq!(
            content_digest(&v.manifest, &v.hooks),
            v.content,
            "{}",
            v.release
        );
        let sealed = Sealed {
            cluster: &v.cluster,
            namespace: &v.namespace,
            release: &v.release,
            revision: v.revision,
            owner_namespace: &v.owner_namespace,
            owner_name: &v.owner_name,
            spec_hash: &v.spec_hash,
            content: &v.content,
        };
        assert_eq!(key.seal(&sealed), v.seal, "{}", v.release);
        let cluster: ClusterName = v.cluster.parse().unwrap();
        assert!(key.verifies(&cluster, &v.namespace, &labels(&v)));
    }
}

#[test]
fn a_record_moved_relabelled_or_sealed_with_another_key_does_not_verify() {
    let v = &vectors()[0];
    let key = SealKey::from_bytes(&unhex(&v.key)).unwrap();
    let cluster: ClusterName = v.cluster.parse().unwrap();
    assert!(key.verifies(&cluster, &v.namespace, &labels(v)));
    // Another namespace or cluster: a genuine record copied elsewhere.
    assert!(!key.verifies(&cluster, "elsewhere", &labels(v)));
    assert!(!key.verifies(&"member-9".parse().unwrap(), &v.namespace, &labels(v)));
    // Each bound label changed in turn: another owner, a newer revision, other content, ...
    for (label, value) in [
        (OWNER_NAME_LABEL, "victim"),
        (OWNER_NAMESPACE_LABEL, "team-b"),
        ("version", "99"),
        ("name", "other"),
        (SPEC_HASH_LABEL, "0000000000000000"),
        (CONTENT_LABEL, "00000000000000000000000000000000"),
        (SEAL_LABEL, "00000000000000000000000000000000"),
    ] {
        let mut forged = labels(v);
        forged.insert(label.to_owned(), value.to_owned());
        assert!(!key.verifies(&cluster, &v.namespace, &forged), "{label}");
    }
    let mut unsealed = labels(v);
    unsealed.remove(SEAL_LABEL);
    assert!(!key.verifies(&cluster, &v.namespace, &unsealed));
    let other = SealKey::generate().unwrap();
    assert!(!other.verifies(&cluster, &v.namespace, &labels(v)));
}

#[test]
fn a_hook_changed_in_any_field_changes_the_content_digest() {
    let v = &vectors()[1];
    assert!(!v.hooks.is_empty(), "the second vector has hooks");
    let base = content_digest(&v.manifest, &v.hooks);
    let mut variants = Vec::new();
    let mut h = v.hooks.clone();
    h[0].events.push("pre-delete".into());
    variants.push(h);
    let mut h = v.hooks.clone();
    h[0].manifest.push_str("\n# more");
    variants.push(h);
    let mut h = v.hooks.clone();
    h[0].delete_policies.clear();
    variants.push(h);
    let mut h = v.hooks.clone();
    h.push(Hook::default());
    variants.push(h);
    for hooks in variants {
        assert_ne!(content_digest(&v.manifest, &hooks), base);
    }
    // Fields cannot be shifted from one to the next.
    let mut h = v.hooks.clone();
    h[0].name = format!("{}{}", h[0].kind, h[0].name);
    h[0].kind = String::new();
    assert_ne!(content_digest(&v.manifest, &h), base);
}

#[test]
fn the_key_never_shows_in_debug_output() {
    let key = SealKey::from_bytes(&[7u8; 32]).unwrap();
    assert_eq!(format!("{key:?}"), "SealKey(***)");
    assert!(SealKey::from_bytes(&[1u8; 16]).is_none(), "too short");
}

#[test]
fn a_failed_helm_process_is_taken_to_have_written_at_most_the_two_revisions_after_the_newest() {
    let record = |version: &str| Secret {
        metadata: ObjectMeta {
            labels: Some([("version".to_owned(), version.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    };
    let found: Vec<Secret> = ["1", "2", "10", "3", "x"].into_iter().map(record).collect();
    // Revision 10 sorts after 3 as a number; a label that is no number is no revision.
    assert_eq!(newest(&found, 2), vec![10, 3]);
    assert_eq!(newest(&found, 10), Vec::<i64>::new());
    assert_eq!(newest(&found[..2], 0), vec![2, 1]);
}
