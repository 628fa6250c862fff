//! Tests of the Git webhook receiver's checks: signatures of each sender, in constant time and refused when wrong; the repositories a payload names; floods of badly signed hooks bounded apart from valid ones; the cached keys of webhook Secrets.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use axum::http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use super::{
    keys::{KEY_TTL, KeyCache},
    windows::{FAILED_PER_WINDOW, HookWindows, VALID_PER_WINDOW, WINDOW},
    *,
};

fn signed(secret: &[u8], body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).unwrap();
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in pairs {
        out.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    out
}

#[test]
fn each_sender_is_taken_only_with_its_own_signature_of_this_body() {
    let (secret, body) = (b"s3cret-hook", br#"{"ref":"refs/heads/main"}"#);
    let tag = signed(secret, body);
    let github = headers(&[("x-hub-signature-256", format!("sha256={tag}"))]);
    assert_eq!(verify(&github, body, secret), Some(Sender::GitHub));
    let gitea = headers(&[("x-gitea-signature", tag.clone())]);
    assert_eq!(verify(&gitea, body, secret), Some(Sender::Gitea));
    let gitlab = headers(&[("x-gitlab-token", "s3cret-hook".into())]);
    assert_eq!(verify(&gitlab, body, secret), Some(Sender::GitLab));
    // Another body, another secret, a truncated or malformed tag, no header at all.
    assert_eq!(verify(&github, b"{}", secret), None);
    assert_eq!(verify(&github, body, b"other"), None);
    assert_eq!(
        verify(
            &headers(&[("x-hub-signature-256", format!("sha256={}", &tag[..10]))]),
            body,
            secret
        ),
        None
    );
    assert_eq!(
        verify(
            &headers(&[("x-hub-signature-256", tag.clone())]),
            body,
            secret
        ),
        None
    );
    assert_eq!(
        verify(
            &headers(&[("x-gitea-signature", "zz".repeat(32))]),
            body,
            secret
        ),
        None
    );
    assert_eq!(
        verify(
            &headers(&[("x-gitlab-token", "s3cret-hoo".into())]),
            body,
            secret
        ),
        None
    );
    assert_eq!(verify(&HeaderMap::new(), body, secret), None);
}

#[test]
fn a_payload_names_its_repositories_in_normal_form() {
    let github = br#"{"repository":{"clone_url":"https://GIT.example.com/team-a/charts.git","ssh_url":"ssh://git@git.example.com:22/team-a/charts.git","html_url":"https://git.example.com/team-a/charts"}}"#;
    let names: Vec<String> = repositories(github).iter().map(|u| u.to_string()).collect();
    assert_eq!(
        names,
        [
            "https://git.example.com/team-a/charts",
            "ssh://git@git.example.com/team-a/charts"
        ]
    );
    let gitlab = br#"{"project":{"git_http_url":"https://gitlab.example.com/g/p.git","git_ssh_url":"git@gitlab.example.com:g/p.git"}}"#;
    let names: Vec<String> = repositories(gitlab).iter().map(|u| u.to_string()).collect();
    assert_eq!(names, ["https://gitlab.example.com/g/p"]);
    assert!(repositories(b"not json").is_empty());
    assert!(repositories(br#"{"repository":{"clone_url":"file:///etc"}}"#).is_empty());
}

/// The Secrets of the operator's namespace, by name, each holding the shared secret under `token`;
/// counts its reads and yields once in each, so hooks posted together overlap in it.
#[derive(Default)]
struct Secrets {
    tokens: Mutex<HashMap<String, String>>,
    reads: std::sync::atomic::AtomicUsize,
}

impl Secrets {
    /// Secret `name` now holds `token`, or is gone.
    fn set(&self, name: &str, token: Option<&str>) {
        let mut tokens = self.tokens.lock().unwrap();
        match token {
            Some(token) => tokens.insert(name.to_owned(), token.to_owned()),
            None => tokens.remove(name),
        };
    }

    /// How many times a Secret was read.
    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl ReadSecret for Secrets {
    fn read<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<crate::charts::credentials::SecretData>, String>,
    > {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let found = (namespace == "tenancy-hub")
            .then(|| self.tokens.lock().unwrap().get(name).cloned())
            .flatten()
            .map(|token| crate::charts::credentials::SecretData::of(&[("token", &token)]));
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(found)
        })
    }

    fn labels<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<std::collections::BTreeMap<String, String>>, String>,
    > {
        Box::pin(async { Ok(None) })
    }
}

/// A receiver, the Secrets it reads and the repositories it made due.
struct Receiver {
    hooks: GitHooks,
    secrets: Arc<Secrets>,
    due: Arc<Mutex<Vec<SourceUrl>>>,
}

impl Receiver {
    /// The repositories made due so far, in order.
    fn due(&self) -> Vec<String> {
        let due = self.due.lock().unwrap();
        due.iter().map(|u| u.to_string()).collect()
    }
}

/// Every one of `codes` is `code`.
fn all_answered(codes: &[StatusCode], code: StatusCode) {
    assert!(codes.iter().all(|&c| c == code), "{codes:?}");
}

/// The Git entry of `team` under `https://git.example.com/<team>/`, taking hooks signed with
/// Secret `secret`.
fn policy(team: &str, secret: &str) -> TenancyPolicy {
    use crate::api::policy::{GitAccess, GitWebhook, SourceAccess, TenancyPolicySpec};
    TenancyPolicy::new(
        team,
        TenancyPolicySpec {
            sources: vec![SourceAccess {
                url: format!("https://git.example.com/{team}/"),
                git: Some(GitAccess {
                    webhook: Some(GitWebhook {
                        secret_ref: crate::api::crd::SecretReference {
                            name: secret.into(),
                        },
                    }),
                    ..GitAccess::default()
                }),
                ..SourceAccess::default()
            }],
            ..TenancyPolicySpec::default()
        },
    )
}

/// A receiver knowing policies `team-a` (Secret `hook-a`, holding `s3cret-a`), `team-b`
/// (Secret `hook-b`, holding `s3cret-b`) and `team-c`, whose Secret `gone` does not exist.
fn receiver() -> Receiver {
    let (store, mut writer) = kube::runtime::reflector::store::<TenancyPolicy>();
    for (team, secret) in [
        ("team-a", "hook-a"),
        ("team-b", "hook-b"),
        ("team-c", "gone"),
    ] {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(policy(team, secret)));
    }
    let secrets = Arc::new(Secrets::default());
    secrets.set("hook-a", Some("s3cret-a"));
    secrets.set("hook-b", Some("s3cret-b"));
    let due = Arc::new(Mutex::new(Vec::new()));
    let hooks = GitHooks::new(
        store,
        secrets.clone(),
        "tenancy-hub".into(),
        Arc::new(ChartCatalog::with_resolver(
            Box::new(Due(due.clone())),
            Duration::from_secs(60),
        )),
    );
    Receiver {
        hooks,
        secrets,
        due,
    }
}

/// Resolves nothing (the hook tests never plan) and keeps the repositories made due.
struct Due(Arc<Mutex<Vec<SourceUrl>>>);

impl crate::charts::catalog::Resolve for Due {
    fn resolve<'a>(
        &'a self,
        _: &'a crate::charts::catalog::RemoteKey,
        _: &'a SourceUrl,
        _: Option<Instant>,
    ) -> futures::future::BoxFuture<'a, Result<crate::charts::cache::Resolved, String>> {
        Box::pin(async { Err("nothing resolves here".to_owned()) })
    }

    fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        self.0.lock().unwrap().extend(repositories.iter().cloned());
        repositories.len()
    }
}

async fn post(
    hooks: &GitHooks,
    policy: &str,
    headers: HeaderMap,
    body: &'static [u8],
) -> StatusCode {
    receive(
        State(hooks.clone()),
        Path(policy.to_owned()),
        headers,
        Bytes::from_static(body),
    )
    .await
    .status()
}

/// A push of `https://git.example.com/team-a/charts.git`.
const PUSH_A: &[u8] =
    br#"{"repository":{"clone_url":"https://git.example.com/team-a/charts.git"}}"#;
/// A push of `https://git.example.com/team-b/charts.git`.
const PUSH_B: &[u8] =
    br#"{"repository":{"clone_url":"https://git.example.com/team-b/charts.git"}}"#;

/// Gitea's signature of `body` with `secret`.
fn gitea(secret: &str, body: &[u8]) -> HeaderMap {
    headers(&[("x-gitea-signature", signed(secret.as_bytes(), body))])
}

/// Posts `count` copies of one hook at once; their answers.
async fn flood(
    hooks: &GitHooks,
    policy: &str,
    sent: HeaderMap,
    body: &'static [u8],
    count: u32,
) -> Vec<StatusCode> {
    futures::future::join_all((0..count).map(|_| post(hooks, policy, sent.clone(), body))).await
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_badly_signed_hooks_leaves_the_teams_valid_hook_accepted_and_its_source_due() {
    let r = receiver();
    let codes = flood(&r.hooks, "team-a", gitea("guess", PUSH_A), PUSH_A, 200).await;
    all_answered(&codes, StatusCode::UNAUTHORIZED);
    assert_eq!(r.secrets.reads(), 1, "one read of the Secret for the flood");
    assert!(r.due.lock().unwrap().is_empty());
    assert_eq!(
        post(&r.hooks, "team-a", gitea("s3cret-a", PUSH_A), PUSH_A).await,
        StatusCode::ACCEPTED
    );
    let due = r.due();
    assert_eq!(due, ["https://git.example.com/team-a/charts"]);
    assert_eq!(r.secrets.reads(), 1);
}

#[tokio::test(start_paused = true)]
async fn past_the_failure_bound_a_policys_hooks_are_turned_away_unread_and_other_teams_are_unaffected()
 {
    let r = receiver();
    let bad = gitea("guess", PUSH_A);
    let codes = flood(&r.hooks, "team-a", bad.clone(), PUSH_A, FAILED_PER_WINDOW).await;
    all_answered(&codes, StatusCode::UNAUTHORIZED);
    // The cached key expired: anything read or hashed now would read the Secret again.
    tokio::time::advance(KEY_TTL).await;
    assert_eq!(
        post(&r.hooks, "team-a", bad.clone(), PUSH_A).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        post(&r.hooks, "team-a", gitea("s3cret-a", PUSH_A), PUSH_A).await,
        StatusCode::TOO_MANY_REQUESTS,
        "past the failure bound even a valid hook is not looked at"
    );
    assert_eq!(r.secrets.reads(), 1, "nothing read past the bound");
    // Team b, its bad and its valid hooks, as if nothing happened.
    assert_eq!(
        post(&r.hooks, "team-b", gitea("guess", PUSH_B), PUSH_B).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&r.hooks, "team-b", gitea("s3cret-b", PUSH_B), PUSH_B).await,
        StatusCode::ACCEPTED
    );
    // Once the window passed, team a's valid hook is taken again.
    tokio::time::advance(WINDOW - KEY_TTL).await;
    assert_eq!(
        post(&r.hooks, "team-a", gitea("s3cret-a", PUSH_A), PUSH_A).await,
        StatusCode::ACCEPTED
    );
    let due = r.due();
    assert_eq!(
        due,
        [
            "https://git.example.com/team-b/charts",
            "https://git.example.com/team-a/charts"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_rotated_or_deleted_secret_takes_effect_once_its_cached_key_expires() {
    let r = receiver();
    let (old, new) = (gitea("s3cret-a", PUSH_A), gitea("rotated", PUSH_A));
    assert_eq!(
        post(&r.hooks, "team-a", old.clone(), PUSH_A).await,
        StatusCode::ACCEPTED
    );
    r.secrets.set("hook-a", Some("rotated"));
    // Within the cache period the key read before still holds.
    tokio::time::advance(KEY_TTL - Duration::from_millis(10)).await;
    assert_eq!(
        post(&r.hooks, "team-a", new.clone(), PUSH_A).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&r.hooks, "team-a", old.clone(), PUSH_A).await,
        StatusCode::ACCEPTED
    );
    tokio::time::advance(Duration::from_millis(10)).await;
    assert_eq!(
        post(&r.hooks, "team-a", new.clone(), PUSH_A).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(&r.hooks, "team-a", old, PUSH_A).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(r.secrets.reads(), 2);
    r.secrets.set("hook-a", None);
    tokio::time::advance(KEY_TTL).await;
    let codes = flood(&r.hooks, "team-a", new, PUSH_A, 50).await;
    all_answered(&codes, StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.secrets.reads(),
        3,
        "a missing Secret is cached as missing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_secret_is_read_once_per_cache_period_and_answered_as_a_bad_signature() {
    let r = receiver();
    let codes = flood(&r.hooks, "team-c", gitea("anything", PUSH_A), PUSH_A, 100).await;
    all_answered(&codes, StatusCode::UNAUTHORIZED);
    assert_eq!(r.secrets.reads(), 1);
    tokio::time::advance(KEY_TTL).await;
    post(&r.hooks, "team-c", gitea("anything", PUSH_A), PUSH_A).await;
    assert_eq!(r.secrets.reads(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_policy_and_a_bad_signature_get_the_same_answers_and_valid_hooks_have_their_own_window()
 {
    let r = receiver();
    let (good, bad) = (gitea("s3cret-a", PUSH_A), gitea("guess", PUSH_A));
    assert_eq!(
        post(&r.hooks, "team-a", bad.clone(), PUSH_A).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&r.hooks, "team-z", good.clone(), PUSH_A).await,
        StatusCode::UNAUTHORIZED
    );
    // A policy's failures past the bound and an unknown name's alike: 401, then 429.
    for policy in ["team-a", "team-z"] {
        let codes = flood(&r.hooks, policy, bad.clone(), PUSH_A, FAILED_PER_WINDOW + 5).await;
        let unauthorized = codes
            .iter()
            .filter(|&&c| c == StatusCode::UNAUTHORIZED)
            .count();
        let limited = codes
            .iter()
            .filter(|&&c| c == StatusCode::TOO_MANY_REQUESTS)
            .count();
        // The one posted above.
        let counted = 1;
        assert_eq!(
            (unauthorized, limited),
            (FAILED_PER_WINDOW as usize - counted, 5 + counted),
            "{policy}"
        );
    }
    tokio::time::advance(WINDOW).await;
    // Badly signed hooks do not take the valid ones' budget; past that budget, 429.
    flood(&r.hooks, "team-a", bad, PUSH_A, 100).await;
    let codes = flood(&r.hooks, "team-a", good.clone(), PUSH_A, VALID_PER_WINDOW).await;
    all_answered(&codes, StatusCode::ACCEPTED);
    assert_eq!(
        post(&r.hooks, "team-a", good, PUSH_A).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn the_keys_kept_and_the_policies_tracked_are_bounded() {
    let r = receiver();
    let keys = KeyCache::default();
    for i in 0..100 {
        keys.key(&*r.secrets, "tenancy-hub", &format!("hook-{i}"))
            .await;
    }
    assert_eq!(keys.len(), 64);
    assert!(
        keys.key(&*r.secrets, "tenancy-hub", "hook-a")
            .await
            .is_some()
    );
    let windows = HookWindows::default();
    for i in 0..5000 {
        windows.attempt(&format!("stranger-{i}"), false);
    }
    assert_eq!(windows.tracked(), 0, "unknown names track nothing");
    for i in 0..1024 {
        assert!(windows.attempt(&format!("team-{i}"), true).is_some());
    }
    assert!(windows.attempt("team-1024", true).is_none());
    tokio::time::advance(WINDOW).await;
    assert!(windows.attempt("team-1024", true).is_some());
    assert_eq!(windows.tracked(), 1);
}
