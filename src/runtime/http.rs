//! HTTP endpoints: health, readiness, Prometheus metrics, the read-only status API, which shows each caller only what its token may read, and the fleet view beside it.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{Arc, OnceLock},
};

use arc_swap::ArcSwap;
use axum::{
    Json, Router,
    extract::{ConnectInfo, FromRequestParts, Path, State},
    http::{StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
    routing::get,
};
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    api::crd::TenancyController,
    api::key::{ClusterName, ClusterNamespace},
    clusters::registry::SharedRegistry,
    metrics::{Gauges, Metrics},
    observe::model::Model,
    queue::handle::HelmQueue,
    runtime::auth::{Access, AuthError, Identity, Reviewer, Token},
    runtime::status_api::{
        ApiError, ClusterSummary, NamespaceSummary, Result, ScopeRelease, ScopeView, Visible,
        cluster_detail, cluster_list, gauges, registered, scope_view,
    },
};

/// What `/readyz` answers until the hub's `Controller` resources are listed.
const NOT_READY: &str = "not ready: the hub's Controllers are not listed yet";

/// What `/readyz` says: where the operator is between starting and working.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Not ready (503): the hub's `Controller` resources are not listed yet.
    #[default]
    Starting,
    /// Ready (200), so a rollout proceeds, but idle: another replica holds the leader election Lease.
    Standby {
        /// The lease, as `namespace/name`.
        lease: String,
        /// The replica holding it.
        holder: String,
    },
    /// Ready (200) and working.
    Ready,
}

/// What the HTTP handlers read.
#[derive(Clone)]
pub(crate) struct ApiState {
    /// What runs in every watched cluster/namespace.
    pub(crate) model: Arc<Model>,
    /// The registered clusters.
    pub(crate) registry: SharedRegistry,
    /// The operator's counters.
    pub(crate) metrics: Arc<Metrics>,
    /// The Helm job queue, for its depth and running jobs.
    pub(crate) queue: HelmQueue,
    /// Starting, standing by, or working.
    pub(crate) ready: Arc<ArcSwap<Readiness>>,
    /// The depth of the bounded channels between components.
    pub(crate) channels: ChannelDepths,
    /// Checks status API callers with the hub.
    pub(crate) reviewer: Arc<Reviewer>,
    /// Which Controllers watch each cluster/namespace.
    pub(crate) owners: ScopeOwners,
    /// The watch streams open now, by what they watch.
    pub(crate) streams: StreamCounts,
    /// The releases each Controller's status reports in a cluster/namespace.
    pub(crate) releases: ScopeReleases,
    /// The hub's Controllers and a hub client, for the fleet view.
    pub(crate) fleet: crate::runtime::web::FleetSources,
    /// The Git webhook receiver, when the operator serves one.
    pub(crate) git_hooks: Option<crate::runtime::git_hooks::GitHooks>,
}

/// The releases the Controllers' statuses report in a cluster/namespace, each with its
/// Controller (`hub-namespace/name`). Set once the reconciler's state exists.
#[derive(Clone, Default)]
pub(crate) struct ScopeReleases(Arc<OnceLock<ReleasesOf>>);

type ReleasesOf = Box<dyn Fn(&ClusterNamespace) -> Vec<ScopeRelease> + Send + Sync>;

impl ScopeReleases {
    /// Answers with `releases` from now on (the first call only).
    pub(crate) fn set(
        &self,
        releases: impl Fn(&ClusterNamespace) -> Vec<ScopeRelease> + Send + Sync + 'static,
    ) {
        let _ = self.0.set(Box::new(releases));
    }

    /// The releases reported in `scope` by Controllers of hub namespaces `access` may read.
    fn shown(&self, scope: &ClusterNamespace, access: &Access) -> Vec<ScopeRelease> {
        self.0
            .get()
            .map(|releases| {
                releases(scope)
                    .into_iter()
                    .filter(|r| access.allows(&r.hub_namespace))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The watch streams open now, by what they watch (`workloads`, `release_records`). Set once the
/// reconciler's state exists; until then (a standby) there are none.
#[derive(Clone, Default)]
pub(crate) struct StreamCounts(Arc<OnceLock<CountsOf>>);

type CountsOf = Box<dyn Fn() -> Vec<(&'static str, usize)> + Send + Sync>;

impl StreamCounts {
    /// Answers with `counts` from now on (the first call only).
    pub(crate) fn set(
        &self,
        counts: impl Fn() -> Vec<(&'static str, usize)> + Send + Sync + 'static,
    ) {
        let _ = self.0.set(Box::new(counts));
    }

    fn get(&self) -> Vec<(&'static str, usize)> {
        self.0.get().map(|counts| counts()).unwrap_or_default()
    }
}

/// The Controllers whose tenancies target a cluster/namespace, the hub namespaces that scope
/// belongs to. Set once the reconciler's state exists; until then (a standby) no scope has one.
#[derive(Clone, Default)]
pub(crate) struct ScopeOwners(Arc<OnceLock<OwnersOf>>);

type OwnersOf = Box<dyn Fn(&ClusterNamespace) -> Vec<ObjectRef<TenancyController>> + Send + Sync>;

impl ScopeOwners {
    /// Answers with `owners` from now on (the first call only).
    pub(crate) fn set(
        &self,
        owners: impl Fn(&ClusterNamespace) -> Vec<ObjectRef<TenancyController>> + Send + Sync + 'static,
    ) {
        let _ = self.0.set(Box::new(owners));
    }

    /// The hub namespaces of the Controllers watching `scope`.
    fn hub_namespaces(&self, scope: &ClusterNamespace) -> BTreeSet<String> {
        self.0
            .get()
            .map(|owners| {
                owners(scope)
                    .into_iter()
                    .filter_map(|o| o.namespace)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Who sent a status API request, per the hub's review of its bearer token; a request without
/// one is answered 401 (or 503 when the hub cannot be asked) before its handler runs.
struct Caller(Arc<Identity>);

impl FromRequestParts<ApiState> for Caller {
    type Rejection = AuthError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, AuthError> {
        let token = Token::from_header(parts.headers.get(header::AUTHORIZATION))?;
        // Known when served by `serve`: reviews of new tokens are budgeted per address.
        let from = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        state.reviewer.authenticate(&token, from).await.map(Self)
    }
}

impl ApiState {
    /// What `caller` may see of `scopes`: access reviews of the hub namespaces of their Controllers.
    async fn visible(&self, caller: &Caller, scopes: Vec<ClusterNamespace>) -> Result<Visible> {
        Ok(self.visible_with_access(caller, scopes).await?.0)
    }

    /// [`Self::visible`], and the caller's access it was decided by.
    async fn visible_with_access(
        &self,
        caller: &Caller,
        scopes: Vec<ClusterNamespace>,
    ) -> Result<(Visible, Access)> {
        let owners: BTreeMap<ClusterNamespace, BTreeSet<String>> = scopes
            .into_iter()
            .map(|scope| {
                let hub = self.owners.hub_namespaces(&scope);
                (scope, hub)
            })
            .collect();
        let namespaces = owners.values().flatten().cloned().collect();
        let access = self.reviewer.access(&caller.0, namespaces).await?;
        Ok((Visible::of(&access, &owners), access))
    }
}

/// Reads how many messages wait in each bounded channel, at scrape time.
#[derive(Clone)]
pub(crate) struct ChannelDepths(pub Arc<dyn Fn() -> Vec<(&'static str, usize)> + Send + Sync>);

impl Default for ChannelDepths {
    fn default() -> Self {
        Self(Arc::new(Vec::new))
    }
}

impl ChannelDepths {
    /// Depths read from the channels' senders, held weakly so they never keep a channel open.
    pub(crate) fn of<T: Send + 'static>(
        channels: Vec<(&'static str, tokio::sync::mpsc::WeakSender<T>)>,
    ) -> Self {
        Self(Arc::new(move || {
            channels
                .iter()
                .filter_map(|(name, weak)| {
                    let s = weak.upgrade()?;
                    Some((*name, s.max_capacity() - s.capacity()))
                })
                .collect()
        }))
    }

    /// Joins the depths of channels of different message types.
    pub(crate) fn join(self, other: Self) -> Self {
        Self(Arc::new(move || {
            let mut all = (self.0)();
            all.extend((other.0)());
            all
        }))
    }
}

/// The routes: `/healthz`, `/readyz`, `/metrics` open to all, and
/// `/api/v1/clusters[/{cluster}[/namespaces/{namespace}]]` for callers with a bearer token.
pub(crate) fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/v1/clusters", get(clusters))
        .route("/api/v1/clusters/{cluster}", get(cluster))
        .route(
            "/api/v1/clusters/{cluster}/namespaces/{namespace}",
            get(namespace),
        )
        .with_state(state)
}

/// Listens on `addr` and serves [`router`] until `cancel` fires, within the bounds of
/// [`connections`]; returns the bound address.
///
/// # Errors
/// When `addr` cannot be bound; the error names the address.
pub(crate) async fn serve(
    addr: SocketAddr,
    state: ApiState,
    cancel: CancellationToken,
    tasks: &tokio_util::task::TaskTracker,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} for health, metrics and the status API: {e}"),
        )
    })?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving health, metrics, the status API and the fleet view (/ui/)");
    let web = crate::runtime::web::WebState::new(state.clone(), cancel.clone(), tasks.clone());
    let hooks = state.git_hooks.clone();
    let mut app = router(state).merge(crate::runtime::web::router(web));
    if let Some(hooks) = hooks {
        app = app.merge(
            Router::new()
                .route(
                    "/hooks/git/{policy}",
                    axum::routing::post(crate::runtime::git_hooks::receive),
                )
                .layer(axum::extract::DefaultBodyLimit::max(
                    crate::runtime::git_hooks::MAX_BODY,
                ))
                .with_state(hooks),
        );
    }
    let accept = connections::accept(listener, app, cancel, tasks.clone());
    tasks.spawn(accept.instrument(tracing::info_span!("http", %addr)));
    Ok(addr)
}

async fn readyz(State(state): State<ApiState>) -> Response {
    match &**state.ready.load() {
        Readiness::Starting => (StatusCode::SERVICE_UNAVAILABLE, NOT_READY).into_response(),
        Readiness::Standby { lease, holder } => {
            format!("standby: waiting for Lease {lease} held by {holder}").into_response()
        }
        Readiness::Ready => "ok".into_response(),
    }
}

async fn metrics(State(state): State<ApiState>) -> Response {
    let registered = registered(&state.registry.load());
    let gauges = Gauges {
        queue_depth: state.queue.depth(),
        jobs_running: state.queue.running(),
        channels: (state.channels.0)(),
        streams: state.streams.get(),
        ..gauges(&state.model, &registered)
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(&gauges),
    )
        .into_response()
}

/// Says plainly that this replica has nothing to serve, rather than an empty picture.
pub(crate) fn serving(state: &ApiState) -> Result<()> {
    match &**state.ready.load() {
        Readiness::Ready => Ok(()),
        Readiness::Starting => Err(ApiError::NotServing(
            "starting: the hub's Controllers are not listed yet; try again shortly".into(),
        )),
        Readiness::Standby { lease, holder } => Err(ApiError::NotServing(format!(
            "standby: this replica works no Controller (Lease {lease} is held by {holder}); ask the replica that leads it"
        ))),
    }
}

async fn clusters(
    State(state): State<ApiState>,
    caller: Caller,
) -> Result<Json<Vec<ClusterSummary<usize>>>> {
    serving(&state)?;
    let visible = state.visible(&caller, state.model.scopes()).await?;
    let registered = registered(&state.registry.load());
    Ok(Json(cluster_list(&state.model, &registered, &visible)))
}

async fn cluster(
    State(state): State<ApiState>,
    caller: Caller,
    Path(cluster): Path<String>,
) -> Result<Json<ClusterSummary<Vec<NamespaceSummary>>>> {
    serving(&state)?;
    let name: ClusterName = cluster.parse()?;
    let scopes = state.model.scopes();
    let scopes = scopes.into_iter().filter(|s| s.cluster == name).collect();
    let visible = state.visible(&caller, scopes).await?;
    let registered = registered(&state.registry.load());
    cluster_detail(&state.model, &registered, &cluster, &visible).map(Json)
}

async fn namespace(
    State(state): State<ApiState>,
    caller: Caller,
    Path((cluster, namespace)): Path<(String, String)>,
) -> Result<Json<ScopeView>> {
    serving(&state)?;
    let key = ClusterNamespace::new(cluster.parse()?, &namespace)?;
    let (visible, access) = state
        .visible_with_access(&caller, vec![key.clone()])
        .await?;
    let registered = registered(&state.registry.load());
    let mut view = scope_view(&state.model, &registered, &cluster, &namespace, &visible)?;
    view.releases = state.releases.shown(&key, &access);
    Ok(Json(view))
}

mod connections;

#[cfg(test)]
pub(crate) mod tests;
