//! Tests of the queue running its jobs through the member links ([`Links`]) to fake members: who goes first, which plan runs, and what each failure comes to.

use crate::member::{
    Links, MemberLink,
    fake::{Call, FakeLink},
};

use super::*;

/// A queue running through links to `fakes`, with `jobs` enqueued before it starts.
struct Running {
    queue: HelmQueue,
    done: mpsc::Receiver<Completed>,
    cancel: CancellationToken,
    run: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(config: QueueConfig, fakes: &[&Arc<FakeLink>], jobs: Vec<Job>) -> Self {
        let links = Links::fixed(
            fakes
                .iter()
                .map(|f| Arc::clone(f) as Arc<dyn MemberLink>)
                .collect(),
        );
        let queue = HelmQueue::new(config);
        for job in jobs {
            queue.enqueue(job);
        }
        let (done_tx, done) = mpsc::channel(64);
        let cancel = CancellationToken::new();
        let run = tokio::spawn({
            let (queue, cancel) = (queue.clone(), cancel.clone());
            async move { queue.run(Arc::new(links), done_tx, cancel).await }
        });
        Self {
            queue,
            done,
            cancel,
            run,
        }
    }

    async fn completed(&mut self) -> Completed {
        within(self.done.recv()).await.expect("a job completes")
    }

    /// The keys of the next `n` jobs completed, in order.
    async fn keys(&mut self, n: usize) -> Vec<String> {
        let mut keys = Vec::new();
        for _ in 0..n {
            keys.push(self.completed().await.job.key().to_string());
        }
        keys
    }

    async fn stop(self) {
        self.cancel.cancel();
        within(self.run).await.unwrap();
    }
}

/// One worker, no other cap.
fn one_worker() -> QueueConfig {
    QueueConfig {
        workers: 1,
        per_cluster: 1,
        per_owner: 0,
        per_tenant: 0,
        ..QueueConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn clusters_take_turns_within_an_owner_on_the_members() {
    let (one, two) = (FakeLink::new("member-1"), FakeLink::new("member-2"));
    let jobs = vec![
        apply("member-1/ns/a", "h"),
        apply("member-1/ns/b", "h"),
        apply("member-1/ns/c", "h"),
        apply("member-2/ns/a", "h"),
    ];
    let mut running = Running::start(one_worker(), &[&one, &two], jobs);
    assert_eq!(
        running.keys(4).await,
        [
            "member-1/ns/a",
            "member-2/ns/a",
            "member-1/ns/b",
            "member-1/ns/c"
        ]
    );
    assert_eq!(one.jobs().len(), 3);
    assert_eq!(two.jobs(), [apply("member-2/ns/a", "h")]);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_tenant_with_many_jobs_does_not_starve_one_queued_after_it() {
    let one = FakeLink::new("member-1");
    let tenant = |ns: &str, key: &str| {
        of(
            OwnerId {
                namespace: ns.into(),
                name: "a".into(),
            },
            apply(key, "h"),
        )
    };
    let jobs = vec![
        tenant("team-a", "member-1/a/1"),
        tenant("team-a", "member-1/a/2"),
        tenant("team-a", "member-1/a/3"),
        tenant("team-b", "member-1/b/1"),
    ];
    let mut running = Running::start(one_worker(), &[&one], jobs);
    assert_eq!(
        running.keys(4).await,
        [
            "member-1/a/1",
            "member-1/b/1",
            "member-1/a/2",
            "member-1/a/3"
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_newest_plan_for_a_release_runs_after_the_running_one_and_the_one_between_never() {
    let one = FakeLink::new("member-1");
    let first = one.answer_later("member-1/ns/web");
    let mut running = Running::start(one_worker(), &[&one], vec![apply("member-1/ns/web", "h1")]);
    within(one.called(1)).await;
    running.queue.enqueue(apply("member-1/ns/web", "h2"));
    assert_eq!(
        running.queue.enqueue(apply("member-1/ns/web", "h3")),
        Enqueued::Replaced
    );
    first.send(Outcome::Uninstalled).unwrap();
    assert_eq!(
        running.completed().await.job,
        apply("member-1/ns/web", "h1")
    );
    assert_eq!(
        running.completed().await.job,
        apply("member-1/ns/web", "h3")
    );
    assert_eq!(
        one.jobs(),
        [
            apply("member-1/ns/web", "h1"),
            apply("member-1/ns/web", "h3")
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_reported_once_and_not_tried_again() {
    let one = FakeLink::new("member-1");
    one.script(
        "member-1/ns/web",
        Outcome::failed("values do not match the schema", FailureKind::Permanent),
    );
    let mut running = Running::start(one_worker(), &[&one], vec![apply("member-1/ns/web", "h")]);
    let completed = running.completed().await;
    assert!(matches!(
        completed.outcome,
        Outcome::Failed {
            kind: FailureKind::Permanent,
            ..
        }
    ));
    assert_eq!((completed.next_retry, completed.stalled), (None, false));
    assert_eq!(running.queue.depth(), 0);
    assert_eq!(one.calls(), [Call::Job(apply("member-1/ns/web", "h"))]);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_until_the_attempt_cap_then_stalls() {
    let one = FakeLink::new("member-1");
    for _ in 0..2 {
        one.script(
            "member-1/ns/web",
            Outcome::failed("etcdserver: request timed out", FailureKind::Transient),
        );
    }
    let config = QueueConfig {
        max_attempts: 2,
        ..one_worker()
    };
    let mut running = Running::start(config, &[&one], vec![apply("member-1/ns/web", "h")]);
    let first = running.completed().await;
    assert_eq!(first.attempt, 1);
    assert!(first.next_retry.is_some() && !first.stalled, "{first:?}");
    let second = running.completed().await;
    assert_eq!(second.attempt, 2);
    assert!(second.next_retry.is_none() && second.stalled, "{second:?}");
    assert_eq!(one.jobs().len(), 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_member_is_retried_past_the_attempt_cap_until_it_answers() {
    let one = FakeLink::new("member-1");
    for _ in 0..3 {
        one.script(
            "member-1/ns/web",
            Outcome::failed(
                "pull member member-1 has no agent connected yet",
                FailureKind::Unavailable,
            ),
        );
    }
    let config = QueueConfig {
        max_attempts: 2,
        ..one_worker()
    };
    let mut running = Running::start(config, &[&one], vec![apply("member-1/ns/web", "h")]);
    for _ in 0..3 {
        let down = running.completed().await;
        assert!(down.next_retry.is_some() && !down.stalled, "{down:?}");
    }
    let up = running.completed().await;
    assert_eq!(
        up.outcome,
        Outcome::Applied {
            adopted_from: None,
            revision: 1,
            chart_version: "0.1.0".into(),
            tests: Vec::new(),
            crds: None,
        }
    );
    assert_eq!(one.jobs().len(), 4);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_handed_over_to_a_member_frees_the_worker_for_the_next() {
    let (pull, push) = (FakeLink::new("pull-1"), FakeLink::new("member-1"));
    let answer = pull.hand_over("pull-1/ns/web");
    let jobs = vec![apply("pull-1/ns/web", "h"), apply("member-1/ns/web", "h")];
    let config = QueueConfig {
        per_cluster: 2,
        ..one_worker()
    };
    let mut running = Running::start(config, &[&pull, &push], jobs);
    assert_eq!(running.keys(1).await, ["member-1/ns/web"]);
    assert!(running.queue.is_busy(&"pull-1/ns/web".parse().unwrap()));
    answer.send(Outcome::Uninstalled).unwrap();
    let answered = running.completed().await;
    assert_eq!(
        (answered.job.key().to_string(), answered.outcome),
        ("pull-1/ns/web".into(), Outcome::Uninstalled)
    );
    running.stop().await;
}
