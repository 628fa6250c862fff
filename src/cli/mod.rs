//! Command-line interface: `run`, `agent`, `crd`, `clusters`, `status`, `diff`, `doctor` and `rollout`.

pub(crate) mod agent;
pub(crate) mod args;
pub(crate) mod diff;
pub(crate) mod doctor;
pub(crate) mod errors;
pub(crate) mod inspect;
pub(crate) mod membership;
pub(crate) mod rollout;
pub(crate) mod table;

pub use args::{ClusterArgs, PolicyMode, RunArgs};
pub use errors::error_line;
pub(crate) use table::{Output, table};

use std::{io::Write, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{
    clusters::registry::{self, HubSource},
    member::Links,
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
    /// Run the agent of a pull member, in that member: it connects out to the hub, carries out
    /// the work the hub signed for its cluster and reports what runs there.
    ///
    /// Needs the `hub-credentials` Secret a join leaves in the member (`tenancy-hub cluster add
    /// --pull NAME` on the hub prints it). Stops cleanly on SIGINT or SIGTERM.
    Agent(agent::AgentArgs),
    /// Register and remove pull members on the hub.
    #[command(subcommand)]
    Cluster(membership::ClusterCommand),
    /// Join this member to a hub as a pull member: writes the hub login its agent starts from.
    Join(membership::JoinArgs),
    /// Print the CustomResourceDefinitions (Alert, Controller, MemberCluster, TenancyPolicy) as YAML.
    #[command(after_help = "Example:\n  tenancy-hub crd | kubectl apply --server-side -f -")]
    Crd,
    /// Print the ValidatingAdmissionPolicy (and its binding) with which the API server refuses a
    /// Controller whose values nest too deep, as YAML.
    #[command(
        after_help = "Example:\n  tenancy-hub admission-policy | kubectl apply --server-side -f -"
    )]
    AdmissionPolicy,
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
    /// Check what a new install gets wrong, one line per check with its fix: the CRDs on the hub
    /// and whether they are this binary's, the operator's RBAC there, each member of the
    /// registration file reachable with the rights delivery needs, helm and the Helm executor
    /// (its protocol), the chart home, and a TenancyPolicy for each hub namespace holding
    /// Controllers.
    ///
    /// Takes `run`'s options, so a `run` command line is checked by putting `doctor` in place of
    /// `run`; the rights checked are those of the identity it runs as, so run it with the
    /// operator's kubeconfig. Exits 0 when no check failed (warnings aside), 1 when one did, 2
    /// when it cannot run (the hub's kubeconfig or context cannot be loaded).
    #[command(
        after_help = "Examples:\n  tenancy-hub doctor --kubeconfig .lab/kubeconfig --context hub --clusters .lab/clusters.yaml --chart-home config/charts\n  tenancy-hub doctor --clusters clusters.yaml -o json | jq '.checks[] | select(.verdict == \"fail\")'"
    )]
    Doctor(doctor::DoctorArgs),
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
            Command::Diff(args) => Ok(diff::run(args).await.unwrap_or_else(errors::exit_2)),
            Command::Doctor(args) => Ok(doctor::run(args).await.unwrap_or_else(errors::exit_2)),
            Command::Rollout(args) => {
                rollout::run(args).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Cluster(command) => {
                membership::cluster(command).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Join(args) => {
                membership::join(args).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Agent(args) => {
                crate::runtime::agent::run(args.settings()).await?;
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
            Command::AdmissionPolicy => {
                std::io::stdout()
                    .write_all(crate::api::crd::depth_policy::policy_yaml().as_bytes())
                    .context("writing the admission policy to stdout")?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Clusters { clusters, output } => {
                let registry = clusters.registry().await?;
                let links = Links::looking(registry, None);
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
                let client = hub.client().await?;
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

impl Cli {
    /// Parses the command line; `--version` also names the Helm SDK the executor is built with
    /// and the executor protocol this binary speaks.
    pub fn parse_args() -> Self {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let version: &'static str = Box::leak(version_line().into_boxed_str());
        let matches = Self::command().version(version).get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// What `--version` prints after the name.
fn version_line() -> String {
    format!(
        "{} (Helm SDK {}, executor protocol {})",
        env!("CARGO_PKG_VERSION"),
        crate::helm::protocol::HELM_SDK,
        crate::helm::protocol::PROTOCOL_VERSION
    )
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

#[cfg(test)]
mod tests;
