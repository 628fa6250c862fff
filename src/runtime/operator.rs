//! Wires registry, release watches, queue and reconciler together and runs them until shutdown.

use std::{collections::BTreeSet, future::Future, path::PathBuf, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    Api,
    api::ListParams,
    runtime::{
        Controller as Runtime, PredicateConfig, WatchStreamExt,
        controller::Config as RuntimeConfig,
        events::{Recorder, Reporter},
        reflector::{self, ObjectRef},
        watcher,
    },
};
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument as _;

use crate::{
    api::crd::{Controller, HUB_CLUSTER},
    api::policy::TenancyPolicy,
    charts::cache::{self, ChartCache},
    charts::catalog::ChartCatalog,
    clusters::health::HealthBoard,
    clusters::registry::{self, ClusterRegistry, HubSource, RegistrationFile},
    controller::context::Settings,
    controller::context::{Context, admission_of},
    controller::events::Events,
    controller::index::ControllerIndex,
    controller::reload::Reloader,
    controller::shard::{Shards, shard_of},
    controller::{drift::DriftBoard, drift_checks, loops, reconcile},
    helm::cli::{HelmCli, HelmOptions},
    helm::sdk::HelmExecutor,
    helm::seal::SealKey,
    member::Links,
    metrics::Metrics,
    observe::model::Model,
    observe::releases::ReleaseIndex,
    observe::watch::WatchSupervisor,
    plan::{claims, claims::Claims},
    queue::{HelmQueue, QueueConfig},
    runtime::auth::Reviewer,
    runtime::http::{self, ApiState, ChannelDepths, Readiness, ScopeOwners, StreamCounts},
    runtime::leader::{Leadership, LeaseConfig},
    runtime::shards::{Steward, campaign},
    status::writer::StatusWriter,
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
    /// At most one status write per resource in this window.
    pub(crate) status_interval: Duration,
    /// Leader election: only the holder of this Lease works; None runs without election.
    pub(crate) leader: Option<LeaseConfig>,
    /// Shards the Controllers are split into, each led by one replica through its own Lease
    /// named after `leader`'s; 1 is a single leader for everything.
    pub(crate) shards: u32,
    /// Where the chart cache keeps chart archives.
    pub(crate) chart_cache_dir: PathBuf,
    /// Bytes of chart archives the chart cache keeps at most.
    pub(crate) chart_cache_size: u64,
    /// Bytes a repository index may have at most.
    pub(crate) chart_index_limit: u64,
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
    Executor(#[from] crate::helm::sdk::ExecutorError),
}

/// Room in the channel of resources to reconcile (sent by the loops, read by kube-runtime, which
/// coalesces them). Channels between components are bounded; a sender whose channel is full
/// waits (backpressure), so nothing is dropped.
pub(crate) const TRIGGER_ROOM: usize = 1024;
/// Room in the channel of release-record news (watchers → `loops::forward_record_changes`).
pub(crate) const RECORD_ROOM: usize = 4096;
/// Room in the channel of pod and workload changes (watchers → `loops::aggregate`).
pub(crate) const CHANGE_ROOM: usize = 8192;
/// Room in the channel of finished Helm jobs (queue → `loops::record_outcomes`).
pub(crate) const OUTCOME_ROOM: usize = 1024;
/// How long shutdown waits for the background tasks after the Helm workers have stopped.
pub(crate) const TASKS_GRACE: Duration = Duration::from_secs(10);
/// Reconcile requests for one resource arriving within this window are handled once.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(200);
/// Reconciles running at once. Unbounded, a start with a thousand Controllers sends a thousand
/// finalizer patches and status writes to the hub in one burst; the hub's answers then lag
/// seconds behind, the Lease renewal among them, and leadership is lost. Bounded, the burst is
/// paced and each reconcile stays short.
pub(crate) const RECONCILE_CONCURRENCY: u16 = 16;

/// What of a `Controller` is worth a new plan: its spec (generation), its deletion, its
/// finalizers and its annotations. The operator's own status writes change none of these, so
/// they do not come back as reconciles.
fn plan_relevant(c: &Controller) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &c.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    Some(hasher.finish())
}

/// Runs the operator until `shutdown` completes, then stops within the queue's shutdown grace.
/// Four phases: check the hub and build every part, lead, start the work, shut down.
pub(crate) async fn run(
    config: RunConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let mut config = config;
    let hub = preflight(&mut config).await?;
    let cancel = CancellationToken::new();
    let tasks = TaskTracker::new();
    tasks.spawn({
        let cancel = cancel.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down: no new Helm jobs; waiting for running ones");
            cancel.cancel();
        }
    });
    let parts = build(&config, hub, &cancel, &tasks).await?;
    let Some(leadership) = lead(&config, &parts, &cancel).await? else {
        return Ok(());
    };
    let mut work = start(&config, parts, &cancel, &tasks).await;
    let result = work.serve(leadership.is_some(), &cancel).await;
    shut_down(work, leadership, &config, &cancel, &tasks).await?;
    result
}

/// What the checks before anything starts found: the hub with its CRDs, the registered clusters
/// and the key release records are sealed with.
struct Hub {
    chart_home: PathBuf,
    registry: ClusterRegistry,
    client: kube::Client,
    controllers: Api<Controller>,
    policies: Api<TenancyPolicy>,
    seal: SealKey,
}

/// Checks the chart home, the registration file and the hub's CRDs, and loads (or makes) the
/// sealing key, which the Helm options take.
async fn preflight(config: &mut RunConfig) -> Result<Hub, Error> {
    let chart_home = std::fs::canonicalize(&config.settings.chart_home)
        .ok()
        .filter(|p| p.is_dir())
        .ok_or_else(|| Error::ChartHome(config.settings.chart_home.clone()))?;
    let file = match &config.clusters_file {
        Some(path) => RegistrationFile::load(path)?,
        None => RegistrationFile::default(),
    };
    let registry = ClusterRegistry::connect(&config.hub, &file).await?;
    let client = registry
        .get(&HUB_CLUSTER.parse().expect("valid"))
        .expect("the registry always holds the hub")
        .client
        .clone();
    let controllers: Api<Controller> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    controllers
        .list(&ListParams::default().limit(1))
        .await
        .map_err(Error::NoCrd)?;
    let policies: Api<TenancyPolicy> = Api::all(client.clone());
    policies
        .list(&ListParams::default().limit(1))
        .await
        .map_err(Error::NoPolicyCrd)?;
    let seal = SealKey::load_or_create(client.clone(), &config.settings.operator_namespace).await?;
    tracing::info!(secret = %format!("{}/{}", config.settings.operator_namespace, crate::helm::seal::KEY_SECRET), "release records are sealed with the key in this hub Secret; records it does not verify are never acted on");
    config.helm.seal = Some(seal.clone());
    if let Some(binary) = &config.helm.sdk {
        // A mismatch is found now, not at the first job.
        let hello = crate::helm::sdk::probe(binary).await?;
        tracing::info!(executor = %binary.display(), protocol = hello.protocol, helm = %hello.helm, "the helm executor speaks this operator's protocol");
    }
    Ok(Hub {
        chart_home,
        registry,
        client,
        controllers,
        policies,
        seal,
    })
}

/// The receiving ends of the channels between the components, each bounded.
struct Inboxes {
    triggers: mpsc::Receiver<ObjectRef<Controller>>,
    everything: mpsc::Receiver<()>,
    records: mpsc::Receiver<crate::observe::releases::RecordChange>,
    changes: mpsc::Receiver<crate::observe::model::Tagged>,
    outcomes: mpsc::Receiver<crate::queue::Completed>,
}

/// The sending ends.
#[derive(Clone)]
struct Outboxes {
    triggers: mpsc::Sender<ObjectRef<Controller>>,
    everything: mpsc::Sender<()>,
    records: mpsc::Sender<crate::observe::releases::RecordChange>,
    changes: mpsc::Sender<crate::observe::model::Tagged>,
    outcomes: mpsc::Sender<crate::queue::Completed>,
}

fn channels() -> (Outboxes, Inboxes) {
    let (triggers, triggers_rx) = mpsc::channel(TRIGGER_ROOM);
    let (everything, everything_rx) = mpsc::channel(16);
    let (records, records_rx) = mpsc::channel(RECORD_ROOM);
    let (changes, changes_rx) = mpsc::channel(CHANGE_ROOM);
    let (outcomes, outcomes_rx) = mpsc::channel(OUTCOME_ROOM);
    (
        Outboxes {
            triggers,
            everything,
            records,
            changes,
            outcomes,
        },
        Inboxes {
            triggers: triggers_rx,
            everything: everything_rx,
            records: records_rx,
            changes: changes_rx,
            outcomes: outcomes_rx,
        },
    )
}

/// Every part, built and not yet working (the HTTP endpoints excepted: a standby answers them).
struct Parts {
    ctx: Arc<Context>,
    runtime: Runtime<Controller>,
    links: Links,
    policies: (Api<TenancyPolicy>, reflector::store::Writer<TenancyPolicy>),
    outboxes: Outboxes,
    inboxes: (
        mpsc::Receiver<crate::observe::releases::RecordChange>,
        mpsc::Receiver<crate::queue::Completed>,
        mpsc::Receiver<crate::observe::model::Tagged>,
    ),
    drift: mpsc::UnboundedReceiver<crate::controller::drift::DriftCheckRequest>,
    ready: Arc<arc_swap::ArcSwap<Readiness>>,
    address: std::net::SocketAddr,
    sharded: bool,
}

/// Builds the parts: the member links and the release-record watches, the queue, the chart
/// cache, the reconciler's runtime, the context, and serves the HTTP endpoints.
async fn build(
    config: &RunConfig,
    hub: Hub,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<Parts, Error> {
    let (outboxes, inboxes) = channels();
    let shared: registry::SharedRegistry = Arc::new(arc_swap::ArcSwap::from_pointee(hub.registry));
    let health = Arc::new(HealthBoard::default());
    let metrics = Arc::new(Metrics::new());
    let chart_cache = open_chart_cache(config, &metrics).await?;
    let links = Links::new(
        shared.clone(),
        executor(config, &shared, &health, &chart_cache)?,
    );
    let releases = ReleaseIndex::new(tasks.clone(), Some(hub.seal));
    for link in links.all() {
        releases.watch(
            link.cluster().clone(),
            |selector| link.release_records(selector),
            outboxes.records.clone(),
            cancel,
        );
        tracing::info!(cluster = %link.cluster(), "watching release records");
    }
    let (policy_store, policy_writer) = reflector::store();
    let claims = Arc::new(Claims::new(hub.chart_home.clone()));
    let runtime = reconciler(
        config,
        hub.controllers,
        inboxes.triggers,
        inboxes.everything,
        (&claims, &shared, &policy_store),
        cancel,
    );
    let sharded = config.shards > 1 && config.leader.is_some();
    let (drift, drift_rx) = DriftBoard::new(config.settings.drift_interval);
    let ctx = Arc::new(Context {
        hub: hub.client.clone(),
        registry: shared,
        releases,
        queue: HelmQueue::new(config.queue.clone()),
        claims,
        orphans: Default::default(),
        charts: ChartCatalog::new(chart_cache, config.settings.chart_interval),
        controllers: runtime.store(),
        policies: policy_store,
        events: Events::new(Recorder::new(hub.client, Reporter::from("tenancy-hub"))),
        model: Arc::new(Model::default()),
        links: links.clone(),
        watches: WatchSupervisor::new(outboxes.changes.clone(), cancel.clone(), tasks.clone()),
        writer: StatusWriter::default(),
        health,
        metrics,
        index: ControllerIndex::new(drift),
        shards: Arc::new(if sharded {
            Shards::none_of(config.shards)
        } else {
            Shards::default()
        }),
        settings: Settings {
            chart_home: hub.chart_home,
            ..config.settings.clone()
        },
    });
    let ready = Arc::new(arc_swap::ArcSwap::from_pointee(Readiness::Starting));
    let address = serve_http(config, &ctx, &outboxes, &ready, cancel, tasks).await?;
    Ok(Parts {
        ctx,
        runtime,
        links,
        policies: (hub.policies, policy_writer),
        outboxes,
        inboxes: (inboxes.records, inboxes.outcomes, inboxes.changes),
        drift: drift_rx,
        ready,
        address,
        sharded,
    })
}

/// Opens the chart cache, verifying every archive kept (off the async workers).
async fn open_chart_cache(
    config: &RunConfig,
    metrics: &Arc<Metrics>,
) -> Result<Arc<ChartCache>, Error> {
    let (dir, size) = (config.chart_cache_dir.clone(), config.chart_cache_size);
    let (helm, metrics) = (config.helm.binary.clone(), metrics.clone());
    let cache = tokio::task::spawn_blocking(move || ChartCache::open(&dir, size, helm, metrics))
        .await
        .expect("opening the chart cache does not panic")?
        .with_index_limit(config.chart_index_limit);
    tracing::info!(dir = %cache.dir().display(), bytes = config.chart_cache_size, "chart cache opened");
    Ok(Arc::new(cache))
}

/// The Helm executor `config` asks for.
fn executor(
    config: &RunConfig,
    registry: &registry::SharedRegistry,
    health: &Arc<HealthBoard>,
    charts: &Arc<ChartCache>,
) -> Result<Arc<HelmExecutor>, Error> {
    let cli = HelmCli::new(
        config.helm.clone(),
        registry.clone(),
        health.clone(),
        charts.clone(),
    )
    .map_err(Error::Scratch)?;
    match &config.helm.sdk {
        Some(binary) => {
            tracing::info!(executor = %binary.display(), "helm runs in the long-lived executor")
        }
        None => {
            tracing::info!(helm = %config.helm.binary.display(), "helm runs one process per job")
        }
    }
    Ok(Arc::new(HelmExecutor::new(cli, &config.helm)))
}

/// The reconciler's runtime: the selected Controllers of the scope, claims followed from every
/// event, reconciled on what is worth a new plan, on triggers and all at once on `everything`.
fn reconciler(
    config: &RunConfig,
    controllers: Api<Controller>,
    triggers: mpsc::Receiver<ObjectRef<Controller>>,
    everything: mpsc::Receiver<()>,
    (claims, registry, policies): (
        &Arc<Claims>,
        &registry::SharedRegistry,
        &reflector::Store<TenancyPolicy>,
    ),
    cancel: &CancellationToken,
) -> Runtime<Controller> {
    let scope = config.namespace.clone();
    let triggers = futures::stream::unfold(triggers, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    })
    .filter(move |r: &ObjectRef<Controller>| {
        futures::future::ready(
            scope
                .as_ref()
                .is_none_or(|ns| r.namespace.as_ref() == Some(ns)),
        )
    });
    let everything = futures::stream::unfold(everything, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let (store, writer) = reflector::store();
    let selected = match &config.settings.selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let own = watcher(controllers, selected)
        .default_backoff()
        .reflect(writer)
        .inspect({
            let (claims, registry) = (claims.clone(), registry.clone());
            let (policies, settings) = (policies.clone(), config.settings.clone());
            let mut listing = BTreeSet::new();
            move |event| {
                if let Ok(event) = event {
                    let basis = || claims::Basis {
                        labels: registry.load().labels(),
                        admission: admission_of(&policies, &settings),
                    };
                    claims::follow(&claims, &basis, &mut listing, event);
                }
            }
        })
        .applied_objects()
        .predicate_filter(plan_relevant, PredicateConfig::default());
    Runtime::for_stream(own, store)
        .with_config(
            RuntimeConfig::default()
                .debounce(DEBOUNCE)
                .concurrency(RECONCILE_CONCURRENCY),
        )
        .reconcile_on(triggers)
        .reconcile_all_on(everything)
        .graceful_shutdown_on(cancel.clone().cancelled_owned())
}

/// Serves health, readiness, metrics and the status API; the API learns which Controllers watch
/// a scope and the streams open, and nothing else of the context.
async fn serve_http(
    config: &RunConfig,
    ctx: &Arc<Context>,
    outboxes: &Outboxes,
    ready: &Arc<arc_swap::ArcSwap<Readiness>>,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<std::net::SocketAddr, Error> {
    let owners = ScopeOwners::default();
    let streams = StreamCounts::default();
    let http = ApiState {
        model: ctx.model.clone(),
        registry: ctx.registry.clone(),
        metrics: ctx.metrics.clone(),
        queue: ctx.queue.clone(),
        ready: ready.clone(),
        channels: ChannelDepths::of(vec![("triggers", outboxes.triggers.downgrade())])
            .join(ChannelDepths::of(vec![(
                "record_changes",
                outboxes.records.downgrade(),
            )]))
            .join(ChannelDepths::of(vec![(
                "model_changes",
                outboxes.changes.downgrade(),
            )]))
            .join(ChannelDepths::of(vec![(
                "outcomes",
                outboxes.outcomes.downgrade(),
            )])),
        reviewer: Arc::new(Reviewer::new(ctx.hub.clone())),
        owners: owners.clone(),
        streams: streams.clone(),
    };
    let address = http::serve(config.http_addr, http, cancel.clone(), tasks)
        .await
        .map_err(Error::Http)?;
    owners.set({
        let ctx = Arc::downgrade(ctx);
        move |scope| {
            ctx.upgrade()
                .map(|ctx| ctx.watches.owners_of(scope))
                .unwrap_or_default()
        }
    });
    streams.set({
        let ctx = Arc::downgrade(ctx);
        move || {
            ctx.upgrade()
                .map(|ctx| {
                    vec![
                        ("workloads", ctx.watches.streams()),
                        ("release_records", ctx.releases.streams()),
                    ]
                })
                .unwrap_or_default()
        }
    });
    Ok(address)
}

/// Waits for leadership when one Lease elects a single leader. `None` when shutdown came first;
/// `Some(None)` without election (or with shards, each led through its own Lease).
async fn lead(
    config: &RunConfig,
    parts: &Parts,
    cancel: &CancellationToken,
) -> Result<Option<Option<Leadership>>, Error> {
    let Some(lease) = config.leader.clone().filter(|_| !parts.sharded) else {
        return Ok(Some(None));
    };
    let name = format!("{}/{}", lease.namespace, lease.name);
    tracing::info!(lease = %name, identity = %lease.identity, "waiting for leadership");
    // A standby is healthy and ready, so a rollout proceeds; /readyz says what it waits for.
    let ready = parts.ready.clone();
    let standby = |holder: &str| {
        ready.store(Arc::new(Readiness::Standby {
            lease: name.clone(),
            holder: holder.to_owned(),
        }));
    };
    match Leadership::acquire(parts.ctx.hub.clone(), lease, cancel, standby).await? {
        Some(l) => {
            parts.ready.store(Arc::new(Readiness::Starting));
            tracing::info!("acquired leadership; starting work");
            Ok(Some(Some(l)))
        }
        None => Ok(None),
    }
}

/// What runs once led: the reconciler, the Helm workers and the shard campaign.
struct Work {
    ctx: Arc<Context>,
    /// Taken when it starts.
    runtime: Option<Runtime<Controller>>,
    workers: tokio::task::JoinHandle<()>,
    campaign: Option<tokio::task::JoinHandle<Result<(), crate::runtime::leader::Error>>>,
    stop_campaign: CancellationToken,
    lost: CancellationToken,
    sharded: bool,
}

/// Starts the Helm workers and the background loops, campaigns for shards, and waits until the
/// policies are known (an empty store would make every release Forbidden).
async fn start(
    config: &RunConfig,
    parts: Parts,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Work {
    let Parts {
        ctx,
        runtime,
        links,
        policies: (policies, policy_writer),
        outboxes,
        inboxes: (records, outcomes, changes),
        drift,
        ready,
        address,
        sharded,
    } = parts;
    tasks.spawn(until(
        cancel,
        watch_policies(
            policies,
            policy_writer,
            (ctx.policies.clone(), ctx.settings.clone()),
            outboxes.everything.clone(),
        ),
    ));
    let workers = tokio::spawn({
        let (queue, cancel, done) = (ctx.queue.clone(), cancel.clone(), outboxes.outcomes.clone());
        let links = Arc::new(links.clone());
        async move { queue.run(links, done, cancel).await }
    });
    spawn_loops(
        config,
        &ctx,
        &links,
        &outboxes,
        (records, outcomes, changes),
        drift,
        cancel,
        tasks,
    );
    tasks.spawn(until(cancel, {
        let (store, ready) = (ctx.controllers.clone(), ready.clone());
        async move {
            ready_store(&store).await;
            if !sharded {
                ready.store(Arc::new(Readiness::Ready));
            }
            tracing::info!(%address, "ready: the hub's Controllers are listed");
        }
    }));
    let lost = CancellationToken::new();
    let stop_campaign = CancellationToken::new();
    let campaign = campaign_for_shards(config, &ctx, &outboxes, &ready, &stop_campaign, &lost);
    tokio::select! {
        () = ready_store(&ctx.policies) => {}
        () = cancel.cancelled() => {}
    }
    tracing::info!(
        workers = config.queue.workers,
        per_cluster = config.queue.per_cluster,
        per_owner = config.queue.per_owner,
        per_tenant = config.queue.per_tenant,
        policies = ctx.policies.state().len(),
        mode = ?ctx.settings.policy_mode,
        "tenancy-hub is running"
    );
    Work {
        ctx,
        runtime: Some(runtime),
        workers,
        campaign,
        stop_campaign,
        lost,
        sharded,
    }
}

/// The loops that follow outcomes, records, workload changes, freed claims, drift, ownerless
/// releases, charts, cluster health, the registration file and status writes.
#[allow(clippy::too_many_arguments)]
fn spawn_loops(
    config: &RunConfig,
    ctx: &Arc<Context>,
    links: &Links,
    outboxes: &Outboxes,
    (records, outcomes, changes): (
        mpsc::Receiver<crate::observe::releases::RecordChange>,
        mpsc::Receiver<crate::queue::Completed>,
        mpsc::Receiver<crate::observe::model::Tagged>,
    ),
    drift: mpsc::UnboundedReceiver<crate::controller::drift::DriftCheckRequest>,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let trigger = &outboxes.triggers;
    tasks.spawn(until(
        cancel,
        loops::record_outcomes(ctx.clone(), outcomes, trigger.clone()),
    ));
    tasks.spawn(until(
        cancel,
        loops::forward_record_changes(ctx.clone(), records, trigger.clone()),
    ));
    tasks.spawn(until(cancel, loops::aggregate(ctx.clone(), changes)));
    tasks.spawn(until(
        cancel,
        loops::wake_freed_claims(ctx.clone(), trigger.clone()),
    ));
    tasks.spawn(
        drift_checks::detect(ctx.clone(), drift, trigger.clone(), cancel.clone())
            .instrument(tracing::info_span!("drift")),
    );
    tasks.spawn(loops::report_ownerless(ctx.clone(), cancel.clone()));
    tasks.spawn(
        loops::keep_fresh(ctx.clone(), trigger.clone(), cancel.clone())
            .instrument(tracing::info_span!("charts")),
    );
    tasks.spawn(crate::clusters::health::monitor(
        {
            let links = links.clone();
            move || {
                let links = links.clone();
                async move { links.probe_all().await }
            }
        },
        ctx.health.clone(),
        {
            let ctx = ctx.clone();
            move |cluster, reachable| loops::cluster_health_changed(&ctx, cluster, reachable)
        },
        cancel.clone(),
    ));
    if let Some(path) = config.clusters_file.clone() {
        let reloader = Reloader {
            path,
            hub: config.hub.clone(),
            records: outboxes.records.clone(),
            everything: outboxes.everything.clone(),
        };
        tasks.spawn(reloader.run(ctx.clone(), cancel.clone()));
    }
    tasks.spawn({
        let (ctx, cancel) = (ctx.clone(), cancel.clone());
        let interval = config.status_interval;
        let sources = crate::status::writer::Sources {
            hub: ctx.hub.clone(),
            controllers: ctx.controllers.clone(),
            model: ctx.model.clone(),
            health: ctx.health.clone(),
            metrics: ctx.metrics.clone(),
        };
        async move { ctx.writer.run(&sources, interval, cancel).await }
    });
}

/// With shards: once the Controllers are listed, leads a fair share of the shards. Stopped only
/// after the Helm workers, so a shard is never given up while its jobs run.
fn campaign_for_shards(
    config: &RunConfig,
    ctx: &Arc<Context>,
    outboxes: &Outboxes,
    ready: &Arc<arc_swap::ArcSwap<Readiness>>,
    stop: &CancellationToken,
    lost: &CancellationToken,
) -> Option<tokio::task::JoinHandle<Result<(), crate::runtime::leader::Error>>> {
    let base = config.leader.clone().filter(|_| config.shards > 1)?;
    let lease = format!(
        "{}/{}-shard-*-of-{}",
        base.namespace, base.name, config.shards
    );
    ready.store(Arc::new(Readiness::Standby {
        lease: lease.clone(),
        holder: "other replicas (none is led here yet)".into(),
    }));
    let steward = ShardSteward {
        ctx: ctx.clone(),
        everything: outboxes.everything.clone(),
        ready: ready.clone(),
        lease,
        drain_limit: config.helm.timeout + config.queue.shutdown_grace,
    };
    let (hub, shards, stop, lost) = (
        ctx.hub.clone(),
        ctx.shards.clone(),
        stop.clone(),
        lost.clone(),
    );
    let store = ctx.controllers.clone();
    Some(tokio::spawn(
        async move {
            ready_store(&store).await;
            campaign(hub, base, shards, steward, stop, lost).await
        }
        .instrument(tracing::info_span!("shards")),
    ))
}

impl Work {
    /// Reconciles until shutdown, or until leadership (or a shard) is lost, when every Helm
    /// process is stopped at once so another replica may take over.
    async fn serve(&mut self, led: bool, cancel: &CancellationToken) -> Result<(), Error> {
        let runtime = self.runtime.take().expect("the reconciler runs once");
        let run = runtime
            .run(
                reconcile::reconcile,
                reconcile::error_policy,
                self.ctx.clone(),
            )
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "reconcile ended with an error");
                }
            });
        let campaign_ended = async {
            match self.campaign.as_mut() {
                Some(handle) => handle.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = run => Ok(()),
            () = self.lost.cancelled(), if (led || self.sharded) && !cancel.is_cancelled() => {
                // Another replica may take over soon: stop every Helm process now, not after a grace.
                self.workers.abort();
                cancel.cancel();
                Err(Error::LostLeadership)
            }
            ended = campaign_ended => {
                self.workers.abort();
                cancel.cancel();
                match ended {
                    Ok(Err(e)) => Err(Error::Leader(e)),
                    _ => Err(Error::LostLeadership),
                }
            }
        }
    }
}

/// Stops in order: the Helm workers (within the queue's grace), then the shard Leases, the
/// background tasks, and the leadership Lease.
async fn shut_down(
    work: Work,
    leadership: Option<Leadership>,
    config: &RunConfig,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<(), Error> {
    let grace = config.queue.shutdown_grace + Duration::from_secs(5);
    if tokio::time::timeout(grace, work.workers).await.is_err() {
        tracing::warn!("Helm workers did not stop in time");
    }
    // Helm has stopped: the shards can go to other replicas.
    work.stop_campaign.cancel();
    if let Some(handle) = work.campaign
        && tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, handle)
            .await
            .is_err()
    {
        tracing::warn!("the hub did not answer the shard Lease releases in time; they expire");
    }
    cancel.cancel();
    tasks.close();
    if tokio::time::timeout(TASKS_GRACE, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = tasks.len(),
            "background tasks did not stop within {TASKS_GRACE:?}"
        );
    }
    if let Some(l) = leadership {
        match tokio::time::timeout(crate::api::HUB_WRITE_TIMEOUT, l.release()).await {
            Ok(released) => {
                released?;
                tracing::info!("released leadership");
            }
            Err(_) => tracing::warn!(
                "the hub did not answer the Lease release in time; a standby takes over when it expires"
            ),
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Starts and drains the work of the shards the campaign takes and gives up.
struct ShardSteward {
    ctx: Arc<Context>,
    everything: mpsc::Sender<()>,
    ready: Arc<arc_swap::ArcSwap<Readiness>>,
    lease: String,
    /// The longest a drain waits for running Helm jobs.
    drain_limit: Duration,
}

impl Steward for ShardSteward {
    fn gained(&self, _shard: u32) {
        self.ready.store(Arc::new(Readiness::Ready));
        // Full: a reconcile of everything is pending already.
        let _ = self.everything.try_send(());
    }

    async fn drain(&self, shard: u32) {
        let ctx = &self.ctx;
        let total = ctx.shards.total();
        let owners: Vec<_> = ctx
            .controllers
            .state()
            .iter()
            .filter(|c| {
                let ns = c.metadata.namespace.as_deref().unwrap_or_default();
                shard_of(ns, &kube::ResourceExt::name_any(c.as_ref()), total) == shard
            })
            .map(|c| (crate::plan::owner_id(c), ObjectRef::from_obj(c.as_ref())))
            .collect();
        for (owner, object) in &owners {
            ctx.queue
                .retain_planned(owner, &std::collections::HashSet::new());
            reconcile::forget(ctx, object);
        }
        let deadline = tokio::time::Instant::now() + self.drain_limit;
        while owners
            .iter()
            .any(|(owner, _)| !ctx.queue.running_for(owner).is_empty())
            && tokio::time::Instant::now() < deadline
        {
            // Polls the queue: running jobs finish within the helm timeout.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if ctx.shards.led().is_empty() {
            self.ready.store(Arc::new(Readiness::Standby {
                lease: self.lease.clone(),
                holder: "other replicas (none is led here now)".into(),
            }));
        }
    }
}

/// Completes when a reflector store has been filled once. The store wakes a single waiter when it
/// fills (which may be the controller's own), so this polls it.
async fn ready_store<K>(store: &reflector::Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let tick = Duration::from_millis(200);
    while tokio::time::timeout(tick, store.wait_until_ready())
        .await
        .is_err()
    {}
}

/// Keeps the `TenancyPolicy` store current and has every `Controller` planned again whenever a
/// policy is created, changed or deleted, so policy changes take effect without a restart.
async fn watch_policies(
    api: Api<TenancyPolicy>,
    writer: reflector::store::Writer<TenancyPolicy>,
    (store, settings): (reflector::Store<TenancyPolicy>, Settings),
    everything: mpsc::Sender<()>,
) {
    let mut events = std::pin::pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
    );
    let mut said = BTreeSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::Delete(p)) => {
                tracing::info!(policy = %kube::ResourceExt::name_any(&p), "a TenancyPolicy changed; planning every Controller again");
                said = warn_of_policies(&admission_of(&store, &settings), said);
                let _ = everything.send(()).await;
            }
            Ok(watcher::Event::InitDone) => {
                said = warn_of_policies(&admission_of(&store, &settings), said);
                let _ = everything.send(()).await;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "watching TenancyPolicies failed; retrying"),
        }
    }
}

/// Logs, once per change, policies that name no identity and hub namespaces whose policies
/// disagree on the identity Helm acts as; returns what is said now.
fn warn_of_policies(
    admission: &crate::policy::Admission,
    before: BTreeSet<String>,
) -> BTreeSet<String> {
    let mut now: BTreeSet<String> = admission.disagreements().into_iter().collect();
    for p in &admission.policies {
        if let Err(why) = p.spec.identity() {
            now.insert(format!("TenancyPolicy {} allows nothing: {why}", p.name));
        }
    }
    for warning in now.difference(&before) {
        tracing::warn!(%warning, "tenancy policies");
    }
    now
}

/// Runs `task` until it ends or `cancel` fires.
fn until(
    cancel: &CancellationToken,
    task: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let cancel = cancel.clone();
    async move {
        tokio::select! {
            () = task => {}
            () = cancel.cancelled() => {}
        }
    }
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
