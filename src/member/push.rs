//! A member reached from the hub: the clients of its registration-file entry run Helm, watch its records and workloads, read its live objects and probe it.

use std::sync::Arc;

use futures::{FutureExt as _, future::BoxFuture};

use crate::{
    api::key::ClusterName,
    clusters::registry::{self, Health, Member},
    helm::sdk::HelmExecutor,
    member::{DriftCheck, MemberLink},
    observe::drift::{self, Kinds, ObjectDrift},
    observe::records::{self, RecordEvents},
    observe::watch::{self, ClusterWatch},
    plan::Job,
    queue::{Executor as _, Outcome},
};

/// A member the hub holds a client for.
pub(crate) struct PushLink {
    member: Arc<Member>,
    executor: Arc<HelmExecutor>,
    kinds: Arc<Kinds>,
}

impl PushLink {
    /// The link of `member`, running Helm with `executor` and discovering kinds into `kinds`.
    pub(crate) fn new(member: Arc<Member>, executor: Arc<HelmExecutor>, kinds: Arc<Kinds>) -> Self {
        Self {
            member,
            executor,
            kinds,
        }
    }
}

impl MemberLink for PushLink {
    fn cluster(&self) -> &ClusterName {
        &self.member.entry.name
    }

    fn execute(&self, job: Job) -> BoxFuture<'static, Outcome> {
        let executor = self.executor.clone();
        async move { executor.execute(job).await }.boxed()
    }

    fn release_records(&self, selector: &str) -> RecordEvents {
        records::record_events(self.member.client.clone(), selector)
    }

    fn watch_workloads(&self, watch: ClusterWatch) -> BoxFuture<'static, ()> {
        watch::watch_cluster(self.member.client.clone(), watch).boxed()
    }

    fn check_drift(
        &self,
        check: DriftCheck,
    ) -> BoxFuture<'static, drift::Result<Vec<ObjectDrift>>> {
        let (client, kinds) = (self.member.client.clone(), self.kinds.clone());
        async move {
            drift::check(
                &client,
                check.identity.as_ref(),
                &kinds,
                &check.key,
                check.revision,
                &check.ignore,
            )
            .await
        }
        .boxed()
    }

    fn probe(&self) -> BoxFuture<'static, Health> {
        let member = self.member.clone();
        async move { registry::probe(&member).await }.boxed()
    }
}
