//! The turns of the fair queue: tenants, the owners of one tenant, and the clusters of one owner taking turns.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use crate::{
    api::key::{ClusterName, ReleaseKey},
    plan::{Job, OwnerId},
};

/// The priority class a job waits in within its owner: 0 for uninstalls, which go before the owner's other jobs.
pub(crate) fn priority_of(job: &Job) -> usize {
    match job {
        Job::Uninstall { .. } => 0,
        Job::Apply { .. } | Job::Rollback { .. } => 1,
    }
}

/// The ready jobs of one owner and priority, in one line per cluster, the clusters taking turns.
#[derive(Debug, Default)]
pub(crate) struct ClusterTurns {
    /// Ready keys per cluster, in line order; a cluster has a line (maybe emptied) while it is in `turns`.
    pub(crate) lines: HashMap<ClusterName, BTreeMap<u64, ReleaseKey>>,
    /// Clusters in turn order; the one served goes to the back.
    pub(crate) turns: VecDeque<ClusterName>,
    /// Ready jobs in all lines.
    pub(crate) ready: usize,
}

impl ClusterTurns {
    pub(crate) fn insert(&mut self, seq: u64, key: ReleaseKey) {
        let cluster = &key.scope.cluster;
        if !self.lines.contains_key(cluster) {
            self.lines.insert(cluster.clone(), BTreeMap::new());
            self.turns.push_back(cluster.clone());
        }
        self.lines
            .get_mut(cluster)
            .expect("inserted above")
            .insert(seq, key);
        self.ready += 1;
    }

    pub(crate) fn remove(&mut self, seq: u64, key: &ReleaseKey) {
        let line = self.lines.get_mut(&key.scope.cluster);
        if line.and_then(|line| line.remove(&seq)).is_some() {
            self.ready -= 1;
        }
    }

    /// Takes the first job of the first cluster in turn that `room` admits; that cluster goes to
    /// the back. Emptied lines met on the way are dropped.
    pub(crate) fn pick(&mut self, room: impl Fn(&ClusterName) -> bool) -> Option<ReleaseKey> {
        let mut i = 0;
        while let Some(cluster) = self.turns.get(i) {
            let line = self
                .lines
                .get_mut(cluster)
                .expect("a cluster in turn has a line");
            if line.is_empty() {
                self.lines.remove(cluster);
                self.turns.remove(i);
                continue;
            }
            if !room(cluster) {
                i += 1;
                continue;
            }
            let (_, key) = line.pop_first().expect("the line is not empty");
            self.ready -= 1;
            let emptied = line.is_empty();
            let cluster = self.turns.remove(i).expect("in range");
            if emptied {
                self.lines.remove(&cluster);
            } else {
                self.turns.push_back(cluster);
            }
            return Some(key);
        }
        None
    }
}

/// One owner's share of the queue.
#[derive(Debug, Default)]
pub(crate) struct OwnerQueue {
    /// Uninstalls, then installs, upgrades and rollbacks.
    pub(crate) priorities: [ClusterTurns; 2],
    /// Every waiting key of the owner, in any slot.
    pub(crate) waiting: HashSet<ReleaseKey>,
    /// Its jobs running now.
    pub(crate) running: usize,
    /// Whether it is in `State::turns`.
    pub(crate) in_turn: bool,
}

impl OwnerQueue {
    pub(crate) fn ready(&self) -> usize {
        self.priorities.iter().map(|l| l.ready).sum()
    }

    pub(crate) fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running == 0 && !self.in_turn
    }
}

/// One tenant's share of the queue: the hub namespace's owners with ready jobs, taking turns.
#[derive(Debug, Default)]
pub(crate) struct TenantQueue {
    /// Its owners with ready jobs, in turn order.
    pub(crate) turns: Turns<OwnerId>,
    /// Its jobs running now.
    pub(crate) running: usize,
    /// Whether it is in `State::turns`.
    pub(crate) in_turn: bool,
}

impl TenantQueue {
    pub(crate) fn idle(&self) -> bool {
        self.turns.is_empty() && self.running == 0 && !self.in_turn
    }

    /// Takes the next job of the first owner in turn that is under its cap and has a job `room`
    /// admits; that owner goes to the back. Owners met on the way with nothing ready are
    /// dropped from the turns (and forgotten when idle).
    pub(crate) fn pick(
        &mut self,
        owners: &mut HashMap<OwnerId, OwnerQueue>,
        per_owner: usize,
        room: impl Fn(&ClusterName) -> bool,
    ) -> Option<ReleaseKey> {
        let mut i = 0;
        loop {
            let id = self.turns.get(i)?;
            let owner = owners.get_mut(id).expect("an owner in turn is known");
            if owner.ready() == 0 {
                owner.in_turn = false;
                let id = self.turns.remove(i).expect("in range");
                if owners.get(&id).is_some_and(OwnerQueue::idle) {
                    owners.remove(&id);
                }
                continue;
            }
            if per_owner > 0 && owner.running >= per_owner {
                i += 1;
                continue;
            }
            let Some(key) = owner
                .priorities
                .iter_mut()
                .find_map(|priority| priority.pick(&room))
            else {
                i += 1;
                continue;
            };
            let id = self.turns.remove(i).expect("in range");
            if owner.ready() > 0 {
                self.turns.served.push_back(id);
            } else {
                owner.in_turn = false;
            }
            return Some(key);
        }
    }
}

/// the second list. A newly active tenant or owner thus starts its first job on the next free
/// worker, as a new flow goes first in FQ-CoDel, and then takes its turn like the others; it can
/// jump the line again only after all its ready jobs have started.
#[derive(Debug)]
pub(crate) struct Turns<T> {
    pub(crate) fresh: VecDeque<T>,
    pub(crate) served: VecDeque<T>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            fresh: VecDeque::new(),
            served: VecDeque::new(),
        }
    }
}

impl<T: PartialEq> Turns<T> {
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.fresh
            .get(i)
            .or_else(|| self.served.get(i - self.fresh.len()))
    }

    pub(crate) fn remove(&mut self, i: usize) -> Option<T> {
        if i < self.fresh.len() {
            self.fresh.remove(i)
        } else {
            self.served.remove(i - self.fresh.len())
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.fresh.is_empty() && self.served.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, item: &T) -> bool {
        self.fresh.contains(item) || self.served.contains(item)
    }
}

/// Adds a ready job to its owner's priority class, the owner to its tenant's turns and the tenant to the
/// turns, each unless it is there.
pub(crate) fn make_ready(
    owners: &mut HashMap<OwnerId, OwnerQueue>,
    tenants: &mut HashMap<String, TenantQueue>,
    turns: &mut Turns<String>,
    job: &Job,
    seq: u64,
) {
    let owner = owners.entry(job.owner().clone()).or_default();
    owner.priorities[priority_of(job)].insert(seq, job.key().clone());
    if owner.in_turn {
        return;
    }
    owner.in_turn = true;
    let name = &job.owner().namespace;
    let tenant = tenants.entry(name.clone()).or_default();
    tenant.turns.fresh.push_back(job.owner().clone());
    if !tenant.in_turn {
        tenant.in_turn = true;
        turns.fresh.push_back(name.clone());
    }
}
