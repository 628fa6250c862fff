//! The seam between the hub, which decides, and one member cluster, which carries out: typed work in (Helm jobs, drift checks, the namespaces to watch), typed observations out (release-record events, tagged pod and workload changes, reachability).
//!
//! Nothing above this module knows how a member is reached. [`push`] reaches it with clients the
//! hub holds (the registration file); a member whose agent connects out to the hub implements the
//! same [`MemberLink`].

pub(crate) mod error;
pub(crate) mod link;
pub mod pull;
pub(crate) mod push;

pub(crate) use link::{DriftCheck, MemberLink};

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::{
    api::crd::HUB_CLUSTER,
    api::key::ClusterName,
    clusters::registry::{ClusterRegistry, Health, Member, SharedRegistry},
    helm::{cli::unregistered, sdk::HelmExecutor},
    member::pull::{hub::PullHub, wire::Signer},
    observe::release_check::Kinds,
    observe::watch::{ClusterWatch, Observers},
    plan::Job,
    queue::{Executor, Outcome, Started},
};

/// The member links of every registered cluster, following the registry as it is reloaded.
#[derive(Clone)]
pub(crate) struct Links {
    registry: SharedRegistry,
    /// Runs Helm jobs; none for links that only look (the CLI's read commands).
    executor: Option<Arc<HelmExecutor>>,
    kinds: Arc<Kinds>,
    /// The hub's side of the pull members.
    pull: Option<Arc<PullHub>>,
    /// How long a pull member's answer to a job may take.
    answer_within: std::time::Duration,
    /// Links that take the place of the registry's, by cluster: tests' fakes.
    #[cfg(test)]
    fixed: Vec<Arc<dyn MemberLink>>,
}

impl Links {
    /// Links to the clusters of `registry`, running Helm jobs with `executor`, reaching pull
    /// members through `pull`, whose answers to jobs may take `answer_within`.
    pub(crate) fn new(
        registry: SharedRegistry,
        executor: Arc<HelmExecutor>,
        pull: Arc<PullHub>,
        answer_within: std::time::Duration,
    ) -> Self {
        Self {
            registry,
            executor: Some(executor),
            kinds: Arc::default(),
            pull: Some(pull),
            answer_within,
            #[cfg(test)]
            fixed: Vec::new(),
        }
    }

    /// Links to the clusters of `registry` that read and observe but run no Helm job: what the
    /// CLI's read commands (`diff`, `clusters`) look through. With `signer` (the operator's, for
    /// whoever may read its sealing key) they may also ask pull members' agents what they hold.
    pub(crate) fn looking(registry: ClusterRegistry, signer: Option<Signer>) -> Self {
        let hub = registry
            .get(&HUB_CLUSTER.parse().expect("the hub's name is valid"))
            .map(|hub| PullHub::new(hub.client.clone(), signer, None));
        Self {
            registry: Arc::new(arc_swap::ArcSwap::from_pointee(registry)),
            executor: None,
            kinds: Arc::default(),
            pull: hub,
            answer_within: pull::hub::link::ANSWER_WITHIN,
            #[cfg(test)]
            fixed: Vec::new(),
        }
    }

    /// The hub's side of the pull members, when there is one.
    pub(crate) fn pull_hub(&self) -> Option<Arc<PullHub>> {
        self.pull.clone()
    }

    /// The link of `cluster`, when it is registered (in the file, or joined).
    pub(crate) fn get(&self, cluster: &ClusterName) -> Option<Arc<dyn MemberLink>> {
        #[cfg(test)]
        if let Some(fixed) = self.fixed.iter().find(|l| l.cluster() == cluster) {
            return Some(fixed.clone());
        }
        let registry = self.registry.load();
        if let Some(member) = registry.get(cluster) {
            return Some(self.link(member.clone()));
        }
        registry.joined(cluster)?;
        self.pulled(cluster.clone())
    }

    /// The link of every registered cluster, the hub first, then the file's members, then the
    /// joined ones.
    pub(crate) fn all(&self) -> Vec<Arc<dyn MemberLink>> {
        let registry = self.registry.load();
        let pushed = registry.iter().map(|member| self.link(member.clone()));
        let pulled = registry
            .names()
            .into_iter()
            .filter(|name| registry.joined(name).is_some())
            .filter_map(|name| self.pulled(name));
        let all = pushed.chain(pulled);
        #[cfg(test)]
        let all = all.chain(self.fixed.iter().cloned());
        all.collect()
    }

    /// The link of a pull member.
    fn pulled(&self, cluster: ClusterName) -> Option<Arc<dyn MemberLink>> {
        let hub = self.pull.clone()?;
        Some(Arc::new(pull::hub::link::PullLink::new(
            cluster,
            hub,
            self.executor.clone(),
            self.answer_within,
        )))
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
        self.start(job).await.outcome().await
    }

    async fn start(&self, job: Job) -> Started {
        let masked = match &job {
            Job::Apply { release, .. } => release.masked.clone(),
            _ => Default::default(),
        };
        let started = match self.get(&job.key().scope.cluster) {
            Some(link) => link.start(job).await,
            None => Started::Finished(unregistered(job.key())),
        };
        // Helm's errors may quote values: what came from a Secret never goes further.
        started.map(move |outcome| outcome.masked(&masked))
    }
}

impl Observers for Links {
    fn knows(&self, cluster: &ClusterName) -> bool {
        #[cfg(test)]
        if self.fixed.iter().any(|l| l.cluster() == cluster) {
            return true;
        }
        let registry = self.registry.load();
        registry.get(cluster).is_some() || registry.joined(cluster).is_some()
    }

    fn watch(&self, watch: ClusterWatch) -> Option<BoxFuture<'static, ()>> {
        let link = self.get(&watch.cluster)?;
        Some(link.watch_workloads(watch))
    }
}

#[cfg(test)]
impl Links {
    /// Links to `fixed` alone (tests' fakes), running no Helm job elsewhere.
    pub(crate) fn fixed(fixed: Vec<Arc<dyn MemberLink>>) -> Self {
        Self {
            fixed,
            ..Self::looking(ClusterRegistry::default(), None)
        }
    }
}

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests;
