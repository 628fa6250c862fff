//! The seam between the hub, which decides, and one member cluster, which carries out: typed work in (Helm jobs, drift checks, the namespaces to watch), typed observations out (release-record events, tagged pod and workload changes, reachability).
//!
//! Nothing above this module knows how a member is reached. [`push`] reaches it with clients the
//! hub holds (the registration file); a member whose agent connects out to the hub implements the
//! same [`MemberLink`].

pub(crate) mod link;
pub mod pull;
pub(crate) mod push;

pub(crate) use link::{DriftCheck, MemberLink};

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::{
    api::key::ClusterName,
    clusters::registry::{ClusterRegistry, Health, Member, SharedRegistry},
    helm::{cli::unregistered, sdk::HelmExecutor},
    observe::drift::Kinds,
    observe::watch::{ClusterWatch, Observers},
    plan::Job,
    queue::{Executor, Outcome},
};

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
        let masked = match &job {
            Job::Apply { release, .. } => release.masked.clone(),
            _ => Default::default(),
        };
        let outcome = match self.get(&job.key().scope.cluster) {
            Some(link) => link.execute(job).await,
            None => unregistered(job.key()),
        };
        // Helm's errors may quote values: what came from a Secret never goes further.
        outcome.masked(&masked)
    }
}

impl Observers for Links {
    fn knows(&self, cluster: &ClusterName) -> bool {
        let registry = self.registry.load();
        registry.get(cluster).is_some() || registry.joined(cluster).is_some()
    }

    fn watch(&self, watch: ClusterWatch) -> Option<BoxFuture<'static, ()>> {
        let link = self.get(&watch.cluster)?;
        Some(link.watch_workloads(watch))
    }
}
