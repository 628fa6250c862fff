//! End-to-end leader election on the lab's hub: one holder at a time, hand-over on release and on expiry.

mod common;

use common::{fixtures::unique, lab::Lab};
use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::Lease,
    jiff::{SignedDuration, Timestamp},
};
use kube::{Api, api::DeleteParams};
use tenancy_hub::runtime::leader::{Leadership, LeaseConfig};
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

/// Hub namespace of the test leases.
const NAMESPACE: &str = "default";

/// A short lease, so expiry is observable in a test.
fn config(name: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        name: name.to_owned(),
        lease_duration: Duration::from_secs(3),
        renew_every: Duration::from_millis(500),
        renew_deadline: Duration::from_secs(2),
        ..LeaseConfig::new(NAMESPACE, identity)
    }
}

async fn acquire(client: &kube::Client, name: &str, identity: &str) -> Leadership {
    Leadership::acquire(
        client.clone(),
        config(name, identity),
        &CancellationToken::new(),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{identity} could not acquire: {e}"))
    .expect("not cancelled")
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn one_replica_leads_and_hands_over_on_release_and_on_expiry() {
    let client = Lab::get().client("hub").await;
    let name = unique("leader");
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let spec = |lease: Lease| lease.spec.expect("the lease has a spec");

    // (1) a takes the free lease.
    let a = acquire(&client, &name, "a").await;

    // (2) b waits while a renews, for longer than the lease lasts.
    let waited = timeout(Duration::from_secs(5), acquire(&client, &name, "b")).await;
    assert!(waited.is_err(), "b acquired a lease that a renews");
    assert!(!a.lost().is_cancelled(), "a lost leadership while renewing");

    // (3) a releases: b takes over at its next try.
    let a_lost = a.lost();
    a.release().await.expect("a releases the lease");
    assert!(a_lost.is_cancelled(), "releasing ends a's leadership");
    let b = timeout(Duration::from_secs(5), acquire(&client, &name, "b"))
        .await
        .expect("b acquires within 5s of a's release");
    assert_eq!(
        spec(leases.get(&name).await.unwrap())
            .holder_identity
            .as_deref(),
        Some("b")
    );

    // (4) b stops renewing without releasing: a takes over only once the lease expired.
    drop(b);
    let stopped = Instant::now();
    let last = spec(leases.get(&name).await.unwrap());
    let renewed = last.renew_time.expect("b's renew time").0;
    let a = timeout(Duration::from_secs(10), acquire(&client, &name, "a"))
        .await
        .expect("a acquires once b's lease expired");
    let expiry = renewed + SignedDuration::from_secs(3);
    assert!(
        Timestamp::now() > expiry,
        "a acquired at {} before b's lease expired at {expiry}",
        Timestamp::now()
    );
    assert!(
        stopped.elapsed() < Duration::from_secs(3) + Duration::from_secs(2),
        "a took {:?} to take over an expired lease",
        stopped.elapsed()
    );
    let taken = spec(leases.get(&name).await.unwrap());
    assert_eq!(taken.holder_identity.as_deref(), Some("a"));
    assert_eq!(taken.lease_transitions, Some(2), "a -> b -> a");

    a.release().await.expect("a releases the lease");
    leases
        .delete(&name, &DeleteParams::default())
        .await
        .expect("the test lease is deleted");
}
