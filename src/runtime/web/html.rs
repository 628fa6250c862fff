//! HTML of the fleet view (pure): escaping, the page frame, and a page as named sections that
//! the live stream replaces one by one.
//!
//! Every string that reaches the HTML goes through [`esc`] (text and attribute values alike,
//! quotes included), or is one of ours (tags, CSS classes, the states' names). Tenant-written
//! strings (chart names, values, messages from members) are never trusted to be markup.

use std::fmt::Write as _;

/// `s` escaped for HTML text and quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

/// `s` as one path segment of a URL: unreserved characters kept, every other byte
/// percent-encoded (then escaped as HTML by whoever puts it in an attribute).
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `s` as a query value (as [`seg`]).
pub(crate) fn query(s: &str) -> String {
    seg(s)
}

/// An element id made of `prefix` and a name (DNS names and `/` only; anything else is
/// percent-encoded first, so an id never needs more than attribute escaping).
pub(crate) fn id(prefix: &str, name: &str) -> String {
    format!("{prefix}-{}", seg(name))
}

/// One part of a page: HTML of ours, or a section the live stream may replace by its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// HTML that changes only with the page's shape.
    Fixed(String),
    /// A section: its element id (unique in the page) and its outer HTML.
    Section(String, String),
}

/// One page: a title and the parts of its `main`. The live stream sends the sections that
/// changed, or the whole of `main` when its shape (the fixed parts, the sections' ids) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Page {
    /// The page's title (escaped when shown).
    pub(crate) title: String,
    /// The parts of `main`, in order.
    pub(crate) parts: Vec<Part>,
}

impl Page {
    /// A page titled `title`, with nothing in it yet.
    pub(crate) fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            parts: Vec::new(),
        }
    }

    /// Adds HTML of ours.
    pub(crate) fn fixed(&mut self, html: impl Into<String>) {
        self.parts.push(Part::Fixed(html.into()));
    }

    /// Adds a section with element id `id`, whose outer HTML is `html`.
    pub(crate) fn section(&mut self, id: String, html: String) {
        self.parts.push(Part::Section(id, html));
    }

    /// The inner HTML of `main`.
    pub(crate) fn main(&self) -> String {
        let size = self.parts.iter().map(|p| match p {
            Part::Fixed(s) | Part::Section(_, s) => s.len(),
        });
        let mut out = String::with_capacity(size.sum());
        for part in &self.parts {
            match part {
                Part::Fixed(html) | Part::Section(_, html) => out.push_str(html),
            }
        }
        out
    }

    /// Whether `other` has the same shape: the same fixed parts and section ids, in order.
    pub(crate) fn same_shape(&self, other: &Self) -> bool {
        self.title == other.title
            && self.parts.len() == other.parts.len()
            && self.parts.iter().zip(&other.parts).all(|pair| match pair {
                (Part::Fixed(a), Part::Fixed(b)) => a == b,
                (Part::Section(a, _), Part::Section(b, _)) => a == b,
                _ => false,
            })
    }

    /// The sections of this page that differ from those of `before` (of the same shape).
    pub(crate) fn changed_since<'a>(&'a self, before: &Self) -> Vec<(&'a str, &'a str)> {
        self.parts
            .iter()
            .zip(&before.parts)
            .filter_map(|pair| match pair {
                (Part::Section(id, now), Part::Section(_, then)) if now != then => {
                    Some((id.as_str(), now.as_str()))
                }
                _ => None,
            })
            .collect()
    }

    /// The whole document, `main` marked with the URL of its live stream.
    pub(crate) fn document(&self, live: &str, who: &str, filters: &str) -> String {
        let mut out = String::with_capacity(4096);
        let _ = write!(
            out,
            "<!doctype html><html lang=en><head><meta charset=utf-8>\
             <meta name=viewport content=\"width=device-width,initial-scale=1\">\
             <title>{title} · tenancy-hub</title>\
             <link rel=stylesheet href=\"/ui/assets/app.css\">\
             <script src=\"/ui/assets/app.js\" defer></script></head><body>\
             <header><nav aria-label=\"views\"><a href=\"/ui/\">Fleet</a></nav>\
             <span class=who>{who}</span>\
             <form method=post action=\"/ui/logout\"><button type=submit>Sign out</button></form>\
             </header>{filters}\
             <p id=status class=status role=status aria-live=polite></p>\
             <main id=live data-live=\"{live}\">{main}</main></body></html>",
            title = esc(&self.title),
            who = esc(who),
            live = esc(live),
            main = self.main(),
        );
        out
    }
}

/// The sign-in page, with an error to show (escaped) when the last attempt failed.
pub(crate) fn login(error: Option<&str>) -> String {
    let error = error
        .map(|e| format!("<p class=error role=alert>{}</p>", esc(e)))
        .unwrap_or_default();
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width,initial-scale=1\">\
         <title>Sign in · tenancy-hub</title>\
         <link rel=stylesheet href=\"/ui/assets/app.css\"></head><body class=login><main>\
         <h1>tenancy-hub: the fleet</h1>{error}\
         <form method=post action=\"/ui/login\">\
         <label for=token>A token the hub accepts (e.g. <code>kubectl create token VIEWER -n TENANT</code>)</label>\
         <input id=token name=token type=password autocomplete=off required autofocus>\
         <button id=signin type=submit>Sign in</button></form>\
         <p>The token is checked with the hub and kept by the operator, in memory, for this session only; \
         the browser holds a session cookie it cannot read.</p></main></body></html>"
    )
}

/// A page saying `message` (escaped), for errors: not found, not allowed, not serving.
pub(crate) fn message(title: &str, message: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{t} · tenancy-hub</title>\
         <link rel=stylesheet href=\"/ui/assets/app.css\"></head><body><header><nav aria-label=\"views\">\
         <a href=\"/ui/\">Fleet</a></nav></header><main><h1>{t}</h1><p>{m}</p></main></body></html>",
        t = esc(title),
        m = esc(message)
    )
}
