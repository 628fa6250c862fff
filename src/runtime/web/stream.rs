//! A live page's stream: a task per open page that builds the viewer's page again (through
//! [`WebState::build`]) when the model changes, and sends what differs from the page it holds.

use std::{convert::Infallible, sync::Arc};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::sync::mpsc;

use crate::runtime::web::{
    html::Page,
    live::{self, RECHECK, SLOW_READER, Slot, TICK, digest, update},
    state::{Built, View, WebState},
};

/// The stream of `view` for the viewer with `token`, whose page was served with digest
/// `served` (empty: send the page first). Holds `slot` while open.
pub(crate) fn open(
    state: WebState,
    token: Arc<str>,
    from: Option<std::net::IpAddr>,
    view: View,
    served: String,
    slot: Slot,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::channel(live::QUEUE);
    let (cancel, tasks) = (state.cancel.clone(), state.tasks.clone());
    tasks.spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = produce(&state, &token, from, &view, &served, &tx) => {}
        }
        drop(slot);
    });
    let events =
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
        );
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// Sends `view`'s updates on `tx` until the reader goes, is too slow, or may read no more.
async fn produce(
    state: &WebState,
    token: &Arc<str>,
    from: Option<std::net::IpAddr>,
    view: &View,
    served: &str,
    tx: &mpsc::Sender<Event>,
) {
    let mut last: Option<Arc<Page>> = None;
    let mut seen_at: Option<(u64, tokio::time::Instant)> = None;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = tx.closed() => return,
            _ = tick.tick() => {}
        }
        let fingerprint = state.fingerprint();
        if let Some((f, at)) = seen_at
            && f == fingerprint
            && at.elapsed() < RECHECK
        {
            continue;
        }
        seen_at = Some((fingerprint, tokio::time::Instant::now()));
        let (event, end) = match state.build(token, from, view).await {
            Ok(Built {
                page,
                fingerprint: built_at,
                ..
            }) => {
                // A page shared from before this tick's fingerprint: built again on the next.
                seen_at = Some((built_at, tokio::time::Instant::now()));
                if last.is_none() && digest(&page) == served {
                    last = Some(page);
                    continue;
                }
                let event = update(last.as_deref(), &page);
                last = Some(page);
                match event {
                    Some(event) => (event, false),
                    None => continue,
                }
            }
            Err(e) if e.is_transient() => continue,
            Err(e) => (Event::default().event("gone").data(e.to_string()), true),
        };
        // A reader gone, or too slow to take an event within its time, is let go.
        if tx.send_timeout(event, SLOW_READER).await.is_err() || end {
            return;
        }
    }
}
