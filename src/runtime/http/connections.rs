//! The HTTP server's connections: at most [`MAX_CONNECTIONS`] at once, each given [`HEADER_READ_TIMEOUT`] to send a request's headers.
//!
//! Hand-written over hyper's HTTP/1 connection builder because `axum::serve` sets neither: a
//! client that opens connections and sends headers a byte at a time (slowloris) would hold them,
//! and the operator's file descriptors, for as long as it likes. Connections past the cap are
//! accepted and closed at once, so a flood is told no rather than queued behind the slow.

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::ConnectInfo};
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt as _;

/// How long a client has to send a request's headers (each request's, idle keep-alive included)
/// before its connection is closed.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once at most.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// Accepts connections on `listener` and serves `app` on each until `cancel` fires; each
/// connection's request extensions carry its remote address as [`ConnectInfo`].
pub(crate) async fn accept(
    listener: TcpListener,
    app: Router,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (stream, remote) = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or the like: say so, and let it pass.
                    tracing::warn!(%error, "cannot accept an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%remote, "closing an HTTP connection: {MAX_CONNECTIONS} are open");
            drop(stream);
            continue;
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(remote));
            app.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let cancel = cancel.clone();
        tasks.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        tracing::debug!(%remote, %error, "an HTTP connection ended");
                    }
                }
                () = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(slot);
        });
    }
}
