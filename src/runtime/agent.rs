//! `tenancy-hub agent`: the agent of a pull member, put together: its own cluster's client, the hub login its join left, the configuration the operator wrote for it, the Helm executor sealing with its cluster's key, and a health endpoint.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio_util::sync::CancellationToken;

use crate::{
    api::member_cluster::{AGENT_CONFIG_SECRET, pull_namespace},
    charts::cache::ChartCache,
    clusters::{
        health::HealthBoard,
        registry::{ClusterRegistry, HubSource, RegistrationFile},
    },
    helm::{args::HelmOptions, cli::HelmCli, sdk::HelmExecutor},
    member::{
        MemberLink,
        pull::{agent::Agent, agent::login::HubLogin, wire::AgentConfig},
        push::PushLink,
    },
};

/// What the agent is started with.
#[derive(Debug, Clone)]
pub(crate) struct AgentSettings {
    /// How the agent reaches its own cluster (none given: in-cluster).
    pub(crate) member: HubSource,
    /// The member namespace holding the `hub-credentials` Secret.
    pub(crate) namespace: String,
    /// How Helm runs.
    pub(crate) helm: HelmOptions,
    /// Where chart archives from the hub are kept.
    pub(crate) chart_dir: PathBuf,
    /// Seconds the agent's Lease holds without renewal.
    pub(crate) lease_seconds: i32,
    /// Release records one namespace reports at most.
    pub(crate) namespace_records: usize,
    /// Renew the hub token this often instead of at half its life (tests).
    pub(crate) token_renew_every: Option<std::time::Duration>,
    /// Address of `/healthz`.
    pub(crate) http_addr: SocketAddr,
}

/// Errors of starting the agent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentError {
    /// The member cluster cannot be reached.
    #[error("the agent's own cluster: {0}")]
    Member(String),
    /// The hub login cannot be set up.
    #[error(transparent)]
    Login(#[from] crate::member::pull::agent::login::Error),
    /// The operator's configuration for this agent cannot be read.
    #[error("the agent's configuration {namespace}/{AGENT_CONFIG_SECRET} on the hub: {reason}")]
    Config {
        /// The member's hub namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
    /// The Helm executor or the chart directory cannot be set up.
    #[error("setting up Helm in the agent: {0}")]
    Helm(String),
}

/// Runs the agent until a shutdown signal.
pub(crate) async fn run(settings: AgentSettings) -> Result<(), AgentError> {
    let local = ClusterRegistry::connect(&settings.member, &RegistrationFile::default())
        .await
        .map_err(|e| AgentError::Member(e.to_string()))?;
    let member_client = local
        .iter()
        .next()
        .map(|m| m.client.clone())
        .ok_or_else(|| AgentError::Member("no client".into()))?;
    let login = Arc::new(
        HubLogin::load(
            member_client,
            &settings.namespace,
            settings.token_renew_every,
        )
        .await?,
    );
    let cluster = login.cluster().clone();
    let hub = login.client();
    let config = read_config(&hub, &cluster).await?;
    let registry = Arc::new(arc_swap::ArcSwap::from_pointee(
        local.as_cluster(cluster.clone()),
    ));
    let member = registry
        .load()
        .get(&cluster)
        .cloned()
        .ok_or_else(|| AgentError::Member("no client".into()))?;
    let mut helm = settings.helm.clone();
    helm.seal = Some(config.seal.clone());
    let charts_dir = settings.chart_dir.clone();
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let binary = helm.binary.clone();
    let cache_dir = charts_dir.join("cache");
    let cache = tokio::task::spawn_blocking(move || {
        ChartCache::open(
            &cache_dir,
            crate::charts::cache::DEFAULT_SIZE,
            binary,
            metrics,
        )
    })
    .await
    .map_err(|e| AgentError::Helm(e.to_string()))?
    .map_err(|e| AgentError::Helm(e.to_string()))?;
    let cli = HelmCli::new(
        helm.clone(),
        registry,
        Arc::new(HealthBoard::default()),
        Arc::new(cache),
    )
    .map_err(|e| AgentError::Helm(e.to_string()))?;
    let executor = Arc::new(HelmExecutor::new(cli, &helm));
    let link: Arc<dyn MemberLink> = Arc::new(PushLink::new(member, Some(executor), Arc::default()));
    let stop = CancellationToken::new();
    let tasks = tokio_util::task::TaskTracker::new();
    tasks.spawn(login.clone().rotate(stop.clone()));
    tasks.spawn(health(settings.http_addr, stop.clone()));
    let agent = Agent::new(
        hub,
        config,
        link,
        charts_dir.join("archives"),
        settings.lease_seconds,
        settings.namespace_records,
    );
    tasks.spawn(agent.run(stop.clone()));
    crate::runtime::tasks::shutdown_signal().await;
    tracing::info!(%cluster, "stopping the agent");
    stop.cancel();
    tasks.close();
    if tokio::time::timeout(Duration::from_secs(20), tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("the agent's tasks did not stop within 20 s");
    }
    Ok(())
}

/// The configuration the operator wrote for `cluster`'s agent, waited for while it is not there
/// yet (the operator writes it when the member is enrolled).
async fn read_config(
    hub: &kube::Client,
    cluster: &crate::api::key::ClusterName,
) -> Result<AgentConfig, AgentError> {
    let namespace = pull_namespace(cluster);
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), &namespace);
    let failed = |reason: String| AgentError::Config {
        namespace: namespace.clone(),
        reason,
    };
    let mut delay = Duration::from_secs(1);
    loop {
        match secrets.get_opt(AGENT_CONFIG_SECRET).await {
            Ok(Some(secret)) => {
                let config = AgentConfig::from_data(&secret.data.unwrap_or_default())
                    .map_err(|e| failed(e.to_string()))?;
                if &config.cluster != cluster {
                    return Err(failed(format!(
                        "it names cluster {}, but this agent joined as {cluster}",
                        config.cluster
                    )));
                }
                return Ok(config);
            }
            Ok(None) => tracing::info!(%cluster, "waiting for the operator to enroll this member"),
            Err(e) => {
                tracing::warn!(%cluster, error = %e, "cannot read the agent's configuration yet")
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Serves `/healthz` until `stop`.
async fn health(addr: SocketAddr, stop: CancellationToken) {
    let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            let server = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
            if let Err(e) = server.await {
                tracing::warn!(error = %e, "the agent's health endpoint stopped");
            }
        }
        Err(e) => tracing::warn!(%addr, error = %e, "the agent's health endpoint cannot listen"),
    }
}
