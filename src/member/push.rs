//! A member reached from the hub: the clients of its registration-file entry run Helm, watch its records and workloads, read its live objects and probe it.

use std::{collections::HashMap, sync::Arc};

use futures::{FutureExt as _, future::BoxFuture};
use k8s_openapi::{
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{APIGroupList, APIVersions},
};
use kube::Api;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    clusters::registry::{self, Health, Member},
    helm::{args::RenderFor, sdk::HelmExecutor},
    member::error::{self, LinkError},
    member::link::{DriftCheck, MemberLink},
    observe::drift,
    observe::records::{self, RecordEvents},
    observe::release_check::{self, Asked, Checked, Kinds},
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

    fn check_drift(&self, check: DriftCheck) -> BoxFuture<'static, drift::Result<Checked>> {
        let (client, kinds) = (self.member.client.clone(), self.kinds.clone());
        async move {
            let health = kinds
                .compiled
                .rules(&check.health)
                .map_err(|e| drift::Error::Health {
                    key: check.key.clone(),
                    reason: e.to_string(),
                })?;
            let asked = Asked {
                compare: check.compare,
                ignore: &check.ignore,
                health: &health,
            };
            release_check::check(
                &client,
                check.identity.as_ref(),
                &kinds,
                (&check.key, check.revision),
                asked,
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
            let core = client.list_core_api_versions().await.ok();
            let groups = client.list_api_groups().await.ok();
            render_for(kube_version, core, groups)
        }
        .boxed()
    }
}

/// What rendering offline as for a cluster needs, from what its API server said: its version,
/// and the API versions of its core group and of its other groups (each when it answered).
fn render_for(
    kube_version: Option<String>,
    core: Option<APIVersions>,
    groups: Option<APIGroupList>,
) -> RenderFor {
    let mut api_versions = core.map(|core| core.versions).unwrap_or_default();
    api_versions.extend(groups.into_iter().flat_map(|groups| {
        groups
            .groups
            .into_iter()
            .flat_map(|g| g.versions.into_iter().map(|v| v.group_version))
    }));
    RenderFor {
        kube_version,
        api_versions,
        is_upgrade: false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use http::{Request, Response};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, GroupVersionForDiscovery};
    use kube::client::Body;
    use tower_test::mock::Handle;

    use super::*;
    use crate::clusters::registry::ClusterEntry;

    /// The link of `member-1` that only looks, its API server played by the returned handle.
    fn looking() -> (PushLink, Handle<Request<Body>, Response<Body>>) {
        let (service, server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let name: ClusterName = "member-1".parse().unwrap();
        let member = Member {
            entry: ClusterEntry {
                name: name.clone(),
                context: name.to_string(),
                kubeconfig: None,
                labels: Default::default(),
                variables: Default::default(),
            },
            kubeconfig: PathBuf::new(),
            kubeconfig_digest: None,
            client: kube::Client::new(service, "default"),
        };
        let link = PushLink::new(Arc::new(member), None, Arc::default());
        (link, server)
    }

    /// Answers the next request with `status` and `body`, returning its path and query.
    async fn answer(
        server: &mut Handle<Request<Body>, Response<Body>>,
        status: u16,
        body: serde_json::Value,
    ) -> String {
        let (request, send) = server.next_request().await.expect("a request");
        let mut response = Response::new(Body::from(serde_json::to_vec(&body).unwrap()));
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        send.send_response(response);
        request.uri().to_string()
    }

    /// The API server's refusal: `code`, for `reason`.
    fn refused(code: u16, reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code
        })
    }

    #[tokio::test]
    async fn a_link_that_only_looks_runs_no_job_and_says_where_jobs_run() {
        let (link, _server) = looking();
        let outcome = link
            .execute(crate::member::fake::apply("member-1/team-a/web", "h"))
            .await;
        let Outcome::Failed { message, kind } = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(kind, FailureKind::Permanent);
        assert!(
            message.contains("cluster member-1 is linked only to look at it"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn releases_that_may_not_be_listed_are_forbidden_naming_the_cluster() {
        let (link, mut server) = looking();
        let listed = tokio::spawn(link.list_releases());
        let asked = answer(
            &mut server,
            403,
            refused(403, "Forbidden", "secrets is forbidden"),
        )
        .await;
        assert!(asked.starts_with("/api/v1/secrets?"), "{asked}");
        assert!(asked.contains("labelSelector="), "{asked}");
        let error = listed.await.unwrap().unwrap_err();
        assert!(matches!(&error, LinkError::Forbidden { .. }), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("listing the release records of cluster member-1")
                && message.contains("secrets is forbidden"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_manifest_is_read_from_its_revisions_record_and_a_record_without_one_is_named() {
        let (link, mut server) = looking();
        let key: ReleaseKey = "member-1/team-a/web".parse().unwrap();
        let gone = tokio::spawn(link.manifest(key.clone(), 3));
        let asked = answer(&mut server, 404, refused(404, "NotFound", "not found")).await;
        assert_eq!(
            asked,
            "/api/v1/namespaces/team-a/secrets/sh.helm.release.v1.web.v3"
        );
        assert_eq!(gone.await.unwrap().unwrap(), None);

        let empty = tokio::spawn(link.manifest(key, 4));
        let record = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "sh.helm.release.v1.web.v4", "namespace": "team-a"}
        });
        answer(&mut server, 200, record).await;
        let error = empty.await.unwrap().unwrap_err();
        assert!(matches!(&error, LinkError::Record { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            "release member-1/team-a/web: release record sh.helm.release.v1.web.v4 holds no release"
        );
    }

    #[test]
    fn capabilities_hold_the_core_and_group_versions_the_api_server_told() {
        let groups = APIGroupList {
            groups: vec![APIGroup {
                name: "apps".into(),
                versions: vec![GroupVersionForDiscovery {
                    group_version: "apps/v1".into(),
                    version: "v1".into(),
                }],
                preferred_version: None,
                server_address_by_client_cidrs: None,
            }],
        };
        let core = APIVersions {
            versions: vec!["v1".into()],
            server_address_by_client_cidrs: vec![],
        };
        let all = render_for(Some("v1.36.0".into()), Some(core), Some(groups.clone()));
        assert_eq!(all.kube_version.as_deref(), Some("v1.36.0"));
        assert_eq!(all.api_versions, ["v1", "apps/v1"]);
        assert!(!all.is_upgrade);
        let unanswered = render_for(None, None, Some(groups));
        assert_eq!(
            (unanswered.kube_version, unanswered.api_versions),
            (None, vec!["apps/v1".to_owned()])
        );
    }
}
