//! Small helpers for owned tasks: run until cancelled, wait for a store to fill, the shutdown signal.

use std::{future::Future, time::Duration};

use kube::runtime::reflector::{self};
use tokio_util::sync::CancellationToken;

/// Completes when a reflector store has been filled once. The store wakes a single waiter when it
/// fills (which may be the controller's own), so this polls it.
pub(crate) async fn ready_store<K>(store: &reflector::Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let tick = Duration::from_millis(200);
    while tokio::time::timeout(tick, store.wait_until_ready())
        .await
        .is_err()
    {}
}

/// Runs `task` until it ends or `cancel` fires.
pub(crate) fn until(
    cancel: &CancellationToken,
    task: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let cancel = cancel.clone();
    async move {
        tokio::select! {
            () = task => {}
            () = cancel.cancelled() => {}
        }
    }
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
