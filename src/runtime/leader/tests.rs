//! Tests of leader election with Leases.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use k8s_openapi::jiff::SignedDuration;
use serde_json::json;

use super::*;

/// The standby's wall clock in the tests below; the holder's may differ from it by hours.
fn wall() -> Timestamp {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

/// A lease of `holder`, renewed at `renewed` by the holder's clock, for `duration` seconds.
fn held_by(holder: Option<&str>, renewed: Option<Timestamp>, duration: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: holder.map(str::to_owned),
        renew_time: renewed.map(MicroTime),
        lease_duration_seconds: Some(duration),
        ..Default::default()
    }
}

const TEN: Duration = Duration::from_secs(10);

/// Observes `spec` at `now` and decides as `try_acquire` does, for identity "a".
fn observe(observer: &mut Observer, spec: &LeaseSpec, now: Instant) -> bool {
    observer.observe(Some(spec), now);
    may_acquire(Some(spec), "a", observer, now, TEN)
}

#[test]
fn a_missing_lease_may_be_acquired() {
    let (mut observer, now) = (Observer::default(), Instant::now());
    observer.observe(None, now);
    assert!(may_acquire(None, "a", &observer, now, TEN));
}

#[test]
fn a_lease_without_a_holder_may_be_acquired_at_once() {
    let spec = held_by(None, Some(wall()), 10);
    assert!(observe(&mut Observer::default(), &spec, Instant::now()));
}

#[test]
fn a_lease_with_an_empty_holder_may_be_acquired_at_once() {
    let spec = held_by(Some(""), Some(wall()), 10);
    assert!(observe(&mut Observer::default(), &spec, Instant::now()));
}

#[test]
fn our_own_lease_may_be_kept() {
    let spec = held_by(Some("a"), Some(wall()), 10);
    assert!(observe(&mut Observer::default(), &spec, Instant::now()));
}

#[test]
fn a_fresh_standby_waits_a_full_lease_duration_even_when_the_record_it_first_sees_is_old() {
    let (mut observer, start) = (Observer::default(), Instant::now());
    let spec = held_by(Some("b"), Some(wall() - SignedDuration::from_hours(24)), 10);
    for waited in [0, 2, 4, 6, 8, 9] {
        let now = start + Duration::from_secs(waited);
        assert!(!observe(&mut observer, &spec, now), "taken after {waited}s");
    }
    assert!(observe(&mut observer, &spec, start + TEN));
}

#[test]
fn a_holder_whose_renew_time_is_far_in_our_past_but_keeps_renewing_is_never_taken_over() {
    let (mut observer, start) = (Observer::default(), Instant::now());
    let behind = wall() - SignedDuration::from_hours(1);
    for tick in 0..300_i64 {
        let spec = held_by(
            Some("b"),
            Some(behind + SignedDuration::from_secs(2 * tick)),
            10,
        );
        let now = start + Duration::from_secs(2 * tick.unsigned_abs());
        assert!(
            !observe(&mut observer, &spec, now),
            "taken at renewal {tick}"
        );
    }
}

#[test]
fn a_holder_whose_renew_time_lies_in_our_future_is_taken_over_one_lease_duration_after_it_stops_renewing()
 {
    let (mut observer, start) = (Observer::default(), Instant::now());
    let ahead = wall() + SignedDuration::from_hours(1);
    let renewal = |tick: i64| {
        held_by(
            Some("b"),
            Some(ahead + SignedDuration::from_secs(2 * tick)),
            10,
        )
    };
    for tick in 0..3_i64 {
        let now = start + Duration::from_secs(2 * tick.unsigned_abs());
        assert!(!observe(&mut observer, &renewal(tick), now));
    }
    // The last renewal was first seen at 4s; from then on the record does not change.
    let last = renewal(2);
    for at in [6, 8, 10, 12, 13] {
        let now = start + Duration::from_secs(at);
        assert!(!observe(&mut observer, &last, now), "taken at {at}s");
    }
    assert!(observe(
        &mut observer,
        &last,
        start + Duration::from_secs(14)
    ));
}

#[test]
fn a_new_holder_restarts_the_clock() {
    let (mut observer, start) = (Observer::default(), Instant::now());
    let renewed = Some(wall());
    assert!(!observe(
        &mut observer,
        &held_by(Some("b"), renewed, 10),
        start
    ));
    let later = start + Duration::from_secs(8);
    assert!(!observe(
        &mut observer,
        &held_by(Some("c"), renewed, 10),
        later
    ));
    assert!(!observe(
        &mut observer,
        &held_by(Some("c"), renewed, 10),
        start + TEN
    ));
    assert!(observe(
        &mut observer,
        &held_by(Some("c"), renewed, 10),
        later + TEN
    ));
}

#[test]
fn the_holders_lease_duration_counts_and_ours_stands_in_when_it_states_none() {
    let (mut observer, start) = (Observer::default(), Instant::now());
    let long = held_by(Some("b"), Some(wall()), 30);
    assert!(!observe(&mut observer, &long, start));
    assert!(!observe(
        &mut observer,
        &long,
        start + Duration::from_secs(29)
    ));
    assert!(observe(
        &mut observer,
        &long,
        start + Duration::from_secs(30)
    ));

    let (mut observer, start) = (Observer::default(), Instant::now());
    let unstated = LeaseSpec {
        lease_duration_seconds: None,
        ..held_by(Some("b"), None, 0)
    };
    assert!(!observe(&mut observer, &unstated, start));
    assert!(!observe(
        &mut observer,
        &unstated,
        start + Duration::from_secs(9)
    ));
    assert!(observe(&mut observer, &unstated, start + TEN));
}

#[test]
fn nothing_observed_has_not_expired() {
    assert!(!Observer::default().expired(Instant::now(), Duration::ZERO));
}

#[test]
fn a_renew_deadline_as_long_as_the_lease_is_refused() {
    let mut config = LeaseConfig::new("ops", "a");
    config.renew_deadline = config.lease_duration;
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("ops/tenancy-hub"), "{error}");
    assert!(error.contains("renew deadline must be shorter"), "{error}");
}

#[test]
fn the_default_timings_are_valid() {
    LeaseConfig::new("ops", "a").validate().unwrap();
}

/// A hub that answers every request with `code` and `body`, counting the writes.
fn hub(code: u16, body: serde_json::Value, writes: Arc<AtomicUsize>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        if request.method() != http::Method::GET {
            writes.fetch_add(1, Ordering::SeqCst);
        }
        let response = http::Response::builder()
            .status(code)
            .body(kube::client::Body::from(body.to_string().into_bytes()));
        async move { response }
    });
    kube::Client::new(service, "default")
}

fn lease_held_by(holder: &str) -> serde_json::Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "tenancy-hub", "namespace": "ops", "resourceVersion": "7"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 3600,
            "renewTime": MicroTime(Timestamp::now()),
        },
    })
}

fn failure(code: u16, reason: &str) -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": "refused by the test", "reason": reason, "code": code})
}

/// A leadership as `acquire` returns it, without talking to the hub first.
fn leading(client: kube::Client) -> Leadership {
    let config = LeaseConfig::new("ops", "a");
    let (lost, stop) = (CancellationToken::new(), CancellationToken::new());
    let api = Api::namespaced(client, "ops");
    let renewal = tokio::spawn(keep_renewing(
        api.clone(),
        config.clone(),
        lost.clone(),
        stop.clone(),
        Instant::now(),
    ));
    Leadership {
        api,
        span: config.span(),
        config,
        lost,
        stop,
        renewal,
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_keeps_renewing_while_the_hub_answers() {
    let writes = Arc::new(AtomicUsize::new(0));
    let leadership = leading(hub(200, lease_held_by("a"), writes.clone()));
    let lost = leadership.lost();
    let waited = tokio::time::timeout(Duration::from_secs(61), lost.cancelled()).await;
    assert!(waited.is_err(), "leadership was lost");
    assert_eq!(writes.load(Ordering::SeqCst), 30);
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_steps_down_at_the_renew_deadline() {
    let start = Instant::now();
    let leadership = leading(hub(503, failure(503, "ServiceUnavailable"), Arc::default()));
    leadership.lost().cancelled().await;
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_sees_another_holder_steps_down_at_its_next_renewal() {
    let start = Instant::now();
    let writes = Arc::new(AtomicUsize::new(0));
    let leadership = leading(hub(200, lease_held_by("b"), writes.clone()));
    leadership.lost().cancelled().await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(writes.load(Ordering::SeqCst), 0, "it wrote another's lease");
}

#[tokio::test(start_paused = true)]
async fn dropping_leadership_stops_renewing_and_signals_lost() {
    let writes = Arc::new(AtomicUsize::new(0));
    let leadership = leading(hub(200, lease_held_by("a"), writes.clone()));
    let lost = leadership.lost();
    drop(leadership);
    assert!(lost.is_cancelled());
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(writes.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn acquire_waits_for_a_fresh_lease_of_another_holder_until_cancelled() {
    let writes = Arc::new(AtomicUsize::new(0));
    let client = hub(200, lease_held_by("b"), writes.clone());
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            cancel.cancel();
        }
    });
    let acquired = Leadership::acquire(client, LeaseConfig::new("ops", "a"), &cancel, |_| {}).await;
    assert!(acquired.unwrap().is_none());
    assert_eq!(writes.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn acquire_takes_over_a_silent_holder_after_one_lease_duration_whatever_its_clock_says() {
    let writes = Arc::new(AtomicUsize::new(0));
    let mut lease = lease_held_by("b");
    lease["spec"]["leaseDurationSeconds"] = json!(10);
    lease["spec"]["renewTime"] = json!(MicroTime(Timestamp::now() + SignedDuration::from_hours(1)));
    let client = hub(200, lease, writes.clone());
    let mut holders = Vec::new();
    let start = Instant::now();
    let config = LeaseConfig::new("ops", "a");
    let cancel = CancellationToken::new();
    let standby = |holder: &str| holders.push(holder.to_owned());
    let acquired = Leadership::acquire(client, config, &cancel, standby).await;
    assert!(acquired.unwrap().is_some());
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(
        writes.load(Ordering::SeqCst),
        1,
        "one update takes the lease"
    );
    assert_eq!(holders, ["b"], "the standby is told of the holder once");
}

#[tokio::test(start_paused = true)]
async fn acquire_says_which_permissions_are_missing_when_forbidden() {
    let client = hub(403, failure(403, "Forbidden"), Arc::default());
    let config = LeaseConfig::new("ops", "a");
    let cancel = CancellationToken::new();
    let error = match Leadership::acquire(client, config, &cancel, |_| {}).await {
        Err(error) => error.to_string(),
        Ok(_) => panic!("acquired a forbidden lease"),
    };
    assert!(error.contains("Lease ops/tenancy-hub"), "{error}");
    assert!(
        error.contains("needs get/create/update on leases in ops"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn acquire_says_how_to_fix_a_missing_lease_namespace() {
    let client = hub(404, failure(404, "NotFound"), Arc::default());
    let config = LeaseConfig::new("ops", "a");
    let cancel = CancellationToken::new();
    let error = match Leadership::acquire(client, config, &cancel, |_| {}).await {
        Err(error) => error.to_string(),
        Ok(_) => panic!("acquired a lease in a missing namespace"),
    };
    for advice in [
        "create namespace ops on the hub",
        "--lease-namespace",
        "--leader-elect=false",
    ] {
        assert!(error.contains(advice), "{error}");
    }
}

#[tokio::test(start_paused = true)]
async fn releasing_a_lease_another_replica_took_leaves_it_alone() {
    let writes = Arc::new(AtomicUsize::new(0));
    let leadership = leading(hub(200, lease_held_by("b"), writes.clone()));
    leadership.release().await.unwrap();
    assert_eq!(writes.load(Ordering::SeqCst), 0);
}
