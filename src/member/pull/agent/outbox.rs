//! The agent's reports on their way to the hub: the newest of each report, kept until the hub has it, so an agent cut off from the hub catches up when it returns.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams},
};
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    api::key::ClusterName,
    member::pull::messages::{AGENT_MANAGER, MAX_MESSAGE, PIECE_KIND, REPORT_KEY, REPORT_LABEL},
    member::pull::pieces,
};

/// How often the outbox tries again while the hub does not take its reports.
const RETRY_EVERY: Duration = Duration::from_secs(2);

/// What is to become of one report.
enum Pending {
    /// Written with this JSON, labelled as a report of this kind.
    Write(&'static str, Vec<u8>),
    /// Deleted.
    Delete,
}

/// The reports not yet on the hub, the newest of each name.
pub struct Outbox {
    secrets: Api<Secret>,
    pending: Mutex<BTreeMap<String, (u64, Pending)>>,
    count: Mutex<u64>,
    wake: Notify,
    /// True while the hub takes the reports.
    reachable: watch::Sender<bool>,
    /// Release records one namespace reports at most.
    namespace_records: usize,
}

impl Outbox {
    /// An outbox writing into the member's hub namespace through `secrets`.
    pub fn new(secrets: Api<Secret>) -> Arc<Self> {
        Self::limited(secrets, pieces::MAX_NAMESPACE_RECORDS)
    }

    /// Like [`Outbox::new`], reporting at most `namespace_records` release records of one
    /// namespace.
    pub(crate) fn limited(secrets: Api<Secret>, namespace_records: usize) -> Arc<Self> {
        Arc::new(Self {
            namespace_records,
            secrets,
            pending: Mutex::default(),
            count: Mutex::default(),
            wake: Notify::new(),
            reachable: watch::channel(true).0,
        })
    }

    /// Whether the hub took the last writes.
    pub(crate) fn reachable(&self) -> watch::Receiver<bool> {
        self.reachable.subscribe()
    }

    /// Puts `report` (of `kind`) under `name`, replacing what waited there.
    pub fn put(&self, name: String, kind: &'static str, report: &impl Serialize) {
        let mut bytes = serde_json::to_vec(report).unwrap_or_default();
        if bytes.len() > MAX_MESSAGE {
            tracing::warn!(
                name,
                bytes = bytes.len(),
                "a report is too large for the hub; it is cut to nothing"
            );
            bytes = b"null".to_vec();
        }
        self.enqueue(name, Pending::Write(kind, bytes));
    }

    /// Puts `records`, the managed or the foreign records of `cluster`, as pieces and their
    /// manifest (see [`crate::member::pull::pieces`]; past the bound of a namespace, only those
    /// `sealed`), and deletes the pieces of `written` (the
    /// names last put) that are no more; `written` becomes the names put now.
    pub fn put_records(
        &self,
        cluster: &ClusterName,
        managed: bool,
        records: impl IntoIterator<Item = ObjectMeta>,
        sealed: impl Fn(&ObjectMeta) -> bool,
        written: &mut BTreeSet<String>,
    ) {
        let (manifest, pieces) = pieces::split(
            cluster,
            managed,
            records.into_iter().map(pieces::slim),
            self.namespace_records,
            sealed,
        );
        for gone in written.iter().filter(|name| !pieces.contains_key(*name)) {
            self.delete(gone.clone());
        }
        *written = pieces.keys().cloned().collect();
        for (name, bytes) in pieces {
            self.enqueue(name, Pending::Write(PIECE_KIND, bytes));
        }
        self.put(
            pieces::manifest_name(managed).to_owned(),
            "records",
            &manifest,
        );
    }

    /// Deletes the report `name`.
    pub(crate) fn delete(&self, name: String) {
        self.enqueue(name, Pending::Delete);
    }

    fn enqueue(&self, name: String, what: Pending) {
        let seq = {
            let mut count = self.count.lock().expect("outbox lock");
            *count += 1;
            *count
        };
        self.pending
            .lock()
            .expect("outbox lock")
            .insert(name, (seq, what));
        self.wake.notify_one();
    }

    /// Writes what waits, and again after each failure, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let batch: Vec<(String, u64)> = self
                .pending
                .lock()
                .expect("outbox lock")
                .iter()
                .map(|(name, (seq, _))| (name.clone(), *seq))
                .collect();
            let mut failed = false;
            for (name, seq) in batch {
                if stop.is_cancelled() {
                    return;
                }
                let request = {
                    let pending = self.pending.lock().expect("outbox lock");
                    match pending.get(&name) {
                        Some((s, Pending::Write(kind, bytes))) if *s == seq => {
                            Some(Some((*kind, bytes.clone())))
                        }
                        Some((s, Pending::Delete)) if *s == seq => Some(None),
                        _ => None,
                    }
                };
                let Some(request) = request else { continue };
                let done = match request {
                    Some((kind, bytes)) => self.write(&name, kind, bytes).await,
                    None => self.remove(&name).await,
                };
                match done {
                    Ok(()) => {
                        let mut pending = self.pending.lock().expect("outbox lock");
                        if pending.get(&name).is_some_and(|(s, _)| *s == seq) {
                            pending.remove(&name);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(name, error = %e, "the hub did not take a report; kept for later");
                        failed = true;
                        break;
                    }
                }
            }
            self.reachable
                .send_if_modified(|r| std::mem::replace(r, !failed) == failed);
            let wait = if failed {
                RETRY_EVERY
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How many reports wait.
    pub fn waiting(&self) -> usize {
        self.pending.lock().expect("outbox lock").len()
    }

    async fn write(&self, name: &str, kind: &'static str, bytes: Vec<u8>) -> kube::Result<()> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some([(REPORT_LABEL.to_owned(), kind.to_owned())].into()),
                ..Default::default()
            },
            data: Some([(REPORT_KEY.to_owned(), ByteString(bytes))].into()),
            ..Default::default()
        };
        let params = PatchParams::apply(AGENT_MANAGER).force();
        tokio::time::timeout(
            crate::api::HUB_WRITE_TIMEOUT,
            self.secrets.patch(name, &params, &Patch::Apply(&secret)),
        )
        .await
        .map_err(|_| kube::Error::Service("the hub did not answer in time".into()))?
        .map(|_| ())
    }

    async fn remove(&self, name: &str) -> kube::Result<()> {
        match self.secrets.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::client::Body;

    use super::*;

    /// An outbox whose hub is never asked (these tests do not run it).
    fn outbox() -> Arc<Outbox> {
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        Outbox::new(Api::namespaced(client, "tenancy-hub-member-edge-1"))
    }

    /// What waits under `name`: the report's bytes, or None for a deletion.
    fn waiting(outbox: &Outbox, name: &str) -> Option<Option<Vec<u8>>> {
        let pending = outbox.pending.lock().unwrap();
        pending.get(name).map(|(_, what)| match what {
            Pending::Write(_, bytes) => Some(bytes.clone()),
            Pending::Delete => None,
        })
    }

    fn release(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("sh.helm.release.v1.{name}.v1")),
            namespace: Some(namespace.into()),
            labels: Some(
                [("owner", "helm"), ("name", name), ("version", "1")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn only_the_newest_report_of_a_name_waits() {
        let outbox = outbox();
        outbox.put("status".into(), "status", &"first");
        outbox.put("status".into(), "status", &"second");
        outbox.put("observed-team-a".into(), "observed", &1);
        assert_eq!(outbox.waiting(), 2);
        assert_eq!(
            waiting(&outbox, "status"),
            Some(Some(b"\"second\"".to_vec()))
        );
        outbox.delete("status".into());
        assert_eq!(outbox.waiting(), 2);
        assert_eq!(waiting(&outbox, "status"), Some(None));
    }

    #[tokio::test]
    async fn a_report_too_large_for_the_hub_is_cut_to_nothing() {
        let outbox = outbox();
        outbox.put("huge".into(), "observed", &"a".repeat(MAX_MESSAGE + 1));
        assert_eq!(waiting(&outbox, "huge"), Some(Some(b"null".to_vec())));
        outbox.put("fits".into(), "observed", &"a".repeat(16));
        assert_eq!(
            waiting(&outbox, "fits").flatten().map(|b| b.len()),
            Some(18)
        );
    }

    #[tokio::test]
    async fn records_are_put_as_pieces_and_a_namespace_gone_deletes_its_piece() {
        let outbox = outbox();
        let cluster: ClusterName = "edge-1".parse().unwrap();
        let mut written = BTreeSet::new();
        let records = [release("team-a", "web"), release("team-b", "db")];
        outbox.put_records(&cluster, true, records.clone(), |_| true, &mut written);
        let (a, b) = (
            pieces::piece_name(true, "team-a", 0),
            pieces::piece_name(true, "team-b", 0),
        );
        assert_eq!(written, BTreeSet::from([a.clone(), b.clone()]));
        assert!(waiting(&outbox, pieces::manifest_name(true)).is_some_and(|w| w.is_some()));
        assert!(waiting(&outbox, &b).is_some_and(|w| w.is_some()));

        outbox.put_records(&cluster, true, [records[0].clone()], |_| true, &mut written);
        assert_eq!(written, BTreeSet::from([a.clone()]));
        assert_eq!(
            waiting(&outbox, &b),
            Some(None),
            "team-b's piece is deleted"
        );
        assert!(waiting(&outbox, &a).is_some_and(|w| w.is_some()));
    }
}
