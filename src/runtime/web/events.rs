//! The last Events the operator recorded about a Controller, for its page (pure): which Events
//! count, in which order, and their HTML.
//!
//! Only Events the operator reported (`reportingComponent: tenancy-hub`) about that Controller
//! (by uid) are shown, newest first, [`SHOWN`] at most; their words are escaped like every
//! other string. Someone who may write Events in the Controller's hub namespace could still
//! write one that names the operator as its reporter; it shows only to viewers of that same
//! namespace, so it misleads no one but the namespace's own readers, as `kubectl describe` would.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Event;

use crate::runtime::web::html::esc;

/// The operator's name as Events report it.
pub(crate) const REPORTER: &str = "tenancy-hub";
/// Events shown on a page, at most.
pub(crate) const SHOWN: usize = 10;
/// The longest message shown of one Event, in characters.
const SHOWN_MESSAGE: usize = 1024;

/// One Event as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// When it last happened (RFC 3339), or empty when the Event says nothing of it.
    pub(crate) at: String,
    /// `Normal` or `Warning`.
    pub(crate) kind: String,
    /// Its reason (`Installed`, `UpgradeFailed`, …).
    pub(crate) reason: String,
    /// Its message, cut to [`SHOWN_MESSAGE`] characters.
    pub(crate) message: String,
    /// How many times it happened.
    pub(crate) count: i32,
}

/// The Events of `list` the operator recorded about the object with `uid`, newest first, at
/// most [`SHOWN`].
pub(crate) fn rows(list: Vec<Event>, uid: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = list
        .into_iter()
        .filter(|e| e.involved_object.uid.as_deref() == Some(uid))
        .filter(|e| {
            e.reporting_component.as_deref() == Some(REPORTER)
                || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(REPORTER)
        })
        .map(|e| Row {
            at: last_time(&e),
            kind: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            message: e
                .message
                .unwrap_or_default()
                .chars()
                .take(SHOWN_MESSAGE)
                .collect(),
            count: e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1)
                .max(1),
        })
        .collect();
    // RFC 3339 times in UTC sort as text.
    rows.sort_by(|a, b| b.at.cmp(&a.at));
    rows.truncate(SHOWN);
    rows
}

/// When `e` last happened: its series' last observation, its last timestamp, its event time or
/// its creation, whichever it has first.
fn last_time(e: &Event) -> String {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0.to_string())
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.to_string()))
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
        .unwrap_or_default()
}

/// The page's Events section: `rows`, or why there are none to show (`why`: they could not be
/// read).
pub(crate) fn section(rows: Option<&[Row]>, why: Option<&str>) -> String {
    let mut out = String::from("<section id=events><h2>Last Events</h2>");
    match (rows, why) {
        (_, Some(why)) => {
            let _ = write!(out, "<p>{}</p>", esc(why));
        }
        (None, None) | (Some([]), None) => {
            out.push_str("<p>The operator has recorded no Event about this Controller lately.</p>")
        }
        (Some(rows), None) => {
            out.push_str("<table><thead><tr><th scope=col>Last seen</th><th scope=col>Type</th><th scope=col>Reason</th><th scope=col>Message</th><th scope=col>Count</th></tr></thead><tbody>");
            for r in rows {
                let class = if r.kind == "Warning" {
                    " class=\"c s-failed\""
                } else {
                    ""
                };
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td{class}>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&r.at),
                    esc(&r.kind),
                    esc(&r.reason),
                    esc(&r.message),
                    r.count
                );
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str("</section>");
    out
}
