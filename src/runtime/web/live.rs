//! The fleet view's live updates (pure but for the count of open streams): the bounds on open
//! streams per viewer and in all, and what to send an open page when its page changed.
//!
//! A stream (`stream::open`) is a task of its own: every [`TICK`] it looks whether the model,
//! the Controllers or the registry changed (a cheap fingerprint), and if so builds the viewer's
//! page again, as the page handlers do (the viewer's token reviewed again, through the
//! reviewer's cache), and sends what [`update`] says. A reader that does not take an event within
//! [`SLOW_READER`] is dropped, as is one whose token the hub no longer accepts; at most
//! [`PER_VIEWER`] streams per identity and [`IN_ALL`] in all are open.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::response::sse::Event;
use sha2::{Digest, Sha256};

use crate::runtime::web::html::Page;

/// How often a stream looks for changes: a change reaches an open page within about this
/// (plus the time to build and send it).
pub(crate) const TICK: Duration = Duration::from_millis(400);
/// How often a stream builds its page even when nothing seems to change (reviewing the
/// viewer's token again, through the reviewer's cache).
pub(crate) const RECHECK: Duration = Duration::from_secs(10);
/// How long a reader may take to accept an event before its stream is dropped.
pub(crate) const SLOW_READER: Duration = Duration::from_secs(5);
/// Events waiting for a reader at most.
pub(crate) const QUEUE: usize = 4;
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

pub(crate) fn json_event<T: serde::Serialize>(name: &str, data: &T) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|_| {
            Event::default()
                .event("gone")
                .data("cannot encode an update")
        })
}
