//! HTTP endpoints: health, readiness, Prometheus metrics and the read-only status API, which shows each caller only what its token may read.

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
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    api::crd::Controller,
    api::key::{ClusterName, ClusterNamespace, KeyError},
    clusters::registry::{ClusterEntry, ClusterRegistry, SharedRegistry},
    metrics::{Gauges, Metrics},
    observe::model::{Model, PodInfo, ScopeState, WorkloadInfo},
    queue::handle::HelmQueue,
    runtime::auth::{Access, AuthError, Identity, Reviewer, Token},
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

/// Result alias for this module.
pub(crate) type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Why a status API request cannot be answered; each becomes a JSON `{"error": ...}` reply.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// The path names a cluster or namespace that is not a DNS-1123 label.
    #[error("{0}")]
    BadName(#[from] KeyError),
    /// The cluster is not in the registry.
    #[error("cluster {cluster:?} is not registered; registered: {}", registered.join(", "))]
    UnknownCluster {
        /// The requested cluster.
        cluster: String,
        /// Every registered cluster, in registry order.
        registered: Vec<String>,
    },
    /// The namespace of a registered cluster is not watched, or not by a Controller the caller
    /// may read: the two are told apart by no one but the operator.
    #[error("namespace {namespace} of cluster {cluster} is not watched: no tenancy targets it")]
    NotWatched {
        /// The cluster.
        cluster: String,
        /// The requested namespace.
        namespace: String,
    },
    /// The caller has no identity the hub accepts, or the hub could not be asked.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// This replica works no Controller (starting, or standing by for a Lease): it has nothing
    /// true to tell.
    #[error("{0}")]
    NotServing(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match self {
            Self::BadName(_) => StatusCode::BAD_REQUEST,
            Self::UnknownCluster { .. } | Self::NotWatched { .. } => StatusCode::NOT_FOUND,
            Self::Auth(e) => return e.into_response(),
            Self::NotServing(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
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

type OwnersOf = Box<dyn Fn(&ClusterNamespace) -> Vec<ObjectRef<Controller>> + Send + Sync>;

impl ScopeOwners {
    /// Answers with `owners` from now on (the first call only).
    pub(crate) fn set(
        &self,
        owners: impl Fn(&ClusterNamespace) -> Vec<ObjectRef<Controller>> + Send + Sync + 'static,
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

/// Which watched cluster/namespaces a caller may see.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Visible {
    /// Every one.
    All,
    /// These only.
    Only(BTreeSet<ClusterNamespace>),
}

impl Visible {
    /// The scopes of `owners` (scope → hub namespaces of the Controllers watching it) that `access`
    /// shows: those with a Controller in a hub namespace the caller may read.
    fn of(access: &Access, owners: &BTreeMap<ClusterNamespace, BTreeSet<String>>) -> Self {
        match access {
            Access::Everywhere => Self::All,
            Access::Namespaces(_) => Self::Only(
                owners
                    .iter()
                    .filter(|(_, hub)| hub.iter().any(|ns| access.allows(ns)))
                    .map(|(scope, _)| scope.clone())
                    .collect(),
            ),
        }
    }

    fn allows(&self, scope: &ClusterNamespace) -> bool {
        match self {
            Self::All => true,
            Self::Only(scopes) => scopes.contains(scope),
        }
    }
}

impl ApiState {
    /// What `caller` may see of `scopes`: access reviews of the hub namespaces of their Controllers.
    async fn visible(&self, caller: &Caller, scopes: Vec<ClusterNamespace>) -> Result<Visible> {
        let owners: BTreeMap<ClusterNamespace, BTreeSet<String>> = scopes
            .into_iter()
            .map(|scope| {
                let hub = self.owners.hub_namespaces(&scope);
                (scope, hub)
            })
            .collect();
        let namespaces = owners.values().flatten().cloned().collect();
        let access = self.reviewer.access(&caller.0, namespaces).await?;
        Ok(Visible::of(&access, &owners))
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

/// Listens on `addr` and serves [`router`] until `cancel` fires; returns the bound address.
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
    tracing::info!(%addr, "serving health, metrics and the status API");
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let server = axum::serve(listener, app).with_graceful_shutdown(cancel.cancelled_owned());
    tasks.spawn(
        async move {
            if let Err(error) = server.await {
                tracing::error!(%error, "the HTTP server stopped");
            }
        }
        .instrument(tracing::info_span!("http", %addr)),
    );
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
fn serving(state: &ApiState) -> Result<()> {
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
    let registered = registered(&state.registry.load());
    let name = &find(&registered, &cluster)?.name;
    let scopes = state.model.scopes();
    let scopes = scopes.into_iter().filter(|s| &s.cluster == name).collect();
    let visible = state.visible(&caller, scopes).await?;
    cluster_detail(&state.model, &registered, &cluster, &visible).map(Json)
}

async fn namespace(
    State(state): State<ApiState>,
    caller: Caller,
    Path((cluster, namespace)): Path<(String, String)>,
) -> Result<Json<ScopeView>> {
    serving(&state)?;
    let registered = registered(&state.registry.load());
    let entry = find(&registered, &cluster)?;
    let key = ClusterNamespace::new(entry.name.clone(), &namespace)?;
    let visible = state.visible(&caller, vec![key]).await?;
    scope_view(&state.model, &registered, &cluster, &namespace, &visible).map(Json)
}

/// Every registered cluster's entry, in registry order (the hub first).
fn registered(registry: &ClusterRegistry) -> Vec<ClusterEntry> {
    registry.iter().map(|m| m.entry.clone()).collect()
}

/// How many of something are ready, of how many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
struct Count {
    ready: usize,
    total: usize,
}

impl Count {
    fn add(&mut self, other: Count) {
        self.ready += other.ready;
        self.total += other.total;
    }
}

/// One cluster: its registration, liveness and counts; `N` is a count or a list of namespaces.
#[derive(Debug, PartialEq, Serialize)]
struct ClusterSummary<N> {
    name: String,
    context: String,
    labels: BTreeMap<String, String>,
    namespaces: N,
    live: bool,
    pods: Count,
    workloads: Count,
}

/// One watched namespace of a cluster, in brief.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct NamespaceSummary {
    namespace: String,
    live: bool,
    last_seen: Option<String>,
    problem: Option<String>,
    pods: Count,
    workloads: Count,
}

/// All that is known of one watched namespace.
///
/// Pods and workloads are lists (in name order) because a workload's key is not a string.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct ScopeView {
    cluster: String,
    namespace: String,
    live: bool,
    problem: Option<String>,
    last_seen: Option<String>,
    pods: Vec<PodInfo>,
    workloads: Vec<WorkloadInfo>,
}

fn pod_count(scope: &ScopeState) -> Count {
    Count {
        ready: scope.pods.values().filter(|p| p.ready).count(),
        total: scope.pods.len(),
    }
}

fn workload_count(scope: &ScopeState) -> Count {
    Count {
        ready: scope
            .workloads
            .values()
            .filter(|w| w.ready >= w.desired)
            .count(),
        total: scope.workloads.len(),
    }
}

/// A cluster is live when a watch of one of its namespaces is connected, or none is watched.
fn cluster_live(scopes: &BTreeMap<String, ScopeState>) -> bool {
    scopes.is_empty() || scopes.values().any(|s| s.live)
}

/// The metrics gauges the model and the registry give (the queue's are left at zero).
fn gauges(model: &Model, registered: &[ClusterEntry]) -> Gauges {
    Gauges {
        clusters: registered
            .iter()
            .map(|e| (e.name.to_string(), cluster_live(&model.cluster(&e.name))))
            .collect(),
        watched_namespaces: model.scopes().len(),
        ..Gauges::default()
    }
}

fn summary<N>(
    entry: &ClusterEntry,
    scopes: &BTreeMap<String, ScopeState>,
    namespaces: N,
) -> ClusterSummary<N> {
    let (mut pods, mut workloads) = (Count::default(), Count::default());
    for scope in scopes.values() {
        pods.add(pod_count(scope));
        workloads.add(workload_count(scope));
    }
    ClusterSummary {
        name: entry.name.to_string(),
        context: entry.context.clone(),
        labels: entry.labels.clone(),
        namespaces,
        live: cluster_live(scopes),
        pods,
        workloads,
    }
}

/// The watched namespaces of `cluster` that are `visible`, with what is known of them.
fn visible_scopes(
    model: &Model,
    cluster: &ClusterName,
    visible: &Visible,
) -> BTreeMap<String, ScopeState> {
    let mut scopes = model.cluster(cluster);
    scopes.retain(|namespace, _| {
        visible.allows(&ClusterNamespace {
            cluster: cluster.clone(),
            namespace: namespace.clone(),
        })
    });
    scopes
}

/// One summary per registered cluster, in registry order, from the `visible` namespaces only.
fn cluster_list(
    model: &Model,
    registered: &[ClusterEntry],
    visible: &Visible,
) -> Vec<ClusterSummary<usize>> {
    registered
        .iter()
        .map(|entry| {
            let scopes = visible_scopes(model, &entry.name, visible);
            summary(entry, &scopes, scopes.len())
        })
        .collect()
}

/// The registered cluster named `cluster`, or why there is none.
fn find<'a>(registered: &'a [ClusterEntry], cluster: &str) -> Result<&'a ClusterEntry> {
    let name: ClusterName = cluster.parse()?;
    registered
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| ApiError::UnknownCluster {
            cluster: cluster.to_owned(),
            registered: registered.iter().map(|e| e.name.to_string()).collect(),
        })
}

/// One cluster's summary with a line per `visible` watched namespace.
fn cluster_detail(
    model: &Model,
    registered: &[ClusterEntry],
    cluster: &str,
    visible: &Visible,
) -> Result<ClusterSummary<Vec<NamespaceSummary>>> {
    let entry = find(registered, cluster)?;
    let scopes = visible_scopes(model, &entry.name, visible);
    let namespaces = scopes
        .iter()
        .map(|(namespace, s)| NamespaceSummary {
            namespace: namespace.clone(),
            live: s.live,
            last_seen: s.last_seen.map(|t| t.to_string()),
            problem: s.problem.clone(),
            pods: pod_count(s),
            workloads: workload_count(s),
        })
        .collect();
    Ok(summary(entry, &scopes, namespaces))
}

/// Everything known of one namespace of a registered cluster; one not `visible` is not watched.
fn scope_view(
    model: &Model,
    registered: &[ClusterEntry],
    cluster: &str,
    namespace: &str,
    visible: &Visible,
) -> Result<ScopeView> {
    let entry = find(registered, cluster)?;
    let key = ClusterNamespace::new(entry.name.clone(), namespace)?;
    let state = visible.allows(&key).then(|| model.scope(&key)).flatten();
    let state = state.ok_or_else(|| ApiError::NotWatched {
        cluster: cluster.to_owned(),
        namespace: namespace.to_owned(),
    })?;
    Ok(ScopeView {
        cluster: key.cluster.to_string(),
        namespace: key.namespace,
        live: state.live,
        problem: state.problem,
        last_seen: state.last_seen.map(|t| t.to_string()),
        pods: state.pods.into_values().collect(),
        workloads: state.workloads.into_values().collect(),
    })
}

#[cfg(test)]
mod tests {
    use std::{path::Path as FsPath, time::Duration};

    use axum::body::Body;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;
    use crate::{
        clusters::registry::{HubSource, RegistrationFile},
        observe::model::{Change, WorkloadKind, WorkloadRef},
        queue::QueueConfig,
        runtime::auth::fake,
    };

    fn entry(name: &str, labels: &[(&str, &str)]) -> ClusterEntry {
        ClusterEntry {
            name: name.parse().unwrap(),
            context: format!("ctx-{name}"),
            kubeconfig: None,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn pod(name: &str, ready: bool) -> PodInfo {
        PodInfo {
            name: name.into(),
            phase: "Running".into(),
            ready,
            restarts: 0,
            reason: String::new(),
            owner: None,
        }
    }

    fn workload(name: &str, ready: i32, desired: i32) -> WorkloadInfo {
        WorkloadInfo {
            id: WorkloadRef {
                kind: WorkloadKind::Deployment,
                name: name.into(),
            },
            release: Some("foo".into()),
            ready,
            desired,
            rolled_out: ready == desired,
        }
    }

    fn apply(model: &Model, scope: &str, change: Change) {
        model.apply((scope.parse().unwrap(), change), Timestamp::UNIX_EPOCH);
    }

    /// member-1: `foo` live (1 of 2 pods, 1 of 2 workloads ready) and `bar` lost;
    /// member-2: `baz` lost; the hub watches nothing.
    fn model() -> Model {
        let model = Model::default();
        apply(
            &model,
            "member-1/foo",
            Change::PodsListed(vec![pod("a", true), pod("b", false)]),
        );
        let workloads = vec![workload("web", 2, 2), workload("api", 0, 1)];
        apply(
            &model,
            "member-1/foo",
            Change::WorkloadsListed(WorkloadKind::Deployment, workloads),
        );
        apply(&model, "member-1/bar", Change::Pod(pod("c", true)));
        apply(
            &model,
            "member-1/bar",
            Change::Lost("connection refused".into()),
        );
        apply(
            &model,
            "member-2/baz",
            Change::Lost("no route to host".into()),
        );
        model
    }

    fn registered() -> Vec<ClusterEntry> {
        vec![
            entry("hub", &[]),
            entry("member-1", &[("region", "east")]),
            entry("member-2", &[]),
        ]
    }

    #[test]
    fn the_cluster_list_counts_ready_pods_and_workloads_per_cluster_in_registry_order() {
        let list =
            serde_json::to_value(cluster_list(&model(), &registered(), &Visible::All)).unwrap();
        assert_eq!(
            list,
            json!([
                {"name": "hub", "context": "ctx-hub", "labels": {}, "namespaces": 0, "live": true,
                 "pods": {"ready": 0, "total": 0}, "workloads": {"ready": 0, "total": 0}},
                {"name": "member-1", "context": "ctx-member-1", "labels": {"region": "east"},
                 "namespaces": 2, "live": true,
                 "pods": {"ready": 2, "total": 3}, "workloads": {"ready": 1, "total": 2}},
                {"name": "member-2", "context": "ctx-member-2", "labels": {}, "namespaces": 1,
                 "live": false, "pods": {"ready": 0, "total": 0}, "workloads": {"ready": 0, "total": 0}},
            ])
        );
    }

    #[test]
    fn a_cluster_is_reachable_when_any_namespace_is_live_or_none_is_watched() {
        let g = gauges(&model(), &registered());
        assert_eq!(
            g.clusters,
            [
                ("hub".to_owned(), true),
                ("member-1".to_owned(), true),
                ("member-2".to_owned(), false)
            ]
        );
        assert_eq!(g.watched_namespaces, 3);
    }

    #[test]
    fn a_cluster_detail_has_a_line_per_watched_namespace() {
        let detail = cluster_detail(&model(), &registered(), "member-1", &Visible::All).unwrap();
        let detail = serde_json::to_value(detail).unwrap();
        assert_eq!(detail["labels"], json!({"region": "east"}));
        assert_eq!(
            detail["namespaces"],
            json!([
                {"namespace": "bar", "live": false, "lastSeen": "1970-01-01T00:00:00Z",
                 "problem": "connection refused",
                 "pods": {"ready": 1, "total": 1}, "workloads": {"ready": 0, "total": 0}},
                {"namespace": "foo", "live": true, "lastSeen": "1970-01-01T00:00:00Z",
                 "problem": null,
                 "pods": {"ready": 1, "total": 2}, "workloads": {"ready": 1, "total": 2}},
            ])
        );
    }

    /// The hub namespaces of the Controllers watching each scope of [`model`]: member-1/foo is
    /// team-a's, member-1/bar team-b's, member-2/baz both teams', and member-2/qux (not watched
    /// yet) team-a's.
    fn owners() -> BTreeMap<ClusterNamespace, BTreeSet<String>> {
        [
            ("member-1/foo", &["team-a"][..]),
            ("member-1/bar", &["team-b"]),
            ("member-2/baz", &["team-a", "team-b"]),
            ("member-2/qux", &["team-a"]),
        ]
        .into_iter()
        .map(|(scope, hub)| {
            let hub = hub.iter().map(|ns| ns.to_string()).collect();
            (scope.parse().unwrap(), hub)
        })
        .collect()
    }

    fn allowed(namespaces: &[&str]) -> Access {
        Access::Namespaces(namespaces.iter().map(|ns| ns.to_string()).collect())
    }

    #[test]
    fn a_caller_sees_the_scopes_with_a_controller_in_a_hub_namespace_it_may_read() {
        let only =
            |scopes: &[&str]| Visible::Only(scopes.iter().map(|s| s.parse().unwrap()).collect());
        assert_eq!(
            Visible::of(&allowed(&["team-a"]), &owners()),
            only(&["member-1/foo", "member-2/baz", "member-2/qux"])
        );
        assert_eq!(
            Visible::of(&allowed(&["team-b"]), &owners()),
            only(&["member-1/bar", "member-2/baz"])
        );
        assert_eq!(Visible::of(&allowed(&[]), &owners()), only(&[]));
        assert_eq!(Visible::of(&Access::Everywhere, &owners()), Visible::All);
        assert!(Visible::All.allows(&"member-9/anything".parse().unwrap()));
    }

    #[test]
    fn the_cluster_list_of_a_tenant_counts_only_the_namespaces_it_may_see() {
        let visible = Visible::of(&allowed(&["team-b"]), &owners());
        let list = serde_json::to_value(cluster_list(&model(), &registered(), &visible)).unwrap();
        let counts: Vec<(&Value, &Value, &Value)> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (&c["name"], &c["namespaces"], &c["pods"]))
            .collect();
        assert_eq!(
            counts,
            [
                (&json!("hub"), &json!(0), &json!({"ready": 0, "total": 0})),
                (
                    &json!("member-1"),
                    &json!(1),
                    &json!({"ready": 1, "total": 1})
                ),
                (
                    &json!("member-2"),
                    &json!(1),
                    &json!({"ready": 0, "total": 0})
                ),
            ]
        );
        assert_eq!(list[1]["workloads"], json!({"ready": 0, "total": 0}));
        let nothing = cluster_list(
            &model(),
            &registered(),
            &Visible::of(&allowed(&[]), &owners()),
        );
        assert!(
            nothing
                .iter()
                .all(|c| c.namespaces == 0 && c.pods.total == 0)
        );
        assert_eq!(nothing.len(), 3, "every registered cluster is listed");
    }

    #[test]
    fn a_cluster_detail_of_a_tenant_lists_only_the_namespaces_it_may_see() {
        let visible = Visible::of(&allowed(&["team-a"]), &owners());
        let detail = cluster_detail(&model(), &registered(), "member-1", &visible).unwrap();
        let namespaces: Vec<&str> = detail
            .namespaces
            .iter()
            .map(|n| n.namespace.as_str())
            .collect();
        assert_eq!(namespaces, ["foo"]);
        assert_eq!((detail.pods.total, detail.workloads.total), (2, 2));
    }

    #[test]
    fn a_scope_a_tenant_may_not_see_is_not_watched_as_far_as_it_can_tell() {
        let visible = Visible::of(&allowed(&["team-a"]), &owners());
        let hidden = scope_view(&model(), &registered(), "member-1", "bar", &visible).unwrap_err();
        let unwatched =
            scope_view(&model(), &registered(), "member-1", "nope", &visible).unwrap_err();
        assert_eq!(
            (hidden.to_string(), unwatched.to_string()),
            (
                "namespace bar of cluster member-1 is not watched: no tenancy targets it".into(),
                "namespace nope of cluster member-1 is not watched: no tenancy targets it".into()
            )
        );
        let shown = scope_view(&model(), &registered(), "member-1", "foo", &visible).unwrap();
        assert_eq!(shown.pods.len(), 2);
    }

    #[test]
    fn an_unregistered_cluster_is_named_with_the_registered_ones() {
        let err = cluster_detail(&model(), &registered(), "member-9", &Visible::All).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cluster \"member-9\" is not registered; registered: hub, member-1, member-2"
        );
        let err =
            scope_view(&model(), &registered(), "member-9", "foo", &Visible::All).unwrap_err();
        assert!(matches!(err, ApiError::UnknownCluster { .. }), "{err}");
    }

    #[test]
    fn an_invalid_cluster_or_namespace_name_is_a_bad_request() {
        let err = cluster_detail(&model(), &registered(), "Member_1", &Visible::All).unwrap_err();
        assert!(matches!(err, ApiError::BadName(_)), "{err}");
        assert!(
            err.to_string()
                .contains("\"Member_1\" is not a DNS-1123 label"),
            "{err}"
        );
        let err =
            scope_view(&model(), &registered(), "member-1", "Foo", &Visible::All).unwrap_err();
        assert!(err.to_string().contains("namespace \"Foo\""), "{err}");
    }

    #[test]
    fn a_namespace_view_has_every_pod_and_workload_with_its_cluster_and_namespace() {
        let view = scope_view(&model(), &registered(), "member-1", "foo", &Visible::All).unwrap();
        let view = serde_json::to_value(view).unwrap();
        assert_eq!(
            (&view["cluster"], &view["namespace"]),
            (&json!("member-1"), &json!("foo"))
        );
        assert_eq!(
            (&view["live"], &view["problem"]),
            (&json!(true), &Value::Null)
        );
        let pods: Vec<&Value> = view["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p["name"])
            .collect();
        assert_eq!(pods, [&json!("a"), &json!("b")]);
        assert_eq!(
            view["workloads"][0],
            json!({"id": {"kind": "Deployment", "name": "api"}, "release": "foo", "ready": 0, "desired": 1, "rolled_out": false})
        );
    }

    #[test]
    fn a_namespace_no_tenancy_targets_is_not_watched() {
        let err =
            scope_view(&model(), &registered(), "member-1", "other", &Visible::All).unwrap_err();
        assert_eq!(
            err.to_string(),
            "namespace other of cluster member-1 is not watched: no tenancy targets it"
        );
    }

    /// A registry of the hub, member-1 (labelled) and member-2, built from a kubeconfig in `dir`.
    async fn registry(dir: &FsPath) -> SharedRegistry {
        let kc = dir.join("kubeconfig");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts:\n  - {name: hub, context: {cluster: c, user: u}}\n  - {name: member-1, context: {cluster: c, user: u}}\n  - {name: member-2, context: {cluster: c, user: u}}\ncurrent-context: hub\n",
        )
        .unwrap();
        let file = RegistrationFile::parse(
            FsPath::new("clusters.yaml"),
            &format!(
                "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}, labels: {{region: east}}}}\n  - {{name: member-2, context: member-2, kubeconfig: {k}}}\n",
                k = kc.display()
            ),
        )
        .unwrap();
        let hub = HubSource {
            kubeconfig: Some(kc),
            context: None,
        };
        let registry = ClusterRegistry::connect(&hub, &file).await.unwrap();
        Arc::new(arc_swap::ArcSwap::from_pointee(registry))
    }

    async fn state() -> (ApiState, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        metrics.watch_event();
        let (hub, _) = fake::hub();
        let scope_owners = ScopeOwners::default();
        scope_owners.set(|scope| {
            let hub = owners().remove(scope).unwrap_or_default();
            hub.into_iter()
                .map(|ns| ObjectRef::new("ctl").within(&ns))
                .collect()
        });
        let state = ApiState {
            model: Arc::new(model()),
            registry: registry(dir.path()).await,
            metrics: Arc::new(metrics),
            queue: HelmQueue::new(QueueConfig::default()),
            ready: Arc::new(ArcSwap::from_pointee(Readiness::Ready)),
            channels: ChannelDepths::default(),
            reviewer: Arc::new(Reviewer::new(hub)),
            owners: scope_owners,
            streams: StreamCounts::default(),
        };
        (state, dir)
    }

    /// GETs `uri` from the router as the fake hub's admin: status, content type and body.
    async fn get(state: &ApiState, uri: &str) -> (StatusCode, String, String) {
        let (status, headers, body) = get_as(state, uri, Some(fake::ADMIN)).await;
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, content_type, body)
    }

    /// GETs `uri` from the router with `token`, if any: status, headers and body.
    async fn get_as(
        state: &ApiState,
        uri: &str,
        token: Option<&str>,
    ) -> (StatusCode, axum::http::HeaderMap, String) {
        let mut request = axum::http::Request::get(uri);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = router(state.clone())
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, String::from_utf8(body.to_vec()).unwrap())
    }

    async fn get_json(state: &ApiState, uri: &str) -> (StatusCode, Value) {
        let (status, content_type, body) = get(state, uri).await;
        assert_eq!(content_type, "application/json", "{uri}");
        (status, serde_json::from_str(&body).unwrap())
    }

    #[tokio::test]
    async fn the_status_api_answers_401_with_a_bearer_challenge_to_callers_without_a_valid_token() {
        let (state, _dir) = state().await;
        for uri in [
            "/api/v1/clusters",
            "/api/v1/clusters/member-1",
            "/api/v1/clusters/Not_A_Label",
            "/api/v1/clusters/member-1/namespaces/foo",
        ] {
            for token in [None, Some("garbage")] {
                let (status, headers, body) = get_as(&state, uri, token).await;
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri} {token:?}");
                assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
                let body: Value = serde_json::from_str(&body).unwrap();
                assert!(body["error"].is_string(), "{body}");
            }
        }
        let request = axum::http::Request::get("/api/v1/clusters")
            .header(header::AUTHORIZATION, "Basic YWRtaW46YWRtaW4=")
            .body(Body::empty())
            .unwrap();
        let response = router(state.clone()).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn a_replica_working_no_controller_says_so_instead_of_showing_an_empty_picture() {
        let (state, _dir) = state().await;
        state.ready.store(Arc::new(Readiness::Standby {
            lease: "tenancy-hub/tenancy-hub-shard-*-of-3".into(),
            holder: "other replicas".into(),
        }));
        for uri in ["/api/v1/clusters", "/api/v1/clusters/member-1"] {
            let (status, body) = get_json(&state, uri).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
            let error = body["error"].as_str().unwrap();
            assert!(
                error.starts_with("standby: this replica works no Controller"),
                "{error}"
            );
        }
        state.ready.store(Arc::new(Readiness::Starting));
        let (status, body) = get_json(&state, "/api/v1/clusters").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body["error"].as_str().unwrap().starts_with("starting"));
    }

    #[tokio::test]
    async fn health_readiness_and_metrics_need_no_token() {
        let (state, _dir) = state().await;
        state.ready.store(Arc::new(Readiness::Ready));
        for uri in ["/healthz", "/readyz", "/metrics"] {
            let (status, _, _) = get_as(&state, uri, None).await;
            assert_eq!(status, StatusCode::OK, "{uri}");
        }
    }

    #[tokio::test]
    async fn a_hub_that_fails_the_review_makes_the_status_api_unavailable() {
        let (state, _dir) = state().await;
        let (status, headers, body) = get_as(&state, "/api/v1/clusters", Some(fake::BROKEN)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!headers.contains_key(header::WWW_AUTHENTICATE));
        let body: Value = serde_json::from_str(&body).unwrap();
        let error = body["error"].as_str().unwrap();
        assert!(
            error.starts_with("cannot check the caller with the hub (TokenReview): ")
                && error.contains("etcdserver: request timed out"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_tenant_sees_its_own_scopes_and_gets_404_for_the_others_like_for_unwatched_ones() {
        let (state, _dir) = state().await;
        let team_a = Some(fake::TEAM_A);
        let (status, _, list) = get_as(&state, "/api/v1/clusters", team_a).await;
        assert_eq!(status, StatusCode::OK);
        let list: Value = serde_json::from_str(&list).unwrap();
        let namespaces: Vec<&Value> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["namespaces"])
            .collect();
        assert_eq!(namespaces, [&json!(0), &json!(1), &json!(1)]);
        let (_, _, detail) = get_as(&state, "/api/v1/clusters/member-1", team_a).await;
        let detail: Value = serde_json::from_str(&detail).unwrap();
        assert_eq!(
            detail["namespaces"].as_array().unwrap().len(),
            1,
            "{detail}"
        );
        assert_eq!(detail["namespaces"][0]["namespace"], "foo");
        let (status, _, _) =
            get_as(&state, "/api/v1/clusters/member-1/namespaces/foo", team_a).await;
        assert_eq!(status, StatusCode::OK);
        let hidden = get_as(&state, "/api/v1/clusters/member-1/namespaces/bar", team_a).await;
        let unwatched = get_as(&state, "/api/v1/clusters/member-1/namespaces/bax", team_a).await;
        assert_eq!(hidden.0, StatusCode::NOT_FOUND);
        assert_eq!(hidden.0, unwatched.0);
        assert_eq!(hidden.2.replace("bar", "bax"), unwatched.2);
    }

    #[tokio::test]
    async fn healthz_always_answers_ok() {
        let (state, _dir) = state().await;
        let (status, _, body) = get(&state, "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }

    #[tokio::test]
    async fn readyz_answers_ok_only_once_the_controllers_are_listed() {
        let (state, _dir) = state().await;
        state.ready.store(Arc::new(Readiness::Starting));
        let (status, _, body) = get(&state, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, NOT_READY)
        );
        state.ready.store(Arc::new(Readiness::Ready));
        let (status, _, body) = get(&state, "/readyz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }

    #[tokio::test]
    async fn a_standby_is_ready_and_says_which_lease_it_waits_for_and_who_holds_it() {
        let (state, _dir) = state().await;
        state.ready.store(Arc::new(Readiness::Standby {
            lease: "tenancy-hub/tenancy-hub".into(),
            holder: "host-42".into(),
        }));
        let (status, _, body) = get(&state, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::OK,
                "standby: waiting for Lease tenancy-hub/tenancy-hub held by host-42"
            )
        );
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text_with_gauges_from_the_model_and_registry() {
        let (state, _dir) = state().await;
        let (status, content_type, body) = get(&state, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            content_type.starts_with("application/openmetrics-text; version=1.0.0"),
            "{content_type}"
        );
        for line in [
            "tenancy_hub_watch_events_total 1",
            "tenancy_hub_queue_depth 0",
            "tenancy_hub_jobs_running 0",
            "tenancy_hub_cluster_reachable{cluster=\"hub\"} 1",
            "tenancy_hub_cluster_reachable{cluster=\"member-1\"} 1",
            "tenancy_hub_cluster_reachable{cluster=\"member-2\"} 0",
            "tenancy_hub_watched_namespaces 3",
        ] {
            assert!(
                body.lines().any(|l| l == line),
                "{line} missing from\n{body}"
            );
        }
    }

    #[tokio::test]
    async fn the_cluster_list_has_every_registered_cluster_hub_first() {
        let (state, _dir) = state().await;
        let (status, list) = get_json(&state, "/api/v1/clusters").await;
        assert_eq!(status, StatusCode::OK);
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["hub", "member-1", "member-2"]);
        assert_eq!(list[1]["context"], "member-1");
        assert_eq!(list[1]["labels"], json!({"region": "east"}));
        assert_eq!(list[1]["pods"], json!({"ready": 2, "total": 3}));
    }

    #[tokio::test]
    async fn a_cluster_route_answers_its_namespaces_or_a_404_or_400() {
        let (state, _dir) = state().await;
        let (status, detail) = get_json(&state, "/api/v1/clusters/member-2").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(detail["namespaces"][0]["namespace"], "baz");
        assert_eq!(detail["namespaces"][0]["problem"], "no route to host");
        let (status, body) = get_json(&state, "/api/v1/clusters/x").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(
            body,
            json!({"error": "cluster \"x\" is not registered; registered: hub, member-1, member-2"})
        );
        let (status, body) = get_json(&state, "/api/v1/clusters/Not_A_Label").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body["error"].as_str().unwrap().contains("DNS-1123"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_namespace_route_answers_its_state_or_a_404() {
        let (state, _dir) = state().await;
        let (status, view) = get_json(&state, "/api/v1/clusters/member-1/namespaces/foo").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            (&view["cluster"], &view["namespace"]),
            (&json!("member-1"), &json!("foo"))
        );
        assert_eq!(view["pods"].as_array().unwrap().len(), 2);
        assert_eq!(view["workloads"].as_array().unwrap().len(), 2);
        let (status, body) = get_json(&state, "/api/v1/clusters/member-1/namespaces/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(
            body["error"],
            "namespace nope of cluster member-1 is not watched: no tenancy targets it"
        );
        let (status, _) = get_json(&state, "/api/v1/clusters/member-9/namespaces/foo").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn serve_answers_on_the_port_it_bound_and_stops_when_cancelled() {
        let (state, _dir) = state().await;
        let cancel = CancellationToken::new();
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            state,
            cancel.clone(),
            &Default::default(),
        )
        .await
        .unwrap();
        assert_ne!(addr.port(), 0);
        let answer = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            stream
                .read_to_string(&mut answer)
                .expect("an answer in time");
            answer
        })
        .await
        .unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("\r\n\r\nok"),
            "{answer}"
        );
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(30), async {
            while tokio::net::TcpStream::connect(addr).await.is_ok() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the listener closes after cancellation");
    }

    #[tokio::test]
    async fn serve_names_the_address_it_cannot_bind() {
        let (state, _dir) = state().await;
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let err = serve(addr, state, CancellationToken::new(), &Default::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        assert!(
            err.to_string()
                .contains(&format!("cannot listen on {addr}")),
            "{err}"
        );
    }
}
