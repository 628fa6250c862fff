//! The operator's HTTP side as wiring starts it: health, readiness, metrics, the status API,
//! Git push hooks and the fleet view, each given only the parts of the context it reads.

use std::sync::Arc;

use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::Outboxes;
use crate::{
    controller::context::Context,
    runtime::auth::Reviewer,
    runtime::config::{Error, RunConfig},
    runtime::http::{
        self, ApiState, ChannelDepths, Readiness, ScopeOwners, ScopeReleases, StreamCounts,
    },
};

/// Serves health, readiness, metrics, the status API and the fleet view; the API learns which
/// Controllers watch a scope and the streams open, the view what each plans next and how to
/// make its diffs (the member links and `renderer`), and nothing else of the context.
pub(super) async fn serve_http(
    config: &RunConfig,
    ctx: &Arc<Context>,
    outboxes: &Outboxes,
    ready: &Arc<arc_swap::ArcSwap<Readiness>>,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
    renderer: crate::preview::Renderer,
) -> Result<std::net::SocketAddr, Error> {
    let owners = ScopeOwners::default();
    let releases = ScopeReleases::default();
    let streams = StreamCounts::default();
    let fleet = crate::runtime::web::FleetSources::default();
    let http = ApiState {
        git_hooks: Some(crate::runtime::git_hooks::GitHooks::new(
            ctx.hub.policies.clone(),
            Arc::new(crate::charts::credentials::HubSecrets(
                ctx.hub.client.clone(),
            )),
            config.settings.operator_namespace.clone(),
            ctx.kept.charts.clone(),
        )),
        model: ctx.members.model.clone(),
        registry: ctx.members.registry.clone(),
        metrics: ctx.out.metrics.clone(),
        queue: ctx.out.queue.clone(),
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
        reviewer: Arc::new(Reviewer::new(
            ctx.hub.client.clone(),
            ctx.out.metrics.clone(),
        )),
        owners: owners.clone(),
        streams: streams.clone(),
        releases: releases.clone(),
        fleet: fleet.clone(),
    };
    let address = http::serve(config.http_addr, http, cancel.clone(), tasks)
        .await
        .map_err(Error::Http)?;
    owners.set({
        let ctx = Arc::downgrade(ctx);
        move |scope| {
            ctx.upgrade()
                .map(|ctx| ctx.members.watches.owners_of(scope))
                .unwrap_or_default()
        }
    });
    releases.set({
        let ctx = Arc::downgrade(ctx);
        move |scope| {
            ctx.upgrade()
                .map(|ctx| releases_in(&ctx, scope))
                .unwrap_or_default()
        }
    });
    fleet.set(
        {
            let ctx = Arc::downgrade(ctx);
            move || {
                ctx.upgrade()
                    .map(|ctx| ctx.hub.controllers.state())
                    .unwrap_or_default()
            }
        },
        ctx.hub.client.clone(),
    );
    fleet.set_next({
        let ctx = Arc::downgrade(ctx);
        move |namespace, name| {
            let owner = crate::plan::OwnerId {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            ctx.upgrade()
                .map(|ctx| ctx.kept.index.next(&owner))
                .unwrap_or_default()
        }
    });
    fleet.set_diff({
        let (links, salt) = (ctx.members.links.clone(), crate::preview::salt());
        std::sync::Arc::new(move |next| {
            let (links, renderer) = (links.clone(), renderer.clone());
            Box::pin(async move {
                crate::preview::planned(&links, &renderer, &next, &salt)
                    .await
                    .map_err(|e| e.to_string())
            })
        })
    });
    if let Some(pull) = ctx.members.links.pull_hub() {
        let pull = Arc::downgrade(&pull);
        fleet.set_agents(move |cluster| {
            let cluster: crate::api::key::ClusterName = cluster.parse().ok()?;
            let status = pull
                .upgrade()?
                .member(&cluster)
                .read(|r| r.status.clone())?;
            Some((status.version, status.kube_version))
        });
    }
    streams.set({
        let ctx = Arc::downgrade(ctx);
        move || {
            ctx.upgrade()
                .map(|ctx| {
                    vec![
                        ("workloads", ctx.members.watches.streams()),
                        ("release_records", ctx.members.releases.streams()),
                    ]
                })
                .unwrap_or_default()
        }
    });
    Ok(address)
}

/// The releases the statuses of the Controllers watching `scope` report there.
fn releases_in(
    ctx: &Context,
    scope: &crate::api::key::ClusterNamespace,
) -> Vec<crate::runtime::status_api::ScopeRelease> {
    use kube::ResourceExt as _;
    ctx.members
        .watches
        .owners_of(scope)
        .into_iter()
        .filter_map(|owner| ctx.hub.controllers.get(&owner))
        .flat_map(|c| {
            let (hub_namespace, controller) = (c.namespace().unwrap_or_default(), c.name_any());
            c.status
                .iter()
                .flat_map(|s| &s.updated_tenancies)
                .filter(|t| t.cluster == scope.cluster.as_str() && t.namespace == scope.namespace)
                .flat_map(|t| t.chart_messages.clone())
                .map(|message| crate::runtime::status_api::ScopeRelease {
                    hub_namespace: hub_namespace.clone(),
                    controller: controller.clone(),
                    message,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
