//! What one tenant's Alerts may take of what all share: Alerts followed per hub namespace (the first [`ALERTS_PER_NAMESPACE`] by age), and slots of a shared pool of which one hub namespace holds only a few, so a slow receiver or a flood of Alerts of one tenant never starves another (pure).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt as _;

use crate::api::alert::Alert;

/// Alerts of one hub namespace the operator follows; later ones are refused (`TooManyAlerts`).
pub(crate) const ALERTS_PER_NAMESPACE: usize = 100;

/// The place of `alert` among the Alerts of its namespace in `all`, oldest first (then by
/// name), and how many there are; None when it is not among them.
pub(crate) fn rank(all: &[Arc<Alert>], alert: &Alert) -> Option<(usize, usize)> {
    let namespace = alert.namespace();
    let key = |a: &Alert| {
        let created = a.metadata.creation_timestamp.clone().map(|Time(t)| t);
        (created, a.name_any())
    };
    let mut same: Vec<_> = all
        .iter()
        .filter(|a| a.namespace() == namespace)
        .map(|a| key(a))
        .collect();
    same.sort();
    let place = same.binary_search(&key(alert)).ok()?;
    Some((place, same.len()))
}

/// The Alert of `namespace` in `all` last among those followed, when the namespace holds at
/// least [`ALERTS_PER_NAMESPACE`]: after a deletion there, the one it let in.
pub(crate) fn newly_followed(all: &[Arc<Alert>], namespace: &str) -> Option<Arc<Alert>> {
    let mut same: Vec<&Arc<Alert>> = all
        .iter()
        .filter(|a| a.namespace().as_deref() == Some(namespace))
        .collect();
    if same.len() < ALERTS_PER_NAMESPACE {
        return None;
    }
    same.sort_by_key(|a| {
        (
            a.metadata.creation_timestamp.clone().map(|Time(t)| t),
            a.name_any(),
        )
    });
    Some(same[ALERTS_PER_NAMESPACE - 1].clone())
}

/// The Alerts of `all` past the first [`ALERTS_PER_NAMESPACE`] of their namespace.
pub(crate) fn over_cap(all: &[Arc<Alert>]) -> std::collections::HashSet<(String, String)> {
    let mut by_namespace: HashMap<String, Vec<&Arc<Alert>>> = HashMap::new();
    for a in all {
        by_namespace
            .entry(a.namespace().unwrap_or_default())
            .or_default()
            .push(a);
    }
    let mut over = std::collections::HashSet::new();
    for (namespace, mut alerts) in by_namespace {
        if alerts.len() <= ALERTS_PER_NAMESPACE {
            continue;
        }
        alerts.sort_by_key(|a| {
            (
                a.metadata.creation_timestamp.clone().map(|Time(t)| t),
                a.name_any(),
            )
        });
        over.extend(
            alerts[ALERTS_PER_NAMESPACE..]
                .iter()
                .map(|a| (namespace.clone(), a.name_any())),
        );
    }
    over
}

/// A shared pool of `total` slots of which one tenant (hub namespace) holds at most
/// `per_tenant` at once.
#[derive(Debug)]
pub(crate) struct TenantSlots {
    total: usize,
    per_tenant: usize,
    held: Mutex<(usize, HashMap<String, usize>)>,
}

/// One slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    pool: Arc<TenantSlots>,
    tenant: String,
}

impl TenantSlots {
    /// A pool of `total` slots, `per_tenant` at most for one tenant.
    pub(crate) fn new(total: usize, per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_tenant,
            held: Mutex::new((0, HashMap::new())),
        })
    }

    /// A slot for `tenant`, or why there is none: the tenant holds its share, or the pool is
    /// full.
    pub(crate) fn take(self: &Arc<Self>, tenant: &str) -> Result<Slot, Full> {
        let mut held = self.held.lock().expect("tenant slots lock");
        let (all, per) = &mut *held;
        let mine = per.get(tenant).copied().unwrap_or(0);
        if mine >= self.per_tenant {
            return Err(Full::Tenant);
        }
        if *all >= self.total {
            return Err(Full::Pool);
        }
        *all += 1;
        per.insert(tenant.to_owned(), mine + 1);
        Ok(Slot {
            pool: self.clone(),
            tenant: tenant.to_owned(),
        })
    }

    /// Slots held now by `tenant`, and by everyone.
    #[cfg(test)]
    pub(crate) fn held(&self, tenant: &str) -> (usize, usize) {
        let held = self.held.lock().expect("tenant slots lock");
        (held.1.get(tenant).copied().unwrap_or(0), held.0)
    }
}

/// Why no slot was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// The tenant holds its share.
    Tenant,
    /// Every slot is held.
    Pool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.pool.held.lock().expect("tenant slots lock");
        let (all, per) = &mut *held;
        *all -= 1;
        if let Some(n) = per.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_tenant_holds_its_share_and_the_others_still_get_slots() {
        let pool = TenantSlots::new(6, 2);
        let a: Vec<Slot> = (0..2).map(|_| pool.take("team-a").unwrap()).collect();
        assert_eq!(pool.take("team-a").unwrap_err(), Full::Tenant);
        let b1 = pool.take("team-b").unwrap();
        let b2 = pool.take("team-b").unwrap();
        let c1 = pool.take("team-c").unwrap();
        let c2 = pool.take("team-c").unwrap();
        assert_eq!(pool.take("team-d").unwrap_err(), Full::Pool);
        assert_eq!(pool.held("team-b"), (2, 6));
        drop(b1);
        assert_eq!(pool.held("team-b"), (1, 5));
        assert!(
            pool.take("team-d").is_ok(),
            "a slot given back is free again"
        );
        drop((a, b2, c1, c2));
        assert_eq!(pool.held("team-a"), (0, 0));
        assert!(pool.take("team-a").is_ok());
    }

    fn alert(namespace: &str, name: &str, second: i64) -> Arc<Alert> {
        let mut a = Alert::new(name, Default::default());
        a.metadata.namespace = Some(namespace.into());
        a.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(second).unwrap(),
        ));
        Arc::new(a)
    }

    #[test]
    fn the_oldest_alerts_of_a_namespace_are_followed_and_the_rest_are_over_the_cap() {
        let mut all: Vec<Arc<Alert>> = (0..ALERTS_PER_NAMESPACE + 3)
            .map(|i| alert("team-a", &format!("a-{i:04}"), 1000 + i as i64))
            .collect();
        all.push(alert("team-b", "b", 0));
        let over = over_cap(&all);
        assert_eq!(over.len(), 3);
        for i in 0..3 {
            let name = format!("a-{:04}", ALERTS_PER_NAMESPACE + i);
            assert!(
                over.contains(&("team-a".into(), name)),
                "the newest are over"
            );
        }
        assert_eq!(rank(&all, &all[0]), Some((0, ALERTS_PER_NAMESPACE + 3)));
        assert_eq!(rank(&all, all.last().unwrap()), Some((0, 1)));
        let tie = [alert("team-c", "y", 5), alert("team-c", "x", 5)];
        assert_eq!(rank(&tie, &tie[1]), Some((0, 2)), "one second: by name");
    }

    #[test]
    fn a_deletion_in_a_namespace_over_the_cap_lets_the_oldest_refused_one_in() {
        let mut all: Vec<Arc<Alert>> = (0..ALERTS_PER_NAMESPACE + 2)
            .map(|i| alert("team-a", &format!("a-{i:04}"), 1000 + i as i64))
            .collect();
        all.remove(7);
        let next = newly_followed(&all, "team-a").unwrap();
        assert_eq!(next.name_any(), format!("a-{ALERTS_PER_NAMESPACE:04}"));
        assert!(!over_cap(&all).contains(&("team-a".into(), next.name_any())));
        all.truncate(ALERTS_PER_NAMESPACE - 1);
        assert!(newly_followed(&all, "team-a").is_none(), "under the cap");
        assert!(newly_followed(&all, "team-b").is_none());
    }
}
