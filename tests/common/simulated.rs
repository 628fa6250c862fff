//! Simulated pull members for the scale envelope: each acts on the real hub API server as its own agent ServiceAccount, with the crate's own protocol types, call opening and outbox; only the cluster behind it is made up.
//!
//! A simulated member renews its Lease as the agent does, reports its status and release records
//! at start, answers each signed work call with an `Applied` outcome and a sealed record of the new
//! revision in its records report (a piece and the `records-managed` manifest) (what the hub waits for before it takes the outcome),
//! replies to each drift check that nothing drifted, and reports [`PODS_PER_RELEASE`] ready pods and one Deployment per release in each namespace the
//! hub's watch call names. It runs no Helm, fetches no chart and has no API server of its own.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        coordination::v1::Lease,
        core::v1::{Secret, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, ResourceExt as _,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt as _, watcher},
};
use sha2::{Digest as _, Sha256};
use tenancy_hub::{
    api::{
        key::{ClusterName, ReleaseKey},
        member_cluster::{
            AGENT_ACCOUNT, AGENT_CONFIG_SECRET, AGENT_LEASE, MemberCluster, MemberClusterSpec,
            pull_namespace,
        },
    },
    helm::seal::Sealed,
    member::pull::{
        agent::outbox::Outbox,
        messages::{
            AGENT_MANAGER, AgentStatus, Answer, CALL_LABEL, Call, Observed, STATUS_NAME, Work,
            answer_name, lease, observed_name, reply_name,
        },
        watching::WatchCalls,
        wire::AgentConfig,
    },
    observe::model::{PodInfo, WorkloadInfo, WorkloadKind, WorkloadRef},
    plan::OwnerId,
    queue::Outcome,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::lab::Lab;

/// Ready pods each release shows in its member (one Deployment of that many replicas).
pub const PODS_PER_RELEASE: usize = 3;
/// Seconds a simulated member's Lease holds: the agent's default (`--lease-seconds`).
pub const LEASE_SECONDS: i32 = 60;
/// How many members join at once.
const JOIN_AT_ONCE: usize = 16;
/// How long a member's enrollment may take to show.
const ENROLLED_WITHIN: Duration = Duration::from_secs(600);

/// The simulated members, each with its own hub identity and tasks, until [`Fleet::stop`].
pub struct Fleet {
    members: Vec<Arc<Member>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

/// One simulated member.
struct Member {
    config: AgentConfig,
    client: Client,
    outbox: Arc<Outbox>,
    errors: Arc<Mutex<Vec<String>>>,
    state: Mutex<State>,
}

/// What one simulated member holds.
#[derive(Default)]
struct State {
    /// The newest record of each release deployed in it.
    records: BTreeMap<ReleaseKey, ObjectMeta>,
    /// The id of the last work call answered for each release.
    answered: BTreeMap<ReleaseKey, String>,
    /// The hub's watch calls, one per shard; it watches their union.
    watches: WatchCalls,
    /// The namespaces the hub asked it to watch.
    watched: BTreeSet<String>,
    /// The record pieces last written: managed, then foreign.
    pieces: [BTreeSet<String>; 2],
    /// How many of each release's pods it reports not ready (0: all ready).
    unready: usize,
}

/// Creates the `MemberCluster` of each of `names`, labelled by `labels` of its index, as
/// `tenancy-hub cluster add --pull` does; the operator enrolls them.
pub async fn add(
    admin: &Client,
    names: &[String],
    labels: impl Fn(usize) -> BTreeMap<String, String>,
) {
    let api: Api<MemberCluster> = Api::all(admin.clone());
    let creates = names.iter().enumerate().map(|(i, name)| {
        let member = MemberCluster::new(
            name,
            MemberClusterSpec {
                labels: labels(i),
                ..Default::default()
            },
        );
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &member)
                .await
                .map(|_| ())
        }
    });
    futures::stream::iter(creates)
        .buffer_unordered(JOIN_AT_ONCE)
        .try_collect::<Vec<()>>()
        .await
        .expect("the hub takes the MemberClusters");
}

impl Fleet {
    /// Joins each of `names` (added with [`add`]) once the operator has enrolled it: its
    /// configuration read, a token of its own agent ServiceAccount from the TokenRequest API, and
    /// its tasks started at once; [`JOIN_AT_ONCE`] at a time.
    pub async fn join(lab: &Lab, admin: &Client, names: &[String]) -> Self {
        Self::join_serving(lab, admin, names, true).await
    }

    /// Like [`Fleet::join`], but the members never answer a call: each renews its Lease and
    /// reports its status and (empty) records, and leaves the hub's work unanswered.
    #[allow(dead_code)] // used by some test crates only
    pub async fn join_silent(lab: &Lab, admin: &Client, names: &[String]) -> Self {
        Self::join_serving(lab, admin, names, false).await
    }

    async fn join_serving(lab: &Lab, admin: &Client, names: &[String], serving: bool) -> Self {
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        // Each member starts as soon as it has joined, as agents come up one by one.
        let joins = names.iter().map(|name| {
            let (errors, stop, tasks) = (errors.clone(), stop.clone(), tasks.clone());
            async move {
                let member = Member::join(lab, admin, name, errors).await;
                tasks.spawn(member.outbox.clone().run(stop.clone()));
                tasks.spawn(member.clone().renew(stop.clone()));
                if serving {
                    tasks.spawn(member.clone().serve(stop));
                }
                member
            }
        });
        // In the order of `names`, so a test's member i is the one it names at i.
        let members: Vec<Arc<Member>> = futures::stream::iter(joins)
            .buffered(JOIN_AT_ONCE)
            .collect()
            .await;
        Self {
            members,
            errors,
            stop,
            tasks,
        }
    }

    /// What went wrong so far: calls refused, Leases not renewed, watches broken.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// How many members have answered work for release `release` of `namespace`.
    pub fn answered(&self, namespace: &str, release: &str) -> usize {
        self.members
            .iter()
            .filter(|m| {
                let state = m.state.lock().unwrap();
                state
                    .answered
                    .keys()
                    .any(|k| k.scope.namespace == namespace && k.release == release)
            })
            .count()
    }

    /// Has member `member` report, beside its own records, a record of revision 1 of `key`
    /// sealed with its own key and claiming `owner`, as its agent's identity may.
    #[allow(dead_code)] // used by some test crates only
    pub fn forge_record(&self, member: usize, key: &ReleaseKey, owner: &OwnerId) {
        let member = &self.members[member];
        let work = Work {
            key: key.clone(),
            owner: owner.clone(),
            uninstall: false,
            spec_hash: Some("forged".into()),
            chart_version: None,
        };
        let records = {
            let mut state = member.state.lock().unwrap();
            state.records.insert(key.clone(), member.record(&work, 1));
            state.records.values().cloned().collect()
        };
        member.report_records(true, records);
    }

    /// Has each member of `members` (by index) report `unready` of each release's pods not
    /// ready, in every namespace the hub has it watch, as a member's pods failing their probes
    /// would; the reports go out through each member's outbox.
    #[allow(dead_code)] // used by some test crates only
    pub fn unready_pods(&self, members: std::ops::Range<usize>, unready: usize) {
        for member in &self.members[members] {
            let watched = {
                let mut state = member.state.lock().unwrap();
                state.unready = unready.min(PODS_PER_RELEASE);
                state.watched.clone()
            };
            watched.iter().for_each(|ns| member.report_observed(ns));
        }
    }

    /// Reports not yet on the hub, over every member.
    pub fn waiting(&self) -> usize {
        self.members.iter().map(|m| m.outbox.waiting()).sum()
    }

    /// Stops every member's tasks and waits for them.
    pub async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Member {
    /// Waits for `name`'s enrollment, then logs in as its agent and reports its status and
    /// (empty) release records.
    async fn join(
        lab: &Lab,
        admin: &Client,
        name: &str,
        errors: Arc<Mutex<Vec<String>>>,
    ) -> Arc<Self> {
        let cluster: ClusterName = name.parse().unwrap();
        let namespace = pull_namespace(&cluster);
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), &namespace);
        let written = kube::runtime::wait::await_condition(
            secrets,
            AGENT_CONFIG_SECRET,
            |s: Option<&Secret>| s.is_some(),
        );
        let config = tokio::time::timeout(ENROLLED_WITHIN, written)
            .await
            .unwrap_or_else(|_| panic!("member {name} not enrolled within {ENROLLED_WITHIN:?}"))
            .unwrap()
            .and_then(|s| s.data)
            .expect("the agent's configuration has data");
        let config = AgentConfig::from_data(&config).unwrap();
        let client = agent_client(lab, admin, &namespace).await;
        let outbox = Outbox::new(Api::namespaced(client.clone(), &namespace));
        let member = Arc::new(Self {
            config,
            client,
            outbox,
            errors,
            state: Mutex::default(),
        });
        member.report_start();
        member
    }

    fn cluster(&self) -> &ClusterName {
        &self.config.cluster
    }

    fn error(&self, what: String) {
        self.errors
            .lock()
            .unwrap()
            .push(format!("{}: {what}", self.cluster()));
    }

    /// The agent's status and its empty records, managed and foreign.
    fn report_start(&self) {
        let status = AgentStatus {
            cluster: Some(self.cluster().clone()),
            version: env!("CARGO_PKG_VERSION").into(),
            kube_version: Some("v1.36.0".into()),
            ..Default::default()
        };
        self.outbox.put(STATUS_NAME.into(), "status", &status);
        for managed in [true, false] {
            self.report_records(managed, Vec::new());
        }
    }

    fn report_records(&self, managed: bool, records: Vec<ObjectMeta>) {
        let mut state = self.state.lock().unwrap();
        let written = &mut state.pieces[usize::from(!managed)];
        self.outbox
            .put_records(self.cluster(), managed, records, |_| true, written);
    }

    /// Renews the Lease at a third of its duration, as the agent does, until `stop`.
    async fn renew(self: Arc<Self>, stop: CancellationToken) {
        let leases: Api<Lease> =
            Api::namespaced(self.client.clone(), &pull_namespace(self.cluster()));
        let params = PatchParams::apply(AGENT_MANAGER).force();
        let mut every = tokio::time::interval(Duration::from_secs(LEASE_SECONDS as u64 / 3));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            let renewal = lease(self.cluster(), LEASE_SECONDS);
            if let Err(e) = leases
                .patch(AGENT_LEASE, &params, &Patch::Apply(&renewal))
                .await
            {
                self.error(format!("renewing the Lease: {e}"));
            }
        }
    }

    /// Follows the calls of the member's hub namespace and takes each, until `stop`.
    async fn serve(self: Arc<Self>, stop: CancellationToken) {
        let secrets: Api<Secret> =
            Api::namespaced(self.client.clone(), &pull_namespace(self.cluster()));
        let config =
            watcher::Config::default().labels(&format!("{CALL_LABEL} in (work,ask,watch)"));
        let mut calls = watcher(secrets, config).default_backoff().boxed();
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = calls.next() => event,
            };
            match event {
                Some(Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s))) => self.take(&s),
                Some(Ok(_)) => {}
                Some(Err(e)) => self.error(format!("the calls watch broke: {e}")),
                None => return,
            }
        }
    }

    /// Opens one call as the agent does (signed by the hub, for this member) and answers it.
    fn take(&self, secret: &Secret) {
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let call = match Call::open(&self.config, &secret.name_any(), data) {
            Ok(call) => call,
            Err(e) => return self.error(format!("a call was refused: {e}")),
        };
        if let Some(watched) = call.watched() {
            let namespaces = {
                let mut state = self.state.lock().unwrap();
                state.watches.take(&secret.name_any(), watched);
                state.watched = state.watches.wanted();
                state.watched.clone()
            };
            namespaces.iter().for_each(|ns| self.report_observed(ns));
        }
        if let Some(work) = call.work() {
            self.answer(call.id(), work);
        }
        if let Some(reply) = call.nothing_drifted() {
            self.outbox.put(reply_name(call.id()), "reply", &reply);
        }
    }

    /// Carries out `work` on paper: a new sealed record (or none, for an uninstall), reported
    /// with the answer.
    fn answer(&self, id: &str, work: Work) {
        let (outcome, records, watched) = {
            let mut state = self.state.lock().unwrap();
            if state.answered.get(&work.key).is_some_and(|a| a == id) {
                return;
            }
            let outcome = if work.uninstall {
                state.records.remove(&work.key);
                Outcome::Uninstalled
            } else {
                let revision = state.records.get(&work.key).map_or(0, revision) + 1;
                let record = self.record(&work, revision);
                state.records.insert(work.key.clone(), record);
                Outcome::Applied {
                    adopted_from: None,
                    revision,
                    chart_version: work.chart_version.clone().unwrap_or_default(),
                    tests: Vec::new(),
                    crds: None,
                }
            };
            state.answered.insert(work.key.clone(), id.to_owned());
            let records = state.records.values().cloned().collect();
            (
                outcome,
                records,
                state.watched.contains(&work.key.scope.namespace),
            )
        };
        self.report_records(true, records);
        let answer = Answer {
            cluster: self.cluster().clone(),
            key: work.key.clone(),
            id: id.to_owned(),
            outcome,
        };
        self.outbox.put(answer_name(&work.key), "answer", &answer);
        if watched {
            self.report_observed(&work.key.scope.namespace);
        }
    }

    /// The metadata of the record Helm would write for revision `revision` of `work`, sealed
    /// with the member's own key.
    fn record(&self, work: &Work, revision: i64) -> ObjectMeta {
        let (namespace, release) = (&work.key.scope.namespace, &work.key.release);
        let digest = Sha256::digest(format!("{}/{revision}", work.key));
        let content: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let sealed = Sealed {
            cluster: self.cluster().as_str(),
            namespace,
            release,
            revision,
            owner_namespace: &work.owner.namespace,
            owner_name: &work.owner.name,
            spec_hash: work.spec_hash.as_deref().unwrap_or_default(),
            content: &content,
        };
        ObjectMeta {
            name: Some(format!("sh.helm.release.v1.{release}.v{revision}")),
            namespace: Some(namespace.clone()),
            labels: Some(self.config.seal.record_labels(&sealed)),
            ..Default::default()
        }
    }

    /// Reports what runs in `namespace`: one Deployment of [`PODS_PER_RELEASE`] pods per
    /// release deployed there, all ready but the first `unready` (see [`Fleet::unready_pods`]).
    fn report_observed(&self, namespace: &str) {
        let (releases, unready): (Vec<String>, usize) = {
            let state = self.state.lock().unwrap();
            let releases = state
                .records
                .keys()
                .filter(|k| k.scope.namespace == namespace)
                .map(|k| k.release.clone())
                .collect();
            (releases, state.unready)
        };
        let id = |release: &str| WorkloadRef {
            kind: WorkloadKind::Deployment,
            name: release.to_owned(),
        };
        let replicas = PODS_PER_RELEASE as i32;
        let report = Observed {
            cluster: self.cluster().clone(),
            namespace: namespace.to_owned(),
            pods: releases
                .iter()
                .flat_map(|r| {
                    (0..PODS_PER_RELEASE).map(move |i| PodInfo {
                        name: format!("{r}-{i}"),
                        phase: "Running".into(),
                        ready: i >= unready,
                        restarts: 0,
                        reason: String::new(),
                        owner: Some(id(r)),
                    })
                })
                .collect(),
            workloads: releases
                .iter()
                .map(|r| WorkloadInfo {
                    id: id(r),
                    release: Some(r.clone()),
                    ready: replicas - unready as i32,
                    desired: replicas,
                    rolled_out: true,
                })
                .collect(),
            problem: None,
        };
        self.outbox
            .put(observed_name(namespace), "observed", &report);
    }
}

/// The revision a record's labels name.
fn revision(record: &ObjectMeta) -> i64 {
    record
        .labels
        .as_ref()
        .and_then(|l| l.get("version")?.parse().ok())
        .unwrap_or(0)
}

/// A client of the hub acting as the agent ServiceAccount of hub namespace `namespace`, with a
/// token of that account from the TokenRequest API (what a join's bootstrap exchange obtains);
/// the hub's address must be a loopback one.
async fn agent_client(lab: &Lab, admin: &Client, namespace: &str) -> Client {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(AGENT_ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token of {namespace}/{AGENT_ACCOUNT}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("a TokenRequest answers with a token");
    let options = kube::config::KubeConfigOptions {
        context: Some("hub".into()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(lab.kubeconfig.clone(), &options)
        .await
        .unwrap();
    let loopback = match config.cluster_url.host() {
        Some(host) => {
            host == "localhost"
                || host
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        None => false,
    };
    assert!(
        loopback,
        "the hub is not on a loopback address: {}",
        config.cluster_url
    );
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Client::try_from(config).unwrap()
}
