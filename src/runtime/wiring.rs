//! Checks the hub, then builds every part of the operator (the registry with the joined members) and the bounded channels between them.

use std::{collections::BTreeSet, path::PathBuf, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    Api,
    api::ListParams,
    runtime::{
        Controller, PredicateConfig, WatchStreamExt,
        controller::Config as RuntimeConfig,
        events::{Recorder, Reporter},
        reflector::{self, ObjectRef},
        watcher,
    },
};
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    api::crd::{HUB_CLUSTER, TenancyController},
    api::policy::TenancyPolicy,
    api::shard::Shards,
    charts::cache::ChartCache,
    charts::catalog::ChartCatalog,
    clusters::health::HealthBoard,
    clusters::registry::{self, ClusterRegistry, RegistrationFile},
    controller::context::Settings,
    controller::context::{Context, admission_of},
    controller::drift::DriftBoard,
    controller::events::Events,
    controller::index::ControllerIndex,
    helm::cli::HelmCli,
    helm::sdk::HelmExecutor,
    helm::seal::SealKey,
    member::Links,
    member::pull::{hub::PullHub, wire::Signer},
    metrics::Metrics,
    observe::model::Model,
    observe::releases::ReleaseIndex,
    observe::supervisor::WatchSupervisor,
    plan::{claims, claims::Claims},
    queue::handle::HelmQueue,
    runtime::config::{Error, RunConfig},
    runtime::http::Readiness,
    status::writer::StatusWriter,
};

mod serve;

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
fn plan_relevant(c: &TenancyController) -> Option<u64> {
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

/// What the checks before anything starts found: the hub with its CRDs, the registered clusters
/// and the key release records are sealed with.
pub(crate) struct Hub {
    chart_home: PathBuf,
    registry: ClusterRegistry,
    client: kube::Client,
    controllers: Api<TenancyController>,
    policies: Api<TenancyPolicy>,
    seal: SealKey,
}

/// Checks the chart home, the registration file and the hub's CRDs, and loads (or makes) the
/// sealing key, which the Helm options take.
pub(crate) async fn preflight(config: &mut RunConfig) -> Result<Hub, Error> {
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
    let controllers: Api<TenancyController> = match &config.namespace {
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
        let hello = crate::helm::pipe::probe(binary).await?;
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
pub(crate) struct Inboxes {
    triggers: mpsc::Receiver<ObjectRef<TenancyController>>,
    everything: mpsc::Receiver<()>,
    records: mpsc::Receiver<crate::observe::releases::RecordChange>,
    changes: mpsc::Receiver<crate::observe::model::Tagged>,
    outcomes: mpsc::Receiver<crate::queue::Completed>,
}

/// The sending ends.
#[derive(Clone)]
pub(crate) struct Outboxes {
    pub(crate) triggers: mpsc::Sender<ObjectRef<TenancyController>>,
    pub(crate) everything: mpsc::Sender<()>,
    pub(crate) records: mpsc::Sender<crate::observe::releases::RecordChange>,
    pub(crate) changes: mpsc::Sender<crate::observe::model::Tagged>,
    pub(crate) outcomes: mpsc::Sender<crate::queue::Completed>,
}

pub(crate) fn channels() -> (Outboxes, Inboxes) {
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
pub(crate) struct Parts {
    pub(crate) ctx: Arc<Context>,
    pub(crate) runtime: Controller<TenancyController>,
    pub(crate) links: Links,
    pub(crate) policies: (Api<TenancyPolicy>, reflector::store::Writer<TenancyPolicy>),
    pub(crate) outboxes: Outboxes,
    pub(crate) inboxes: (
        mpsc::Receiver<crate::observe::releases::RecordChange>,
        mpsc::Receiver<crate::queue::Completed>,
        mpsc::Receiver<crate::observe::model::Tagged>,
    ),
    pub(crate) drift: mpsc::UnboundedReceiver<crate::controller::drift::DriftCheckRequest>,
    /// What the status writer and the loops tell the Alerts, for the dispatcher.
    pub(crate) notices: mpsc::Receiver<crate::notify::Notice>,
    pub(crate) ready: Arc<arc_swap::ArcSwap<Readiness>>,
    pub(crate) address: std::net::SocketAddr,
    pub(crate) sharded: bool,
}

/// Builds the parts: the member links and the release-record watches, the queue, the chart
/// cache, the reconciler's runtime, the context, and serves the HTTP endpoints.
pub(crate) async fn build(
    config: &RunConfig,
    hub: Hub,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<Parts, Error> {
    let (outboxes, inboxes) = channels();
    // The joined members are known before the first plan; `joined::follow` keeps them current.
    let joined = crate::clusters::joined::list(&hub.client).await;
    let shared: registry::SharedRegistry = Arc::new(arc_swap::ArcSwap::from_pointee(
        hub.registry.with_joined(joined),
    ));
    let health = Arc::new(HealthBoard::default());
    let metrics = Arc::new(Metrics::new());
    let (notifier, notices) = crate::notify::Notifier::new(metrics.clone());
    let chart_cache = open_chart_cache(config, &metrics, &hub.client).await?;
    // One watch of every pull member's reports and one of their Leases, whatever their number.
    let pull = PullHub::new(
        hub.client.clone(),
        Some(Signer::new(&hub.seal)),
        Some(metrics.clone()),
    );
    tasks.spawn(pull.clone().run(cancel.clone()));
    let links = Links::new(
        shared.clone(),
        executor(config, &shared, &health, &chart_cache)?,
        pull,
        config.pull_answer_within,
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
    chart_cache.admit_git_dependencies({
        let (store, settings) = (policy_store.clone(), config.settings.clone());
        Arc::new(move |tenant: &str, chart: &crate::api::crd::Chart| {
            crate::charts::cache::git::dependencies::scope_under(
                &admission_of(&store, &settings),
                tenant,
                chart,
            )
        })
    });
    let sources =
        crate::charts::signed::Sources::with_verifier(chart_cache.clone(), config.verifier.clone());
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
    let shards = Arc::new(if sharded {
        Shards::none_of(config.shards)
    } else {
        Shards::default()
    });
    let (drift, drift_rx) = DriftBoard::new(config.settings.drift_interval);
    let ctx = Arc::new(Context {
        hub: crate::controller::context::Hub {
            client: hub.client.clone(),
            controllers: runtime.store(),
            policies: policy_store,
            shards: shards.clone(),
            settings: Settings {
                chart_home: hub.chart_home,
                ..config.settings.clone()
            },
        },
        members: crate::controller::context::Members {
            registry: shared,
            links: links.clone(),
            releases: Arc::new(releases),
            model: Arc::new(Model::default()),
            watches: Arc::new(WatchSupervisor::new(
                outboxes.changes.clone(),
                cancel.clone(),
                tasks.clone(),
                shards.clone(),
            )),
            health,
        },
        kept: crate::controller::context::Kept {
            claims,
            orphans: Default::default(),
            index: Arc::new(ControllerIndex::new(drift)),
            charts: Arc::new(ChartCatalog::with_resolver(
                Box::new(sources),
                config.settings.chart_interval,
            )),
            values: Arc::new(crate::controller::hub_values::HubValues::new(
                hub.client.clone(),
                metrics.clone(),
            )),
        },
        out: crate::controller::context::Out {
            queue: HelmQueue::new(config.queue.clone()),
            writer: Arc::new(StatusWriter::telling(notifier.clone())),
            events: Arc::new(Events::new(Recorder::new(
                hub.client,
                Reporter::from("tenancy-hub"),
            ))),
            notifier,
            metrics,
        },
    });
    let ready = Arc::new(arc_swap::ArcSwap::from_pointee(Readiness::Starting));
    let renderer = crate::preview::Renderer {
        helm: config.helm.clone(),
        cache: chart_cache,
    };
    let address =
        serve::serve_http(config, &ctx, &outboxes, &ready, cancel, tasks, renderer).await?;
    Ok(Parts {
        ctx,
        runtime,
        links,
        policies: (hub.policies, policy_writer),
        outboxes,
        inboxes: (inboxes.records, inboxes.outcomes, inboxes.changes),
        drift: drift_rx,
        notices,
        ready,
        address,
        sharded,
    })
}

/// Opens the chart cache, verifying every archive kept (off the async workers); it reads the
/// sources' Secrets from `hub`.
async fn open_chart_cache(
    config: &RunConfig,
    metrics: &Arc<Metrics>,
    hub: &kube::Client,
) -> Result<Arc<ChartCache>, Error> {
    let (dir, size) = (config.chart_cache_dir.clone(), config.chart_cache_size);
    let (helm, metrics) = (config.helm.binary.clone(), metrics.clone());
    let cache = tokio::task::spawn_blocking(move || ChartCache::open(&dir, size, helm, metrics))
        .await
        .expect("opening the chart cache does not panic")?
        .with_index_limit(config.chart_index_limit)
        .with_git_fetcher(config.git_fetcher.clone())
        .with_secrets(crate::charts::credentials::SourceSecrets {
            reader: Arc::new(crate::charts::credentials::HubSecrets(hub.clone())),
            operator_namespace: config.settings.operator_namespace.clone(),
        });
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
    controllers: Api<TenancyController>,
    triggers: mpsc::Receiver<ObjectRef<TenancyController>>,
    everything: mpsc::Receiver<()>,
    (claims, registry, policies): (
        &Arc<Claims>,
        &registry::SharedRegistry,
        &reflector::Store<TenancyPolicy>,
    ),
    cancel: &CancellationToken,
) -> Controller<TenancyController> {
    let scope = config.namespace.clone();
    let triggers = futures::stream::unfold(triggers, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    })
    .filter(move |r: &ObjectRef<TenancyController>| {
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
    Controller::for_stream(own, store)
        .with_config(
            RuntimeConfig::default()
                .debounce(DEBOUNCE)
                .concurrency(RECONCILE_CONCURRENCY),
        )
        .reconcile_on(triggers)
        .reconcile_all_on(everything)
        .graceful_shutdown_on(cancel.clone().cancelled_owned())
}
