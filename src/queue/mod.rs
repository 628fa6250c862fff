//! The queue of Helm jobs for all clusters: keyed, coalescing, per-key exclusive, fair across tenants, owners and clusters, capped, with backoff.
//!
//! Hand-written because no crate combines what it needs: one job per release key (a newer job
//! replaces a queued one, waits behind a running one), round-robin between tenants (the hub
//! namespace of the `Controller` a job is for), then between the owners (`Controller`s) of one
//! tenant, with a cap on each tenant's and each owner's running jobs, uninstalls before the
//! owner's other jobs, clusters taking turns within an owner under a per-cluster cap, and
//! backoff timers a recovered cluster can cut short. A tenant with fifty Controllers gets one
//! turn, like a tenant with one. Everything is indexed; with n waiting jobs:
//! - enqueue, replace, a job finishing, a retry: O(log n); `is_busy`, `depth`, `running`: O(1);
//! - starting the next job: O(log n) when the tenant and owner first in turn can start one; at
//!   worst O(owners × workers), passing over tenants and owners at their cap and, within an
//!   owner, clusters at their cap (at most `workers` of each can be), so O(owners) for a given
//!   worker count;
//! - a backing-off job becoming due: O(log n); `expedite`: O(log n) per job of the cluster;
//! - `retain_planned` and `drop_applies`: O(log n) per waiting job of that owner;
//! - `next_wake`: O(log n); `running_for`: O(workers).

pub(crate) mod failure;

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    hash::{DefaultHasher, Hash, Hasher},
    ops::Bound,
    panic::AssertUnwindSafe,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use futures::FutureExt;
use tokio::{
    sync::{Notify, mpsc::Sender},
    task::{JoinError, JoinSet},
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    api::key::{ClusterName, ReleaseKey},
    plan::{Job, OwnerId},
};

/// How the queue runs.
#[derive(Clone, Debug)]
pub(crate) struct QueueConfig {
    /// Jobs running at once, over all clusters.
    pub(crate) workers: usize,
    /// Jobs running at once in one cluster.
    pub(crate) per_cluster: usize,
    /// Jobs of one owner (`Controller`) running at once; 0: no cap beyond `workers`.
    pub(crate) per_owner: usize,
    /// Jobs of one tenant (the hub namespace of the owners) running at once; 0: no cap beyond
    /// `workers`.
    pub(crate) per_tenant: usize,
    /// Delay before the first retry of a failed job.
    pub(crate) backoff_base: Duration,
    /// Longest delay between retries.
    pub(crate) backoff_max: Duration,
    /// How long shutdown waits for running jobs before abandoning them.
    pub(crate) shutdown_grace: Duration,
    /// Tries of a job failing with a transient error before it is stalled until the spec changes.
    pub(crate) max_attempts: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            workers: 4,
            per_cluster: 2,
            per_owner: default_per_owner(4),
            per_tenant: default_per_owner(4),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(30),
            max_attempts: 6,
        }
    }
}

/// The default cap of one owner's, and of one tenant's, running jobs: all workers but one (at
/// least one), so one worker always stays free for other owners and tenants while one wave keeps
/// most of the throughput.
pub(crate) fn default_per_owner(workers: usize) -> usize {
    workers.saturating_sub(1).max(1)
}

/// What running a job came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Installed or upgraded.
    Applied {
        /// Helm revision now deployed.
        revision: i64,
        /// Chart version now deployed.
        chart_version: String,
    },
    /// Uninstalled (or was already gone).
    Uninstalled,
    /// Failed, with what kind of failure it was.
    Failed {
        /// What went wrong, for status and events.
        message: String,
        /// Whether and how a later try may succeed.
        kind: FailureKind,
    },
}

/// What kind of failure a job met, which decides whether and how it is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// A later try may succeed (a timeout, a conflict, a server error): retried with backoff, up
    /// to the attempt cap, after which the release is stalled until the spec changes.
    Transient,
    /// Only a change of the spec can fix it (a chart that does not render, a schema violation,
    /// an invalid or immutable field): not retried.
    Permanent,
    /// The cluster cannot be reached: retried with backoff for as long as it takes, without
    /// counting toward the attempt cap.
    Unavailable,
}

impl Outcome {
    /// A failure of the given kind.
    pub(crate) fn failed(message: impl Into<String>, kind: FailureKind) -> Self {
        Outcome::Failed {
            message: message.into(),
            kind,
        }
    }
}

/// Runs one job. Implemented by the Helm executor; the only place processes are spawned.
pub(crate) trait Executor: Send + Sync + 'static {
    /// Carries out `job` and tells how it went.
    fn execute(&self, job: Job) -> impl std::future::Future<Output = Outcome> + Send;
}

/// A finished job, reported to whoever reconciles its owner.
#[derive(Clone, Debug)]
pub(crate) struct Completed {
    /// The job that ran.
    pub(crate) job: Job,
    /// How it went.
    pub(crate) outcome: Outcome,
    /// Which try this was, counting from 1.
    pub(crate) attempt: u32,
    /// How long it waited in the queue once eligible (backoff not counted).
    pub(crate) waited: Duration,
    /// How long it ran.
    pub(crate) elapsed: Duration,
    /// The delay before it runs again, when it was re-queued.
    pub(crate) next_retry: Option<Duration>,
    /// True when it failed transiently as often as allowed and is not tried again until the spec changes.
    pub(crate) stalled: bool,
}

/// What enqueueing did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// Queued at the back.
    Added,
    /// Took the place of a different job queued for the key.
    Replaced,
    /// An equal job is queued already; nothing changed.
    AlreadyQueued,
    /// An equal job is running now; the job was dropped.
    AlreadyRunning,
}

/// The backoff step a job waiting for an unreachable cluster pauses for (2^5 × the base, capped).
const UNAVAILABLE_BACKOFF_STEP: u32 = 6;

/// What became of a finished job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finished {
    /// Nothing more to do.
    Done,
    /// Queued again, to run after this delay.
    Retry(Duration),
    /// Failed transiently as often as allowed; not tried again until the spec changes.
    Stalled,
}

/// The priority class a job waits in within its owner: 0 for uninstalls, which go before the owner's other jobs.
fn priority_of(job: &Job) -> usize {
    match job {
        Job::Uninstall { .. } => 0,
        Job::Apply { .. } | Job::Rollback { .. } => 1,
    }
}

/// Where a waiting job is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Eligible: in its owner's priority class, in its cluster's line.
    Ready,
    /// Waiting out a backoff, in the timers.
    Backoff,
    /// A job for its key is running; it is placed when that job finishes.
    Parked,
}

/// A job waiting its turn.
#[derive(Debug)]
struct Waiting {
    job: Job,
    fingerprint: String,
    /// Tries made so far.
    attempts: u32,
    not_before: Instant,
    /// Its place in line: among the ready jobs of one priority and cluster, the smallest starts first.
    seq: u64,
    slot: Slot,
}

/// The ready jobs of one owner and priority, in one line per cluster, the clusters taking turns.
#[derive(Debug, Default)]
struct ClusterTurns {
    /// Ready keys per cluster, in line order; a cluster has a line (maybe emptied) while it is in `turns`.
    lines: HashMap<ClusterName, BTreeMap<u64, ReleaseKey>>,
    /// Clusters in turn order; the one served goes to the back.
    turns: VecDeque<ClusterName>,
    /// Ready jobs in all lines.
    ready: usize,
}

impl ClusterTurns {
    fn insert(&mut self, seq: u64, key: ReleaseKey) {
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

    fn remove(&mut self, seq: u64, key: &ReleaseKey) {
        let line = self.lines.get_mut(&key.scope.cluster);
        if line.and_then(|line| line.remove(&seq)).is_some() {
            self.ready -= 1;
        }
    }

    /// Takes the first job of the first cluster in turn that `room` admits; that cluster goes to
    /// the back. Emptied lines met on the way are dropped.
    fn pick(&mut self, room: impl Fn(&ClusterName) -> bool) -> Option<ReleaseKey> {
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
struct OwnerQueue {
    /// Uninstalls, then installs, upgrades and rollbacks.
    priorities: [ClusterTurns; 2],
    /// Every waiting key of the owner, in any slot.
    waiting: HashSet<ReleaseKey>,
    /// Its jobs running now.
    running: usize,
    /// Whether it is in `State::turns`.
    in_turn: bool,
}

impl OwnerQueue {
    fn ready(&self) -> usize {
        self.priorities.iter().map(|l| l.ready).sum()
    }

    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running == 0 && !self.in_turn
    }
}

/// One tenant's share of the queue: the hub namespace's owners with ready jobs, taking turns.
#[derive(Debug, Default)]
struct TenantQueue {
    /// Its owners with ready jobs, in turn order.
    turns: Turns<OwnerId>,
    /// Its jobs running now.
    running: usize,
    /// Whether it is in `State::turns`.
    in_turn: bool,
}

impl TenantQueue {
    fn idle(&self) -> bool {
        self.turns.is_empty() && self.running == 0 && !self.in_turn
    }

    /// Takes the next job of the first owner in turn that is under its cap and has a job `room`
    /// admits; that owner goes to the back. Owners met on the way with nothing ready are
    /// dropped from the turns (and forgotten when idle).
    fn pick(
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

/// The queue's bookkeeping, free of any runtime so it is tested with explicit instants.
#[derive(Debug)]
struct State {
    config: QueueConfig,
    /// Every waiting job, by key.
    waiting: HashMap<ReleaseKey, Waiting>,
    /// The owners with jobs waiting or running.
    owners: HashMap<OwnerId, OwnerQueue>,
    /// The tenants (hub namespaces) with owners in turn or jobs running.
    tenants: HashMap<String, TenantQueue>,
    /// Tenants with ready jobs, in turn order.
    turns: Turns<String>,
    /// Backing-off jobs by the instant they become eligible (and their `seq`).
    timers: BTreeMap<(Instant, u64), ReleaseKey>,
    /// Backing-off jobs by cluster, for `expedite`.
    backing_off: HashMap<ClusterName, HashSet<ReleaseKey>>,
    /// Fingerprints and owners of the running jobs, by key.
    running: HashMap<ReleaseKey, (String, OwnerId)>,
    /// Jobs running per cluster (clusters with none are left out).
    running_per_cluster: HashMap<ClusterName, usize>,
    /// The last `seq` given out.
    last_seq: u64,
}

/// Tenants, or the owners of one tenant, with ready jobs in turn order: those that just got
/// some (they have had no turn since), then those served before. One served goes to the back of
/// the second list. A newly active tenant or owner thus starts its first job on the next free
/// worker, as a new flow goes first in FQ-CoDel, and then takes its turn like the others; it can
/// jump the line again only after all its ready jobs have started.
#[derive(Debug)]
struct Turns<T> {
    fresh: VecDeque<T>,
    served: VecDeque<T>,
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
    fn get(&self, i: usize) -> Option<&T> {
        self.fresh
            .get(i)
            .or_else(|| self.served.get(i - self.fresh.len()))
    }

    fn remove(&mut self, i: usize) -> Option<T> {
        if i < self.fresh.len() {
            self.fresh.remove(i)
        } else {
            self.served.remove(i - self.fresh.len())
        }
    }

    fn is_empty(&self) -> bool {
        self.fresh.is_empty() && self.served.is_empty()
    }

    #[cfg(test)]
    fn contains(&self, item: &T) -> bool {
        self.fresh.contains(item) || self.served.contains(item)
    }
}

/// Adds a ready job to its owner's priority class, the owner to its tenant's turns and the tenant to the
/// turns, each unless it is there.
fn make_ready(
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

impl State {
    fn new(config: QueueConfig) -> Self {
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
            last_seq: 0,
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    /// Files `w` where it belongs at `now`: behind a running job of its key, among the backing-off
    /// jobs, or in its owner's priority.
    fn place(&mut self, mut w: Waiting, now: Instant) {
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
    fn detach(&mut self, key: &ReleaseKey) -> Option<Waiting> {
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

    fn stop_backing_off(&mut self, key: &ReleaseKey) {
        let cluster = &key.scope.cluster;
        if let Some(keys) = self.backing_off.get_mut(cluster) {
            keys.remove(key);
            if keys.is_empty() {
                self.backing_off.remove(cluster);
            }
        }
    }

    /// Forgets an owner with nothing waiting or running.
    fn tidy(&mut self, owner: &OwnerId) {
        if self.owners.get(owner).is_some_and(OwnerQueue::idle) {
            self.owners.remove(owner);
        }
        self.tidy_tenant(&owner.namespace);
    }

    /// Forgets a tenant with no owner in turn and nothing running.
    fn tidy_tenant(&mut self, tenant: &str) {
        if self.tenants.get(tenant).is_some_and(TenantQueue::idle) {
            self.tenants.remove(tenant);
        }
    }

    /// Moves the backing-off jobs due at `now` into their priorities.
    fn promote_due(&mut self, now: Instant) {
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
    fn make_ready(&mut self, key: &ReleaseKey) {
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
    fn expedite(&mut self, cluster: &ClusterName, now: Instant) -> usize {
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

    fn enqueue(&mut self, job: Job, now: Instant) -> Enqueued {
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
    fn start_next(&mut self, now: Instant) -> Option<(Job, u32, Duration)> {
        self.promote_due(now);
        if self.running.len() >= self.config.workers {
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

    /// Marks the job of `key` no longer running, and files a job queued for the key meanwhile.
    fn release(&mut self, key: &ReleaseKey, now: Instant) {
        if let Some((_, owner)) = self.running.remove(key) {
            let cluster = &key.scope.cluster;
            if let Some(n) = self.running_per_cluster.get_mut(cluster) {
                *n -= 1;
                if *n == 0 {
                    self.running_per_cluster.remove(cluster);
                }
            }
            if let Some(q) = self.owners.get_mut(&owner) {
                q.running -= 1;
            }
            if let Some(t) = self.tenants.get_mut(&owner.namespace) {
                t.running -= 1;
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
    /// job is stalled because it failed transiently `max_attempts` times. A job that found its
    /// cluster unreachable waits without using up a try.
    fn finish(&mut self, job: &Job, attempt: u32, outcome: &Outcome, now: Instant) -> Finished {
        let key = job.key();
        self.release(key, now);
        let attempts = match outcome {
            Outcome::Failed {
                kind: FailureKind::Transient,
                ..
            } => attempt,
            Outcome::Failed {
                kind: FailureKind::Unavailable,
                ..
            } => attempt.saturating_sub(1),
            _ => return Finished::Done,
        };
        if self.waiting.contains_key(key) {
            return Finished::Done; // a newer job for the key took its place
        }
        if attempts >= self.config.max_attempts {
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
    fn abandon_running(&mut self, now: Instant) {
        let keys: Vec<ReleaseKey> = self.running.keys().cloned().collect();
        for key in keys {
            self.release(&key, now);
        }
    }

    /// Drops the waiting jobs of `owner` that `drop` selects; returns how many.
    fn drop_where(&mut self, owner: &OwnerId, drop: impl Fn(&Waiting) -> bool) -> usize {
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
    fn retain_planned(&mut self, owner: &OwnerId, planned: &HashSet<&ReleaseKey>) -> usize {
        self.drop_where(owner, |w| !planned.contains(w.job.key()))
    }

    /// Drops every waiting install or upgrade of `owner`.
    fn drop_applies(&mut self, owner: &OwnerId) -> usize {
        self.drop_where(owner, |w| !matches!(w.job, Job::Uninstall { .. }))
    }

    /// `base * 2^(attempt-1)`, capped, with up to ±20% jitter fixed by the key and attempt.
    fn backoff(&self, key: &ReleaseKey, attempt: u32) -> Duration {
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
    fn next_wake(&self, now: Instant) -> Option<Instant> {
        self.timers
            .range((Bound::Excluded((now, u64::MAX)), Bound::Unbounded))
            .next()
            .map(|((at, _), _)| *at)
    }
}

/// Handle to the queue; cheap to clone.
#[derive(Clone)]
pub(crate) struct HelmQueue {
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
}

impl HelmQueue {
    /// An empty queue.
    pub(crate) fn new(config: QueueConfig) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new(config))),
            wake: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("queue lock")
    }

    /// Queues `job`, coalescing it with what is queued or running for its key.
    pub(crate) fn enqueue(&self, job: Job) -> Enqueued {
        let enqueued = self.lock().enqueue(job, Instant::now());
        self.wake.notify_one();
        enqueued
    }

    /// Ends the backoff of every waiting job of a cluster, for example when it becomes reachable
    /// again; returns how many jobs were waiting out a backoff.
    pub(crate) fn expedite(&self, cluster: &ClusterName) -> usize {
        let count = self.lock().expedite(cluster, Instant::now());
        self.wake.notify_one();
        count
    }

    /// Jobs waiting (not running).
    pub(crate) fn depth(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Jobs running now.
    pub(crate) fn running(&self) -> usize {
        self.lock().running.len()
    }

    /// Keeps only the waiting jobs of `owner` that its newest plan still has (by key); returns
    /// how many were dropped. A job already running goes on.
    pub(crate) fn retain_planned(&self, owner: &OwnerId, planned: &HashSet<&ReleaseKey>) -> usize {
        self.lock().retain_planned(owner, planned)
    }

    /// Drops every waiting install or upgrade of `owner`, for example when it is being deleted.
    pub(crate) fn drop_applies(&self, owner: &OwnerId) -> usize {
        self.lock().drop_applies(owner)
    }

    /// The releases of `owner` with a job running now.
    pub(crate) fn running_for(&self, owner: &OwnerId) -> Vec<ReleaseKey> {
        let state = self.lock();
        let mut keys: Vec<ReleaseKey> = state
            .running
            .iter()
            .filter(|(_, (_, o))| o == owner)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// True when a job for this key is queued or running.
    pub(crate) fn is_busy(&self, key: &ReleaseKey) -> bool {
        let state = self.lock();
        state.running.contains_key(key) || state.waiting.contains_key(key)
    }

    /// Runs jobs until `cancel` fires; then starts nothing new, waits up to shutdown_grace for running jobs, and drops (aborts) the rest. Each finished job is sent on `done` (ignore send errors).
    pub(crate) async fn run<E: Executor>(
        &self,
        executor: Arc<E>,
        done: Sender<Completed>,
        cancel: CancellationToken,
    ) {
        let mut tasks = JoinSet::new();
        while !cancel.is_cancelled() {
            let now = Instant::now();
            self.start_ready(&executor, &mut tasks, now);
            let wake = self.lock().next_wake(now);
            tokio::select! {
                biased;
                () = cancel.cancelled() => {}
                Some(joined) = tasks.join_next() => self.complete(joined, &done).await,
                () = self.wake.notified() => {}
                () = sleep_until(wake) => {}
            }
        }
        self.shut_down(tasks, &done).await;
    }

    fn start_ready<E: Executor>(
        &self,
        executor: &Arc<E>,
        tasks: &mut JoinSet<Completed>,
        now: Instant,
    ) {
        let ready: Vec<_> = {
            let mut state = self.lock();
            std::iter::from_fn(|| state.start_next(now)).collect()
        };
        for (job, attempt, waited) in ready {
            let key = job.key();
            let span = tracing::info_span!(
                "helm_job",
                cluster = %key.scope.cluster,
                namespace = %key.scope.namespace,
                release = %key.release,
            );
            tasks.spawn(execute(executor.clone(), job, attempt, waited).instrument(span));
        }
    }

    /// Records a finished job and reports it; a full `done` channel makes the workers wait.
    async fn complete(&self, joined: Result<Completed, JoinError>, done: &Sender<Completed>) {
        let mut completed =
            joined.expect("job tasks catch panics and are aborted only at shutdown");
        let now = Instant::now();
        let finished =
            self.lock()
                .finish(&completed.job, completed.attempt, &completed.outcome, now);
        match finished {
            Finished::Done => {}
            Finished::Retry(delay) => completed.next_retry = Some(delay),
            Finished::Stalled => completed.stalled = true,
        }
        let _ = done.send(completed).await;
    }

    async fn shut_down(&self, mut tasks: JoinSet<Completed>, done: &Sender<Completed>) {
        let grace = self.lock().config.shutdown_grace;
        let drain = async {
            while let Some(joined) = tasks.join_next().await {
                self.complete(joined, done).await;
            }
        };
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!(
                abandoned = tasks.len(),
                ?grace,
                "shutdown grace ran out; aborting running Helm jobs"
            );
            tasks.abort_all();
            self.lock().abandon_running(Instant::now());
        }
    }
}

/// Runs one job, turning a panicking executor into a retryable failure.
async fn execute<E: Executor>(
    executor: Arc<E>,
    job: Job,
    attempt: u32,
    waited: Duration,
) -> Completed {
    let started = Instant::now();
    let outcome = AssertUnwindSafe(executor.execute(job.clone()))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Outcome::failed("the Helm executor panicked", FailureKind::Transient));
    Completed {
        job,
        outcome,
        attempt,
        waited,
        elapsed: started.elapsed(),
        next_retry: None,
        stalled: false,
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::{mpsc, oneshot};

    use super::*;
    use crate::plan::{ChartSource, OwnerId, Release};

    fn owner() -> OwnerId {
        OwnerId {
            namespace: "default".into(),
            name: "a".into(),
        }
    }

    fn apply(key: &str, spec_hash: &str) -> Job {
        Job::Apply {
            release: Box::new(Release {
                key: key.parse().unwrap(),
                owner: owner(),
                chart_name: "web".into(),
                source: ChartSource::Directory("web".into()),
                version: None,
                chart_digest: None,
                settings: vec![],
                values: None,
                rollback_on_failure: false,
                spec_hash: spec_hash.into(),
                identity: None,
                drift: Default::default(),
            }),
            stale_pending: None,
            repair: None,
        }
    }

    fn uninstall(key: &str) -> Job {
        Job::Uninstall {
            key: key.parse().unwrap(),
            owner: owner(),
            identity: None,
        }
    }

    fn failed(retry: bool) -> Outcome {
        let kind = if retry {
            FailureKind::Transient
        } else {
            FailureKind::Permanent
        };
        Outcome::failed("boom", kind)
    }

    fn delay(finished: Finished) -> Duration {
        match finished {
            Finished::Retry(d) => d,
            other => panic!("not re-queued: {other:?}"),
        }
    }

    /// A queue of `workers` and `per_cluster` whose owners and tenants are not capped.
    fn state(workers: usize, per_cluster: usize) -> State {
        capped(workers, per_cluster, 0)
    }

    /// Starts every job allowed at `now`, naming each by its key.
    fn start_all(state: &mut State, now: Instant) -> Vec<String> {
        std::iter::from_fn(|| state.start_next(now))
            .map(|(job, _, _)| job.key().to_string())
            .collect()
    }

    /// The waiting jobs in line order: key, fingerprint and tries made.
    fn queued(state: &State) -> Vec<(String, String, u32)> {
        let mut waiting: Vec<&Waiting> = state.waiting.values().collect();
        waiting.sort_by_key(|w| w.seq);
        waiting
            .into_iter()
            .map(|w| (w.job.key().to_string(), w.fingerprint.clone(), w.attempts))
            .collect()
    }

    /// An owner named `name` in namespace `default`.
    fn named(name: &str) -> OwnerId {
        OwnerId {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    /// `job` as if `owner` had asked for it.
    fn by(owner: &str, job: Job) -> Job {
        of(named(owner), job)
    }

    /// `job` as if Controller `owner` (of any hub namespace) had asked for it.
    fn of(owner: OwnerId, job: Job) -> Job {
        match job {
            Job::Apply {
                mut release,
                stale_pending,
                repair,
            } => {
                release.owner = owner;
                Job::Apply {
                    release,
                    stale_pending,
                    repair,
                }
            }
            Job::Uninstall { key, identity, .. } => Job::Uninstall {
                key,
                owner,
                identity,
            },
            Job::Rollback {
                key,
                from,
                identity,
                ..
            } => Job::Rollback {
                key,
                owner,
                from,
                identity,
            },
        }
    }

    /// A queue of `workers`, `per_cluster` and `per_owner`, whose tenants are not capped.
    fn capped(workers: usize, per_cluster: usize, per_owner: usize) -> State {
        tenanted(workers, per_cluster, per_owner, 0)
    }

    /// A queue of `workers`, `per_cluster`, `per_owner` and `per_tenant`.
    fn tenanted(workers: usize, per_cluster: usize, per_owner: usize, per_tenant: usize) -> State {
        State::new(QueueConfig {
            workers,
            per_cluster,
            per_owner,
            per_tenant,
            ..QueueConfig::default()
        })
    }

    /// Enqueues a wave of `n` installs of owner `owner`, spread over clusters c-0 … c-3.
    fn wave(s: &mut State, owner: &str, n: usize, now: Instant) {
        for i in 0..n {
            let key = format!("c-{}/{owner}-{i}/app", i % 4);
            assert_eq!(
                s.enqueue(by(owner, apply(&key, "h1")), now),
                Enqueued::Added
            );
        }
    }

    /// Checks that every index agrees with the waiting and running jobs, and that every cap holds.
    fn assert_consistent(s: &State) {
        let c = &s.config;
        assert!(s.running.len() <= c.workers, "workers exceeded");
        let mut per_cluster: HashMap<ClusterName, usize> = HashMap::new();
        let mut per_owner: HashMap<OwnerId, usize> = HashMap::new();
        let mut per_tenant: HashMap<String, usize> = HashMap::new();
        for (key, (_, owner)) in &s.running {
            *per_cluster.entry(key.scope.cluster.clone()).or_default() += 1;
            *per_owner.entry(owner.clone()).or_default() += 1;
            *per_tenant.entry(owner.namespace.clone()).or_default() += 1;
        }
        for (tenant, n) in &per_tenant {
            assert_eq!(s.tenants[tenant].running, *n, "{tenant} running");
            assert!(
                c.per_tenant == 0 || *n <= c.per_tenant,
                "{tenant} over its cap"
            );
        }
        assert_eq!(per_cluster, s.running_per_cluster);
        assert!(per_cluster.values().all(|n| *n <= c.per_cluster));
        for (owner, n) in &per_owner {
            assert_eq!(s.owners[owner].running, *n, "{owner} running");
            assert!(
                c.per_owner == 0 || *n <= c.per_owner,
                "{owner} over its cap"
            );
        }
        let mut ready = 0;
        for (key, w) in &s.waiting {
            let q = &s.owners[w.job.owner()];
            assert!(q.waiting.contains(key), "{key} in its owner's set");
            match w.slot {
                Slot::Ready => {
                    ready += 1;
                    let line = &q.priorities[priority_of(&w.job)].lines[&key.scope.cluster];
                    assert_eq!(line.get(&w.seq), Some(key), "{key} in its line");
                    let tenant = &w.job.owner().namespace;
                    assert!(q.in_turn && s.tenants[tenant].turns.contains(w.job.owner()));
                    assert!(s.tenants[tenant].in_turn && s.turns.contains(tenant));
                }
                Slot::Backoff => {
                    assert_eq!(s.timers.get(&(w.not_before, w.seq)), Some(key));
                    assert!(s.backing_off[&key.scope.cluster].contains(key));
                }
                Slot::Parked => assert!(s.running.contains_key(key), "{key} parked"),
            }
        }
        let priorities: usize = s.owners.values().map(OwnerQueue::ready).sum();
        assert_eq!(priorities, ready, "ready jobs in priorities");
        let owned: usize = s.owners.values().map(|q| q.waiting.len()).sum();
        assert_eq!(owned, s.waiting.len(), "waiting jobs by owner");
        let backing_off: usize = s.backing_off.values().map(HashSet::len).sum();
        assert_eq!((s.timers.len(), backing_off), (backing_off, s.timers.len()));
    }

    #[test]
    fn another_owners_job_starts_on_the_next_free_worker_after_a_wave_of_a_thousand() {
        let mut s = capped(4, 2, 0);
        let now = Instant::now();
        wave(&mut s, "a", 1000, now);
        let first = start_all(&mut s, now);
        assert_eq!(first.len(), 4, "the wave takes every worker when uncapped");
        s.enqueue(by("b", apply("c-0/b/app", "h1")), now);
        assert!(s.start_next(now).is_none(), "no worker is free");
        s.finish(
            &by("a", apply(&first[1], "h1")),
            1,
            &Outcome::Uninstalled,
            now,
        );
        assert_eq!(start_all(&mut s, now), ["c-0/b/app"]);
        assert_eq!(s.waiting.len(), 996);
        assert_consistent(&s);
    }

    #[test]
    fn under_the_default_owner_cap_another_owners_job_starts_at_once_beside_a_wave() {
        let mut s = State::new(QueueConfig::default());
        let now = Instant::now();
        wave(&mut s, "a", 1000, now);
        let first = start_all(&mut s, now);
        assert_eq!(first.len(), default_per_owner(4));
        // Another tenant's: the wave's tenant is at its cap too.
        s.enqueue(of(in_tenant("other", "b"), uninstall("c-1/b/app")), now);
        assert_eq!(start_all(&mut s, now), ["c-1/b/app"]);
        // Another owner of the wave's tenant goes first once one of the tenant's jobs ends.
        s.enqueue(by("b", uninstall("c-2/b/app")), now);
        s.finish(
            &by("a", apply(&first[0], "h1")),
            1,
            &Outcome::Uninstalled,
            now,
        );
        assert_eq!(start_all(&mut s, now), ["c-2/b/app"]);
        assert_consistent(&s);
    }

    #[test]
    fn owners_with_work_take_turns_one_job_each() {
        let mut s = state(1, 1);
        let now = Instant::now();
        wave(&mut s, "a", 3, now);
        wave(&mut s, "b", 2, now);
        s.enqueue(by("c", apply("c-3/c-0/app", "h1")), now);
        let mut order = Vec::new();
        while let Some((job, attempt, _)) = s.start_next(now) {
            order.push(job.owner().name.clone());
            s.finish(&job, attempt, &Outcome::Uninstalled, now);
            assert_consistent(&s);
        }
        assert_eq!(order, ["a", "b", "c", "a", "b", "a"]);
        assert!(
            s.owners.is_empty() && s.tenants.is_empty() && s.turns.is_empty(),
            "idle owners are forgotten"
        );
    }

    /// Controller `name` of hub namespace `tenant`.
    fn in_tenant(tenant: &str, name: &str) -> OwnerId {
        OwnerId {
            namespace: tenant.into(),
            name: name.into(),
        }
    }

    /// Enqueues `per_owner` installs for each of `owners` Controllers of hub namespace `tenant`.
    fn tenant_wave(s: &mut State, tenant: &str, owners: usize, per_owner: usize, now: Instant) {
        for o in 0..owners {
            for i in 0..per_owner {
                let key = format!("c-{}/{tenant}-{o}/app-{i}", i % 4);
                let job = of(in_tenant(tenant, &format!("c{o}")), apply(&key, "h1"));
                assert_eq!(s.enqueue(job, now), Enqueued::Added);
            }
        }
    }

    #[test]
    fn a_tenant_with_fifty_controllers_gets_one_turn_like_a_tenant_with_one() {
        let mut s = tenanted(4, 4, 0, 0);
        let now = Instant::now();
        tenant_wave(&mut s, "many", 50, 2, now);
        tenant_wave(&mut s, "one", 1, 2, now);
        let started: Vec<String> = start_all(&mut s, now)
            .into_iter()
            .map(|key| key.split('/').nth(1).unwrap().to_owned())
            .collect();
        // Tenants take turns, and the Controllers of one take turns within its turns.
        assert_eq!(started, ["many-0", "one-0", "many-1", "one-0"]);
        assert_consistent(&s);
    }

    #[test]
    fn a_tenants_cap_holds_across_its_controllers_and_a_worker_stays_free() {
        let mut s = tenanted(4, 4, 3, 3);
        let now = Instant::now();
        tenant_wave(&mut s, "slow", 5, 5, now);
        let first = start_all(&mut s, now);
        assert_eq!(first.len(), 3, "the tenant's cap, whatever its Controllers");
        assert_consistent(&s);
        s.enqueue(
            of(in_tenant("other", "c"), apply("c-0/other/web", "h1")),
            now,
        );
        assert_eq!(start_all(&mut s, now), ["c-0/other/web"]);
        // The slow tenant's jobs never finish: its later jobs wait, the other tenant's do not.
        s.enqueue(
            of(in_tenant("other", "c"), apply("c-1/other/db", "h1")),
            now,
        );
        assert!(start_all(&mut s, now).is_empty(), "every worker busy");
        s.finish(
            &of(in_tenant("other", "c"), apply("c-0/other/web", "h1")),
            1,
            &Outcome::Uninstalled,
            now,
        );
        assert_eq!(start_all(&mut s, now), ["c-1/other/db"]);
        assert_consistent(&s);
    }

    #[test]
    fn an_owners_uninstalls_start_before_its_installs_and_upgrades() {
        let mut s = state(1, 1);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        s.enqueue(apply("c/ns/b", "h1"), now);
        s.enqueue(uninstall("c/ns/gone"), now);
        s.enqueue(uninstall("d/ns/gone"), now);
        let mut order = Vec::new();
        while let Some((job, attempt, _)) = s.start_next(now) {
            order.push(job.key().to_string());
            s.finish(&job, attempt, &Outcome::Uninstalled, now);
        }
        assert_eq!(order, ["c/ns/gone", "d/ns/gone", "c/ns/a", "c/ns/b"]);
    }

    #[test]
    fn an_owners_clusters_take_turns() {
        let mut s = state(1, 1);
        let now = Instant::now();
        for key in ["c-1/ns/a", "c-1/ns/b", "c-1/ns/c", "c-2/ns/a", "c-3/ns/a"] {
            s.enqueue(apply(key, "h1"), now);
        }
        let mut order = Vec::new();
        while let Some((job, attempt, _)) = s.start_next(now) {
            order.push(job.key().to_string());
            s.finish(&job, attempt, &Outcome::Uninstalled, now);
        }
        assert_eq!(
            order,
            ["c-1/ns/a", "c-2/ns/a", "c-3/ns/a", "c-1/ns/b", "c-1/ns/c"]
        );
    }

    #[test]
    fn an_owners_cap_holds_and_frees_as_its_jobs_finish() {
        let mut s = capped(4, 4, 2);
        let now = Instant::now();
        wave(&mut s, "a", 5, now);
        let started = start_all(&mut s, now);
        assert_eq!(started, ["c-0/a-0/app", "c-1/a-1/app"]);
        s.enqueue(by("b", apply("c-0/b/app", "h1")), now);
        assert_eq!(start_all(&mut s, now), ["c-0/b/app"]);
        s.finish(
            &by("a", apply(&started[0], "h1")),
            1,
            &Outcome::Uninstalled,
            now,
        );
        assert_eq!(start_all(&mut s, now), ["c-2/a-2/app"]);
        assert_eq!(s.running.len(), 3, "a worker is left for other owners");
        assert_consistent(&s);
    }

    #[test]
    fn the_cluster_cap_holds_across_owners() {
        let mut s = state(4, 1);
        let now = Instant::now();
        s.enqueue(by("a", apply("c/a/app", "h1")), now);
        s.enqueue(by("b", apply("c/b/app", "h1")), now);
        s.enqueue(by("b", apply("d/b/app", "h1")), now);
        assert_eq!(start_all(&mut s, now), ["c/a/app", "d/b/app"]);
        s.finish(
            &by("a", apply("c/a/app", "h1")),
            1,
            &Outcome::Uninstalled,
            now,
        );
        assert_eq!(start_all(&mut s, now), ["c/b/app"]);
        assert_consistent(&s);
    }

    #[test]
    fn every_enqueued_job_starts_and_succeeds_exactly_once_whatever_the_interleaving() {
        // A small deterministic generator (xorshift), so a failure reproduces.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for round in 0..8 {
            let mut s = capped(1 + next(5), 1 + next(2), next(3));
            let mut now = Instant::now();
            let mut jobs = Vec::new();
            for i in 0..200 {
                let key = format!("c-{}/ns-{}/r-{i}", next(4), next(3));
                let job = apply(&key, "h1");
                let job = if next(3) == 0 { uninstall(&key) } else { job };
                jobs.push(by(&format!("o-{}", next(5)), job));
            }
            let mut pending = jobs.clone();
            let (mut running, mut succeeded): (Vec<(Job, u32)>, HashMap<ReleaseKey, u32>) =
                (Vec::new(), HashMap::new());
            while !(pending.is_empty() && running.is_empty() && s.waiting.is_empty()) {
                match next(4) {
                    0 if !pending.is_empty() => {
                        let job = pending.swap_remove(next(pending.len()));
                        s.enqueue(job.clone(), now);
                        // Asking again for the same thing changes nothing.
                        assert_ne!(s.enqueue(job, now), Enqueued::Added);
                    }
                    1 if !running.is_empty() => {
                        let (job, attempt) = running.swap_remove(next(running.len()));
                        let outcome = if next(4) == 0 {
                            failed(true)
                        } else {
                            Outcome::Uninstalled
                        };
                        if s.finish(&job, attempt, &outcome, now) == Finished::Done {
                            *succeeded.entry(job.key().clone()).or_default() += 1;
                        }
                    }
                    _ => {
                        running.extend(
                            std::iter::from_fn(|| s.start_next(now)).map(|(j, a, _)| (j, a)),
                        );
                        if running.is_empty() && pending.is_empty() {
                            now = s.next_wake(now).expect("something is backing off");
                        }
                    }
                }
                assert_consistent(&s);
            }
            assert_eq!(succeeded.len(), jobs.len(), "round {round}");
            assert!(succeeded.values().all(|n| *n == 1), "round {round}");
            assert!(s.owners.is_empty() && s.tenants.is_empty() && s.turns.is_empty());
            assert!(s.timers.is_empty());
        }
    }

    #[test]
    fn jobs_start_in_the_order_first_enqueued() {
        let mut s = state(10, 10);
        let now = Instant::now();
        for key in ["c-1/ns/b", "c-2/ns/a", "c-1/ns/c"] {
            assert_eq!(s.enqueue(apply(key, "h1"), now), Enqueued::Added);
        }
        assert_eq!(s.enqueue(apply("c-2/ns/a", "h2"), now), Enqueued::Replaced);
        assert_eq!(start_all(&mut s, now), ["c-1/ns/b", "c-2/ns/a", "c-1/ns/c"]);
    }

    #[test]
    fn a_different_job_for_a_queued_key_replaces_it_in_place() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        s.enqueue(apply("c/ns/b", "h1"), now);
        assert_eq!(s.enqueue(uninstall("c/ns/a"), now), Enqueued::Replaced);
        let (job, attempt, _) = s.start_next(now).unwrap();
        assert_eq!((job, attempt), (uninstall("c/ns/a"), 1));
    }

    #[test]
    fn an_equal_job_for_a_queued_key_leaves_its_backoff_and_attempts_alone() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        let delay = delay(s.finish(&job, attempt, &failed(true), now));
        assert_eq!(
            s.enqueue(apply("c/ns/a", "h1"), now),
            Enqueued::AlreadyQueued
        );
        assert_eq!(queued(&s), [("c/ns/a".into(), "apply:h1".into(), 1)]);
        assert!(s.start_next(now + delay / 2).is_none());
        assert_eq!(s.start_next(now + delay).unwrap().1, 2);
    }

    #[test]
    fn a_changed_job_for_a_backing_off_key_starts_afresh_at_once() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        delay(s.finish(&job, attempt, &failed(true), now));
        assert_eq!(s.enqueue(apply("c/ns/a", "h2"), now), Enqueued::Replaced);
        assert_eq!(
            s.start_next(now),
            Some((apply("c/ns/a", "h2"), 1, Duration::ZERO))
        );
    }

    #[test]
    fn a_job_equal_to_the_running_one_is_dropped() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        s.start_next(now).unwrap();
        assert_eq!(
            s.enqueue(apply("c/ns/a", "h1"), now),
            Enqueued::AlreadyRunning
        );
        assert!(s.waiting.is_empty());
    }

    #[test]
    fn a_changed_job_for_a_running_key_starts_only_after_the_running_one_completes() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        assert_eq!(s.enqueue(apply("c/ns/a", "h2"), now), Enqueued::Added);
        assert!(s.start_next(now).is_none());
        assert_eq!(
            s.finish(&job, attempt, &Outcome::Uninstalled, now),
            Finished::Done
        );
        assert_eq!(
            s.start_next(now),
            Some((apply("c/ns/a", "h2"), 1, Duration::ZERO))
        );
    }

    #[test]
    fn returning_to_the_running_state_drops_the_stale_queued_job() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        s.start_next(now).unwrap();
        s.enqueue(apply("c/ns/a", "h2"), now);
        assert_eq!(
            s.enqueue(apply("c/ns/a", "h1"), now),
            Enqueued::AlreadyRunning
        );
        assert!(s.waiting.is_empty());
    }

    #[test]
    fn no_more_than_the_workers_run_at_once() {
        let mut s = state(2, 10);
        let now = Instant::now();
        for key in ["c-1/ns/a", "c-2/ns/a", "c-3/ns/a"] {
            s.enqueue(apply(key, "h1"), now);
        }
        assert_eq!(start_all(&mut s, now), ["c-1/ns/a", "c-2/ns/a"]);
        s.finish(&apply("c-1/ns/a", "h1"), 1, &Outcome::Uninstalled, now);
        assert_eq!(start_all(&mut s, now), ["c-3/ns/a"]);
    }

    #[test]
    fn a_capped_cluster_is_skipped_and_later_jobs_of_other_clusters_start() {
        let mut s = state(4, 2);
        let now = Instant::now();
        for key in [
            "slow/ns/a",
            "slow/ns/b",
            "slow/ns/c",
            "fast/ns/a",
            "slow/ns/d",
            "fast/ns/b",
        ] {
            s.enqueue(apply(key, "h1"), now);
        }
        // The clusters take turns; the slow one stops at its cap of two.
        assert_eq!(
            start_all(&mut s, now),
            ["slow/ns/a", "fast/ns/a", "slow/ns/b", "fast/ns/b"]
        );
        s.finish(&apply("slow/ns/a", "h1"), 1, &Outcome::Uninstalled, now);
        assert_eq!(start_all(&mut s, now), ["slow/ns/c"]);
    }

    #[test]
    fn a_retryable_failure_goes_to_the_back_and_waits_out_its_backoff() {
        let mut s = state(1, 1);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        s.enqueue(apply("c/ns/b", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        let delay = delay(s.finish(&job, attempt, &failed(true), now));
        assert_eq!(delay, s.backoff(job.key(), 1));
        assert_eq!(queued(&s)[1], ("c/ns/a".into(), "apply:h1".into(), 1));
        assert_eq!(start_all(&mut s, now), ["c/ns/b"]);
        s.finish(&apply("c/ns/b", "h1"), 1, &Outcome::Uninstalled, now);
        assert!(
            s.start_next(now + delay - Duration::from_millis(1))
                .is_none()
        );
        assert_eq!(s.start_next(now + delay), Some((job, 2, Duration::ZERO)));
    }

    #[test]
    fn backoff_doubles_per_attempt_within_a_fifth_either_way_and_is_capped() {
        let s = state(1, 1);
        let key: ReleaseKey = "c/ns/a".parse().unwrap();
        for attempt in 1..=8 {
            let nominal = Duration::from_secs(1 << (attempt - 1));
            let delay = s.backoff(&key, attempt);
            assert!(
                delay >= nominal.mul_f64(0.8) && delay <= nominal.mul_f64(1.2),
                "{attempt}: {delay:?}"
            );
            assert_eq!(delay, s.backoff(&key, attempt), "jitter is deterministic");
        }
        let far = s.backoff(&key, 40);
        assert!(
            far <= Duration::from_secs(300) && far >= Duration::from_secs(240),
            "{far:?}"
        );
        let other: ReleaseKey = "c/ns/b".parse().unwrap();
        assert_ne!(
            s.backoff(&key, 3),
            s.backoff(&other, 3),
            "keys are spread apart"
        );
    }

    #[test]
    fn a_failure_is_dropped_when_a_newer_job_arrived_while_it_ran() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        s.enqueue(apply("c/ns/a", "h2"), now);
        assert_eq!(s.finish(&job, attempt, &failed(true), now), Finished::Done);
        assert_eq!(queued(&s), [("c/ns/a".into(), "apply:h2".into(), 0)]);
    }

    #[test]
    fn a_failure_retrying_cannot_fix_is_not_requeued() {
        let mut s = state(10, 10);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        assert_eq!(s.finish(&job, attempt, &failed(false), now), Finished::Done);
        assert!(s.waiting.is_empty() && s.running.is_empty());
    }

    #[test]
    fn a_transient_failure_is_stalled_after_the_attempt_cap_and_a_new_spec_starts_afresh() {
        let mut s = State::new(QueueConfig {
            max_attempts: 3,
            ..QueueConfig::default()
        });
        let mut now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let mut outcomes = Vec::new();
        while let Some((job, attempt, _)) = s.start_next(now) {
            let finished = s.finish(&job, attempt, &failed(true), now);
            outcomes.push(finished);
            if let Finished::Retry(d) = finished {
                now += d;
            }
        }
        assert_eq!(outcomes.len(), 3, "{outcomes:?}");
        assert_eq!(outcomes[2], Finished::Stalled);
        assert!(s.waiting.is_empty(), "a stalled job is not re-queued");
        s.enqueue(apply("c/ns/a", "h2"), now);
        assert_eq!(
            s.start_next(now).unwrap().1,
            1,
            "a changed spec counts from one"
        );
    }

    #[test]
    fn an_unreachable_cluster_does_not_use_up_tries() {
        let mut s = State::new(QueueConfig {
            max_attempts: 2,
            ..QueueConfig::default()
        });
        let mut now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        let down = Outcome::failed("unreachable", FailureKind::Unavailable);
        for _ in 0..10 {
            let (job, attempt, _) = s.start_next(now).expect("still queued");
            now += delay(s.finish(&job, attempt, &down, now));
        }
        let (job, attempt, _) = s.start_next(now).unwrap();
        assert_eq!(attempt, 1, "waiting for a cluster is no try");
        assert!(matches!(
            s.finish(&job, attempt, &failed(true), now),
            Finished::Retry(_)
        ));
    }

    #[test]
    fn jobs_the_newest_plan_no_longer_has_are_dropped_and_others_kept() {
        let mut s = state(1, 1);
        let now = Instant::now();
        let other = OwnerId {
            namespace: "default".into(),
            name: "b".into(),
        };
        s.enqueue(uninstall("c/ns/gone"), now);
        s.enqueue(apply("c/ns/kept", "h1"), now);
        s.enqueue(
            Job::Uninstall {
                key: "c/ns/theirs".parse().unwrap(),
                owner: other,
                identity: None,
            },
            now,
        );
        let kept: ReleaseKey = "c/ns/kept".parse().unwrap();
        assert_eq!(s.retain_planned(&owner(), &HashSet::from([&kept])), 1);
        assert_eq!(
            queued(&s).into_iter().map(|q| q.0).collect::<Vec<_>>(),
            ["c/ns/kept", "c/ns/theirs"]
        );
    }

    #[test]
    fn a_deletion_drops_queued_installs_but_not_uninstalls_and_sees_running_jobs() {
        let mut s = state(1, 1);
        let now = Instant::now();
        s.enqueue(apply("c/ns/running", "h1"), now);
        s.start_next(now).unwrap();
        s.enqueue(apply("c/ns/queued", "h1"), now);
        s.enqueue(uninstall("c/ns/old"), now);
        assert_eq!(s.drop_applies(&owner()), 1);
        assert_eq!(
            queued(&s).into_iter().map(|q| q.0).collect::<Vec<_>>(),
            ["c/ns/old"]
        );
        assert!(s.running.values().any(|(_, o)| *o == owner()));
    }

    #[test]
    fn the_next_wake_up_is_the_earliest_backoff_expiry_and_never_a_due_job() {
        let mut s = state(1, 1);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h1"), now);
        s.enqueue(apply("c/ns/b", "h1"), now);
        let (job, attempt, _) = s.start_next(now).unwrap();
        let delay = delay(s.finish(&job, attempt, &failed(true), now));
        s.start_next(now).unwrap();
        assert_eq!(s.next_wake(now), Some(now + delay));
        assert_eq!(s.next_wake(now + delay), None);
    }

    #[test]
    fn the_handle_tells_depth_running_jobs_and_busy_keys() {
        let queue = HelmQueue::new(QueueConfig::default());
        queue.enqueue(apply("c/ns/a", "h1"));
        queue.enqueue(apply("c/ns/b", "h1"));
        queue.lock().start_next(Instant::now()).unwrap();
        assert_eq!((queue.depth(), queue.running()), (1, 1));
        assert!(queue.is_busy(&"c/ns/a".parse().unwrap()));
        assert!(queue.is_busy(&"c/ns/b".parse().unwrap()));
        assert!(!queue.is_busy(&"c/ns/c".parse().unwrap()));
    }

    /// An executor that hands each job to the test and waits for the test's answer.
    struct Scripted {
        calls: mpsc::UnboundedSender<(Job, oneshot::Sender<Outcome>)>,
    }

    impl Executor for Scripted {
        async fn execute(&self, job: Job) -> Outcome {
            let (answer, outcome) = oneshot::channel();
            self.calls.send((job, answer)).expect("the test listens");
            outcome.await.unwrap_or(Outcome::Uninstalled)
        }
    }

    /// A running queue with its executor's calls and its reports.
    struct Harness {
        queue: HelmQueue,
        calls: mpsc::UnboundedReceiver<(Job, oneshot::Sender<Outcome>)>,
        done: mpsc::Receiver<Completed>,
        cancel: CancellationToken,
        run: tokio::task::JoinHandle<()>,
    }

    impl Harness {
        fn start(config: QueueConfig) -> Self {
            let queue = HelmQueue::new(config);
            let (calls_tx, calls) = mpsc::unbounded_channel();
            let (done_tx, done) = mpsc::channel(64);
            let cancel = CancellationToken::new();
            let executor = Arc::new(Scripted { calls: calls_tx });
            let run = tokio::spawn({
                let (queue, cancel) = (queue.clone(), cancel.clone());
                async move { queue.run(executor, done_tx, cancel).await }
            });
            Self {
                queue,
                calls,
                done,
                cancel,
                run,
            }
        }

        async fn call(&mut self) -> (Job, oneshot::Sender<Outcome>) {
            within(self.calls.recv())
                .await
                .expect("the executor is called")
        }

        async fn completed(&mut self) -> Completed {
            within(self.done.recv()).await.expect("a job completes")
        }
    }

    /// Waits for `f` with a deadline far beyond any delay in these tests.
    async fn within<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(3600), f)
            .await
            .expect("in time")
    }

    #[tokio::test(start_paused = true)]
    async fn run_starts_jobs_as_they_are_enqueued_and_reports_them() {
        let mut h = Harness::start(QueueConfig::default());
        h.queue.enqueue(apply("c/ns/a", "h1"));
        let (job, answer) = h.call().await;
        assert_eq!(job, apply("c/ns/a", "h1"));
        tokio::time::advance(Duration::from_secs(5)).await;
        let applied = Outcome::Applied {
            revision: 2,
            chart_version: "0.1.0".into(),
        };
        answer.send(applied.clone()).unwrap();
        let completed = h.completed().await;
        assert_eq!((completed.outcome, completed.attempt), (applied, 1));
        assert_eq!(
            (completed.elapsed, completed.next_retry),
            (Duration::from_secs(5), None)
        );
        assert!(!h.queue.is_busy(job.key()));
    }

    #[tokio::test(start_paused = true)]
    async fn run_retries_a_failed_job_exactly_when_its_backoff_expires() {
        let mut h = Harness::start(QueueConfig::default());
        h.queue.enqueue(apply("c/ns/a", "h1"));
        let (_, answer) = h.call().await;
        answer.send(failed(true)).unwrap();
        let delay = h.completed().await.next_retry.expect("re-queued");
        let failed_at = Instant::now();
        let (job, answer) = h.call().await;
        let waited = Instant::now() - failed_at;
        // Tokio's timers tick in whole milliseconds.
        assert!(
            waited >= delay && waited - delay < Duration::from_millis(1),
            "{waited:?} for {delay:?}"
        );
        answer.send(Outcome::Uninstalled).unwrap();
        assert_eq!(
            (h.completed().await.attempt, job),
            (2, apply("c/ns/a", "h1"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_lets_running_jobs_finish_and_starts_nothing_new() {
        let mut h = Harness::start(QueueConfig {
            workers: 1,
            ..QueueConfig::default()
        });
        h.queue.enqueue(apply("c/ns/a", "h1"));
        let (_, answer) = h.call().await;
        h.queue.enqueue(apply("c/ns/b", "h1"));
        h.cancel.cancel();
        tokio::time::advance(Duration::from_secs(10)).await;
        answer.send(Outcome::Uninstalled).unwrap();
        within(&mut h.run).await.unwrap();
        assert_eq!(h.completed().await.job, apply("c/ns/a", "h1"));
        assert!(h.calls.try_recv().is_err(), "the queued job never started");
        assert_eq!(h.queue.depth(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_never_finishes_is_abandoned_after_the_grace_and_run_returns() {
        let mut h = Harness::start(QueueConfig::default());
        h.queue.enqueue(apply("c/ns/a", "h1"));
        let (_, _never_answered) = h.call().await;
        let cancelled_at = Instant::now();
        h.cancel.cancel();
        within(&mut h.run).await.unwrap();
        assert_eq!(
            Instant::now() - cancelled_at,
            QueueConfig::default().shutdown_grace
        );
        assert!(h.done.try_recv().is_err());
        assert_eq!(h.queue.running(), 0);
    }

    #[test]
    fn expediting_a_cluster_ends_the_backoff_of_its_jobs_only() {
        let mut state = state(4, 2);
        let now = Instant::now();
        let down = Outcome::failed("unreachable", FailureKind::Unavailable);
        for key in ["member-1/ns/a", "member-2/ns/b"] {
            state.enqueue(apply(key, "h"), now);
            let (job, attempt, _) = state.start_next(now).unwrap();
            delay(state.finish(&job, attempt, &down, now));
        }
        assert_eq!(state.expedite(&"member-1".parse().unwrap(), now), 1);
        assert_eq!(start_all(&mut state, now), ["member-1/ns/a"]);
        assert_eq!(state.expedite(&"member-1".parse().unwrap(), now), 0);
    }

    #[test]
    fn a_started_job_tells_how_long_it_waited_once_eligible() {
        let mut s = state(1, 1);
        let now = Instant::now();
        s.enqueue(apply("c/ns/a", "h"), now);
        let (_, _, waited) = s.start_next(now + Duration::from_secs(3)).unwrap();
        assert_eq!(waited, Duration::from_secs(3));
    }
}
