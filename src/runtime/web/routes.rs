//! The fleet view's routes under `/ui`: sign-in and out, the pages, their live streams and the
//! embedded assets, every answer with a strict Content-Security-Policy.

use std::{net::IpAddr, net::SocketAddr, sync::Arc};

use axum::{
    Form, Router,
    extract::{ConnectInfo, FromRequestParts, Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts},
    middleware::map_response,
    response::{Html, IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;

use crate::api::key::ReleaseKey;
use crate::runtime::{
    auth::AuthError,
    web::{
        actions::Act,
        fleet, html,
        html::seg,
        live::{self, digest},
        session,
        state::{self, View, WebError, WebState},
        stream,
        view::Filters,
    },
};

/// The view's one script: opens the page's live stream and applies its events.
const APP_JS: &str = include_str!("assets/app.js");
/// The view's one style sheet.
const APP_CSS: &str = include_str!("assets/app.css");

/// Bytes of the embedded script and style sheet, for the page-weight figure.
#[cfg(test)]
pub(crate) fn tests_assets_len() -> usize {
    APP_JS.len() + APP_CSS.len()
}

/// The policy every answer of the view carries: nothing but our own script, style sheet and
/// stream; no inline script or style, no frames, forms posted only here.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The routes of the view, all under `/ui`.
pub(crate) fn router(state: WebState) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(fleet_page))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", axum::routing::post(logout))
        .route("/ui/controllers/{namespace}/{name}", get(controller_page))
        .route(
            "/ui/controllers/{namespace}/{name}/actions/{action}",
            axum::routing::post(act),
        )
        .route(
            "/ui/controllers/{namespace}/{name}/diff/{cluster}/{target}/{release}",
            get(diff_page),
        )
        .route("/ui/clusters/{cluster}", get(cluster_page))
        .route("/ui/live/fleet", get(fleet_live))
        .route(
            "/ui/live/controllers/{namespace}/{name}",
            get(controller_live),
        )
        .route("/ui/live/clusters/{cluster}", get(cluster_live))
        .route(
            "/ui/assets/app.js",
            get(|| asset(APP_JS, "text/javascript")),
        )
        .route("/ui/assets/app.css", get(|| asset(APP_CSS, "text/css")))
        .layer(map_response(secure_headers))
        .with_state(state)
}

async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // Not `no-referrer`: a browser then sends `Origin: null` with the sign-in form.
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The remote address of a request, when served by `serve`.
struct Remote(Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Remote {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let addr = parts.extensions.get::<ConnectInfo<SocketAddr>>();
        Ok(Self(addr.map(|ConnectInfo(a)| a.ip())))
    }
}

/// Who asks: the token of an `Authorization: Bearer` header, or of the session its cookie
/// names; a request with neither is [`AuthError::NoToken`].
struct Viewer {
    token: Arc<str>,
    from: Option<IpAddr>,
}

impl FromRequestParts<WebState> for Viewer {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, WebError> {
        let Remote(from) = Remote::from_request_parts(parts, state)
            .await
            .unwrap_or(Remote(None));
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let value = value.to_str().map_err(|_| AuthError::NotBearer)?;
            let (scheme, token) = value.split_once(' ').ok_or(AuthError::NotBearer)?;
            if !scheme.eq_ignore_ascii_case("bearer") {
                return Err(AuthError::NotBearer.into());
            }
            return Ok(Self {
                token: token.trim().into(),
                from,
            });
        }
        let token = session::cookie(&parts.headers)
            .and_then(|id| state.sessions.token(&id))
            .ok_or(AuthError::NoToken)?;
        Ok(Self { token, from })
    }
}

/// A page, or the answer that stands for it: sign in first, not found, try later; `notice`
/// (ours, never a viewer's words) is shown above it, outside what the live stream replaces.
async fn page(
    state: &WebState,
    viewer: Result<Viewer, WebError>,
    view: View,
    notice: Option<&'static str>,
) -> Response {
    let viewer = match viewer {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    let built = match state.build(&viewer.token, viewer.from, &view).await {
        Ok(built) => built,
        Err(e) => return error_page(e),
    };
    let served = digest(&built.page);
    let live = match &view {
        View::Fleet(filters) => {
            let q = fleet::filter_query(filters);
            let sep = if q.is_empty() { '?' } else { '&' };
            format!("/ui/live/fleet{q}{sep}v={served}")
        }
        View::Controller { namespace, name } => format!(
            "/ui/live/controllers/{}/{}?v={served}",
            seg(namespace),
            seg(name)
        ),
        View::Cluster(name) => format!("/ui/live/clusters/{}?v={served}", seg(name)),
    };
    let mut frame = built.filters;
    if let Some(notice) = notice {
        frame.push_str(&format!(
            "<p class=notice role=status>{}</p>",
            html::esc(notice)
        ));
    }
    Html(built.page.document(&live, &built.who, &frame)).into_response()
}

/// What a page request that cannot be answered gets.
fn error_page(e: WebError) -> Response {
    let (code, title) = match &e {
        WebError::Auth(AuthError::NoToken | AuthError::NotBearer | AuthError::Rejected) => {
            return Redirect::to("/ui/login").into_response();
        }
        WebError::Auth(AuthError::Busy { .. } | AuthError::CallerBusy { .. }) => {
            (StatusCode::TOO_MANY_REQUESTS, "Too many requests")
        }
        WebError::Auth(AuthError::Hub { .. }) | WebError::NotServing(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "Not available")
        }
        WebError::NotFound(_) => (StatusCode::NOT_FOUND, "Not found"),
        WebError::Refused(_) => (StatusCode::FORBIDDEN, "Not done"),
    };
    (code, Html(html::message(title, &e.to_string()))).into_response()
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        error_status(self)
    }
}

/// What a stream request that cannot be answered gets: a status and a line saying why.
fn error_status(e: WebError) -> Response {
    let code = match &e {
        WebError::Auth(AuthError::NoToken | AuthError::NotBearer | AuthError::Rejected) => {
            StatusCode::UNAUTHORIZED
        }
        WebError::Auth(AuthError::Busy { .. } | AuthError::CallerBusy { .. }) => {
            StatusCode::TOO_MANY_REQUESTS
        }
        WebError::Auth(AuthError::Hub { .. }) | WebError::NotServing(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        WebError::NotFound(_) => StatusCode::NOT_FOUND,
        WebError::Refused(_) => StatusCode::FORBIDDEN,
    };
    (code, e.to_string()).into_response()
}

async fn fleet_page(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Query(filters): Query<Filters>,
) -> Response {
    page(&state, viewer, View::Fleet(filters), None).await
}

/// The Controller page's query: the action just done, if the viewer was sent back after one.
#[derive(Deserialize)]
struct Done {
    #[serde(default)]
    done: String,
}

async fn controller_page(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Path((namespace, name)): Path<(String, String)>,
    Query(Done { done }): Query<Done>,
) -> Response {
    let notice = Act::parse(&done).map(Act::done);
    page(&state, viewer, View::Controller { namespace, name }, notice).await
}

/// Does an action on a Controller as the viewer (a form of its page, posted from the view's own
/// origin), then sends the viewer back to the page, which says what was asked.
async fn act(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    headers: HeaderMap,
    Path((namespace, name, action)): Path<(String, String, String)>,
) -> Response {
    if !session::same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "act from the view's own page").into_response();
    }
    let Some(act) = Act::parse(&action) else {
        return error_page(WebError::NotFound(format!(
            "the view has no action {action}"
        )));
    };
    let viewer = match viewer {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    match state
        .act(&viewer.token, viewer.from, &namespace, &name, act)
        .await
    {
        Ok(()) => Redirect::to(&format!(
            "/ui/controllers/{}/{}?done={}",
            seg(&namespace),
            seg(&name),
            act.segment()
        ))
        .into_response(),
        Err(e) => error_page(e),
    }
}

/// The manifest diff of one release a Controller's newest plan acts on (made on demand).
async fn diff_page(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Path((namespace, name, cluster, target, release)): Path<(
        String,
        String,
        String,
        String,
        String,
    )>,
) -> Response {
    let viewer = match viewer {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    let Ok(key) = format!("{cluster}/{target}/{release}").parse::<ReleaseKey>() else {
        return error_page(WebError::NotFound(format!(
            "{cluster}/{target}/{release} is not a release key"
        )));
    };
    match state
        .diff(&viewer.token, viewer.from, (&namespace, &name), &key)
        .await
    {
        Ok((page, who)) => Html(page.document("", &who, "")).into_response(),
        Err(e) => error_page(e),
    }
}

async fn cluster_page(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Path(cluster): Path<String>,
) -> Response {
    page(&state, viewer, View::Cluster(cluster), None).await
}

/// The digest of the page a stream's page was served with.
#[derive(Deserialize)]
struct Served {
    #[serde(default)]
    v: String,
}

/// The fleet stream's query: the page's filters and digest.
#[derive(Deserialize)]
struct FleetLive {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    label: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    v: String,
}

/// Opens the live stream of `view`, once the viewer is known to see it, within the bounds.
async fn stream(
    state: WebState,
    viewer: Result<Viewer, WebError>,
    view: View,
    served: String,
) -> Response {
    let viewer = match viewer {
        Ok(v) => v,
        Err(e) => return error_status(e),
    };
    let built = match state.build(&viewer.token, viewer.from, &view).await {
        Ok(built) => built,
        Err(e) => return error_status(e),
    };
    let Some(slot) = state.slots.take(&built.who) else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many live pages open: at most {} per viewer and {} in all; close one",
                live::PER_VIEWER,
                live::IN_ALL
            ),
        )
            .into_response();
    };
    stream::open(state, viewer.token, viewer.from, view, served, slot).into_response()
}

async fn fleet_live(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Query(q): Query<FleetLive>,
) -> Response {
    let filters = Filters {
        tenant: q.tenant,
        label: q.label,
        state: q.state,
    };
    stream(state, viewer, View::Fleet(filters), q.v).await
}

async fn controller_live(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Path((namespace, name)): Path<(String, String)>,
    Query(Served { v }): Query<Served>,
) -> Response {
    stream(state, viewer, View::Controller { namespace, name }, v).await
}

async fn cluster_live(
    State(state): State<WebState>,
    viewer: Result<Viewer, WebError>,
    Path(cluster): Path<String>,
    Query(Served { v }): Query<Served>,
) -> Response {
    stream(state, viewer, View::Cluster(cluster), v).await
}

async fn login_form() -> Html<String> {
    Html(html::login(None))
}

/// The sign-in form's fields.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// Signs in with a token the hub accepts: starts a session and sets its cookie.
async fn login(
    State(state): State<WebState>,
    Remote(from): Remote,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !session::same_origin(&headers) {
        let why = "sign in from the view's own page";
        return (StatusCode::FORBIDDEN, Html(html::login(Some(why)))).into_response();
    }
    let token = form.token.trim();
    let reviewed = match state::bearer(token) {
        Ok(t) => state.api.reviewer.authenticate(&t, from).await,
        Err(e) => Err(e),
    };
    match reviewed {
        Ok(_) => {
            let id = state.sessions.start(token);
            let cookie = session::set_cookie(&id, session::over_https(&headers));
            ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/")).into_response()
        }
        Err(e) => {
            let code = match e {
                AuthError::Busy { .. } | AuthError::CallerBusy { .. } => {
                    StatusCode::TOO_MANY_REQUESTS
                }
                AuthError::Hub { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            };
            (code, Html(html::login(Some(&e.to_string())))).into_response()
        }
    }
}

/// Signs out: ends the session and clears its cookie.
async fn logout(State(state): State<WebState>, headers: HeaderMap) -> Response {
    if !session::same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "sign out from the view's own page").into_response();
    }
    if let Some(id) = session::cookie(&headers) {
        state.sessions.end(&id);
    }
    (
        [(header::SET_COOKIE, session::clear_cookie())],
        Redirect::to("/ui/login"),
    )
        .into_response()
}
