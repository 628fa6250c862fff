//! The read-only status API's answers: which watched cluster/namespaces a caller may see, the
//! summaries and views of what runs there, the metrics gauges the model gives, and the API's
//! errors as JSON replies.

use std::collections::{BTreeMap, BTreeSet};

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::{
    api::key::{ClusterName, ClusterNamespace, KeyError},
    clusters::registry::{ClusterEntry, ClusterRegistry},
    metrics::Gauges,
    observe::model::{Model, PodInfo, ScopeState, WorkloadInfo},
    runtime::auth::{Access, AuthError},
};

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
    /// The cluster is not registered, or none of the Controllers the caller may read targets it:
    /// the two are told apart only to callers who may read Controllers everywhere.
    #[error(
        "cluster {cluster} is not registered, or no Controller you may read targets it; `/api/v1/clusters` lists those that do"
    )]
    NotShown {
        /// The requested cluster.
        cluster: String,
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
            Self::UnknownCluster { .. } | Self::NotWatched { .. } | Self::NotShown { .. } => {
                StatusCode::NOT_FOUND
            }
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

/// Which watched cluster/namespaces a caller may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Visible {
    /// Every one.
    All,
    /// These only.
    Only(BTreeSet<ClusterNamespace>),
}

impl Visible {
    /// The scopes of `owners` (scope → hub namespaces of the Controllers watching it) that `access`
    /// shows: those with a Controller in a hub namespace the caller may read.
    pub(crate) fn of(
        access: &Access,
        owners: &BTreeMap<ClusterNamespace, BTreeSet<String>>,
    ) -> Self {
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

    pub(crate) fn allows(&self, scope: &ClusterNamespace) -> bool {
        match self {
            Self::All => true,
            Self::Only(scopes) => scopes.contains(scope),
        }
    }

    /// Whether the caller sees cluster `name`: every one, or those holding a scope it may see
    /// (the clusters the Controllers it may read target).
    pub(crate) fn shows_cluster(&self, name: &ClusterName) -> bool {
        match self {
            Self::All => true,
            Self::Only(scopes) => scopes.iter().any(|s| &s.cluster == name),
        }
    }
}

/// Every registered cluster's entry, in registry order (the hub first), then the joined (pull)
/// members, which have no kubeconfig context: the status API serves both alike.
pub(crate) fn registered(registry: &ClusterRegistry) -> Vec<ClusterEntry> {
    let pushed = registry.iter().map(|m| m.entry.clone());
    let joined = registry.names().into_iter().filter_map(|name| {
        let joined = registry.joined(&name)?;
        Some(ClusterEntry {
            name,
            context: String::new(),
            kubeconfig: None,
            labels: joined.entry.labels.clone(),
            variables: joined.entry.variables.clone(),
        })
    });
    pushed.chain(joined).collect()
}

/// How many of something are ready, of how many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Count {
    pub(crate) ready: usize,
    pub(crate) total: usize,
}

impl Count {
    fn add(&mut self, other: Count) {
        self.ready += other.ready;
        self.total += other.total;
    }
}

/// One cluster: its registration, liveness and counts; `N` is a count or a list of namespaces.
#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct ClusterSummary<N> {
    pub(crate) name: String,
    pub(crate) context: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) namespaces: N,
    pub(crate) live: bool,
    pub(crate) pods: Count,
    pub(crate) workloads: Count,
}

/// One watched namespace of a cluster, in brief.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NamespaceSummary {
    pub(crate) namespace: String,
    pub(crate) live: bool,
    pub(crate) last_seen: Option<String>,
    pub(crate) problem: Option<String>,
    pub(crate) pods: Count,
    pub(crate) workloads: Count,
}

/// All that is known of one watched namespace.
///
/// Pods and workloads are lists (in name order) because a workload's key is not a string.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScopeView {
    pub(crate) cluster: String,
    pub(crate) namespace: String,
    pub(crate) live: bool,
    pub(crate) problem: Option<String>,
    pub(crate) last_seen: Option<String>,
    pub(crate) pods: Vec<PodInfo>,
    pub(crate) workloads: Vec<WorkloadInfo>,
    /// The releases the Controllers the caller may read report here, with the values made for
    /// this cluster (what came from Secrets masked).
    pub(crate) releases: Vec<ScopeRelease>,
}

/// One release a Controller's status reports in a cluster/namespace.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScopeRelease {
    /// The Controller's hub namespace.
    pub(crate) hub_namespace: String,
    /// The Controller's name.
    pub(crate) controller: String,
    /// What its status says of the release: phase, revision, settings, values, error.
    #[serde(flatten)]
    pub(crate) message: crate::api::crd::ChartMessage,
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
pub(crate) fn gauges(model: &Model, registered: &[ClusterEntry]) -> Gauges {
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

/// One summary per registered cluster the caller sees, in registry order, from the `visible`
/// namespaces only.
pub(crate) fn cluster_list(
    model: &Model,
    registered: &[ClusterEntry],
    visible: &Visible,
) -> Vec<ClusterSummary<usize>> {
    registered
        .iter()
        .filter(|entry| visible.shows_cluster(&entry.name))
        .map(|entry| {
            let scopes = visible_scopes(model, &entry.name, visible);
            summary(entry, &scopes, scopes.len())
        })
        .collect()
}

/// The registered cluster named `cluster`, or why there is none.
pub(crate) fn find<'a>(registered: &'a [ClusterEntry], cluster: &str) -> Result<&'a ClusterEntry> {
    let name: ClusterName = cluster.parse()?;
    registered
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| ApiError::UnknownCluster {
            cluster: cluster.to_owned(),
            registered: registered.iter().map(|e| e.name.to_string()).collect(),
        })
}

/// One cluster's summary with a line per `visible` watched namespace; a cluster the caller
/// does not see answers as an unregistered one does.
pub(crate) fn cluster_detail(
    model: &Model,
    registered: &[ClusterEntry],
    cluster: &str,
    visible: &Visible,
) -> Result<ClusterSummary<Vec<NamespaceSummary>>> {
    if !visible.shows_cluster(&cluster.parse()?) {
        return Err(ApiError::NotShown {
            cluster: cluster.to_owned(),
        });
    }
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

/// Everything known of one namespace of a registered cluster; one not `visible` is not watched,
/// whether its cluster is registered or not.
pub(crate) fn scope_view(
    model: &Model,
    registered: &[ClusterEntry],
    cluster: &str,
    namespace: &str,
    visible: &Visible,
) -> Result<ScopeView> {
    let key = ClusterNamespace::new(cluster.parse()?, namespace)?;
    let not_watched = || ApiError::NotWatched {
        cluster: cluster.to_owned(),
        namespace: namespace.to_owned(),
    };
    if !visible.allows(&key) {
        return Err(not_watched());
    }
    find(registered, cluster)?;
    let state = model.scope(&key).ok_or_else(not_watched)?;
    Ok(ScopeView {
        cluster: key.cluster.to_string(),
        namespace: key.namespace,
        live: state.live,
        problem: state.problem,
        last_seen: state.last_seen.map(|t| t.to_string()),
        pods: state.pods.into_values().collect(),
        workloads: state.workloads.into_values().collect(),
        releases: Vec::new(),
    })
}
