//! The fleet view's state and its one way of building a page for a viewer: what the viewer may
//! see (the status API's reviews) and the page of it (the fleet matrix built once per access
//! group, see `shared`); `stream` builds it again for a live page when something changes.

use std::{
    collections::BTreeSet,
    hash::{Hash as _, Hasher as _},
    net::IpAddr,
    sync::{Arc, OnceLock},
    time::Duration,
};

use axum::http::HeaderValue;
use dashmap::DashMap;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::{Api, ResourceExt as _, api::ListParams};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    api::{crd::TenancyController, member_cluster::MemberCluster},
    runtime::{
        auth::{AuthError, Identity, Token},
        http::{ApiState, serving},
        status_api::{ApiError, registered},
        web::{
            actions,
            diffs::{Diffs, MakeDiff},
            events, fleet,
            html::Page,
            live,
            pages::{self, Agent},
            session,
            shared::{SharedPage, SharedPages},
            view::{ClusterInfo, Filters, Seen},
        },
    },
    status::next::Next,
};

/// How long the hub may take to say how a pull member's agent is, or to list a Controller's
/// Events, before its page goes without.
const AGENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a Controller's Events, once read, are shown before they are read again.
const EVENTS_FRESH: Duration = Duration::from_secs(5);
/// Events listed per Controller at most (the operator folds repeats into series, so a
/// Controller has few).
const EVENTS_LISTED: u32 = 200;
/// Controllers whose Events are held at once before the stale ones are dropped.
const EVENTS_HELD: usize = 1024;

/// The last Events read per Controller uid: when, and the rows or why not.
type EventsRead = DashMap<String, (tokio::time::Instant, Result<Arc<Vec<events::Row>>, String>)>;

/// What the view reads beyond the status API's state: the hub's Controllers (with their
/// statuses, as the reconciler sees them) and a hub client. Set once the reconciler's state
/// exists; until then no Controller is shown.
#[derive(Clone, Default)]
pub(crate) struct FleetSources {
    sources: Arc<OnceLock<Sources>>,
    agents: Arc<OnceLock<AgentsOf>>,
    next: Arc<OnceLock<NextOf>>,
    diff: Arc<OnceLock<MakeDiff>>,
}

/// What a Controller's newest plan does next, by its hub namespace and name.
type NextOf = Box<dyn Fn(&str, &str) -> Arc<Vec<Next>> + Send + Sync>;

/// What a pull member's agent last reported of itself: its version and its cluster's Kubernetes
/// version, as the agent wrote them (not trusted: shown escaped and cut).
type AgentsOf = Box<dyn Fn(&str) -> Option<(String, Option<String>)> + Send + Sync>;

struct Sources {
    controllers: ControllersOf,
    hub: kube::Client,
}

type ControllersOf = Box<dyn Fn() -> Vec<Arc<TenancyController>> + Send + Sync>;

impl FleetSources {
    /// Reads Controllers with `controllers` and the hub with `hub` from now on (the first call only).
    pub(crate) fn set(
        &self,
        controllers: impl Fn() -> Vec<Arc<TenancyController>> + Send + Sync + 'static,
        hub: kube::Client,
    ) {
        let _ = self.sources.set(Sources {
            controllers: Box::new(controllers),
            hub,
        });
    }

    /// Reads what pull members' agents report of themselves with `agents` from now on (the
    /// first call only).
    pub(crate) fn set_agents(
        &self,
        agents: impl Fn(&str) -> Option<(String, Option<String>)> + Send + Sync + 'static,
    ) {
        let _ = self.agents.set(Box::new(agents));
    }

    /// Reads what each Controller's newest plan does next with `next` from now on (the first
    /// call only).
    pub(crate) fn set_next(
        &self,
        next: impl Fn(&str, &str) -> Arc<Vec<Next>> + Send + Sync + 'static,
    ) {
        let _ = self.next.set(Box::new(next));
    }

    /// Makes the manifest diffs the view shows with `make` from now on (the first call only).
    pub(crate) fn set_diff(&self, make: MakeDiff) {
        let _ = self.diff.set(make);
    }

    /// What makes the manifest diffs the view shows, once set.
    pub(crate) fn diff_maker(&self) -> Option<MakeDiff> {
        self.diff.get().cloned()
    }

    fn agent_reported(&self, cluster: &str) -> Option<(String, Option<String>)> {
        self.agents.get().and_then(|f| f(cluster))
    }

    /// What Controller `namespace/name`'s newest plan does next.
    pub(crate) fn next_of(&self, namespace: &str, name: &str) -> Arc<Vec<Next>> {
        self.next
            .get()
            .map(|f| f(namespace, name))
            .unwrap_or_default()
    }

    fn controllers(&self) -> Vec<Arc<TenancyController>> {
        self.sources
            .get()
            .map(|s| (s.controllers)())
            .unwrap_or_default()
    }

    fn hub(&self) -> Option<kube::Client> {
        self.sources.get().map(|s| s.hub.clone())
    }
}

/// What the view's handlers and streams read.
#[derive(Clone)]
pub(crate) struct WebState {
    /// The status API's state: the model, the registry, the reviewer, readiness.
    pub(crate) api: ApiState,
    /// Signed-in browsers.
    pub(crate) sessions: Arc<session::Sessions>,
    /// Open live streams.
    pub(crate) slots: Arc<live::Slots>,
    /// The last Events read per Controller (by uid), with when they were read.
    events: Arc<EventsRead>,
    /// The fleet pages built for each access group.
    shared: Arc<SharedPages>,
    /// The manifest diffs made and being made.
    pub(crate) diffs: Arc<Diffs>,
    /// Fires on shutdown: live streams and renders end.
    pub(crate) cancel: CancellationToken,
    /// Owns the live streams' and the renders' tasks.
    pub(crate) tasks: TaskTracker,
}

impl WebState {
    /// The view's state over the status API's `api`; streams are tasks of `tasks`, ended by `cancel`.
    pub(crate) fn new(api: ApiState, cancel: CancellationToken, tasks: TaskTracker) -> Self {
        Self {
            api,
            sessions: Arc::default(),
            slots: Arc::default(),
            events: Arc::default(),
            shared: Arc::default(),
            diffs: Arc::default(),
            cancel,
            tasks,
        }
    }
}

/// Which page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum View {
    /// The matrix, filtered.
    Fleet(Filters),
    /// One Controller.
    Controller {
        /// Its hub namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// One cluster.
    Cluster(String),
}

/// A page built for a viewer, with what frames it.
pub(crate) struct Built {
    /// The page (shared with the viewers of the same access, for the fleet).
    pub(crate) page: Arc<Page>,
    /// Who the viewer is (user name).
    pub(crate) who: String,
    /// The filter form, on the fleet page.
    pub(crate) filters: String,
    /// The fingerprint (see `fingerprint`) the page was built at.
    pub(crate) fingerprint: u64,
}

/// Why a page cannot be shown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WebError {
    /// No identity the hub accepts, or the hub cannot be asked.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// Not there, or not for this viewer: the two are told apart by no one but the operator.
    #[error("{0}")]
    NotFound(String),
    /// This replica works no Controller now (starting, or standing by).
    #[error("{0}")]
    NotServing(String),
    /// The viewer may see it but not do that to it (the hub's RBAC says no), or the hub did not
    /// take the change.
    #[error("{0}")]
    Refused(String),
}

impl WebError {
    /// Whether trying again later may help (the stream keeps its page meanwhile).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::NotServing(_)
                | Self::Auth(
                    AuthError::Busy { .. } | AuthError::CallerBusy { .. } | AuthError::Hub { .. }
                )
        )
    }
}

/// A token as the status API's reviewer takes it.
pub(crate) fn bearer(token: &str) -> Result<Token, AuthError> {
    let header =
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| AuthError::NotBearer)?;
    Token::from_header(Some(&header))
}

impl WebState {
    /// `view` as the viewer with `token` (sent from `from`) may see it.
    ///
    /// # Errors
    /// [`WebError::Auth`] when the hub does not accept the token or cannot be asked,
    /// [`WebError::NotFound`] for a Controller or cluster not there or not the viewer's,
    /// [`WebError::NotServing`] while this replica works no Controller.
    pub(crate) async fn build(
        &self,
        token: &str,
        from: Option<IpAddr>,
        view: &View,
    ) -> Result<Built, WebError> {
        let identity = self
            .api
            .reviewer
            .authenticate(&bearer(token)?, from)
            .await?;
        serving(&self.api).map_err(|e| match e {
            ApiError::NotServing(why) => WebError::NotServing(why),
            other => WebError::NotServing(other.to_string()),
        })?;
        // Taken before what the page is built of, so a page is never older than its fingerprint.
        let fingerprint = self.fingerprint();
        let controllers = self.api.fleet.controllers();
        let namespaces: BTreeSet<String> =
            controllers.iter().filter_map(|c| c.namespace()).collect();
        let access = self.api.reviewer.access(&identity, namespaces).await?;
        let model = &self.api.model;
        let (page, filters, fingerprint) = match view {
            View::Fleet(filters) => {
                let (shared, built_at) = self
                    .shared
                    .get_or_build(&access, filters, fingerprint, || {
                        let seen = Seen::of(controllers, self.clusters(), &access);
                        SharedPage {
                            page: Arc::new(fleet::page(&seen, model, filters)),
                            filters: fleet::filter_form(&seen, filters),
                        }
                    })
                    .await;
                (shared.page.clone(), shared.filters.clone(), built_at)
            }
            View::Controller { namespace, name } => {
                let seen = Seen::of(controllers, self.clusters(), &access);
                let c = seen.controller(namespace, name).ok_or_else(|| {
                    WebError::NotFound(format!(
                        "Controller {namespace}/{name} is not on the hub, or you may not read it"
                    ))
                })?;
                let mut page = pages::controller(c, model);
                let (rows, why) = match self.events(c).await {
                    Ok(rows) => (Some(rows), None),
                    Err(why) => (None, Some(why)),
                };
                page.section(
                    "next".into(),
                    pages::next_html(namespace, name, &self.api.fleet.next_of(namespace, name)),
                );
                page.section(
                    "events".into(),
                    events::section(rows.as_deref().map(Vec::as_slice), why.as_deref()),
                );
                // Offered only to viewers the hub lets patch Controllers there; a review that
                // cannot be made now offers nothing rather than failing the page.
                if let Ok(true) = self.api.reviewer.may_patch(&identity, namespace).await {
                    page.section("actions".into(), actions::section(c, &actions::offered(c)));
                }
                (Arc::new(page), String::new(), fingerprint)
            }
            View::Cluster(name) => {
                let seen = Seen::of(controllers, self.clusters(), &access);
                let cluster = seen.cluster(name).ok_or_else(|| {
                    WebError::NotFound(format!(
                        "cluster {name} is not registered, or no Controller you may read targets it"
                    ))
                })?;
                let agent = match cluster.pull {
                    true => self.agent(name).await,
                    false => None,
                };
                let page = pages::cluster(&seen, cluster, agent.as_ref(), model);
                (Arc::new(page), String::new(), fingerprint)
            }
        };
        Ok(Built {
            page,
            who: identity.username.clone(),
            filters,
            fingerprint,
        })
    }

    /// Every registered cluster, in registry order, with whether it is pulled.
    pub(crate) fn clusters(&self) -> Vec<ClusterInfo> {
        let registry = self.api.registry.load();
        registered(&registry)
            .into_iter()
            .map(|e| ClusterInfo {
                pull: registry.get(&e.name).is_none(),
                name: e.name.to_string(),
                labels: e.labels,
            })
            .collect()
    }

    /// What the hub's `MemberCluster` says of pull member `name`'s agent, if it answers in time.
    async fn agent(&self, name: &str) -> Option<Agent> {
        let api: Api<MemberCluster> = Api::all(self.api.fleet.hub()?);
        let member = tokio::time::timeout(AGENT_TIMEOUT, api.get_opt(name))
            .await
            .ok()?
            .ok()??;
        let status = member.status.unwrap_or_default();
        let (version, kube_version) = self
            .api
            .fleet
            .agent_reported(name)
            .map_or((None, None), |(v, k)| (Some(v), k));
        Some(Agent {
            version: version.map(|v| shown_version(&v)),
            kube_version: kube_version.map(|v| shown_version(&v)),
            joined: status.joined,
            last_seen: status.last_seen,
            ready: status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| format!("{}: {}: {}", c.status, c.reason, c.message)),
        })
    }

    /// Who the viewer with `token` (sent from `from`) is, once the hub says it may read
    /// Controller `namespace/name`, by the rules its page is shown by.
    ///
    /// # Errors
    /// [`WebError::Auth`] as [`WebState::build`]; [`WebError::NotFound`] for a Controller not
    /// there or not the viewer's.
    pub(crate) async fn reader_of(
        &self,
        token: &str,
        from: Option<IpAddr>,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Identity>, WebError> {
        let identity = self
            .api
            .reviewer
            .authenticate(&bearer(token)?, from)
            .await?;
        let controllers = self.api.fleet.controllers();
        let namespaces: BTreeSet<String> =
            controllers.iter().filter_map(|c| c.namespace()).collect();
        let access = self.api.reviewer.access(&identity, namespaces).await?;
        let seen = Seen::of(controllers, self.clusters(), &access);
        if seen.controller(namespace, name).is_none() {
            return Err(WebError::NotFound(format!(
                "Controller {namespace}/{name} is not on the hub, or you may not read it"
            )));
        }
        Ok(identity)
    }

    /// Does `act` to Controller `namespace/name` as the viewer with `token` (sent from `from`):
    /// a merge patch made on the hub with that token, once the viewer is known to see the
    /// Controller and the hub says it may patch Controllers there.
    ///
    /// # Errors
    /// As [`WebState::build`]; [`WebError::Refused`] when the viewer may not patch there, or the
    /// hub does not take the patch.
    pub(crate) async fn act(
        &self,
        token: &str,
        from: Option<IpAddr>,
        namespace: &str,
        name: &str,
        act: actions::Act,
    ) -> Result<(), WebError> {
        let identity = self.reader_of(token, from, namespace, name).await?;
        if !self.api.reviewer.may_patch(&identity, namespace).await? {
            return Err(WebError::Refused(format!(
                "You may read Controller {namespace}/{name} but not change it: ask for `patch` on controllers.multitenancy.dev in hub namespace {namespace}."
            )));
        }
        let refused = |why: String| {
            WebError::Refused(format!(
                "The hub did not take the change to Controller {namespace}/{name}: {why}"
            ))
        };
        let registry = self.api.registry.load_full();
        let hub = registry
            .hub_as(token)
            .await
            .map_err(|e| refused(e.to_string()))?;
        let api: Api<TenancyController> = Api::namespaced(hub, namespace);
        let patch = act.patch(k8s_openapi::jiff::Timestamp::now().as_second());
        let params = kube::api::PatchParams::default();
        match tokio::time::timeout(
            crate::api::HUB_WRITE_TIMEOUT,
            api.patch(name, &params, &kube::api::Patch::Merge(&patch)),
        )
        .await
        {
            Ok(Ok(_)) => {
                tracing::info!(controller = %format!("{namespace}/{name}"), user = %identity.username, action = act.segment(), "the fleet view made a change as its viewer");
                Ok(())
            }
            Ok(Err(kube::Error::Api(status))) => Err(refused(status.message)),
            Ok(Err(e)) => Err(refused(e.to_string())),
            Err(_) => Err(refused("it did not answer in time; try again".into())),
        }
    }

    /// The last Events the operator recorded about `c`: read from the hub at most every
    /// [`EVENTS_FRESH`] per Controller, whatever the number of viewers; why not, when they
    /// cannot be read in time.
    async fn events(&self, c: &TenancyController) -> Result<Arc<Vec<events::Row>>, String> {
        let uid = c.metadata.uid.clone().unwrap_or_default();
        if let Some(held) = self.events.get(&uid)
            && held.0.elapsed() < EVENTS_FRESH
        {
            return held.1.clone();
        }
        let namespace = c.namespace().unwrap_or_default();
        let read = match self.api.fleet.hub() {
            None => Err("the hub cannot be read yet".to_owned()),
            Some(hub) => {
                let api: Api<KubeEvent> = Api::namespaced(hub, &namespace);
                let params = ListParams::default()
                    .fields(&format!("involvedObject.uid={uid}"))
                    .limit(EVENTS_LISTED);
                match tokio::time::timeout(AGENT_TIMEOUT, api.list(&params)).await {
                    Ok(Ok(list)) => Ok(Arc::new(events::rows(list.items, &uid))),
                    Ok(Err(e)) => {
                        tracing::debug!(%namespace, error = %e, "cannot list a Controller's Events");
                        Err(format!(
                            "The Events of hub namespace {namespace} cannot be read now; the operator tries again."
                        ))
                    }
                    Err(_) => Err(format!(
                        "The hub did not list the Events of hub namespace {namespace} in time; the operator tries again."
                    )),
                }
            }
        };
        if self.events.len() >= EVENTS_HELD {
            self.events
                .retain(|_, held| held.0.elapsed() < EVENTS_FRESH);
        }
        self.events
            .insert(uid, (tokio::time::Instant::now(), read.clone()));
        read
    }

    /// A number that changes when the model, the Controllers or the registry do.
    pub(crate) fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.api.model.version().hash(&mut h);
        for c in self.api.fleet.controllers() {
            c.metadata.uid.hash(&mut h);
            c.metadata.resource_version.hash(&mut h);
        }
        (Arc::as_ptr(&self.api.registry.load_full()) as usize).hash(&mut h);
        h.finish()
    }
}

/// The most of an agent's version string the page shows: the agent writes it, so it is cut.
const SHOWN_VERSION: usize = 64;

/// `v` as the cluster page shows it: at most [`SHOWN_VERSION`] characters, control characters
/// dropped.
pub(crate) fn shown_version(v: &str) -> String {
    v.chars()
        .filter(|c| !c.is_control())
        .take(SHOWN_VERSION)
        .collect()
}
