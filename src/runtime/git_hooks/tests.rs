//! Tests of the Git webhook receiver's checks: signatures of each sender, in constant time and refused when wrong; the repositories a payload names; the rate bound.

use axum::http::{HeaderMap, HeaderValue};

use super::*;

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

/// The Secrets of the operator's namespace: `hook` holds the shared secret.
struct OneSecret;

impl ReadSecret for OneSecret {
    fn read<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<crate::charts::credentials::SecretData>, String>,
    > {
        let found = (namespace == "tenancy-hub" && name == "hook")
            .then(|| crate::charts::credentials::SecretData::of(&[("token", "s3cret-hook")]));
        Box::pin(async move { Ok(found) })
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

/// A receiver knowing policy `team-a`, whose Git entry under `https://git.example.com/team-a/`
/// takes hooks signed with Secret `hook`.
fn hooks() -> GitHooks {
    use crate::api::policy::{GitAccess, GitWebhook, SourceAccess, TenancyPolicySpec};
    let (store, mut writer) = kube::runtime::reflector::store::<TenancyPolicy>();
    let policy = TenancyPolicy::new(
        "team-a",
        TenancyPolicySpec {
            sources: vec![SourceAccess {
                url: "https://git.example.com/team-a/".into(),
                git: Some(GitAccess {
                    webhook: Some(GitWebhook {
                        secret_ref: crate::api::crd::SecretReference {
                            name: "hook".into(),
                        },
                    }),
                    ..GitAccess::default()
                }),
                ..SourceAccess::default()
            }],
            ..TenancyPolicySpec::default()
        },
    );
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(policy));
    GitHooks {
        policies: store,
        secrets: Arc::new(OneSecret),
        operator_namespace: "tenancy-hub".into(),
        charts: Arc::new(ChartCatalog::with_resolver(
            Box::new(NoResolver),
            Duration::from_secs(60),
        )),
        windows: Default::default(),
    }
}

/// Resolves nothing: the hook tests never plan.
struct NoResolver;

impl crate::charts::catalog::Resolve for NoResolver {
    fn resolve<'a>(
        &'a self,
        _: &'a crate::charts::catalog::RemoteKey,
        _: &'a SourceUrl,
        _: Option<Instant>,
    ) -> futures::future::BoxFuture<'a, Result<crate::charts::cache::Resolved, String>> {
        Box::pin(async { Err("nothing resolves here".to_owned()) })
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

#[tokio::test]
async fn an_unknown_policy_and_a_bad_signature_get_the_same_answer_and_a_flood_is_cut() {
    let hooks = hooks();
    let body: &'static [u8] =
        br#"{"repository":{"clone_url":"https://git.example.com/team-a/charts.git"}}"#;
    let good = headers(&[("x-gitea-signature", signed(b"s3cret-hook", body))]);
    let bad = headers(&[("x-gitea-signature", signed(b"guess", body))]);
    assert_eq!(
        post(&hooks, "team-a", good.clone(), body).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(&hooks, "team-a", bad, body).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(&hooks, "team-b", good.clone(), body).await,
        StatusCode::UNAUTHORIZED
    );
    for _ in 0..PER_WINDOW {
        post(&hooks, "team-a", good.clone(), body).await;
    }
    assert_eq!(
        post(&hooks, "team-a", good, body).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
