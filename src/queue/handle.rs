//! The shared handle to the queue and the workers that run its jobs.

use std::{
    collections::HashSet,
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
    queue::state::{Finished, State},
    queue::{Completed, Enqueued, Executor, FailureKind, Outcome, QueueConfig, Started},
};

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

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
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

    /// True when a job for this key is running (handed over to a member that answers later
    /// included): a newer plan does not drop it.
    pub(crate) fn is_running(&self, key: &ReleaseKey) -> bool {
        self.lock().running.contains_key(key)
    }

    /// True when a job for this key is queued or running.
    pub(crate) fn is_busy(&self, key: &ReleaseKey) -> bool {
        let state = self.lock();
        state.running.contains_key(key) || state.waiting.contains_key(key)
    }

    /// Runs jobs until `cancel` fires; then starts nothing new, waits up to shutdown_grace for running jobs, and drops (aborts) the rest. Each finished job is sent on `done` (ignore send errors).
    ///
    /// A job handed over to a member that answers later frees its worker at once; its answer is
    /// awaited beside the workers, its key busy meanwhile. At shutdown those are dropped at once:
    /// they hold nothing here, and the next leader publishes the same work again.
    pub(crate) async fn run<E: Executor>(
        &self,
        executor: Arc<E>,
        done: Sender<Completed>,
        cancel: CancellationToken,
    ) {
        let mut tasks = JoinSet::new();
        let mut awaiting = JoinSet::new();
        while !cancel.is_cancelled() {
            let now = Instant::now();
            self.start_ready(&executor, &mut tasks, now);
            let wake = self.lock().next_wake(now);
            tokio::select! {
                biased;
                () = cancel.cancelled() => {}
                Some(joined) = tasks.join_next() => match joined {
                    Ok(Ran::HandedOver(handed)) => {
                        self.lock().hand_over(handed.job.key());
                        awaiting.spawn(handed.answer());
                    }
                    Ok(Ran::Finished(completed)) => self.complete(Ok(completed), &done).await,
                    Err(e) => self.complete(Err(e), &done).await,
                },
                Some(joined) = awaiting.join_next() => self.complete(joined, &done).await,
                () = self.wake.notified() => {}
                () = sleep_until(wake) => {}
            }
        }
        awaiting.abort_all();
        self.lock().abandon_awaiting(Instant::now());
        self.shut_down(tasks, &done).await;
    }

    fn start_ready<E: Executor>(&self, executor: &Arc<E>, tasks: &mut JoinSet<Ran>, now: Instant) {
        let ready: Vec<_> = {
            let mut state = self.lock();
            std::iter::from_fn(|| state.start_next(now)).collect()
        };
        for (job, attempt, waited) in ready {
            let span = job_span(job.key());
            tasks.spawn(start(executor.clone(), job, attempt, waited).instrument(span));
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

    async fn shut_down(&self, mut tasks: JoinSet<Ran>, done: &Sender<Completed>) {
        let grace = self.lock().config.shutdown_grace;
        let drain = async {
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    // Handed over as the workers stop: dropped like the others awaiting.
                    Ok(Ran::HandedOver(handed)) => {
                        self.lock().release(handed.job.key(), Instant::now())
                    }
                    Ok(Ran::Finished(completed)) => self.complete(Ok(completed), done).await,
                    Err(e) => self.complete(Err(e), done).await,
                }
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

/// What a worker's task came to.
enum Ran {
    /// The job ran to its end.
    Finished(Completed),
    /// The job was handed over; its answer is still to come.
    HandedOver(HandedOver),
}

/// A job handed over to a member that answers later, and its answer to await.
struct HandedOver {
    job: Job,
    attempt: u32,
    waited: Duration,
    started: Instant,
    answer: futures::future::BoxFuture<'static, Outcome>,
}

impl HandedOver {
    /// Awaits the answer (which has its own deadline), in the job's span.
    fn answer(self) -> impl std::future::Future<Output = Completed> + Send + 'static {
        let span = job_span(self.job.key());
        async move {
            let outcome = caught(self.answer).await;
            Completed {
                job: self.job,
                outcome,
                attempt: self.attempt,
                waited: self.waited,
                elapsed: self.started.elapsed(),
                next_retry: None,
                stalled: false,
            }
        }
        .instrument(span)
    }
}

/// The span of one job's work.
fn job_span(key: &ReleaseKey) -> tracing::Span {
    tracing::info_span!(
        "helm_job",
        cluster = %key.scope.cluster,
        namespace = %key.scope.namespace,
        release = %key.release,
    )
}

/// The outcome of `run`, a panic turned into a retryable failure.
async fn caught(run: impl std::future::Future<Output = Outcome>) -> Outcome {
    AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| panicked())
}

/// What a job whose executor panicked came to.
fn panicked() -> Outcome {
    Outcome::failed("the Helm executor panicked", FailureKind::Transient)
}

/// Starts one job: runs it to its end, or until it is handed over.
async fn start<E: Executor>(executor: Arc<E>, job: Job, attempt: u32, waited: Duration) -> Ran {
    let started = Instant::now();
    let run = AssertUnwindSafe(executor.start(job.clone().at_try(attempt)))
        .catch_unwind()
        .await;
    let outcome = match run {
        Ok(Started::Awaiting(answer)) => {
            return Ran::HandedOver(HandedOver {
                job,
                attempt,
                waited,
                started,
                answer,
            });
        }
        Ok(Started::Finished(outcome)) => outcome,
        Err(_) => panicked(),
    };
    Ran::Finished(Completed {
        job,
        outcome,
        attempt,
        waited,
        elapsed: started.elapsed(),
        next_retry: None,
        stalled: false,
    })
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
