//! The queue's state machine: placing, starting, finishing and retrying jobs, free of any runtime so it is tested with explicit instants.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    ops::Bound,
    time::Duration,
};

use tokio::time::Instant;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    plan::{Job, OwnerId, remediation::Budget},
    queue::turns::{OwnerQueue, TenantQueue, Turns, make_ready, priority_of},
    queue::{Enqueued, FailureKind, Outcome, QueueConfig},
};

/// The backoff step a job waiting for an unreachable cluster pauses for (2^5 × the base, capped).
pub(crate) const UNAVAILABLE_BACKOFF_STEP: u32 = 6;

/// What became of a finished job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Nothing more to do.
    Done,
    /// Queued again, to run after this delay.
    Retry(Duration),
    /// Failed transiently as often as allowed; not tried again until the spec changes.
    Stalled,
}

/// Where a waiting job is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Eligible: in its owner's priority class, in its cluster's line.
    Ready,
    /// Waiting out a backoff, in the timers.
    Backoff,
    /// A job for its key is running; it is placed when that job finishes.
    Parked,
}

/// A job waiting its turn.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) job: Job,
    pub(crate) fingerprint: String,
    /// Tries made so far.
    pub(crate) attempts: u32,
    pub(crate) not_before: Instant,
    /// Its place in line: among the ready jobs of one priority and cluster, the smallest starts first.
    pub(crate) seq: u64,
    pub(crate) slot: Slot,
}

/// The queue's bookkeeping, free of any runtime so it is tested with explicit instants.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) config: QueueConfig,
    /// Every waiting job, by key.
    pub(crate) waiting: HashMap<ReleaseKey, Waiting>,
    /// The owners with jobs waiting or running.
    pub(crate) owners: HashMap<OwnerId, OwnerQueue>,
    /// The tenants (hub namespaces) with owners in turn or jobs running.
    pub(crate) tenants: HashMap<String, TenantQueue>,
    /// Tenants with ready jobs, in turn order.
    pub(crate) turns: Turns<String>,
    /// Backing-off jobs by the instant they become eligible (and their `seq`).
    pub(crate) timers: BTreeMap<(Instant, u64), ReleaseKey>,
    /// Backing-off jobs by cluster, for `expedite`.
    pub(crate) backing_off: HashMap<ClusterName, HashSet<ReleaseKey>>,
    /// Fingerprints and owners of the running jobs, by key.
    pub(crate) running: HashMap<ReleaseKey, (String, OwnerId)>,
    /// Jobs running per cluster (clusters with none are left out).
    pub(crate) running_per_cluster: HashMap<ClusterName, usize>,
    /// The running jobs handed over to a member that answers later: their keys stay busy and
    /// their cluster's count taken, but they hold no worker and count toward no owner's or
    /// tenant's cap.
    pub(crate) awaiting: HashSet<ReleaseKey>,
    /// The last `seq` given out.
    pub(crate) last_seq: u64,
}

/// Tenants, or the owners of one tenant, with ready jobs in turn order: those that just got
/// some (they have had no turn since), then those served before. One served goes to the back of
impl State {
    pub(crate) fn new(config: QueueConfig) -> Self {
        Self {
            config,
            waiting: HashMap::new(),
            owners: HashMap::new(),
            tenants: HashMap::new(),
            turns: Turns::default(),
            timers: BTreeMap::new(),
            backing_off: HashMap::new(),
            running: HashMap::new(),
            running_per_cluster: HashMap::new(),
            awaiting: HashSet::new(),
            last_seq: 0,
        }
    }

    pub(crate) fn next_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    /// Files `w` where it belongs at `now`: behind a running job of its key, among the backing-off
    /// jobs, or in its owner's priority.
    pub(crate) fn place(&mut self, mut w: Waiting, now: Instant) {
        let key = w.job.key().clone();
        self.owners
            .entry(w.job.owner().clone())
            .or_default()
            .waiting
            .insert(key.clone());
        w.slot = if self.running.contains_key(&key) {
            Slot::Parked
        } else if w.not_before > now {
            Slot::Backoff
        } else {
            Slot::Ready
        };
        match w.slot {
            Slot::Parked => {}
            Slot::Backoff => {
                self.timers.insert((w.not_before, w.seq), key.clone());
                self.backing_off
                    .entry(key.scope.cluster.clone())
                    .or_default()
                    .insert(key.clone());
            }
            Slot::Ready => make_ready(
                &mut self.owners,
                &mut self.tenants,
                &mut self.turns,
                &w.job,
                w.seq,
            ),
        }
        self.waiting.insert(key, w);
    }

    /// Takes the waiting job of `key` out of every index.
    pub(crate) fn detach(&mut self, key: &ReleaseKey) -> Option<Waiting> {
        let w = self.waiting.remove(key)?;
        match w.slot {
            Slot::Ready => {
                if let Some(owner) = self.owners.get_mut(w.job.owner()) {
                    owner.priorities[priority_of(&w.job)].remove(w.seq, key);
                }
            }
            Slot::Backoff => {
                self.timers.remove(&(w.not_before, w.seq));
                self.stop_backing_off(key);
            }
            Slot::Parked => {}
        }
        if let Some(owner) = self.owners.get_mut(w.job.owner()) {
            owner.waiting.remove(key);
        }
        self.tidy(w.job.owner());
        Some(w)
    }

    pub(crate) fn stop_backing_off(&mut self, key: &ReleaseKey) {
        let cluster = &key.scope.cluster;
        if let Some(keys) = self.backing_off.get_mut(cluster) {
            keys.remove(key);
            if keys.is_empty() {
                self.backing_off.remove(cluster);
            }
        }
    }

    /// Forgets an owner with nothing waiting or running.
    pub(crate) fn tidy(&mut self, owner: &OwnerId) {
        if self.owners.get(owner).is_some_and(OwnerQueue::idle) {
            self.owners.remove(owner);
        }
        self.tidy_tenant(&owner.namespace);
    }

    /// Forgets a tenant with no owner in turn and nothing running.
    pub(crate) fn tidy_tenant(&mut self, tenant: &str) {
        if self.tenants.get(tenant).is_some_and(TenantQueue::idle) {
            self.tenants.remove(tenant);
        }
    }

    /// Moves the backing-off jobs due at `now` into their priorities.
    pub(crate) fn promote_due(&mut self, now: Instant) {
        while let Some(timer) = self.timers.first_entry() {
            if timer.key().0 > now {
                break;
            }
            let key = timer.remove();
            self.stop_backing_off(&key);
            self.make_ready(&key);
        }
    }

    /// Files the waiting job of `key`, out of its backoff, among the ready jobs.
    pub(crate) fn make_ready(&mut self, key: &ReleaseKey) {
        let w = self
            .waiting
            .get_mut(key)
            .expect("a backing-off key has its waiting job");
        w.slot = Slot::Ready;
        make_ready(
            &mut self.owners,
            &mut self.tenants,
            &mut self.turns,
            &w.job,
            w.seq,
        );
    }

    /// Makes every waiting job of `cluster` eligible at once.
    pub(crate) fn expedite(&mut self, cluster: &ClusterName, now: Instant) -> usize {
        let mut count = 0;
        for key in self.backing_off.remove(cluster).unwrap_or_default() {
            let w = self
                .waiting
                .get_mut(&key)
                .expect("a backing-off key has its waiting job");
            self.timers.remove(&(w.not_before, w.seq));
            if w.not_before > now {
                w.not_before = now;
                count += 1;
            }
            self.make_ready(&key);
        }
        count
    }

    pub(crate) fn enqueue(&mut self, job: Job, now: Instant) -> Enqueued {
        let fingerprint = job.fingerprint();
        if self.running.get(job.key()).map(|r| &r.0) == Some(&fingerprint) {
            // The running job already heads for this state; a different queued one is stale.
            self.detach(job.key());
            return Enqueued::AlreadyRunning;
        }
        let (seq, enqueued) = match self.waiting.get(job.key()) {
            Some(w) if w.fingerprint == fingerprint => return Enqueued::AlreadyQueued,
            // It keeps the place in line of the job it replaces.
            Some(w) => (w.seq, Enqueued::Replaced),
            None => (self.next_seq(), Enqueued::Added),
        };
        self.detach(job.key());
        let entry = Waiting {
            job,
            fingerprint,
            attempts: 0,
            not_before: now,
            seq,
            slot: Slot::Ready,
        };
        self.place(entry, now);
        enqueued
    }

    /// Starts the next job by turn, and marks it running: the job, its try number, and how long it
    /// waited once eligible. Tenants with ready jobs take turns, one job each (see [`Turns`]); a
    /// tenant at its cap is passed over; within a tenant its owners take turns the same way, an
    /// owner at its cap passed over; within an owner, uninstalls go first and its clusters take
    /// turns; a cluster at its cap is passed over.
    pub(crate) fn start_next(&mut self, now: Instant) -> Option<(Job, u32, Duration)> {
        self.promote_due(now);
        if self.running.len() - self.awaiting.len() >= self.config.workers {
            return None;
        }
        let config = &self.config;
        let running_per_cluster = &self.running_per_cluster;
        let room =
            |c: &ClusterName| running_per_cluster.get(c).copied().unwrap_or(0) < config.per_cluster;
        let mut i = 0;
        let key = loop {
            let name = self.turns.get(i)?;
            let tenant = self
                .tenants
                .get_mut(name)
                .expect("a tenant in turn is known");
            if config.per_tenant > 0 && tenant.running >= config.per_tenant {
                i += 1;
                continue;
            }
            let picked = tenant.pick(&mut self.owners, config.per_owner, room);
            if picked.is_some() {
                tenant.running += 1;
            } else if !tenant.turns.is_empty() {
                i += 1;
                continue;
            }
            let name = self.turns.remove(i).expect("in range");
            let tenant = self.tenants.get_mut(&name).expect("known");
            if tenant.turns.is_empty() {
                tenant.in_turn = false;
                if tenant.idle() {
                    self.tenants.remove(&name);
                }
            } else {
                self.turns.served.push_back(name);
            }
            if let Some(key) = picked {
                break key;
            }
        };
        let w = self.waiting.remove(&key).expect("a ready key has its job");
        let owner = self
            .owners
            .get_mut(w.job.owner())
            .expect("the owner of a waiting job is known");
        owner.waiting.remove(&key);
        owner.running += 1;
        *self
            .running_per_cluster
            .entry(key.scope.cluster.clone())
            .or_default() += 1;
        self.running
            .insert(key, (w.fingerprint, w.job.owner().clone()));
        Some((
            w.job,
            w.attempts + 1,
            now.saturating_duration_since(w.not_before),
        ))
    }

    /// Frees the worker of the running job of `key`, handed over to a member that answers later:
    /// the job stays running (its key busy, its cluster's count taken) until it is finished, but
    /// no longer counts toward the workers nor its owner's and tenant's caps.
    pub(crate) fn hand_over(&mut self, key: &ReleaseKey) {
        let Some((_, owner)) = self.running.get(key) else {
            return;
        };
        if !self.awaiting.insert(key.clone()) {
            return;
        }
        self.count_off(&owner.clone());
    }

    /// Takes one running job off the counts of `owner` and its tenant.
    fn count_off(&mut self, owner: &OwnerId) {
        if let Some(q) = self.owners.get_mut(owner) {
            q.running -= 1;
        }
        if let Some(t) = self.tenants.get_mut(&owner.namespace) {
            t.running -= 1;
        }
    }

    /// Marks the job of `key` no longer running, and files a job queued for the key meanwhile.
    pub(crate) fn release(&mut self, key: &ReleaseKey, now: Instant) {
        if let Some((_, owner)) = self.running.remove(key) {
            let cluster = &key.scope.cluster;
            if let Some(n) = self.running_per_cluster.get_mut(cluster) {
                *n -= 1;
                if *n == 0 {
                    self.running_per_cluster.remove(cluster);
                }
            }
            if !self.awaiting.remove(key) {
                self.count_off(&owner);
            }
            self.tidy(&owner);
        }
        if self
            .waiting
            .get(key)
            .is_some_and(|w| w.slot == Slot::Parked)
        {
            let w = self.detach(key).expect("checked above");
            self.place(w, now);
        }
    }

    /// Records a finished job; re-queues a retryable failure and returns its delay, or says the
    /// job is stalled because it failed transiently `max_attempts` times (or as often as its
    /// chart entry's remediation allows, which also retries a permanent failure). A job that found its
    /// cluster unreachable waits without using up a try.
    pub(crate) fn finish(
        &mut self,
        job: &Job,
        attempt: u32,
        outcome: &Outcome,
        now: Instant,
    ) -> Finished {
        let key = job.key();
        self.release(key, now);
        // The tries allowed: the chart entry's remediation retries when it sets some, whatever
        // failed (Flux's rule); otherwise the queue's cap, for transient failures only.
        let tries = |transient: bool| match job.budget() {
            Budget::Unlimited => u32::MAX,
            Budget::Tries(n) => n,
            Budget::Unset if transient => self.config.max_attempts,
            Budget::Unset => 0,
        };
        let (attempts, cap) = match outcome {
            Outcome::Failed {
                kind: FailureKind::Transient,
                ..
            } => (attempt, tries(true)),
            Outcome::Failed {
                kind: FailureKind::Unavailable,
                ..
            } => (attempt.saturating_sub(1), tries(true)),
            Outcome::Failed {
                kind: FailureKind::Permanent,
                ..
            } if attempt < tries(false) => (attempt, tries(false)),
            _ => return Finished::Done,
        };
        if self.waiting.contains_key(key) {
            return Finished::Done; // a newer job for the key took its place
        }
        if attempts >= cap {
            return Finished::Stalled;
        }
        let delay = match outcome {
            // Waiting for a cluster: a long pause, cut short when its probe sees it again
            // (`expedite`), rather than a try every second.
            Outcome::Failed {
                kind: FailureKind::Unavailable,
                ..
            } => self.backoff(key, UNAVAILABLE_BACKOFF_STEP),
            _ => self.backoff(key, attempt),
        };
        let entry = Waiting {
            job: job.clone(),
            fingerprint: job.fingerprint(),
            attempts,
            not_before: now + delay,
            seq: self.next_seq(),
            slot: Slot::Backoff,
        };
        self.place(entry, now);
        Finished::Retry(delay)
    }

    /// Forgets every running job, for example when shutdown abandons them.
    pub(crate) fn abandon_running(&mut self, now: Instant) {
        let keys: Vec<ReleaseKey> = self.running.keys().cloned().collect();
        for key in keys {
            self.release(&key, now);
        }
    }

    /// Forgets every job handed over, for example when shutdown drops their answers.
    pub(crate) fn abandon_awaiting(&mut self, now: Instant) {
        for key in std::mem::take(&mut self.awaiting) {
            self.awaiting.insert(key.clone());
            self.release(&key, now);
        }
    }

    /// Drops the waiting jobs of `owner` that `drop` selects; returns how many.
    pub(crate) fn drop_where(&mut self, owner: &OwnerId, drop: impl Fn(&Waiting) -> bool) -> usize {
        let Some(q) = self.owners.get(owner) else {
            return 0;
        };
        let gone: Vec<ReleaseKey> = q
            .waiting
            .iter()
            .filter(|k| self.waiting.get(*k).is_some_and(&drop))
            .cloned()
            .collect();
        for key in &gone {
            self.detach(key);
        }
        gone.len()
    }

    /// Drops the waiting jobs of `owner` whose key the owner's newest plan has no job for.
    pub(crate) fn retain_planned(
        &mut self,
        owner: &OwnerId,
        planned: &HashSet<&ReleaseKey>,
    ) -> usize {
        self.drop_where(owner, |w| !planned.contains(w.job.key()))
    }

    /// Drops every waiting install or upgrade of `owner`.
    pub(crate) fn drop_applies(&mut self, owner: &OwnerId) -> usize {
        self.drop_where(owner, |w| !matches!(w.job, Job::Uninstall { .. }))
    }

    /// `base * 2^(attempt-1)`, capped, with up to ±20% jitter fixed by the key and attempt.
    pub(crate) fn backoff(&self, key: &ReleaseKey, attempt: u32) -> Duration {
        let doubled = 2u32.saturating_pow(attempt.saturating_sub(1));
        let capped = self
            .config
            .backoff_base
            .saturating_mul(doubled)
            .min(self.config.backoff_max);
        let mut hasher = DefaultHasher::new();
        (key, attempt).hash(&mut hasher);
        let jitter = 0.8 + 0.4 * (hasher.finish() % 1001) as f64 / 1000.0;
        capped.mul_f64(jitter).min(self.config.backoff_max)
    }

    /// The earliest instant after `now` at which a backing-off job becomes eligible.
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        self.timers
            .range((Bound::Excluded((now, u64::MAX)), Bound::Unbounded))
            .next()
            .map(|((at, _), _)| *at)
    }
}
