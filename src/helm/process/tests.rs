use std::time::Duration;

use tokio::process::Command;

use super::spawn_dying_with_operator;

/// The kernel sends the parent-death signal when the thread that forked a child ends, not the
/// process; tokio retires idle threads of its blocking pool, and a worker that ran
/// `block_in_place` becomes one. A child asked for on such a thread must outlive it.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_outlives_the_thread_that_asked_for_it() {
    let runtime = tokio::runtime::Handle::current();
    let mut child = std::thread::spawn(move || {
        runtime.block_on(async {
            let mut command = Command::new("sleep");
            command.arg("30").kill_on_drop(true);
            spawn_dying_with_operator(command).await.unwrap()
        })
    })
    .join()
    .unwrap();
    // Killed by its parent-death signal, it would end within moments of the thread.
    let ended = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    assert!(
        ended.is_err(),
        "the child ended with the thread that asked for it: {ended:?}"
    );
    child.kill().await.unwrap();
}

/// A command that cannot start says why, as `spawn` does.
#[tokio::test]
async fn a_command_that_cannot_start_says_why() {
    let error = spawn_dying_with_operator(Command::new("/nonexistent/tenancy-hub-helm"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}
