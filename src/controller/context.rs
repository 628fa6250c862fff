//! The state the reconciler and its background loops share, and the settings it plans with.

use std::{path::PathBuf, sync::Arc, time::Duration};

use dashmap::DashMap;
use kube::runtime::reflector::Store;

/// Settings the reconciler plans with.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Directory of local charts (`--chart-home`, `CHART_HOME`).
    pub(crate) chart_home: PathBuf,
    /// How long a release may stay `pending-*` before it is cleared.
    pub(crate) pending_timeout: Duration,
    /// The one hub namespace reconciled (`--namespace`); every namespace when None.
    pub(crate) scope: Option<String>,
    /// The label selector of the Controllers reconciled (`--selector`); every one when None.
    pub(crate) selector: Option<String>,
    /// How often charts are looked at again: chart-home directories re-read, repository and OCI
    /// versions resolved again (`--chart-interval`).
    pub(crate) chart_interval: Duration,
    /// How often every release is compared with its manifest (`--drift-interval`).
    pub(crate) drift_interval: Duration,
    /// Whether the tenancy policies refuse or only warn (`--tenancy-policy`).
    pub(crate) policy_mode: crate::policy::Mode,
    /// The operator's own namespace, which no policy pattern matches.
    pub(crate) operator_namespace: String,
}

/// What the `Controller` reconciler reads and writes, passed as one `Arc`, in four parts: the
/// hub, the member clusters, what is kept between reconciles, and where decisions go. Each part
/// and each handle in it is cheap to clone: a background loop or task takes the few handles it
/// uses (see `controller::loops`), never this.
pub(crate) struct Context {
    /// The hub: its client, the resources seen on it, the shards led here, the settings.
    pub(crate) hub: Hub,
    /// The member clusters: registered, linked, their release records, what runs there.
    pub(crate) members: Members,
    /// What is kept between reconciles: claims, orphans, the per-Controller index, charts and
    /// the hub objects values read.
    pub(crate) kept: Kept,
    /// Where decisions go: the Helm queue, status, Events, Alerts and metrics.
    pub(crate) out: Out,
}

/// The hub as the reconciler sees it.
#[derive(Clone)]
pub(crate) struct Hub {
    /// Client of the hub cluster.
    pub(crate) client: kube::Client,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<crate::api::crd::TenancyController>,
    /// Every `TenancyPolicy` on the hub.
    pub(crate) policies: Store<crate::api::policy::TenancyPolicy>,
    /// The shards led here: only their Controllers are worked (planned, delivered, reported).
    pub(crate) shards: Arc<crate::api::shard::Shards>,
    /// Planning settings.
    pub(crate) settings: Settings,
}

/// The member clusters: how each is reached and what is known of it.
#[derive(Clone)]
pub(crate) struct Members {
    /// The registered clusters, swapped whole on change.
    pub(crate) registry: crate::clusters::registry::SharedRegistry,
    /// The member links: how each cluster is worked and observed.
    pub(crate) links: crate::member::Links,
    /// Helm's release records per cluster.
    pub(crate) releases: Arc<crate::observe::releases::ReleaseIndex>,
    /// What runs, per cluster/namespace.
    pub(crate) model: Arc<crate::observe::model::Model>,
    /// The pod and workload watchers.
    pub(crate) watches: Arc<crate::observe::supervisor::WatchSupervisor>,
    /// Reachability of every cluster, from periodic probes.
    pub(crate) health: Arc<crate::clusters::health::HealthBoard>,
}

/// What the reconciler keeps between reconciles.
#[derive(Clone)]
pub(crate) struct Kept {
    /// Which release keys each resource's spec names, kept from the hub's Controller events.
    pub(crate) claims: Arc<crate::plan::claims::Claims>,
    /// Releases left in clusters removed from the registration file, with their owners.
    pub(crate) orphans: Arc<DashMap<crate::api::key::ReleaseKey, crate::plan::OwnerId>>,
    /// What is kept per Controller: asked-for keys, told problems, rollouts, last outcomes,
    /// drift tracking.
    pub(crate) index: Arc<crate::controller::index::ControllerIndex>,
    /// What is known of each chart: directory digests, resolved versions.
    pub(crate) charts: Arc<crate::charts::catalog::ChartCatalog>,
    /// The hub's Secrets and ConfigMaps `valuesFrom` reads, and who reads them.
    pub(crate) values: Arc<crate::controller::hub_values::HubValues>,
}

/// Where the reconciler's decisions go.
#[derive(Clone)]
pub(crate) struct Out {
    /// The queue of Helm jobs, fair across owners and clusters.
    pub(crate) queue: crate::queue::handle::HelmQueue,
    /// Paced status writes.
    pub(crate) writer: Arc<crate::status::writer::StatusWriter>,
    /// Publishes Kubernetes Events on `Controller` resources, rate-limited.
    pub(crate) events: Arc<crate::controller::events::Events>,
    /// Tells the Alerts what happened (drift, repairs, rollout halts), never waiting.
    pub(crate) notifier: crate::notify::Notifier,
    /// Operator metrics.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
}

impl Context {
    /// What the tenancy policies allow now: the mode, every policy in name order, and the
    /// operator's own namespace.
    pub(crate) fn admission(&self) -> crate::policy::Admission {
        admission_of(&self.hub.policies, &self.hub.settings)
    }

    /// What claims are computed from now: the registry's cluster labels and the policies.
    pub(crate) fn claim_basis(&self) -> crate::plan::claims::Basis {
        crate::plan::claims::Basis {
            labels: self.members.registry.load().labels(),
            admission: self.admission(),
        }
    }
}

/// The admission the policies in `store` make under `settings`: the mode, every policy in name
/// order, and the operator's own namespace.
pub(crate) fn admission_of(
    store: &Store<crate::api::policy::TenancyPolicy>,
    settings: &Settings,
) -> crate::policy::Admission {
    use kube::ResourceExt;
    let mut policies: Vec<crate::policy::NamedPolicy> = store
        .state()
        .iter()
        .map(|p| crate::policy::NamedPolicy {
            name: p.name_any(),
            spec: p.spec.clone(),
        })
        .collect();
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    crate::policy::Admission {
        mode: settings.policy_mode,
        policies,
        operator_namespace: settings.operator_namespace.clone(),
    }
}
