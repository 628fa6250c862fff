//! Tests of the fleet view's routes over the fake hub: sign-in, what each token is shown and
//! refused, the live stream, the assets and their policy.

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use k8s_openapi::jiff::Timestamp;
use tower::ServiceExt as _;

use super::{controllers, model};
use crate::{
    observe::model::{Change, Model},
    runtime::auth::fake,
    runtime::web::{WebState, router, routes, state::View, view::Filters},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// The view's router over the fake hub, with [`controllers`] and [`model`].
async fn app() -> (Router, tempfile::TempDir) {
    let (app, _, dir) = app_with_model().await;
    (app, dir)
}

/// [`app`], and its model.
async fn app_with_model() -> (Router, Arc<Model>, tempfile::TempDir) {
    let (mut api, dir) = crate::runtime::http::tests::state().await;
    let model = Arc::new(model());
    api.model = model.clone();
    let (hub, _) = fake::hub();
    api.fleet.set(controllers, hub);
    let web = WebState::new(api, CancellationToken::new(), TaskTracker::new());
    (router(web), model, dir)
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn get(uri: &str, token: Option<&str>) -> Request<Body> {
    let mut request = Request::get(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    request.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn pages_ask_for_a_token_and_show_each_token_its_own() {
    let (app, _dir) = app().await;
    let (status, headers, _) = send(&app, get("/ui/", None)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], "/ui/login");
    assert_eq!(headers[header::CONTENT_SECURITY_POLICY], routes::CSP);
    let (status, _, body) = send(&app, get("/ui/", Some(fake::TEAM_A))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("team-a/") && !body.contains("team-b"),
        "{body}"
    );
    let (status, _, body) = send(&app, get("/ui/", Some(fake::ADMIN))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("team-b/"), "{body}");
    // Another tenant's Controller answers as one that is not there.
    let (status, _, hidden) =
        send(&app, get("/ui/controllers/team-b/db", Some(fake::TEAM_A))).await;
    let (_, _, absent) = send(&app, get("/ui/controllers/team-b/nope", Some(fake::TEAM_A))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(hidden.replace("db", "nope"), absent);
    let (status, _, _) = send(&app, get("/ui/clusters/member-2", Some(fake::TEAM_A))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "member-2 is team-b's only");
    let (status, _, body) = send(&app, get("/ui/clusters/member-1", Some(fake::TEAM_A))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("web-x") || body.contains("team-a/web"),
        "{body}"
    );
    assert!(!body.contains("db"), "{body}");
}

#[tokio::test]
async fn a_stream_without_a_token_or_with_a_rejected_one_is_refused() {
    let (app, _dir) = app().await;
    for token in [None, Some("not-a-token")] {
        let (status, headers, _) = send(&app, get("/ui/live/fleet", token)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(headers[header::CONTENT_SECURITY_POLICY], routes::CSP);
    }
    let (status, _, _) = send(
        &app,
        get("/ui/live/controllers/team-b/db", Some(fake::TEAM_A)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let response = app
        .clone()
        .oneshot(get("/ui/live/fleet", Some(fake::TEAM_A)))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/event-stream"
    );
}

/// The next frame of a live stream's body, within `within`.
async fn next_frame(body: &mut axum::body::BodyDataStream, within: std::time::Duration) -> String {
    use futures::StreamExt as _;
    let frame = tokio::time::timeout(within, body.next()).await;
    let frame = frame
        .expect("a frame in time")
        .expect("the stream goes on")
        .unwrap();
    String::from_utf8_lossy(&frame).into_owned()
}

#[tokio::test]
async fn a_pod_gone_reaches_an_open_stream_as_the_changed_section_only() {
    let (app, model, _dir) = app_with_model().await;
    let page = get("/ui/live/controllers/team-a/web", Some(fake::TEAM_A));
    let response = app.clone().oneshot(page).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let first = next_frame(&mut body, std::time::Duration::from_secs(2)).await;
    assert!(
        first.starts_with("event: page\n") && first.contains("web-x"),
        "{first}"
    );
    assert!(
        !first.contains("db-x"),
        "team-b's pod in team-a's stream: {first}"
    );
    let scope = "member-1/apps".parse().unwrap();
    model.apply(
        (scope, Change::PodGone("web-x".into())),
        Timestamp::UNIX_EPOCH,
    );
    let started = std::time::Instant::now();
    let next = next_frame(&mut body, std::time::Duration::from_secs(2)).await;
    assert!(next.starts_with("event: sections\n"), "{next}");
    assert!(
        next.contains("t-member-1%2Fapps") && !next.contains("web-x"),
        "{next}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

fn login(token: &str, origin: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/ui/login")
        .header(header::HOST, "view.example:8080")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(origin) = origin {
        request = request.header(header::ORIGIN, origin);
    }
    request.body(Body::from(format!("token={token}"))).unwrap()
}

#[tokio::test]
async fn signing_in_sets_an_http_only_strict_cookie_that_stands_for_the_token() {
    let (app, _dir) = app().await;
    const ORIGIN: &str = "http://view.example:8080";
    let origin = Some(ORIGIN);
    let (status, _, _) = send(&app, login(fake::TEAM_A, Some("https://evil.example"))).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a form posted from elsewhere"
    );
    let (status, _, _) = send(&app, login(fake::TEAM_A, None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a form posted from nowhere");
    let (status, headers, body) = send(&app, login("not-a-token", origin)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.get(header::SET_COOKIE).is_none() && body.contains("did not accept"));
    let (status, headers, _) = send(&app, login(fake::TEAM_A, origin)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.contains("; HttpOnly; SameSite=Strict"), "{cookie}");
    assert!(
        !cookie.contains(fake::TEAM_A),
        "the cookie is not the token"
    );
    let pair = cookie.split(';').next().unwrap();
    let with_cookie = |uri: &str| {
        Request::get(uri)
            .header(header::COOKIE, pair)
            .body(Body::empty())
            .unwrap()
    };
    let (status, _, body) = send(&app, with_cookie("/ui/")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("team-a/") && !body.contains("team-b"),
        "{body}"
    );
    let logout = Request::post("/ui/logout")
        .header(header::HOST, "view.example:8080")
        .header(header::ORIGIN, ORIGIN)
        .header(header::COOKIE, pair)
        .body(Body::empty())
        .unwrap();
    let (status, headers, _) = send(&app, logout).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, _, _) = send(&app, with_cookie("/ui/")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "signed out");
}

#[tokio::test]
async fn the_assets_are_embedded_and_the_page_needs_no_inline_script_or_style() {
    let (app, _dir) = app().await;
    let (status, headers, js) = send(&app, get("/ui/assets/app.js", None)).await;
    assert_eq!(
        (status, headers[header::CONTENT_TYPE].to_str().unwrap()),
        (StatusCode::OK, "text/javascript")
    );
    assert!(js.contains("EventSource"));
    let (_, _, page) = send(&app, get("/ui/", Some(fake::ADMIN))).await;
    assert!(
        !page.contains("style=") && !page.contains("<style") && !page.contains(" on"),
        "{page}"
    );
    assert_eq!(page.matches("<script").count(), 1);
}

fn post(uri: &str, token: &str, same_origin: bool) -> Request<Body> {
    let mut request = Request::post(uri).header(header::AUTHORIZATION, format!("Bearer {token}"));
    if same_origin {
        request = request.header("sec-fetch-site", "same-origin");
    }
    request.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn actions_are_offered_and_taken_only_where_the_hub_lets_the_viewer_patch() {
    let (app, _dir) = app().await;
    // TEAM_A may get its Controllers, not patch them: no actions on its page, and an action
    // posted anyway is refused with what to ask for, before the hub is asked to change anything.
    let (_, _, page) = send(&app, get("/ui/controllers/team-a/web", Some(fake::TEAM_A))).await;
    assert!(
        page.contains("Last Events") && !page.contains("id=actions"),
        "{page}"
    );
    let suspend = "/ui/controllers/team-a/web/actions/suspend";
    let (status, _, body) = send(&app, post(suspend, fake::TEAM_A, true)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.contains("ask for `patch` on controllers.multitenancy.dev in hub namespace team-a"),
        "{body}"
    );
    // Another tenant's Controller answers as one that is not there.
    let (status, _, _) = send(
        &app,
        post(
            "/ui/controllers/team-b/db/actions/suspend",
            fake::TEAM_A,
            true,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Posted from elsewhere (no same-origin sign): refused before anything is read.
    let (status, _, _) = send(&app, post(suspend, fake::ADMIN, false)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = send(
        &app,
        post(
            "/ui/controllers/team-a/web/actions/delete",
            fake::ADMIN,
            true,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // ADMIN may patch: the page offers what applies to a Controller neither suspended nor halted.
    let (_, _, page) = send(&app, get("/ui/controllers/team-a/web", Some(fake::ADMIN))).await;
    assert!(page.contains("id=actions"), "{page}");
    assert!(page.contains("action=\"/ui/controllers/team-a/web/actions/suspend\""));
    assert!(page.contains("action=\"/ui/controllers/team-a/web/actions/check-drift\""));
    assert!(!page.contains("actions/resume\"") && !page.contains("actions/resume-rollout"));
    // Sent back after an action, the page says what was asked, in the view's own words only.
    let (_, _, page) = send(
        &app,
        get("/ui/controllers/team-a/web?done=suspend", Some(fake::ADMIN)),
    )
    .await;
    assert!(
        page.contains("class=notice role=status>Suspended:"),
        "{page}"
    );
    let (_, _, page) = send(
        &app,
        get(
            "/ui/controllers/team-a/web?done=%3Cscript%3E",
            Some(fake::ADMIN),
        ),
    )
    .await;
    assert!(!page.contains("class=notice"), "{page}");
}

#[tokio::test]
async fn viewers_of_one_access_share_the_fleet_page_and_no_other_viewer_is_given_it() {
    let (mut api, _dir) = crate::runtime::http::tests::state().await;
    api.model = Arc::new(model());
    let (hub, _) = fake::hub();
    api.fleet.set(controllers, hub);
    let web = WebState::new(api, CancellationToken::new(), TaskTracker::new());
    let fleet = View::Fleet(Filters::default());
    // Built in turn for everywhere, team-a, and team-a again as another identity, then everywhere
    // again: one model, one fingerprint throughout.
    let admin = web.build(fake::ADMIN, None, &fleet).await.unwrap();
    let a = web.build(fake::TEAM_A, None, &fleet).await.unwrap();
    let other = web.build(fake::TEAM_A_OTHER, None, &fleet).await.unwrap();
    let admin_again = web.build(fake::ADMIN, None, &fleet).await.unwrap();
    assert!(admin.page.main().contains("team-b/"));
    for built in [&a, &other] {
        let main = built.page.main();
        assert!(
            main.contains("team-a/") && !main.contains("team-b"),
            "{main}"
        );
        assert!(!built.filters.contains("team-b"), "{}", built.filters);
    }
    assert!(
        Arc::ptr_eq(&a.page, &other.page),
        "team-a's viewers share one build"
    );
    assert!(Arc::ptr_eq(&admin.page, &admin_again.page));
    assert!(
        !Arc::ptr_eq(&admin.page, &a.page),
        "team-a is not given everywhere's page"
    );
    assert_ne!(a.who, other.who, "each is still told who it is");
}
