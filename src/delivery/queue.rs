//! The central FIFO of Helm jobs for all clusters: keyed, coalescing, per-key exclusive, per-cluster capped, with backoff.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::{DefaultHasher, Hash, Hasher},
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
    delivery::plan::{Job, OwnerId},
};

/// How the queue runs.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Jobs running at once, over all clusters.
    pub workers: usize,
    /// Jobs running at once in one cluster.
    pub per_cluster: usize,
    /// Delay before the first retry of a failed job.
    pub backoff_base: Duration,
    /// Longest delay between retries.
    pub backoff_max: Duration,
    /// How long shutdown waits for running jobs before abandoning them.
    pub shutdown_grace: Duration,
    /// Tries of a job failing with a transient error before it is stalled until the spec changes.
    pub max_attempts: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            workers: 4,
            per_cluster: 2,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(30),
            max_attempts: 6,
        }
    }
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
    pub fn failed(message: impl Into<String>, kind: FailureKind) -> Self {
        Outcome::Failed {
            message: message.into(),
            kind,
        }
    }
}

/// Runs one job. Implemented by the Helm executor; the only place processes are spawned.
pub trait Executor: Send + Sync + 'static {
    /// Carries out `job` and tells how it went.
    fn execute(&self, job: Job) -> impl std::future::Future<Output = Outcome> + Send;
}

/// A finished job, reported to whoever reconciles its owner.
#[derive(Clone, Debug)]
pub struct Completed {
    /// The job that ran.
    pub job: Job,
    /// How it went.
    pub outcome: Outcome,
    /// Which try this was, counting from 1.
    pub attempt: u32,
    /// How long it waited in the queue once eligible (backoff not counted).
    pub waited: Duration,
    /// How long it ran.
    pub elapsed: Duration,
    /// The delay before it runs again, when it was re-queued.
    pub next_retry: Option<Duration>,
    /// True when it failed transiently as often as allowed and is not tried again until the spec changes.
    pub stalled: bool,
}

/// What enqueueing did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
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

/// A job waiting its turn.
#[derive(Debug)]
struct Waiting {
    job: Job,
    fingerprint: String,
    /// Tries made so far.
    attempts: u32,
    not_before: Instant,
}

/// The queue's bookkeeping, free of any runtime so it is tested with explicit instants.
#[derive(Debug)]
struct State {
    config: QueueConfig,
    waiting: VecDeque<Waiting>,
    /// Fingerprints and owners of the running jobs, by key.
    running: HashMap<ReleaseKey, (String, OwnerId)>,
}

impl State {
    fn new(config: QueueConfig) -> Self {
        Self {
            config,
            waiting: VecDeque::new(),
            running: HashMap::new(),
        }
    }

    /// Makes every waiting job of `cluster` eligible at once.
    fn expedite(&mut self, cluster: &ClusterName, now: Instant) -> usize {
        let mut count = 0;
        for w in self
            .waiting
            .iter_mut()
            .filter(|w| &w.job.key().scope.cluster == cluster)
        {
            if w.not_before > now {
                w.not_before = now;
                count += 1;
            }
        }
        count
    }

    fn position(&self, key: &ReleaseKey) -> Option<usize> {
        self.waiting.iter().position(|w| w.job.key() == key)
    }

    fn enqueue(&mut self, job: Job, now: Instant) -> Enqueued {
        let fingerprint = job.fingerprint();
        let queued = self.position(job.key());
        if self.running.get(job.key()).map(|r| &r.0) == Some(&fingerprint) {
            // The running job already heads for this state; a different queued one is stale.
            if let Some(i) = queued {
                self.waiting.remove(i);
            }
            return Enqueued::AlreadyRunning;
        }
        let entry = Waiting {
            job,
            fingerprint,
            attempts: 0,
            not_before: now,
        };
        match queued {
            Some(i) if self.waiting[i].fingerprint == entry.fingerprint => Enqueued::AlreadyQueued,
            Some(i) => {
                self.waiting[i] = entry;
                Enqueued::Replaced
            }
            None => {
                self.waiting.push_back(entry);
                Enqueued::Added
            }
        }
    }

    fn running_in(&self, key: &ReleaseKey) -> usize {
        let cluster = &key.scope.cluster;
        self.running
            .keys()
            .filter(|k| k.scope.cluster == *cluster)
            .count()
    }

    /// Takes the first job allowed to start now and marks it running; returns it with its attempt number.
    /// Starts the first eligible job: the job, its try number, and how long it waited once eligible.
    fn start_next(&mut self, now: Instant) -> Option<(Job, u32, Duration)> {
        if self.running.len() >= self.config.workers {
            return None;
        }
        let i = self.waiting.iter().position(|w| {
            let key = w.job.key();
            w.not_before <= now
                && !self.running.contains_key(key)
                && self.running_in(key) < self.config.per_cluster
        })?;
        let w = self.waiting.remove(i)?;
        self.running
            .insert(w.job.key().clone(), (w.fingerprint, w.job.owner().clone()));
        Some((
            w.job,
            w.attempts + 1,
            now.saturating_duration_since(w.not_before),
        ))
    }

    /// Records a finished job; re-queues a retryable failure and returns its delay, or says the
    /// job is stalled because it failed transiently `max_attempts` times. A job that found its
    /// cluster unreachable waits without using up a try.
    fn finish(&mut self, job: &Job, attempt: u32, outcome: &Outcome, now: Instant) -> Finished {
        let key = job.key();
        self.running.remove(key);
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
        if self.position(key).is_some() {
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
        self.waiting.push_back(Waiting {
            job: job.clone(),
            fingerprint: job.fingerprint(),
            attempts,
            not_before: now + delay,
        });
        Finished::Retry(delay)
    }

    /// Drops the waiting jobs of `owner` whose key the owner's newest plan has no job for.
    fn retain_planned(&mut self, owner: &OwnerId, planned: &HashSet<&ReleaseKey>) -> usize {
        let before = self.waiting.len();
        self.waiting
            .retain(|w| w.job.owner() != owner || planned.contains(w.job.key()));
        before - self.waiting.len()
    }

    /// Drops every waiting install or upgrade of `owner`.
    fn drop_applies(&mut self, owner: &OwnerId) -> usize {
        let before = self.waiting.len();
        self.waiting
            .retain(|w| w.job.owner() != owner || matches!(w.job, Job::Uninstall { .. }));
        before - self.waiting.len()
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
        self.waiting
            .iter()
            .map(|w| w.not_before)
            .filter(|t| *t > now)
            .min()
    }
}

/// Handle to the queue; cheap to clone.
#[derive(Clone)]
pub struct HelmQueue {
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
}

impl HelmQueue {
    /// An empty queue.
    pub fn new(config: QueueConfig) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new(config))),
            wake: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("queue lock")
    }

    /// Queues `job`, coalescing it with what is queued or running for its key.
    pub fn enqueue(&self, job: Job) -> Enqueued {
        let enqueued = self.lock().enqueue(job, Instant::now());
        self.wake.notify_one();
        enqueued
    }

    /// Ends the backoff of every waiting job of a cluster, for example when it becomes reachable
    /// again; returns how many jobs were waiting out a backoff.
    pub fn expedite(&self, cluster: &ClusterName) -> usize {
        let count = self.lock().expedite(cluster, Instant::now());
        self.wake.notify_one();
        count
    }

    /// Jobs waiting (not running).
    pub fn depth(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Jobs running now.
    pub fn running(&self) -> usize {
        self.lock().running.len()
    }

    /// Keeps only the waiting jobs of `owner` that its newest plan still has (by key); returns
    /// how many were dropped. A job already running goes on.
    pub fn retain_planned(&self, owner: &OwnerId, planned: &HashSet<&ReleaseKey>) -> usize {
        self.lock().retain_planned(owner, planned)
    }

    /// Drops every waiting install or upgrade of `owner`, for example when it is being deleted.
    pub fn drop_applies(&self, owner: &OwnerId) -> usize {
        self.lock().drop_applies(owner)
    }

    /// The releases of `owner` with a job running now.
    pub fn running_for(&self, owner: &OwnerId) -> Vec<ReleaseKey> {
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
    pub fn is_busy(&self, key: &ReleaseKey) -> bool {
        let state = self.lock();
        state.running.contains_key(key) || state.position(key).is_some()
    }

    /// Runs jobs until `cancel` fires; then starts nothing new, waits up to shutdown_grace for running jobs, and drops (aborts) the rest. Each finished job is sent on `done` (ignore send errors).
    pub async fn run<E: Executor>(
        &self,
        executor: Arc<E>,
        done: Sender<Completed>,
        cancel: CancellationToken,
    ) {
        let mut tasks = JoinSet::new();
        while !cancel.is_cancelled() {
            self.start_ready(&executor, &mut tasks);
            let wake = self.lock().next_wake(Instant::now());
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

    fn start_ready<E: Executor>(&self, executor: &Arc<E>, tasks: &mut JoinSet<Completed>) {
        let now = Instant::now();
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
            self.lock().running.clear();
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
    use crate::delivery::plan::{ChartSource, OwnerId, Release};

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

    fn state(workers: usize, per_cluster: usize) -> State {
        State::new(QueueConfig {
            workers,
            per_cluster,
            ..QueueConfig::default()
        })
    }

    /// Starts every job allowed at `now`, naming each by its key.
    fn start_all(state: &mut State, now: Instant) -> Vec<String> {
        std::iter::from_fn(|| state.start_next(now))
            .map(|(job, _, _)| job.key().to_string())
            .collect()
    }

    fn queued(state: &State) -> Vec<(String, String, u32)> {
        state
            .waiting
            .iter()
            .map(|w| (w.job.key().to_string(), w.fingerprint.clone(), w.attempts))
            .collect()
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
        assert_eq!(
            start_all(&mut s, now),
            ["slow/ns/a", "slow/ns/b", "fast/ns/a", "fast/ns/b"]
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
        state.enqueue(apply("member-1/ns/a", "h"), now);
        state.enqueue(apply("member-2/ns/b", "h"), now);
        for w in state.waiting.iter_mut() {
            w.not_before = now + Duration::from_secs(300);
        }
        assert_eq!(state.expedite(&"member-1".parse().unwrap(), now), 1);
        assert_eq!(start_all(&mut state, now), ["member-1/ns/a"]);
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
