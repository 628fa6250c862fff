//! tenancy-hub: delivers Helm charts into tenant namespaces across clusters and reports what runs there.

pub mod charts;
pub mod cli;
pub mod crd;
pub mod health;
pub mod helm;
pub mod http;
pub mod inspect;
pub mod key;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod operator;
pub mod plan;
pub mod queue;
pub mod reconcile;
pub mod registry;
pub mod releases;
pub mod reload;
pub mod status;
pub mod watch;
pub mod writer;

use std::{path::PathBuf, time::Duration};

use dashmap::DashMap;
use kube::runtime::{events::Recorder, reflector::Store};

/// Settings the reconciler plans with.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Directory of local charts (`--chart-home`, `CHART_HOME`).
    pub chart_home: PathBuf,
    /// How long a release may stay `pending-*` before it is cleared.
    pub pending_timeout: Duration,
    /// The one hub namespace reconciled (`--namespace`); every namespace when None.
    pub scope: Option<String>,
    /// How often charts are looked at again: chart-home directories re-read, repository and OCI
    /// versions resolved again (`--chart-interval`).
    pub chart_interval: Duration,
}

/// Everything the reconciler and the workers share, passed as one `Arc`.
pub struct Context {
    /// Client of the hub cluster.
    pub hub: kube::Client,
    /// The registered clusters, swapped whole on change.
    pub registry: registry::SharedRegistry,
    /// Helm's release records per cluster.
    pub releases: releases::ReleaseIndex,
    /// The central FIFO of Helm jobs.
    pub queue: queue::HelmQueue,
    /// Which resources ask for each release.
    pub interest: reconcile::Interest,
    /// Releases left in clusters removed from the registration file, with their owners.
    pub orphans: DashMap<key::ReleaseKey, plan::OwnerId>,
    /// The last outcome of each release's Helm job.
    pub outcomes: DashMap<key::ReleaseKey, status::LastOutcome>,
    /// What is known of each chart: directory digests, resolved versions.
    pub charts: charts::ChartCatalog,
    /// The problems last reported per resource, so each is logged once per change.
    pub reported: DashMap<plan::OwnerId, std::collections::BTreeSet<String>>,
    /// Every `Controller` on the hub, as the reconciler sees them.
    pub controllers: Store<crd::Controller>,
    /// Publishes Kubernetes Events on `Controller` resources.
    pub recorder: Recorder,
    /// Keeps Events from flooding the hub.
    pub events: reconcile::EventLimiter,
    /// What runs, per cluster/namespace.
    pub model: std::sync::Arc<model::Model>,
    /// The pod and workload watchers.
    pub watches: watch::WatchSupervisor,
    /// Paced status writes.
    pub writer: writer::StatusWriter,
    /// Reachability of every cluster, from periodic probes.
    pub health: std::sync::Arc<health::HealthBoard>,
    /// Operator metrics.
    pub metrics: std::sync::Arc<metrics::Metrics>,
    /// Planning settings.
    pub settings: Settings,
}
