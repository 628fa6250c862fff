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
