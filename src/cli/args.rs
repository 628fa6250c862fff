//! The command line's shared options: where the clusters are, and how the operator runs (`run`'s flags) turned into its configuration.

use std::{path::PathBuf, time::Duration};

use clap::{ArgAction, Args, ValueEnum, builder::BoolishValueParser};

use crate::{
    api::crd::HUB_CLUSTER,
    charts::cache,
    clusters::registry::{ClusterRegistry, HubSource, RegistrationFile},
    controller::context::Settings,
    helm::args::HelmOptions,
    queue::{QueueConfig, default_per_owner},
    runtime::config::RunConfig,
    runtime::leader::LeaseConfig,
};

/// Where the hub and the member clusters are.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Registration file listing the member clusters (`clusters:` entries of name, context, kubeconfig, labels).
    #[arg(long, env = "TENANCY_HUB_CLUSTERS")]
    pub(crate) clusters: Option<PathBuf>,
    /// Kubeconfig for the hub cluster; default: KUBECONFIG, ~/.kube/config, or the in-cluster config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the hub cluster in that kubeconfig; default: its current context.
    #[arg(long)]
    pub(crate) context: Option<String>,
}

impl ClusterArgs {
    /// Where the hub is.
    pub(crate) fn hub(&self) -> HubSource {
        HubSource {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }

    /// Loads the registration file (empty when none is given), connects every cluster, and adds
    /// the pull members joined on the hub.
    pub(crate) async fn registry(&self) -> anyhow::Result<ClusterRegistry> {
        let file = match &self.clusters {
            Some(path) => RegistrationFile::load(path)?,
            None => RegistrationFile::default(),
        };
        let registry = ClusterRegistry::connect(&self.hub(), &file).await?;
        let joined = match registry.get(&HUB_CLUSTER.parse().expect("the hub's name is valid")) {
            Some(hub) => crate::clusters::joined::list(&hub.client).await,
            None => Default::default(),
        };
        Ok(registry.with_joined(joined))
    }
}

/// Default namespace and name of the leader election Lease.
const DEFAULT_LEASE: &str = "tenancy-hub";

/// Options of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the clusters are.
    #[command(flatten)]
    pub(crate) clusters: ClusterArgs,
    /// Reconcile only the Controller resources in this hub namespace (default: all namespaces).
    #[arg(long, short = 'n')]
    pub(crate) namespace: Option<String>,
    /// Reconcile only the Controller resources with these labels (a label selector such as
    /// `team=a`), so several operators can share a hub; give each its own --lease-name. Releases
    /// of Controllers the selector leaves out are not reported as ownerless.
    #[arg(long, short = 'l')]
    pub(crate) selector: Option<String>,
    /// Directory of local charts, looked up by chartName.
    #[arg(long, env = "CHART_HOME", default_value = "charts")]
    pub(crate) chart_home: PathBuf,
    /// How TenancyPolicy resources apply. `enforce`: a release no policy governing its
    /// Controller's hub namespace allows gets no helm call and is reported Forbidden. `permissive`:
    /// it is delivered, and what enforce would refuse is logged, once per change (for migrating
    /// an existing hub). In both modes chart names are plain names, repositories
    /// https (or http under a prefix a policy lists), repository URLs carry no credentials, and
    /// loopback, link-local and metadata hosts are used only under a prefix a policy lists.
    #[arg(long, value_enum, default_value_t = PolicyMode::Enforce, env = "TENANCY_HUB_TENANCY_POLICY")]
    pub(crate) tenancy_policy: PolicyMode,
    /// Seconds between looks at the charts: chart-home directories are read again and repository
    /// and OCI charts resolved again (a version range or an omitted version may match a newer
    /// chart); a changed chart rolls out, an unchanged one makes no helm call.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) chart_interval: u64,
    /// Directory of the chart cache. Each repository index is fetched once per --chart-interval
    /// (shared by every chart of the repository) and each chart archive once, verified by its
    /// sha256 and kept here; helm installs from the kept archive. Default:
    /// $XDG_CACHE_HOME/tenancy-hub/charts, or ~/.cache/tenancy-hub/charts.
    #[arg(long, env = "TENANCY_HUB_CHART_CACHE_DIR")]
    pub(crate) chart_cache_dir: Option<PathBuf>,
    /// Bytes of chart archives the cache keeps at most (suffixes Ki, Mi, Gi); the least recently
    /// used are removed beyond it, never one a running helm call uses.
    #[arg(long, default_value = "1Gi", value_parser = parse_size)]
    pub(crate) chart_cache_size: u64,
    /// Bytes a repository's index.yaml may have at most (suffixes Ki, Mi, Gi); a larger one is
    /// refused and its charts reported unresolved. Each index is held in memory while parsed.
    #[arg(long, default_value = "32Mi", value_parser = parse_size)]
    pub(crate) chart_index_limit: u64,
    /// The chart signature verifier (tenancy-hub-verify: cosign, Notation, Helm provenance), run
    /// once per chart digest and trust material a TenancyPolicy source's `verify` asks for.
    /// Default: tenancy-hub-verify beside --helm, else on PATH; when missing, charts of such
    /// sources are `Unverified`, saying how to install it.
    #[arg(long, env = "TENANCY_HUB_VERIFIER")]
    pub(crate) verifier: Option<PathBuf>,
    /// The Git fetcher (tenancy-hub-git), run for each resolution of a Git source's ref and
    /// each fetch of a new commit. Default: tenancy-hub-git beside --helm, else on PATH; when
    /// missing, Git charts are reported unresolved, saying how to install it.
    #[arg(long, env = "TENANCY_HUB_GIT_FETCHER")]
    pub(crate) git_fetcher: Option<PathBuf>,
    /// Seconds one signature check may take (the registry asked for signatures included).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub(crate) verify_timeout: u64,
    /// Seconds between drift checks of every release: its live objects compared with its
    /// manifest (Services, ConfigMaps, RBAC, deleted objects). Deployments, StatefulSets and
    /// DaemonSets are checked within seconds of a change anyway, and every release of a cluster
    /// when it is reachable again.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) drift_interval: u64,
    /// Lets Alerts send to webhooks that lead back into the hub: loopback and link-local
    /// addresses, `localhost` and metadata names, and names resolving to them. Refused by
    /// default, since a tenant writes the webhook's URL; for a receiver beside the operator.
    #[arg(long)]
    pub(crate) notify_internal_addresses: bool,
    /// Helm jobs run at once, over all clusters.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) workers: u16,
    /// Helm jobs run at once on one cluster.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) per_cluster: u16,
    /// Helm jobs of one Controller run at once. Default: --workers minus one (at least 1), so
    /// one worker always stays free for other Controllers' changes and uninstalls, even when one
    /// Controller's wave meets slow helm calls, while that wave keeps most of the throughput.
    /// 0: no cap (a wave may take every worker; other Controllers still take turns, one job each,
    /// as workers free up).
    #[arg(long)]
    pub(crate) max_jobs_per_owner: Option<u16>,
    /// Helm jobs of one tenant (the Controllers of one hub namespace, however many) run at once.
    /// Default: --workers minus one (at least 1), so one tenant's slow helm calls always leave a
    /// worker to the other tenants. Tenants take turns first, then the Controllers of a tenant.
    /// 0: no cap.
    #[arg(long)]
    pub(crate) max_jobs_per_tenant: Option<u16>,
    /// The helm binary.
    #[arg(long, env = "TENANCY_HUB_HELM", default_value = "helm")]
    pub(crate) helm: PathBuf,
    /// How Helm runs: `sdk` runs every job in one long-lived process on Helm's Go SDK
    /// (tenancy-hub-helm, see --helm-executor), with clients and discovery kept per cluster, about
    /// five times cheaper per release than a helm process; `cli` starts one helm process per job;
    /// `auto` (the default) is `sdk` when tenancy-hub-helm is found, else `cli`. Previews
    /// (`diff`) and charts not yet in the chart cache always use the helm binary.
    #[arg(long, env = "TENANCY_HUB_EXECUTOR", value_enum, default_value_t = ExecutorKind::Auto)]
    pub(crate) executor: ExecutorKind,
    /// The long-lived Helm executor (tenancy-hub-helm). Default: tenancy-hub-helm beside --helm,
    /// else on PATH.
    #[arg(long, env = "TENANCY_HUB_HELM_EXECUTOR")]
    pub(crate) helm_executor: Option<PathBuf>,
    /// Seconds the long-lived executor may sit without work before it exits, so an idle operator
    /// holds no Helm memory; the next job starts it again. 0: it never exits.
    #[arg(long, default_value_t = 30)]
    pub(crate) executor_idle: u64,
    /// Directory where helm keeps its discovery and HTTP caches across calls (per cluster inside);
    /// default: helm's own ($HOME/.kube/cache and $HOME/.cache/helm).
    #[arg(long, env = "TENANCY_HUB_HELM_CACHE_DIR")]
    pub(crate) helm_cache_dir: Option<PathBuf>,
    /// Timeout of each helm call, in seconds.
    #[arg(long, default_value_t = 300)]
    pub(crate) helm_timeout: u64,
    /// Revisions Helm keeps per release.
    #[arg(long, default_value_t = 5)]
    pub(crate) history_max: u32,
    /// Seconds after which a release left pending (by a crash) is cleared; default: the helm timeout plus a minute.
    #[arg(long)]
    pub(crate) pending_timeout: Option<u64>,
    /// Tries of a Helm job failing with a transient error (a timeout, a server error) before the
    /// release is reported Stalled and waits for a spec change. Errors only a spec change can fix
    /// (a chart that does not render, a values schema, an invalid field) are never retried, and
    /// an unreachable cluster is waited for without using up tries.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) max_attempts: u32,
    /// Seconds a pull member's agent may take to answer a Helm job once it is published. The
    /// answer is awaited without holding a Helm worker; past this, the release is reported
    /// failed for that cluster on its Controller and the job is tried again with backoff.
    /// Longer than --helm-timeout, which bounds the agent's own helm call.
    #[arg(long, default_value_t = crate::member::pull::hub::link::ANSWER_WITHIN.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) pull_answer_within: u64,
    /// Address of the HTTP endpoints: /healthz, /readyz, /metrics and the /api/v1 status API.
    #[arg(long, env = "TENANCY_HUB_HTTP_ADDR", default_value = "127.0.0.1:9090")]
    pub(crate) http_addr: std::net::SocketAddr,
    /// Leader election, on by default: only the replica holding the Lease works, the others stand
    /// by (ready, /readyz says whom they wait for) and take over when it goes. `--leader-elect=false`
    /// runs without it, for a lab; then a second operator on the same hub and scope fights this one.
    #[arg(
        long,
        env = "TENANCY_HUB_LEADER_ELECT",
        action = ArgAction::Set,
        num_args = 0..=1,
        default_value_t = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
    )]
    pub(crate) leader_elect: bool,
    /// Hub namespace of the leader election Lease; it must exist on the hub. Default: POD_NAMESPACE,
    /// or "tenancy-hub" (the namespace deploy/ creates).
    #[arg(long, env = "POD_NAMESPACE", default_value = DEFAULT_LEASE)]
    pub(crate) lease_namespace: String,
    /// Name of the leader election Lease. Default: "tenancy-hub" when watching every hub namespace,
    /// "tenancy-hub-<ns>" with --namespace <ns>: operators with the same scope share a lease, those
    /// with disjoint scopes do not wait for each other.
    #[arg(long)]
    pub(crate) lease_name: Option<String>,
    /// Split the Controllers into this many shards, each led by one replica through its own Lease
    /// (`<lease-name>-shard-<i>-of-<n>` in the lease namespace), so several replicas run helm at
    /// once; each replica leads a fair share and takes over a dead replica's shards within about
    /// two lease durations. 1 (the default): one leader works everything. Needs leader election.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) shards: u32,
    /// Secrets a pull member's hub namespace may hold, kept as its ResourceQuota: the member's
    /// work, its agent's reports and its charts. The default fits 1,000 releases in 1,000
    /// namespaces; an agent past it is refused by the API server.
    #[arg(long, default_value_t = 6_000, value_parser = clap::value_parser!(u32).range(100..=100_000))]
    pub(crate) pull_member_secrets: u32,
    /// Milliseconds between status writes of one resource, at most; changes in between are coalesced.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    pub(crate) status_interval_ms: u64,
}

impl RunArgs {
    /// The long-lived executor to run jobs with, by `--executor` and `--helm-executor`; with
    /// `sdk`, the path is kept even when missing, so starting it fails with its own error.
    pub(crate) fn sdk(&self) -> Option<PathBuf> {
        let found = crate::helm::sdk::locate(self.helm_executor.as_deref(), &self.helm);
        match self.executor {
            ExecutorKind::Cli => None,
            ExecutorKind::Auto => found.filter(|p| p.is_file()),
            ExecutorKind::Sdk => Some(found.unwrap_or_else(|| crate::helm::sdk::BINARY.into())),
        }
    }

    /// The operator's configuration.
    pub(crate) fn config(&self) -> RunConfig {
        let helm_timeout = Duration::from_secs(self.helm_timeout);
        RunConfig {
            hub: self.clusters.hub(),
            clusters_file: self.clusters.clusters.clone(),
            namespace: self.namespace.clone(),
            settings: Settings {
                chart_home: self.chart_home.clone(),
                pending_timeout: self
                    .pending_timeout
                    .map_or(helm_timeout + Duration::from_secs(60), Duration::from_secs),
                scope: self.namespace.clone(),
                selector: self.selector.clone(),
                chart_interval: Duration::from_secs(self.chart_interval),
                drift_interval: Duration::from_secs(self.drift_interval),
                policy_mode: self.tenancy_policy.mode(),
                operator_namespace: self.lease_namespace.clone(),
            },
            helm: HelmOptions {
                binary: self.helm.clone(),
                timeout: helm_timeout,
                history_max: self.history_max,
                cache_dir: self.helm_cache_dir.clone(),
                sdk: self.sdk(),
                executor_idle: Duration::from_secs(self.executor_idle),
                seal: None,
            },
            queue: QueueConfig {
                workers: self.workers.into(),
                per_cluster: self.per_cluster.into(),
                per_owner: self
                    .max_jobs_per_owner
                    .map_or_else(|| default_per_owner(self.workers.into()), usize::from),
                per_tenant: self
                    .max_jobs_per_tenant
                    .map_or_else(|| default_per_owner(self.workers.into()), usize::from),
                max_attempts: self.max_attempts,
                ..QueueConfig::default()
            },
            http_addr: self.http_addr,
            notify_internal: self.notify_internal_addresses,
            leader: self.lease(),
            shards: self.shards,
            pull_member_secrets: self.pull_member_secrets,
            status_interval: Duration::from_millis(self.status_interval_ms),
            chart_cache_dir: self
                .chart_cache_dir
                .clone()
                .unwrap_or_else(cache::default_dir),
            chart_cache_size: self.chart_cache_size,
            chart_index_limit: self.chart_index_limit,
            verifier: crate::charts::verify::VerifierBinary::new(
                crate::charts::verify::locate(self.verifier.as_deref(), &self.helm),
                Duration::from_secs(self.verify_timeout),
            ),
            pull_answer_within: Duration::from_secs(self.pull_answer_within),
            git_fetcher: crate::charts::common::locate_tool(
                self.git_fetcher.as_deref(),
                &self.helm,
                crate::charts::cache::git::FETCHER,
            ),
        }
    }

    /// The leader election Lease, held as `<hostname>-<pid>`; None with `--leader-elect=false`.
    pub(crate) fn lease(&self) -> Option<LeaseConfig> {
        if !self.leader_elect {
            return None;
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "tenancy-hub".into());
        Some(LeaseConfig {
            name: self.lease_name(),
            ..LeaseConfig::new(
                &self.lease_namespace,
                format!("{host}-{}", std::process::id()),
            )
        })
    }

    /// The Leases the operator reads and renews by name: none without leader election, its
    /// Lease alone, or (None) Leases of any name when it runs shards.
    pub(crate) fn lease_names(&self) -> Vec<Option<String>> {
        match (self.leader_elect, self.shards) {
            (false, _) => Vec::new(),
            (true, 1) => vec![Some(self.lease_name())],
            (true, _) => vec![None],
        }
    }

    /// `--lease-name`, or one Lease per scope: `tenancy-hub`, or `tenancy-hub-<ns>` with `--namespace`.
    fn lease_name(&self) -> String {
        match (&self.lease_name, &self.namespace) {
            (Some(name), _) => name.clone(),
            (None, None) => DEFAULT_LEASE.into(),
            (None, Some(ns)) => format!("{DEFAULT_LEASE}-{ns}"),
        }
    }
}

/// How Helm runs (`run --executor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExecutorKind {
    /// The long-lived executor when it is found, else helm processes.
    Auto,
    /// The long-lived executor on Helm's Go SDK.
    Sdk,
    /// One helm process per job.
    Cli,
}

/// How TenancyPolicy resources apply (`run --tenancy-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyMode {
    /// Refuse what no policy allows.
    Enforce,
    /// Deliver it, warning.
    Permissive,
}

impl PolicyMode {
    /// The admission mode it stands for.
    pub(crate) fn mode(self) -> crate::policy::Mode {
        match self {
            PolicyMode::Enforce => crate::policy::Mode::Enforce,
            PolicyMode::Permissive => crate::policy::Mode::Permissive,
        }
    }
}

/// A size in bytes: a number, optionally followed by `Ki`, `Mi` or `Gi` (powers of 1024) or
/// `K`, `M`, `G` (powers of 1000).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let factor: u64 = match unit.trim() {
        "" => 1,
        "K" => 1000,
        "Ki" => 1 << 10,
        "M" => 1000 * 1000,
        "Mi" => 1 << 20,
        "G" => 1000 * 1000 * 1000,
        "Gi" => 1 << 30,
        other => return Err(format!("unknown unit {other:?}: use Ki, Mi, Gi, K, M or G")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{text:?} is not a size in bytes"))
}
