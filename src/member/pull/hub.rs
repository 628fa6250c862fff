//! The hub's side of every pull member at once: one metadata watch of all agents' reports (each read in its member's hub namespace alone) and one of their Leases (a constant number of streams whatever the number of members), what each member last reported, and the publishing of signed calls.

pub(crate) mod held;
pub(crate) mod link;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use futures::StreamExt as _;
use k8s_openapi::{
    ByteString,
    api::{coordination::v1::Lease, core::v1::Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    core::PartialObjectMeta,
    runtime::watcher,
};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    api::member_cluster::{AGENT_LEASE, member_of_pull_namespace, pull_namespace},
    member::error::{self, LinkError},
    member::pull::hub::held::{Reports, Taken},
    member::pull::messages::{
        CALL_LABEL, Call, MAX_MESSAGE, REPORT_KEY, REPORT_LABEL, WORK_CONTENT, WORK_ID,
        answer_name, ask_name, is_id, new_id, work_name,
    },
    member::pull::wire::Signer,
    metrics::Metrics,
    observe::relist::relisting_watcher,
};

/// One member's reports and a channel that ticks when they change.
pub(crate) struct Member {
    reports: Mutex<Reports>,
    changed: watch::Sender<u64>,
}

impl Member {
    /// Reads the reports.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Reports) -> T) -> T {
        f(&self.reports.lock().expect("reports lock"))
    }

    /// Changes the reports and wakes the waiters.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut Reports) -> T) -> T {
        let (out, version) = {
            let mut reports = self.reports.lock().expect("reports lock");
            let out = f(&mut reports);
            reports.version += 1;
            (out, reports.version)
        };
        self.changed.send_replace(version);
        out
    }

    /// A receiver that ticks on each change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// Calls written or deleted on the hub at once, over every pull member. The hub API server's
/// priority and fairness queues one identity's requests in a queue of 50 (default) and refuses
/// the rest with 429; publishing the work of 1,000 members at once did just that, so the
/// operator paces its own calls well under it.
const WRITES_IN_FLIGHT: usize = 16;

/// Reports read from the members' hub namespaces at once, in the order their watch saw them.
const REPORT_READS_AT_ONCE: usize = 8;

/// Reads of a report that failed, tried again after 0.5, 1, 2, ... s (about a minute in all).
const REPORT_READ_RETRIES: u32 = 7;

/// The hub's side of every pull member.
pub(crate) struct PullHub {
    client: kube::Client,
    /// Signs calls; none for a hub side that only looks (the CLI).
    signer: Option<Signer>,
    members: DashMap<ClusterName, Arc<Member>>,
    /// The id and content digest of the newest unanswered work of each release.
    pending: DashMap<ReleaseKey, (String, String)>,
    /// Set once [`PullHub::run`] follows the reports; until then they are read when asked for.
    following: AtomicBool,
    /// Set once the agents' Leases and reports are listed by [`PullHub::run`]: until then no
    /// agent is judged away (an operator just started has not seen their Leases yet).
    listed: watch::Sender<[bool; 2]>,
    /// Permits for [`WRITES_IN_FLIGHT`] calls written or deleted at once.
    writes: Semaphore,
    /// The answers and replies waited on, by hub namespace and object name: no other is held.
    expected: DashMap<(String, String), ()>,
    /// Where the bytes held per member are counted.
    metrics: Option<Arc<Metrics>>,
}

impl PullHub {
    /// The hub side reached with `client`, signing with `signer`.
    pub(crate) fn new(
        client: kube::Client,
        signer: Option<Signer>,
        metrics: Option<Arc<Metrics>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            signer,
            members: DashMap::new(),
            pending: DashMap::new(),
            following: AtomicBool::new(false),
            listed: watch::Sender::new([false; 2]),
            writes: Semaphore::new(WRITES_IN_FLIGHT),
            expected: DashMap::new(),
            metrics,
        })
    }

    /// The reports of `cluster` (empty until its agent reports).
    pub(crate) fn member(&self, cluster: &ClusterName) -> Arc<Member> {
        self.members
            .entry(cluster.clone())
            .or_insert_with(|| {
                Arc::new(Member {
                    reports: Mutex::new(Reports::default()),
                    changed: watch::channel(0).0,
                })
            })
            .clone()
    }

    /// The Secrets of `cluster`'s hub namespace.
    pub(crate) fn secrets(&self, cluster: &ClusterName) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &pull_namespace(cluster))
    }

    /// Signs `call` and writes it as the Secret `name` (replacing what was there), labelled as a
    /// call of `kind`.
    pub(crate) async fn publish(&self, name: &str, kind: &str, call: &Call) -> error::Result<()> {
        self.publish_with(name, kind, call, None).await
    }

    /// [`PullHub::publish`], the call annotated with its id and `content` digest when it is
    /// work, so a later leader can tell the same work still in flight (see
    /// [`PullHub::work_id`]).
    async fn publish_with(
        &self,
        name: &str,
        kind: &str,
        call: &Call,
        content: Option<&str>,
    ) -> error::Result<()> {
        let signer = self.signer.as_ref().ok_or_else(|| LinkError::NotSigner {
            cluster: call.cluster.clone(),
        })?;
        let secret = Secret {
            data: Some(signer.sign(encode(call)?)),
            ..call_secret(name, kind, call, content)
        };
        let params = PatchParams::apply("tenancy-hub").force();
        let _permit = self.writes.acquire().await.expect("never closed");
        self.secrets(&call.cluster)
            .patch(name, &params, &Patch::Apply(&secret))
            .await
            .map(|_| ())
            .map_err(|e| {
                let doing = format!(
                    "publishing {name} for cluster {} in hub namespace {}",
                    call.cluster,
                    pull_namespace(&call.cluster)
                );
                LinkError::kube(doing, e)
            })
    }

    /// Deletes the Secret `name` of `cluster`'s hub namespace, when it is there.
    pub(crate) async fn remove(&self, cluster: &ClusterName, name: &str) {
        let _permit = self.writes.acquire().await.expect("never closed");
        if let Err(e) = self
            .secrets(cluster)
            .delete(name, &DeleteParams::default())
            .await
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            tracing::debug!(%cluster, name, error = %e, "could not delete a pull call");
        }
    }

    /// Publishes `call`, the work of `key` whose job digests to `content`, under the id it
    /// should carry: the unanswered one of the same content when there is one (so an agent away
    /// meanwhile runs it once), else a new one. Returns that id.
    ///
    /// The first work of `key` in this process looks at the work call on the hub: work of the
    /// same content published by an earlier leader (before a restart or a hand-over) keeps its
    /// id, so the agent, which runs each id once, does not run again what it is running or ran
    /// and the hub takes the answer it gives or gave.
    pub(crate) async fn publish_work(
        &self,
        key: &ReleaseKey,
        content: &str,
        call: &mut Call,
    ) -> error::Result<String> {
        let id = match self.pending.get(key).map(|p| p.clone()) {
            Some((id, pending)) if pending == content => id,
            Some(_) => self.pend(key, new_id(), content),
            None => match self.earlier_work(key, content).await {
                Some(id) => {
                    let id = self.pend(key, id, content);
                    self.take_answer_now(key).await;
                    id
                }
                None => self.pend(key, new_id(), content),
            },
        };
        call.id = id.clone();
        self.publish_with(&work_name(key), "work", call, Some(content))
            .await
            .map(|()| id)
    }

    /// Marks `id` as the pending work of `key` (of `content`), its answer waited on.
    fn pend(&self, key: &ReleaseKey, id: String, content: &str) -> String {
        self.expect(&key.scope.cluster, &answer_name(key), true);
        self.pending
            .insert(key.clone(), (id.clone(), content.to_owned()));
        id
    }

    /// The id of the work of `key` on the hub when it is of `content`.
    async fn earlier_work(&self, key: &ReleaseKey, content: &str) -> Option<String> {
        let found = {
            let _permit = self.writes.acquire().await.expect("never closed");
            self.secrets(&key.scope.cluster)
                .get_metadata_opt(&work_name(key))
                .await
        };
        let found = found
            .inspect_err(
                |e| tracing::debug!(%key, error = %e, "could not read the work call on the hub"),
            )
            .ok()??;
        same_work(&found.metadata, content)
    }

    /// Reads the answer of `key` now, when [`PullHub::run`] passed it by before it was waited
    /// on.
    async fn take_answer_now(&self, key: &ReleaseKey) {
        let found = {
            let _permit = self.writes.acquire().await.expect("never closed");
            self.secrets(&key.scope.cluster)
                .get_opt(&answer_name(key))
                .await
        };
        if let Ok(Some(answer)) = found {
            let _ = self.take_report(&answer, false);
        }
    }

    /// Forgets the pending work of `key` once answered, and its answer.
    pub(crate) fn answered(&self, key: &ReleaseKey, id: &str) {
        if self
            .pending
            .remove_if(key, |_, (pending, _)| pending == id)
            .is_some()
        {
            self.expect(&key.scope.cluster, &answer_name(key), false);
            self.member(&key.scope.cluster).write(|r| r.answered(key));
        }
    }

    /// Reads `cluster`'s reports and Lease now, unless [`PullHub::run`] follows them already:
    /// what a look from the CLI sees.
    pub(crate) async fn read_now(&self, cluster: &ClusterName) -> error::Result<()> {
        if self.following.load(Ordering::Relaxed) {
            self.listed_first().await;
            return Ok(());
        }
        let namespace = pull_namespace(cluster);
        let hub = |e: kube::Error| {
            LinkError::kube(
                format!("reading pull member {cluster}'s reports in hub namespace {namespace}"),
                e,
            )
        };
        let params = kube::api::ListParams::default().labels(REPORT_LABEL);
        for secret in self.secrets(cluster).list(&params).await.map_err(hub)? {
            let _ = self.take_report(&secret, false);
        }
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &namespace);
        if let Some(lease) = leases.get_opt(AGENT_LEASE).await.map_err(hub)? {
            self.on_lease(watcher::Event::Apply(lease));
        }
        Ok(())
    }

    /// Waits, for [`LISTED_WITHIN`] at most, until [`PullHub::run`] has listed every agent's
    /// Leases and reports once, so a member is not judged away only because they are not read
    /// yet (every pull member was shown unreachable for one probe after each start).
    pub(crate) async fn listed_first(&self) {
        if !self.following.load(Ordering::Relaxed) {
            return;
        }
        let mut listed = self.listed.subscribe();
        let _ =
            tokio::time::timeout(LISTED_WITHIN, listed.wait_for(|l| l.iter().all(|l| *l))).await;
    }

    /// Follows every agent's reports and Leases until `stop`. The hub counts as following from
    /// this call on, not from the future's first poll: a probe made before the task is first run
    /// waits for the first lists instead of reading on its own.
    pub(crate) fn run(
        self: Arc<Self>,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.following.store(true, Ordering::Relaxed);
        self.follow(stop)
    }

    async fn follow(self: Arc<Self>, stop: CancellationToken) {
        // Metadata only: a Secret anyone labels as a report costs its metadata, and the data of
        // a report is read in a member's hub namespace alone (`report_of`).
        let reports = Api::<PartialObjectMeta<Secret>>::all(self.client.clone());
        let leases = Api::<Lease>::all(self.client.clone());
        let reports = relisting_watcher(reports, watcher::Config::default().labels(REPORT_LABEL));
        let leases = relisting_watcher(
            leases,
            watcher::Config::default().fields(&format!("metadata.name={AGENT_LEASE}")),
        );
        let this = self.clone();
        let follow_reports = reports
            .filter_map(|event| futures::future::ready(event.ok()))
            .map(|event| {
                let this = this.clone();
                async move { this.report_of(event).await }
            })
            .buffered(REPORT_READS_AT_ONCE)
            .for_each(|event| {
                if matches!(event, watcher::Event::InitDone) {
                    this.listed.send_modify(|l| l[0] = true);
                }
                this.on_report(event);
                futures::future::ready(())
            });
        let this = self.clone();
        let follow_leases = leases.for_each(|event| {
            if let Ok(event) = event {
                if matches!(event, watcher::Event::InitDone) {
                    this.listed.send_modify(|l| l[1] = true);
                }
                this.on_lease(event);
            }
            futures::future::ready(())
        });
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = follow_reports => {}
            _ = follow_leases => {}
        }
    }

    /// The event of the reports' metadata watch with the report it names, read from a pull
    /// member's hub namespace: a labelled Secret of any other namespace is not read, and a
    /// report that cannot be read now (its namespace's RoleBinding not made yet, say) is read
    /// again in the background ([`PullHub::read_later`]).
    async fn report_of(
        self: &Arc<Self>,
        event: watcher::Event<PartialObjectMeta<Secret>>,
    ) -> watcher::Event<Secret> {
        let as_secret = |meta: PartialObjectMeta<Secret>| Secret {
            metadata: meta.metadata,
            ..Default::default()
        };
        let read = |meta: PartialObjectMeta<Secret>| async move {
            let namespace = meta.namespace().unwrap_or_default();
            let Some(cluster) = member_of_pull_namespace(&namespace) else {
                return as_secret(meta);
            };
            let name = meta.name_any();
            // An answer or reply no one here waits on is judged by its name alone: not read.
            let kind = meta.labels().get(REPORT_LABEL).map(String::as_str);
            if matches!(kind, Some("answer" | "reply"))
                && !self
                    .expected
                    .contains_key(&(namespace.clone(), name.clone()))
            {
                return Secret {
                    data: Some([(REPORT_KEY.to_owned(), ByteString(Vec::new()))].into()),
                    ..as_secret(meta)
                };
            }
            match self.secrets(&cluster).get_opt(&name).await {
                Ok(Some(secret)) => secret,
                // Gone meanwhile: its deletion follows.
                Ok(None) => as_secret(meta),
                Err(e) => {
                    not_read_yet(&cluster, &name, &e);
                    let this = self.clone();
                    tokio::spawn(async move { this.read_later(cluster, name).await });
                    as_secret(meta)
                }
            }
        };
        match event {
            watcher::Event::Apply(meta) => watcher::Event::Apply(read(meta).await),
            watcher::Event::InitApply(meta) => watcher::Event::InitApply(read(meta).await),
            watcher::Event::Delete(meta) => watcher::Event::Delete(as_secret(meta)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
        }
    }

    /// Reads the report `name` of `cluster` again, after [`REPORT_READ_RETRIES`] growing pauses
    /// at most, and takes it in when it is there; logs a warning when it never could.
    async fn read_later(self: Arc<Self>, cluster: ClusterName, name: String) {
        let mut pause = Duration::from_millis(500);
        let mut last = None;
        for _ in 0..REPORT_READ_RETRIES {
            tokio::time::sleep(pause).await;
            pause *= 2;
            match self.secrets(&cluster).get_opt(&name).await {
                Ok(Some(secret)) => return self.on_report(watcher::Event::Apply(secret)),
                Ok(None) => return,
                Err(e) => {
                    not_read_yet(&cluster, &name, &e);
                    last = Some(e);
                }
            }
        }
        let error = last.map(|e| e.to_string()).unwrap_or_default();
        tracing::warn!(%cluster, name, error, "could not read a pull member's report; it is read again at its next change");
    }

    /// Takes one event of the reports' watch in; deletes from the hub a reply to no ask waited
    /// on.
    fn on_report(self: &Arc<Self>, event: watcher::Event<Secret>) {
        let prune = match event {
            watcher::Event::Apply(secret) | watcher::Event::InitApply(secret) => {
                self.take_report(&secret, false)
            }
            watcher::Event::Delete(secret) => self.take_report(&secret, true),
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        if let Some((cluster, name)) = prune {
            let this = self.clone();
            tokio::spawn(async move { this.prune_reply(&cluster, &name).await });
        }
    }

    /// Deletes the reply `name` that no one in this process waits on, unless its ask is on the
    /// hub: another process (`diff`, another replica) asked it and deletes both when it has read
    /// the reply. A reply to no ask at all is deleted without being read.
    async fn prune_reply(&self, cluster: &ClusterName, name: &str) {
        if let Some(id) = name.strip_prefix("reply-") {
            let asked = {
                let _permit = self.writes.acquire().await.expect("never closed");
                self.secrets(cluster).get_metadata_opt(&ask_name(id)).await
            };
            match asked {
                // An asker gone before it cleaned up leaves both; they go once it is long over.
                Ok(Some(ask)) if abandoned(&ask.metadata) => {
                    self.remove(cluster, &ask_name(id)).await;
                }
                Ok(Some(_)) => return,
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(%cluster, name, error = %e, "could not look for the ask of a reply");
                    return;
                }
            }
        }
        tracing::debug!(%cluster, name, "a reply to no ask is deleted");
        self.remove(cluster, name).await;
    }

    /// Takes one event of an agent's Lease in: when it was renewed, and for how long.
    pub(crate) fn on_lease(&self, event: watcher::Event<Lease>) {
        let (watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) = event else {
            return;
        };
        let Some(spec) = &lease.spec else { return };
        let Some(cluster) = spec
            .holder_identity
            .as_deref()
            .and_then(|h| h.parse::<ClusterName>().ok())
        else {
            return;
        };
        if lease.namespace().as_deref() != Some(pull_namespace(&cluster).as_str()) {
            return;
        }
        let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
            return;
        };
        let renewed = renewed.0;
        self.member(&cluster)
            .write(|r| r.renewed = Some((renewed, i64::from(seconds))));
    }

    /// Takes one report Secret in, when it is in a member's hub namespace, judged by its kind
    /// and name before it is decoded (see [`Reports::take`]); a reply to no ask waited on is
    /// deleted from the hub.
    fn take_report(&self, secret: &Secret, deleted: bool) -> Option<(ClusterName, String)> {
        let (Some(namespace), name) = (secret.namespace(), secret.name_any()) else {
            return None;
        };
        let cluster = member_of_pull_namespace(&namespace)?;
        let kind = secret
            .labels()
            .get(REPORT_LABEL)
            .cloned()
            .unwrap_or_default();
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(REPORT_KEY))
            .map(|b| b.0.as_slice());
        if bytes.is_none() && !deleted {
            return None;
        }
        let expected = self
            .expected
            .contains_key(&(namespace.clone(), name.clone()));
        let member = self.member(&cluster);
        let taken =
            member.write(|r| r.take(&cluster, &kind, &name, bytes.filter(|_| !deleted), expected));
        if let Some(metrics) = &self.metrics {
            metrics.pull_member_bytes(cluster.as_str(), member.read(Reports::bytes));
        }
        (taken == Taken::Prune && self.signer.is_some()).then_some((cluster, name))
    }

    /// Marks the answer or reply `name` of `cluster` as waited on (true) or not.
    pub(crate) fn expect(&self, cluster: &ClusterName, name: &str, waited: bool) {
        let key = (pull_namespace(cluster), name.to_owned());
        if waited {
            self.expected.insert(key, ());
        } else {
            self.expected.remove(&key);
        }
    }

    /// What the hub could not take of `cluster`'s reports, each saying what and why.
    pub(crate) fn problems(&self, cluster: &ClusterName) -> Vec<String> {
        self.members
            .get(cluster)
            .map(|m| m.read(Reports::problems))
            .unwrap_or_default()
    }
}

/// How long after its ask a reply may stay on the hub before both are taken for abandoned by
/// an asker gone before it cleaned up (asks wait a minute for their reply).
const ABANDONED_ASK: Duration = Duration::from_secs(600);

/// Whether the ask of `meta` is older than [`ABANDONED_ASK`].
fn abandoned(meta: &kube::api::ObjectMeta) -> bool {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    meta.creation_timestamp
        .as_ref()
        .is_some_and(|t| now - t.0.as_second() > ABANDONED_ASK.as_secs() as i64)
}

/// The bytes of `call`, within the [`MAX_MESSAGE`] a pull member is sent.
fn encode(call: &Call) -> error::Result<Vec<u8>> {
    let bytes = serde_json::to_vec(call).map_err(|source| LinkError::Encode {
        cluster: call.cluster.clone(),
        source,
    })?;
    if bytes.len() > MAX_MESSAGE {
        return Err(LinkError::TooLarge {
            cluster: call.cluster.clone(),
            kib: bytes.len() / 1024,
            max_kib: MAX_MESSAGE / 1024,
        });
    }
    Ok(bytes)
}

/// The Secret `name` that carries `call` (its data left to the signer), labelled as a call of
/// `kind`, annotated with its id and `content` digest when it is work.
fn call_secret(name: &str, kind: &str, call: &Call, content: Option<&str>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(CALL_LABEL.to_owned(), kind.to_owned())].into()),
            annotations: content.map(|content| {
                [
                    (WORK_ID.to_owned(), call.id.clone()),
                    (WORK_CONTENT.to_owned(), content.to_owned()),
                ]
                .into()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Whether the work call `found` on the hub is the work of `content`: its id, when it carries a
/// well-formed one.
fn same_work(found: &ObjectMeta, content: &str) -> Option<String> {
    let annotations = found.annotations.as_ref()?;
    (annotations.get(WORK_CONTENT).map(String::as_str) == Some(content))
        .then(|| annotations.get(WORK_ID).cloned())
        .flatten()
        .filter(|id| is_id(id))
}

/// How long a look at a member waits at most for the first list of every agent's Lease and
/// reports after the operator starts.
const LISTED_WITHIN: Duration = Duration::from_secs(30);

/// How long a waiter sleeps at most between looks at the agent's Lease.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(2);

/// Logs a report read that failed and will be tried again: refused, it is the operator's
/// RoleBinding in that member's hub namespace that is not made yet (enrollment makes it beside
/// this watch), which is said as such.
fn not_read_yet(cluster: &ClusterName, name: &str, error: &kube::Error) {
    match error {
        kube::Error::Api(s) if s.code == 403 => tracing::debug!(
            %cluster,
            name,
            "a pull member's report is not readable until the operator's RoleBinding in its hub namespace is made; read again shortly"
        ),
        e => {
            tracing::debug!(%cluster, name, error = %e, "could not read a pull member's report yet; read again shortly")
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
    use kube::client::Body;

    use super::*;

    fn created(seconds_ago: i64) -> kube::api::ObjectMeta {
        let at = Timestamp::from_second(Timestamp::now().as_second() - seconds_ago).unwrap();
        kube::api::ObjectMeta {
            creation_timestamp: Some(Time(at)),
            ..Default::default()
        }
    }

    #[test]
    fn an_ask_is_abandoned_only_long_after_its_reply_was_due() {
        assert!(!abandoned(&created(0)));
        assert!(!abandoned(&created(REPLY_WITHIN_HERE)));
        assert!(abandoned(&created(ABANDONED_ASK.as_secs() as i64 + 5)));
        assert!(!abandoned(&kube::api::ObjectMeta::default()));
    }

    /// An ask waits a minute for its reply (see `link::ask`).
    const REPLY_WITHIN_HERE: i64 = 60;

    /// A Secret of `namespace` labelled as a report, as the metadata watch sees it.
    fn labelled(namespace: &str) -> PartialObjectMeta<Secret> {
        PartialObjectMeta {
            metadata: ObjectMeta {
                name: Some("records-managed".into()),
                namespace: Some(namespace.into()),
                labels: Some([(REPORT_LABEL.to_owned(), "records".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn data(event: &watcher::Event<Secret>) -> Option<&Vec<u8>> {
        match event {
            watcher::Event::Apply(s) => s.data.as_ref()?.get(REPORT_KEY).map(|b| &b.0),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_made_before_the_following_task_first_runs_waits_for_its_lists_and_reads_nothing()
     {
        let (service, mut server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let hub = PullHub::new(kube::Client::new(service, "default"), None, None);
        let stop = CancellationToken::new();
        // The task is made, as the operator spawns it, but not run yet.
        let follow = hub.clone().run(stop.clone());
        let cluster: ClusterName = "edge-1".parse().unwrap();
        let started = tokio::time::Instant::now();
        tokio::time::timeout(2 * LISTED_WITHIN, hub.read_now(&cluster))
            .await
            .expect("no request is left waiting on the hub")
            .expect("a following hub reads nothing");
        assert!(
            started.elapsed() >= LISTED_WITHIN,
            "it waited for the first lists"
        );
        assert!(
            futures::FutureExt::now_or_never(server.next_request()).is_none(),
            "no request was made of the hub"
        );
        drop(follow);
    }

    #[tokio::test]
    async fn a_report_is_read_in_its_members_hub_namespace_and_a_labelled_secret_elsewhere_never() {
        let (service, mut server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let hub = PullHub::new(kube::Client::new(service, "default"), None, None);
        let within = Duration::from_secs(10);

        // A tenant's Secret with the report label: its metadata alone, no request.
        let elsewhere = tokio::time::timeout(
            within,
            hub.report_of(watcher::Event::Apply(labelled("team-a"))),
        )
        .await
        .expect("no request is made for a Secret outside the members' namespaces");
        assert_eq!(data(&elsewhere), None);

        // A member's report: one GET of that Secret, in that namespace.
        let cluster: ClusterName = "edge-1".parse().unwrap();
        let namespace = pull_namespace(&cluster);
        let mut report = Secret {
            metadata: labelled(&namespace).metadata,
            ..Default::default()
        };
        report.data = Some(
            [(
                REPORT_KEY.to_owned(),
                k8s_openapi::ByteString(b"signed".to_vec()),
            )]
            .into(),
        );
        let answer = serde_json::to_vec(&report).unwrap();
        let expected = format!("/api/v1/namespaces/{namespace}/secrets/records-managed");
        let api_server = tokio::spawn(async move {
            let (request, send) = server.next_request().await.expect("one request");
            assert_eq!(request.method(), http::Method::GET);
            assert_eq!(request.uri().path(), expected);
            send.send_response(Response::new(Body::from(answer)));
        });
        let read = tokio::time::timeout(
            within,
            hub.report_of(watcher::Event::Apply(labelled(&namespace))),
        )
        .await
        .expect("the report is read");
        api_server.await.unwrap();
        assert_eq!(data(&read).map(Vec::as_slice), Some(&b"signed"[..]));

        // A deletion needs no read.
        let gone = hub
            .report_of(watcher::Event::Delete(labelled(&namespace)))
            .await;
        assert!(
            matches!(gone, watcher::Event::Delete(s) if s.metadata.namespace == Some(namespace))
        );
    }

    /// A call for `edge-1` to watch `namespaces`.
    fn watch_call(namespaces: &[String]) -> Call {
        Call {
            cluster: "edge-1".parse().unwrap(),
            id: new_id(),
            body: crate::member::pull::messages::CallBody::Watch {
                namespaces: namespaces.iter().cloned().collect(),
                shard: 0,
                shards: 1,
                at_millis: 0,
            },
        }
    }

    #[test]
    fn a_call_larger_than_a_member_is_sent_is_refused_naming_its_cluster() {
        let small = watch_call(&["team-a".into()]);
        assert!(encode(&small).unwrap().len() <= MAX_MESSAGE);
        let many: Vec<String> = (0..MAX_MESSAGE / 8).map(|i| format!("ns-{i:07}")).collect();
        let error = encode(&watch_call(&many)).unwrap_err();
        assert!(
            matches!(&error, LinkError::TooLarge { kib, max_kib, .. } if kib > max_kib),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains("cluster edge-1") && message.contains("make its values smaller"),
            "{message}"
        );
    }

    #[test]
    fn only_work_is_annotated_with_its_id_and_content() {
        let call = watch_call(&[]);
        let watch = call_secret("watch-0-1", "watch", &call, None);
        assert_eq!(watch.metadata.name.as_deref(), Some("watch-0-1"));
        assert_eq!(watch.metadata.labels.unwrap()[CALL_LABEL], "watch");
        assert_eq!(watch.metadata.annotations, None);
        assert_eq!(watch.data, None, "the signer fills it");
        let work = call_secret("work-x", "work", &call, Some("digest"));
        let annotations = work.metadata.annotations.unwrap();
        assert_eq!(
            (
                annotations[WORK_ID].as_str(),
                annotations[WORK_CONTENT].as_str()
            ),
            (call.id.as_str(), "digest")
        );
    }

    #[test]
    fn earlier_work_keeps_its_id_only_for_the_same_content_and_a_well_formed_id() {
        let id = new_id();
        let annotated = |id: &str, content: &str| ObjectMeta {
            annotations: Some(
                [
                    (WORK_ID.to_owned(), id.to_owned()),
                    (WORK_CONTENT.to_owned(), content.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        assert_eq!(same_work(&annotated(&id, "c1"), "c1"), Some(id.clone()));
        assert_eq!(same_work(&annotated(&id, "c1"), "c2"), None);
        assert_eq!(same_work(&annotated("not-an-id", "c1"), "c1"), None);
        assert_eq!(same_work(&ObjectMeta::default(), "c1"), None);
    }

    #[tokio::test]
    async fn a_look_from_the_cli_publishes_nothing_and_says_only_the_operator_signs() {
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let hub = PullHub::new(kube::Client::new(service, "default"), None, None);
        let error = hub
            .publish("watch-0-1", "watch", &watch_call(&[]))
            .await
            .unwrap_err();
        assert!(matches!(&error, LinkError::NotSigner { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .contains("cluster edge-1 is a pull member")
        );
    }
}
