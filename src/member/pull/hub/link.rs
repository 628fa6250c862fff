//! A pull member as the hub reaches it: every [`MemberLink`] call becomes a signed call in the member's hub namespace and waits for its agent's report, so nothing above the seam knows the member is pulled.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::{FutureExt as _, StreamExt as _, future::BoxFuture};
use k8s_openapi::api::core::v1::Secret;
use kube::{core::PartialObjectMetaExt as _, runtime::watcher};
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use crate::{
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
    clusters::registry::Health,
    helm::{args::RenderFor, sdk::HelmExecutor},
    member::error::{self, LinkError},
    member::link::{DriftCheck, MemberLink},
    member::pull::charts,
    member::pull::hub::{LOOK_EVERY, Member, PullHub},
    member::pull::messages::{Call, CallBody, ChartRef, Reply, ask_name, new_id, reply_name},
    member::pull::watching::watch_name,
    observe::drift,
    observe::model::{Change, WorkloadKind},
    observe::records::{self, RecordEvents},
    observe::release_check::Checked,
    observe::releases,
    observe::watch::{ClusterWatch, ShardShares},
    plan::{Applied, ChartSource, Job, Release},
    queue::{FailureKind, Outcome, Started},
};

/// How long a Helm job's answer may take once published to a live agent, unless the operator
/// is told otherwise (`--pull-answer-within`). The answer is awaited without holding a Helm
/// worker, so the bound is on how long a release stays in flight, not on the hub's work.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(10 * 60);
/// How long a job's outcome waits for the agent's records to show it.
const SETTLE_WITHIN: Duration = Duration::from_secs(10);
/// What an agent's reply to a check says, bounded as any hostile input: its health report is
/// cut to the listed few objects, with short names and reasons.
fn checked_of(
    key: &ReleaseKey,
    cluster: ClusterName,
    reply: Result<Reply, LinkError>,
) -> drift::Result<Checked> {
    let agent = |reason: String| drift::Error::Agent {
        key: key.clone(),
        reason,
    };
    match reply {
        Ok(Reply::Drift(found)) => found.map_err(agent).map(|mut checked| {
            checked.health = checked.health.bounded();
            checked
        }),
        Ok(_) => Err(agent(LinkError::WrongReply { cluster }.to_string())),
        Err(e) => Err(agent(e.to_string())),
    }
}

/// How long a drift check or a manifest read may take.
const REPLY_WITHIN: Duration = Duration::from_secs(60);

/// A member whose agent pulls its work from the hub.
pub(crate) struct PullLink {
    cluster: ClusterName,
    hub: Arc<PullHub>,
    /// The operator's executor, whose chart cache holds remote charts; none for a link that
    /// only looks.
    executor: Option<Arc<HelmExecutor>>,
    /// How long a job's answer may take once published.
    answer_within: Duration,
}

impl PullLink {
    /// The link of pull member `cluster` through `hub`, waiting `answer_within` for each job's
    /// answer.
    pub(crate) fn new(
        cluster: ClusterName,
        hub: Arc<PullHub>,
        executor: Option<Arc<HelmExecutor>>,
        answer_within: Duration,
    ) -> Self {
        Self {
            cluster,
            hub,
            executor,
            answer_within,
        }
    }
}

/// Why `member`'s agent cannot be counted on now, if it cannot.
fn away(cluster: &ClusterName, member: &Member) -> Option<LinkError> {
    member.read(|r| {
        if r.live() {
            return None;
        }
        let cluster = cluster.clone();
        Some(match r.expires() {
            Some(at) => LinkError::AgentAway {
                cluster,
                since: at.to_string(),
            },
            None => LinkError::NoAgent { cluster },
        })
    })
}

impl MemberLink for PullLink {
    fn cluster(&self) -> &ClusterName {
        &self.cluster
    }

    fn execute(&self, job: Job) -> BoxFuture<'static, Outcome> {
        let start = self.start(job);
        async move { start.await.outcome().await }.boxed()
    }

    /// Publishes the job's chart and call (what holds a Helm worker), then hands back the
    /// agent's answer to await, within the link's deadline.
    fn start(&self, job: Job) -> BoxFuture<'static, Started> {
        let (hub, cluster, executor) = (
            self.hub.clone(),
            self.cluster.clone(),
            self.executor.clone(),
        );
        // A chart entry asking Helm for longer than the link waits gets its time, and two minutes.
        let within = crate::helm::settings::asked_timeout(&job).map_or(self.answer_within, |t| {
            self.answer_within.max(t + Duration::from_secs(120))
        });
        async move {
            let key = job.key().clone();
            if let Job::Apply { adopt: true, .. } = &job {
                return Started::Finished(adoption_refused(&key));
            }
            let chart = match &job {
                Job::Apply { release, .. } => {
                    match publish_chart(&hub, &cluster, executor.as_deref(), release).await {
                        Ok(chart) => Some(chart),
                        Err(outcome) => return Started::Finished(outcome),
                    }
                }
                _ => None,
            };
            let content = serde_json::to_vec(&(&job, &chart)).unwrap_or_default();
            let content: String = Sha256::digest(&content)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let mut call = Call {
                cluster: cluster.clone(),
                id: String::new(),
                body: CallBody::Work { job, chart },
            };
            let id = match hub.publish_work(&key, &content, &mut call).await {
                Ok(id) => id,
                Err(e) => {
                    return Started::Finished(Outcome::failed(
                        e.to_string(),
                        FailureKind::Transient,
                    ));
                }
            };
            let answer = async move { wait_answer(&hub, &cluster, &key, &id, within).await };
            Started::Awaiting(answer.boxed())
        }
        .boxed()
    }

    fn release_records(&self, selector: &str) -> RecordEvents {
        let managed = selector == records::MANAGED_SELECTOR;
        let member = self.hub.member(&self.cluster);
        let changed = member.subscribe();
        futures::stream::unfold(
            (member, changed, None::<Arc<Vec<_>>>),
            move |(member, mut changed, last)| async move {
                loop {
                    let now = member.read(|r| r.records[usize::from(!managed)].clone());
                    if let Some(now) = now
                        && !last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &now))
                    {
                        let mut events = vec![Ok(watcher::Event::Init)];
                        events.extend(now.iter().map(|meta| {
                            Ok(watcher::Event::InitApply(
                                meta.clone().into_response_partial::<Secret>(),
                            ))
                        }));
                        events.push(Ok(watcher::Event::InitDone));
                        return Some((futures::stream::iter(events), (member, changed, Some(now))));
                    }
                    changed.changed().await.ok()?;
                }
            },
        )
        .flatten()
        .boxed()
    }

    fn watch_workloads(&self, watch: ClusterWatch) -> BoxFuture<'static, ()> {
        follow_workloads(self.hub.clone(), watch).boxed()
    }

    fn check_drift(&self, check: DriftCheck) -> BoxFuture<'static, drift::Result<Checked>> {
        let (hub, cluster) = (self.hub.clone(), self.cluster.clone());
        async move {
            let key = check.key.clone();
            let reply = ask(&hub, &cluster, CallBody::Drift(check)).await;
            checked_of(&key, cluster, reply)
        }
        .boxed()
    }

    fn probe(&self) -> BoxFuture<'static, Health> {
        let (hub, cluster) = (self.hub.clone(), self.cluster.clone());
        async move {
            let read = hub.read_now(&cluster).await;
            let member = hub.member(&cluster);
            let error = read
                .err()
                .or_else(|| away(&cluster, &member))
                .map(|e| e.to_string());
            Health {
                cluster: cluster.to_string(),
                context: "pull (agent)".into(),
                reachable: error.is_none(),
                version: member.read(|r| r.status.as_ref().and_then(|s| s.kube_version.clone())),
                error,
            }
        }
        .boxed()
    }

    fn list_releases(&self) -> BoxFuture<'static, error::Result<HashMap<ReleaseKey, Applied>>> {
        let (hub, cluster) = (self.hub.clone(), self.cluster.clone());
        async move {
            hub.read_now(&cluster).await?;
            let member = hub.member(&cluster);
            let [managed, foreign] = member.read(|r| r.records.clone());
            let (Some(managed), Some(foreign)) = (managed, foreign) else {
                return Err(LinkError::NotReported { cluster });
            };
            let partial = |list: &[_]| -> Vec<records::Record> {
                list.iter()
                    .map(
                        |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                            m.clone().into_response_partial::<Secret>()
                        },
                    )
                    .collect()
            };
            Ok(releases::newest_of(
                &cluster,
                &partial(&managed),
                &partial(&foreign),
            ))
        }
        .boxed()
    }

    fn manifest(
        &self,
        key: ReleaseKey,
        revision: i64,
    ) -> BoxFuture<'static, error::Result<Option<records::Deployed>>> {
        let (hub, cluster) = (self.hub.clone(), self.cluster.clone());
        async move {
            let reply = ask(&hub, &cluster, CallBody::Manifest { key, revision }).await?;
            manifest_of(cluster, reply)
        }
        .boxed()
    }

    fn capabilities(&self) -> BoxFuture<'static, RenderFor> {
        let (hub, cluster) = (self.hub.clone(), self.cluster.clone());
        async move {
            let _ = hub.read_now(&cluster).await;
            let status = hub
                .member(&cluster)
                .read(|r| r.status.clone())
                .unwrap_or_default();
            RenderFor {
                kube_version: status.kube_version,
                api_versions: status.api_versions,
                is_upgrade: false,
            }
        }
        .boxed()
    }
}

/// Publishes the chart of `release` for `cluster`'s agent: a chart-home directory packed, a
/// remote chart as the hub's cache holds it.
async fn publish_chart(
    hub: &PullHub,
    cluster: &ClusterName,
    executor: Option<&HelmExecutor>,
    release: &Release,
) -> Result<ChartRef, Outcome> {
    let archive = match &release.source {
        ChartSource::Directory(path) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || charts::pack(&path))
                .await
                .map_err(|e| Outcome::failed(e.to_string(), FailureKind::Transient))?
                .map_err(|e| Outcome::failed(e.to_string(), FailureKind::Permanent))?
        }
        _ => {
            let checkout = executor.and_then(|e| e.checkout(release)).ok_or_else(|| {
                Outcome::failed(
                    format!(
                        "chart {} {} is not in the hub's chart cache yet; it is sent to pull member {cluster} once fetched",
                        release.chart_name,
                        release.version.as_deref().unwrap_or("(any version)")
                    ),
                    FailureKind::Transient,
                )
            })?;
            tokio::fs::read(checkout.path())
                .await
                .map_err(|e| Outcome::failed(e.to_string(), FailureKind::Transient))?
        }
    };
    let namespace = crate::api::member_cluster::pull_namespace(cluster);
    charts::publish(
        &hub.secrets(cluster),
        &namespace,
        &release.chart_name,
        &archive,
    )
    .await
    .map_err(|e| {
        let kind = match e {
            charts::Error::TooLarge { .. } => FailureKind::Permanent,
            _ => FailureKind::Transient,
        };
        Outcome::failed(e.to_string(), kind)
    })
}

/// Waits for the answer to the work `id` of `key`, as long as the agent is there and `within`
/// at most.
async fn wait_answer(
    hub: &PullHub,
    cluster: &ClusterName,
    key: &ReleaseKey,
    id: &str,
    within: Duration,
) -> Outcome {
    hub.listed_first().await;
    let member = hub.member(cluster);
    let mut changed = member.subscribe();
    let deadline = Instant::now() + within;
    loop {
        let answer = member.read(|r| r.answers.get(key).filter(|a| a.id == id).cloned());
        if let Some(answer) = answer {
            hub.answered(key, id);
            // As with a push member, what the job did shows in the release records before its
            // outcome is taken, so the next plan never sees the release as it was.
            settle(&member, key, &answer.outcome).await;
            return answer.outcome;
        }
        if let Some(why) = away(cluster, &member) {
            return Outcome::failed(why.to_string(), FailureKind::Unavailable);
        }
        if Instant::now() >= deadline {
            return unanswered(cluster, key, within);
        }
        let _ = tokio::time::timeout(LOOK_EVERY, changed.changed()).await;
    }
}

/// The failure of a job whose answer did not come `within` its deadline from an agent that
/// renews its Lease.
fn unanswered(cluster: &ClusterName, key: &ReleaseKey, within: Duration) -> Outcome {
    Outcome::failed(
        format!(
            "the agent of pull member {cluster} renews its Lease but did not answer the work for release {key} within {} s: see the agent's log in cluster {cluster} (is it stuck, or another version?) and restart it; the work is tried again with backoff",
            within.as_secs()
        ),
        FailureKind::Transient,
    )
}

/// Waits, within [`SETTLE_WITHIN`], until the agent's records report shows what `outcome` did
/// to `key`: its new revision, or its records gone.
async fn settle(member: &Member, key: &ReleaseKey, outcome: &Outcome) {
    let shows = |r: &crate::member::pull::hub::held::Reports| {
        let Some(records) = &r.records[0] else {
            return false;
        };
        let mut revisions = records.iter().filter(|m| {
            m.namespace.as_deref() == Some(key.scope.namespace.as_str())
                && m.labels.as_ref().and_then(|l| l.get("name")) == Some(&key.release)
        });
        match outcome {
            Outcome::Applied { revision, .. } => revisions.any(|m| {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get("version")?.parse::<i64>().ok())
                    .is_some_and(|v| v >= *revision)
            }),
            Outcome::Uninstalled => revisions.next().is_none(),
            Outcome::Failed { .. } => true,
        }
    };
    let mut changed = member.subscribe();
    let deadline = Instant::now() + SETTLE_WITHIN;
    while !member.read(shows) && Instant::now() < deadline {
        let _ = tokio::time::timeout(LOOK_EVERY, changed.changed()).await;
    }
}

/// The manifest `cluster`'s agent replied with, or why there is none.
fn manifest_of(cluster: ClusterName, reply: Reply) -> error::Result<Option<records::Deployed>> {
    match reply {
        Reply::Manifest(found) => found.map_err(|reason| LinkError::Agent { cluster, reason }),
        Reply::Drift(_) => Err(LinkError::WrongReply { cluster }),
    }
}

/// Publishes an ask and waits for its reply; both are deleted afterwards.
async fn ask(hub: &PullHub, cluster: &ClusterName, body: CallBody) -> error::Result<Reply> {
    hub.read_now(cluster).await?;
    if let Some(why) = away(cluster, &hub.member(cluster)) {
        return Err(why);
    }
    let id = new_id();
    let call = Call {
        cluster: cluster.clone(),
        id: id.clone(),
        body,
    };
    hub.expect(cluster, &reply_name(&id), true);
    if let Err(e) = hub.publish(&ask_name(&id), "ask", &call).await {
        hub.expect(cluster, &reply_name(&id), false);
        return Err(e);
    }
    let member = hub.member(cluster);
    let mut changed = member.subscribe();
    let deadline = Instant::now() + REPLY_WITHIN;
    let reply = loop {
        hub.read_now(cluster).await?;
        if let Some(reply) = member.read(|r| r.replies.get(&id).cloned()) {
            break Ok(reply);
        }
        if Instant::now() >= deadline {
            break Err(LinkError::Timeout {
                cluster: cluster.clone(),
                within: REPLY_WITHIN,
            });
        }
        let _ = tokio::time::timeout(LOOK_EVERY, changed.changed()).await;
    };
    hub.expect(cluster, &reply_name(&id), false);
    member.write(|r| r.replied(&id));
    hub.remove(cluster, &ask_name(&id)).await;
    hub.remove(cluster, &reply_name(&id)).await;
    reply
}

/// Tells the agent which namespaces to watch, one call per shard led here (so replicas leading
/// other shards write calls of their own), and passes on what it reports of them as relists,
/// tagged with their cluster/namespace; while the agent is away, each is lost.
async fn follow_workloads(hub: Arc<PullHub>, watch: ClusterWatch) {
    let cluster = watch.cluster.clone();
    let member = hub.member(&cluster);
    let (mut changed, mut grown) = (member.subscribe(), watch.grown.clone());
    let mut published: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut lost = false;
    hub.listed_first().await;
    loop {
        let wanted = watch.namespaces.read().expect("namespaces lock").clone();
        tell_what_to_watch(&hub, &cluster, &watch.shares, &mut published).await;
        let mut changes = Vec::new();
        match away(&cluster, &member) {
            Some(why) if !lost => {
                lost = true;
                seen.clear();
                changes.extend(
                    wanted
                        .iter()
                        .map(|ns| (ns.clone(), Change::Lost(why.to_string()))),
                );
            }
            Some(_) => {}
            None => {
                lost = false;
                let fresh = member.read(|r| {
                    wanted
                        .iter()
                        .filter_map(|ns| {
                            let (version, observed) = r.observed.get(ns)?;
                            (seen.get(ns) != Some(version)).then(|| (*version, observed.clone()))
                        })
                        .collect::<Vec<_>>()
                });
                for (version, observed) in fresh {
                    seen.insert(observed.namespace.clone(), version);
                    changes.extend(relist(&observed));
                }
            }
        }
        for (namespace, change) in changes {
            let Ok(scope) = ClusterNamespace::new(cluster.clone(), &namespace) else {
                continue;
            };
            if watch.events.send((scope, change)).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = watch.stop.cancelled() => return,
            _ = changed.changed() => {}
            _ = grown.changed() => {}
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Writes the watch call of each shard led here whose namespaces in `cluster` differ from what
/// `published` holds; forgets the shards no longer led here, writing nothing for them (their
/// new leader writes their call).
async fn tell_what_to_watch(
    hub: &PullHub,
    cluster: &ClusterName,
    shares: &ShardShares,
    published: &mut BTreeMap<u32, BTreeSet<String>>,
) {
    let led = shares.shards.led();
    let total = shares.shards.total();
    published.retain(|shard, _| led.contains(shard));
    let by_shard = shares.by_shard.read().expect("shares lock").clone();
    for shard in led {
        let namespaces = by_shard.get(&shard).cloned().unwrap_or_default();
        if published.get(&shard) == Some(&namespaces) {
            continue;
        }
        let call = Call {
            cluster: cluster.clone(),
            id: new_id(),
            body: CallBody::Watch {
                namespaces: namespaces.clone(),
                shard,
                shards: total,
                at_millis: now_millis(),
            },
        };
        match hub.publish(&watch_name(shard, total), "watch", &call).await {
            Ok(()) => {
                published.insert(shard, namespaces);
            }
            Err(e) => {
                tracing::warn!(%cluster, shard, error = %e, "could not tell the agent what to watch")
            }
        }
    }
}

/// Milliseconds since the epoch now, by this host's clock.
fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One namespace's report as the relists a watch would give.
fn relist(observed: &crate::member::pull::messages::Observed) -> Vec<(String, Change)> {
    let ns = &observed.namespace;
    let mut changes = vec![(ns.clone(), Change::PodsListed(observed.pods.clone()))];
    for kind in [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
    ] {
        let of_kind = observed
            .workloads
            .iter()
            .filter(|w| w.id.kind == kind)
            .cloned()
            .collect();
        changes.push((ns.clone(), Change::WorkloadsListed(kind, of_kind)));
    }
    if let Some(problem) = &observed.problem {
        changes.push((ns.clone(), Change::Lost(problem.clone())));
    }
    changes
}

/// The outcome of an adoption asked of a pull member: not carried out there. The agent would
/// have to check the release's existing objects as the policy's identity and let its executor read
/// one unsealed record, and the hub could not see what it checked; refused until it can.
fn adoption_refused(key: &crate::api::key::ReleaseKey) -> Outcome {
    Outcome::failed(
        format!(
            "adopting release {key} is not done on pull members: the hub cannot check there that the existing release is within the policy's identity; uninstall it there and let the Controller install it, or deliver to this cluster as a push member"
        ),
        FailureKind::Permanent,
    )
}

#[cfg(test)]
mod tests;
