//! What `tenancy-hub run` is configured with, and why the operator could not start.

use std::{path::PathBuf, time::Duration};

use crate::{
    charts::cache,
    clusters::registry::{self, HubSource},
    controller::context::Settings,
    helm::args::HelmOptions,
    queue::QueueConfig,
    runtime::leader::LeaseConfig,
};

/// Everything `tenancy-hub run` is configured with.
#[derive(Clone, Debug)]
pub(crate) struct RunConfig {
    /// Where the hub is.
    pub(crate) hub: HubSource,
    /// The registration file, if any.
    pub(crate) clusters_file: Option<PathBuf>,
    /// Only reconcile `Controller` resources in this hub namespace; all namespaces when None.
    pub(crate) namespace: Option<String>,
    /// Planning settings.
    pub(crate) settings: Settings,
    /// How Helm is called.
    pub(crate) helm: HelmOptions,
    /// How the queue runs.
    pub(crate) queue: QueueConfig,
    /// Where the HTTP endpoints listen (health, readiness, metrics, status API).
    pub(crate) http_addr: std::net::SocketAddr,
    /// Whether Alerts may send to addresses that lead back into the hub (loopback, link-local).
    pub(crate) notify_internal: bool,
    /// At most one status write per resource in this window.
    pub(crate) status_interval: Duration,
    /// Leader election: only the holder of this Lease works; None runs without election.
    pub(crate) leader: Option<LeaseConfig>,
    /// Shards the Controllers are split into, each led by one replica through its own Lease
    /// named after `leader`'s; 1 is a single leader for everything.
    pub(crate) shards: u32,
    /// Secrets each pull member's hub namespace may hold (its ResourceQuota).
    pub(crate) pull_member_secrets: u32,
    /// Where the chart cache keeps chart archives.
    pub(crate) chart_cache_dir: PathBuf,
    /// Bytes of chart archives the chart cache keeps at most.
    pub(crate) chart_cache_size: u64,
    /// The chart signature verifier and the deadline of each check.
    pub(crate) verifier: crate::charts::verify::VerifierBinary,
    /// The Git fetcher, when one was found.
    pub(crate) git_fetcher: Option<std::path::PathBuf>,
    /// Bytes a repository index may have at most.
    pub(crate) chart_index_limit: u64,
    /// How long a pull member's agent may take to answer a Helm job.
    pub(crate) pull_answer_within: Duration,
}

/// Why the operator could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The registry could not be built.
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    /// The CRD is missing from the hub.
    #[error(
        "the Controller CRD is not installed on the hub ({0}); install it with `tenancy-hub crd | kubectl apply --server-side -f -`"
    )]
    NoCrd(kube::Error),
    /// The sealing key of release records cannot be had.
    #[error(transparent)]
    Seal(#[from] crate::helm::seal::Error),
    /// The `TenancyPolicy` CRD cannot be listed on the hub.
    #[error(
        "the TenancyPolicy CRD is not installed on the hub or not readable ({0}); install the CRDs with `tenancy-hub crd | kubectl apply --server-side -f -` and let the operator list tenancypolicies"
    )]
    NoPolicyCrd(kube::Error),
    /// The chart home does not exist.
    #[error("chart home {0} is not a directory; pass --chart-home or set CHART_HOME")]
    ChartHome(PathBuf),
    /// Leader election failed for good (RBAC, a missing namespace, bad timings).
    #[error(transparent)]
    Leader(#[from] crate::runtime::leader::Error),
    /// Leadership was lost while working; every Helm process was stopped.
    #[error(
        "lost leadership; stopped every Helm job so the new leader works alone (restart to stand by again)"
    )]
    LostLeadership,
    /// The HTTP endpoints could not listen.
    #[error("cannot serve HTTP endpoints: {0}; pass another --http-addr")]
    Http(std::io::Error),
    /// The Helm scratch directory could not be made.
    #[error("cannot create a private directory for Helm values files: {0}")]
    Scratch(std::io::Error),
    /// The chart cache could not be opened.
    #[error(transparent)]
    ChartCache(#[from] cache::Error),
    /// The long-lived Helm executor does not start, or speaks another protocol.
    #[error(transparent)]
    Executor(#[from] crate::helm::pipe::ExecutorError),
}
