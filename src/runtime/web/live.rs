//! The fleet view's live updates: one server-sent event stream per open page, bounded per
//! viewer and in all, sending the sections of the page that changed.
//!
//! Each stream is a task of its own: every [`TICK`] it looks whether the model, the Controllers
//! or the registry changed (a cheap fingerprint), and if so builds the viewer's page again, as
//! the page handlers do (the viewer's token reviewed again, through the reviewer's cache), and
//! sends what differs. A reader that does not take an event within [`SLOW_READER`] is dropped,
//! as is one whose token the hub no longer accepts; at most [`PER_VIEWER`] streams per identity
//! and [`IN_ALL`] in all are open.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::runtime::web::{Built, View, WebState, html::Page};

/// How often a stream looks for changes: a change reaches an open page within about this
/// (plus the time to build and send it).
pub(crate) const TICK: Duration = Duration::from_millis(400);
/// How often a stream builds its page even when nothing seems to change (reviewing the
/// viewer's token again, through the reviewer's cache).
pub(crate) const RECHECK: Duration = Duration::from_secs(10);
/// How long a reader may take to accept an event before its stream is dropped.
pub(crate) const SLOW_READER: Duration = Duration::from_secs(5);
/// Events waiting for a reader at most.
const QUEUE: usize = 4;
/// Streams one identity may have open at once.
pub(crate) const PER_VIEWER: usize = 8;
/// Streams open at once in all.
pub(crate) const IN_ALL: usize = 128;

/// The open streams, per viewer (user name) and in all.
#[derive(Default)]
pub(crate) struct Slots {
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// One open stream's place, given back when dropped.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    who: String,
}

impl Slots {
    /// A place for one more stream of `who`, unless `who` has [`PER_VIEWER`] open or all
    /// viewers together [`IN_ALL`].
    pub(crate) fn take(self: &Arc<Self>, who: &str) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = open.1.get(who).copied().unwrap_or(0);
        if mine >= PER_VIEWER || open.0 >= IN_ALL {
            return None;
        }
        open.0 += 1;
        open.1.insert(who.to_owned(), mine + 1);
        Some(Slot {
            slots: self.clone(),
            who: who.to_owned(),
        })
    }

    /// Streams open now, in all.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .slots
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.who);
            }
        }
    }
}

/// A short digest of a page's `main`, so a stream knows what its page was served with.
pub(crate) fn digest(page: &Page) -> String {
    let sum = Sha256::digest(page.main().as_bytes());
    sum.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// What to send after `before` for `now`: the changed sections, the whole `main` when the
/// page's shape changed, nothing when nothing did.
pub(crate) fn update(before: Option<&Page>, now: &Page) -> Option<Event> {
    match before {
        Some(before) if before.same_shape(now) => {
            let changed = now.changed_since(before);
            (!changed.is_empty()).then(|| json_event("sections", &changed))
        }
        _ => Some(json_event("page", &now.main())),
    }
}

fn json_event<T: serde::Serialize>(name: &str, data: &T) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|_| {
            Event::default()
                .event("gone")
                .data("cannot encode an update")
        })
}

/// The stream of `view` for the viewer with `token`, whose page was served with digest
/// `served` (empty: send the page first). Holds `slot` while open.
pub(crate) fn stream(
    state: WebState,
    token: Arc<str>,
    from: Option<std::net::IpAddr>,
    view: View,
    served: String,
    slot: Slot,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::channel(QUEUE);
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
    let mut last: Option<Page> = None;
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
            Ok(Built { page, .. }) => {
                if last.is_none() && digest(&page) == served {
                    last = Some(page);
                    continue;
                }
                let event = update(last.as_ref(), &page);
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
