//! The seam between the hub, which decides, and one member cluster, which carries out: typed work in (Helm jobs, drift checks, the namespaces to watch), typed observations out (release-record events, tagged pod and workload changes, reachability).
//!
//! Nothing above this module knows how a member is reached. [`push`] reaches it with clients the
//! hub holds (the registration file); a member whose agent connects out to the hub implements the
//! same [`MemberLink`].

pub(crate) mod push;

use std::{collections::HashMap, sync::Arc};

use futures::future::BoxFuture;

use crate::{
    api::crd::DriftIgnore,
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    clusters::registry::{ClusterRegistry, Health, Member, SharedRegistry},
    helm::{args::RenderFor, cli::unregistered, sdk::HelmExecutor},
    observe::drift::{self, Kinds, ObjectDrift},
    observe::records::RecordEvents,
    observe::watch::{ClusterWatch, Observers},
    plan::{Applied, Job},
    queue::{Executor, Outcome},
};

/// One drift check the hub asks of a member: compare a release's revision with the live objects.
#[derive(Clone, Debug)]
pub(crate) struct DriftCheck {
    /// The release.
    pub(crate) key: ReleaseKey,
    /// The revision whose manifest is compared.
    pub(crate) revision: i64,
    /// Who reads the live objects (the policy's identity), or the operator itself.
    pub(crate) identity: Option<Impersonation>,
    /// Fields left out of the comparison.
    pub(crate) ignore: Vec<DriftIgnore>,
}

/// One member cluster as the hub reaches it. Every method returns an owned future or stream, so a
/// link can be a set of clients or a channel to an agent alike.
pub(crate) trait MemberLink: Send + Sync {
    /// The member's registered name.
    fn cluster(&self) -> &ClusterName;
    /// Carries out one Helm job there and tells how it went.
    fn execute(&self, job: Job) -> BoxFuture<'static, Outcome>;
    /// The events of its release records matching a label selector.
    fn release_records(&self, selector: &str) -> RecordEvents;
    /// The task that watches its pods and workloads as `watch` asks.
    fn watch_workloads(&self, watch: ClusterWatch) -> BoxFuture<'static, ()>;
    /// Compares a release's manifest with what runs.
    fn check_drift(&self, check: DriftCheck)
    -> BoxFuture<'static, drift::Result<Vec<ObjectDrift>>>;
    /// Whether its API server answers, and its version.
    fn probe(&self) -> BoxFuture<'static, Health>;
    /// Its releases, the newest record of each, read once: for a look that acts on nothing (the
    /// CLI's `diff`), which takes owners as the records' labels claim them.
    fn list_releases(&self) -> BoxFuture<'static, Result<HashMap<ReleaseKey, Applied>, String>>;
    /// The manifest of a release's `revision`, when its record is there.
    fn manifest(
        &self,
        key: ReleaseKey,
        revision: i64,
    ) -> BoxFuture<'static, Result<Option<String>, String>>;
    /// What rendering offline as for this cluster needs: its version and the API versions it
    /// serves (what it does not say is left out).
    fn capabilities(&self) -> BoxFuture<'static, RenderFor>;
}

/// The member links of every registered cluster, following the registry as it is reloaded.
#[derive(Clone)]
pub(crate) struct Links {
    registry: SharedRegistry,
    /// Runs Helm jobs; none for links that only look (the CLI's read commands).
    executor: Option<Arc<HelmExecutor>>,
    kinds: Arc<Kinds>,
}

impl Links {
    /// Links to the clusters of `registry`, running Helm jobs with `executor`.
    pub(crate) fn new(registry: SharedRegistry, executor: Arc<HelmExecutor>) -> Self {
        Self {
            registry,
            executor: Some(executor),
            kinds: Arc::default(),
        }
    }

    /// Links to the clusters of `registry` that read and observe but run no Helm job: what the
    /// CLI's read commands (`diff`, `clusters`) look through.
    pub(crate) fn looking(registry: ClusterRegistry) -> Self {
        Self {
            registry: Arc::new(arc_swap::ArcSwap::from_pointee(registry)),
            executor: None,
            kinds: Arc::default(),
        }
    }

    /// The link of `cluster`, when it is registered.
    pub(crate) fn get(&self, cluster: &ClusterName) -> Option<Arc<dyn MemberLink>> {
        let member = self.registry.load().get(cluster).cloned()?;
        Some(self.link(member))
    }

    /// The link of every registered cluster, the hub first.
    pub(crate) fn all(&self) -> Vec<Arc<dyn MemberLink>> {
        let registry = self.registry.load();
        registry
            .iter()
            .map(|member| self.link(member.clone()))
            .collect()
    }

    /// The link of a member reached with the hub's clients.
    fn link(&self, member: Arc<Member>) -> Arc<dyn MemberLink> {
        Arc::new(push::PushLink::new(
            member,
            self.executor.clone(),
            self.kinds.clone(),
        ))
    }

    /// Probes every registered cluster at once.
    pub(crate) async fn probe_all(&self) -> Vec<Health> {
        futures::future::join_all(self.all().iter().map(|link| link.probe())).await
    }
}

impl Executor for Links {
    async fn execute(&self, job: Job) -> Outcome {
        match self.get(&job.key().scope.cluster) {
            Some(link) => link.execute(job).await,
            None => unregistered(job.key()),
        }
    }
}

impl Observers for Links {
    fn knows(&self, cluster: &ClusterName) -> bool {
        self.registry.load().get(cluster).is_some()
    }

    fn watch(&self, watch: ClusterWatch) -> Option<BoxFuture<'static, ()>> {
        let link = self.get(&watch.cluster)?;
        Some(link.watch_workloads(watch))
    }
}
