//! What the hub holds of one pull member's reports (pure), within bounds: each report is judged by its kind and name before it is decoded, answers and replies are held only for the calls the hub waits on, observations and record pieces up to a count, everything up to a byte budget per member.
//!
//! An agent may write any number of Secrets in its hub namespace (up to the namespace's
//! ResourceQuota); without these bounds each was kept decoded in the operator, up to a message's
//! size, for as long as the operator ran.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::ObjectMeta, jiff::Timestamp};
use serde::de::DeserializeOwned;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    member::pull::messages::{
        AgentStatus, Answer, MAX_MESSAGE, Observed, PIECE_KIND, Replied, Reply, STATUS_NAME,
        answer_name,
    },
    member::pull::pieces::{
        self, HeldPiece, MAX_PIECES, RecordsManifest, is_piece_name, manifest_name,
    },
};

/// The most namespaces whose observation one member's reports are held for.
pub(crate) const MAX_OBSERVED: usize = 4_096;
/// The most bytes of reports held for one member: at 1,000 releases an agent's legitimate
/// reports are a few MiB.
pub(crate) const MAX_MEMBER_BYTES: usize = 64 << 20;
/// The most refusals remembered for the member's status.
const MAX_REFUSALS: usize = 16;

/// What one member's agent last reported.
#[derive(Default)]
pub(crate) struct Reports {
    /// Work answers, by release: only for work the hub waits on.
    pub(crate) answers: HashMap<ReleaseKey, Answer>,
    /// Replies to asks, by id: only for asks the hub waits on.
    pub(crate) replies: HashMap<String, Reply>,
    /// The newest complete set of records: managed, then foreign.
    pub(crate) records: [Option<Arc<Vec<ObjectMeta>>>; 2],
    /// Observations, by namespace, each with the count of its updates.
    pub(crate) observed: HashMap<String, (u64, Arc<Observed>)>,
    /// The agent's own report.
    pub(crate) status: Option<AgentStatus>,
    /// When the agent last renewed its Lease, and for how long.
    pub(crate) renewed: Option<(Timestamp, i64)>,
    /// Bumped on every change, for the waiters.
    pub(crate) version: u64,
    /// The newest manifests: managed, then foreign.
    manifests: [Option<RecordsManifest>; 2],
    /// The record pieces held, by name: managed, then foreign.
    pieces: [HashMap<String, HeldPiece>; 2],
    /// The pieces of the newest complete sets that could not be taken, with why.
    unknown: [BTreeMap<String, String>; 2],
    /// The size of each report held, by object name.
    sizes: HashMap<String, usize>,
    /// Reports refused for a bound, by name, with why (the newest [`MAX_REFUSALS`]).
    refused: BTreeMap<String, String>,
}

/// What became of a report.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Held (or let go, for a deletion).
    Held,
    /// Not held: not one the hub reads, or refused for a bound.
    Dropped,
    /// Not held, and to be deleted from the hub: a reply to no ask the hub waits on.
    Prune,
}

impl Reports {
    /// When the agent's Lease runs out (None: it never held one).
    pub(crate) fn expires(&self) -> Option<Timestamp> {
        let (renewed, seconds) = self.renewed?;
        renewed
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
            .ok()
    }

    /// Whether the agent holds a Lease that has not run out.
    pub(crate) fn live(&self) -> bool {
        self.expires().is_some_and(|at| at > Timestamp::now())
    }

    /// The bytes of reports held.
    pub(crate) fn bytes(&self) -> usize {
        self.sizes.values().sum()
    }

    /// What the hub could not take of this member's reports, each saying what and why.
    pub(crate) fn problems(&self) -> Vec<String> {
        let unknown = self.unknown.iter().flat_map(|u| u.values().cloned());
        unknown.chain(self.refused.values().cloned()).collect()
    }

    /// Takes the report `name` of kind `kind` from `cluster`'s hub namespace: `bytes` as written,
    /// or None when it was deleted. `expected` says whether the hub waits on an answer or a reply
    /// of that name; nothing is decoded before its kind, name and size are judged.
    pub(crate) fn take(
        &mut self,
        cluster: &ClusterName,
        kind: &str,
        name: &str,
        bytes: Option<&[u8]>,
        expected: bool,
    ) -> Taken {
        let Some(bytes) = bytes else {
            self.forget(kind, name);
            return Taken::Held;
        };
        match kind {
            "answer" | "reply" if !expected => {
                return if kind == "reply" {
                    Taken::Prune
                } else {
                    Taken::Dropped
                };
            }
            "answer" | "reply" | "records" | "status" => {}
            PIECE_KIND if is_piece_name(name) => {
                let index = usize::from(name.starts_with("records-f-"));
                if !self.pieces[index].contains_key(name) && self.pieces[index].len() >= MAX_PIECES
                {
                    return self.refuse(name, format!("more than {MAX_PIECES} pieces of records"));
                }
            }
            "observed" if name.starts_with("observed-") => {
                if !self.observed.contains_key(&name["observed-".len()..])
                    && self.observed.len() >= MAX_OBSERVED
                {
                    return self.refuse(
                        name,
                        format!("observations of more than {MAX_OBSERVED} namespaces"),
                    );
                }
            }
            _ => return Taken::Dropped,
        }
        let held = self.sizes.get(name).copied().unwrap_or_default();
        if bytes.len() > MAX_MESSAGE {
            return self.refuse(
                name,
                format!(
                    "{} KiB, past a message's {} KiB",
                    bytes.len() >> 10,
                    MAX_MESSAGE >> 10
                ),
            );
        }
        if self.bytes() - held + bytes.len() > MAX_MEMBER_BYTES {
            return self.refuse(
                name,
                format!(
                    "the member's reports would pass {} MiB",
                    MAX_MEMBER_BYTES >> 20
                ),
            );
        }
        let taken = self.decode(cluster, kind, name, bytes);
        if taken {
            self.sizes.insert(name.to_owned(), bytes.len());
            self.refused.remove(name);
            self.version += 1;
            Taken::Held
        } else {
            Taken::Dropped
        }
    }

    /// Decodes and holds one report already judged by kind, name and size; false when it is not
    /// what its kind and name say, or not `cluster`'s.
    fn decode(&mut self, cluster: &ClusterName, kind: &str, name: &str, bytes: &[u8]) -> bool {
        match kind {
            "answer" => {
                let Some(a) = decode::<Answer>(bytes).filter(|a| {
                    &a.cluster == cluster
                        && &a.key.scope.cluster == cluster
                        && answer_name(&a.key) == name
                }) else {
                    return false;
                };
                self.answers.insert(a.key.clone(), a);
            }
            "reply" => {
                let Some(a) = decode::<Replied>(bytes)
                    .filter(|a| &a.cluster == cluster && name == format!("reply-{}", a.id))
                else {
                    return false;
                };
                self.replies.insert(a.id, a.reply);
            }
            "records" => {
                let Some(m) = decode::<RecordsManifest>(bytes).filter(|m| {
                    &m.cluster == cluster
                        && manifest_name(m.managed) == name
                        && m.pieces.len() <= MAX_PIECES
                }) else {
                    return false;
                };
                let index = usize::from(!m.managed);
                self.manifests[index] = Some(m);
                self.assemble(index);
            }
            PIECE_KIND => {
                let managed = name.starts_with("records-m-");
                let index = usize::from(!managed);
                let piece = pieces::take_piece(cluster, managed, name, bytes);
                self.pieces[index].insert(name.to_owned(), piece);
                self.assemble(index);
            }
            "observed" => {
                let Some(a) = decode::<Observed>(bytes).filter(|a| {
                    &a.cluster == cluster
                        && name == crate::member::pull::messages::observed_name(&a.namespace)
                }) else {
                    return false;
                };
                let count = self.version + 1;
                self.observed
                    .insert(a.namespace.clone(), (count, Arc::new(a)));
            }
            "status" if name == STATUS_NAME => {
                let Some(a) =
                    decode::<AgentStatus>(bytes).filter(|a| a.cluster.as_ref() == Some(cluster))
                else {
                    return false;
                };
                self.status = Some(a);
            }
            _ => return false,
        }
        true
    }

    /// Takes the newest complete set of the managed (0) or foreign (1) records, when the
    /// manifest and its pieces make one.
    fn assemble(&mut self, index: usize) {
        let Some(manifest) = &self.manifests[index] else {
            return;
        };
        let previous = self.records[index].as_deref().map(Vec::as_slice);
        if let Some(set) = pieces::assemble(manifest, &self.pieces[index], previous) {
            self.records[index] = Some(Arc::new(set.records));
            self.unknown[index] = set.unknown;
        }
    }

    /// Lets go of the report `name`, deleted from the hub.
    fn forget(&mut self, kind: &str, name: &str) {
        if self.sizes.remove(name).is_none() {
            return;
        }
        match kind {
            "answer" => self.answers.retain(|key, _| answer_name(key) != name),
            "reply" => {
                self.replies.remove(name.trim_start_matches("reply-"));
            }
            "observed" => {
                self.observed.remove(name.trim_start_matches("observed-"));
            }
            PIECE_KIND => {
                for pieces in &mut self.pieces {
                    pieces.remove(name);
                }
            }
            "status" => self.status = None,
            // A deleted manifest leaves the last complete set in force until the next one.
            _ => {}
        }
        self.version += 1;
    }

    /// Lets go of the answer of `key`, no longer waited on (the agent's Secret stays: it tells
    /// the agent what ran).
    pub(crate) fn answered(&mut self, key: &ReleaseKey) {
        if self.answers.remove(key).is_some() {
            self.sizes.remove(&answer_name(key));
        }
    }

    /// Lets go of the reply to `id`, no longer waited on.
    pub(crate) fn replied(&mut self, id: &str) {
        if self.replies.remove(id).is_some() {
            self.sizes.remove(&format!("reply-{id}"));
        }
    }

    fn refuse(&mut self, name: &str, why: String) -> Taken {
        if self.refused.len() >= MAX_REFUSALS && !self.refused.contains_key(name) {
            self.refused.pop_first();
        }
        self.refused.insert(
            name.to_owned(),
            format!("report {name} was not taken: {why}"),
        );
        Taken::Dropped
    }
}

/// A report's JSON; None when it is not one.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

#[cfg(test)]
mod tests;
