//! Which Controllers this replica works: the shard of each, by a stable hash, and the shards led here (shard 0's leader also does the hub's own work: enrolling pull members).

use std::{collections::BTreeSet, sync::RwLock};

use sha2::{Digest, Sha256};

/// The shard of a `Controller`, by a hash of `namespace/name` that every replica and version
/// computes alike.
pub fn shard_of(namespace: &str, name: &str, shards: u32) -> u32 {
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(head) % u64::from(shards.max(1))) as u32
}

/// The shards this replica leads, and whether a resource is its to work.
#[derive(Debug)]
pub(crate) struct Shards {
    total: u32,
    led: RwLock<BTreeSet<u32>>,
    /// Ticks each time the shards led here change.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Shards {
    /// One shard, led here: no sharding.
    fn default() -> Self {
        Self::led_here(1, [0])
    }
}

impl Shards {
    /// `total` shards of which `led` are led here.
    pub(crate) fn led_here(total: u32, led: impl IntoIterator<Item = u32>) -> Self {
        Self {
            total: total.max(1),
            led: RwLock::new(led.into_iter().collect()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// `total` shards, none led here yet.
    pub(crate) fn none_of(total: u32) -> Self {
        Self::led_here(total, [])
    }

    /// The number of shards.
    pub(crate) fn total(&self) -> u32 {
        self.total
    }

    /// The shards led here now.
    pub(crate) fn led(&self) -> BTreeSet<u32> {
        self.led.read().expect("shards lock").clone()
    }

    /// True when the resource `namespace/name` belongs to a shard led here.
    pub(crate) fn owns(&self, namespace: &str, name: &str) -> bool {
        let shard = shard_of(namespace, name, self.total);
        self.led.read().expect("shards lock").contains(&shard)
    }

    /// True when the work of the hub as a whole (enrolling pull members, writing their status)
    /// is done here: by the replica leading shard 0, so by one replica however many run.
    pub(crate) fn leads_the_hub(&self) -> bool {
        self.led.read().expect("shards lock").contains(&0)
    }

    /// Ticks each time the shards led here change.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Notes that a shard is led here now, or no longer.
    pub(crate) fn set(&self, shard: u32, led: bool) {
        let mut all = self.led.write().expect("shards lock");
        let changed = if led {
            all.insert(shard)
        } else {
            all.remove(&shard)
        };
        drop(all);
        if changed {
            self.changed.send_modify(|n| *n += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_always_falls_in_the_same_shard_and_shards_spread() {
        assert_eq!(shard_of("team-a", "shop", 3), shard_of("team-a", "shop", 3));
        assert_eq!(shard_of("team-a", "shop", 1), 0);
        let mut counts = [0; 3];
        for i in 0..300 {
            counts[shard_of("ns", &format!("c{i}"), 3) as usize] += 1;
        }
        assert!(counts.iter().all(|c| *c > 70), "{counts:?}");
    }

    #[test]
    fn without_sharding_every_resource_is_worked_here() {
        let all = Shards::default();
        assert!(all.owns("a", "b") && all.owns("c", "d"));
        let some = Shards::none_of(2);
        assert!(!some.owns("a", "b"));
        some.set(shard_of("a", "b", 2), true);
        assert!(some.owns("a", "b"));
    }

    #[test]
    fn the_hub_work_is_done_by_shard_zeros_leader_and_a_change_of_shards_ticks() {
        assert!(Shards::default().leads_the_hub(), "one replica does it all");
        let shards = Shards::none_of(2);
        let mut changed = shards.subscribe();
        assert!(!shards.leads_the_hub());
        shards.set(1, true);
        assert!(changed.has_changed().unwrap());
        changed.borrow_and_update();
        assert!(!shards.leads_the_hub(), "shard 1 is not the hub's");
        shards.set(1, true);
        assert!(!changed.has_changed().unwrap(), "nothing changed, no tick");
        shards.set(0, true);
        assert!(shards.leads_the_hub() && changed.has_changed().unwrap());
        shards.set(0, false);
        assert!(!shards.leads_the_hub());
    }
}
