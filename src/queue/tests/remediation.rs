//! Tests of the queue trying a failed apply again as its chart entry's remediation asks: retries whatever failed, the cap they raise, and each try's remediation as the executor receives it.

use super::*;
use crate::{
    api::crd::{InstallRemediation, RemediationStrategy, UpgradeRemediation},
    plan::remediation::Remediate,
};

/// `apply(key, hash)` planned as an install (or upgrade) whose entry sets `retries`.
fn retrying(key: &str, installing: bool, retries: i32, last: Option<bool>) -> Job {
    let mut job = apply(key, "h1");
    if let Job::Apply {
        release,
        installing: planned,
        ..
    } = &mut job
    {
        *planned = installing;
        release.helm.install.remediation = Some(InstallRemediation {
            retries: Some(retries),
            remediate_last_failure: last,
        });
        release.helm.upgrade.remediation = Some(UpgradeRemediation {
            retries: Some(retries),
            remediate_last_failure: last,
            strategy: None,
        });
    }
    job
}

/// Runs the queue's only job until it is no longer re-queued, failing each try with `outcome`;
/// how each try finished.
fn run_failing(s: &mut State, outcome: &Outcome) -> Vec<Finished> {
    let mut now = Instant::now();
    let mut finished = Vec::new();
    while let Some((job, attempt, _)) = s.start_next(now) {
        let f = s.finish(&job, attempt, outcome, now);
        finished.push(f);
        match f {
            Finished::Retry(d) => now += d,
            _ => break,
        }
        assert!(finished.len() < 1_000, "never ends: {finished:?}");
    }
    finished
}

#[test]
fn a_permanent_failure_is_tried_again_as_often_as_the_retries_say() {
    let mut s = state(1, 1);
    s.enqueue(retrying("c/ns/a", false, 2, None), Instant::now());
    let finished = run_failing(&mut s, &failed(false));
    assert_eq!(finished.len(), 3, "one try and two retries: {finished:?}");
    assert!(matches!(finished[0], Finished::Retry(_)));
    assert!(matches!(finished[1], Finished::Retry(_)));
    assert_eq!(finished[2], Finished::Done, "reported failed, not stalled");
    assert!(s.waiting.is_empty());
}

#[test]
fn an_install_takes_the_install_retries_and_an_upgrade_the_upgrades() {
    let mut job = retrying("c/ns/a", true, 1, None);
    if let Job::Apply { release, .. } = &mut job {
        release.helm.upgrade.remediation.as_mut().unwrap().retries = Some(4);
    }
    let mut s = state(1, 1);
    s.enqueue(job.clone(), Instant::now());
    assert_eq!(
        run_failing(&mut s, &failed(false)).len(),
        2,
        "install: 1 + 1"
    );
    if let Job::Apply { installing, .. } = &mut job {
        *installing = false;
    }
    let mut s = state(1, 1);
    s.enqueue(job, Instant::now());
    assert_eq!(
        run_failing(&mut s, &failed(false)).len(),
        5,
        "upgrade: 1 + 4"
    );
}

#[test]
fn retries_set_the_cap_of_transient_failures_too_in_place_of_the_queues() {
    let config = QueueConfig {
        max_attempts: 3,
        ..QueueConfig::default()
    };
    let mut s = State::new(config.clone());
    s.enqueue(retrying("c/ns/a", false, 5, None), Instant::now());
    let finished = run_failing(&mut s, &failed(true));
    assert_eq!(finished.len(), 6);
    assert_eq!(finished[5], Finished::Stalled);

    let mut s = State::new(config);
    s.enqueue(retrying("c/ns/a", false, 0, None), Instant::now());
    assert_eq!(
        run_failing(&mut s, &failed(true)),
        [Finished::Stalled],
        "one try"
    );
}

#[test]
fn minus_one_retries_until_the_spec_changes() {
    let mut s = state(1, 1);
    let mut now = Instant::now();
    s.enqueue(retrying("c/ns/a", false, -1, None), now);
    for _ in 0..50 {
        let (job, attempt, _) = s.start_next(now).expect("still queued");
        now += delay(s.finish(&job, attempt, &failed(false), now));
    }
    s.enqueue(apply("c/ns/a", "h2"), now);
    assert_eq!(s.start_next(now).unwrap().1, 1, "a new spec starts afresh");
}

#[test]
fn without_retries_a_permanent_failure_is_reported_at_once() {
    let mut s = state(1, 1);
    s.enqueue(apply("c/ns/a", "h1"), Instant::now());
    assert_eq!(run_failing(&mut s, &failed(false)), [Finished::Done]);
}

/// An executor that records which try each job was and what it was to do on failure, and fails.
#[derive(Default)]
struct Recording(std::sync::Mutex<Vec<(u32, Remediate)>>);

impl Executor for Recording {
    async fn execute(&self, job: Job) -> Outcome {
        let Job::Apply { attempt, .. } = &job else {
            unreachable!("only applies are queued here")
        };
        self.0.lock().unwrap().push((*attempt, job.remediate()));
        Outcome::failed(
            "UPGRADE FAILED: context deadline exceeded",
            FailureKind::Permanent,
        )
    }
}

#[tokio::test(start_paused = true)]
async fn the_executor_gets_each_try_with_its_remediation_and_the_last_is_left_as_asked() {
    let executor = Arc::new(Recording::default());
    let (done_tx, mut done) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let queue = HelmQueue::new(QueueConfig::default());
    let task = tokio::spawn({
        let (queue, cancel, executor) = (queue.clone(), cancel.clone(), executor.clone());
        async move { queue.run(executor, done_tx, cancel).await }
    });
    queue.enqueue(retrying("c/ns/a", false, 2, Some(false)));
    let mut finished = Vec::new();
    while let Some(completed) = done.recv().await {
        finished.push(completed.attempt);
        if completed.next_retry.is_none() {
            break;
        }
    }
    assert_eq!(finished, [1, 2, 3]);
    let rollback = Remediate {
        install: true,
        upgrade: Some(RemediationStrategy::Rollback),
    };
    let left = Remediate {
        install: false,
        upgrade: None,
    };
    assert_eq!(
        *executor.0.lock().unwrap(),
        [(1, rollback), (2, rollback), (3, left)],
        "remediated between tries, the last failure left for a person"
    );
    cancel.cancel();
    task.await.unwrap();
}
