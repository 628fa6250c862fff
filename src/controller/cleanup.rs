//! The finalizer's deletion path: a deleted `Controller`'s releases uninstalled everywhere (or,
//! with `deletionPolicy: Orphan` or `suspend`, left in place), what it waits for, and everything
//! kept for it forgotten.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use kube::{
    Resource,
    runtime::{controller::Action, events::EventType, reflector::ObjectRef},
};

use crate::{
    api::crd::{DeletionPolicy, TenancyController},
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    controller::context::Context,
    controller::depends_gate::removal_held,
    controller::events::publish,
    controller::finalizer::{Error, Result},
    controller::vouch::Delivers,
    plan::{self, Applied, Job, OwnerId, depends::Edges, depends::Held, owner_id},
    queue::Outcome,
    status::report::{self as status, LastOutcome},
};

/// Registered clusters and their labels.
type Registered = BTreeMap<ClusterName, BTreeMap<String, String>>;

/// Deletion: uninstalls the resource's releases everywhere (or, with `deletionPolicy: Orphan`,
/// leaves them), waiting only for clusters that hold or may hold them, and for its running jobs;
/// a release others depend on (`dependsOn`) after them.
pub(crate) async fn cleanup(c: &TenancyController, ctx: &Context) -> Result<Action> {
    let owner = owner_id(c);
    ctx.kept.claims.update(c, &ctx.claim_basis());
    // A resource created again under this name starts its rollouts afresh.
    ctx.kept.index.set_rollout(&owner, None);
    let object = ObjectRef::from_obj(c);
    let dropped = ctx.out.queue.drop_applies(&owner);
    if dropped > 0 {
        tracing::info!(controller = %owner, dropped, "being deleted: dropped its queued installs and upgrades");
    }
    let Holding {
        synced,
        mut owned,
        registered,
        remembered,
    } = holding(ctx, c, &owner);
    // Suspended releases get no Helm call, uninstall included: they are left in place.
    let held = plan::Held::of(&c.spec, &registered);
    let left: Vec<String> = owned
        .iter()
        .filter(|k| held.holds(k))
        .map(ToString::to_string)
        .collect();
    owned.retain(|k| !held.holds(k));
    let removal = removal_identities(ctx, c, &owner, &registered, &owned).await;
    owned.retain(|k| removal.contains_key(k));
    let orphan = c.spec.deletion_policy == DeletionPolicy::Orphan || c.spec.suspend;
    if orphan {
        // Nothing queued for it may run any more, uninstalls included.
        ctx.out.queue.retain_planned(&owner, &HashSet::new());
    } else if !left.is_empty() {
        ctx.out
            .queue
            .retain_planned(&owner, &owned.iter().collect());
    }
    let running = ctx.out.queue.running_for(&owner);
    if running.is_empty() && leave_in_place(ctx, c, &owner, &owned, &left).await {
        forget(ctx, &object);
        return Ok(Action::await_change());
    }
    let mut ordered = Held::new();
    if c.spec.deletion_policy == DeletionPolicy::Delete {
        // Releases depending on others go first: those they depend on wait, out of the queue.
        ordered = removal_held(c, &remembered, &registered, &owned, &running);
        if !ordered.is_empty() {
            ctx.out.queue.retain_planned(
                &owner,
                &owned.iter().filter(|k| !ordered.contains_key(*k)).collect(),
            );
        }
        let now = |k: &&ReleaseKey| !running.contains(k) && !ordered.contains_key(*k);
        for key in owned.iter().filter(now) {
            ctx.out.queue.enqueue(Job::Uninstall {
                key: key.clone(),
                owner: owner.clone(),
                identity: removal.get(key).cloned().flatten(),
                settings: plan::uninstall_settings(&c.spec, key),
            });
        }
    }
    let unreached = unreached(c, &registered, &owned, &synced);
    if owned.is_empty() && running.is_empty() && unreached.is_empty() {
        if !left.is_empty() {
            let note = format!(
                "releases of suspended tenancies are left in place: {}",
                left.join(", ")
            );
            tracing::warn!(controller = %owner, releases = ?left, "releases of suspended tenancies are left in place");
            deletion_warning(ctx, c, "Suspended", note).await;
        }
        forget(ctx, &object);
        tracing::info!(controller = %owner, "every release uninstalled; removing the finalizer");
        return Ok(Action::await_change());
    }
    let waiting = describe_wait(ctx, &owned, &running, &unreached, &ordered);
    ctx.out.writer.submit(
        object,
        status::deleting(c.status.as_ref(), c.meta().generation, waiting.clone()),
    );
    Err(Error::CleanupPending { owner, waiting })
}

/// What a deletion reads: the clusters whose releases are known, the releases the resource
/// holds, the registered clusters, and the `dependsOn` edges remembered for it.
struct Holding {
    synced: BTreeSet<ClusterName>,
    owned: BTreeSet<ReleaseKey>,
    registered: Registered,
    remembered: Edges,
}

fn holding(ctx: &Context, c: &TenancyController, owner: &OwnerId) -> Holding {
    Holding {
        synced: ctx.members.releases.synced(),
        owned: owned_releases(ctx, c, owner),
        registered: ctx.members.registry.load().labels(),
        remembered: ctx.kept.index.dependencies(owner),
    }
}

/// The releases `owner` holds: those the release records show, and those a finished job
/// installed that the records do not show yet.
fn owned_releases(ctx: &Context, c: &TenancyController, owner: &OwnerId) -> BTreeSet<ReleaseKey> {
    let named = ctx.kept.claims.keys_of(owner);
    let basis = ctx.claim_basis();
    let delivers = Delivers::new(c, owner, &named, &basis);
    let applied: HashMap<ReleaseKey, Applied> = ctx
        .members
        .releases
        .owned_by(owner, &|k| delivers.to(k))
        .into_iter()
        .map(|a| (a.key.clone(), a))
        .collect();
    let outcomes = ctx.kept.index.outcomes_of(owner);
    let records: HashMap<ReleaseKey, Applied> = outcomes
        .iter()
        .filter_map(|(key, _)| {
            let record = applied
                .get(key)
                .cloned()
                .or_else(|| ctx.members.releases.get(key))?;
            Some((key.clone(), record))
        })
        .collect();
    let mut owned: BTreeSet<ReleaseKey> = applied.into_keys().collect();
    owned.extend(just_applied(owner, &outcomes, &records));
    owned
}

/// Of `owner`'s last job `outcomes`, the releases a job installed that their `records` (the
/// newest record of each, whoever owns it) do not show yet.
fn just_applied(
    owner: &OwnerId,
    outcomes: &[(ReleaseKey, LastOutcome)],
    records: &HashMap<ReleaseKey, Applied>,
) -> Vec<ReleaseKey> {
    outcomes
        .iter()
        .filter(|(key, o)| match o.outcome {
            Outcome::Applied { revision, .. } => records
                .get(key)
                .is_none_or(|a| a.owner.as_ref() != Some(owner) || a.revision < revision),
            _ => false,
        })
        .map(|(key, _)| key.clone())
        .collect()
}

/// The identity each of `owned` is uninstalled as, for those a governing policy allows acting
/// on now. The others are never removed with the operator's own rights on the tenant's behalf:
/// they are reported once (when the resource would uninstall them) and left in place.
async fn removal_identities(
    ctx: &Context,
    c: &TenancyController,
    owner: &OwnerId,
    registered: &Registered,
    owned: &BTreeSet<ReleaseKey>,
) -> HashMap<ReleaseKey, Option<Impersonation>> {
    let admission = ctx.admission();
    let mut removal: HashMap<ReleaseKey, Option<Impersonation>> = HashMap::new();
    let mut refused: Vec<String> = Vec::new();
    for key in owned {
        match admission.identity_for_removal(
            &owner.namespace,
            key,
            registered.get(&key.scope.cluster),
        ) {
            Ok(identity) => {
                removal.insert(key.clone(), identity);
            }
            Err(why) => refused.push(format!("{key}: {why}")),
        }
    }
    if !refused.is_empty() && c.spec.deletion_policy == DeletionPolicy::Delete && !c.spec.suspend {
        let note = format!("releases left in place: {}", refused.join("; "));
        if ctx.kept.index.tell_once(owner, &note) {
            tracing::warn!(controller = %owner, releases = ?refused, "deleted, but no policy allows removing these releases; they are left in place");
            deletion_warning(ctx, c, "RemovalForbidden", note.clone()).await;
        }
    }
    removal
}

/// With no job running: a resource deleted while suspended, or with `deletionPolicy: Orphan`,
/// leaves its releases in place and says which. True when it did, so the finalizer can go.
async fn leave_in_place(
    ctx: &Context,
    c: &TenancyController,
    owner: &OwnerId,
    owned: &BTreeSet<ReleaseKey>,
    left: &[String],
) -> bool {
    if c.spec.suspend {
        let note = format!(
            "suspended: no Helm call is made, so its releases are left in place: {}",
            if left.is_empty() {
                "none".into()
            } else {
                left.join(", ")
            }
        );
        tracing::warn!(controller = %owner, releases = ?left, "deleted while suspended; its releases are left in place");
        deletion_warning(ctx, c, "Suspended", note).await;
        return true;
    }
    if c.spec.deletion_policy == DeletionPolicy::Orphan {
        let left: Vec<String> = owned.iter().map(ToString::to_string).collect();
        let note = if left.is_empty() {
            "deletionPolicy Orphan: no release to leave".to_owned()
        } else {
            format!(
                "deletionPolicy Orphan: releases left in place: {}",
                left.join(", ")
            )
        };
        tracing::warn!(controller = %owner, releases = ?left, "deleted with deletionPolicy Orphan; its releases are left in place");
        deletion_warning(ctx, c, "Orphaned", note).await;
        return true;
    }
    false
}

/// Registered clusters not synced yet that may hold the resource's releases: those the spec
/// targets, those its status lists, and those where its releases are known to be.
fn unreached(
    c: &TenancyController,
    registered: &Registered,
    owned: &BTreeSet<ReleaseKey>,
    synced: &BTreeSet<ClusterName>,
) -> Vec<ClusterName> {
    let mut holding: BTreeSet<ClusterName> = c
        .spec
        .tenancies
        .iter()
        .flat_map(|t| plan::targets(t, registered).0)
        .collect();
    holding.extend(owned.iter().map(|k| k.scope.cluster.clone()));
    holding.extend(
        c.status
            .iter()
            .flat_map(|s| &s.updated_tenancies)
            .filter_map(|t| t.cluster.parse::<ClusterName>().ok()),
    );
    holding
        .into_iter()
        .filter(|c| registered.contains_key(c) && !synced.contains(c))
        .collect()
}

/// A Warning Event of a deletion: what it leaves, and why.
async fn deletion_warning(ctx: &Context, c: &TenancyController, reason: &str, note: String) {
    publish(
        &ctx.out.events,
        c,
        EventType::Warning,
        reason,
        "Delete",
        note,
    )
    .await;
}

/// What a deletion waits for, in words: releases, running jobs, the `dependsOn` order, and
/// clusters with the time they were last seen.
fn describe_wait(
    ctx: &Context,
    owned: &BTreeSet<ReleaseKey>,
    running: &[ReleaseKey],
    unreached: &[ClusterName],
    ordered: &Held,
) -> String {
    let mut parts = Vec::new();
    if !owned.is_empty() {
        let list: Vec<String> = owned.iter().take(10).map(ToString::to_string).collect();
        parts.push(format!(
            "{} release(s) to be uninstalled ({}{})",
            owned.len(),
            list.join(", "),
            if owned.len() > 10 { ", …" } else { "" }
        ));
    }
    if !running.is_empty() {
        parts.push(format!("{} running Helm job(s)", running.len()));
    }
    if let Some((key, why)) = ordered.iter().next() {
        let more = match ordered.len() {
            1 => String::new(),
            n => format!(" ({} more release(s) wait likewise)", n - 1),
        };
        parts.push(format!("the dependsOn order: {key} is {why}{more}"));
    }
    if !unreached.is_empty() {
        let clusters: Vec<String> = unreached
            .iter()
            .map(
                |c| match ctx.members.health.get(c).and_then(|h| h.last_seen) {
                    Some(seen) => format!("{c} (unreachable, last seen {seen})"),
                    None => format!("{c} (not reached since the operator started)"),
                },
            )
            .collect();
        parts.push(format!(
            "clusters {} to be reached; if a cluster is gone for good, set spec.deletionPolicy: Orphan to let the resource go",
            clusters.join(", ")
        ));
    }
    format!("waiting for {}", parts.join(" and for "))
}

/// Forgets everything kept for a resource that is gone, or worked by another replica now.
pub(crate) fn forget(ctx: &Context, object: &ObjectRef<TenancyController>) {
    for gone in ctx
        .members
        .watches
        .set(object, BTreeSet::new(), &ctx.members.links)
    {
        ctx.members.model.forget(&gone);
    }
    ctx.out.writer.forget(object);
    ctx.kept.index.forget(object);
    ctx.kept.values.forget(object);
}
