//! The scale envelope reduced to 50 simulated pull members against the real operator, and against two replicas as two shards: no error, every member's work published and taken, the Controller's status bounded, each replica leading a shard, the members enrolled by shard 0's leader alone; times are reported by the benchmark, not asserted.

mod common;

use std::{collections::BTreeSet, time::Duration};

use common::{envelope::Envelope, lab::Lab};

/// One envelope at a time: every operator enrolls every member on the hub, and the members'
/// FlowSchema counts the requests of one run's members.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The envelope of 50 members, `sample` of them timed, against the lab's own operator identity.
fn fifty(sample: usize) -> Envelope {
    Envelope {
        members: 50,
        sample,
        quiet: Duration::from_secs(5),
        operator_args: Vec::new(),
        operator_flow: None,
    }
}

/// Fails the test with what went wrong in the members, if anything did.
fn no_errors(errors: &[String]) {
    assert!(errors.is_empty(), "the members met errors: {errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the lab: kind/up.sh, then --include-ignored"]
async fn fifty_simulated_pull_members_have_their_work_taken_within_a_bounded_status() {
    let _serial = SERIAL.lock().await;
    let found = fifty(20).run(&Lab::get()).await;
    eprintln!("{:#}", found.figures);
    no_errors(&found.errors);
    assert_eq!(
        found.answered, 50,
        "every member's work was published and answered"
    );
    assert!(
        found.status_bytes < 256 * 1024,
        "the status is {} bytes",
        found.status_bytes
    );
    assert!(
        found.shown_unreachable.is_empty(),
        "the restarted operator showed members whose agents were renewing unreachable: {:#?}",
        found.shown_unreachable
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the lab: kind/up.sh, then --include-ignored"]
async fn fifty_simulated_pull_members_are_served_by_two_replicas_each_leading_one_shard() {
    let _serial = SERIAL.lock().await;
    let found = fifty(0).sharded(&Lab::get(), &[2], 4).await;
    let [on_two] = &found.runs[..] else {
        panic!(
            "one count of replicas was asked for, not {}",
            found.runs.len()
        );
    };
    eprintln!("{:#}", serde_json::to_value(on_two).unwrap());
    no_errors(&found.errors);
    assert_eq!(
        on_two.answered, 50,
        "every member answered the work of its part's Controller"
    );
    assert_eq!(on_two.controllers.len(), 4);
    for c in &on_two.controllers {
        let all = format!("{0}/{0}", c.members);
        assert!(
            c.ready && c.releases == all,
            "Controller {} is Ready with {all} releases, not {} (ready: {})",
            c.name,
            c.releases,
            c.ready
        );
    }
    assert_eq!(on_two.replica.len(), 2);
    let led: BTreeSet<u32> = on_two
        .replica
        .iter()
        .flat_map(|r| r.shards.clone())
        .collect();
    assert_eq!(led, BTreeSet::from([0, 1]), "both shards are led");
    for replica in &on_two.replica {
        assert_eq!(
            replica.shards.len(),
            1,
            "replica {} leads one shard, not {:?}",
            replica.pid,
            replica.shards
        );
        assert!(
            replica.rss_mib > 0.0,
            "replica {} has an RSS figure, not {}",
            replica.pid,
            replica.rss_mib
        );
        // The members are enrolled by the leader of shard 0 alone: the other replica applies
        // none of their hub objects again.
        if replica.shards.contains(&0) {
            assert!(
                replica.enrolled > 0,
                "replica {} leads shard 0 and enrolled no member",
                replica.pid
            );
        } else {
            assert_eq!(
                replica.enrolled, 0,
                "replica {} leads shard {:?}, not 0, and enrolled members",
                replica.pid, replica.shards
            );
        }
    }
}
