//! Tests of the manifest diff page and its bounds: shown only to the Controller's viewers, every
//! line escaped, one render per release and plan whatever the number of viewers, renders bounded
//! in number, cache and size.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    body::Body,
    http::{Request, StatusCode, header},
};
use futures::FutureExt as _;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::ServiceExt as _;

use super::controllers;
use crate::{
    runtime::auth::fake,
    runtime::web::{
        WebState, diff_page,
        diffs::{Diffs, FAILED_FRESH, Got, Made, MakeDiff, SHOWN},
        pages::{diff_path as path, offered},
        router, routes,
    },
    status::next::{Action, Next},
};

/// What a tenant writes into a chart, to be shown as text.
const EVIL: &str = "</code></pre><script>window.xssed=1</script>";

/// An upgrade of `key` from revision 1, planned with spec hash `hash`.
fn upgrade(key: &str, hash: &str) -> Next {
    let crate::plan::Job::Apply { release, .. } = crate::member::fake::apply(key, hash) else {
        unreachable!("an apply job")
    };
    Next {
        key: key.parse().unwrap(),
        action: Action::Upgrade,
        held: Some("held back by the rollout: waiting for wave 1".into()),
        release: Some(Arc::new(*release)),
        revision: Some(1),
    }
}

/// A maker that counts its calls, answers after `takes` and tracks how many run at once.
fn counting(takes: Duration) -> (MakeDiff, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (calls, running, most) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let make: MakeDiff = {
        let (calls, running, most) = (calls.clone(), running.clone(), most.clone());
        Arc::new(move |next: Next| {
            calls.fetch_add(1, Ordering::SeqCst);
            let (running, most) = (running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(takes).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(Some(format!(
                    "--- {0} (revision 1)\n+++ {0} (revision 2)\n@@ -1 +1 @@\n-  replicas: 1\n+  replicas: 2\n {EVIL}\n",
                    next.key
                )))
            }
            .boxed()
        })
    };
    (make, calls, most)
}

/// Asks `diffs` for `next`'s diff as viewer `who`, made with `make`, waiting at most `wait`.
async fn ask(diffs: &Diffs, who: &str, next: &Next, make: &MakeDiff, wait: Duration) -> Got {
    let (tasks, cancel) = (TaskTracker::new(), CancellationToken::new());
    diffs.get(who, next, make, (&tasks, &cancel), wait).await
}

#[tokio::test(start_paused = true)]
async fn many_viewers_of_one_release_and_plan_cost_one_render() {
    let diffs = Arc::new(Diffs::default());
    let (make, calls, _) = counting(Duration::from_secs(3));
    let next = upgrade("member-1/apps/web", "h1");
    let asks = (0..50).map(|_| {
        let (diffs, make, next) = (diffs.clone(), make.clone(), next.clone());
        async move { ask(&diffs, "a", &next, &make, Duration::from_secs(10)).await }
    });
    let got = futures::future::join_all(asks).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        got.iter()
            .all(|g| g == &got[0] && matches!(g, Got::Ready(_)))
    );
    // Reloads are served from the cache; a new plan (another spec hash) is a new render.
    ask(&diffs, "a", &next, &make, Duration::from_secs(10)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    ask(
        &diffs,
        "a",
        &upgrade("member-1/apps/web", "h2"),
        &make,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn renders_run_two_at_once_and_past_the_queue_a_viewer_is_told_to_wait() {
    let diffs = Arc::new(Diffs::new(2, 4, 4, 32));
    let (make, calls, most) = counting(Duration::from_secs(5));
    let mut got = Vec::new();
    for i in 0..6 {
        let next = upgrade(&format!("member-1/apps/web-{i}"), "h");
        got.push(ask(&diffs, "a", &next, &make, Duration::from_millis(1)).await);
    }
    assert_eq!(
        got,
        [
            Got::Pending,
            Got::Pending,
            Got::Pending,
            Got::Pending,
            Got::Busy,
            Got::Busy
        ]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "at most two renders at once"
    );
    // Done, they free the queue.
    let next = upgrade("member-1/apps/web-5", "h");
    let later = ask(&diffs, "a", &next, &make, Duration::from_secs(10)).await;
    assert!(matches!(later, Got::Ready(_)), "{later:?}");
}

#[tokio::test(start_paused = true)]
async fn one_viewer_cannot_take_the_whole_queue_and_joining_a_render_under_way_costs_nothing() {
    let diffs = Diffs::new(2, 16, 2, 32);
    let (make, calls, _) = counting(Duration::from_secs(5));
    let nexts: Vec<Next> = (0..4)
        .map(|i| upgrade(&format!("member-1/apps/web-{i}"), "h"))
        .collect();
    let wait = Duration::from_millis(1);
    assert_eq!(ask(&diffs, "a", &nexts[0], &make, wait).await, Got::Pending);
    assert_eq!(ask(&diffs, "a", &nexts[1], &make, wait).await, Got::Pending);
    assert_eq!(
        ask(&diffs, "a", &nexts[2], &make, wait).await,
        Got::Busy,
        "a has two under way"
    );
    assert_eq!(
        ask(&diffs, "b", &nexts[0], &make, wait).await,
        Got::Pending,
        "b joins a's render"
    );
    assert_eq!(
        ask(&diffs, "b", &nexts[2], &make, wait).await,
        Got::Pending,
        "b may start its own"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(matches!(
        ask(&diffs, "a", &nexts[3], &make, wait).await,
        Got::Pending | Got::Ready(_)
    ));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "a's renders ended, it may start more"
    );
}

#[tokio::test(start_paused = true)]
async fn the_least_recently_asked_diff_leaves_the_cache_first() {
    let diffs = Diffs::new(2, 16, 4, 2);
    let (make, calls, _) = counting(Duration::from_millis(10));
    let wait = Duration::from_secs(10);
    let [a, b, c] = ["a", "b", "c"].map(|r| upgrade(&format!("member-1/apps/{r}"), "h"));
    for next in [&a, &b, &a, &c] {
        ask(&diffs, "a", next, &make, wait).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    ask(&diffs, "a", &a, &make, wait).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3, "a was kept");
    ask(&diffs, "a", &b, &make, wait).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4, "b was dropped for c");
}

#[tokio::test(start_paused = true)]
async fn a_diff_that_could_not_be_made_is_tried_again_only_after_a_while() {
    let diffs = Diffs::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let make: MakeDiff = {
        let calls = calls.clone();
        Arc::new(move |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err("the agent of pull member m did not reply within 5 s".to_owned()) }.boxed()
        })
    };
    let next = upgrade("m/apps/web", "h");
    let wait = Duration::from_secs(1);
    let got = ask(&diffs, "a", &next, &make, wait).await;
    assert!(matches!(&got, Got::Ready(m) if matches!(&**m, Made::Unmade(_))));
    ask(&diffs, "a", &next, &make, wait).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(FAILED_FRESH).await;
    ask(&diffs, "a", &next, &make, wait).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_long_diff_is_cut_on_a_line_and_the_page_says_how_much_is_left_out() {
    let line = "+  key: ".to_owned() + &"x".repeat(100) + "\n";
    let long = line.repeat(SHOWN / line.len() + 50);
    let make: MakeDiff = Arc::new(move |_| futures::future::ready(Ok(Some(long.clone()))).boxed());
    let next = upgrade("member-1/apps/web", "h");
    let got = ask(&Diffs::default(), "a", &next, &make, Duration::from_secs(1)).await;
    let Got::Ready(made) = &got else {
        panic!("{got:?}")
    };
    let Made::Diff { text, left_out } = &**made else {
        panic!("{made:?}")
    };
    assert!(text.len() <= SHOWN && text.ends_with('\n'));
    assert_eq!(*left_out, 50);
    let html = diff_page::page("team-a", "web", &next, &got).main();
    assert!(html.contains("The diff is cut at 256 KiB: 50 more line(s) left out"));
}

#[test]
fn every_line_is_escaped_and_added_and_removed_lines_keep_their_sign() {
    let next = upgrade("member-1/apps/web", "h");
    let text =
        format!("--- a\n+++ b\n@@ -1,2 +1,2 @@\n-  replicas: 1\n+  replicas: 2\n   note: {EVIL}\n");
    let got = Got::Ready(Arc::new(Made::Diff { text, left_out: 0 }));
    let html = diff_page::page("team-a", "web", &next, &got).main();
    assert!(html.contains("<del>-  replicas: 1</del>"), "{html}");
    assert!(html.contains("<ins>+  replicas: 2</ins>"), "{html}");
    assert!(
        html.contains("&lt;/code&gt;&lt;/pre&gt;&lt;script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script"), "{html}");
    assert!(html.contains("1 line(s) added (<code>+</code>), 1 removed"));
    assert!(html.contains("upgrade (revision 1 -&gt; 2); held back by the rollout"));
    let unmade = Got::Ready(Arc::new(Made::Unmade(format!("agent says {EVIL}"))));
    let html = diff_page::page("team-a", "web", &next, &unmade).main();
    assert!(
        html.contains("The diff is not shown: agent says &lt;/code&gt;"),
        "{html}"
    );
    // A rollback renders no chart: no diff offered.
    let rollback = Next {
        release: None,
        ..next
    };
    assert!(!offered(&rollback));
}

async fn send(app: &axum::Router, uri: &str, token: Option<&str>) -> (StatusCode, String, String) {
    let mut request = Request::get(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let csp = response.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, csp, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_diff_is_shown_only_to_the_viewers_of_its_controller_and_only_for_what_it_plans() {
    let (api, _dir) = crate::runtime::http::tests::state().await;
    let (hub, _) = fake::hub();
    api.fleet.set(controllers, hub);
    api.fleet.set_next(|namespace, name| {
        Arc::new(match (namespace, name) {
            ("team-a", "web") => vec![upgrade("member-1/apps/web", "h")],
            ("team-b", "db") => vec![upgrade("member-2/data/db", "h")],
            _ => Vec::new(),
        })
    });
    let (make, calls, _) = counting(Duration::from_millis(1));
    api.fleet.set_diff(make);
    let app = router(WebState::new(
        api,
        CancellationToken::new(),
        TaskTracker::new(),
    ));
    let web = path("team-a", "web", &"member-1/apps/web".parse().unwrap());
    let db = path("team-b", "db", &"member-2/data/db".parse().unwrap());
    assert_eq!(web, "/ui/controllers/team-a/web/diff/member-1/apps/web");

    // Without a token: sign in first. Another tenant's: as if not there, and nothing rendered.
    let (status, _, _) = send(&app, &web, None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _, hidden) = send(&app, &db, Some(fake::TEAM_A)).await;
    let (_, _, absent) = send(&app, &db.replace("/db/", "/nope/"), Some(fake::TEAM_A)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(hidden.replace("db", "nope"), absent);
    // A release the Controller does not plan for (another tenant's key under one's own name).
    let (status, _, body) = send(
        &app,
        &path("team-a", "web", &"member-2/data/db".parse().unwrap()),
        Some(fake::TEAM_A),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let (status, csp, body) = send(&app, &web, Some(fake::TEAM_A)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(csp, routes::CSP);
    assert!(body.contains("<ins>+  replicas: 2</ins>"), "{body}");
    assert!(!body.contains("<script>window"), "{body}");
    assert!(
        !body.contains("team-b") && !body.contains("member-2"),
        "{body}"
    );
    // The Controller's page links to it.
    let (_, _, page) = send(&app, "/ui/controllers/team-a/web", Some(fake::TEAM_A)).await;
    assert!(page.contains(&format!("href=\"{web}\"")), "{page}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_long_diff_of_characters_wider_than_a_byte_is_cut_between_characters() {
    // A line of 3-byte characters that crosses the cut: cutting by bytes alone would panic.
    let wide = "+  note: ".to_owned() + &"€".repeat(SHOWN) + "\n";
    let made = Made::of(Ok(Some(format!("--- a\n+++ b\n{wide}"))));
    assert_eq!(
        made,
        Made::Diff {
            text: "--- a\n+++ b\n".into(),
            left_out: 1
        }
    );
    let one_line = Made::of(Ok(Some("€".repeat(SHOWN))));
    assert_eq!(
        one_line,
        Made::Diff {
            text: String::new(),
            left_out: 1
        }
    );
}
