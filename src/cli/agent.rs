//! `tenancy-hub agent`'s flags: where its own cluster is, where its join left the hub login, and how Helm runs there.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;

use crate::{
    clusters::registry::HubSource, helm::args::HelmOptions, runtime::agent::AgentSettings,
};

/// Runs the agent of a pull member, inside that member (or beside it with its kubeconfig).
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tenancy-hub agent                      # in the member, as deploy/agent/ runs it\n  tenancy-hub agent --kubeconfig .lab/pull/pull-1.kubeconfig --context pull-1 --http-addr 127.0.0.1:0"
)]
pub struct AgentArgs {
    /// Kubeconfig of the member cluster the agent runs in; default: KUBECONFIG,
    /// ~/.kube/config, or the in-cluster config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the member cluster in that kubeconfig; default: its current context.
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// Member namespace of the `hub-credentials` Secret that `tenancy-hub join` wrote.
    #[arg(long, default_value = "tenancy-hub-agent")]
    pub(crate) namespace: String,
    /// The helm binary (renders and pulls for charts the executor does not run).
    #[arg(long, env = "TENANCY_HUB_HELM", default_value = "helm")]
    pub(crate) helm: PathBuf,
    /// The long-lived Helm executor (tenancy-hub-helm); default: beside --helm, else on PATH;
    /// when none is found, one helm process runs per job.
    #[arg(long, env = "TENANCY_HUB_HELM_EXECUTOR")]
    pub(crate) executor: Option<PathBuf>,
    /// Timeout of each helm call, in seconds.
    #[arg(long, default_value_t = 300)]
    pub(crate) helm_timeout: u64,
    /// Where chart archives sent by the hub are kept; default: the user's cache directory.
    #[arg(long, env = "TENANCY_HUB_CHART_CACHE")]
    pub(crate) chart_cache: Option<PathBuf>,
    /// Seconds the agent's Lease on the hub holds without renewal (renewed every third of it);
    /// the hub shows the member stale once it runs out. The default costs the hub one Lease write
    /// per member every 20 s (50 a second at 1,000 members).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i32).range(3..=300))]
    pub(crate) lease_seconds: i32,
    /// Renew the hub token every this many seconds instead of at half its life (for tests of
    /// renewal; a replaced token is refused 90 s after its renewal).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(5..))]
    pub(crate) token_renew_seconds: Option<u64>,
    /// Release records one namespace of the member reports at most; past it, the namespace's
    /// records are reported as unreadable (the hub keeps what it last had there and says so on
    /// the MemberCluster), so no tenant writing Secrets in its namespace holds up another's.
    #[arg(long, default_value_t = crate::member::pull::pieces::MAX_NAMESPACE_RECORDS as u32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) max_namespace_records: u32,
    /// Address of `/healthz`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub(crate) http_addr: SocketAddr,
}

impl AgentArgs {
    /// The agent's settings.
    pub(crate) fn settings(&self) -> AgentSettings {
        let found = crate::helm::sdk::locate(self.executor.as_deref(), &self.helm);
        AgentSettings {
            member: HubSource {
                kubeconfig: self.kubeconfig.clone(),
                context: self.context.clone(),
            },
            namespace: self.namespace.clone(),
            helm: HelmOptions {
                binary: self.helm.clone(),
                timeout: Duration::from_secs(self.helm_timeout),
                sdk: found.filter(|p| p.is_file()),
                ..HelmOptions::default()
            },
            chart_dir: self
                .chart_cache
                .clone()
                .unwrap_or_else(|| crate::charts::cache::default_dir().join("agent")),
            lease_seconds: self.lease_seconds,
            namespace_records: self.max_namespace_records as usize,
            token_renew_every: self.token_renew_seconds.map(std::time::Duration::from_secs),
            http_addr: self.http_addr,
        }
    }
}
