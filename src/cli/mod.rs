//! Command-line interface: `run`, `crd`, `clusters`, `status`, `diff` and `rollout`.

pub(crate) mod diff;
pub(crate) mod inspect;
pub(crate) mod rollout;
pub(crate) mod table;

pub(crate) use table::{Output, table};

use std::{io::Write, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum, builder::BoolishValueParser};

use crate::{
    charts::cache,
    clusters::registry::{self, ClusterRegistry, HubSource, RegistrationFile},
    controller::context::Settings,
    helm::args::HelmOptions,
    member::Links,
    queue::{QueueConfig, default_per_owner},
    runtime::config::RunConfig,
    runtime::leader::LeaseConfig,
    runtime::operator,
    runtime::tasks::shutdown_signal,
};

/// Delivers Helm charts into tenant namespaces across many Kubernetes clusters and reports what runs there.
#[derive(Debug, Parser)]
#[command(name = "tenancy-hub", version, propagate_version = true)]
#[command(after_help = "Examples:\n  \
    tenancy-hub crd | kubectl apply --server-side -f -\n  \
    tenancy-hub run --clusters clusters.yaml --chart-home config/charts\n  \
    tenancy-hub clusters --clusters clusters.yaml --kubeconfig .lab/kubeconfig --context hub")]
pub struct Cli {
    /// Logging options.
    #[command(flatten)]
    pub log: LogArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Logging options shared by every command.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TENANCY_HUB_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter, in `RUST_LOG` syntax (for example `info,tenancy_hub=debug`).
    #[arg(long, global = true, default_value = "info", env = "RUST_LOG")]
    pub log_level: String,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

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

    /// Loads the registration file (empty when none is given) and connects every cluster.
    pub(crate) async fn registry(&self) -> anyhow::Result<ClusterRegistry> {
        let file = match &self.clusters {
            Some(path) => RegistrationFile::load(path)?,
            None => RegistrationFile::default(),
        };
        Ok(ClusterRegistry::connect(&self.hub(), &file).await?)
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
    /// Seconds between drift checks of every release: its live objects compared with its
    /// manifest (Services, ConfigMaps, RBAC, deleted objects). Deployments, StatefulSets and
    /// DaemonSets are checked within seconds of a change anyway, and every release of a cluster
    /// when it is reachable again.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) drift_interval: u64,
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
    /// Milliseconds between status writes of one resource, at most; changes in between are coalesced.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    pub(crate) status_interval_ms: u64,
}

impl RunArgs {
    /// The long-lived executor to run jobs with, by `--executor` and `--helm-executor`; with
    /// `sdk`, the path is kept even when missing, so starting it fails with its own error.
    fn sdk(&self) -> Option<PathBuf> {
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
            leader: self.lease(),
            shards: self.shards,
            status_interval: Duration::from_millis(self.status_interval_ms),
            chart_cache_dir: self
                .chart_cache_dir
                .clone()
                .unwrap_or_else(cache::default_dir),
            chart_cache_size: self.chart_cache_size,
            chart_index_limit: self.chart_index_limit,
        }
    }

    /// The leader election Lease, held as `<hostname>-<pid>`; None with `--leader-elect=false`.
    fn lease(&self) -> Option<LeaseConfig> {
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

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: reconcile every Controller on the hub into Helm releases on the clusters.
    ///
    /// Stops cleanly on SIGINT or SIGTERM, letting running Helm jobs finish within a bound.
    #[command(
        after_help = "Example:\n  tenancy-hub run --kubeconfig .lab/kubeconfig --context hub --clusters .lab/clusters.yaml --chart-home config/charts"
    )]
    Run(RunArgs),
    /// Print the Controller and TenancyPolicy CustomResourceDefinitions as YAML.
    #[command(after_help = "Example:\n  tenancy-hub crd | kubectl apply --server-side -f -")]
    Crd,
    /// Show every registered cluster: context, reachability and API server version.
    ///
    /// Exits non-zero when a cluster is unreachable.
    #[command(
        after_help = "Example:\n  tenancy-hub clusters --clusters clusters.yaml --kubeconfig kubeconfig --context hub -o json"
    )]
    Clusters {
        /// Where the clusters are.
        #[command(flatten)]
        clusters: ClusterArgs,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Show what Controller resources deliver: per cluster and namespace, releases, workloads and pods.
    ///
    /// Reads the resources' status from the hub. Exits non-zero when any listed resource is not
    /// Ready (or its status does not yet describe its latest spec), so scripts can wait on it.
    #[command(
        after_help = "Examples:\n  tenancy-hub status example-controller --kubeconfig .lab/kubeconfig --context hub\n  tenancy-hub status -A --cluster member-1 -o json\n  until tenancy-hub status example-controller >/dev/null; do sleep 2; done"
    )]
    Status {
        /// Name of one Controller resource; default: every one in the namespace.
        #[arg(conflicts_with = "all_namespaces")]
        name: Option<String>,
        /// Hub namespace of the resources; default: the kubeconfig context's namespace, or "default".
        #[arg(short, long)]
        namespace: Option<String>,
        /// List the resources of every namespace.
        #[arg(short = 'A', long, conflicts_with = "namespace")]
        all_namespaces: bool,
        /// Show only the entries of this cluster.
        #[arg(long)]
        cluster: Option<String>,
        /// Kubeconfig for the hub cluster; default: KUBECONFIG, ~/.kube/config, or the in-cluster config.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Context of the hub cluster in that kubeconfig; default: its current context.
        #[arg(long)]
        context: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Preview what applying a Controller file would do, per cluster, namespace and release:
    /// install, upgrade (with a diff of the manifests), uninstall, unchanged or refused.
    ///
    /// Plans with the operator's own planner, against the releases in the clusters, the other
    /// Controllers on the hub and its TenancyPolicies; renders charts offline with `helm
    /// template`; changes nothing anywhere. Secrets' values are masked. Exits 0 when nothing
    /// would change, 1 when something would (or is refused), 2 on error.
    #[command(
        after_help = "Examples:\n  tenancy-hub diff -f controller.yaml --clusters .lab/clusters.yaml --kubeconfig .lab/kubeconfig --context hub --chart-home config/charts\n  tenancy-hub diff -f controller.yaml --cluster member-1 -o json\n  kubectl kustomize team-a/ | tenancy-hub diff -f -"
    )]
    Diff(diff::DiffArgs),
    /// Resumes a halted rollout, or restarts the newest generation's rollout from the first wave,
    /// by setting the `multitenancy.dev/rollout` annotation the operator acts on.
    #[command(
        after_help = "Examples:\n  tenancy-hub rollout resume app -n team-a --kubeconfig .lab/kubeconfig --context hub\n  tenancy-hub rollout restart app -n team-a\n  kubectl annotate controller app multitenancy.dev/rollout=resume-$(date +%s) --overwrite"
    )]
    Rollout(rollout::RolloutArgs),
}

impl Command {
    /// Runs the command.
    pub async fn execute(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Diff(args) => Ok(diff::run(args).await.unwrap_or_else(|e| {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            })),
            Command::Rollout(args) => {
                rollout::run(args).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Run(args) => {
                operator::run(args.config(), shutdown_signal()).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Crd => {
                std::io::stdout()
                    .write_all(crate::api::crds_yaml().as_bytes())
                    .context("writing the CRDs to stdout")?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Clusters { clusters, output } => {
                let registry = clusters.registry().await?;
                let links = Links::looking(registry);
                let health = links.probe_all().await;
                print!("{}", render_health(&health, output)?);
                let all_up = health.iter().all(|h| h.reachable);
                Ok(if all_up {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            Command::Status {
                name,
                namespace,
                all_namespaces,
                cluster,
                kubeconfig,
                context,
                output,
            } => {
                use crate::cli::inspect::{self, Selection};
                let hub = HubSource {
                    kubeconfig,
                    context,
                };
                let registry = ClusterRegistry::connect(&hub, &RegistrationFile::default()).await?;
                let client = registry
                    .iter()
                    .next()
                    .context("the cluster registry has no hub")?
                    .client
                    .clone();
                let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
                let selection = match name {
                    Some(name) => Selection::One { namespace, name },
                    None if all_namespaces => Selection::All,
                    None => Selection::Namespace(namespace),
                };
                let controllers = inspect::fetch(client, &selection).await?;
                if controllers.is_empty() {
                    eprintln!("No Controller resources found in {selection}.");
                }
                let color = inspect::color_wanted(
                    output,
                    std::io::IsTerminal::is_terminal(&std::io::stdout()),
                    std::env::var_os("NO_COLOR").as_deref(),
                );
                print!(
                    "{}",
                    inspect::render(&controllers, cluster.as_deref(), output, color)?
                );
                Ok(if controllers.iter().all(inspect::is_ready) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
        }
    }
}

fn render_health(health: &[registry::Health], output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(health)? + "\n",
        Output::Yaml => serde_yaml::to_string(health)?,
        Output::Table => {
            let rows: Vec<[String; 4]> = health
                .iter()
                .map(|h| {
                    [
                        h.cluster.clone(),
                        h.context.clone(),
                        if h.reachable {
                            "yes".into()
                        } else {
                            "no".into()
                        },
                        h.version
                            .clone()
                            .or_else(|| h.error.clone())
                            .unwrap_or_default(),
                    ]
                })
                .collect();
            table(&["CLUSTER", "CONTEXT", "REACHABLE", "VERSION"], &rows)
        }
    })
}

/// Sets up tracing to stderr in the chosen format, with ANSI colours only on a terminal.
pub fn init_logging(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = log_colors(
        args.log_format,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Whether log lines carry ANSI colours: text lines written to a terminal (`is_terminal`, of the
/// stream the log goes to), unless `NO_COLOR` is set to something. A log redirected to a file or a
/// pipe, and JSON lines, stay plain.
fn log_colors(format: LogFormat, is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    format == LogFormat::Text && is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// A size in bytes: a number, optionally followed by `Ki`, `Mi` or `Gi` (powers of 1024) or
/// `K`, `M`, `G` (powers of 1000).
fn parse_size(text: &str) -> Result<u64, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn log_lines_are_plain_when_they_do_not_go_to_a_terminal() {
        assert!(!log_colors(LogFormat::Text, false, None));
        assert!(!log_colors(LogFormat::Json, false, None));
    }

    #[test]
    fn log_lines_to_a_terminal_are_coloured_unless_no_color_is_set() {
        assert!(log_colors(LogFormat::Text, true, None));
        assert!(log_colors(LogFormat::Text, true, Some("".as_ref())));
        assert!(!log_colors(LogFormat::Text, true, Some("1".as_ref())));
    }

    #[test]
    fn json_log_lines_are_never_coloured() {
        assert!(!log_colors(LogFormat::Json, true, None));
    }

    #[test]
    fn the_log_format_is_text_unless_json_is_asked_for() {
        let format = |args: &[&str]| {
            let line = ["tenancy-hub"].iter().chain(args).chain(&["crd"]);
            Cli::try_parse_from(line).unwrap().log.log_format
        };
        assert_eq!(format(&[]), LogFormat::Text);
        assert_eq!(format(&["--log-format", "json"]), LogFormat::Json);
        assert!(Cli::try_parse_from(["tenancy-hub", "--log-format", "xml", "crd"]).is_err());
    }

    #[test]
    fn sizes_are_read_in_bytes_with_binary_and_decimal_units() {
        assert_eq!(parse_size("1Gi"), Ok(1 << 30));
        assert_eq!(parse_size("512Mi"), Ok(512 << 20));
        assert_eq!(parse_size("64 Ki"), Ok(64 << 10));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("1Ti").is_err());
        assert!(parse_size("Gi").is_err());
        assert!(parse_size("-1").is_err());
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The leader election Lease of `tenancy-hub run ARGS`, when POD_NAMESPACE is not set.
    fn lease_of(args: &[&str]) -> Option<(String, String)> {
        let line = ["tenancy-hub", "run"].iter().chain(args);
        let Command::Run(run) = Cli::try_parse_from(line).unwrap().command else {
            panic!("not run");
        };
        run.lease().map(|l| (l.namespace, l.name))
    }

    fn lease(namespace: &str, name: &str) -> Option<(String, String)> {
        Some((namespace.into(), name.into()))
    }

    #[test]
    fn leader_election_is_on_by_default_with_one_lease_for_the_whole_hub() {
        assert_eq!(lease_of(&[]), lease("tenancy-hub", "tenancy-hub"));
    }

    #[test]
    fn an_operator_limited_to_one_namespace_gets_a_lease_of_that_scope() {
        assert_eq!(
            lease_of(&["--namespace", "team-a"]),
            lease("tenancy-hub", "tenancy-hub-team-a")
        );
    }

    #[test]
    fn lease_flags_override_the_defaults() {
        let args = [
            "-n",
            "team-a",
            "--lease-namespace",
            "ops",
            "--lease-name",
            "x",
        ];
        assert_eq!(lease_of(&args), lease("ops", "x"));
    }

    #[test]
    fn a_bare_leader_elect_flag_still_means_on() {
        let args = ["--leader-elect", "--lease-namespace", "ops"];
        assert_eq!(lease_of(&args), lease("ops", "tenancy-hub"));
        assert_eq!(lease_of(&["--leader-elect=true"]), lease_of(&[]));
    }

    /// The queue's configuration for `tenancy-hub run ARGS`.
    fn queue_of(args: &[&str]) -> QueueConfig {
        let line = ["tenancy-hub", "run"].iter().chain(args);
        let Command::Run(run) = Cli::try_parse_from(line).unwrap().command else {
            panic!("not run");
        };
        run.config().queue
    }

    /// The queue's cap on one owner's running jobs for `tenancy-hub run ARGS`.
    fn per_owner_of(args: &[&str]) -> usize {
        queue_of(args).per_owner
    }

    #[test]
    fn one_tenant_may_use_all_workers_but_one_unless_told_otherwise() {
        let per_tenant = |args: &[&str]| queue_of(args).per_tenant;
        assert_eq!(per_tenant(&[]), 3);
        assert_eq!(per_tenant(&["--workers", "8"]), 7);
        assert_eq!(per_tenant(&["--max-jobs-per-tenant", "2"]), 2);
        assert_eq!(per_tenant(&["--max-jobs-per-tenant", "0"]), 0);
    }

    #[test]
    fn one_controller_may_use_all_workers_but_one_unless_told_otherwise() {
        assert_eq!(per_owner_of(&[]), 3);
        assert_eq!(per_owner_of(&["--workers", "8"]), 7);
        assert_eq!(per_owner_of(&["--workers", "1"]), 1);
        assert_eq!(per_owner_of(&["--max-jobs-per-owner", "2"]), 2);
        assert_eq!(per_owner_of(&["--max-jobs-per-owner", "0"]), 0);
    }

    #[test]
    fn leader_election_is_off_only_when_asked() {
        assert_eq!(lease_of(&["--leader-elect=false"]), None);
        assert_eq!(lease_of(&["--leader-elect", "false"]), None);
    }

    #[test]
    fn tables_align_columns_under_their_headers() {
        let rows = [
            ["hub".to_string(), "yes".to_string()],
            ["member-1".to_string(), "no".to_string()],
        ];
        let out = table(&["CLUSTER", "OK"], &rows);
        assert_eq!(out, "CLUSTER    OK\nhub        yes\nmember-1   no\n");
    }

    #[test]
    fn unreachable_clusters_show_their_error_in_the_table() {
        let health = [registry::Health {
            cluster: "member-2".into(),
            context: "member-2".into(),
            reachable: false,
            version: None,
            error: Some("connection refused".into()),
        }];
        let out = render_health(&health, Output::Table).unwrap();
        assert!(
            out.contains("member-2   member-2   no          connection refused"),
            "{out}"
        );
    }
}
