//! What the fleet view shows (pure): the Controllers and clusters a viewer may see, and each
//! release × cluster cell's state, from the Controllers' statuses and the live model.
//!
//! Everything a page shows passes through [`Seen::of`] first: the Controllers of hub namespaces
//! the viewer may read (the status API's rule), the clusters those Controllers target, and, from
//! the live model, only the pods and workloads of those Controllers' own releases. A renderer
//! is given nothing else, so nothing of another tenant can reach it.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    sync::Arc,
};

use kube::ResourceExt as _;

use crate::{
    api::crd::{ChartMessage, ClusterStatus, RolloutCluster, TenancyController, TenancyStatus},
    api::key::{ClusterName, ClusterNamespace},
    observe::model::{Model, PodInfo, WorkloadInfo},
    runtime::auth::Access,
    status::phase,
};

/// One registered cluster, as a viewer may see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterInfo {
    /// Its registered name.
    pub(crate) name: String,
    /// Labels matched by cluster selectors.
    pub(crate) labels: BTreeMap<String, String>,
    /// Pulled by an agent (a joined `MemberCluster`) rather than pushed to.
    pub(crate) pull: bool,
}

/// What one viewer may see: the Controllers of the hub namespaces it may read, and the clusters
/// they target (every registered one for a viewer who may read Controllers everywhere).
pub(crate) struct Seen {
    /// Visible Controllers, by hub namespace and name.
    pub(crate) controllers: Vec<Arc<TenancyController>>,
    /// Visible clusters, in registry order.
    pub(crate) clusters: Vec<ClusterInfo>,
}

impl Seen {
    /// The part of `controllers` and `registered` that `access` shows.
    pub(crate) fn of(
        controllers: Vec<Arc<TenancyController>>,
        registered: Vec<ClusterInfo>,
        access: &Access,
    ) -> Self {
        let mut controllers: Vec<_> = controllers
            .into_iter()
            .filter(|c| access.allows(&c.namespace().unwrap_or_default()))
            .collect();
        controllers.sort_by_key(|c| (c.namespace(), c.name_any()));
        let targeted: BTreeSet<String> = controllers.iter().flat_map(|c| targets(c)).collect();
        let clusters = registered
            .into_iter()
            .filter(|e| matches!(access, Access::Everywhere) || targeted.contains(&e.name))
            .collect();
        Self {
            controllers,
            clusters,
        }
    }

    /// The visible Controller `name` of hub namespace `namespace`.
    pub(crate) fn controller(&self, namespace: &str, name: &str) -> Option<&TenancyController> {
        self.controllers
            .iter()
            .find(|c| c.namespace().as_deref() == Some(namespace) && c.name_any() == name)
            .map(|c| &**c)
    }

    /// The visible cluster `name`.
    pub(crate) fn cluster(&self, name: &str) -> Option<&ClusterInfo> {
        self.clusters.iter().find(|c| c.name == name)
    }
}

/// The clusters a Controller's status names: where it delivers, is rolled out or is reported.
pub(crate) fn targets(c: &TenancyController) -> BTreeSet<String> {
    let Some(status) = &c.status else {
        return BTreeSet::new();
    };
    let tenancies = status.updated_tenancies.iter().map(|t| t.cluster.clone());
    let clusters = status.clusters.iter().map(|s| s.name.clone());
    let rollout = status.rollout.iter().flat_map(|r| &r.clusters);
    tenancies
        .chain(clusters)
        .chain(rollout.map(|r| r.name.clone()))
        .collect()
}

/// A release × cluster cell's state, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum CellState {
    /// The cluster does not answer: what is shown may be stale.
    Unreachable,
    /// A release is not allowed by the tenancy policies, or its chart's signatures fail them.
    Forbidden,
    /// A release failed, conflicts with another owner, cannot be planned or is orphaned.
    Failed,
    /// A release waits for a rollout wave or a dependency, or is suspended.
    Held,
    /// A release's live objects differ from its manifest.
    Drifted,
    /// A release is being installed or upgraded, or its pods are not all ready.
    Progressing,
    /// Every release deployed, its workloads rolled out and its pods ready.
    Ready,
}

impl CellState {
    /// Every state, worst first.
    pub(crate) const ALL: [Self; 7] = [
        Self::Unreachable,
        Self::Forbidden,
        Self::Failed,
        Self::Held,
        Self::Drifted,
        Self::Progressing,
        Self::Ready,
    ];

    /// Its name in URLs and CSS classes.
    pub(crate) fn slug(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Forbidden => "forbidden",
            Self::Failed => "failed",
            Self::Held => "held",
            Self::Drifted => "drifted",
            Self::Progressing => "progressing",
            Self::Ready => "ready",
        }
    }

    /// The state named `slug`, if any.
    pub(crate) fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.slug() == slug)
    }

    /// A one-character sign shown in a cell beside its colour.
    pub(crate) fn sign(self) -> &'static str {
        match self {
            Self::Unreachable => "?",
            Self::Forbidden => "⊘",
            Self::Failed => "✗",
            Self::Held => "‖",
            Self::Drifted => "≠",
            Self::Progressing => "…",
            Self::Ready => "✓",
        }
    }
}

impl fmt::Display for CellState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unreachable => "cluster unreachable",
            Self::Forbidden => "forbidden",
            Self::Failed => "failed",
            Self::Held => "held by a rollout or a dependency",
            Self::Drifted => "drifted",
            Self::Progressing => "progressing",
            Self::Ready => "deployed and ready",
        })
    }
}

/// How many of something are ready, of how many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    pub(crate) ready: usize,
    pub(crate) total: usize,
}

/// One Controller's releases in one cluster, in brief.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    /// The worst state of its releases.
    pub(crate) state: CellState,
    /// Releases deployed, of releases.
    pub(crate) releases: Ready,
    /// Ready pods of its releases, live when the model watches them.
    pub(crate) pods: Ready,
    /// The first error reported, if any.
    pub(crate) error: Option<String>,
}

/// What runs of one Controller's releases in one cluster/namespace, live from the model.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Live {
    /// Whether the namespace's watches are connected (None: not watched here).
    pub(crate) live: Option<bool>,
    /// Why not, when not.
    pub(crate) problem: Option<String>,
    /// When a watch last delivered anything (RFC 3339).
    pub(crate) last_seen: Option<String>,
    /// The releases' pods, by name.
    pub(crate) pods: Vec<PodInfo>,
    /// The releases' workloads.
    pub(crate) workloads: Vec<WorkloadInfo>,
}

/// The pods and workloads of `tenancy`'s releases in its cluster/namespace, from `model`; only
/// those: another Controller's releases in the same namespace are not shown.
pub(crate) fn live(model: &Model, tenancy: &TenancyStatus) -> Live {
    let Some(key) = tenancy
        .cluster
        .parse::<ClusterName>()
        .ok()
        .and_then(|c| ClusterNamespace::new(c, &tenancy.namespace).ok())
    else {
        return Live::default();
    };
    let Some(scope) = model.scope(&key) else {
        return Live::default();
    };
    let releases: BTreeSet<&str> = tenancy
        .chart_messages
        .iter()
        .map(|m| m.release_name.as_str())
        .collect();
    let ours = |release: Option<&str>| release.is_some_and(|r| releases.contains(r));
    Live {
        live: Some(scope.live),
        problem: scope.problem.clone(),
        last_seen: scope.last_seen.map(|t| t.to_string()),
        pods: scope
            .pods
            .values()
            .filter(|p| ours(scope.release_of(p)))
            .cloned()
            .collect(),
        workloads: scope
            .workloads
            .values()
            .filter(|w| ours(w.release.as_deref()))
            .cloned()
            .collect(),
    }
}

/// Whether the operator watches what `t`'s releases run: some release there is managed (not
/// refused, held elsewhere or orphaned). An entry of refused releases only is never fresh, and
/// says nothing of its cluster's reachability.
pub(crate) fn watched(t: &TenancyStatus) -> bool {
    t.chart_messages.iter().any(|m| phase::is_managed(&m.phase))
}

/// The state of one release, by its phase and message alone.
pub(crate) fn release_state(m: &ChartMessage) -> CellState {
    match m.phase.as_str() {
        phase::FORBIDDEN | phase::UNVERIFIED => CellState::Forbidden,
        phase::FAILED | phase::CONFLICT | phase::INVALID | phase::ORPHANED => CellState::Failed,
        phase::SUSPENDED => CellState::Held,
        phase::PENDING if !m.held_by.is_empty() => CellState::Held,
        phase::DEPLOYED if m.drift.is_some() => CellState::Drifted,
        phase::DEPLOYED => CellState::Ready,
        _ => CellState::Progressing,
    }
}

/// Controller `c`'s releases in `cluster`, in brief; None where it delivers nothing there.
pub(crate) fn cell(c: &TenancyController, cluster: &str, model: &Model) -> Option<Cell> {
    ByCluster::of(c).cell(cluster, model)
}

/// One Controller's status indexed by cluster, so a matrix row costs a look-up per column.
#[derive(Default)]
pub(crate) struct ByCluster<'a> {
    tenancies: HashMap<&'a str, Vec<&'a TenancyStatus>>,
    reported: HashMap<&'a str, &'a ClusterStatus>,
    rollout: HashMap<&'a str, &'a RolloutCluster>,
}

impl<'a> ByCluster<'a> {
    /// The index of `c`'s status.
    pub(crate) fn of(c: &'a TenancyController) -> Self {
        let mut index = Self::default();
        let Some(status) = &c.status else {
            return index;
        };
        for t in &status.updated_tenancies {
            index
                .tenancies
                .entry(t.cluster.as_str())
                .or_default()
                .push(t);
        }
        for s in &status.clusters {
            index.reported.insert(s.name.as_str(), s);
        }
        for r in status.rollout.iter().flat_map(|r| &r.clusters) {
            index.rollout.insert(r.name.as_str(), r);
        }
        index
    }

    /// The Controller's releases in `cluster`, in brief; None where it delivers nothing there.
    pub(crate) fn cell(&self, cluster: &str, model: &Model) -> Option<Cell> {
        let tenancies = self
            .tenancies
            .get(cluster)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let reported = self.reported.get(cluster);
        let rollout = self.rollout.get(cluster);
        if tenancies.is_empty() && reported.is_none() && rollout.is_none() {
            return None;
        }
        let mut state = CellState::Ready;
        let (mut releases, mut pods) = (Ready::default(), Ready::default());
        let mut error = None;
        let mut reachable = reported.is_none_or(|s| s.reachable);
        for t in tenancies {
            let live = live(model, t);
            reachable &= live.live.unwrap_or(t.fresh || !watched(t));
            if live.live.is_some() {
                pods.total += live.pods.len();
                pods.ready += live.pods.iter().filter(|p| p.ready).count();
                let unready = live.workloads.iter().any(|w| w.ready < w.desired);
                if unready || live.pods.iter().any(|p| !p.ready) {
                    state = state.min(CellState::Progressing);
                }
            } else {
                pods.total += usize::try_from(t.pods_total).unwrap_or(0);
                pods.ready += usize::try_from(t.pods_ready).unwrap_or(0);
            }
            for m in &t.chart_messages {
                releases.total += 1;
                releases.ready += usize::from(m.phase == phase::DEPLOYED);
                state = state.min(release_state(m));
                if error.is_none() && !m.error_message.is_empty() {
                    error = Some(m.error_message.clone());
                }
            }
        }
        match rollout.map(|r| r.state.as_str()) {
            Some("Failed") => state = state.min(CellState::Failed),
            Some("Pending") => state = state.min(CellState::Held),
            Some("Progressing") => state = state.min(CellState::Progressing),
            _ => {}
        }
        if tenancies.is_empty() && rollout.is_none() {
            state = state.min(CellState::Progressing);
        }
        if !reachable {
            state = CellState::Unreachable;
        }
        Some(Cell {
            state,
            releases,
            pods,
            error,
        })
    }
}

/// The fleet matrix's filters, from the page's query.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Deserialize)]
pub(crate) struct Filters {
    /// Only the Controllers of this hub namespace (the tenant).
    #[serde(default)]
    pub(crate) tenant: String,
    /// Only clusters with this label, as `key=value` (or `key` for any value).
    #[serde(default)]
    pub(crate) label: String,
    /// Only clusters with a cell in this state (its slug).
    #[serde(default)]
    pub(crate) state: String,
}

impl Filters {
    /// Whether `c`'s column is shown.
    pub(crate) fn shows_controller(&self, c: &TenancyController) -> bool {
        self.tenant.is_empty() || c.namespace().as_deref() == Some(self.tenant.as_str())
    }

    /// Whether cluster `c` matches the label filter.
    pub(crate) fn shows_labels(&self, c: &ClusterInfo) -> bool {
        if self.label.is_empty() {
            return true;
        }
        match self.label.split_once('=') {
            Some((k, v)) => c.labels.get(k.trim()).is_some_and(|l| l == v.trim()),
            None => c.labels.contains_key(self.label.trim()),
        }
    }

    /// Whether a row with these `cells` matches the state filter.
    pub(crate) fn shows_cells(&self, cells: &[Option<Cell>]) -> bool {
        match CellState::from_slug(&self.state) {
            None => true,
            Some(wanted) => cells.iter().flatten().any(|c| c.state == wanted),
        }
    }
}
