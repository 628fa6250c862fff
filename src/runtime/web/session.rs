//! Sign-in sessions of the fleet view: a token pasted once is kept by the operator, in memory,
//! behind a random session id the browser holds in an `HttpOnly`, `SameSite=Strict` cookie.
//!
//! Why a session rather than the token in the browser's storage: a script (ours or an injected
//! one) can never read the token, and the page's `EventSource` sends the cookie where it could
//! send no `Authorization` header. The token is still reviewed by the hub on every request
//! (through the status API's reviewer and its cache), so a token revoked or expired ends the
//! session. Sessions are bounded in number and in age; hand-written because it is one small map.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use tokio::time::Instant;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "tenancy_hub_session";
/// How long a session lasts after sign-in, at most.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(8 * 3600);
/// How long a session lasts unused.
pub(crate) const IDLE: Duration = Duration::from_secs(3600);
/// Sessions kept at most; past it, expired ones go, then the least recently used.
pub(crate) const MAX_SESSIONS: usize = 1024;

/// One signed-in browser: the token it signed in with, and when.
struct Session {
    token: Arc<str>,
    created: Instant,
    used: Instant,
}

/// The sessions, by id.
#[derive(Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Starts a session for `token`; returns its new, random id.
    pub(crate) fn start(&self, token: &str) -> String {
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .expect("the system's random source works");
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let now = Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, s| alive(s, now));
        }
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id.clone(),
            Session {
                token: token.into(),
                created: now,
                used: now,
            },
        );
        id
    }

    /// The token of session `id`, while it lasts; using it keeps it from going idle.
    pub(crate) fn token(&self, id: &str) -> Option<Arc<str>> {
        let now = Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let session = sessions.get_mut(id)?;
        if !alive(session, now) {
            sessions.remove(id);
            return None;
        }
        session.used = now;
        Some(session.token.clone())
    }

    /// Ends session `id`.
    pub(crate) fn end(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// Sessions held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

fn alive(s: &Session, now: Instant) -> bool {
    now.duration_since(s.created) < MAX_AGE && now.duration_since(s.used) < IDLE
}

/// The session id the request's cookie names, if any.
pub(crate) fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value holding session `id`: `Secure` when the page was reached over HTTPS
/// (as a proxy in front says).
pub(crate) fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        MAX_AGE.as_secs()
    ))
    .expect("a session id is base64")
}

/// The `Set-Cookie` value ending the session cookie.
pub(crate) fn clear_cookie() -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
    ))
    .expect("a constant cookie")
}

/// Whether a request came over HTTPS, per the proxy in front (`X-Forwarded-Proto`).
pub(crate) fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// Whether a form was posted from this site: the browser says so (`Sec-Fetch-Site:
/// same-origin`), or its `Origin` (without one, its `Referer`) names the host the request was
/// sent to. A browser sends one of them with every POST.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if fetch_site == Some("same-origin") {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let from = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url::Url::parse(v).ok());
    from.is_some_and(|u| {
        let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}{port}", u.host_str().unwrap_or_default()) == host
    })
}
