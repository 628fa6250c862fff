//! Shards across replicas: Controllers split by a stable hash into N shards, each led through its own Lease, each replica leading its fair share.
//!
//! The unit is the `Controller`: one resource is one status writer and one rollout gate, so all
//! of its releases (on every cluster) are worked by the replica leading its shard. Claims between
//! Controllers are decided by one rule from the hub's resources and the clusters' release records,
//! which every replica reads alike, and a release held by one Controller is never planned by
//! another, so two shards never run helm on one release. Sharding by cluster instead would give a
//! Controller spanning clusters several status writers and split its rollout across replicas.
//!
//! Leases `<name>-shard-<i>-of-<n>` (the count in the name: replicas started with another count
//! never share a lease with these) and one Lease per replica, `<name>-replica-<identity>`, renewed
//! while it runs, by which replicas count each other. A replica takes a free or expired shard at
//! once while it leads fewer than its fair share (`ceil(n / live replicas)`), and one nobody took
//! for `patience` whatever it leads, so every shard has a leader while one replica runs; it gives
//! one up (after its Helm jobs finished) while it leads more than its share, so a replica that
//! joins gets work. A replica that cannot renew a shard's Lease stops every Helm process at once
//! and exits, as the single leader does.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    api::shard::Shards,
    runtime::leader::{Leadership, LeaseConfig, Observer, may_acquire},
};

/// How long a replica Lease of another replica may stay unchanged before it is deleted.
const STALE_REPLICA: Duration = Duration::from_secs(600);

/// The shards one of `live` replicas should lead: `ceil(shards / live)`.
pub(crate) fn fair_share(shards: u32, live: usize) -> usize {
    (shards as usize).div_ceil(live.max(1))
}

/// What a replica does next about shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Move {
    /// Try to take this free or expired shard.
    Take(u32),
    /// Give this one up: more than the fair share is led here.
    Release(u32),
    /// Nothing.
    Stay,
}

/// Decides one step: `held` shards led here, `free` shards with how long nobody has led them,
/// `live` replicas counted (this one included). One move per step, so other replicas see it.
pub(crate) fn decide(
    held: &BTreeSet<u32>,
    free: &BTreeMap<u32, Duration>,
    shards: u32,
    live: usize,
    patience: Duration,
) -> Move {
    let share = fair_share(shards, live);
    if held.len() > share {
        return held.last().map_or(Move::Stay, |s| Move::Release(*s));
    }
    let take = free
        .iter()
        .find(|(_, idle)| held.len() < share || **idle >= patience);
    take.map_or(Move::Stay, |(s, _)| Move::Take(*s))
}

/// The Lease of shard `i` of `n`, named after the operator's Lease.
pub(crate) fn shard_lease(base: &str, shard: u32, shards: u32) -> String {
    format!("{base}-shard-{shard}-of-{shards}")
}

/// The Lease by which a replica shows it runs: a DNS-1123 name from its identity.
fn replica_lease(base: &str, identity: &str) -> String {
    let clean: String = identity
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = format!("{base}-replica-{clean}");
    name.chars()
        .take(253)
        .collect::<String>()
        .trim_end_matches('-')
        .to_owned()
}

/// What the campaign tells the operator.
pub(crate) trait Steward: Send + Sync {
    /// A shard is led here now: its resources should be planned.
    fn gained(&self, shard: u32);
    /// A shard is being given up: stop its work, wait until none of its Helm jobs runs.
    fn drain(&self, shard: u32) -> impl Future<Output = ()> + Send;
}

/// Leads this replica's share of the shards until `cancel`; fires `lost` when a shard's Lease
/// could not be renewed (the caller must stop every Helm process and exit). On cancel, gives
/// every shard up (the caller has stopped its work first) and ends.
pub(crate) async fn campaign(
    client: kube::Client,
    base: LeaseConfig,
    shards: Arc<Shards>,
    steward: impl Steward,
    cancel: CancellationToken,
    lost: CancellationToken,
) -> Result<(), crate::runtime::leader::Error> {
    let mut campaign = Campaign {
        api: Api::namespaced(client.clone(), &base.namespace),
        me: replica_lease(&base.name, &base.identity),
        replica_prefix: format!("{}-replica-", base.name),
        client,
        base,
        observers: HashMap::new(),
        led: BTreeMap::new(),
    };
    let Some(presence) = campaign.announce(&cancel).await? else {
        return Ok(());
    };
    let absent = presence.lost();
    let mut ticker = tokio::time::interval(campaign.base.renew_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = cancel.cancelled() => break,
            () = absent.cancelled() => {
                lost.cancel();
                break;
            }
        }
        if campaign.led.values().any(|l| l.lost().is_cancelled()) {
            lost.cancel();
            break;
        }
        campaign.step(&shards, &steward).await;
    }
    for (shard, l) in std::mem::take(&mut campaign.led) {
        shards.set(shard, false);
        if !lost.is_cancelled()
            && let Err(error) = l.release().await
        {
            tracing::warn!(%error, shard, "could not release a shard Lease; it expires");
        }
    }
    if !lost.is_cancelled() {
        let _ = presence.release().await;
    }
    Ok(())
}

/// One replica's campaign: its Leases, what it saw of every Lease, and the shards it leads.
struct Campaign {
    client: kube::Client,
    api: Api<Lease>,
    base: LeaseConfig,
    /// This replica's own Lease.
    me: String,
    replica_prefix: String,
    observers: HashMap<String, Observer>,
    led: BTreeMap<u32, Leadership>,
}

impl Campaign {
    /// Takes this replica's own Lease (unique to this process: taken at once, renewed from then
    /// on); None when shutdown came first.
    async fn announce(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Leadership>, crate::runtime::leader::Error> {
        loop {
            let config = LeaseConfig {
                name: self.me.clone(),
                ..self.base.clone()
            };
            let observer = self.observers.entry(self.me.clone()).or_default();
            match Leadership::try_take(self.client.clone(), config, observer).await {
                Ok(Some(l)) => return Ok(Some(l)),
                Ok(None) => {}
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => tracing::warn!(error = %e, "could not announce this replica; retrying"),
            }
            tokio::select! {
                () = tokio::time::sleep(self.base.renew_every) => {}
                () = cancel.cancelled() => return Ok(None),
            }
        }
    }

    /// One round: reads every Lease, prunes stale replicas, counts the live ones, and takes or
    /// gives up one shard toward a fair share.
    async fn step(&mut self, shards: &Shards, steward: &impl Steward) {
        let leases = match self.api.list(&Default::default()).await {
            Ok(list) => list.items,
            Err(error) => {
                tracing::warn!(%error, "could not list the shard Leases; trying again");
                return;
            }
        };
        let now = Instant::now();
        let by_name: HashMap<String, Lease> = leases
            .into_iter()
            .filter_map(|l| Some((l.metadata.name.clone()?, l)))
            .collect();
        for (name, lease) in &by_name {
            if name.starts_with(&self.replica_prefix) || name.contains("-shard-") {
                self.observers
                    .entry(name.clone())
                    .or_default()
                    .observe(lease.spec.as_ref(), now);
            }
        }
        self.prune_stale_replicas(&by_name, now).await;
        let live = self.live_replicas(&by_name, now);
        let total = shards.total();
        let free = self.free_shards(&by_name, total, now);
        let held: BTreeSet<u32> = self.led.keys().copied().collect();
        match decide(&held, &free, total, live, self.base.lease_duration) {
            Move::Stay => {}
            Move::Take(shard) => self.take(shard, total, live, shards, steward).await,
            Move::Release(shard) => self.give_up(shard, total, live, shards, steward).await,
        }
    }

    /// Replicas that ended without releasing (killed, their pod gone) leave their Lease behind:
    /// one unchanged this long is deleted, so restarts do not pile them up.
    async fn prune_stale_replicas(&self, by_name: &HashMap<String, Lease>, now: Instant) {
        for name in by_name
            .keys()
            .filter(|n| n.starts_with(&self.replica_prefix) && **n != self.me)
        {
            let stale = self.observers[name]
                .unchanged_for(now)
                .is_some_and(|d| d >= STALE_REPLICA);
            if stale && let Err(error) = self.api.delete(name, &Default::default()).await {
                tracing::debug!(%error, lease = %name, "could not delete a stale replica Lease");
            }
        }
    }

    /// Replicas alive now, this one included: their Lease held and not expired.
    fn live_replicas(&self, by_name: &HashMap<String, Lease>, now: Instant) -> usize {
        1 + by_name
            .keys()
            .filter(|n| n.starts_with(&self.replica_prefix) && **n != self.me)
            .filter(|n| {
                let fresh = by_name[*n]
                    .spec
                    .as_ref()
                    .is_some_and(|s| s.holder_identity.as_deref().is_some_and(|h| !h.is_empty()));
                fresh && !self.observers[*n].expired(now, self.base.lease_duration)
            })
            .count()
    }

    /// The shards not led here that may be taken, with how long each has been idle.
    fn free_shards(
        &mut self,
        by_name: &HashMap<String, Lease>,
        total: u32,
        now: Instant,
    ) -> BTreeMap<u32, Duration> {
        let mut free = BTreeMap::new();
        for shard in (0..total).filter(|s| !self.led.contains_key(s)) {
            let name = shard_lease(&self.base.name, shard, total);
            let spec = by_name.get(&name).and_then(|l| l.spec.as_ref());
            let observer = self.observers.entry(name).or_default();
            if spec.is_none() {
                observer.observe(None, now);
            }
            let base = &self.base;
            if may_acquire(spec, &base.identity, observer, now, base.lease_duration) {
                let unheld =
                    spec.is_none_or(|s| s.holder_identity.as_deref().unwrap_or("").is_empty());
                let unchanged = observer.unchanged_for(now).unwrap_or_default();
                let idle = if unheld {
                    unchanged
                } else {
                    unchanged.saturating_sub(base.lease_duration)
                };
                free.insert(shard, idle);
            }
        }
        free
    }

    /// Tries to take one shard's Lease; on success the shard is led here and its work starts.
    async fn take(
        &mut self,
        shard: u32,
        total: u32,
        live: usize,
        shards: &Shards,
        steward: &impl Steward,
    ) {
        let name = shard_lease(&self.base.name, shard, total);
        let config = LeaseConfig {
            name: name.clone(),
            ..self.base.clone()
        };
        let observer = self.observers.entry(name).or_default();
        match Leadership::try_take(self.client.clone(), config, observer).await {
            Ok(Some(l)) => {
                tracing::info!(
                    shard,
                    shards = total,
                    live,
                    "leading shard {shard} of {total}"
                );
                self.led.insert(shard, l);
                shards.set(shard, true);
                steward.gained(shard);
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, shard, "could not take a shard Lease"),
        }
    }

    /// Gives one shard up: its work is drained first, then its Lease released.
    async fn give_up(
        &mut self,
        shard: u32,
        total: u32,
        live: usize,
        shards: &Shards,
        steward: &impl Steward,
    ) {
        tracing::info!(
            shard,
            shards = total,
            live,
            "giving shard {shard} up: more than a fair share of {} is led here",
            fair_share(total, live)
        );
        shards.set(shard, false);
        steward.drain(shard).await;
        if let Some(l) = self.led.remove(&shard)
            && let Err(error) = l.release().await
        {
            tracing::warn!(%error, shard, "could not release a shard Lease; it expires");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &[u32]) -> BTreeSet<u32> {
        s.iter().copied().collect()
    }

    fn free(s: &[(u32, u64)]) -> BTreeMap<u32, Duration> {
        s.iter()
            .map(|(k, v)| (*k, Duration::from_secs(*v)))
            .collect()
    }

    const PATIENCE: Duration = Duration::from_secs(10);

    #[test]
    fn the_fair_share_rounds_up_so_every_shard_is_led() {
        assert_eq!(fair_share(3, 3), 1);
        assert_eq!(fair_share(3, 2), 2);
        assert_eq!(fair_share(3, 1), 3);
        assert_eq!(fair_share(3, 0), 3);
        assert_eq!(fair_share(2, 5), 1);
    }

    #[test]
    fn a_replica_below_its_share_takes_a_free_shard_at_once() {
        assert_eq!(
            decide(&set(&[]), &free(&[(1, 0), (2, 0)]), 3, 3, PATIENCE),
            Move::Take(1)
        );
    }

    #[test]
    fn a_replica_at_its_share_takes_a_shard_only_once_nobody_did_for_a_while() {
        let held = set(&[0]);
        assert_eq!(decide(&held, &free(&[(2, 3)]), 3, 3, PATIENCE), Move::Stay);
        assert_eq!(
            decide(&held, &free(&[(2, 10)]), 3, 3, PATIENCE),
            Move::Take(2),
            "a dead replica's shard is led by someone within the patience"
        );
    }

    #[test]
    fn a_replica_above_its_share_gives_its_highest_shard_up() {
        assert_eq!(
            decide(&set(&[0, 1, 2]), &free(&[]), 3, 1, PATIENCE),
            Move::Stay,
            "alone, it leads them all"
        );
        assert_eq!(
            decide(&set(&[0, 1]), &free(&[]), 3, 2, PATIENCE),
            Move::Stay,
            "two replicas: two shards each at most"
        );
        assert_eq!(
            decide(&set(&[0, 1, 2]), &free(&[]), 3, 2, PATIENCE),
            Move::Release(2)
        );
        assert_eq!(
            decide(&set(&[0, 1, 2]), &free(&[]), 3, 3, PATIENCE),
            Move::Release(2)
        );
    }

    #[test]
    fn a_lone_replica_leads_every_shard() {
        let mut held = set(&[]);
        let mut idle = free(&[(0, 0), (1, 0), (2, 0)]);
        while let Move::Take(s) = decide(&held, &idle, 3, 1, PATIENCE) {
            held.insert(s);
            idle.remove(&s);
        }
        assert_eq!(held, set(&[0, 1, 2]));
    }

    #[test]
    fn replica_lease_names_are_dns_names() {
        assert_eq!(
            replica_lease("tenancy-hub", "Host_1.example-42"),
            "tenancy-hub-replica-host-1-example-42"
        );
        assert_eq!(shard_lease("tenancy-hub", 2, 3), "tenancy-hub-shard-2-of-3");
    }
}
