//! The scale envelope reduced to 50 simulated pull members against the real operator: no error, every member's work published and taken, and the Controller's status bounded; times are reported by the benchmark, not asserted.

mod common;

use std::time::Duration;

use common::{envelope::Envelope, lab::Lab};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the lab: kind/up.sh, then --include-ignored"]
async fn fifty_simulated_pull_members_have_their_work_taken_within_a_bounded_status() {
    let run = Envelope {
        members: 50,
        sample: 20,
        quiet: Duration::from_secs(5),
        operator_args: Vec::new(),
        operator_flow: None,
    };
    let found = run.run(&Lab::get()).await;
    eprintln!("{:#}", found.figures);
    assert!(
        found.errors.is_empty(),
        "the members met errors: {:#?}",
        found.errors
    );
    assert_eq!(
        found.answered, 50,
        "every member's work was published and answered"
    );
    assert!(
        found.status_bytes < 256 * 1024,
        "the status is {} bytes",
        found.status_bytes
    );
}
