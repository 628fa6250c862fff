//! Enrollment of pull members, kept by the operator while it works: for each `MemberCluster`, its hub namespace with the agent's and the bootstrap identities, their Roles and the agent's configuration; its status from the agent's Lease. The namespace is owned by the `MemberCluster`, so Kubernetes deletes it with it, which revokes every token of its agent.
//!
//! The objects are made when a `MemberCluster` is first seen by this process and every
//! [`REAPPLY_EVERY`] after (repairing hand edits); in between, a look at a member reads only the
//! Lease store, so an agent renewing its Lease costs the hub no request. Bound ServiceAccount
//! tokens die with their ServiceAccount, so the namespace's deletion revokes the agent's token and
//! any bootstrap token at once.
//!
//! Rights: the operator creates the namespace (create only, so no right to patch any other
//! namespace), then binds itself the ClusterRole [`objects::NAMESPACE_ROLE`] in it (a right it
//! holds as `bind` of that one ClusterRole), and applies the rest with that binding: it holds in
//! the member's namespace, and nowhere else, every right it grants the agent there, as
//! Kubernetes' escalation check requires.

pub(crate) mod objects;
pub(crate) mod status;

use std::{
    collections::HashMap,
    fmt::Debug,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::{
    api::{
        authentication::v1::SelfSubjectReview,
        authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        },
        coordination::v1::Lease,
        core::v1::Namespace,
        rbac::v1::{RoleBinding, Subject},
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, ObjectRef},
        watcher,
    },
};
use serde::{Serialize, de::DeserializeOwned};
use tokio_util::sync::CancellationToken;

use crate::{
    api::{
        key::ClusterName,
        member_cluster::{
            AGENT_LEASE, MEMBER_LABEL, MemberCluster, member_of_pull_namespace, pull_namespace,
        },
        shard::Shards,
    },
    clusters::registry::SharedRegistry,
    controller::enroll::{
        objects::{enrolled, is_members, subject_of},
        status::{REPORTS_TAKEN, Standing, look_again, reports_taken, status},
    },
    helm::seal::SealKey,
    member::pull::hub::PullHub,
};

/// The field manager of every object enrollment applies.
pub(crate) const FIELD_MANAGER: &str = "tenancy-hub";
/// How often a member's objects are applied again while it is enrolled.
pub(crate) const REAPPLY_EVERY: Duration = Duration::from_secs(600);
/// How long a RoleBinding the operator just made may take to reach the hub's authorizer.
const BINDING_SETTLES: Duration = Duration::from_secs(10);
/// How soon a member the registration file names is looked at again.
const FILE_NAME_RECHECK: Duration = Duration::from_secs(60);

/// What went wrong enrolling one pull member.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnrollError {
    /// An object could not be made or applied.
    #[error(
        "cluster {cluster}: cannot apply {what} on the hub: {source}; check that the operator holds the rights of deploy/rbac.yaml (ClusterRoles tenancy-hub and tenancy-hub-member-namespace)"
    )]
    Apply {
        /// The member.
        cluster: ClusterName,
        /// The object, as `Kind name`.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// The member's namespace exists and is someone else's.
    #[error(
        "cluster {cluster}: hub namespace {namespace} exists but is not this member's (it lacks the label {MEMBER_LABEL}={cluster}); delete it, or join the cluster under another name"
    )]
    ForeignNamespace {
        /// The member.
        cluster: ClusterName,
        /// Its namespace's name.
        namespace: String,
    },
    /// The namespace belongs to an earlier `MemberCluster` of the same name, and goes with it.
    #[error(
        "cluster {cluster}: hub namespace {namespace} belongs to an earlier MemberCluster {cluster} and is deleted with it; enrolling once it is gone"
    )]
    Terminating {
        /// The member.
        cluster: ClusterName,
        /// Its namespace.
        namespace: String,
    },
    /// The status could not be written.
    #[error("cluster {cluster}: cannot write the MemberCluster's status: {source}")]
    Status {
        /// The member.
        cluster: ClusterName,
        /// The API error.
        source: kube::Error,
    },
    /// The object's name is not a cluster name (the CRD's rules refuse these).
    #[error("MemberCluster {name:?} is not named as a cluster (a DNS-1123 label); it is ignored")]
    BadName {
        /// The object's name.
        name: String,
    },
}

/// What enrollment works with: the hub, who the operator is there, the operator's sealing key
/// (each agent's configuration derives from it), the registry (the file's names win), and the
/// agents' Leases.
struct Enrollment {
    hub: Client,
    operator: Option<Subject>,
    seal: SealKey,
    registry: SharedRegistry,
    leases: reflector::Store<Lease>,
    /// The pull members' namespaces (those with the member label).
    namespaces: reflector::Store<Namespace>,
    /// When the objects of each `MemberCluster` (by uid) were last applied by this process.
    applied: Mutex<HashMap<String, Instant>>,
    /// Enrollment is done only while shard 0 is led here, so by one replica of many.
    shards: Arc<Shards>,
    /// What the hub could not take of each member's reports, said on its status.
    reports: Option<Arc<PullHub>>,
    /// Secrets each member's hub namespace may hold.
    secrets: u32,
    /// Publishes the Events of reports the hub could not take.
    recorder: Recorder,
}

/// What enrollment is started with.
pub(crate) struct Enrolling {
    /// The hub.
    pub(crate) client: Client,
    /// The operator's sealing key: each agent's configuration derives from it.
    pub(crate) seal: SealKey,
    /// The registry: the registration file's names win.
    pub(crate) registry: SharedRegistry,
    /// Which shards this replica leads.
    pub(crate) shards: Arc<Shards>,
    /// The hub's side of the pull members: what it could not take of their reports.
    pub(crate) reports: Option<Arc<PullHub>>,
    /// Secrets each member's hub namespace may hold (its ResourceQuota).
    pub(crate) secrets: u32,
}

/// Members enrolled at once. Each enrollment writes a handful of objects on the hub; 1,000
/// `MemberCluster`s created together, all enrolled at once, overflowed the operator's priority
/// and fairness queue on the hub (429) and timed its status writes out.
const ENROLL_CONCURRENCY: u16 = 8;

/// Keeps every `MemberCluster` enrolled until `stop`: one reconcile per member on its changes,
/// its agent's Lease changes, and at least every minute; only while `shards` says this replica
/// does the hub's own work (with `--shards`, the leader of shard 0), and every member at once
/// when it comes to.
pub(crate) async fn run(with: Enrolling, stop: CancellationToken) {
    let Enrolling {
        client: hub,
        seal,
        registry,
        shards,
        reports,
        secrets,
    } = with;
    let (leases, writer) = reflector::store();
    let by_name = watcher::Config::default().fields(&format!("metadata.name={AGENT_LEASE}"));
    let lease_events = watcher(Api::<Lease>::all(hub.clone()), by_name)
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    let (namespaces, writer) = reflector::store();
    let labelled = watcher::Config::default().labels(MEMBER_LABEL);
    let namespace_events = watcher(Api::<Namespace>::all(hub.clone()), labelled)
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    // A tick each time this replica comes to do the hub's work.
    let gained = futures::stream::unfold(
        (shards.subscribe(), shards.clone()),
        |(mut changed, shards)| async move {
            loop {
                changed.changed().await.ok()?;
                if shards.leads_the_hub() {
                    return Some(((), (changed, shards)));
                }
            }
        },
    );
    let ctx = Arc::new(Enrollment {
        operator: whoami(&hub).await,
        hub: hub.clone(),
        seal,
        registry,
        leases,
        namespaces,
        applied: Mutex::default(),
        shards,
        reports,
        secrets,
        recorder: Recorder::new(hub.clone(), Reporter::from("tenancy-hub")),
    });
    Controller::new(Api::<MemberCluster>::all(hub), watcher::Config::default())
        .owns_stream(namespace_events)
        .watches_stream(lease_events, |lease: Lease| {
            let member = member_of_pull_namespace(lease.metadata.namespace.as_deref()?)?;
            Some(ObjectRef::new(member.as_str()))
        })
        .reconcile_all_on(gained)
        .with_config(controller::Config::default().concurrency(ENROLL_CONCURRENCY))
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "enrollment ended with an error");
            }
        })
        .await;
}

/// Who the operator is on the hub, as the subject it binds itself as in each member's namespace.
async fn whoami(hub: &Client) -> Option<Subject> {
    let reviews: Api<SelfSubjectReview> = Api::all(hub.clone());
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await;
    match review.map(|r| r.status.and_then(|s| s.user_info).and_then(|u| u.username)) {
        Ok(Some(username)) => Some(subject_of(&username)),
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(%error, "the hub did not say who the operator is; pull members are enrolled with the operator's own rights alone");
            None
        }
    }
}

async fn reconcile(mc: Arc<MemberCluster>, ctx: Arc<Enrollment>) -> Result<Action, EnrollError> {
    let name = mc.name_any();
    let cluster: ClusterName = name.parse().map_err(|_| EnrollError::BadName { name })?;
    if mc.metadata.deletion_timestamp.is_some() || !ctx.shards.leads_the_hub() {
        // Another replica enrolls while it leads shard 0; gaining it reconciles every member.
        return Ok(Action::await_change());
    }
    ctx.enroll(&cluster, &mc).await
}

fn error_policy(_mc: Arc<MemberCluster>, error: &EnrollError, _ctx: Arc<Enrollment>) -> Action {
    match error {
        EnrollError::Terminating { .. } => tracing::info!(%error),
        EnrollError::BadName { .. } => tracing::warn!(%error),
        _ => tracing::warn!(%error, "enrollment failed; retrying in 15s"),
    }
    after(error)
}

/// When a member whose enrollment failed with `error` is looked at again: soon while its
/// namespace goes, never for a name no cluster may have (until it changes), else in 15 s.
fn after(error: &EnrollError) -> Action {
    match error {
        EnrollError::Terminating { .. } => Action::requeue(Duration::from_secs(2)),
        EnrollError::BadName { .. } => Action::await_change(),
        _ => Action::requeue(Duration::from_secs(15)),
    }
}

impl Enrollment {
    /// Enrolls `cluster` (applying its objects when due) and writes its status.
    async fn enroll(
        &self,
        cluster: &ClusterName,
        mc: &MemberCluster,
    ) -> Result<Action, EnrollError> {
        if self.registry.load().get(cluster).is_some() {
            self.write_status(cluster, mc, &Standing::InRegistrationFile)
                .await?;
            return Ok(Action::requeue(FILE_NAME_RECHECK));
        }
        let listed = |ready: Option<Result<(), _>>| matches!(ready, Some(Ok(())));
        if !listed(self.leases.wait_until_ready().now_or_never())
            || !listed(self.namespaces.wait_until_ready().now_or_never())
        {
            // Until the Leases are listed, every member would look as if its agent had not joined.
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let uid = mc.uid().unwrap_or_default();
        if self.due(cluster, &uid) {
            if let Err(error) = self.apply(cluster, mc).await {
                let standing = Standing::Failed(error.to_string());
                // The failure is what matters; a status that cannot be written says nothing more.
                let _ = self.write_status(cluster, mc, &standing).await;
                return Err(error);
            }
            tracing::info!(%cluster, namespace = %pull_namespace(cluster), "pull member enrolled");
            self.applied
                .lock()
                .expect("not poisoned")
                .insert(uid, Instant::now());
        }
        let namespace = pull_namespace(cluster);
        let lease = self
            .leases
            .get(&ObjectRef::new(AGENT_LEASE).within(&namespace));
        self.write_status(cluster, mc, &Standing::Enrolled(lease.as_deref()))
            .await?;
        Ok(Action::requeue(look_again(
            lease.as_deref(),
            Timestamp::now(),
        )))
    }

    /// Whether the objects of `cluster`, whose `MemberCluster` has `uid`, are due to be applied:
    /// never applied by this process, not for [`REAPPLY_EVERY`], or its namespace is gone.
    fn due(&self, cluster: &ClusterName, uid: &str) -> bool {
        let namespace = ObjectRef::new(&pull_namespace(cluster));
        let gone = self
            .namespaces
            .get(&namespace)
            .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some());
        let applied = self.applied.lock().expect("not poisoned");
        gone || applied
            .get(uid)
            .is_none_or(|at| at.elapsed() >= REAPPLY_EVERY)
    }

    /// Makes the member's namespace (unless someone else's has its name) and the operator's
    /// rights in it, then applies everything else in it.
    async fn apply(&self, cluster: &ClusterName, mc: &MemberCluster) -> Result<(), EnrollError> {
        let owner = mc
            .controller_owner_ref(&())
            .expect("a MemberCluster read from the hub has a name and a uid");
        let e = enrolled(
            cluster,
            owner,
            self.operator.as_ref(),
            &self.seal,
            self.secrets,
        );
        let namespace = pull_namespace(cluster);
        self.make_namespace(cluster, &e.namespace).await?;
        if let Some(binding) = &e.operator {
            let bindings: Api<RoleBinding> = Api::namespaced(self.hub.clone(), &namespace);
            if create(cluster, &bindings, binding).await? {
                // The API server authorizes from a cache of bindings that learns this one a
                // moment later; the writes below would be refused until it does.
                self.wait_until_bound(&namespace).await;
            }
        }
        let accounts = Api::namespaced(self.hub.clone(), &namespace);
        for account in &e.accounts {
            apply(cluster, &accounts, account).await?;
        }
        // The Roles before their bindings, so no binding ever points at nothing.
        let roles = Api::namespaced(self.hub.clone(), &namespace);
        for role in &e.roles {
            apply(cluster, &roles, role).await?;
        }
        let bindings = Api::namespaced(self.hub.clone(), &namespace);
        for binding in &e.bindings {
            apply(cluster, &bindings, binding).await?;
        }
        let quotas = Api::namespaced(self.hub.clone(), &namespace);
        apply(cluster, &quotas, &e.quota).await?;
        let secrets = Api::namespaced(self.hub.clone(), &namespace);
        apply(cluster, &secrets, &e.config).await
    }

    /// Waits, at most [`BINDING_SETTLES`], until the API server allows the operator to apply
    /// ServiceAccounts in `namespace`: its RoleBinding there, just made, has reached the
    /// authorizer. On time out (or when the question cannot be asked), the writes that follow
    /// say what is refused.
    async fn wait_until_bound(&self, namespace: &str) {
        let reviews: Api<SelfSubjectAccessReview> = Api::all(self.hub.clone());
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some("patch".into()),
                    resource: Some("serviceaccounts".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let deadline = Instant::now() + BINDING_SETTLES;
        let mut pause = Duration::from_millis(50);
        while Instant::now() < deadline {
            match within_time(reviews.create(&PostParams::default(), &review)).await {
                Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, namespace, "cannot ask the hub what the operator may do");
                    return;
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Creates the member's namespace, or checks that the one of its name is the member's.
    async fn make_namespace(
        &self,
        cluster: &ClusterName,
        made: &Namespace,
    ) -> Result<(), EnrollError> {
        let namespaces: Api<Namespace> = Api::all(self.hub.clone());
        if create(cluster, &namespaces, made).await? {
            return Ok(());
        }
        let name = made.name_any();
        let found = namespaces
            .get_opt(&name)
            .await
            .map_err(|source| EnrollError::Apply {
                cluster: cluster.clone(),
                what: format!("Namespace {name}"),
                source,
            })?;
        existing(cluster, made, found.as_ref())
    }

    /// Writes the status `standing` makes, when it differs from the one the object has.
    async fn write_status(
        &self,
        cluster: &ClusterName,
        mc: &MemberCluster,
        standing: &Standing<'_>,
    ) -> Result<(), EnrollError> {
        let previous = mc.status.as_ref();
        let mut fresh = status(
            cluster,
            &pull_namespace(cluster),
            standing,
            mc.metadata.generation,
            previous,
            Timestamp::now(),
        );
        if let Some(reports) = &self.reports {
            let problems = reports.problems(cluster);
            let taken = reports_taken(cluster, &problems, &fresh, previous);
            if taken.status == "False" && !reports_refused(previous, &taken.message) {
                self.tell_refused(mc, &taken.message).await;
            }
            fresh.conditions.push(taken);
        }
        if previous == Some(&fresh) {
            return Ok(());
        }
        let api: Api<MemberCluster> = Api::all(self.hub.clone());
        let body = serde_json::json!({
            "apiVersion": MemberCluster::api_version(&()),
            "kind": MemberCluster::kind(&()),
            "status": fresh,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        within_time(api.patch_status(cluster.as_str(), &params, &patch))
            .await
            .map(|_| ())
            .map_err(|source| EnrollError::Status {
                cluster: cluster.clone(),
                source,
            })
    }
}

impl Enrollment {
    /// Publishes a Warning Event on `mc` saying which of its reports the hub could not take.
    async fn tell_refused(&self, mc: &MemberCluster, message: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: "ReportsRefused".into(),
            note: Some(message.chars().take(1024).collect()),
            action: "TakeReports".into(),
            secondary: None,
        };
        let reference = mc.object_ref(&());
        let publish = self.recorder.publish(&event, &reference);
        if let Ok(Err(e)) = tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, publish).await {
            tracing::warn!(error = %e, "could not publish an event");
        }
    }
}

/// Whether `found`, the namespace of the name of `made` that could not be created, will do
/// for `cluster`: it must be the member's (labelled so) and owned by the same `MemberCluster`,
/// not going; one gone meanwhile, or going, is waited out.
fn existing(
    cluster: &ClusterName,
    made: &Namespace,
    found: Option<&Namespace>,
) -> Result<(), EnrollError> {
    let namespace = made.name_any();
    let owner = made.owner_references().first().map(|o| o.uid.as_str());
    match found {
        Some(ns) if !is_members(ns, cluster) => Err(EnrollError::ForeignNamespace {
            cluster: cluster.clone(),
            namespace,
        }),
        Some(ns)
            if ns.metadata.deletion_timestamp.is_none()
                && ns
                    .owner_references()
                    .iter()
                    .any(|o| Some(o.uid.as_str()) == owner) =>
        {
            Ok(())
        }
        _ => Err(EnrollError::Terminating {
            cluster: cluster.clone(),
            namespace,
        }),
    }
}

/// Whether `previous` says already that the reports were refused, with `message`.
fn reports_refused(
    previous: Option<&crate::api::member_cluster::MemberClusterStatus>,
    message: &str,
) -> bool {
    previous.is_some_and(|p| {
        p.conditions
            .iter()
            .any(|c| c.type_ == REPORTS_TAKEN && c.status == "False" && c.message == message)
    })
}

/// A write to the hub, given up after [`crate::api::HUB_WRITE_TIMEOUT`].
async fn within_time<T>(
    write: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service("no answer in time".into())))
}

/// Creates `object` through `api`: true when made now, false when one of its name exists.
async fn create<K>(cluster: &ClusterName, api: &Api<K>, object: &K) -> Result<bool, EnrollError>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
{
    match within_time(api.create(&PostParams::default(), object)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(source) => Err(EnrollError::Apply {
            cluster: cluster.clone(),
            what: format!("{} {}", K::kind(&()), object.name_any()),
            source,
        }),
    }
}

/// Applies `object` server-side through `api`, as the operator.
async fn apply<K>(cluster: &ClusterName, api: &Api<K>, object: &K) -> Result<(), EnrollError>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = object.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    within_time(api.patch(&name, &params, &Patch::Apply(object)))
        .await
        .map(|_| ())
        .map_err(|source| EnrollError::Apply {
            cluster: cluster.clone(),
            what: format!("{} {name}", K::kind(&())),
            source,
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    use super::*;
    use crate::api::member_cluster::MemberClusterStatus;

    fn cluster() -> ClusterName {
        "edge-1".parse().unwrap()
    }

    /// The namespace of `edge-1` labelled as `member`'s, owned by the MemberCluster of `uid`.
    fn namespace(member: Option<&str>, uid: &str) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(pull_namespace(&cluster()));
        ns.metadata.labels = member.map(|m| [(MEMBER_LABEL.to_owned(), m.to_owned())].into());
        ns.metadata.owner_references = Some(vec![OwnerReference {
            uid: uid.into(),
            ..Default::default()
        }]);
        ns
    }

    #[test]
    fn a_namespace_of_the_members_name_is_taken_only_when_it_is_the_members_and_stays() {
        let made = namespace(Some("edge-1"), "uid-1");
        assert!(existing(&cluster(), &made, Some(&made.clone())).is_ok());

        let tenant = namespace(None, "uid-1");
        let refused = existing(&cluster(), &made, Some(&tenant)).unwrap_err();
        assert!(
            matches!(&refused, EnrollError::ForeignNamespace { .. }),
            "{refused:?}"
        );
        assert!(
            refused
                .to_string()
                .contains("join the cluster under another name")
        );

        let earlier = namespace(Some("edge-1"), "uid-0");
        let mut going = made.clone();
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        for waited in [Some(&earlier), Some(&going), None] {
            assert!(
                matches!(
                    existing(&cluster(), &made, waited),
                    Err(EnrollError::Terminating { .. })
                ),
                "{waited:?}"
            );
        }
    }

    #[test]
    fn a_namespace_going_is_waited_for_briefly_and_a_bad_name_until_it_changes() {
        let going = EnrollError::Terminating {
            cluster: cluster(),
            namespace: pull_namespace(&cluster()),
        };
        assert_eq!(after(&going), Action::requeue(Duration::from_secs(2)));
        let bad = EnrollError::BadName {
            name: "Edge_1".into(),
        };
        assert_eq!(after(&bad), Action::await_change());
        let foreign = EnrollError::ForeignNamespace {
            cluster: cluster(),
            namespace: "x".into(),
        };
        assert_eq!(after(&foreign), Action::requeue(Duration::from_secs(15)));
    }

    #[test]
    fn refused_reports_are_told_once_per_message() {
        let refused = |message: &str| MemberClusterStatus {
            conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: REPORTS_TAKEN.into(),
                status: "False".into(),
                message: message.into(),
                reason: "Refused".into(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
                observed_generation: None,
            }],
            ..Default::default()
        };
        assert!(!reports_refused(None, "piece p is not a records piece"));
        let previous = refused("piece p is not a records piece");
        assert!(reports_refused(
            Some(&previous),
            "piece p is not a records piece"
        ));
        assert!(!reports_refused(
            Some(&previous),
            "piece q holds a stray record"
        ));
    }
}
