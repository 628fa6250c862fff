//! The Git webhook receiver (`POST /hooks/git/{policy}`): a push announced by GitHub, Gitea/Forgejo or GitLab, checked against the secret a TenancyPolicy's Git `sources` entry names, makes the repositories it names due at once, so a push reaches the members in seconds rather than at the next interval.
//!
//! Everything about a request is bounded before it costs anything. The body: 256 KiB (413
//! past it). Hooks per policy, in windows of 10 seconds: [`windows::FAILED_PER_WINDOW`] (300)
//! that fail verification, counted (and checked, 429 past it) before anything is read or
//! hashed, and [`windows::VALID_PER_WINDOW`] (20) valid hooks, counted only once their
//! signature verified (429 past them). So a stranger posting badly signed hooks at a team's
//! endpoint takes nothing of the team's valid hooks, and nothing of any other policy's: its
//! flood counts in that policy's failure window alone. The Secrets: each webhook Secret's key
//! is kept [`keys::KEY_TTL`] (5 seconds), read once per period however many hooks arrive (a
//! changed, deleted or created Secret takes effect within it: [`keys`]). The policies tracked:
//! at most 1024; names that are no policy taking hooks share 256 windows and cost no read and
//! no hash.
//!
//! The worst case, per 10 seconds: for each policy taking hooks, at most 320 hooks hashed
//! (300 failing, 20 valid), each once per distinct webhook Secret the policy names, of at most
//! 256 KiB: 80 MiB of HMAC-SHA256 per policy and Secret, about 0.05 s of one core at the
//! 1.5 GB/s of SHA-256 with the CPU's SHA extensions (some 0.2 s without them). Past a policy's
//! failure bound, its hooks are turned away unread until the window passes, valid ones too: a
//! valid hook cannot be told from a forged one without hashing it, and any bound on hashing is
//! a flood size past which it is not. That size is 15 times the valid rate, so suppressing a
//! team's hooks takes a stranger a steady 30 hooks a second at that team's endpoint, and then
//! only brings the team back to its sources' `interval`, which polling keeps.
//!
//! The signature is checked in constant time (HMAC-SHA256 of the body for GitHub's
//! `X-Hub-Signature-256` and Gitea's `X-Gitea-Signature`; GitLab's `X-Gitlab-Token` compared
//! through an HMAC of each side), and an unknown policy, a policy without a webhook, a missing
//! Secret and a bad signature all get the same 401 (and the same 429 past the failure bound),
//! so a caller learns nothing of which exist. A valid hook only makes sources due: what is
//! fetched and from where stays the policies' and the Controllers'.

mod keys;
mod windows;

use std::{collections::BTreeSet, sync::Arc};

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use hmac::{Hmac, Mac};
use kube::runtime::reflector::Store;
use sha2::Sha256;

use self::{keys::KeyCache, windows::HookWindows};
use crate::{
    api::policy::TenancyPolicy,
    charts::{catalog::ChartCatalog, credentials::ReadSecret},
    policy::source::SourceUrl,
};

/// The largest hook body read.
pub(crate) const MAX_BODY: usize = 256 << 10;

/// What the receiver needs: the policies, the Secrets of the operator's namespace, the catalog
/// whose Git sources it makes due, the keys of the webhook Secrets and the rate windows.
#[derive(Clone)]
pub(crate) struct GitHooks {
    /// Every TenancyPolicy on the hub.
    policies: Store<TenancyPolicy>,
    /// Reads the webhook Secrets.
    secrets: Arc<dyn ReadSecret>,
    /// The operator's namespace, holding them.
    operator_namespace: String,
    /// Where Git sources are made due.
    charts: Arc<ChartCatalog>,
    /// The webhook Secrets' keys, read a few seconds ago at most.
    keys: Arc<KeyCache>,
    /// Hooks failed and taken per policy in the current window.
    windows: Arc<HookWindows>,
}

impl GitHooks {
    /// A receiver of the hooks of `policies`, signed with the Secrets `secrets` reads in
    /// `operator_namespace`, making Git sources of `charts` due.
    pub(crate) fn new(
        policies: Store<TenancyPolicy>,
        secrets: Arc<dyn ReadSecret>,
        operator_namespace: String,
        charts: Arc<ChartCatalog>,
    ) -> Self {
        Self {
            policies,
            secrets,
            operator_namespace,
            charts,
            keys: Default::default(),
            windows: Default::default(),
        }
    }
}

/// Who sent a hook, by the header that signs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sender {
    /// `X-Hub-Signature-256: sha256=<hex>`.
    GitHub,
    /// `X-Gitea-Signature: <hex>` (Forgejo sends it too).
    Gitea,
    /// `X-Gitlab-Token: <token>`.
    GitLab,
}

type HmacSha256 = Hmac<Sha256>;

/// Which sender signed `body` with `secret`, checked in constant time; None when no header
/// is there or none verifies.
pub(crate) fn verify(headers: &HeaderMap, body: &[u8], secret: &[u8]) -> Option<Sender> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signed = |hex_tag: &str| {
        let tag = decode_hex(hex_tag.trim())?;
        let mut mac = HmacSha256::new_from_slice(secret).ok()?;
        mac.update(body);
        mac.verify_slice(&tag).ok()
    };
    if let Some(value) = header("x-hub-signature-256") {
        return value
            .strip_prefix("sha256=")
            .and_then(signed)
            .map(|()| Sender::GitHub);
    }
    if let Some(value) = header("x-gitea-signature") {
        return signed(value).map(|()| Sender::Gitea);
    }
    if let Some(token) = header("x-gitlab-token") {
        // Both sides through one keyed hash, so the comparison is of fixed length and constant
        // time.
        let tag = |text: &[u8]| {
            let mut mac =
                HmacSha256::new_from_slice(b"tenancy-hub gitlab token").expect("any key length");
            mac.update(text);
            mac
        };
        let expected = tag(secret).finalize().into_bytes();
        return tag(token.as_bytes())
            .verify_slice(&expected)
            .ok()
            .map(|()| Sender::GitLab);
    }
    None
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 128 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The repositories a push payload names, in normal form: GitHub's and Gitea's
/// `repository.{clone_url, ssh_url, html_url}`, GitLab's `project.{git_http_url, git_ssh_url,
/// web_url}` and `repository.{git_http_url, git_ssh_url}`. What does not parse is left out.
pub(crate) fn repositories(body: &[u8]) -> BTreeSet<SourceUrl> {
    let Ok(payload) = serde_json::from_slice::<serde_json::Value>(body) else {
        return BTreeSet::new();
    };
    let mut out = BTreeSet::new();
    for (object, keys) in [
        (
            "repository",
            &[
                "clone_url",
                "ssh_url",
                "html_url",
                "git_http_url",
                "git_ssh_url",
            ][..],
        ),
        ("project", &["git_http_url", "git_ssh_url", "web_url"][..]),
    ] {
        for key in keys {
            if let Some(url) = payload[object][key].as_str()
                && let Ok((name, _)) = SourceUrl::git(url)
            {
                out.insert(name);
            }
        }
    }
    out
}

impl GitHooks {
    /// The Git entries of `policy` that take hooks: each prefix and its webhook Secret's name.
    fn entries(&self, policy: &str) -> Vec<(SourceUrl, String)> {
        self.policies
            .state()
            .iter()
            .filter(|p| kube::ResourceExt::name_any(&***p) == policy)
            .flat_map(|p| p.spec.sources.clone())
            .filter_map(|s| {
                let hook = s.git.as_ref()?.webhook.as_ref()?;
                Some((SourceUrl::git(&s.url).ok()?.0, hook.secret_ref.name.clone()))
            })
            .collect()
    }
}

/// `POST /hooks/git/{policy}`: 202 with the number of repositories made due, 401 for anything
/// not signed by one of the policy's webhook secrets, 429 past the rates, 413 past the size.
pub(crate) async fn receive(
    State(hooks): State<GitHooks>,
    Path(policy): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_BODY {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    }
    let too_many = || (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "10")]).into_response();
    let refused = (StatusCode::UNAUTHORIZED, "not a push this receiver takes\n").into_response();
    let entries = hooks.entries(&policy);
    let Some(attempt) = hooks.windows.attempt(&policy, !entries.is_empty()) else {
        return too_many();
    };
    let names: BTreeSet<&String> = entries.iter().map(|(_, name)| name).collect();
    let mut held = Vec::new();
    for name in names {
        let key = hooks
            .keys
            .key(&*hooks.secrets, &hooks.operator_namespace, name)
            .await;
        if let Some(sender) = key.and_then(|key| verify(&headers, &body, &key)) {
            held.extend(
                entries
                    .iter()
                    .filter(|(_, n)| n == name)
                    .map(|(prefix, _)| (prefix.clone(), sender)),
            );
        }
    }
    if held.is_empty() {
        return refused;
    }
    if !hooks.windows.verified(attempt) {
        return too_many();
    }
    let due: Vec<SourceUrl> = repositories(&body)
        .into_iter()
        .filter(|repo| held.iter().any(|(prefix, _)| prefix.holds(repo)))
        .collect();
    let made = hooks.charts.make_due(&due);
    tracing::info!(%policy, sender = ?held[0].1, repositories = due.len(), sources = made, "a Git push hook made sources due");
    (StatusCode::ACCEPTED, format!("{made} sources due\n")).into_response()
}

#[cfg(test)]
mod tests;
