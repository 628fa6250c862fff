//! A member reached from the hub: the clients of its registration-file entry run Helm, watch its records and workloads, read its live objects and probe it.

use std::{collections::HashMap, sync::Arc};

use futures::{FutureExt as _, future::BoxFuture};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    clusters::registry::{self, Health, Member},
    helm::{args::RenderFor, sdk::HelmExecutor},
    member::error::{self, LinkError},
    member::link::{DriftCheck, MemberLink},
    observe::drift::{self, Kinds, ObjectDrift},
    observe::records::{self, RecordEvents},
    observe::releases,
    observe::watch::{self, ClusterWatch},
    plan::{Applied, Job},
    queue::{Executor as _, FailureKind, Outcome},
};

/// A member the hub holds a client for.
pub(crate) struct PushLink {
    member: Arc<Member>,
    /// Runs Helm jobs; none for a link that only looks.
    executor: Option<Arc<HelmExecutor>>,
    kinds: Arc<Kinds>,
}

impl PushLink {
    /// The link of `member`, running Helm with `executor` (none: it runs no job) and discovering
    /// kinds into `kinds`.
    pub(crate) fn new(
        member: Arc<Member>,
        executor: Option<Arc<HelmExecutor>>,
        kinds: Arc<Kinds>,
    ) -> Self {
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
        let Some(executor) = self.executor.clone() else {
            let message = format!(
                "cluster {} is linked only to look at it; Helm jobs run in the operator",
                self.cluster()
            );
            return futures::future::ready(Outcome::failed(message, FailureKind::Permanent))
                .boxed();
        };
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

    fn list_releases(&self) -> BoxFuture<'static, error::Result<HashMap<ReleaseKey, Applied>>> {
        let member = self.member.clone();
        async move {
            let cluster = &member.entry.name;
            releases::list(cluster, member.client.clone())
                .await
                .map_err(|e| {
                    LinkError::kube(
                        format!("listing the release records of cluster {cluster}"),
                        e,
                    )
                })
        }
        .boxed()
    }

    fn manifest(
        &self,
        key: ReleaseKey,
        revision: i64,
    ) -> BoxFuture<'static, error::Result<Option<records::Deployed>>> {
        let client = self.member.client.clone();
        async move {
            let api: Api<Secret> = Api::namespaced(client, &key.scope.namespace);
            let name = records::record_name(&key, revision);
            let secret = api.get_opt(&name).await.map_err(|e| {
                LinkError::kube(format!("reading release record {name} of {key}"), e)
            })?;
            secret
                .map(|secret| {
                    records::deployed_of(&name, &secret)
                        .map_err(|reason| LinkError::Record { key, reason })
                })
                .transpose()
        }
        .boxed()
    }

    fn capabilities(&self) -> BoxFuture<'static, RenderFor> {
        let client = self.member.client.clone();
        async move {
            let kube_version = client.apiserver_version().await.ok().map(|v| v.git_version);
            let mut api_versions = Vec::new();
            if let Ok(core) = client.list_core_api_versions().await {
                api_versions.extend(core.versions);
            }
            if let Ok(groups) = client.list_api_groups().await {
                api_versions.extend(
                    groups
                        .groups
                        .into_iter()
                        .flat_map(|g| g.versions.into_iter().map(|v| v.group_version)),
                );
            }
            RenderFor {
                kube_version,
                api_versions,
                is_upgrade: false,
            }
        }
        .boxed()
    }
}
