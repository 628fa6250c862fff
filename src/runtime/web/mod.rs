//! The fleet view: read-only web pages served beside the status API (the fleet matrix, one
//! Controller, one cluster), live over server-sent events, each viewer shown only what its token
//! may read by the status API's own rules.
//!
//! Server-rendered HTML with one small embedded script and style sheet (no build step, nothing
//! fetched from elsewhere: it works air-gapped), under a strict Content-Security-Policy. Pages
//! and streams are built by one function, `state::WebState::build`, from what the viewer may see
//! (`view::Seen`); the rooms below it are pure. A release's manifest diff has a page of its own,
//! made on demand within bounds (`diffs`).

mod actions;
mod diff_page;
pub(crate) mod diffs;
mod events;
mod fleet;
mod html;
mod live;
mod pages;
mod routes;
mod session;
mod shared;
mod state;
mod stream;
mod view;

pub(crate) use routes::router;
pub(crate) use state::{FleetSources, WebState};

#[cfg(test)]
mod tests;
