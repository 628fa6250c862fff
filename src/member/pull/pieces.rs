//! A pull member's release records reported in pieces (pure): each record cut to what the hub reads, the records of one namespace in pages bounded by size, a manifest naming every piece by its digest, and the hub's assembly of a complete set from them.
//!
//! One report of every record was cut to nothing once it outgrew a message: a tenant writing
//! large release-shaped Secrets in its own namespace, or 1,300 ordinary records, froze what the
//! hub knew of the whole member. Now each record carries only its name, namespace, creation time
//! and the labels the planner and the seal read (a label value is at most 63 characters, so a
//! record is at most about 1.5 KiB), a namespace's records travel in pages of at most
//! [`PIECE_BYTES`], and the manifest, written beside them, names the pieces of the current set
//! with the SHA-256 of each. The hub takes a set only once it holds every piece the manifest
//! names with that digest, so it never plans on a half-written set; a namespace whose piece it
//! cannot take (or whose records the agent could not report) keeps the records it last had and
//! is named on the member's status, and no other namespace waits on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{
    api::key::ClusterName,
    helm::seal::{CONTENT_LABEL, SEAL_LABEL},
    plan::{MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, SPEC_HASH_LABEL},
};

/// The largest piece, in bytes: a page of at least 170 records.
pub(crate) const PIECE_BYTES: usize = 256 * 1024;
/// The most records one namespace reports by default; past it, the namespace is reported as
/// unreadable (only someone who writes Secrets there gets there: Helm keeps one current record
/// a release).
pub(crate) const MAX_NAMESPACE_RECORDS: usize = 5_000;
/// The most pieces one manifest names (a manifest of that many stays well under a message).
pub(crate) const MAX_PIECES: usize = 4_096;
/// The labels of a record the hub reads: Helm's, the operator's and the seal's.
const KEPT_LABELS: [&str; 10] = [
    "owner",
    "name",
    "version",
    "status",
    MANAGED_BY_LABEL,
    OWNER_NAMESPACE_LABEL,
    OWNER_NAME_LABEL,
    SPEC_HASH_LABEL,
    CONTENT_LABEL,
    SEAL_LABEL,
];

/// The records of one namespace, or one page of them, under [`piece_name`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordsPiece {
    /// The cluster it reports for.
    pub cluster: ClusterName,
    /// Managed records (true) or foreign ones.
    pub managed: bool,
    /// The namespace.
    pub namespace: String,
    /// The page, from 0.
    pub page: u32,
    /// Each record, cut by [`slim`].
    pub records: Vec<ObjectMeta>,
    /// Why the namespace's records are not reported, when they are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The pieces of a member's current set of records, under [`manifest_name`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordsManifest {
    /// The cluster it reports for.
    pub cluster: ClusterName,
    /// Managed records (true) or foreign ones.
    pub managed: bool,
    /// Each piece's object name and the SHA-256 (hex) of its bytes.
    pub pieces: BTreeMap<String, String>,
}

/// The manifest of the managed (`true`) or the foreign records.
pub fn manifest_name(managed: bool) -> &'static str {
    if managed {
        "records-managed"
    } else {
        "records-foreign"
    }
}

/// The object name of page `page` of `namespace`'s managed or foreign records.
pub fn piece_name(managed: bool, namespace: &str, page: u32) -> String {
    format!("{}-{page}", namespace_tag(managed, namespace))
}

/// Whether `name` is shaped as a piece's name, decided before anything is decoded.
pub(crate) fn is_piece_name(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("records-m-")
        .or_else(|| name.strip_prefix("records-f-"))
    else {
        return false;
    };
    let Some((hash, page)) = rest.split_once('-') else {
        return false;
    };
    hash.len() == 16
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
        && !page.is_empty()
        && page.len() <= 5
        && page.bytes().all(|b| b.is_ascii_digit())
}

/// SHA-256 of `bytes`, hex.
pub(crate) fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A record's metadata cut to what the hub reads: name, namespace, creation time and the
/// [`KEPT_LABELS`]; annotations and every other label are left behind.
pub fn slim(meta: ObjectMeta) -> ObjectMeta {
    let labels = meta.labels.map(|labels| {
        labels
            .into_iter()
            .filter(|(k, _)| KEPT_LABELS.contains(&k.as_str()))
            .collect::<BTreeMap<_, _>>()
    });
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        creation_timestamp: meta.creation_timestamp,
        labels,
        ..ObjectMeta::default()
    }
}

/// The pieces of `records` (already slimmed) as the agent writes them: by name, each piece's
/// JSON; with the manifest naming them all. Of a namespace of more than `namespace_records`
/// records, only those `sealed` (by the operator, as the agent's seal key verifies) are reported,
/// and its first piece says so.
pub fn split(
    cluster: &ClusterName,
    managed: bool,
    records: impl IntoIterator<Item = ObjectMeta>,
    namespace_records: usize,
    sealed: impl Fn(&ObjectMeta) -> bool,
) -> (RecordsManifest, BTreeMap<String, Vec<u8>>) {
    let mut by_namespace: BTreeMap<String, Vec<ObjectMeta>> = BTreeMap::new();
    for record in records {
        let namespace = record.namespace.clone().unwrap_or_default();
        by_namespace.entry(namespace).or_default().push(record);
    }
    let mut written = BTreeMap::new();
    let piece = |namespace: &str, page: u32, records, problem| RecordsPiece {
        cluster: cluster.clone(),
        managed,
        namespace: namespace.to_owned(),
        page,
        records,
        problem,
    };
    for (namespace, records) in by_namespace {
        if written.len() >= MAX_PIECES {
            break;
        }
        let pieces = if records.len() > namespace_records {
            let why = format!(
                "namespace {namespace} of cluster {cluster} holds {} Helm release records, more than the {namespace_records} a namespace reports: only those sealed by the operator are reported; delete the Secrets that are not Helm's own there",
                records.len()
            );
            let kept: Vec<ObjectMeta> = records
                .into_iter()
                .filter(|r| sealed(r))
                .take(namespace_records)
                .collect();
            let mut pages: Vec<RecordsPiece> = pages(kept)
                .into_iter()
                .enumerate()
                .map(|(page, records)| piece(&namespace, page as u32, records, None))
                .collect();
            pages[0].problem = Some(why);
            pages
        } else {
            pages(records)
                .into_iter()
                .enumerate()
                .map(|(page, records)| piece(&namespace, page as u32, records, None))
                .collect()
        };
        for p in pieces {
            let bytes = serde_json::to_vec(&p).expect("a piece serializes");
            written.insert(piece_name(managed, &p.namespace, p.page), bytes);
        }
    }
    let manifest = RecordsManifest {
        cluster: cluster.clone(),
        managed,
        pieces: written
            .iter()
            .map(|(name, bytes)| (name.clone(), digest(bytes)))
            .collect(),
    };
    (manifest, written)
}

/// `records` in pages of at most [`PIECE_BYTES`] of JSON each (one at least, when empty too).
fn pages(records: Vec<ObjectMeta>) -> Vec<Vec<ObjectMeta>> {
    let mut pages = vec![Vec::new()];
    let mut size = 0;
    for record in records {
        let bytes = serde_json::to_vec(&record).map_or(0, |b| b.len()) + 1;
        let full = size + bytes > PIECE_BYTES;
        let current = pages.last_mut().expect("one page at least");
        if full && !current.is_empty() {
            pages.push(Vec::new());
            size = 0;
        }
        size += bytes;
        pages.last_mut().expect("one page at least").push(record);
    }
    pages
}

/// A piece as the hub holds it: the digest of its bytes, and what it says (or why it was not
/// taken).
#[derive(Clone, Debug)]
pub(crate) struct HeldPiece {
    /// SHA-256 of its bytes, hex.
    pub(crate) digest: String,
    /// Its namespace and records, or why it cannot be taken.
    pub(crate) read: Result<(String, Vec<ObjectMeta>), String>,
    /// Why its namespace's records are reported only in part, when they are.
    pub(crate) partial: Option<String>,
}

/// Reads a piece's `bytes`, written under `name` in the hub namespace of `cluster`, for the
/// managed or the foreign records: refused when it is not that cluster's, not of that kind, or
/// holds a record of another namespace.
pub(crate) fn take_piece(
    cluster: &ClusterName,
    managed: bool,
    name: &str,
    bytes: &[u8],
) -> HeldPiece {
    let mut partial = None;
    let read = serde_json::from_slice::<RecordsPiece>(bytes)
        .map_err(|e| format!("piece {name} of cluster {cluster} is not a records piece: {e}"))
        .and_then(|mut p| {
            partial = p.problem.take();
            check(cluster, managed, name, p)
        });
    HeldPiece {
        digest: digest(bytes),
        read,
        partial,
    }
}

fn check(
    cluster: &ClusterName,
    managed: bool,
    name: &str,
    piece: RecordsPiece,
) -> Result<(String, Vec<ObjectMeta>), String> {
    if &piece.cluster != cluster
        || piece.managed != managed
        || piece_name(managed, &piece.namespace, piece.page) != name
    {
        return Err(format!(
            "piece {name} of cluster {cluster} names another cluster, kind or namespace than its name says"
        ));
    }
    if let Some(stray) = piece
        .records
        .iter()
        .find(|r| r.namespace.as_deref() != Some(piece.namespace.as_str()))
    {
        return Err(format!(
            "piece {name} of cluster {cluster}, namespace {}, holds a record of namespace {}",
            piece.namespace,
            stray.namespace.as_deref().unwrap_or("(none)")
        ));
    }
    Ok((piece.namespace, piece.records))
}

/// A complete set of records assembled from a manifest and its pieces.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Assembled {
    /// The records of every namespace: as reported, or as last taken where a piece could not be.
    pub(crate) records: Vec<ObjectMeta>,
    /// Each piece that could not be taken (its namespace's records are as last taken), or that
    /// reports its namespace in part (only the sealed records), with why.
    pub(crate) unknown: BTreeMap<String, String>,
}

/// The set `manifest` describes, once every piece it names is in `held` with its digest (None
/// until then); a namespace whose piece cannot be taken keeps its records from `previous`.
pub(crate) fn assemble(
    manifest: &RecordsManifest,
    held: &HashMap<String, HeldPiece>,
    previous: Option<&[ObjectMeta]>,
) -> Option<Assembled> {
    let mut fine: BTreeMap<String, Vec<ObjectMeta>> = BTreeMap::new();
    let mut unknown: BTreeMap<String, String> = BTreeMap::new();
    let mut partial: BTreeMap<String, String> = BTreeMap::new();
    for (name, digest) in &manifest.pieces {
        let piece = held.get(name).filter(|p| &p.digest == digest)?;
        if let Some(why) = &piece.partial {
            partial.insert(name.clone(), why.clone());
        }
        match &piece.read {
            Ok((namespace, records)) => fine
                .entry(namespace.clone())
                .or_default()
                .extend(records.iter().cloned()),
            Err(why) => {
                unknown.insert(name.clone(), why.clone());
            }
        }
    }
    // A piece that cannot be read may name no namespace, but its name does: every record of a
    // namespace with such a piece is as the previous set has it.
    let unreadable: BTreeSet<&str> = unknown.keys().map(|name| tag_of(name)).collect();
    let tag = |namespace: &str| namespace_tag(manifest.managed, namespace);
    let mut records: Vec<ObjectMeta> = fine
        .iter()
        .filter(|(namespace, _)| !unreadable.contains(tag(namespace).as_str()))
        .flat_map(|(_, records)| records.iter().cloned())
        .collect();
    if !unreadable.is_empty() {
        records.extend(
            previous
                .unwrap_or_default()
                .iter()
                .filter(|r| {
                    let namespace = r.namespace.as_deref().unwrap_or_default();
                    unreadable.contains(tag(namespace).as_str())
                })
                .cloned(),
        );
    }
    unknown.extend(partial);
    Some(Assembled { records, unknown })
}

/// The name of every piece of `namespace`'s managed or foreign records, but its page.
fn namespace_tag(managed: bool, namespace: &str) -> String {
    let digest = Sha256::digest(namespace.as_bytes());
    let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let kind = if managed { 'm' } else { 'f' };
    format!("records-{kind}-{short}")
}

/// A piece's name without its page.
fn tag_of(name: &str) -> &str {
    name.rsplit_once('-').map_or(name, |(tag, _)| tag)
}

#[cfg(test)]
mod tests;
