//! The state the reconciler and its background loops share, and the settings it plans with.

use std::{path::PathBuf, time::Duration};

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

/// What the `Controller` reconciler reads and writes, passed as one `Arc`. Each part is its own
/// handle: a background loop takes the few parts it uses (see `controller::loops`), never this.
pub(crate) struct Context {
    /// Client of the hub cluster.
    pub(crate) hub: kube::Client,
    /// The registered clusters, swapped whole on change.
    pub(crate) registry: crate::clusters::registry::SharedRegistry,
    /// Helm's release records per cluster.
    pub(crate) releases: std::sync::Arc<crate::observe::releases::ReleaseIndex>,
    /// The queue of Helm jobs, fair across owners and clusters.
    pub(crate) queue: crate::queue::handle::HelmQueue,
    /// Which release keys each resource's spec names, kept from the hub's Controller events.
    pub(crate) claims: std::sync::Arc<crate::plan::claims::Claims>,
    /// Releases left in clusters removed from the registration file, with their owners.
    pub(crate) orphans: std::sync::Arc<DashMap<crate::api::key::ReleaseKey, crate::plan::OwnerId>>,
    /// What is known of each chart: directory digests, resolved versions.
    pub(crate) charts: std::sync::Arc<crate::charts::catalog::ChartCatalog>,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub(crate) controllers: Store<crate::api::crd::TenancyController>,
    /// Every `TenancyPolicy` on the hub.
    pub(crate) policies: Store<crate::api::policy::TenancyPolicy>,
    /// Publishes Kubernetes Events on `Controller` resources, rate-limited.
    pub(crate) events: std::sync::Arc<crate::controller::events::Events>,
    /// What runs, per cluster/namespace.
    pub(crate) model: std::sync::Arc<crate::observe::model::Model>,
    /// The member links: how each cluster is worked and observed.
    pub(crate) links: crate::member::Links,
    /// The pod and workload watchers.
    pub(crate) watches: std::sync::Arc<crate::observe::supervisor::WatchSupervisor>,
    /// Paced status writes.
    pub(crate) writer: std::sync::Arc<crate::status::writer::StatusWriter>,
    /// Tells the Alerts what happened (drift, repairs, rollout halts), never waiting.
    pub(crate) notifier: crate::notify::Notifier,
    /// Reachability of every cluster, from periodic probes.
    pub(crate) health: std::sync::Arc<crate::clusters::health::HealthBoard>,
    /// Operator metrics.
    pub(crate) metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// What is kept per Controller: asked-for keys, told problems, rollouts, last outcomes,
    /// drift tracking.
    pub(crate) index: std::sync::Arc<crate::controller::index::ControllerIndex>,
    /// The shards led here: only their Controllers are worked (planned, delivered, reported).
    pub(crate) shards: std::sync::Arc<crate::api::shard::Shards>,
    /// The hub's Secrets and ConfigMaps `valuesFrom` reads, and who reads them.
    pub(crate) values: std::sync::Arc<crate::controller::hub_values::HubValues>,
    /// Planning settings.
    pub(crate) settings: Settings,
}

impl Context {
    /// What the tenancy policies allow now: the mode, every policy in name order, and the
    /// operator's own namespace.
    pub(crate) fn admission(&self) -> crate::policy::Admission {
        admission_of(&self.policies, &self.settings)
    }

    /// What claims are computed from now: the registry's cluster labels and the policies.
    pub(crate) fn claim_basis(&self) -> crate::plan::claims::Basis {
        crate::plan::claims::Basis {
            labels: self.registry.load().labels(),
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
