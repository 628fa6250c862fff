//! The hub's side of every pull member at once: one watch of all agents' reports and one of their Leases (a constant number of streams whatever the number of members), what each member last reported, and the publishing of signed calls.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use futures::StreamExt as _;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::watcher,
};
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    api::member_cluster::{AGENT_LEASE, pull_namespace},
    member::pull::messages::{
        AgentStatus, Answer, CALL_LABEL, Call, MAX_MESSAGE, Observed, REPORT_KEY, REPORT_LABEL,
        RecordsReport, Replied, Reply, STATUS_NAME, answer_name,
    },
    member::pull::wire::Signer,
    observe::relist::relisting_watcher,
};

/// What one member's agent last reported.
#[derive(Default)]
pub(crate) struct Reports {
    /// Work answers, by release.
    pub(crate) answers: HashMap<ReleaseKey, Answer>,
    /// Replies to asks, by id.
    pub(crate) replies: HashMap<String, Reply>,
    /// Records reports: managed, then foreign.
    pub(crate) records: [Option<Arc<Vec<ObjectMeta>>>; 2],
    /// Observations, by namespace, each with the count of its updates.
    pub(crate) observed: HashMap<String, (u64, Arc<Observed>)>,
    /// The agent's own report.
    pub(crate) status: Option<AgentStatus>,
    /// When the agent last renewed its Lease, and for how long.
    pub(crate) renewed: Option<(Timestamp, i64)>,
    /// Bumped on every change, for the waiters.
    pub(crate) version: u64,
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
}

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
    fn write(&self, f: impl FnOnce(&mut Reports)) {
        let version = {
            let mut reports = self.reports.lock().expect("reports lock");
            f(&mut reports);
            reports.version += 1;
            reports.version
        };
        self.changed.send_replace(version);
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
}

impl PullHub {
    /// The hub side reached with `client`, signing with `signer`.
    pub(crate) fn new(client: kube::Client, signer: Option<Signer>) -> Arc<Self> {
        Arc::new(Self {
            client,
            signer,
            members: DashMap::new(),
            pending: DashMap::new(),
            following: AtomicBool::new(false),
            listed: watch::Sender::new([false; 2]),
            writes: Semaphore::new(WRITES_IN_FLIGHT),
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
    pub(crate) async fn publish(&self, name: &str, kind: &str, call: &Call) -> Result<(), String> {
        let signer = self.signer.as_ref().ok_or_else(|| {
            format!(
                "cluster {} is a pull member: only the operator signs its calls",
                call.cluster
            )
        })?;
        let bytes = serde_json::to_vec(call).map_err(|e| e.to_string())?;
        if bytes.len() > MAX_MESSAGE {
            return Err(format!(
                "the call for cluster {} is {} KiB, more than the {} KiB a pull member is sent; make its values smaller",
                call.cluster,
                bytes.len() / 1024,
                MAX_MESSAGE / 1024
            ));
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some([(CALL_LABEL.to_owned(), kind.to_owned())].into()),
                ..Default::default()
            },
            data: Some(signer.sign(bytes)),
            ..Default::default()
        };
        let params = PatchParams::apply("tenancy-hub").force();
        let _permit = self.writes.acquire().await.expect("never closed");
        self.secrets(&call.cluster)
            .patch(name, &params, &Patch::Apply(&secret))
            .await
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "publishing {name} for cluster {} in hub namespace {}: {e}",
                    call.cluster,
                    pull_namespace(&call.cluster)
                )
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

    /// The id to publish the work of `key` under: the unanswered one of the same content when
    /// there is one (so an agent away meanwhile runs it once), else a new one.
    pub(crate) fn work_id(&self, key: &ReleaseKey, content: &str) -> String {
        if let Some(pending) = self.pending.get(key)
            && pending.1 == content
        {
            return pending.0.clone();
        }
        let id = crate::member::pull::messages::new_id();
        self.pending
            .insert(key.clone(), (id.clone(), content.to_owned()));
        id
    }

    /// Forgets the pending work of `key` once answered.
    pub(crate) fn answered(&self, key: &ReleaseKey, id: &str) {
        self.pending.remove_if(key, |_, (pending, _)| pending == id);
    }

    /// Reads `cluster`'s reports and Lease now, unless [`PullHub::run`] follows them already:
    /// what a look from the CLI sees.
    pub(crate) async fn read_now(&self, cluster: &ClusterName) -> Result<(), String> {
        if self.following.load(Ordering::Relaxed) {
            self.listed_first().await;
            return Ok(());
        }
        let namespace = pull_namespace(cluster);
        let hub = |e: kube::Error| {
            format!("reading pull member {cluster}'s reports in hub namespace {namespace}: {e}")
        };
        let params = kube::api::ListParams::default().labels(REPORT_LABEL);
        for secret in self.secrets(cluster).list(&params).await.map_err(hub)? {
            self.take_report(&secret, false);
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

    /// Follows every agent's reports and Leases until `stop`.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        self.following.store(true, Ordering::Relaxed);
        let reports = Api::<Secret>::all(self.client.clone());
        let leases = Api::<Lease>::all(self.client.clone());
        let reports = relisting_watcher(reports, watcher::Config::default().labels(REPORT_LABEL));
        let leases = relisting_watcher(
            leases,
            watcher::Config::default().fields(&format!("metadata.name={AGENT_LEASE}")),
        );
        let this = self.clone();
        let follow_reports = reports.for_each(|event| {
            if let Ok(event) = event {
                if matches!(event, watcher::Event::InitDone) {
                    this.listed.send_modify(|l| l[0] = true);
                }
                this.on_report(event);
            }
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

    fn on_report(&self, event: watcher::Event<Secret>) {
        match event {
            watcher::Event::Apply(secret) | watcher::Event::InitApply(secret) => {
                self.take_report(&secret, false);
            }
            watcher::Event::Delete(secret) => self.take_report(&secret, true),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
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

    /// Takes one report Secret in, when it is in the namespace of the cluster it names.
    fn take_report(&self, secret: &Secret, deleted: bool) {
        let (Some(namespace), name) = (secret.namespace(), secret.name_any()) else {
            return;
        };
        let kind = secret
            .labels()
            .get(REPORT_LABEL)
            .cloned()
            .unwrap_or_default();
        let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(REPORT_KEY)) else {
            return;
        };
        let bytes = &bytes.0;
        let in_place = |cluster: &ClusterName| pull_namespace(cluster) == namespace;
        match kind.as_str() {
            "answer" => {
                if let Some(a) = decode::<Answer>(bytes).filter(|a| {
                    in_place(&a.cluster)
                        && a.key.scope.cluster == a.cluster
                        && answer_name(&a.key) == name
                }) {
                    let key = a.key.clone();
                    self.member(&a.cluster).write(|r| {
                        if deleted {
                            r.answers.remove(&key);
                        } else {
                            r.answers.insert(key, a.clone());
                        }
                    });
                }
            }
            "reply" => {
                if let Some(a) = decode::<Replied>(bytes).filter(|a| in_place(&a.cluster)) {
                    self.member(&a.cluster).write(|r| {
                        if deleted {
                            r.replies.remove(&a.id);
                        } else {
                            r.replies.insert(a.id.clone(), a.reply.clone());
                        }
                    });
                }
            }
            "records" => {
                if let Some(a) = decode::<RecordsReport>(bytes).filter(|a| in_place(&a.cluster)) {
                    let managed = a.selector == crate::observe::records::MANAGED_SELECTOR;
                    let records = (!deleted).then(|| Arc::new(a.records.clone()));
                    self.member(&a.cluster)
                        .write(|r| r.records[usize::from(!managed)] = records);
                }
            }
            "observed" => {
                if let Some(a) = decode::<Observed>(bytes).filter(|a| in_place(&a.cluster)) {
                    let cluster = a.cluster.clone();
                    self.member(&cluster).write(|r| {
                        if deleted {
                            r.observed.remove(&a.namespace);
                        } else {
                            let count = r.version + 1;
                            r.observed.insert(a.namespace.clone(), (count, Arc::new(a)));
                        }
                    });
                }
            }
            "status" if name == STATUS_NAME => {
                if let Some(a) = decode::<AgentStatus>(bytes)
                    && let Some(cluster) = a.cluster.clone().filter(|c| in_place(c))
                {
                    self.member(&cluster)
                        .write(|r| r.status = (!deleted).then_some(a));
                }
            }
            _ => {}
        }
    }
}

/// A report's JSON, within bounds; None when it is not one.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    if bytes.len() > MAX_MESSAGE {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// How long a look at a member waits at most for the first list of every agent's Lease and
/// reports after the operator starts.
const LISTED_WITHIN: Duration = Duration::from_secs(30);

/// How long a waiter sleeps at most between looks at the agent's Lease.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(2);
