//! Tests of the fair queue: its state machine with explicit instants, and the workers under paused time.

use tokio::sync::{mpsc, oneshot};

use super::*;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::plan::OwnerId;
use crate::queue::{
    handle::HelmQueue,
    state::{Finished, Slot, State, Waiting},
    turns::{OwnerQueue, priority_of},
};
use crate::{
    api::key::{ClusterName, ReleaseKey},
    plan::Job,
};

fn owner() -> OwnerId {
    OwnerId {
        namespace: "default".into(),
        name: "a".into(),
    }
}

use crate::member::fake::apply;

fn uninstall(key: &str) -> Job {
    Job::Uninstall {
        key: key.parse().unwrap(),
        owner: owner(),
        identity: None,
        settings: Default::default(),
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
            adopt,
            installing,
            attempt,
        } => {
            release.owner = owner;
            Job::Apply {
                adopt,
                release,
                stale_pending,
                repair,
                installing,
                attempt,
            }
        }
        Job::Uninstall {
            key,
            identity,
            settings,
            ..
        } => Job::Uninstall {
            key,
            owner,
            identity,
            settings,
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
            helm: Default::default(),
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
                    running
                        .extend(std::iter::from_fn(|| s.start_next(now)).map(|(j, a, _)| (j, a)));
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
            settings: Default::default(),
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
        // Passed on as planned, which try it is aside, for the tests to compare.
        let job = job.at_try(0);
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
        adopted_from: None,
        revision: 2,
        chart_version: "0.1.0".into(),
        tests: Vec::new(),
        crds: None,
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

#[test]
fn a_job_handed_over_frees_its_worker_and_its_owners_cap_but_keeps_its_key_busy() {
    let mut s = State::new(QueueConfig {
        workers: 1,
        per_cluster: 1,
        per_owner: 1,
        per_tenant: 1,
        ..QueueConfig::default()
    });
    let now = Instant::now();
    s.enqueue(apply("pull-1/ns/a", "h1"), now);
    s.enqueue(apply("member-1/ns/b", "h1"), now);
    let (handed, attempt, _) = s.start_next(now).unwrap();
    assert!(s.start_next(now).is_none(), "its one worker is taken");
    s.hand_over(handed.key());
    let (other, _, _) = s.start_next(now).expect("the worker is free again");
    assert_eq!(other.key().to_string(), "member-1/ns/b");
    // A newer job for the key handed over waits behind it, as behind any running job.
    s.enqueue(apply("pull-1/ns/a", "h2"), now);
    assert_eq!(s.waiting[handed.key()].slot, Slot::Parked);
    s.finish(&other, 1, &Outcome::Uninstalled, now);
    assert!(
        s.start_next(now).is_none(),
        "pull-1's one slot is still taken"
    );
    let late = Outcome::failed("did not answer", FailureKind::Transient);
    assert_eq!(s.finish(&handed, attempt, &late, now), Finished::Done);
    let (next, _, _) = s.start_next(now).unwrap();
    assert_eq!(next, apply("pull-1/ns/a", "h2"));
    assert!(s.awaiting.is_empty());
}

/// An executor that hands the jobs of cluster `pull-*` over, their answers sent by the test,
/// and finishes every other job at once.
struct HandsOver {
    answers: mpsc::UnboundedSender<(Job, oneshot::Sender<Outcome>)>,
}

impl Executor for HandsOver {
    async fn execute(&self, job: Job) -> Outcome {
        self.start(job).await.outcome().await
    }

    async fn start(&self, job: Job) -> Started {
        if !job.key().scope.cluster.as_str().starts_with("pull-") {
            return Started::Finished(Outcome::Uninstalled);
        }
        let (answer, outcome) = oneshot::channel();
        self.answers.send((job, answer)).expect("the test listens");
        let deadline = Duration::from_secs(600);
        Started::Awaiting(Box::pin(async move {
            tokio::time::timeout(deadline, outcome).await.map_or_else(
                |_| failed(true),
                |answered| answered.unwrap_or(failed(true)),
            )
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn members_that_never_answer_hold_no_worker_and_time_out_into_backoff() {
    let queue = HelmQueue::new(QueueConfig {
        workers: 2,
        per_cluster: 2,
        ..QueueConfig::default()
    });
    let (answers_tx, mut answers) = mpsc::unbounded_channel();
    let (done_tx, mut done) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let executor = Arc::new(HandsOver {
        answers: answers_tx,
    });
    let run = tokio::spawn({
        let (queue, cancel) = (queue.clone(), cancel.clone());
        async move { queue.run(executor, done_tx, cancel).await }
    });
    let silent = ["pull-1/ns/a", "pull-1/ns/b", "pull-2/ns/a", "pull-2/ns/b"];
    for key in silent {
        queue.enqueue(apply(key, "h1"));
    }
    let mut unanswered = Vec::new();
    for _ in silent {
        unanswered.push(within(answers.recv()).await.unwrap());
    }
    assert_eq!(queue.running(), 4, "four jobs in flight on two workers");
    // Another cluster's change still runs at once.
    let started = Instant::now();
    queue.enqueue(apply("member-1/ns/web", "h1"));
    let completed = within(done.recv()).await.unwrap();
    assert_eq!(completed.job.key().to_string(), "member-1/ns/web");
    assert_eq!(Instant::now(), started);
    // Past the deadline each silent job fails and backs off; none is lost.
    let mut timed_out = Vec::new();
    for _ in silent {
        let completed = within(done.recv()).await.unwrap();
        assert!(completed.next_retry.is_some(), "{completed:?}");
        assert_eq!(completed.elapsed, Duration::from_secs(600));
        timed_out.push(completed.job.key().to_string());
    }
    timed_out.sort();
    assert_eq!(timed_out, silent);
    drop(unanswered);
    cancel.cancel();
    within(run).await.unwrap();
}

mod links;
mod remediation;
