//! The agent in a pull member: renews its Lease on the hub, carries out the calls the hub signed for its cluster through the same member link a push member has (Helm executor, release records, watches, drift checks), and reports back through its outbox.
//!
//! Each release's work runs one at a time, newest first: a call replaced while the agent was
//! away is never run. A call runs once: its answer, kept on the hub, says it ran; an answer lost
//! with a restart while the hub was out of reach is made good by the member's own release
//! records, which show the work's spec deployed by its owner (no second revision). While the hub
//! cannot be reached, what runs keeps running and drift of releases whose drift detection is
//! `enabled` is repaired here, from the last work the hub signed.

pub(crate) mod login;
pub(crate) mod observer;
pub mod outbox;

use std::{path::PathBuf, sync::Arc, time::Duration};

use dashmap::DashMap;
use futures::StreamExt as _;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::watcher,
};
use tokio_util::sync::CancellationToken;

use crate::{
    api::crd::DriftMode,
    api::key::ReleaseKey,
    api::member_cluster::{AGENT_LEASE, pull_namespace},
    member::link::{DriftCheck, MemberLink},
    member::pull::agent::observer::Wanted,
    member::pull::agent::outbox::Outbox,
    member::pull::charts,
    member::pull::messages::{
        AGENT_MANAGER, AgentStatus, Answer, CALL_LABEL, Call, CallBody, Replied, Reply,
        STATUS_NAME, answer_name, lease, reply_name,
    },
    member::pull::watching::{WatchCalls, is_watch_name},
    member::pull::wire::AgentConfig,
    observe::relist::relisting_watcher,
    plan::{Applied, ChartSource, Job},
    queue::Outcome,
};

/// How often a cut-off agent looks for drift to repair itself.
const LOCAL_DRIFT_EVERY: Duration = Duration::from_secs(30);

/// One agent: its hub client and configuration, and the link to its own cluster.
pub(crate) struct Agent {
    hub: kube::Client,
    config: AgentConfig,
    local: Arc<dyn MemberLink>,
    /// Where fetched chart archives are kept.
    charts: PathBuf,
    /// How long its Lease holds without renewal.
    lease_seconds: i32,
    outbox: Arc<Outbox>,
    wanted: Arc<Wanted>,
    /// The hub's watch calls, one per shard of its Controllers: `wanted` is their union.
    watches: std::sync::Mutex<WatchCalls>,
    /// The newest call seen per release, and the id of the last one run.
    newest: DashMap<ReleaseKey, Call>,
    ran: DashMap<ReleaseKey, String>,
    /// One runner per release at a time.
    running: DashMap<ReleaseKey, Arc<tokio::sync::Mutex<()>>>,
}

impl Agent {
    /// An agent of `config.cluster` reaching the hub with `hub` and its own cluster with `local`.
    pub(crate) fn new(
        hub: kube::Client,
        config: AgentConfig,
        local: Arc<dyn MemberLink>,
        charts: PathBuf,
        lease_seconds: i32,
        namespace_records: usize,
    ) -> Arc<Self> {
        let secrets = Api::namespaced(hub.clone(), &pull_namespace(&config.cluster));
        Arc::new(Self {
            hub,
            outbox: Outbox::limited(secrets, namespace_records),
            config,
            local,
            charts,
            lease_seconds,
            wanted: Wanted::new(),
            watches: Default::default(),
            newest: DashMap::new(),
            ran: DashMap::new(),
            running: DashMap::new(),
        })
    }

    fn namespace(&self) -> String {
        pull_namespace(&self.config.cluster)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.hub.clone(), &self.namespace())
    }

    /// Runs until `stop`.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let cluster = self.config.cluster.clone();
        tracing::info!(%cluster, namespace = self.namespace(), "agent started");
        let tasks = tokio_util::task::TaskTracker::new();
        tasks.spawn(self.outbox.clone().run(stop.clone()));
        tasks.spawn(self.clone().renew(stop.clone()));
        tasks.spawn(self.clone().report_status(stop.clone()));
        tasks.spawn(observer::observe(
            cluster.clone(),
            self.local.clone(),
            self.wanted.clone(),
            self.outbox.clone(),
            stop.clone(),
        ));
        for managed in [true, false] {
            tasks.spawn(observer::records(
                cluster.clone(),
                self.local.clone(),
                managed,
                self.config.seal.clone(),
                self.outbox.clone(),
                stop.clone(),
            ));
        }
        tasks.spawn(self.clone().repair_while_cut_off(stop.clone()));
        self.clone().serve(stop.clone()).await;
        tasks.close();
        tasks.wait().await;
        tracing::info!(%cluster, waiting = self.outbox.waiting(), "agent stopped");
    }

    /// Renews the Lease at a third of its duration.
    async fn renew(self: Arc<Self>, stop: CancellationToken) {
        let leases: Api<Lease> = Api::namespaced(self.hub.clone(), &self.namespace());
        let every = Duration::from_secs(u64::try_from(self.lease_seconds / 3).unwrap_or(1).max(1));
        loop {
            let lease = lease(&self.config.cluster, self.lease_seconds);
            let params = PatchParams::apply(AGENT_MANAGER).force();
            let renewed = tokio::time::timeout(
                crate::api::HUB_WRITE_TIMEOUT,
                leases.patch(AGENT_LEASE, &params, &Patch::Apply(&lease)),
            )
            .await;
            if !matches!(renewed, Ok(Ok(_))) {
                tracing::warn!(cluster = %self.config.cluster, "could not renew the agent's Lease on the hub; what runs keeps running");
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Reports the agent's version and what its cluster serves, at start and hourly.
    async fn report_status(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let serves = self.local.capabilities().await;
            let status = AgentStatus {
                cluster: Some(self.config.cluster.clone()),
                version: env!("CARGO_PKG_VERSION").into(),
                kube_version: serves.kube_version,
                api_versions: serves.api_versions,
                problem: None,
            };
            self.outbox.put(STATUS_NAME.into(), "status", &status);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
            }
        }
    }

    /// Follows the calls in the member's hub namespace and carries out each signed one.
    async fn serve(self: Arc<Self>, stop: CancellationToken) {
        self.learn_what_ran().await;
        let config =
            watcher::Config::default().labels(&format!("{CALL_LABEL} in (work,ask,watch)"));
        let mut calls = relisting_watcher(self.secrets(), config).boxed();
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = calls.next() => event,
            };
            let Some(event) = event else { return };
            match event {
                Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                    self.take(&secret);
                }
                Ok(watcher::Event::Delete(secret)) if is_watch_name(&secret.name_any()) => {
                    let mut watches = self.watches.lock().expect("watch calls lock");
                    watches.remove(&secret.name_any());
                    self.wanted.set(watches.wanted());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "the hub's calls watch broke; it lists again")
                }
            }
        }
    }

    /// Which work already ran: the answers the hub holds.
    async fn learn_what_ran(&self) {
        let params = kube::api::ListParams::default().labels(&format!(
            "{}=answer",
            crate::member::pull::messages::REPORT_LABEL
        ));
        let Ok(answers) = self.secrets().list(&params).await else {
            return;
        };
        for secret in answers {
            let answer = secret
                .data
                .as_ref()
                .and_then(|d| d.get(crate::member::pull::messages::REPORT_KEY))
                .and_then(|b| serde_json::from_slice::<Answer>(&b.0).ok());
            if let Some(a) = answer.filter(|a| a.cluster == self.config.cluster) {
                self.ran.insert(a.key, a.id);
            }
        }
    }

    /// Opens one call: only a call signed by the hub for this cluster is carried out.
    fn take(self: &Arc<Self>, secret: &Secret) {
        let name = secret.name_any();
        let empty = Default::default();
        let call = match Call::open(&self.config, &name, secret.data.as_ref().unwrap_or(&empty)) {
            Ok(call) => call,
            Err(e) => {
                tracing::warn!(cluster = %self.config.cluster, error = %e, "a call was refused");
                return;
            }
        };
        match &call.body {
            CallBody::Watch { .. } => {
                let Some(watched) = call.watched().filter(|_| is_watch_name(&name)) else {
                    tracing::warn!(cluster = %self.config.cluster, name, "a watch call under another name was refused");
                    return;
                };
                let mut watches = self.watches.lock().expect("watch calls lock");
                watches.take(&name, watched);
                self.wanted.set(watches.wanted());
            }
            CallBody::Work { job, .. } => {
                let key = job.key().clone();
                if job.key().scope.cluster != self.config.cluster {
                    tracing::warn!(%key, "a call for another cluster's release was refused");
                    return;
                }
                if self.ran.get(&key).is_some_and(|id| *id == call.id) {
                    return;
                }
                self.newest.insert(key.clone(), call);
                tokio::spawn(self.clone().work(key));
            }
            CallBody::Drift(_) | CallBody::Manifest { .. } => {
                tokio::spawn(self.clone().reply(call));
            }
        }
    }

    /// Runs the newest work of `key`, unless it ran already.
    async fn work(self: Arc<Self>, key: ReleaseKey) {
        let lock = self.running.entry(key.clone()).or_default().clone();
        let _turn = lock.lock().await;
        let Some(call) = self.newest.get(&key).map(|c| c.clone()) else {
            return;
        };
        if self.ran.get(&key).is_some_and(|id| *id == call.id) {
            return;
        }
        let CallBody::Work { job, chart } = call.body else {
            return;
        };
        // Nothing known of this release since the agent started: its records may show the work
        // done by a run whose answer never reached the hub.
        let held = match self.ran.contains_key(&key) {
            true => None,
            false => (self.local.list_releases().await.ok())
                .and_then(|releases| already_done(&job, releases.get(&key))),
        };
        let outcome = match held {
            Some(outcome) => {
                tracing::info!(%key, id = call.id, "the member's records show this work done; not run again");
                outcome
            }
            None => self.carry_out(job, chart.as_ref()).await,
        };
        tracing::info!(%key, id = call.id, ?outcome, "work carried out");
        self.ran.insert(key.clone(), call.id.clone());
        let answer = Answer {
            cluster: self.config.cluster.clone(),
            key: key.clone(),
            id: call.id,
            outcome,
        };
        self.outbox.put(answer_name(&key), "answer", &answer);
    }

    /// Fetches the job's chart and runs it in the member.
    async fn carry_out(
        &self,
        job: Job,
        chart: Option<&crate::member::pull::messages::ChartRef>,
    ) -> Outcome {
        match self.localize(job, chart).await {
            Ok(job) => {
                let masked = match &job {
                    Job::Apply { release, .. } => release.masked.clone(),
                    _ => Default::default(),
                };
                self.local.execute(job).await.masked(&masked)
            }
            Err(outcome) => outcome,
        }
    }

    /// The job with its chart fetched to local disk.
    async fn localize(
        &self,
        mut job: Job,
        chart: Option<&crate::member::pull::messages::ChartRef>,
    ) -> Result<Job, Outcome> {
        if let (Job::Apply { release, .. }, Some(chart)) = (&mut job, chart) {
            let path = charts::fetch(&self.secrets(), &self.namespace(), chart, &self.charts)
                .await
                .map_err(|e| {
                    Outcome::failed(e.to_string(), crate::queue::FailureKind::Transient)
                })?;
            release.source = ChartSource::Directory(path);
        }
        Ok(job)
    }

    /// Answers one ask.
    async fn reply(self: Arc<Self>, call: Call) {
        let reply = match call.body {
            CallBody::Drift(check) => Reply::Drift(
                self.local
                    .check_drift(check)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            CallBody::Manifest { key, revision } => Reply::Manifest(
                self.local
                    .manifest(key, revision)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            _ => return,
        };
        let replied = Replied {
            cluster: self.config.cluster.clone(),
            id: call.id.clone(),
            reply,
        };
        self.outbox.put(reply_name(&call.id), "reply", &replied);
    }

    /// While the hub does not take the agent's reports, looks for drift of the releases whose
    /// last work asked for repairs and applies that work again where it drifted.
    async fn repair_while_cut_off(self: Arc<Self>, stop: CancellationToken) {
        let mut reachable = self.outbox.reachable();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LOCAL_DRIFT_EVERY) => {}
                _ = reachable.changed() => continue,
            }
            if *reachable.borrow() {
                continue;
            }
            let repairable: Vec<Call> = self
                .newest
                .iter()
                .filter(|c| matches!(&c.body, CallBody::Work { job: Job::Apply { release, .. }, .. } if release.drift.mode == DriftMode::Enabled))
                .map(|c| c.clone())
                .collect();
            for call in repairable {
                self.repair(call).await;
            }
        }
    }

    async fn repair(&self, call: Call) {
        let CallBody::Work {
            job: Job::Apply { release, .. },
            chart,
        } = call.body
        else {
            return;
        };
        let Some(revision) = self
            .local
            .list_releases()
            .await
            .ok()
            .and_then(|r| r.get(&release.key).map(|applied| applied.revision))
        else {
            return;
        };
        let check = DriftCheck {
            key: release.key.clone(),
            revision,
            identity: release.identity.clone(),
            ignore: release.drift.ignore.clone(),
            compare: true,
            health: Vec::new(),
        };
        let Ok(checked) = self.local.check_drift(check).await else {
            return;
        };
        let Some(first) = checked.drift.first() else {
            return;
        };
        let what = format!(
            "{} {} drifted while the hub was out of reach",
            first.id.kind, first.id.name
        );
        tracing::info!(key = %release.key, what, "repairing drift locally");
        let job = Job::Apply {
            adopt: false,
            release,
            stale_pending: None,
            repair: Some(what),
            installing: false,
            attempt: 0,
        };
        if let Ok(job) = self.localize(job, chart.as_ref()).await {
            let _ = self.local.execute(job).await;
        }
    }
}

/// What a work call's job already achieved in the member, judged on the release's newest record
/// there: an apply (not a repair, nothing pending to clear) whose spec that deployed revision was
/// made from, by the same owner (the record's seal vouches for both). None when it must run.
fn already_done(job: &Job, applied: Option<&Applied>) -> Option<Outcome> {
    let Job::Apply {
        release,
        stale_pending: None,
        repair: None,
        adopt: false,
        ..
    } = job
    else {
        return None;
    };
    let applied = applied?;
    let same = applied.owner.as_ref() == Some(&release.owner)
        && applied.spec_hash.as_deref() == Some(release.spec_hash.as_str())
        && applied.status == "deployed";
    same.then(|| Outcome::Applied {
        adopted_from: None,
        revision: applied.revision,
        chart_version: release.version.clone().unwrap_or_default(),
        tests: Vec::new(),
        crds: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{OwnerId, Release};

    fn release() -> Release {
        Release {
            health: Vec::new(),
            adoption: Default::default(),
            commit: None,
            masked: Default::default(),
            post_render: None,
            credentials: Default::default(),
            verified: None,
            key: "edge-1/team/web".parse().unwrap(),
            owner: OwnerId {
                namespace: "team".into(),
                name: "web".into(),
            },
            chart_name: "deployment-example".into(),
            source: ChartSource::Directory("/charts/deployment-example".into()),
            version: Some("0.1.0".into()),
            chart_digest: None,
            settings: vec![],
            values: None,
            rollback_on_failure: false,
            spec_hash: "0123456789abcdef".into(),
            identity: None,
            drift: Default::default(),
            helm: Default::default(),
        }
    }

    fn applied(owner: &str, hash: &str, status: &str) -> Applied {
        Applied {
            key: "edge-1/team/web".parse().unwrap(),
            owner: Some(OwnerId {
                namespace: "team".into(),
                name: owner.into(),
            }),
            spec_hash: Some(hash.into()),
            revision: 4,
            status: status.into(),
            modified_at: None,
        }
    }

    fn apply(repair: Option<&str>) -> Job {
        Job::Apply {
            adopt: false,
            release: Box::new(release()),
            stale_pending: None,
            repair: repair.map(String::from),
            installing: false,
            attempt: 0,
        }
    }

    #[test]
    fn work_whose_spec_is_deployed_by_its_owner_is_answered_from_the_records() {
        let done = already_done(
            &apply(None),
            Some(&applied("web", "0123456789abcdef", "deployed")),
        );
        assert_eq!(
            done,
            Some(Outcome::Applied {
                adopted_from: None,
                revision: 4,
                chart_version: "0.1.0".into(),
                tests: Vec::new(),
                crds: None,
            })
        );
    }

    #[test]
    fn work_runs_when_the_records_show_another_spec_owner_or_state() {
        for (owner, hash, status) in [
            ("web", "fedcba9876543210", "deployed"),
            ("other", "0123456789abcdef", "deployed"),
            ("web", "0123456789abcdef", "failed"),
            ("web", "0123456789abcdef", "pending-upgrade"),
        ] {
            let record = applied(owner, hash, status);
            assert_eq!(
                already_done(&apply(None), Some(&record)),
                None,
                "{record:?}"
            );
        }
        assert_eq!(already_done(&apply(None), None), None);
        let unowned = Applied {
            owner: None,
            ..applied("web", "0123456789abcdef", "deployed")
        };
        assert_eq!(already_done(&apply(None), Some(&unowned)), None);
    }

    #[test]
    fn repairs_and_uninstalls_always_run() {
        let record = applied("web", "0123456789abcdef", "deployed");
        assert_eq!(
            already_done(&apply(Some("Deployment/web drifted")), Some(&record)),
            None
        );
        let uninstall = Job::Uninstall {
            key: "edge-1/team/web".parse().unwrap(),
            owner: release().owner,
            identity: None,
            settings: Default::default(),
        };
        assert_eq!(already_done(&uninstall, Some(&record)), None);
    }
}
