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

pub(crate) mod crds;
pub(crate) mod failure;
pub(crate) mod handle;
pub(crate) mod state;
pub(crate) mod turns;

use std::{hash::Hash, time::Duration};

use crate::plan::Job;

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
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// Installed or upgraded.
    Applied {
        /// Helm revision now deployed.
        revision: i64,
        /// Chart version now deployed.
        chart_version: String,
        /// The chart's tests run after it, when its entry asks for them, and how each ended.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tests: Vec<TestResult>,
        /// What became of the chart's CRDs, when it brings some and the Helm executor ran it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        crds: Option<crds::CrdReport>,
        /// When this revision took over a release tenancy-hub did not own: the labels of its
        /// previous record (its former owner's), in words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        adopted_from: Option<String>,
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

/// One of a chart's tests (`helm test`) and how its run ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TestResult {
    /// The name of its object (a Pod or a Job) in the chart.
    pub name: String,
    /// `Succeeded`, `Failed`, or `Unknown` when it did not end.
    pub phase: String,
}

/// What kind of failure a job met, which decides whether and how it is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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
    /// The outcome with what `masked` holds replaced in its message.
    pub(crate) fn masked(self, masked: &crate::plan::Masked) -> Self {
        match self {
            Outcome::Failed { message, kind } if !masked.is_empty() => Outcome::Failed {
                message: masked.redact(&message),
                kind,
            },
            other => other,
        }
    }

    /// A failure of the given kind.
    pub(crate) fn failed(message: impl Into<String>, kind: FailureKind) -> Self {
        Outcome::Failed {
            message: message.into(),
            kind,
        }
    }
}

/// How a job went once a worker started it: to its end, or handed over to a member that answers
/// later (a pull member's agent), whose answer is awaited without holding the worker.
pub(crate) enum Started {
    /// The job ran to its end.
    Finished(Outcome),
    /// The job was handed over; this is its answer, with its own deadline.
    Awaiting(futures::future::BoxFuture<'static, Outcome>),
}

impl Started {
    /// The same start with `f` applied to its outcome, now or when it is answered.
    pub(crate) fn map(self, f: impl FnOnce(Outcome) -> Outcome + Send + 'static) -> Self {
        use futures::FutureExt as _;
        match self {
            Started::Finished(outcome) => Started::Finished(f(outcome)),
            Started::Awaiting(answer) => Started::Awaiting(answer.map(f).boxed()),
        }
    }

    /// The outcome, waiting for the answer of a job handed over.
    pub(crate) async fn outcome(self) -> Outcome {
        match self {
            Started::Finished(outcome) => outcome,
            Started::Awaiting(answer) => answer.await,
        }
    }
}

/// Runs one job. Implemented by the Helm executor; the only place processes are spawned.
pub(crate) trait Executor: Send + Sync + 'static {
    /// Carries out `job` and tells how it went.
    fn execute(&self, job: Job) -> impl std::future::Future<Output = Outcome> + Send;

    /// Starts `job`: what needs a worker runs now; a job handed over to a member that answers
    /// later returns its answer to await. By default the whole job runs now.
    fn start(&self, job: Job) -> impl std::future::Future<Output = Started> + Send {
        async move { Started::Finished(self.execute(job).await) }
    }
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

#[cfg(test)]
mod tests;
