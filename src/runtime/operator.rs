//! The operator in phases: preflight and build, lead, start the work, serve, shut down.

use std::{future::Future, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::runtime::Controller;
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument as _;

use crate::{
    api::crd::TenancyController,
    controller::context::Context,
    controller::reload::Reloader,
    controller::{drift_checks, loops, reconcile},
    member::Links,
    runtime::config::{Error, RunConfig},
    runtime::http::Readiness,
    runtime::leader::Leadership,
    runtime::policy_watch::watch_policies,
    runtime::steward::campaign_for_shards,
    runtime::tasks::{ready_store, until},
    runtime::wiring::{Outboxes, Parts, build, preflight},
};

/// How long shutdown waits for the background tasks after the Helm workers have stopped.
pub(crate) const TASKS_GRACE: Duration = Duration::from_secs(10);

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
    match Leadership::acquire(parts.ctx.hub.client.clone(), lease, cancel, standby).await? {
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
    runtime: Option<Controller<TenancyController>>,
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
        notices,
        ready,
        address,
        sharded,
    } = parts;
    let alerts = spawn_notifications(&ctx, notices, config.notify_internal, cancel, tasks);
    tasks.spawn(until(
        cancel,
        watch_policies(
            policies,
            policy_writer,
            (ctx.hub.policies.clone(), ctx.hub.settings.clone()),
            (outboxes.everything.clone(), alerts),
        ),
    ));
    let workers = tokio::spawn({
        let (queue, cancel, done) = (
            ctx.out.queue.clone(),
            cancel.clone(),
            outboxes.outcomes.clone(),
        );
        let links = Arc::new(links.clone());
        async move { queue.run(links, done, cancel).await }
    });
    spawn_loops(
        config,
        &ctx,
        &links,
        &outboxes,
        (records, outcomes, changes, drift),
        (cancel, tasks),
    );
    tasks.spawn(until(cancel, {
        let (store, ready) = (ctx.hub.controllers.clone(), ready.clone());
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
        () = ready_store(&ctx.hub.policies) => {}
        () = cancel.cancelled() => {}
    }
    tracing::info!(
        workers = config.queue.workers,
        per_cluster = config.queue.per_cluster,
        per_owner = config.queue.per_owner,
        per_tenant = config.queue.per_tenant,
        policies = ctx.hub.policies.state().len(),
        mode = ?ctx.hub.settings.policy_mode,
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

/// The Alerts followed (their `Ready` and counts written) and the dispatcher that sends what
/// the status writer and the loops tell them; returns where to say that a policy changed.
fn spawn_notifications(
    ctx: &Arc<Context>,
    notices: mpsc::Receiver<crate::notify::Notice>,
    internal: bool,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) -> mpsc::Sender<()> {
    use crate::controller::alerts;
    use crate::notify::{
        address::HubApi,
        book::AlertBook,
        dispatch::Dispatcher,
        provider::{AdmissionNow, Reach, SecretReader},
    };
    let admission: AdmissionNow = {
        let (policies, settings) = (ctx.hub.policies.clone(), ctx.hub.settings.clone());
        Arc::new(move || crate::controller::context::admission_of(&policies, &settings))
    };
    let reach = Reach {
        internal,
        hub: HubApi::of(&hub_server(ctx)),
    };
    let reader = Arc::new(SecretReader::new(
        ctx.hub.client.clone(),
        ctx.out.metrics.clone(),
    ));
    let (changed, policies) = mpsc::channel(1);
    let parts = alerts::Follow {
        hub: ctx.hub.client.clone(),
        admission: admission.clone(),
        reach: reach.clone(),
        reader: reader.clone(),
    };
    let (store, follow) = alerts::follow(
        parts,
        ctx.hub.settings.scope.as_deref(),
        policies,
        cancel.clone(),
    );
    tasks.spawn(follow.instrument(tracing::info_span!("alerts")));
    let book = Arc::new(AlertBook::default());
    tasks.spawn({
        let (book, hub, cancel) = (book.clone(), ctx.hub.client.clone(), cancel.clone());
        async move { book.write(hub, cancel).await }
    });
    let dispatcher = Dispatcher {
        reader,
        alerts: store,
        admission,
        reach,
        book,
        metrics: ctx.out.metrics.clone(),
    };
    tasks.spawn(
        dispatcher
            .run(notices, tasks.clone(), cancel.clone())
            .instrument(tracing::info_span!("notify")),
    );
    changed
}

/// The hub API server's URL, from the kubeconfig and context the hub's client was built from
/// (none in a Pod: `HubApi` reads the in-cluster Service from the environment).
fn hub_server(ctx: &Context) -> Vec<url::Url> {
    let registry = ctx.members.registry.load();
    let Some(hub) = registry.get(&crate::api::crd::HUB_CLUSTER.parse().expect("valid")) else {
        return Vec::new();
    };
    let Ok(config) = kube::config::Kubeconfig::read_from(&hub.kubeconfig) else {
        return Vec::new();
    };
    let cluster = config
        .contexts
        .iter()
        .find(|c| c.name == hub.entry.context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    config
        .clusters
        .iter()
        .filter(|c| Some(&c.name) == cluster.as_ref())
        .filter_map(|c| c.cluster.as_ref()?.server.as_deref()?.parse().ok())
        .collect()
}

/// The loops that follow outcomes, records, workload changes, freed claims, drift, ownerless
/// releases, charts, cluster health, the registration file, the joined members and their
/// enrollment, and status writes.
fn spawn_loops(
    config: &RunConfig,
    ctx: &Arc<Context>,
    links: &Links,
    outboxes: &Outboxes,
    (records, outcomes, changes, drift): (
        mpsc::Receiver<crate::observe::releases::RecordChange>,
        mpsc::Receiver<crate::queue::Completed>,
        mpsc::Receiver<crate::observe::model::Tagged>,
        mpsc::UnboundedReceiver<crate::controller::drift::DriftCheckRequest>,
    ),
    (cancel, tasks): (&CancellationToken, &TaskTracker),
) {
    let trigger = &outboxes.triggers;
    // Each loop gets the handles it uses, not the reconciler's context.
    let outcomes_book = loops::Outcomes {
        index: ctx.kept.index.clone(),
        controllers: ctx.hub.controllers.clone(),
        events: ctx.out.events.clone(),
        notifier: ctx.out.notifier.clone(),
        metrics: ctx.out.metrics.clone(),
    };
    tasks.spawn(until(
        cancel,
        loops::record_outcomes(outcomes_book, outcomes, trigger.clone()),
    ));
    let news = (
        ctx.kept.claims.clone(),
        ctx.members.releases.clone(),
        ctx.kept.index.clone(),
    );
    tasks.spawn(until(
        cancel,
        loops::forward_record_changes(news, records, trigger.clone()),
    ));
    let aggregation = loops::Aggregation {
        watches: ctx.members.watches.clone(),
        model: ctx.members.model.clone(),
        writer: ctx.out.writer.clone(),
        index: ctx.kept.index.clone(),
        metrics: ctx.out.metrics.clone(),
    };
    tasks.spawn(until(cancel, loops::aggregate(aggregation, changes)));
    tasks.spawn(until(
        cancel,
        loops::wake_freed_claims(ctx.kept.claims.clone(), trigger.clone()),
    ));
    let checks = drift_checks::DriftChecks {
        index: ctx.kept.index.clone(),
        links: links.clone(),
        releases: ctx.members.releases.clone(),
        queue: ctx.out.queue.clone(),
        health: ctx.members.health.clone(),
        controllers: ctx.hub.controllers.clone(),
        events: ctx.out.events.clone(),
        notifier: ctx.out.notifier.clone(),
        metrics: ctx.out.metrics.clone(),
    };
    tasks.spawn(
        drift_checks::detect(checks, drift, trigger.clone(), cancel.clone())
            .instrument(tracing::info_span!("drift")),
    );
    let ownerless = loops::Ownerless {
        controllers: ctx.hub.controllers.clone(),
        releases: ctx.members.releases.clone(),
        orphans: ctx.kept.orphans.clone(),
        scope: ctx.hub.settings.scope.clone(),
        selector: ctx.hub.settings.selector.clone(),
        metrics: ctx.out.metrics.clone(),
    };
    tasks.spawn(loops::report_ownerless(ownerless, cancel.clone()));
    tasks.spawn(until(
        cancel,
        ctx.kept
            .values
            .clone()
            .watch(ctx.hub.settings.scope.clone(), trigger.clone()),
    ));
    let refresh = loops::ChartRefresh {
        charts: ctx.kept.charts.clone(),
        controllers: ctx.hub.controllers.clone(),
        policies: ctx.hub.policies.clone(),
        settings: ctx.hub.settings.clone(),
    };
    tasks.spawn(
        loops::keep_fresh(refresh, trigger.clone(), cancel.clone())
            .instrument(tracing::info_span!("charts")),
    );
    let health_changes = loops::HealthChanges {
        queue: ctx.out.queue.clone(),
        index: ctx.kept.index.clone(),
        controllers: ctx.hub.controllers.clone(),
        writer: ctx.out.writer.clone(),
    };
    tasks.spawn(crate::clusters::health::monitor(
        {
            let links = links.clone();
            move || {
                let links = links.clone();
                async move { links.probe_all().await }
            }
        },
        ctx.members.health.clone(),
        move |cluster, reachable| {
            loops::cluster_health_changed(&health_changes, cluster, reachable)
        },
        cancel.clone(),
    ));
    let reach = || crate::controller::reload::Reach {
        members: ctx.members.clone(),
        orphans: ctx.kept.orphans.clone(),
        controllers: ctx.hub.controllers.clone(),
        events: ctx.out.events.clone(),
        metrics: ctx.out.metrics.clone(),
    };
    if let Some(path) = config.clusters_file.clone() {
        let reloader = Reloader {
            path,
            hub: config.hub.clone(),
            records: outboxes.records.clone(),
            everything: outboxes.everything.clone(),
        };
        tasks.spawn(reloader.run(reach(), cancel.clone()));
    }
    tasks.spawn(
        crate::clusters::joined::follow(
            ctx.hub.client.clone(),
            ctx.members.registry.clone(),
            {
                let (everything, records) = (outboxes.everything.clone(), outboxes.records.clone());
                let (reach, stop) = (reach(), cancel.clone());
                move |change: &crate::clusters::joined::Change| {
                    crate::controller::reload::joined_changed(&reach, change, &records, &stop);
                    // Full: a plan of everything is pending already.
                    let _ = everything.try_send(());
                }
            },
            cancel.clone(),
        )
        .instrument(tracing::info_span!("joined")),
    );
    if let Some(seal) = config.helm.seal.clone() {
        tasks.spawn(
            crate::controller::enroll::run(
                crate::controller::enroll::Enrolling {
                    client: ctx.hub.client.clone(),
                    seal,
                    registry: ctx.members.registry.clone(),
                    shards: ctx.hub.shards.clone(),
                    reports: ctx.members.links.pull_hub(),
                    secrets: config.pull_member_secrets,
                },
                cancel.clone(),
            )
            .instrument(tracing::info_span!("enroll")),
        );
    }
    tasks.spawn({
        let (ctx, cancel) = (ctx.clone(), cancel.clone());
        let interval = config.status_interval;
        let sources = crate::status::writer::Sources {
            hub: ctx.hub.client.clone(),
            controllers: ctx.hub.controllers.clone(),
            model: ctx.members.model.clone(),
            health: ctx.members.health.clone(),
            metrics: ctx.out.metrics.clone(),
        };
        async move { ctx.out.writer.run(&sources, interval, cancel).await }
    });
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
