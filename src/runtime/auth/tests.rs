//! Tests of who may read the status API.

use std::sync::atomic::Ordering;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

fn header(value: &str) -> Result<Token, AuthError> {
    Token::from_header(Some(&HeaderValue::from_str(value).unwrap()))
}

#[test]
fn a_bearer_header_gives_its_token_whatever_the_case_of_the_scheme() {
    for value in ["Bearer abc.def", "bearer abc.def", "BEARER   abc.def  "] {
        assert_eq!(header(value).unwrap().0, "abc.def", "{value}");
    }
}

#[test]
fn no_header_is_no_token_and_any_other_shape_is_not_bearer() {
    assert!(matches!(Token::from_header(None), Err(AuthError::NoToken)));
    for value in [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer ",
        "Bearer a b",
        "abc",
    ] {
        assert!(
            matches!(header(value), Err(AuthError::NotBearer)),
            "{value}"
        );
    }
    let opaque = HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap();
    assert!(matches!(
        Token::from_header(Some(&opaque)),
        Err(AuthError::NotBearer)
    ));
}

#[test]
fn a_token_never_shows_in_debug_output_or_errors() {
    let token = header("Bearer s3cr3t").unwrap();
    assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    for error in [
        AuthError::NoToken,
        AuthError::NotBearer,
        AuthError::Rejected,
    ] {
        assert!(!error.to_string().contains("s3cr3t"));
    }
}

#[test]
fn unauthorized_answers_carry_a_bearer_challenge_and_hub_failures_are_unavailable() {
    let response = AuthError::Rejected.into_response();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    let response = AuthError::Hub {
        review: "TokenReview",
        reason: "no answer".into(),
    }
    .into_response();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!response.headers().contains_key(header::WWW_AUTHENTICATE));
}

#[test]
fn a_remembered_answer_expires_after_its_time_to_live() {
    let start = Instant::now();
    let mut cache = Expiring::new(Duration::from_secs(30), 10);
    cache.insert("k", true, start);
    assert_eq!(cache.get(&"k", start + Duration::from_secs(29)), Some(true));
    assert_eq!(cache.get(&"k", start + Duration::from_secs(30)), None);
    assert_eq!(cache.get(&"other", start), None);
}

#[test]
fn a_full_cache_drops_expired_answers_first_then_the_oldest() {
    let start = Instant::now();
    let at = |s| start + Duration::from_secs(s);
    let mut cache = Expiring::new(Duration::from_secs(30), 2);
    cache.insert(1, (), at(0));
    cache.insert(2, (), at(20));
    cache.insert(3, (), at(40));
    assert_eq!(cache.entries.len(), 2);
    assert_eq!(
        (cache.get(&1, at(40)), cache.get(&2, at(40))),
        (None, Some(()))
    );
    cache.insert(4, (), at(41));
    assert_eq!(cache.entries.len(), 2);
    assert_eq!(
        (
            cache.get(&2, at(41)),
            cache.get(&3, at(41)),
            cache.get(&4, at(41))
        ),
        (None, Some(()), Some(()))
    );
    cache.insert(4, (), at(42));
    assert_eq!(cache.entries.len(), 2, "replacing an entry makes no room");
}

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// Awaits the hub's next request, checks its path and answers `status` in the review it sent.
async fn expect(hub: &mut Handle, path: &str, status: Value) -> Value {
    let (request, send) = tokio::time::timeout(Duration::from_secs(5), hub.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request to {path}"))
        .unwrap();
    assert_eq!(
        (request.method().as_str(), request.uri().path()),
        ("POST", path)
    );
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    let answer = serde_json::to_vec(&fake::review(&body, status)).unwrap();
    send.send_response(
        Response::builder()
            .status(201)
            .body(Body::from(answer))
            .unwrap(),
    );
    body
}

/// Holds that no request comes within a while.
async fn nothing(hub: &mut Handle) {
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(300), hub.next_request()).await
    {
        panic!("unexpected request {}", request.uri());
    }
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

fn reviewer() -> (Arc<Reviewer>, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let reviewer = Reviewer::new(Client::new(service, "default"), Arc::default());
    (Arc::new(reviewer), handle)
}

#[tokio::test]
async fn a_token_is_reviewed_once_and_its_identity_asked_about_each_namespace_once() {
    let (reviewer, mut hub) = reviewer();
    let token = header("Bearer t0k3n").unwrap();
    let caller = {
        let reviewer = reviewer.clone();
        tokio::spawn(async move { reviewer.authenticate(&token, None).await })
    };
    let user = json!({"username": "system:serviceaccount:a:viewer", "uid": "u-1",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=x"]}});
    let sent = expect(
        &mut hub,
        TOKEN_REVIEWS,
        json!({"authenticated": true, "user": user}),
    )
    .await;
    assert_eq!(sent["spec"], json!({"token": "t0k3n"}));
    let who = caller.await.unwrap().unwrap();
    assert_eq!(who.username, "system:serviceaccount:a:viewer");
    assert_eq!(
        *reviewer
            .authenticate(&header("Bearer t0k3n").unwrap(), None)
            .await
            .unwrap(),
        *who
    );
    nothing(&mut hub).await;

    let access = {
        let (reviewer, who) = (reviewer.clone(), who.clone());
        tokio::spawn(async move {
            let namespaces = ["a".to_owned(), "b".to_owned()].into();
            reviewer.access(&who, namespaces).await
        })
    };
    let everywhere = expect(&mut hub, ACCESS_REVIEWS, json!({"allowed": false})).await;
    assert_eq!(
        everywhere["spec"],
        json!({
            "user": "system:serviceaccount:a:viewer", "uid": "u-1",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=x"]},
            "resourceAttributes": {"group": "multitenancy.dev", "resource": "controllers", "verb": "get"},
        })
    );
    for _ in 0..2 {
        let (request, send) = hub.next_request().await.unwrap();
        assert_eq!(request.uri().path(), ACCESS_REVIEWS);
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        let namespace = body["spec"]["resourceAttributes"]["namespace"].clone();
        let allowed = json!({"allowed": namespace == "a"});
        let answer = serde_json::to_vec(&fake::review(&body, allowed)).unwrap();
        send.send_response(
            Response::builder()
                .status(201)
                .body(Body::from(answer))
                .unwrap(),
        );
    }
    let expected = Access::Namespaces(["a".to_owned()].into());
    assert_eq!(access.await.unwrap().unwrap(), expected);
    let again = reviewer
        .access(&who, ["a".to_owned(), "b".to_owned()].into())
        .await
        .unwrap();
    assert_eq!(again, expected);
    nothing(&mut hub).await;
}

#[tokio::test]
async fn an_identity_allowed_cluster_wide_is_asked_about_no_namespace() {
    let (hub, asked) = fake::hub();
    let reviewer = Reviewer::new(hub, Arc::default());
    let admin = reviewer
        .authenticate(&header(&format!("Bearer {}", fake::ADMIN)).unwrap(), None)
        .await
        .unwrap();
    let access = reviewer
        .access(&admin, ["a".to_owned(), "b".to_owned()].into())
        .await
        .unwrap();
    assert_eq!(access, Access::Everywhere);
    assert!(access.allows("anything"));
    assert_eq!(asked.load(Ordering::SeqCst), 2, "one TokenReview, one SAR");
}

#[tokio::test]
async fn a_rejected_token_is_unauthorized_and_its_rejection_remembered() {
    let (hub, asked) = fake::hub();
    let reviewer = Reviewer::new(hub, Arc::default());
    for _ in 0..3 {
        let err = reviewer
            .authenticate(&header("Bearer garbage").unwrap(), None)
            .await
            .unwrap_err();
        assert!(matches!(err, AuthError::Rejected), "{err}");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_failing_hub_is_unavailable_not_unauthorized_and_is_asked_again() {
    let (hub, asked) = fake::hub();
    let reviewer = Reviewer::new(hub, Arc::default());
    let broken = header(&format!("Bearer {}", fake::BROKEN)).unwrap();
    for _ in 0..2 {
        let err = reviewer.authenticate(&broken, None).await.unwrap_err();
        assert!(
            matches!(
                err,
                AuthError::Hub {
                    review: "TokenReview",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("etcdserver: request timed out"),
            "{err}"
        );
        assert!(!err.to_string().contains(fake::BROKEN), "{err}");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_hub_that_does_not_answer_is_given_up_after_the_review_timeout() {
    let (reviewer, _hub) = reviewer();
    let started = Instant::now();
    let err = reviewer
        .authenticate(&header("Bearer t").unwrap(), None)
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
    assert_eq!(
        err.to_string(),
        "cannot check the caller with the hub (TokenReview): no answer within 5s; try again later"
    );
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_new_tokens_costs_the_hub_its_budget_and_then_429_while_known_tokens_work() {
    let (hub, asked) = fake::hub();
    let per_address = Rate {
        burst: 3,
        per_second: 1,
    };
    let in_all = Rate {
        burst: 5,
        per_second: 2,
    };
    let reviewer = Reviewer::with_budgets(hub, Arc::default(), per_address, in_all);
    let (a, b) = (Some([10, 0, 0, 1].into()), Some([10, 0, 0, 2].into()));
    let admin = header(&format!("Bearer {}", fake::ADMIN)).unwrap();
    reviewer.authenticate(&admin, a).await.unwrap();
    let mut answers = Vec::new();
    for i in 0..100 {
        let random = header(&format!("Bearer random-{i}")).unwrap();
        answers.push(reviewer.authenticate(&random, a).await.unwrap_err());
    }
    assert!(
        answers[..2]
            .iter()
            .all(|e| matches!(e, AuthError::Rejected))
    );
    assert!(
        answers[2..]
            .iter()
            .all(|e| matches!(e, AuthError::Busy { retry_after } if retry_after.as_secs() == 1)),
        "{:?}",
        answers[2]
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        3,
        "the address's burst, no more"
    );
    reviewer
        .authenticate(&admin, a)
        .await
        .expect("a known token is answered from the cache");
    // Another address has its own budget, within the common one (5, of which 3 are spent).
    for i in 0..5 {
        let random = header(&format!("Bearer other-{i}")).unwrap();
        let err = reviewer.authenticate(&random, b).await.unwrap_err();
        assert_eq!(matches!(err, AuthError::Busy { .. }), i >= 2, "{i}: {err}");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 5);
    tokio::time::advance(Duration::from_secs(1)).await;
    let random = header("Bearer later").unwrap();
    assert!(matches!(
        reviewer.authenticate(&random, a).await.unwrap_err(),
        AuthError::Rejected
    ));
    assert_eq!(asked.load(Ordering::SeqCst), 6, "refilled after a second");
}

#[test]
fn too_many_new_tokens_answer_429_with_retry_after() {
    let response = AuthError::Busy {
        retry_after: Duration::from_secs(3),
    }
    .into_response();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[header::RETRY_AFTER], "3");
}

#[test]
fn the_budgets_remember_a_bounded_number_of_addresses() {
    let now = Instant::now();
    let mut budgets = Budgets::new(
        NEW_TOKENS_PER_ADDRESS,
        Rate {
            burst: 100_000,
            per_second: 1,
        },
        now,
    );
    for i in 0..3 * ADDRESSES as u32 {
        let address = std::net::Ipv4Addr::from(i);
        assert!(budgets.take(Some(address.into()), now).is_ok());
    }
    assert!(budgets.per_address.buckets.len() <= ADDRESSES);
    assert!(budgets.take(None, now).is_ok(), "the common budget alone");
}

#[tokio::test(start_paused = true)]
async fn answers_are_asked_for_again_once_their_time_to_live_is_over() {
    let (hub, asked) = fake::hub();
    let reviewer = Reviewer::new(hub, Arc::default());
    let token = header(&format!("Bearer {}", fake::TEAM_A)).unwrap();
    let who = reviewer.authenticate(&token, None).await.unwrap();
    let namespaces = || BTreeSet::from(["team-a".to_owned()]);
    reviewer.access(&who, namespaces()).await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    tokio::time::advance(REVIEW_TTL - Duration::from_secs(1)).await;
    reviewer.authenticate(&token, None).await.unwrap();
    reviewer.access(&who, namespaces()).await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    tokio::time::advance(Duration::from_secs(1)).await;
    let who = reviewer.authenticate(&token, None).await.unwrap();
    let access = reviewer.access(&who, namespaces()).await.unwrap();
    assert_eq!(access, Access::Namespaces(namespaces()));
    assert_eq!(asked.load(Ordering::SeqCst), 6);
}

#[tokio::test(start_paused = true)]
async fn callers_asking_the_same_at_once_share_one_access_review() {
    let (hub, asked) = fake::hub();
    let reviewer = Arc::new(Reviewer::new(hub, Arc::default()));
    let token = header(&format!("Bearer {}", fake::TEAM_A)).unwrap();
    let who = reviewer.authenticate(&token, None).await.unwrap();
    let namespaces = || BTreeSet::from(["team-a".to_owned(), "team-b".to_owned()]);
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let (reviewer, who) = (reviewer.clone(), who.clone());
            tokio::spawn(async move { reviewer.access(&who, namespaces()).await })
        })
        .collect();
    for caller in callers {
        let access = caller.await.unwrap().unwrap();
        assert_eq!(
            access,
            Access::Namespaces(BTreeSet::from(["team-a".into()]))
        );
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        4,
        "one TokenReview, then one review each of cluster-wide, team-a and team-b"
    );
    assert!(reviewer.asking.is_empty(), "no question is left held");
}

#[tokio::test(start_paused = true)]
async fn a_caller_past_its_budget_of_access_reviews_gets_429_while_others_are_answered() {
    let (hub, asked) = fake::hub();
    let per_caller = Rate {
        burst: 3,
        per_second: 1,
    };
    let reviewer = Reviewer::new(hub, Arc::default()).with_caller_budget(per_caller);
    let team_a = header(&format!("Bearer {}", fake::TEAM_A)).unwrap();
    let who = reviewer.authenticate(&team_a, None).await.unwrap();
    let namespaces: BTreeSet<String> = (0..5).map(|i| format!("ns-{i}")).collect();
    let err = reviewer.access(&who, namespaces.clone()).await.unwrap_err();
    let AuthError::CallerBusy { user, retry_after } = &err else {
        panic!("{err}");
    };
    assert_eq!(user, "system:serviceaccount:team-a:viewer");
    assert_eq!(retry_after.as_secs(), 1);
    assert_eq!(err.into_response().status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        asked.load(Ordering::SeqCst) <= 1 + 3,
        "the caller's burst, no more"
    );

    let admin = header(&format!("Bearer {}", fake::ADMIN)).unwrap();
    let admin = reviewer.authenticate(&admin, None).await.unwrap();
    let access = reviewer.access(&admin, namespaces.clone()).await.unwrap();
    assert_eq!(
        access,
        Access::Everywhere,
        "another caller has a budget of its own"
    );

    // The answers given are remembered: each retry once the budget refills gets further.
    let mut access = None;
    for _ in 0..5 {
        tokio::time::advance(Duration::from_secs(3)).await;
        if let Ok(answer) = reviewer.access(&who, namespaces.clone()).await {
            access = Some(answer);
            break;
        }
    }
    assert_eq!(access, Some(Access::Namespaces(BTreeSet::new())));
}
